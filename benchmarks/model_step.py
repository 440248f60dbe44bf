"""One training step of notebook 08's model at two sizes: tokens per second, and where the time goes.

    .venv/bin/python benchmarks/model_step.py [--device cuda] [--rounds N] [--json PATH]

The model: the reference Transformer of notebook 08 (`autograder.reference`, not a copy) made causal with
`autograder.language_model.make_causal`, float32, at two sizes:
- course: COURSE_MODEL, the course's checkpoint (D=64, 2 blocks, d_ff=128, 4 experts, top 2);
- large: D=128, 4 blocks, d_ff=256, 8 experts (15x the parameters, 8x the active ones per token).
Each step is the one `autograder.language_model.train` takes: forward, cross-entropy, zero_grad, backward,
gradient clipping to norm 1, AdamW (lr 3e-3, weight decay 0.01; no schedule), on a batch of 32 windows of
64 characters of `course_text`, a new batch every step.

Time: both models are built and warmed up (--warmup steps each), then rounds that step each model once in a
rotating order (so drift in the machine's load falls on both alike), with Python's garbage collector off, as
timeit does; tokens/s = B * T / (seconds per step), the median over the rounds and its quartiles. The
weights keep training meanwhile, so the routing, and with it each expert's share of the tokens, drifts as
it would in a real run. CPU runs with the threads torch uses by default; the load average is recorded, since
other work stalls torch's thread pool: on 2 cores one other busy process made steps up to 10x slower, with
wide quartiles and a profiled ms/step far above the unprofiled one. Repeat such a run.

Where the time goes: --profile-steps more steps per model under torch.profiler, the model's parts labelled
by module hooks (record_function). Each operator's self time goes to the part whose label encloses it; a
backward operator goes to the part of the forward operator that created its autograd node (both carry the
node's sequence number). Parts: attention (qkv, RoPE, the mask, SDPA, out projection); the MoE, split into
its router (gate, top-k, softmax) and the expert loop, itself split into the experts' FFNs (matmuls, silu)
and the dispatch around them (torch.where, gathers, scatter-adds, the Python loop); the two RMSNorms;
embedding, head and loss; the optimizer (clipping, AdamW, zero_grad); other (residual adds, the autograd
engine's own work, gradient accumulation, Python between the parts). Shares are of the self CPU time of the
profiled steps; the profiler adds a fixed cost per operator, which inflates parts of many small operators
(the dispatch) against parts of few large ones (the FFNs): the profiled ms per step is printed beside the
unprofiled one to show how much.

--device cuda times with torch.cuda.synchronize and takes shares of the kernels' device time (each kernel
counted for the operator that launched it); this path has not been run (the course's machines have no GPU).
"""

import argparse
import gc
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile, record_function

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from autograder.language_model import (  # noqa: E402
    COURSE_MODEL,
    RECIPE,
    TEXT_SEED,
    batches,
    course_text,
    encode,
    make_causal,
)
from autograder.reference import namespace  # noqa: E402

SIZES = {
    "course": COURSE_MODEL,
    "large": {**COURSE_MODEL, "hidden_size": 128, "n_blocks": 4, "d_ff": 256, "num_experts": 8},
}
BATCH, LENGTH = RECIPE["batch_size"], RECIPE["length"]  # 32 x 64, as the course's model trains
TEXT_CHARS = 50_000
RESULTS = Path(__file__).resolve().parent / "results"

# The parts, in the table's order; "MoE" and "expert loop" are sums of the rows below them.
PARTS = (
    "attention",
    "MoE router",
    "MoE expert FFNs",
    "MoE dispatch",
    "norms",
    "embedding, head, loss",
    "optimizer",
    "other",
)
SUMS = {
    "MoE": ("MoE router", "MoE expert FFNs", "MoE dispatch"),
    "expert loop": ("MoE expert FFNs", "MoE dispatch"),
}
ROUTER_OPS = {"aten::topk", "aten::softmax"}  # called in MoeLayer.forward itself, outside the gate module
BACKWARD_NODE = "autograd::engine::evaluate_function: "


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class Trainer:
    """One model, its AdamW, and the batches it steps through (a new one each step, round robin)."""

    def __init__(self, config: dict, tokens: torch.Tensor, n_batches: int, device: torch.device):
        torch.manual_seed(0)
        transformer = namespace("08_transformer")["Transformer"]
        self.model = make_causal(transformer(**config)).to(device).train()
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=RECIPE["lr"], weight_decay=0.01)
        generator = torch.Generator().manual_seed(RECIPE["seed"])
        self.batches = [
            tuple(t.to(device) for t in batches(tokens, BATCH, LENGTH, generator)) for _ in range(n_batches)
        ]
        self.count = 0

    def step(self) -> None:
        """The step of `train`: forward, cross-entropy, backward, clipping, AdamW."""
        inputs, targets = self.batches[self.count % len(self.batches)]
        self.count += 1
        logits = self.model(inputs)  # (B, T, V)
        with record_function("loss"):
            loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten())
        with record_function("optimizer"):
            self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        with record_function("optimizer"):
            nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
            self.optimizer.step()

    def seconds(self, device: torch.device) -> float:
        synchronize(device)
        start = time.perf_counter()
        self.step()
        synchronize(device)
        return time.perf_counter() - start


def time_steps(trainers: dict[str, Trainer], device: torch.device, args) -> dict[str, list[float]]:
    """Seconds per step of each model, in rotating order (see the module docstring)."""
    for trainer in trainers.values():
        for _ in range(args.warmup):
            trainer.step()
    names = list(trainers)
    times: dict[str, list[float]] = {name: [] for name in names}
    gc.collect()
    gc.disable()
    for round_ in range(args.rounds):
        shift = round_ % len(names)
        for name in names[shift:] + names[:shift]:
            times[name].append(trainers[name].seconds(device))
    gc.enable()
    return times


def label_parts(model: nn.Module) -> list:
    """Forward hooks that wrap each part's forward in a record_function named after the part."""
    labels: dict[nn.Module, str] = {model.embedding: "embedding", model.out: "head"}
    for block in model.blocks:
        labels |= {block.norm1: "norms", block.norm2: "norms", block.attention: "attention"}
        labels |= {block.moe: "moe", block.moe.gate: "MoE router"}
        labels |= {expert: "MoE expert FFNs" for expert in block.moe.experts}
    open_ranges: list[record_function] = []  # a stack: the gate and the experts run inside the MoE

    def enter(module: nn.Module, inputs) -> None:
        open_ranges.append(record_function(labels[module]))
        open_ranges[-1].__enter__()

    def leave(module: nn.Module, inputs, output) -> None:
        open_ranges.pop().__exit__(None, None, None)

    handles = []
    for module in labels:
        handles += [module.register_forward_pre_hook(enter), module.register_forward_hook(leave)]
    return handles


LABEL_PARTS = {
    "attention": "attention",
    "MoE router": "MoE router",
    "MoE expert FFNs": "MoE expert FFNs",
    "norms": "norms",
    "embedding": "embedding, head, loss",
    "head": "embedding, head, loss",
    "loss": "embedding, head, loss",
    "optimizer": "optimizer",
}


def forward_part(event) -> str | None:
    """The part of the innermost label around a forward event (or the label itself); None outside them.

    In the MoE's own range, top-k and softmax are the router's, the rest (torch.where, gathers, scatters,
    and the label's self time, which is the Python loop) the dispatch's."""
    below, node = None, event
    while node is not None:
        if node.name == "moe":
            return "MoE router" if below is not None and below.name in ROUTER_OPS else "MoE dispatch"
        if node.name in LABEL_PARTS:
            return LABEL_PARTS[node.name]
        if node.name.startswith(BACKWARD_NODE):
            return None
        below, node = node, node.cpu_parent
    return None


def backward_node(event):
    """The autograd node evaluation (evaluate_function event) that encloses a backward event, or None."""
    node = event
    while node is not None and not node.name.startswith(BACKWARD_NODE):
        node = node.cpu_parent
    return node


def shares(trainer: Trainer, device: torch.device, steps: int) -> dict:
    """Profiled time of each part, forward and backward (see the module docstring), and ms per step."""
    handles = label_parts(trainer.model)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=activities) as prof:
        synchronize(device)
        start = time.perf_counter()
        for _ in range(steps):
            with record_function("step"):  # its self time: Python between the parts, counted as other
                trainer.step()
        synchronize(device)
        profiled_ms = 1e3 * (time.perf_counter() - start) / steps  # before the profiler collects its events
    for handle in handles:
        handle.remove()

    def metric(event) -> float:
        return event.self_device_time_total if device.type == "cuda" else event.self_cpu_time_total

    # Only CPU events: on CUDA, each kernel's time is counted on the CPU operator that launched it.
    events = [e for e in prof.events() if e.device_type == DeviceType.CPU]
    # The operator that created node n is the last to start with sequence number n (one that creates
    # none records the next node's number before the creator starts; see the profiler's RecordFunction).
    creators: dict[int, str] = {}
    for event in sorted(events, key=lambda e: e.time_range.start):
        if event.sequence_nr >= 0 and backward_node(event) is None:
            part = forward_part(event)
            creators[event.sequence_nr] = part if part is not None else "other"
    forward = dict.fromkeys(PARTS, 0.0)
    backward = dict.fromkeys(PARTS, 0.0)
    for event in events:
        node = backward_node(event)
        if node is None:
            forward[forward_part(event) or "other"] += metric(event)
        else:
            backward[creators.get(node.sequence_nr, "other")] += metric(event)
    total = sum(forward.values()) + sum(backward.values())
    return {
        "profiled_ms_per_step": profiled_ms,
        "share_percent": with_sums({p: 100 * (forward[p] + backward[p]) / total for p in PARTS}),
        "backward_share_percent": with_sums({p: 100 * backward[p] / total for p in PARTS}),
        "part_ms_per_step": {p: (forward[p] + backward[p]) / 1e3 / steps for p in PARTS},
    }


def with_sums(table: dict[str, float]) -> dict[str, float]:
    """The table and the rows that add up parts (SUMS)."""
    return {**table, **{name: sum(table[p] for p in parts) for name, parts in SUMS.items()}}


def summary(seconds: list[float], tokens: int) -> dict:
    rates = sorted(tokens / s for s in seconds)
    q1, _, q3 = statistics.quantiles(rates, n=4)
    return {
        "tokens_per_s": statistics.median(rates),
        "tokens_per_s_quartiles": [q1, q3],
        "tokens_per_s_range": [rates[0], rates[-1]],
        "ms_per_step": 1e3 * statistics.median(seconds),
        "steps": len(seconds),
    }


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


def print_tables(rows: dict[str, dict], ratio: dict, device: torch.device, info: dict, args) -> None:
    names = list(rows)
    print(f"\nbatch {BATCH} x {LENGTH} tokens, float32, AdamW; median of {args.rounds} steps per model")
    print(f"{device}: {info.get('gpu', info['cpu'])}; torch {info['torch']}, {info['threads']} threads")
    load = info["load_1min"]
    print(f"load average (1 min) before the run {load['before']:.2f}, after {load['after']:.2f}\n")
    print("| model | parameters | active | tokens/s | quartiles | ms/step | profiled ms/step |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name, row in rows.items():
        q1, q3 = row["tokens_per_s_quartiles"]
        print(
            f"| {name} | {row['parameters']:,} | {row['active_parameters']:,} | {row['tokens_per_s']:,.0f} "
            f"| {q1:,.0f}-{q3:,.0f} | {row['ms_per_step']:.1f} | {row['profiled_ms_per_step']:.1f} |"
        )
    what = "device time of the kernels" if device.type == "cuda" else "self CPU time"
    print(f"\nshare of the step's {what} (profiled, {args.profile_steps} steps each), % (of it backward)\n")
    print("| part | " + " | ".join(names) + " |")
    print("| --- |" + " ---: |" * len(names))
    order = ["attention", "MoE", "MoE router", "expert loop", "MoE expert FFNs", "MoE dispatch"]
    order += [p for p in PARTS if p not in order]
    indent = {"MoE router": 1, "expert loop": 1, "MoE expert FFNs": 2, "MoE dispatch": 2}
    for part in order:
        cells = [
            f"{rows[n]['share_percent'][part]:.1f} ({rows[n]['backward_share_percent'][part]:.1f})"
            for n in names
        ]
        print(f"| {'  ' * indent.get(part, 0)}{part} | " + " | ".join(cells) + " |")
    first, last = names[0], names[-1]
    q1, q3 = ratio["quartiles"]
    print(
        f"\n{last}/{first}: {ratio['median']:.2f}x the time per step, so as many times fewer tokens/s "
        f"(median of the rounds' ratios, quartiles {q1:.2f}-{q3:.2f}), for "
        f"{rows[last]['active_parameters'] / rows[first]['active_parameters']:.2f}x the active parameters"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--rounds", type=int, default=40, help="timed steps per model, at least 2")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps per model first")
    parser.add_argument("--profile-steps", type=int, default=10, help="profiled steps per model")
    parser.add_argument("--json", type=Path, help="default: benchmarks/results/model_step_<device>.json")
    args = parser.parse_args()
    device = torch.device(args.device)

    load_before = os.getloadavg()[0]
    tokens = encode(course_text(TEXT_CHARS, TEXT_SEED))
    n_batches = args.warmup + args.rounds + args.profile_steps
    trainers = {name: Trainer(config, tokens, n_batches, device) for name, config in SIZES.items()}
    times = time_steps(trainers, device, args)
    count = namespace("08_transformer")["transformer_parameters"]
    rows = {}
    for name, trainer in trainers.items():
        total, active = count(**SIZES[name])
        rows[name] = {
            "config": SIZES[name],
            "parameters": total,
            "active_parameters": active,
            **summary(times[name], BATCH * LENGTH),
            **shares(trainer, device, args.profile_steps),
        }
        print(f"{name}: {rows[name]['ms_per_step']:.1f} ms per step", file=sys.stderr)
    # each round steps the two models back to back, so drift in the load mostly cancels in their ratio
    ratios = [large / course for course, large in zip(times["course"], times["large"], strict=True)]
    q1, _, q3 = statistics.quantiles(ratios, n=4)
    ratio = {"median": statistics.median(ratios), "quartiles": [q1, q3]}
    info = machine(device)
    info["load_1min"] = {"before": load_before, "after": os.getloadavg()[0]}
    print_tables(rows, ratio, device, info, args)

    path = args.json or RESULTS / f"model_step_{device.type}.json"
    record = {
        "config": {
            "device": str(device),
            "dtype": "float32",
            "batch": BATCH,
            "length": LENGTH,
            "rounds": args.rounds,
            "warmup": args.warmup,
            "profile_steps": args.profile_steps,
        },
        "machine": info,
        "models": rows,
        "large/course_time_per_step": ratio,
    }
    path.write_text(json.dumps(record, indent=2) + "\n")
    print(f"saved {path}")


if __name__ == "__main__":
    main()
