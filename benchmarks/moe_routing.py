"""Mixture-of-experts routing three ways: milliseconds per forward pass against the number of tokens.

    .venv/bin/python benchmarks/moe_routing.py [--device cuda] [--lengths T ...] [--json PATH]

A Mixtral-style layer (mistral-src's MoeLayer): logits = gate(x), the top K of E experts per token, their
weights the softmax over those K logits, out = sum_k weight_k * expert_k(x). Each expert is the Mistral/Llama
FeedForward w2(silu(w1 x) * w3 x). Defaults: E=8, K=2, D=256, d_ff=512, B=1, T = 64 .. 8192, float32.
The methods, on the same weights and input:
- loop: the homework's routing; per expert, torch.where finds its (b, t, k) and it runs on those tokens;
- sorted: the N*K (token, expert) pairs sorted by expert, each expert run once on its contiguous slice,
  the weighted rows added back with index_add_;
- dense: every expert on every token, weighted by an (N, E) matrix that is zero off the top-k (E/K times
  the expert FLOPs of the other two: what sparse routing saves).
All three are checked against the loop (assert_close, float32) before timing.

Time: torch.no_grad, one warm-up call, then rounds that call the methods in a rotating order (so drift in
the machine's load falls on all alike) with Python's garbage collector off, as timeit does; the median per
method. Rounds stop after --max-rounds, or once --min-rounds are done and --budget seconds are spent on this
T, so that large T does not take forever. CPU runs with the threads torch uses by default.

Faster: both sparse versions run the same expert matmuls; sorted replaces the loop's E torch.where, gathers
and scatters with one sort, one gather and one index_add_, a saving per call that can be smaller than the
machine's noise (two runs here gave loop/sorted 0.98 and 1.08 at one T). So a ratio of medians alone does
not decide. Each round times both within milliseconds, so drift in the load cancels in their comparison:
one method counts as faster at a T when it won so many of the rounds that a fair coin would do as well with
probability under 1% (a one-sided sign test), else neither does. The crossover is the smallest T from
which sorted is faster at that T and every larger one measured.
"""

import argparse
import gc
import json
import math
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

LENGTHS = [64 * 2**i for i in range(8)]  # 64 .. 8192
METHODS = ("loop", "sorted", "dense")
SIGNIFICANCE = 0.01  # of the sign test that calls one method faster (see the docstring)
RESULTS = Path(__file__).resolve().parent / "results"


@dataclass(frozen=True)
class Sizes:
    experts: int = 8  # E, experts in the layer
    top_k: int = 2  # K, experts each token is sent to
    dim: int = 256  # D, model width
    hidden: int = 512  # d_ff, each expert's hidden width
    batch: int = 1  # B, sequences per forward


class FeedForward(nn.Module):
    """One expert, SwiGLU: w2(silu(w1 x) * w3 x); (..., D) -> (..., D)."""

    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.w1 = nn.Linear(dim, hidden, bias=False)  # gate, through silu
        self.w3 = nn.Linear(dim, hidden, bias=False)  # up, multiplied by the gate
        self.w2 = nn.Linear(hidden, dim, bias=False)  # down

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class MoE(nn.Module):
    """The parameters of the layer: the router `gate` and the experts; the forward passes are functions."""

    def __init__(self, sizes: Sizes):
        super().__init__()
        self.top_k = sizes.top_k
        self.gate = nn.Linear(sizes.dim, sizes.experts, bias=False)
        self.experts = nn.ModuleList(FeedForward(sizes.dim, sizes.hidden) for _ in range(sizes.experts))


def route(moe: MoE, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-k on the logits, then softmax over the k (Mixtral's order, not top-k of a softmax over E).

    x (B, T, D) -> weights (B, T, K) summing to 1 per token, selected (B, T, K) expert ids.
    """
    values, selected = torch.topk(moe.gate(x), moe.top_k)  # (B, T, K) each
    return F.softmax(values, dim=-1, dtype=torch.float32).type_as(x), selected


def loop_forward(moe: MoE, x: torch.Tensor) -> torch.Tensor:
    """The homework's routing: one torch.where and one gather/scatter per expert; (B, T, D) -> (B, T, D)."""
    weights, selected = route(moe, x)
    out = torch.zeros_like(x)
    for i, expert in enumerate(moe.experts):
        b, t, k = torch.where(selected == i)  # top-k ids are distinct, so no (b, t) repeats here
        out[b, t] += weights[b, t, k, None] * expert(x[b, t])
    return out


def sorted_forward(moe: MoE, x: torch.Tensor) -> torch.Tensor:
    """Sorted dispatch, each expert run once on a contiguous slice; equals loop_forward.

    x (B, T, D) -> (B, T, D). Pairs are sorted stably, so each expert sees its tokens in token order.
    """
    B, T, D = x.shape
    weights, selected = route(moe, x)
    tokens = x.reshape(B * T, D)  # (N, D)
    expert_ids = selected.reshape(-1)  # (N*K,), pair j is token j // K's (j % K)-th choice
    order = torch.argsort(expert_ids, stable=True)  # (N*K,), pairs grouped by expert
    token_ids = order // moe.top_k  # (N*K,)
    # split needs the sizes on the host: on CUDA this is the one synchronisation of the forward
    counts = torch.bincount(expert_ids, minlength=len(moe.experts)).tolist()
    slices = tokens[token_ids].split(counts)  # E slices of (count_i, D)
    rows = torch.cat([expert(rows) for expert, rows in zip(moe.experts, slices, strict=True)])  # (N*K, D)
    rows = rows * weights.reshape(-1)[order, None]  # (N*K, D)
    return torch.zeros_like(tokens).index_add_(0, token_ids, rows).view(B, T, D)


def dense_forward(moe: MoE, x: torch.Tensor) -> torch.Tensor:
    """Every expert on every token, weight zero off the top-k; equals loop_forward.

    x (B, T, D) -> (B, T, D); E/K times the expert FLOPs of the sparse versions.
    """
    weights, selected = route(moe, x)
    gates = torch.zeros(*x.shape[:-1], len(moe.experts), dtype=x.dtype, device=x.device)
    gates.scatter_(-1, selected, weights)  # (B, T, E)
    outs = torch.stack([expert(x) for expert in moe.experts], dim=-1)  # (B, T, D, E)
    return torch.einsum("btde,bte->btd", outs, gates)


FORWARDS: dict[str, Callable[[MoE, torch.Tensor], torch.Tensor]] = {
    "loop": loop_forward,
    "sorted": sorted_forward,
    "dense": dense_forward,
}


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def seconds(forward: Callable[[MoE, torch.Tensor], torch.Tensor], moe: MoE, x: torch.Tensor) -> float:
    synchronize(x.device)
    start = time.perf_counter()
    forward(moe, x)
    synchronize(x.device)
    return time.perf_counter() - start


def check(moe: MoE, x: torch.Tensor) -> None:
    """All methods agree with the loop; float32's default tolerances of assert_close."""
    expected = loop_forward(moe, x)
    for name, forward in FORWARDS.items():
        torch.testing.assert_close(
            forward(moe, x), expected, msg=lambda m, n=name: f"{n} != loop at T={x.shape[1]}: {m}"
        )


def time_methods(moe: MoE, x: torch.Tensor, args) -> dict[str, list[float]]:
    """Seconds per call of each method, rotating order, time-boxed (see the module docstring)."""
    for forward in FORWARDS.values():  # warm-up
        forward(moe, x)
    times: dict[str, list[float]] = {name: [] for name in METHODS}
    gc.collect()
    gc.disable()
    start = time.perf_counter()
    for round_ in range(args.max_rounds):
        shift = round_ % len(METHODS)
        for name in METHODS[shift:] + METHODS[:shift]:
            times[name].append(seconds(FORWARDS[name], moe, x))
        if round_ + 1 >= args.min_rounds and time.perf_counter() - start > args.budget:
            break
    gc.enable()
    return times


def measure(sizes: Sizes, args) -> list[dict]:
    """One row per T: ms per forward of each method, loop/sorted and dense/sorted, tokens per second."""
    device = torch.device(args.device)
    torch.manual_seed(0)
    moe = MoE(sizes).to(device)
    generator = torch.Generator(device).manual_seed(0)
    rows = []
    with torch.no_grad():
        for T in args.lengths:
            x = torch.randn(sizes.batch, T, sizes.dim, device=device, generator=generator)
            check(moe, x)
            times = time_methods(moe, x, args)
            ms = {name: 1e3 * statistics.median(times[name]) for name in METHODS}
            sorted_won = sum(s < loop for s, loop in zip(times["sorted"], times["loop"], strict=True))
            rows.append(
                {
                    "T": T,
                    "ms": ms,
                    "loop/sorted": ms["loop"] / ms["sorted"],
                    "dense/sorted": ms["dense"] / ms["sorted"],
                    "tokens_per_s": {name: 1e3 * sizes.batch * T / ms[name] for name in METHODS},
                    "rounds": len(times["loop"]),
                    "sorted_won": sorted_won,
                    "faster": faster(sorted_won, len(times["loop"])),
                }
            )
            print(f"T={T}: " + ", ".join(f"{n} {ms[n]:.2f} ms" for n in METHODS), file=sys.stderr)
    return rows


def chance(wins: int, rounds: int) -> float:
    """P(at least `wins` heads in `rounds` tosses of a fair coin): the one-sided sign test."""
    return sum(math.comb(rounds, k) for k in range(wins, rounds + 1)) / 2**rounds


def faster(sorted_won: int, rounds: int) -> str:
    """Which of "sorted", "loop" won more of the paired rounds than chance explains, else "even"."""
    if chance(sorted_won, rounds) < SIGNIFICANCE:
        return "sorted"
    if chance(rounds - sorted_won, rounds) < SIGNIFICANCE:
        return "loop"
    return "even"


def crossover(rows: list[dict]) -> int | None:
    """The smallest T from which sorted is faster than loop at that T and every larger one."""
    first = None
    for row in sorted(rows, key=lambda row: row["T"]):
        if row["faster"] == "sorted":
            first = row["T"] if first is None else first
        else:
            first = None
    return first


def verdict(rows: list[dict]) -> str:
    """The T where each of sorted, loop, neither is faster, with the range of loop/sorted; dense's cost."""
    words = {"sorted": "sorted faster", "loop": "loop faster", "even": "no clear winner"}
    parts = []
    for outcome, word in words.items():
        here = [row for row in rows if row["faster"] == outcome]
        if here:
            ratios = [row["loop/sorted"] for row in here]
            lengths = ", ".join(str(row["T"]) for row in here)
            parts.append(f"{word} at T={lengths} (loop/sorted {min(ratios):.2f}-{max(ratios):.2f})")
    last = max(rows, key=lambda row: row["T"])
    return "; ".join(parts) + f"; dense costs {last['dense/sorted']:.1f}x sorted at T={last['T']}"


def cpu_name() -> str:
    """The CPU's model name: platform.processor() is often empty, or only "x86_64", on Linux."""
    cpuinfo = Path("/proc/cpuinfo")
    for line in cpuinfo.read_text().splitlines() if cpuinfo.exists() else []:
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def machine(device: torch.device) -> dict:
    record = {"torch": torch.__version__, "threads": torch.get_num_threads(), "cpu": cpu_name()}
    if device.type == "cuda":
        record["gpu"] = torch.cuda.get_device_name(device)
    return record


def print_table(rows: list[dict], sizes: Sizes, device: torch.device, info: dict) -> None:
    shape = f"E={sizes.experts}, K={sizes.top_k}, D={sizes.dim}, d_ff={sizes.hidden}, B={sizes.batch}"
    print(f"\n{shape}, float32")
    print(f"{device}: {info.get('gpu', info['cpu'])}; torch {info['torch']}, {info['threads']} threads")
    load = info["load_1min"]
    print(f"load average (1 min) before the run {load['before']:.2f}, after {load['after']:.2f}\n")
    print(
        "| T | loop ms | sorted ms | dense ms | loop/sorted | dense/sorted | sorted tokens/s | sorted won |"
    )
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for row in rows:
        ms = row["ms"]
        print(
            f"| {row['T']} | {ms['loop']:.3f} | {ms['sorted']:.3f} | {ms['dense']:.3f} "
            f"| {row['loop/sorted']:.2f} | {row['dense/sorted']:.2f} "
            f"| {row['tokens_per_s']['sorted']:,.0f} | {row['sorted_won']}/{row['rounds']} |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--lengths", type=int, nargs="+", default=LENGTHS, help="T, tokens per sequence")
    for field, default in asdict(Sizes()).items():
        parser.add_argument(f"--{field.replace('_', '-')}", type=int, default=default)
    parser.add_argument("--min-rounds", type=int, default=12)
    parser.add_argument("--max-rounds", type=int, default=40)
    parser.add_argument("--budget", type=float, default=10.0, help="seconds of timing per T, all methods")
    parser.add_argument("--json", type=Path, help="default: benchmarks/results/moe_routing_<device>.json")
    args = parser.parse_args()
    device = torch.device(args.device)
    sizes = Sizes(args.experts, args.top_k, args.dim, args.hidden, args.batch)

    load_before = os.getloadavg()[0]
    rows = measure(sizes, args)
    info = machine(device)
    # other work stalls torch's thread pool: repeat a run whose load after exceeds about its threads
    info["load_1min"] = {"before": load_before, "after": os.getloadavg()[0]}
    at = crossover(rows)
    print_table(rows, sizes, device, info)
    print(f"\ncrossover (sorted faster from this T on): {f'T={at}' if at is not None else 'none'}")
    print(f"verdict: {verdict(rows)}")

    path = args.json or RESULTS / f"moe_routing_{device.type}.json"
    record = {
        "config": {
            **asdict(sizes),
            "device": str(device),
            "dtype": "float32",
            "min_rounds": args.min_rounds,
            "max_rounds": args.max_rounds,
            "budget_s": args.budget,
        },
        "machine": info,
        "rows": rows,
        "significance": SIGNIFICANCE,
        "crossover_T": at,
        "verdict": verdict(rows),
    }
    path.write_text(json.dumps(record, indent=2) + "\n")
    print(f"saved {path}")


if __name__ == "__main__":
    main()
