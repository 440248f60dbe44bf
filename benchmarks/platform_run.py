"""Seconds per submission on Gradescope, simulated: run_autograder in a fresh container (under
bubblewrap, and as the kernel's own user where bubblewrap is denied) beside `course grade` of the
same notebook on this machine, side by side.

    .venv/bin/python benchmarks/platform_run.py [--rounds N] [NOTEBOOK ...]   (as root)

The container is tests/helpers/platform_root.py's (the zip unpacked into /autograder/source, setup.sh
run once; each run copies that image, as Gradescope starts a container per submission). `course
grade` grades one perfect notebook into a folder graded before, so that its nbgrader course is made
once, as a class's is. Each round times the three in a rotating order. Writes
benchmarks/results/platform_run_cpu.json.
"""

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import nbformat

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from grader.cli import main as course  # noqa: E402
from grader.grading import Limits, grade  # noqa: E402
from tests.helpers.platform_root import Image  # noqa: E402
from tests.helpers.submissions import perfect  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "platform_run_cpu.json"
DEFAULT = ["00_warmup", "04_rope", "07_rmsnorm"]


def gradescope_image(folder: Path) -> Image:
    course(["release", "--gradescope", str(folder / "bundle"), "--notebook", DEFAULT[0]])
    return Image.gradescope(folder / "image", folder / "bundle" / DEFAULT[0] / "autograder.zip")


def on_gradescope(image: Image, folder: Path, notebook: str, bwrap_denied: bool):
    """One submission in a fresh container. The zips of two notebooks differ only in platform.json."""

    def run() -> None:
        settings = image.root / "autograder" / "source" / "platform.json"
        settings.write_text(json.dumps({**json.loads(settings.read_text()), "notebook": notebook}))
        submission = image.root / "autograder" / "submission"
        shutil.rmtree(submission)
        submission.mkdir()
        nbformat.write(perfect(notebook), submission / f"{notebook}.ipynb")
        container = Path(tempfile.mkdtemp(dir=folder)) / "container"  # new: the image is copied there
        try:
            done = image.run(
                container, "cd /autograder && /autograder/run_autograder", bwrap_denied=bwrap_denied
            )
            results = json.loads((container / "autograder" / "results" / "results.json").read_text())
        finally:
            shutil.rmtree(container.parent)
        assert done.returncode == 0 and results["tests"], (done.stderr, results)
        assert all(t["score"] == t["max_score"] for t in results["tests"]), results

    return run


def on_this_machine(folder: Path, notebook: str):
    submissions, out = folder / f"in-{notebook}", folder / f"out-{notebook}"
    path = submissions / "student" / f"{notebook}.ipynb"
    path.parent.mkdir(parents=True)
    nbformat.write(perfect(notebook), path)
    grade(submissions, out, jobs=1, limits=Limits())  # the nbgrader course is made here, untimed

    def run() -> None:
        for result in (out / "work" / "results").rglob("*.json"):
            result.unlink()
        (result,) = grade(submissions, out, jobs=1, limits=Limits())
        assert result.score == result.max_score, result

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("notebooks", nargs="*", default=DEFAULT)
    args = parser.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("run as root: the platforms grade as root, and so does their simulation")
    load = os.getloadavg()[0]
    print(f"({args.rounds} rounds; seconds per submission; load {load:.1f} at the start)")
    print(f"{'notebook':<12} {'course grade':>12} {'bubblewrap':>10} {'kernel user':>11} {'ratio':>6}")
    measured = {}
    with tempfile.TemporaryDirectory() as tmp:
        image = gradescope_image(Path(tmp))
        for notebook in args.notebooks:
            runs = {
                "course grade": on_this_machine(Path(tmp), notebook),
                "bubblewrap": on_gradescope(image, Path(tmp), notebook, bwrap_denied=False),
                "kernel user": on_gradescope(image, Path(tmp), notebook, bwrap_denied=True),
            }
            seconds = dict.fromkeys(runs, 0.0)
            for round_ in range(args.rounds):
                names = list(runs)
                for name in names[round_ % 3 :] + names[: round_ % 3]:
                    start = time.perf_counter()
                    runs[name]()
                    seconds[name] += (time.perf_counter() - start) / args.rounds
            ratio = seconds["bubblewrap"] / seconds["course grade"]
            print(
                f"{notebook:<12} {seconds['course grade']:>12.2f} {seconds['bubblewrap']:>10.2f} "
                f"{seconds['kernel user']:>11.2f} {ratio:>5.2f}x"
            )
            measured[notebook] = {name: round(value, 2) for name, value in seconds.items()}
    RESULTS.write_text(
        json.dumps({"rounds": args.rounds, "load_at_start": round(load, 1), "seconds": measured})
    )
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
