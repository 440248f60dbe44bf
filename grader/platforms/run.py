"""What the platforms' scripts run (grader/templates/platforms/), as root in the grading container:

    python -m grader.platforms.run prepare                     setup.sh: the nbgrader course, once
    python -m grader.platforms.run gradescope SETTINGS.json    run_autograder: one submission
    python -m grader.platforms.run prairielearn SETTINGS.json  run_prairielearn: one job

A submission's results.json is written last, once the kernel and all it started are gone, into a
folder that only root can write to; the grader's log goes to standard output (Gradescope shows it
to instructors only). Whatever happens, a results.json is written that says so: a grader that
fails costs the student an attempt's worth of nothing, and the platform shows why.
"""

import json
import os
import sys
import tempfile
import time
import traceback
from dataclasses import fields
from pathlib import Path

from grader import leave_out
from grader.notebook.autograde import prepare_template
from grader.platforms import results
from grader.platforms.submission import Outcome, Settings, grade_submission

GRADESCOPE = {"submission": Path("/autograder/submission"), "results": Path("/autograder/results")}
PRAIRIELEARN = {"submission": Path("/grade/student"), "results": Path("/grade/results")}
NOTEBOOK_VARIABLE = "COURSE_NOTEBOOK"  # PrairieLearn: each question's info.json sets it


def read_settings(path: Path) -> Settings:
    given = json.loads(path.read_text())
    if notebook := os.environ.get(NOTEBOOK_VARIABLE):
        given["notebook"] = notebook
    return Settings(**{f.name: given[f.name] for f in fields(Settings) if f.name in given})


def grade(settings: Settings, submission: Path, results_folder: Path) -> tuple[Outcome, float]:
    """Grade the submission; (what came of it, seconds). Never raises for the student's files."""
    results_folder.mkdir(parents=True, exist_ok=True)
    os.chmod(results_folder, 0o700)  # root's: the kernel's user can neither read nor write it
    start = time.monotonic()
    with (
        tempfile.TemporaryDirectory(prefix="course-") as work,
        tempfile.TemporaryDirectory(prefix="course-kernels-") as scratch,
    ):
        outcome = grade_submission(submission, settings, Path(work), Path(scratch))
    return outcome, time.monotonic() - start


def write(results_folder: Path, data: dict) -> None:
    partial = results_folder / "results.json.partial"
    partial.write_text(json.dumps(data, indent=1, ensure_ascii=False))
    partial.rename(results_folder / "results.json")


def main(argv: list[str]) -> int:
    command = argv[0] if argv else ""
    if command == "prepare":  # into the cache (XDG_CACHE_HOME) that each submission's copy comes from
        with tempfile.TemporaryDirectory(prefix="course-") as work:
            prepare_template(Path(work), leave_out.left_out())
        return 0
    if command not in ("gradescope", "prairielearn") or len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    paths = GRADESCOPE if command == "gradescope" else PRAIRIELEARN
    try:
        settings = read_settings(Path(argv[1]))
        if not settings.notebook:
            raise ValueError(f"no notebook to grade: the question sets none in {NOTEBOOK_VARIABLE}")
        outcome, seconds = grade(settings, paths["submission"], paths["results"])
    except Exception:  # the grader's own failure: said, and the platform's attempt is not scored as work
        print(traceback.format_exc())
        message = "The grader failed on this submission (not your code's fault): tell your instructor."
        paths["results"].mkdir(parents=True, exist_ok=True)
        if command == "gradescope":
            write(
                paths["results"], {"score": 0, "output": message, "stdout_visibility": "hidden", "tests": []}
            )
        else:
            write(paths["results"], {"gradable": False, "message": message})
        return 0  # PrairieLearn reads results.json only after exit 0; Gradescope shows it either way
    if outcome.graded is not None:  # escaped by the worker, as a batch's logs are
        print(outcome.graded.log)
        if outcome.graded.kernel_log:
            print("The kernel's own output:", outcome.graded.kernel_log.decode(), sep="\n")
    if command == "gradescope":
        write(paths["results"], results.gradescope(outcome, settings.show_hidden, seconds))
    else:
        write(paths["results"], results.prairielearn(outcome, settings.show_hidden))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
