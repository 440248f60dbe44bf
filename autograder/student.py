"""The student's commands: `course check NOTEBOOK` and `course progress [FOLDER]`.

The course's own `course` command has them among the instructor's; a student's release installs
this module's `main` as `course`, with these two only.
"""

import argparse
import sys
from pathlib import Path


def _check(args) -> int:
    """Execute a copy of a notebook and print each test cell's verdict (visible checks only)."""
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellTimeoutError, DeadKernelError

    path = Path(args.notebook)
    try:
        notebook = nbformat.read(path, as_version=4)
        nbformat.validate(notebook)
    except Exception as error:  # not a file, not JSON, not a notebook: one line, no traceback
        reason = str(error).splitlines()[0] if str(error) else type(error).__name__
        print(f"{path} cannot be read as a notebook: {reason}", file=sys.stderr)
        return 2
    client = NotebookClient(
        notebook,
        timeout=args.cell_timeout,
        allow_errors=True,
        resources={"metadata": {"path": str(path.parent)}},
        extra_arguments=["--IPKernelApp.log_level=ERROR"],  # not its warning about TCP on this machine
    )
    stopped = None
    try:
        client.execute()
    except CellTimeoutError:
        stopped = f"a cell ran past {args.cell_timeout} s and was stopped; the cells after it did not run"
    except DeadKernelError:
        stopped = "the kernel died (out of memory?); the cells after it did not run"
    passed = total = 0
    for cell, calls in test_cells(notebook):
        if any(hidden for _, hidden in calls):  # a release's hidden cells call nothing
            continue
        total += 1
        names = ", ".join(name for name, _ in calls)
        errors = [o for o in cell.get("outputs", []) if o.output_type == "error"]
        if errors:  # a check's verdict in full (its traceback is the verdict), else the error
            shown = "\n".join(errors[0].traceback) if errors[0].ename == "CheckFailed" else ""
            print(f"FAILED {names}: {shown or f'{errors[0].ename}: {errors[0].evalue}'}")
        elif cell.get("execution_count") is None:
            print(f"not run {names}")
        else:
            passed += 1
            print(f"passed {names}")
    if stopped:
        print(stopped)
    if not total:
        print(f"no check of the course in {path.name}: is it one of the course's notebooks?")
        return 1
    print(f"{passed}/{total} visible checks pass in {path.name} (your notebook is left as it was)")
    return 0 if passed == total and not stopped else 1


def test_cells(notebook) -> list[tuple[object, list[tuple[str, bool]]]]:
    """(cell, its check calls) of each test cell: nbgrader's test cells; in a notebook whose nbgrader
    metadata an editor (Colab) dropped, the cells that call check()."""
    from .cells import check_calls, is_test_cell

    def calls(cell) -> list[tuple[str, bool]]:
        try:
            return check_calls(cell.source) if cell.cell_type == "code" else []
        except (SyntaxError, ValueError):  # a cell of the student's own that is not a test cell
            return []

    marked = [cell for cell in notebook.cells if is_test_cell(cell)]
    return [(cell, found) for cell in marked or notebook.cells if (found := calls(cell))]


def _progress(args) -> int:
    from .progress import folder_progress

    folder = Path(args.folder)
    if not folder.exists():
        print(f"{folder} does not exist: give the folder that holds your notebooks", file=sys.stderr)
        return 2
    if not folder.is_dir():
        print(f"{folder} is a file: give the folder that holds your notebooks", file=sys.stderr)
        return 2
    summary, notes, found = folder_progress(folder)
    if not found:
        print(
            f"no notebook of the course under {folder}: run this in the folder that holds them "
            "(e.g. course progress notebooks/)",
            file=sys.stderr,
        )
        return 1
    print(summary)
    for note in notes:
        print(note)
    print(
        "From the verdicts your notebooks showed when last saved: run a question's check cell and save "
        "to update its row. Hidden tests add the rest of each question's points when your work is graded."
    )
    return 0


def add_commands(sub) -> None:
    """The student's subcommands, on an argparse subparsers object."""
    p = sub.add_parser(
        "check",
        help="run a copy of a notebook and report its visible checks (your notebook is left as it is)",
    )
    p.add_argument("notebook", help="a notebook of the course, e.g. notebooks/07_rmsnorm/07_rmsnorm.ipynb")
    p.add_argument(
        "--cell-timeout",
        type=int,
        default=300,
        help="seconds a cell may run (default 300; grading allows 120)",
    )
    p.set_defaults(func=_check)

    p = sub.add_parser(
        "progress",
        help="per notebook: questions passed, visible points, time left and the next question, from the "
        "verdicts your saved notebooks show",
    )
    p.add_argument("folder", nargs="?", default=".", help="your notebooks' folder (default: here)")
    p.set_defaults(func=_progress)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="course", description="Check your notebooks and see your progress.")
    add_commands(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except BrokenPipeError:  # `course progress | head`
        sys.stderr.close()
        return 0


if __name__ == "__main__":
    sys.exit(main())
