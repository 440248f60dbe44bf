"""The `course` command: build, release, grade, forget, check, progress, list, lab."""

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from autograder.paths import NOTEBOOKS
from autograder.printable import shown
from autograder.student import add_commands as add_student_commands
from grader.grades import Result, summary
from grader.points import points_table


def _build(args) -> int:
    from grader.build import build, stale_files

    if not args.check:
        build(only=args.assignments)
        print("built notebooks/, images/, autograder/expected/, the checkpoint and the points table in docs/")
        print("from solutions/ (files whose content did not change were left as they were)")
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        build(Path(tmp), checkpoint=False)  # its floats depend on the CPU: tests/test_transformer.py
        stale = stale_files(Path(tmp))
    for name in stale:
        print(f"stale: {name}")
    print("derived files are current" if not stale else "run `make build` and commit the result")
    return 1 if stale else 0


PLATFORM_FLAGS = ("notebook", "show_hidden", "cell_timeout", "notebook_timeout", "memory_gib")


def _release(args) -> int:
    if args.gradescope or args.prairielearn:
        return _release_platform(args)
    if given := [f"--{name.replace('_', '-')}" for name in PLATFORM_FLAGS if getattr(args, name)]:
        raise SystemExit(
            f"{', '.join(given)}: only with --gradescope or --prairielearn (students get every notebook)"
        )
    from grader.release import release

    written = release(Path(args.out))
    print(f"wrote {len(written)} files to {args.out}: the student notebooks, the checks package and its")
    print("wheel, environment.yml, requirements.txt and a README for students (no solutions or hidden cases)")
    return 0


def _release_platform(args) -> int:
    from grader.platforms import bundle
    from grader.platforms.submission import Settings
    from grader.release import new_folder

    out = Path(args.out).absolute()
    notebooks = bundle.known(args.notebook or [])
    given = {name: getattr(args, name) for name in PLATFORM_FLAGS[1:] if getattr(args, name) is not None}
    settings = {"show_hidden": False, **given}  # the rest: Settings' defaults
    longest = bundle.PRAIRIELEARN_TIMEOUT - bundle.KERNEL_START_S
    if args.prairielearn and settings.get("notebook_timeout", Settings.notebook_timeout) > longest:
        raise SystemExit(
            f"--notebook-timeout: at most {longest} s with --prairielearn (its jobs end at 600 s)"
        )
    gradescope = out / "gradescope" if args.prairielearn else out
    prairielearn = out / "prairielearn" if args.gradescope else out
    with new_folder(out) as staged:  # all of it, or nothing
        if args.gradescope:
            bundle.write_gradescope(staged / gradescope.relative_to(out), notebooks, settings)
        if args.prairielearn:
            bundle.write_prairielearn(
                staged / prairielearn.relative_to(out), notebooks, settings, args.prairielearn
            )
    if args.gradescope:
        print(f"wrote {gradescope}/<notebook>/autograder.zip for Gradescope ({', '.join(notebooks)}): upload")
        print(
            "each to its assignment (docs/platforms.md); they hold the solutions: never give them to students"
        )
    if args.prairielearn:
        print(
            f"wrote {prairielearn / 'image'}/ (build and push it as {args.prairielearn}) and a question per"
        )
        print(f"notebook in {prairielearn / 'questions'}/ (docs/platforms.md); never give them to students")
    return 0


def _grade(args) -> int:
    source, out = Path(args.submissions), Path(args.out)
    if not source.exists():
        raise SystemExit(f"{source}: no such folder or zip file (give the LMS download, as it came)")
    if out.exists() and not out.is_dir():
        raise SystemExit(f"{out} is a file: --out names a folder (new, or one graded into before)")
    for folder in args.compare_with or ():
        if not Path(folder).is_dir():
            raise SystemExit(
                f"--compare-with {folder}: no such folder (an earlier class's --out, or solutions)"
            )
    from grader.grading import Limits, grade  # after the checks: its imports take seconds

    limits = Limits(
        cell_timeout=args.cell_timeout,
        notebook_timeout=args.notebook_timeout,
        memory_bytes=int(args.memory_gib * 2**30),
        sandboxed=not args.no_sandbox,
    )
    results = grade(
        source,
        out,
        jobs=args.jobs,
        limits=limits,
        again=args.again,
        due=args.due,
        late_penalty=args.late_penalty,
        roster=Path(args.roster) if args.roster else None,
        title=args.title,
        dask=args.dask,
        compare_with=[Path(folder) for folder in args.compare_with or ()],
    )
    attention = [r for r in results if r.status != "graded" or r.reason]
    if attention:
        print("Rows that need your attention (not graded, or points lost outside the checks):")
    for r in attention:
        print(summary_line(r))
    print(summary(results))
    print(
        f"wrote {out / 'grades.csv'}, {out / 'report.html'}, {out / 'totals.csv'}, {out / 'intake.csv'}, "
        f"{out / 'feedback'}/, {out / 'logs'}/ and {out / 'course'}/"
    )
    for upload in sorted((out / "upload").glob("*")) if (out / "upload").is_dir() else ():
        print(f"to upload to your LMS: {upload}")
    return 0


def _forget(args) -> int:
    """Remove students' (or one notebook's) outcomes from an output folder: the one destructive
    action, so it lists what it would remove and does so only with --yes."""
    from grader.grading import report
    from grader.record.record import forget, forgettable, holds_a_class

    out = Path(args.out).resolve()
    if not holds_a_class(out):
        raise SystemExit(f"{out} holds no graded class (no work/results/)")
    targets = [(w.partition("/")[0], w.partition("/")[2] or None) for w in args.what]
    found = {target: forgettable(out, *target) for target in targets}
    for (student, notebook), paths in found.items():
        what = f"{student}/{notebook}" if notebook else f"{student} (every notebook)"
        if not paths:
            raise SystemExit(shown(f"{what}: nothing of this in {out}; nothing was removed"))
        print(shown(f"{what}:") + "".join(f"\n  {shown(str(p.relative_to(out)))}" for p in paths))
    if not args.yes:
        print(
            "nothing was removed: run again with --yes to remove the above (hand grades are kept, set aside)"
        )
        return 1
    for student, notebook in targets:
        forget(out, student, notebook)
    report(out)
    print(f"removed; rewrote {out / 'grades.csv'}, the totals and {out / 'course'}/")
    return 0


def summary_line(r: Result) -> str:
    """One row of grades.csv for the terminal; names and reasons come from students, hence `shown`
    (a name with a newline or an escape code would otherwise forge or rewrite lines)."""
    score = "" if r.score is None else f"{r.score:g}/{r.max_score:g}"
    who = f"{r.student} ({r.name})" if r.name else r.student
    return f"{shown(who):<32} {shown(r.notebook):<14} {r.status:<21} {score:>8} {shown(r.reason)}"


def _list(args) -> int:
    from autograder.checks import CHECKS
    from grader.leave_out import left_out, standing

    checks_left_out = left_out()
    if args.points:
        print(points_table(checks_left_out))
        return 0
    for name, check in CHECKS.items():
        points = f"{check.points:g} visible + {check.hidden_points:g} hidden points"
        mark = standing(check, checks_left_out)  # added beyond the homework, left out by course.toml
        print(f"{name:<28} {check.target_source:<30} {points:<30} {mark}".rstrip())
    return 0


def _lab(args) -> int:
    command = [sys.executable, "-m", "jupyter", "lab", str(NOTEBOOKS), "--no-browser", f"--port={args.port}"]
    if os.geteuid() == 0:
        command.append("--allow-root")  # JupyterLab refuses to start as root otherwise
    if args.ip:
        command.append(f"--ip={args.ip}")
    print("starting JupyterLab; open the http://127.0.0.1 URL with the token that it prints below")
    return subprocess.call(command)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="course", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("build", help="regenerate notebooks/, images/ and expected outputs from solutions/")
    p.add_argument("--check", action="store_true", help="only report derived files that are stale")
    p.add_argument("assignments", nargs="*", help="rebuild only these (e.g. 01_attention); default: all")
    p.set_defaults(func=_build)

    p = sub.add_parser(
        "release",
        help="write what students get into a new folder (no solutions), or the platforms' autograders",
    )
    p.add_argument("out", help="a new or empty folder")
    p.add_argument(
        "--gradescope",
        action="store_true",
        help="write an autograder.zip per notebook for Gradescope (holds the solutions: docs/platforms.md)",
    )
    p.add_argument(
        "--prairielearn",
        metavar="IMAGE",
        help="write PrairieLearn's grader image (to be pushed as IMAGE, e.g. me/course-grader) and questions",
    )
    p.add_argument(
        "--notebook", nargs="+", help="with --gradescope/--prairielearn: only these (default: all)"
    )
    p.add_argument(
        "--show-hidden",
        action="store_true",
        help="students see the hidden checks' verdicts at submission (default: once you publish the grades)",
    )
    p.add_argument("--cell-timeout", type=int, help="seconds per cell, on the platform (default 120)")
    p.add_argument(
        "--notebook-timeout",
        type=int,
        help="seconds per notebook, on the platform (default 480; set its own limit a few minutes above)",
    )
    p.add_argument("--memory-gib", type=float, help="the kernel's address space, on the platform (default 3)")
    p.set_defaults(func=_release)

    p = sub.add_parser("grade", help="grade a folder or zip of submissions")
    p.add_argument("submissions", help="folder of <student>/<nb>.ipynb or <student>_<nb>.ipynb, or a zip")
    p.add_argument("--out", required=True, help="where grades.csv and feedback/ go")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="notebooks graded at once")
    p.add_argument("--cell-timeout", type=int, default=120, help="seconds per cell")
    p.add_argument("--notebook-timeout", type=int, default=900, help="seconds per notebook")
    p.add_argument("--memory-gib", type=float, default=4, help="address space of each notebook's kernel")
    p.add_argument(
        "--no-sandbox",
        action="store_true",
        help="run students' code unconfined, as you (only where bubblewrap is missing, for trusted work)",
    )
    p.add_argument(
        "--roster",
        help="the class list (plain id,name CSV, or the LMS's own export: docs/rosters-and-uploads.md)",
    )
    p.add_argument("--due", help="due date and time, e.g. 2026-11-20T23:59 (local time; kept in OUT)")
    p.add_argument(
        "--late-penalty",
        help="none (default), zero, or a percentage per started day, e.g. 10%%/day; on Canvas, use this "
        "or Canvas's own late policy, never both (late work would lose points twice)",
    )
    p.add_argument(
        "--title", help="the grade column's title in the LMS upload (Canvas: 'Name (assignment id)')"
    )
    p.add_argument(
        "--again",
        action="store_true",
        help="grade this source's files again even where unchanged since last time",
    )
    p.add_argument(
        "--dask",
        metavar="ADDRESS",
        help="grade on a Dask cluster: its scheduler's address (tls://host:8786), or local[:N] for N worker "
        "processes here (docs/grading-at-scale.md); --jobs is then not used",
    )
    p.add_argument(
        "--compare-with",
        nargs="+",
        metavar="DIR",
        help="compare answers with these too (kept in OUT): earlier classes' output folders, and folders of "
        "published solutions (.py, .ipynb); the pairs are in OUT/report.html and OUT/similar-answers.csv",
    )
    p.set_defaults(func=_grade)

    p = sub.add_parser("forget", help="remove students' graded work from an output folder (asks for --yes)")
    p.add_argument("out", help="the output folder")
    p.add_argument("what", nargs="+", help="STUDENT or STUDENT/NOTEBOOK, e.g. 48211/04_rope")
    p.add_argument("--yes", action="store_true", help="remove; without it, only list what would be removed")
    p.set_defaults(func=_forget)

    add_student_commands(sub)  # check, progress

    p = sub.add_parser("list", help="list the checks: added beyond the homework, left out by course.toml")
    p.add_argument("--points", action="store_true", help="how each check's points split (Markdown)")
    p.set_defaults(func=_list)

    p = sub.add_parser("lab", help="start JupyterLab on notebooks/")
    p.add_argument("--port", type=int, default=8888)
    p.add_argument("--ip", default="")
    p.set_defaults(func=_lab)

    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
