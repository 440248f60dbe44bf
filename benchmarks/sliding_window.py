"""Sliding-window attention five ways: milliseconds and peak memory against the sequence length.

    .venv/bin/python benchmarks/sliding_window.py [--rounds N] [--device cuda] [--json PATH] [--plot PATH]

B=1, H=4, Dh=32, W=65 (centred window), T = 256, 512, ..., 16384, float32. The methods:
- loop: one query at a time over the keys of its window inside the sequence (written here);
- unfold: `window_attention`, the windows cut with unfold, einsum scores (B, H, T, W);
- dense: F.scaled_dot_product_attention with the (T, T) band mask `~sliding_window_mask`;
- blocked: `blocked_window_attention`, blocks of queries in one batched SDPA call;
- flex: torch's flex_attention (torch.compile'd) with a sliding-window BlockMask.
The three course functions are the reference of notebook 03 (`autograder.reference`), not
copies. Every method's output is checked against the dense SDPA's before timing (where the
dense call is skipped, against the blocked version's, which has been checked against it at
every shorter length and by the tests); a method
that raises (flex_attention where it cannot compile) is reported as failing in the table.

Time: the median of --rounds calls after one warm-up call, per method and T, with Python's
garbage collector off (as timeit does); each round calls the methods in a rotating order, so
that drift in the machine's load falls on all alike, and all ratios come from this one run.
The (T, T) mask of `dense` and the BlockMask of `flex` depend on T alone: a model builds them
once per forward and shares them across layers, so they are built before the timed call
(which favours those two); `blocked` and `unfold` build their small masks in every call.
Peak memory: the largest number of bytes live at once during one call, above what was live
before it (output, intermediates and kernels' scratch buffers), plus the prebuilt mask the
call reads (dense, flex). On CPU it is read from the profiler (`profile_memory=True`), which
records every allocation and free made through PyTorch's CPU allocator with its size and
time; the peak is the largest running sum of those events. (tracemalloc sees none of them,
and a dispatch mode would miss the scratch buffers that fused kernels allocate inside.) On
CUDA it is torch.cuda.max_memory_allocated above torch.cuda.memory_allocated before the call.
Slow or large methods are skipped (the table says which): the loop above --loop-max-t, the
dense SDPA where its (B, H, T, T) float32 scores (the math path's) would exceed --max-gib.
The exponents are least-squares slopes of log(time) and log(memory) against log(T), T >= 1024.
"""

import argparse
import gc
import json
import math
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.attention.flex_attention import create_block_mask, flex_attention
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from autograder.reference import namespace  # noqa: E402

B, H, DH, W = 1, 4, 32, 65
LENGTHS = [256 * 2**i for i in range(7)]  # 256 .. 16384
METHODS = ("loop", "unfold", "dense", "blocked", "flex")
FIT_FROM = 1024
MIB = 2**20

Attention = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


def loop_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Query t attends to keys t - W//2 .. t - W//2 + W - 1 that lie inside the sequence."""
    T = q.shape[2]
    out = torch.empty_like(q)
    for t in range(T):
        first, last = max(t - W // 2, 0), min(t - W // 2 + W, T)  # the window, cut at the ends
        scores = q[:, :, t : t + 1] @ k[:, :, first:last].transpose(-1, -2) / math.sqrt(DH)  # (B, H, 1, w)
        out[:, :, t : t + 1] = scores.softmax(dim=-1) @ v[:, :, first:last]  # (B, H, 1, Dh)
    return out


def methods(
    T: int, device: torch.device, args
) -> tuple[dict[str, Attention], dict[str, int], dict[str, str]]:
    """The methods that run at this T, the bytes of masks built beforehand, why the others do not."""
    ns = namespace("03_sliding_window")
    runs: dict[str, Attention] = {}
    held: dict[str, int] = {}
    skipped: dict[str, str] = {}
    if T <= args.loop_max_t:
        runs["loop"] = loop_attention
    else:
        skipped["loop"] = f"skip: T > {args.loop_max_t}"
    runs["unfold"] = lambda q, k, v: ns["window_attention"](q, k, v, W)
    if B * H * T * T * 4 <= args.max_gib * 2**30:
        band = ~ns["sliding_window_mask"](T, W).to(device)  # (T, T), True = may look
        runs["dense"] = lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=band)
        held["dense"] = band.numel()
    else:
        skipped["dense"] = f"skip: scores > {args.max_gib:g} GiB"
    runs["blocked"] = lambda q, k, v: ns["blocked_window_attention"](q, k, v, W)
    try:
        block_mask = create_block_mask(_in_window, None, None, T, T, device=device)
        held["flex"] = sum(t.numel() * t.element_size() for t in block_mask.as_tuple() if torch.is_tensor(t))
        runs["flex"] = lambda q, k, v: _flex(q, k, v, block_mask=block_mask)
    except Exception as error:  # reported in the table
        skipped["flex"] = f"fails: {type(error).__name__}"
        print(f"flex block mask at T={T} on {device}: {type(error).__name__}: {error}", file=sys.stderr)
    return runs, held, skipped


def _in_window(b, h, q_idx, kv_idx):
    offset = kv_idx - q_idx
    return (offset >= -(W // 2)) & (offset <= W - 1 - W // 2)


_flex = torch.compile(flex_attention, dynamic=False)


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def seconds(run: Attention, inputs, device: torch.device) -> float:
    synchronize(device)
    start = time.perf_counter()
    run(*inputs)
    synchronize(device)
    return time.perf_counter() - start


def peak_bytes(run: Attention, inputs, device: torch.device) -> int:
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
    parser.add_argument("--loop-max-t", type=int, default=16384)
    parser.add_argument("--max-gib", type=float, default=8.0)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--plot", type=Path)
    args = parser.parse_args()
    device = torch.device(args.device)
    generator = torch.Generator(device).manual_seed(0)

    ms: dict[str, dict[int, float]] = {m: {} for m in METHODS}
    mib: dict[str, dict[int, float]] = {m: {} for m in METHODS}
    notes: dict[str, dict[int, str]] = {m: {} for m in METHODS}
    for T in args.lengths:
        inputs = torch.randn(3, B, H, T, DH, device=device, generator=generator).unbind(0)  # q, k, v
        runs, held, skipped = methods(T, device, args)
        for name, reason in skipped.items():
            notes[name][T] = reason
        outputs = {}
        for name, run in list(runs.items()):  # the warm-up call, which compiles flex
            try:
                outputs[name] = run(*inputs)
            except Exception as error:  # a method that cannot run here is reported in the table
                notes[name][T] = f"fails: {type(error).__name__}"
                print(f"{name} at T={T} on {device}: {type(error).__name__}: {error}", file=sys.stderr)
                del runs[name]
        expected = outputs.get("dense", outputs.get("blocked"))  # the band-masked dense SDPA where it runs
        for name, out in outputs.items():
            torch.testing.assert_close(out, expected, atol=1e-5, rtol=0, msg=f"{name} at T={T}")
        del outputs, expected
        times: dict[str, list[float]] = {name: [] for name in runs}
        names = list(runs)
        gc.collect()  # compiling flex leaves a large heap: a collection inside a timed call costs 100s of ms
        gc.disable()  # as timeit does
        for round_ in range(args.rounds):
            shift = round_ % len(names)
            for name in names[shift:] + names[:shift]:
                times[name].append(seconds(runs[name], inputs, device))
        gc.enable()
        for name in names:
            ms[name][T] = 1e3 * statistics.median(times[name])
            mib[name][T] = (peak_bytes(runs[name], inputs, device) + held.get(name, 0)) / MIB
        print(f"T={T}: " + ", ".join(f"{n} {ms[n][T]:.2f} ms" for n in names), file=sys.stderr)

    def cell(table: dict[str, dict[int, float]], name: str, T: int, digits: int) -> str:
        return f"{table[name][T]:.{digits}f}" if T in table[name] else notes[name].get(T, "")

    print(f"\nB={B}, H={H}, Dh={DH}, W={W} centred, float32, {device}; median of {args.rounds} calls")
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads\n")
    header = " | ".join(f"{m} ms" for m in METHODS) + " | " + " | ".join(f"{m} MiB" for m in METHODS)
    print(f"| T | {header} |")
    print("| ---: |" + " ---: |" * (2 * len(METHODS)))
    for T in args.lengths:
        times_row = " | ".join(cell(ms, m, T, 2) for m in METHODS)
        memory_row = " | ".join(cell(mib, m, T, 1) for m in METHODS)
        print(f"| {T} | {times_row} | {memory_row} |")

    ratios = {}
    if 4096 in ms["blocked"]:
        blocked = ms["blocked"][4096]
        print("\nat T=4096, time of each against blocked (goals: unfold >= 5x, dense >= 10x, flex >= 1/1.5):")
        for other, goal in (("unfold", 5.0), ("dense", 10.0), ("flex", 1 / 1.5)):
            if 4096 in ms[other]:
                ratios[f"{other}/blocked"] = ms[other][4096] / blocked
                met = "met" if ratios[f"{other}/blocked"] >= goal else "MISSED"
                print(f"  {other} / blocked = {ratios[f'{other}/blocked']:.2f}x ({met})")
            else:
                print(f"  {other}: {notes[other].get(4096, 'not measured')}")

    exponents = {}
    print(f"\nexponents in T (log-log least squares, T >= {FIT_FROM}; goal: 1, linear):")
    for name in ("blocked", "unfold", "flex", "dense"):
        lengths = [T for T in args.lengths if T >= FIT_FROM and T in ms[name]]
        if len(lengths) >= 2:
            exponents[name] = {
                "time": fit(lengths, [ms[name][T] for T in lengths]),
                "memory": fit(lengths, [mib[name][T] for T in lengths]),
            }
            print(f"  {name}: time {exponents[name]['time']:.2f}, memory {exponents[name]['memory']:.2f}")

    if args.json:
        record = {
            "config": {"B": B, "H": H, "Dh": DH, "W": W, "device": str(device), "rounds": args.rounds},
            "torch": torch.__version__,
            "threads": torch.get_num_threads(),
            "ms": ms,
            "mib": mib,
            "skipped": notes,
            "ratios_at_4096": ratios,
            "exponents": exponents,
        }
        args.json.write_text(json.dumps(record, indent=2) + "\n")
    if args.plot:
        plot(args.plot, ms, mib, device)


def plot(path: Path, ms: dict[str, dict[int, float]], mib: dict[str, dict[int, float]], device) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    for name in METHODS:
        for axes, table in ((left, ms), (right, mib)):
            lengths = sorted(table[name])
            if lengths:
                axes.plot(lengths, [table[name][T] for T in lengths], "o-", label=name)
    left.set(xlabel="sequence length T", ylabel="time per call (ms)", title=f"time ({device})")
    right.set(xlabel="sequence length T", ylabel="peak memory (MiB)", title="peak memory")
    for axes in (left, right):
        axes.set_xscale("log", base=2)
        axes.set_yscale("log")
        axes.grid(True, which="both", alpha=0.3)
        axes.legend()
    figure.suptitle(f"sliding-window attention, B={B}, H={H}, Dh={DH}, W={W}")
    figure.tight_layout()
    figure.savefig(path, dpi=120)


if __name__ == "__main__":
    main()
