"""A class graded end to end: notebooks per minute with 1 and 2 local workers and with a
LocalCluster of 2 Dask workers, and seconds per notebook against the nbclient floor.

    .venv/bin/python benchmarks/class_throughput.py [--students 60] [--json FILE] [--cold]

The class: every student hands in all twelve notebooks, each one perfect (half of them), with
one known mistake of the catalogue pasted into an answer (a third: partial credit or none), or
as released with one answer left as the stub (the rest); seeded, so every run grades the same
class. Each way of grading gets an output folder of its own with the same cases (one seed) and
its nbgrader template made beforehand (once per output folder, untimed, as in a real term);
what is timed is the grading of the whole class, then, apart, the reports (grades.csv, the
merged course, the class report) made from it. Every way must give every student the same grades.

The floor is a plain nbclient run of each notebook, perfect, in a fresh kernel with no sandbox,
judging or feedback (the same kernel start and imports a student pays), measured in this run;
a class's floor is the floor of its notebooks summed. `--cold` also grades the class with one
worker whose kernels start when their notebook needs them (the grader before kernels.py), for
the comparison. Memory: the proportional set size (PSS) of this process's descendants (workers,
kernels), sampled each second; with kernels started ahead, a worker holds a second kernel.
"""

import argparse
import json
import random
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import nbformat
import psutil
from nbclient import NotebookClient

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import grader.grading as grading  # noqa: E402
import grader.notebook.autograde as autograde  # noqa: E402
from autograder.cells import grade_id  # noqa: E402
from autograder.checks import CHECKS  # noqa: E402
from autograder.paths import assignments  # noqa: E402
from autograder.reference import mistakes  # noqa: E402
from tests.helpers.submissions import checks_of, mutant, perfect, release, solution_sources, with_answer  # noqa: E402

SEED = 20261126


def write_class(folder: Path, students: int) -> dict[str, int]:
    """The synthetic class under `folder`; how many notebooks of each kind it holds."""
    chance = random.Random(SEED)
    kinds = {"perfect": 0, "mistake": 0, "stub": 0}
    for index in range(students):
        student = f"s{index:03d}"
        (folder / student).mkdir(parents=True)
        for assignment in assignments():
            draw = chance.random()
            if draw < 0.5:
                kind, notebook = "perfect", perfect(assignment)
            elif draw < 0.83:
                check = CHECKS[chance.choice([c for c in checks_of(assignment) if mistakes(c)])]
                known = chance.choice(mistakes(check.name))
                kind, notebook = "mistake", mutant(assignment, check.answer_cell, check.target, known.impl)
            else:
                answer = chance.choice(sorted(solution_sources(assignment)))
                stub = next(c.source for c in release(assignment).cells if grade_id(c) == answer)
                kind, notebook = "stub", with_answer(perfect(assignment), answer, stub)
            kinds[kind] += 1
            nbformat.write(notebook, folder / student / f"{assignment}.ipynb")
    return kinds


def floor_seconds(rounds: int, folder: Path) -> dict[str, float]:
    """Median seconds of a plain nbclient run of each perfect notebook (fresh kernel each)."""
    times: dict[str, list[float]] = {a: [] for a in assignments()}
    for round_index in range(rounds):
        order = assignments()[round_index % 12 :] + assignments()[: round_index % 12]
        for assignment in order:
            notebook = perfect(assignment)
            started = time.perf_counter()
            NotebookClient(
                notebook, timeout=300, allow_errors=True, resources={"metadata": {"path": str(folder)}}
            ).execute()
            times[assignment].append(time.perf_counter() - started)
    return {a: statistics.median(t) for a, t in times.items()}


class MemorySampler:
    """Peak PSS of this process's descendants, and of the kernels among them, sampled each second."""

    def __init__(self):
        self.peak_total = 0
        self.kernels: list[int] = []  # PSS of each kernel seen, at each sample
        self.most_kernels = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        me = psutil.Process()
        while not self._stop.wait(1.0):
            total, kernels = 0, []
            for child in me.children(recursive=True):
                try:
                    pss = child.memory_full_info().pss
                    is_kernel = "autograder.kernel_launcher" in child.cmdline() and child.name() != "bwrap"
                except (psutil.Error, OSError):
                    continue
                total += pss
                if is_kernel:
                    kernels.append(pss)
            self.peak_total = max(self.peak_total, total)
            self.most_kernels = max(self.most_kernels, len(kernels))
            self.kernels += kernels


def grade_class(source: Path, out: Path, template: Path, **how) -> dict:
    """Grade the class into a new output folder; seconds of the grading and of the reports."""
    (out / "work").mkdir(parents=True)
    (out / "work" / "case_seed").write_text(str(SEED))
    shutil.copytree(template, out / "work" / "template")
    timed = {}
    real = grading._grade_all

    def grade_all(*args, **kwargs):
        started = time.perf_counter()
        real(*args, **kwargs)
        timed["grading"] = time.perf_counter() - started

    grading._grade_all = grade_all
    try:
        with MemorySampler() as memory:
            started = time.perf_counter()
            rows = grading.grade(source, out, **how)
            total = time.perf_counter() - started
    finally:
        grading._grade_all = real
    kernel = statistics.median(memory.kernels) if memory.kernels else 0
    return {
        "grading_s": timed["grading"],
        "reports_s": total - timed["grading"],
        "rows": {(r.student, r.notebook): (r.score, r.status) for r in rows},
        "peak_pss_mib": memory.peak_total / 2**20,
        "most_kernels": memory.most_kernels,
        "kernel_pss_mib": kernel / 2**20,
    }


def cold_kernels():
    """Grading as before kernels.py: each kernel starts when its notebook needs it."""
    real = autograde.grading_config

    def config(*args, **worker):
        return real(*args, **{**worker, "kernels_ahead": False})

    autograde.grading_config = config
    return real


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--students", type=int, default=60)
    parser.add_argument("--floor-rounds", type=int, default=2)
    parser.add_argument("--cold", action="store_true", help="also grade with kernels started on demand")
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        kinds = write_class(tmp / "class", args.students)
        notebooks = sum(kinds.values())
        print(f"class: {args.students} students, {notebooks} notebooks {kinds}", flush=True)
        template = autograde.prepare_template(tmp / "template-work")
        floor = floor_seconds(args.floor_rounds, tmp)
        class_floor = args.students * sum(floor.values())
        print(
            f"floor: {class_floor / notebooks:.2f} s per notebook (median of {args.floor_rounds} runs each)"
        )
        ways = {
            "1 local worker": {"jobs": 1},
            "2 local workers": {"jobs": 2},
            "Dask LocalCluster, 2 workers": {"dask": "local:2"},
        }
        results = {}
        for name, how in ways.items():
            results[name] = grade_class(tmp / "class", tmp / name.replace(" ", "-"), template, **how)
            print(f"{name}: {results[name]['grading_s']:.0f} s", flush=True)
        if args.cold:
            real = cold_kernels()
            try:
                name = "1 local worker, kernels started on demand"
                results[name] = grade_class(tmp / "class", tmp / "cold", template, jobs=1)
            finally:
                autograde.grading_config = real
        reference = results["1 local worker"]["rows"]
        for name, result in results.items():
            assert result["rows"] == reference, f"{name} graded differently"
    one, two = results["1 local worker"], results["2 local workers"]
    dask = results["Dask LocalCluster, 2 workers"]
    print(f"\n{'grading':<44} {'nb/min':>7} {'s/nb':>6} {'vs floor':>8} {'reports s':>9} {'peak MiB':>8}")
    for name, result in results.items():
        per = result["grading_s"] / notebooks
        print(
            f"{name:<44} {60 / per:>7.1f} {per:>6.2f} {result['grading_s'] / class_floor:>7.2f}x "
            f"{result['reports_s']:>9.0f} {result['peak_pss_mib']:>8.0f}"
        )
    print(f"\n2 workers / 1 worker: {one['grading_s'] / two['grading_s']:.2f}x (goal >= 1.8x)")
    print(f"1 worker against the floor: {one['grading_s'] / class_floor:.2f}x per notebook (goal <= 1.0x)")
    print(
        f"Dask / local pool, 2 workers: {dask['grading_s'] / two['grading_s']:.2f}x time (goal within 1.10x)"
    )
    print(
        f"kernels at once, 1 worker: {one['most_kernels']}, each {one['kernel_pss_mib']:.0f} MiB PSS (median)"
    )
    if args.json:
        keep = {n: {k: v for k, v in r.items() if k != "rows"} for n, r in results.items()}
        figures = {"students": args.students, "notebooks": notebooks, "kinds": kinds, "floor_s": floor}
        args.json.write_text(json.dumps({**figures, "results": keep}, indent=1) + "\n")


if __name__ == "__main__":
    main()
