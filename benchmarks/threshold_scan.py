"""Held-out accuracy of 00.spirals over many seeds: correct answers, and wrong ones the threshold must fail.

    .venv/bin/python benchmarks/threshold_scan.py [--seeds N] [--answers NAME ...] [--label L]
    .venv/bin/python benchmarks/threshold_scan.py --report

For each seed 0 .. N-1, the hidden cases the grader draws for that seed are run by each answer
as the grader runs them (`run_stage`, one torch thread), and the judge's own accuracy is taken
of the trained model and of the untrained one, on the held-out points:
- correct answers: the reference and the alternatives of solutions/00_warmup/alternatives.py. Their lowest
  trained accuracy must clear warmup.THRESHOLD with margin, and their highest untrained accuracy
  must stay under it (the judge fails a model that classifies before any training);
- wrong answers: the catalogued mistakes whose verdict rests on the threshold (no activation: a
  linear map; no optimizer.step(): the untrained model) and a loop that never zeroes the
  gradients (not catalogued, see mistakes.py). Their highest accuracy must stay under it.

Every value goes to benchmarks/results/threshold_scan_spirals[-L].json (one file per --label, so
that scans of different answers can run side by side), written every 25 seeds and read back on
start: a scan stopped midway resumes where it stopped, and one of a changed case starts afresh.
Per answer it prints the minimum, the 0.1 % and 1 % quantiles and the maximum of each accuracy;
--report prints them from every file. One training takes about 0.2 s of an idle core: 1000 seeds
(2 hidden cases each) of one answer about 7 minutes.
"""

import argparse
import json
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from autograder.api import make_cases  # noqa: E402
from autograder.checks import CHECKS  # noqa: E402
from autograder.checks.warmup import THRESHOLD, held_out_accuracies  # noqa: E402
from autograder.core import run_stage  # noqa: E402
from autograder.reference import (  # noqa: E402
    instructor_module,  # noqa: E402
    mistakes,
    reference_object,
)
from tests.helpers.alternatives import ALTERNATIVES  # noqa: E402

NAME = "00.spirals"
RESULTS = Path(__file__).resolve().parent / "results"
SAVE_EVERY = 25  # seeds


def train_without_zero_grad(model, x, y, steps, lr):
    """Gradients pile up from step to step: Adam follows their running sum."""
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    losses = []
    for _ in range(steps):
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def answers() -> dict[str, tuple]:
    """name -> (MLP, train): the correct answers, then the wrong ones (named "wrong: ...")."""
    found = {"reference": reference_object(NAME, CHECKS[NAME].target)}
    found |= {answer.__name__: tuple(answer) for answer in ALTERNATIVES[NAME]}
    catalogued = mistakes(NAME)
    return found | {
        "wrong: no activation": next(m.impl for m in catalogued if "no activation" in m.name),
        "wrong: no optimizer.step()": next(m.impl for m in catalogued if "never called" in m.name),
        "wrong: no zero_grad": (found["reference"][0], train_without_zero_grad),
    }


def accuracies(answer: tuple, seed: int) -> list[tuple[float, float]]:
    """(trained, untrained) held-out accuracy on each hidden case of `seed`."""
    cases = make_cases(NAME, hidden=True, seed=seed)
    results = run_stage(CHECKS[NAME], answer, cases)
    return [held_out_accuracies(case, result) for case, result in zip(cases, results, strict=True)]


def quantile(values: list[float], q: float) -> float:
    return float(torch.tensor(values, dtype=torch.float64).quantile(q))


def summary(values: list[float]) -> str:
    if not values:
        return "no values"
    return (
        f"min {min(values):.3f}, 0.1% {quantile(values, 0.001):.3f}, 1% {quantile(values, 0.01):.3f}, "
        f"max {max(values):.3f} ({len(values)} cases)"
    )


def results_file(label: str) -> Path:
    return RESULTS / f"threshold_scan_spirals{'-' + label if label else ''}.json"


def load(path: Path, settings: dict) -> dict:
    """The values of an earlier scan of the same case, to go on from; none if the case changed."""
    if path.exists():
        saved = json.loads(path.read_text())
        if saved["settings"] == settings:
            return saved
    return {"settings": settings, "seconds": 0.0, "answers": {}}


def report(settings: dict) -> None:
    print(f"00.spirals, {settings}; threshold {THRESHOLD}")
    for path in sorted(RESULTS.glob("threshold_scan_spirals*.json")):
        scan = json.loads(path.read_text())
        if scan["settings"] != settings:
            print(f"{path.name}: a scan of another case, left out")
            continue
        for name, per_seed in scan["answers"].items():
            values = [pair for seed in sorted(per_seed, key=int) for pair in per_seed[seed]]
            print(f"{name} ({len(per_seed)} seeds, {path.name})")
            print(f"    trained:   {summary([trained for trained, _ in values])}")
            print(f"    untrained: {summary([untrained for _, untrained in values])}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=1000, help="scan seeds 0 .. N-1")
    parser.add_argument("--answers", nargs="*", help="answers to scan (default: all)")
    parser.add_argument("--label", default="", help="names the results file of this scan")
    parser.add_argument("--report", action="store_true", help="only print what the results files hold")
    args = parser.parse_args()
    settings = {
        **instructor_module("00_warmup", "cases.py").SPIRALS,
        "cases": len(make_cases(NAME, hidden=True, seed=0)),
    }
    if not args.report:
        scan_seeds(args.seeds, args.answers, results_file(args.label), settings)
    report(settings)


def scan_seeds(seeds: int, names: list[str] | None, path: Path, settings: dict) -> None:
    torch.set_num_threads(1)  # as the grader's kernels: run_spirals takes one thread anyway
    chosen = {name: answer for name, answer in answers().items() if not names or name in names}
    scan = load(path, settings)
    started = time.perf_counter() - scan["seconds"]
    for seed in range(seeds):
        for name, answer in chosen.items():
            done = scan["answers"].setdefault(name, {})
            if str(seed) not in done:
                done[str(seed)] = accuracies(answer, seed)
        if (seed + 1) % SAVE_EVERY == 0 or seed + 1 == seeds:
            scan["seconds"] = time.perf_counter() - started
            path.write_text(json.dumps(scan))
            print(f"seed {seed}: {scan['seconds']:.0f} s", flush=True)


if __name__ == "__main__":
    main()
