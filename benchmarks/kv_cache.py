"""The KV cache of notebook 09: time per generated token with and without it, and the bytes it holds.

    .venv/bin/python benchmarks/kv_cache.py [--device cuda] [--threads N] [--lengths t ...] [--json PATH]
                                           [--window W] [--sinks S] [--bytes-only]

The model: a small decoder built around the reference `CachedAttention` of notebook 09
(`autograder.reference`, not a copy): an embedding, N blocks (default 4) of
x + attention(rmsnorm(x)), then x + mlp(rmsnorm(x)) (torch.nn.RMSNorm; mlp = Linear(D, 4D), SiLU,
Linear(4D, D)), a final RMSNorm and a head to V logits. model(tokens (B, T), start_pos) -> (B, T, V), the
interface the notebook's `generate` assumes. Defaults: D=256, H=8 query heads, Hkv=2 key/value heads
(Dh=32), V=256, B=1, max_seq_len = the longest t + 1 (1025), float32, weights from torch.manual_seed(0).

Per token, at each position t (64 .. 1024), the same token's logits two ways:
- with cache: one decoding step, model(token t, start_pos=t), the cache holding the t tokens before it;
- without cache: model(tokens 0 .. t, start_pos=0), the prefill of the whole prefix of t + 1 tokens,
  which is what a model that keeps no cache does for every token it generates.
Before timing, at every t the two logits are compared (assert_close, float32's default tolerances), the
cache first filled by a prefill of the t tokens before it. A step at position t writes slot t and reads
slots 0 .. t only, so once the cache holds the whole sequence a step can be repeated at any t.

Time: torch.no_grad, one warm-up call of each (t, method), then rounds that each call every (t, method)
once, in an order rotated by one each round (so drift in the machine's load falls on all alike), with
Python's garbage collector off, as timeit does; the median per (t, method); ratios are ratios of medians
from this one run. Rounds stop after --max-rounds, or once --min-rounds are done and --budget seconds
are spent. Each timed call comes right after an untimed call of the same (t, method), as in decoding,
where steps follow steps: timed right after the prefill of 1025 tokens, whose (8, 1025, 1025) scores
flush the CPU's caches of the weights, the step at t = 64 took 4.6 ms against 2.9 ms at t = 128.
"Flat" is judged by the cached time at the longest t over the cached time at the shortest, and by the
log-log slope of cached time against t (0: flat, 1: linear): the step's projections and MLP cost the
same at every t, but its attention reads t cached keys and values (repeat_kv copies them H/Hkv times),
so the cached time grows with t, slowly; the numbers say how much.

Generation: the total time to generate --new-tokens tokens (default 512) greedily (argmax) from a
--prompt-token prompt (default 16): with the cache (prefill the prompt, then one step per token), and
without (each token from a prefill of everything so far). Both must produce the same tokens (reported).
One run of each by default (--generate-rounds), in rotating order; --new-tokens 0 skips it. A run that
passes --generate-budget seconds stops there and is reported unfinished, its time a lower bound (on an
idle 2-core CPU the run without cache takes about 15 s).

Cache bytes: for n_kv_heads in 1, 2, 4, 8 (H=8), a fresh model of the same sizes is built with a context
of --bytes-context (default 1024) positions; the bytes its layers' cache_k and cache_v hold (the sizes of
their storages, summed over the layers) must equal the notebook's reference kv_cache_bytes(...) (assert).
On CUDA the caches are then dropped and the fall of torch.cuda.memory_allocated must equal it too
(assert). The caching allocator rounds each block up to a multiple of 512 bytes and may hand out a larger
free block whole, so at other sizes this assert can fail for the allocator's sake; the defaults' blocks
(128 KiB to 1 MiB, multiples of 512 bytes) come from its small pool, split to the byte.

Rolling buffer: for each length t, the bytes of the N layers' caches three ways, as the reference
classes allocate them: Question 3's cache for t positions, notebook 09's RollingKVCache with a window of
--window (default 256) slots, and the same with --sinks (default 4) attention sinks besides; each must
equal kv_cache_bytes(...) at min(t, slots) positions (assert). A rolling buffer's bytes do not depend on
t: past its slots, the full cache holds t / slots times more. Bytes are the same on every device; the
RollingKVCache allocates on the CPU. --bytes-only prints the two bytes tables and puts them into the
existing JSON record, leaving its timings as they were measured.

CPU runs with the threads torch uses by default (--threads sets them; the notebook's imports cell sets
1 thread, which the benchmark undoes after loading the reference); the load average is recorded,
since other work stalls torch's thread pool: repeat a run whose load after exceeds about its threads. On
this 2-core machine with a load of 8, the cached step took 140-240 ms with 2 threads against 2.4-3.5 ms
with 1: each small operator waits at the pool's barrier for a thread the OS has put aside.

--device cuda builds the model on the GPU and synchronizes before and after every timed call; that path
has not been run (the course's machines have no GPU).
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
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from autograder.reference import namespace  # noqa: E402

LENGTHS = [64, 128, 256, 512, 1024]
KV_HEADS = (1, 2, 4, 8)
GOAL_T, GOAL_RATIO = 512, 5.0  # the issue: the cached step at least 5x faster at t = 512
FLAT_GROWTH = 2.0  # "flat": the cached time at the longest t under 2x the shortest's (t 16x longer)
PERIOD = 10_000.0
RESULTS = Path(__file__).resolve().parent / "results"


@dataclass(frozen=True)
class Sizes:
    layers: int = 4  # N, decoder blocks
    dim: int = 256  # D, model width
    heads: int = 8  # H, query heads
    kv_heads: int = 2  # Hkv, key/value heads
    vocab: int = 256  # V, vocabulary
    batch: int = 1  # B, sequences decoded at once


class Block(nn.Module):
    """x + attention(rmsnorm(x)), then x + mlp(rmsnorm(x)); (B, T, D) -> (B, T, D)."""

    def __init__(self, sizes: Sizes, kv_heads: int, max_seq_len: int):
        super().__init__()
        ns = namespace("09_kv_cache")
        head_dim = sizes.dim // sizes.heads
        rotation = ns["get_rotation_matrix"](head_dim, max_seq_len, PERIOD)  # (max_seq_len, Dh/2)
        self.norm1 = nn.RMSNorm(sizes.dim)
        self.attention = ns["CachedAttention"](
            sizes.dim, sizes.heads, kv_heads, sizes.batch, max_seq_len, rotation
        )
        self.norm2 = nn.RMSNorm(sizes.dim)
        self.mlp = nn.Sequential(
            nn.Linear(sizes.dim, 4 * sizes.dim), nn.SiLU(), nn.Linear(4 * sizes.dim, sizes.dim)
        )

    def forward(self, x: torch.Tensor, start_pos: int) -> torch.Tensor:
        x = x + self.attention(self.norm1(x), start_pos)
        return x + self.mlp(self.norm2(x))


class Decoder(nn.Module):
    """model(tokens (B, T), start_pos) -> logits (B, T, V), the tokens at start_pos .. start_pos + T - 1."""

    def __init__(self, sizes: Sizes, kv_heads: int, max_seq_len: int):
        super().__init__()
        self.embedding = nn.Embedding(sizes.vocab, sizes.dim)
        self.blocks = nn.ModuleList(Block(sizes, kv_heads, max_seq_len) for _ in range(sizes.layers))
        self.norm = nn.RMSNorm(sizes.dim)
        self.head = nn.Linear(sizes.dim, sizes.vocab, bias=False)

    def forward(self, tokens: torch.Tensor, start_pos: int) -> torch.Tensor:
        x = self.embedding(tokens)  # (B, T, D)
        for block in self.blocks:
            x = block(x, start_pos)
        return self.head(self.norm(x))  # (B, T, V)


def build(sizes: Sizes, kv_heads: int, max_seq_len: int, device: torch.device) -> Decoder:
    """The model with its weights, rotation tables and caches made on `device` (CachedAttention keeps
    its cache in plain attributes, which Module.to would not move)."""
    torch.manual_seed(0)
    with device:
        return Decoder(sizes, kv_heads, max_seq_len).eval()


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def seconds(call: Callable[[], object], device: torch.device) -> float:
    synchronize(device)
    start = time.perf_counter()
    call()
    synchronize(device)
    return time.perf_counter() - start


def check(model: Decoder, tokens: torch.Tensor, lengths: list[int]) -> None:
    """At each t the cached step's logits equal the last row of the prefill of t + 1 tokens."""
    for t in lengths:
        model(tokens[:, :t], 0)  # the cache now holds positions 0 .. t - 1
        cached = model(tokens[:, t : t + 1], t)[:, -1]  # (B, V)
        full = model(tokens[:, : t + 1], 0)[:, -1]  # (B, V)
        torch.testing.assert_close(cached, full, msg=lambda m, t=t: f"cached != prefill at t={t}: {m}")


def per_token(model: Decoder, tokens: torch.Tensor, args, device: torch.device) -> list[dict]:
    """ms for the token at each t with and without the cache (see the module docstring)."""
    model(tokens, 0)  # the cache holds every position of the one sequence
    calls: dict[tuple[int, str], Callable[[], object]] = {}
    for t in args.lengths:
        calls[t, "cached"] = lambda t=t: model(tokens[:, t : t + 1], t)
        calls[t, "uncached"] = lambda t=t: model(tokens[:, : t + 1], 0)
    for call in calls.values():  # warm-up
        call()
    keys = list(calls)
    times: dict[tuple[int, str], list[float]] = {key: [] for key in keys}
    gc.collect()
    gc.disable()
    start = time.perf_counter()
    for round_ in range(args.max_rounds):
        shift = round_ % len(keys)
        for key in keys[shift:] + keys[:shift]:
            calls[key]()  # untimed: the timed call finds the caches as the one before it left them
            times[key].append(seconds(calls[key], device))
        if round_ + 1 >= args.min_rounds and time.perf_counter() - start > args.budget:
            break
    gc.enable()
    rows = []
    for t in args.lengths:
        cached = 1e3 * statistics.median(times[t, "cached"])
        uncached = 1e3 * statistics.median(times[t, "uncached"])
        rounds = len(times[t, "cached"])
        rows.append(
            {
                "t": t,
                "ms_cached": cached,
                "ms_uncached": uncached,
                "ratio": uncached / cached,
                "rounds": rounds,
            }
        )
        print(f"t={t}: cached {cached:.2f} ms, uncached {uncached:.2f} ms", file=sys.stderr)
    return rows


def slope(xs: list[float], ys: list[float]) -> float:
    """Least-squares slope of log(y) against log(x): 0 is flat, 1 linear."""
    return statistics.linear_regression([math.log(x) for x in xs], [math.log(y) for y in ys]).slope


def flatness(rows: list[dict]) -> dict:
    first, last = rows[0], rows[-1]
    ts = [row["t"] for row in rows]
    growth = last["ms_cached"] / first["ms_cached"]
    return {
        "t_first": first["t"],
        "t_last": last["t"],
        "cached_growth": growth,
        "uncached_growth": last["ms_uncached"] / first["ms_uncached"],
        "cached_slope": slope(ts, [row["ms_cached"] for row in rows]),
        "uncached_slope": slope(ts, [row["ms_uncached"] for row in rows]),
        "flat": growth < FLAT_GROWTH,
    }


def greedy(
    model: Decoder, prompt: torch.Tensor, new_tokens: int, cached: bool, deadline: float = math.inf
) -> torch.Tensor:
    """prompt (B, P) -> (B, P + new_tokens), each next token the argmax of the logits; fewer new tokens
    if time.perf_counter() passes `deadline` first."""
    tokens = prompt
    logits = model(prompt, 0)[:, -1]  # (B, V)
    for step in range(new_tokens):
        next_token = logits.argmax(dim=-1, keepdim=True)  # (B, 1)
        tokens = torch.cat([tokens, next_token], dim=1)
        if step + 1 < new_tokens:
            if time.perf_counter() > deadline:
                break
            # with the cache only the new token, at its position; without, everything so far
            logits = model(next_token, tokens.shape[1] - 1)[:, -1] if cached else model(tokens, 0)[:, -1]
    return tokens


def generation(model: Decoder, prompt: torch.Tensor, args, device: torch.device) -> dict:
    """Seconds to generate args.new_tokens greedily with and without the cache (rotating order); a run
    stopped by --generate-budget is reported as unfinished, its time a lower bound."""
    names = ("cached", "uncached")
    outputs = {name: greedy(model, prompt, 4, name == "cached") for name in names}  # warm-up
    times: dict[str, list[float]] = {name: [] for name in names}
    finished = dict.fromkeys(names, True)
    gc.collect()
    gc.disable()
    for round_ in range(args.generate_rounds):
        shift = round_ % len(names)
        for name in names[shift:] + names[:shift]:
            synchronize(device)
            start = time.perf_counter()
            out = greedy(model, prompt, args.new_tokens, name == "cached", start + args.generate_budget)
            synchronize(device)
            times[name].append(time.perf_counter() - start)
            outputs[name] = out
            finished[name] &= out.shape[1] == prompt.shape[1] + args.new_tokens
    gc.enable()
    s = {name: statistics.median(times[name]) for name in names}
    common = min(out.shape[1] for out in outputs.values())
    same = torch.equal(outputs["cached"][:, :common], outputs["uncached"][:, :common])
    print(f"generation: cached {s['cached']:.2f} s, uncached {s['uncached']:.2f} s", file=sys.stderr)
    return {
        "prompt_tokens": prompt.shape[1],
        "new_tokens": args.new_tokens,
        "rounds": args.generate_rounds,
        "budget_s": args.generate_budget,
        "finished": finished,
        "tokens_made": {name: out.shape[1] - prompt.shape[1] for name, out in outputs.items()},
        "s_cached": s["cached"],
        "s_uncached": s["uncached"],
        "tokens_per_s_cached": args.new_tokens * prompt.shape[0] / s["cached"],
        "tokens_per_s_uncached": args.new_tokens * prompt.shape[0] / s["uncached"],
        "ratio": s["uncached"] / s["cached"],  # a lower bound where the uncached run did not finish
        "same_tokens": same,
        "tokens_compared": common - prompt.shape[1],
    }


def cache_storage_bytes(model: Decoder) -> int:
    """Bytes of the distinct storages behind the layers' cache_k and cache_v (what is allocated)."""
    storages = {}
    for block in model.blocks:
        for cache in (block.attention.cache_k, block.attention.cache_v):
            storage = cache.untyped_storage()
            storages[storage.data_ptr()] = storage.nbytes()
    return sum(storages.values())


def cache_bytes(sizes: Sizes, args, device: torch.device) -> list[dict]:
    """Per n_kv_heads: bytes the caches hold against the notebook's kv_cache_bytes (both asserted)."""
    formula = namespace("09_kv_cache")["kv_cache_bytes"]
    rows = []
    for kv_heads in KV_HEADS:
        model = build(sizes, kv_heads, args.bytes_context, device)
        allocated = cache_storage_bytes(model)
        dtype = model.blocks[0].attention.cache_k.dtype
        expected = formula(
            sizes.layers,
            sizes.batch,
            args.bytes_context,
            sizes.heads,
            kv_heads,
            sizes.dim // sizes.heads,
            torch.finfo(dtype).bits // 8,
        )
        assert allocated == expected, f"n_kv_heads={kv_heads}: caches hold {allocated} B, formula {expected}"
        row = {"n_kv_heads": kv_heads, "allocated_bytes": allocated, "formula_bytes": expected}
        if device.type == "cuda":
            synchronize(device)
            before = torch.cuda.memory_allocated(device)
            for block in model.blocks:  # the layer holds the only references: its blocks are freed
                block.attention.cache_k = block.attention.cache_v = None
            freed = before - torch.cuda.memory_allocated(device)
            assert freed == expected, f"n_kv_heads={kv_heads}: allocator freed {freed} B, formula {expected}"
            row["cuda_allocated_bytes"] = freed
        rows.append(row)
        del model
    return rows


def rolling_bytes(sizes: Sizes, args) -> list[dict]:
    """Per length t: the bytes of the layers' caches, full (t positions) and rolling (window, and window
    plus sinks, slots), each asserted equal to kv_cache_bytes at min(t, slots) positions."""
    names = namespace("09_kv_cache")
    formula, rolling = names["kv_cache_bytes"], names["RollingKVCache"]
    dh = sizes.dim // sizes.heads

    def expected(positions: int) -> int:
        return formula(sizes.layers, sizes.batch, positions, sizes.heads, sizes.kv_heads, dh, 4)

    def held(window: int, sinks: int) -> int:
        caches = [rolling(sizes.batch, sizes.kv_heads, dh, window, sinks) for _ in range(sizes.layers)]
        return sum(
            c.cache_k.untyped_storage().nbytes() + c.cache_v.untyped_storage().nbytes() for c in caches
        )

    rows = []
    for t in args.lengths:
        row = {
            "t": t,
            "full_bytes": cache_storage_bytes(build(sizes, sizes.kv_heads, t, torch.device("cpu"))),
        }
        row["rolling_bytes"] = held(args.window, 0)
        row["rolling_sinks_bytes"] = held(args.window, args.sinks)
        for key, positions in (
            ("full_bytes", t),
            ("rolling_bytes", min(t, args.window)),
            ("rolling_sinks_bytes", min(t, args.window + args.sinks)),
        ):
            # a rolling buffer allocates its slots whatever t: it equals the formula from t = slots on
            if key == "full_bytes" or t >= args.window + args.sinks:
                assert row[key] == expected(positions), (
                    f"t={t}, {key}: {row[key]} B, formula {expected(positions)}"
                )
        rows.append(row)
    return rows


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


def print_tables(record: dict) -> None:
    sizes, config, info = record["sizes"], record["config"], record["machine"]
    print(
        f"\nN={sizes['layers']} layers, D={sizes['dim']}, H={sizes['heads']}, Hkv={sizes['kv_heads']}, "
        f"V={sizes['vocab']}, B={sizes['batch']}, max_seq_len={config['max_seq_len']}, float32, "
        f"median of {record['per_token'][0]['rounds']} calls"
    )
    print(
        f"{config['device']}: {info.get('gpu', info['cpu'])}; "
        f"torch {info['torch']}, {info['threads']} threads"
    )
    load = info["load_1min"]
    print(f"load average (1 min) before the run {load['before']:.2f}, after {load['after']:.2f}\n")

    print("| position t | with cache, ms/token | without cache, ms/token | without / with |")
    print("| ---: | ---: | ---: | ---: |")
    for row in record["per_token"]:
        print(f"| {row['t']} | {row['ms_cached']:.3f} | {row['ms_uncached']:.2f} | {row['ratio']:.1f}x |")
    goal = record["goal"]
    if goal["ratio"] is not None:
        met = "met" if goal["met"] else "MISSED"
        print(
            f"\nat t={GOAL_T}: the cached step is {goal['ratio']:.1f}x faster "
            f"(goal >= {GOAL_RATIO:g}x: {met})"
        )
    flat = record["flatness"]
    span = f"t={flat['t_first']} to t={flat['t_last']}"
    print(
        f"from {span}: with cache x{flat['cached_growth']:.2f} (log-log slope {flat['cached_slope']:.2f}), "
        f"without x{flat['uncached_growth']:.1f} (slope {flat['uncached_slope']:.2f}); "
        f"flat (cached growth < {FLAT_GROWTH:g}x): {'yes' if flat['flat'] else 'NO'}"
    )

    gen = record["generation"]
    if gen is not None:
        print(f"\n| greedy, {gen['prompt_tokens']}-token prompt | {gen['new_tokens']} tokens, s | tokens/s |")
        print("| --- | ---: | ---: |")
        for name, label in (("cached", "with cache"), ("uncached", "without cache")):
            if gen["finished"][name]:
                print(f"| {label} | {gen[f's_{name}']:.2f} | {gen[f'tokens_per_s_{name}']:,.0f} |")
            else:
                made, spent = gen["tokens_made"][name], gen[f"s_{name}"]
                print(f"| {label} | > {spent:.1f} (stopped after {made} tokens) | < {made / spent:,.1f} |")
        bound = "" if all(gen["finished"].values()) else "at least "
        same = "yes" if gen["same_tokens"] else "NO"
        print(
            f"\nwithout / with: {bound}{gen['ratio']:.1f}x; the same {gen['tokens_compared']} tokens: {same}"
        )

    print_bytes(record)


def print_bytes(record: dict) -> None:
    sizes, config = record["sizes"], record["config"]
    context = config["bytes_context"]
    cuda = record["cache_bytes"] and "cuda_allocated_bytes" in record["cache_bytes"][0]
    print(
        f"\ncache of the {sizes['layers']}-layer model, H={sizes['heads']}, "
        f"Dh={sizes['dim'] // sizes['heads']}, B={sizes['batch']}, {context} positions, float32\n"
    )
    extra = " cuda memory_allocated, B |" if cuda else ""
    print(f"| n_kv_heads | cache_k + cache_v, B |{extra} kv_cache_bytes, B | MiB |")
    print("| ---: | ---: |" + (" ---: |" if cuda else "") + " ---: | ---: |")
    for row in record["cache_bytes"]:
        middle = f" {row['cuda_allocated_bytes']:,} |" if cuda else ""
        print(
            f"| {row['n_kv_heads']} | {row['allocated_bytes']:,} |{middle} {row['formula_bytes']:,} "
            f"| {row['allocated_bytes'] / 2**20:.2f} |"
        )

    rolling = record.get("rolling_bytes")
    if rolling:
        window, sinks = config["window"], config["sinks"]
        print(
            f"\ncache of the {sizes['layers']}-layer model, Hkv={sizes['kv_heads']}, "
            f"Dh={sizes['dim'] // sizes['heads']}, B={sizes['batch']}, float32: full, rolling (W={window}) "
            f"and rolling with {sinks} sinks\n"
        )
        print("| tokens t | full cache, KiB | rolling, KiB | rolling + sinks, KiB | full / rolling |")
        print("| ---: | ---: | ---: | ---: | ---: |")
        for row in rolling:
            kib = [row[key] / 2**10 for key in ("full_bytes", "rolling_bytes", "rolling_sinks_bytes")]
            ratio = row["full_bytes"] / row["rolling_bytes"]
            print(f"| {row['t']} | {kib[0]:,.0f} | {kib[1]:,.0f} | {kib[2]:,.0f} | {ratio:.2f}x |")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--lengths", type=int, nargs="+", default=LENGTHS, help="positions t of the token")
    for field, default in asdict(Sizes()).items():
        parser.add_argument(f"--{field.replace('_', '-')}", type=int, default=default)
    parser.add_argument("--threads", type=int, help="torch.set_num_threads (default: torch's own choice)")
    parser.add_argument("--min-rounds", type=int, default=10, help="timed calls per (t, method), at least")
    parser.add_argument("--max-rounds", type=int, default=30, help="timed calls per (t, method), at most")
    parser.add_argument("--budget", type=float, default=60.0, help="seconds of per-token timing, all t")
    parser.add_argument("--prompt-tokens", type=int, default=16)
    parser.add_argument("--new-tokens", type=int, default=512, help="0 skips the generation table")
    parser.add_argument("--generate-rounds", type=int, default=1)
    parser.add_argument(
        "--generate-budget", type=float, default=90.0, help="seconds per generation run, at most"
    )
    parser.add_argument(
        "--bytes-context", type=int, default=1024, help="positions of the bytes table's caches"
    )
    parser.add_argument("--window", type=int, default=256, help="slots of the rolling buffer's window")
    parser.add_argument("--sinks", type=int, default=4, help="attention sinks besides the window")
    parser.add_argument(
        "--bytes-only", action="store_true", help="the bytes tables only, into the existing JSON record"
    )
    parser.add_argument("--json", type=Path, help="default: benchmarks/results/kv_cache_<device>.json")
    args = parser.parse_args()
    device = torch.device(args.device)
    threads = args.threads or torch.get_num_threads()
    namespace("09_kv_cache")  # its imports cell calls torch.set_num_threads(1): undone here
    torch.set_num_threads(threads)
    sizes = Sizes(args.layers, args.dim, args.heads, args.kv_heads, args.vocab, args.batch)
    args.lengths = sorted(args.lengths)
    max_seq_len = max(args.lengths[-1] + 1, args.prompt_tokens + args.new_tokens)

    path = args.json or RESULTS / f"kv_cache_{device.type}.json"
    if args.bytes_only:
        record = json.loads(path.read_text())
        record["sizes"], record["config"]["bytes_context"] = asdict(sizes), args.bytes_context
        record["config"] |= {"window": args.window, "sinks": args.sinks}
        with torch.no_grad():
            record["cache_bytes"] = cache_bytes(sizes, args, device)
            record["rolling_bytes"] = rolling_bytes(sizes, args)
        print_bytes(record)
        path.write_text(json.dumps(record, indent=2) + "\n")
        print(f"\nsaved the bytes tables into {path}")
        return

    load_before = os.getloadavg()[0]
    start = time.perf_counter()
    with torch.no_grad():
        bytes_rows = cache_bytes(sizes, args, device)  # first: its asserts fail fast
        rolling_rows = rolling_bytes(sizes, args)
        model = build(sizes, sizes.kv_heads, max_seq_len, device)
        generator = torch.Generator().manual_seed(0)
        tokens = torch.randint(sizes.vocab, (sizes.batch, max_seq_len), generator=generator).to(device)
        check(model, tokens, args.lengths)
        rows = per_token(model, tokens, args, device)
        gen = generation(model, tokens[:, : args.prompt_tokens], args, device) if args.new_tokens else None
    info = machine(device)
    info["load_1min"] = {"before": load_before, "after": os.getloadavg()[0]}
    goal_row = next((row for row in rows if row["t"] == GOAL_T), None)
    record = {
        "config": {
            "device": str(device),
            "dtype": "float32",
            "max_seq_len": max_seq_len,
            "lengths": args.lengths,
            "min_rounds": args.min_rounds,
            "max_rounds": args.max_rounds,
            "budget_s": args.budget,
            "bytes_context": args.bytes_context,
            "window": args.window,
            "sinks": args.sinks,
        },
        "sizes": asdict(sizes),
        "machine": info,
        "per_token": rows,
        "goal": {
            "t": GOAL_T,
            "min_ratio": GOAL_RATIO,
            "ratio": goal_row["ratio"] if goal_row else None,
            "met": goal_row is not None and goal_row["ratio"] >= GOAL_RATIO,
        },
        "flatness": flatness(rows),
        "generation": gen,
        "cache_bytes": bytes_rows,
        "rolling_bytes": rolling_rows,
        "wall_s": time.perf_counter() - start,
    }
    print_tables(record)
    path.write_text(json.dumps(record, indent=2) + "\n")
    print(f"\n{record['wall_s']:.0f} s; saved {path}")


if __name__ == "__main__":
    main()
