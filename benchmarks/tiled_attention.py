"""Dense against tiled attention (notebook 11): milliseconds and peak memory against the length.

    .venv/bin/python benchmarks/tiled_attention.py [--rounds N] [--device cuda] [--json PATH]

B=1, H=4, Dh=64, float32, non-causal, T = 256, 512, ..., 8192. The methods:
- dense: softmax(q k^T / sqrt(Dh)) v written out, the (B, H, T, T) scores and weights stored;
- tiled: `tiled_attention`, the reference of notebook 11 (`autograder.reference`, not a copy), with
  blocks of --block-size (128) queries and keys: a Python loop over (T / b)^2 tiles;
- sdpa: F.scaled_dot_product_attention, PyTorch's fused kernel (on CPU a tiled flash-attention kernel
  in C++; on CUDA FlashAttention or memory-efficient attention): the same idea without Python.
Each method's output is checked against sdpa's before timing.

Time: the median of --rounds calls after one warm-up call, per method and T, with the garbage
collector off; each round calls the methods in a rotating order, so that drift in the machine's load
falls on all alike, and every ratio comes from this one run. Peak memory: the largest number of bytes
live at once during one call above what was live before it (output, intermediates, scratch buffers).
On CPU it is read from the profiler (`profile_memory=True`: every allocation and free made through
PyTorch's CPU allocator, with its size and time); on CUDA it is torch.cuda.max_memory_allocated above
torch.cuda.memory_allocated before the call. The --device cuda path is written but has not been run:
no GPU was available when this script was written. Dense is skipped where its scores and weights would
exceed --max-gib. Exponents are least-squares slopes of log(time) and log(memory) against log(T), over
T >= 1024.
"""

import argparse
import gc
import json
import math
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from autograder.reference import namespace  # noqa: E402

B, H, DH = 1, 4, 64
LENGTHS = [256 * 2**i for i in range(6)]  # 256 .. 8192
METHODS = ("dense", "tiled", "sdpa")
FIT_FROM = 1024
MIB = 2**20


def dense_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])  # (B, H, T, T)
    return torch.softmax(scores, dim=-1) @ v


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def seconds(run, inputs, device: torch.device) -> float:
    synchronize(device)
    start = time.perf_counter()
    run(*inputs)
    synchronize(device)
    return time.perf_counter() - start


def peak_bytes(run, inputs, device: torch.device) -> int:
    """Bytes live at once during the call, above those live before it (see the docstring)."""
    if device.type == "cuda":
        synchronize(device)
        before = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        out = run(*inputs)
        synchronize(device)
        del out
        return torch.cuda.max_memory_allocated(device) - before
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        out = run(*inputs)
    del out
    events = sorted(
        (e.start_ns(), e.nbytes()) for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"
    )
    live = peak = 0
    for _, nbytes in events:
        live += nbytes
        peak = max(peak, live)
    return peak


def fit(lengths: list[int], values: list[float]) -> float:
    """Slope of log(value) against log(T): 1 is linear, 2 quadratic."""
    return statistics.linear_regression([math.log(t) for t in lengths], [math.log(x) for x in values]).slope


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--lengths", type=int, nargs="*", default=LENGTHS)
    parser.add_argument("--block-size", type=int, default=128)
    parser.add_argument("--max-gib", type=float, default=4.0)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    device = torch.device(args.device)
    generator = torch.Generator(device).manual_seed(0)
    tiled = namespace("11_tiled_attention")["tiled_attention"]
    runs = {
        "dense": dense_attention,
        "tiled": lambda q, k, v: tiled(q, k, v, args.block_size),
        "sdpa": F.scaled_dot_product_attention,
    }

    ms: dict[str, dict[int, float]] = {m: {} for m in METHODS}
    mib: dict[str, dict[int, float]] = {m: {} for m in METHODS}
    skipped: dict[str, dict[int, str]] = {m: {} for m in METHODS}
    with torch.inference_mode():
        for T in args.lengths:
            inputs = torch.randn(3, B, H, T, DH, device=device, generator=generator).unbind(0)  # q, k, v
            names = list(METHODS)
            if 2 * B * H * T * T * 4 > args.max_gib * 2**30:  # the scores and their softmax
                names.remove("dense")
                skipped["dense"][T] = f"skip: scores > {args.max_gib:g} GiB"
            expected = runs["sdpa"](*inputs)
            for name in names:  # also the warm-up call
                torch.testing.assert_close(runs[name](*inputs), expected, atol=1e-5, rtol=1e-4, msg=name)
            del expected
            times: dict[str, list[float]] = {name: [] for name in names}
            gc.collect()
            gc.disable()  # as timeit does
            for round_ in range(args.rounds):
                shift = round_ % len(names)
                for name in names[shift:] + names[:shift]:
                    times[name].append(seconds(runs[name], inputs, device))
            gc.enable()
            for name in names:
                ms[name][T] = 1e3 * statistics.median(times[name])
                mib[name][T] = peak_bytes(runs[name], inputs, device) / MIB
            print(f"T={T}: " + ", ".join(f"{n} {ms[n][T]:.1f} ms" for n in names), file=sys.stderr)

    def cell(table: dict[str, dict[int, float]], name: str, T: int, digits: int) -> str:
        return f"{table[name][T]:.{digits}f}" if T in table[name] else skipped[name].get(T, "")

    def ratio(a: dict[int, float], b: dict[int, float], T: int) -> str:
        return f"{a[T] / b[T]:.2f}" if T in a and T in b else ""

    print(f"\nB={B}, H={H}, Dh={DH}, non-causal, float32, {device}; tiled block_size {args.block_size}")
    print(f"median of {args.rounds} calls; torch {torch.__version__}, {torch.get_num_threads()} threads\n")
    print(
        "| T | dense ms | tiled ms | sdpa ms | dense MiB | tiled MiB | sdpa MiB "
        "| tiled / dense time | dense / tiled memory |"
    )
    print("| ---: |" + " ---: |" * 8)
    for T in args.lengths:
        times_row = " | ".join(cell(ms, m, T, 1) for m in METHODS)
        memory_row = " | ".join(cell(mib, m, T, 1) for m in METHODS)
        ratios = f"{ratio(ms['tiled'], ms['dense'], T)} | {ratio(mib['dense'], mib['tiled'], T)}"
        print(f"| {T} | {times_row} | {memory_row} | {ratios} |")

    exponents = {}
    print(f"\nexponents in T (log-log least squares, T >= {FIT_FROM}):")
    for name in METHODS:
        lengths = [T for T in args.lengths if T >= FIT_FROM and T in ms[name]]
        if len(lengths) >= 2:
            exponents[name] = {
                "time": fit(lengths, [ms[name][T] for T in lengths]),
                "memory": fit(lengths, [mib[name][T] for T in lengths]),
            }
            print(f"  {name}: time {exponents[name]['time']:.2f}, memory {exponents[name]['memory']:.2f}")

    if args.json:
        record = {
            "config": {"B": B, "H": H, "Dh": DH, "block_size": args.block_size, "device": str(device)},
            "rounds": args.rounds,
            "torch": torch.__version__,
            "threads": torch.get_num_threads(),
            "ms": ms,
            "mib": mib,
            "skipped": skipped,
            "exponents": exponents,
        }
        args.json.write_text(json.dumps(record, indent=2) + "\n")


if __name__ == "__main__":
    main()
