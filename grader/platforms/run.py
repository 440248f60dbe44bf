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
from dataclasses import dataclass, fields
from pathlib import Path

from grader import leave_out
from grader.notebook.autograde import prepare_template
from grader.platforms import results
from grader.platforms.submission import Outcome, Settings, grade_submission


@dataclass(frozen=True)
class Platform:
    submission: Path  # the student's files
    results: Path  # where results.json goes
    private: tuple[Path, ...]  # the platform's files that the kernel's user must not read


GRADESCOPE = Platform(
    Path("/autograder/submission"),
    Path("/autograder/results"),
    # submission_metadata.json holds the earlier submissions' results, hidden verdicts included
    (Path("/autograder/submission"), Path("/autograder/submission_metadata.json")),
)
PRAIRIELEARN = Platform(
    Path("/grade/student"),
    Path("/grade/results"),
    (Path("/grade/student"), Path("/grade/data"), Path("/grade/tests"), Path("/grade/serverFilesCourse")),
)
NOTEBOOK_VARIABLE = "COURSE_NOTEBOOK"  # PrairieLearn: each question's info.json sets it


def lock(bundle: Path, private: tuple[Path, ...]) -> None:
    """Make the platform's files and the bundle (the course's source, solutions, settings) root's
    alone, but for the checks package the kernel imports (course/autograder/: what students have),
    and the folders on the way to it, which the kernel's user may go through."""
    for path in [*private, bundle]:
        _chmod_all(path, lambda mode: mode & 0o700)
    package = bundle / "course" / "autograder"
    for folder in [package.parent, *package.parent.parents]:
        folder.chmod(folder.stat().st_mode & 0o7777 | 0o111)
    (bundle / "course").chmod(0o755)  # read, as a folder of the kernel's sys.path is
    _chmod_all(package, lambda mode: mode | 0o444 | (0o111 if mode & 0o100 else 0))


def _chmod_all(path: Path, change) -> None:
    """chmod `path` and all below it to change(mode), never through a link."""
    if not path.exists() or path.is_symlink():
        return
    for top, dirs, files in os.walk(path):
        for name in [*dirs, *files]:
            inside = Path(top, name)
            if not inside.is_symlink():
                inside.chmod(change(inside.stat().st_mode & 0o7777))
    path.chmod(change(path.stat().st_mode & 0o7777))


def read_settings(path: Path) -> Settings:
    given = json.loads(path.read_text())
    if notebook := os.environ.get(NOTEBOOK_VARIABLE):
        given["notebook"] = notebook
    return Settings(**{f.name: given[f.name] for f in fields(Settings) if f.name in given})


def grade(settings: Settings, platform: Platform) -> tuple[Outcome, float]:
    """Grade the submission; (what came of it, seconds). Never raises for the student's files."""
    platform.results.mkdir(parents=True, exist_ok=True)
    os.chmod(platform.results, 0o700)  # root's: the kernel's user can neither read nor write it
    start = time.monotonic()
    with (
        tempfile.TemporaryDirectory(prefix="course-") as work,
        tempfile.TemporaryDirectory(prefix="course-kernels-") as scratch,
    ):
        outcome = grade_submission(platform.submission, settings, Path(work), Path(scratch))
    return outcome, time.monotonic() - start


def write(results_folder: Path, data: dict, fallback: dict) -> None:
    """results.json, whole or not at all; `fallback` (a few bytes) where the disk has no room for it."""
    partial = results_folder / "results.json.partial"
    try:
        partial.write_text(json.dumps(data, indent=1, ensure_ascii=False))
    except OSError:
        partial.write_text(json.dumps(fallback))
    partial.rename(results_folder / "results.json")


FAILED = "The grader failed on this submission (not your code's fault): tell your instructor."
FAILURE = {
    "gradescope": {"score": 0, "output": FAILED, "stdout_visibility": "hidden", "tests": []},
    "prairielearn": {"gradable": False, "message": FAILED},
}


def main(argv: list[str]) -> int:
    command = argv[0] if argv else ""
    if command == "prepare":  # into the cache (XDG_CACHE_HOME) that each submission's copy comes from
        with tempfile.TemporaryDirectory(prefix="course-") as work:
            prepare_template(Path(work), leave_out.left_out())
        return 0
    if command not in ("gradescope", "prairielearn") or len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    platform = GRADESCOPE if command == "gradescope" else PRAIRIELEARN
    settings_file = Path(argv[1])
    try:
        lock(settings_file.parent, platform.private)
        settings = read_settings(settings_file)
        if not settings.notebook:
            raise ValueError(f"no notebook to grade: the question sets none in {NOTEBOOK_VARIABLE}")
        outcome, seconds = grade(settings, platform)
    except (Exception, SystemExit):  # the grader's own failure: said, and the attempt not scored as work
        print(traceback.format_exc())
        platform.results.mkdir(parents=True, exist_ok=True)
        write(platform.results, FAILURE[command], FAILURE[command])
        return 0  # PrairieLearn reads results.json only after exit 0; Gradescope shows it either way
    if outcome.graded is not None:  # escaped by the worker, as a batch's logs are
        print(outcome.graded.log)
        if printed := outcome.graded.kernel_log.decode():  # marked: it is the student's, not the grader's
            print("The kernel's own output:", *(f"| {line}" for line in printed.splitlines()), sep="\n")
    if command == "gradescope":
        data = results.gradescope(outcome, settings.show_hidden, seconds)
    else:
        data = results.prairielearn(outcome, settings.show_hidden)
    write(platform.results, data, FAILURE[command])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
