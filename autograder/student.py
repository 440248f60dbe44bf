"""The student's commands: `course check NOTEBOOK` and `course progress [FOLDER]`.

The course's own `course` command has them among the instructor's; a student's release installs
this module's `main` as `course`, with these two only.

`course check` runs the notebook's code, as running its cells in Jupyter would, and its first line
says where: in the grader's sandbox (sandbox.py: no network, none of the user's files) where this
machine can make one, else unconfined, as the user. Either way the kernel runs only stage 2 of each
check, as when grading (exchange.py), and this process judges what comes back against the visible
cases' expected outputs: a check counts as passed only when its judged results pass, never because
a cell raised nothing. In the sandbox the kernel cannot read those expected outputs, so nothing it
prints, patches or redefines makes a check pass; unconfined it can do whatever the user can.
"""

import argparse
import atexit
import os
import sys
import tempfile
from functools import cache
from pathlib import Path

from .printable import shown, shown_lines

CHECK_DESCRIPTION = (
    "course check runs the notebook's code, as running its cells would: in a sandbox (bubblewrap: no "
    "network, none of your files) where this machine has one, else as you, with access to all your files. "
    "Its first line says which. Each visible check is judged outside the notebook's kernel; your notebook "
    "is left as it is."
)
SANDBOXED = (
    "course check runs the code of {name} in a sandbox (bubblewrap: no network, none of your files but the "
    "Python environment, read-only; what it writes is thrown away); its checks are judged outside it."
)
UNCONFINED = (
    "course check runs the code of {name} WITHOUT a sandbox ({why}): as you, able to read, change or "
    "delete your files. Run only notebooks you trust."
)


def _check(args) -> int:
    """Run a notebook with its visible checks judged here, and print each check's verdict."""
    from nbclient.exceptions import CellTimeoutError, DeadKernelError

    from .progress import Unreadable, read_notebook

    path = Path(args.notebook)
    try:
        notebook = read_notebook(path)
    except (OSError, Unreadable) as error:  # not a file, not JSON, not a notebook: one line, no traceback
        print(shown(f"{path} cannot be read as a notebook: {error}"), file=sys.stderr)
        return 2
    expected, called = visible_checks(notebook)
    if not expected:
        print(shown(f"no check of the course in {path.name}: is it one of the course's notebooks?"))
        return 1
    verdicts: dict = {}

    def run(why: str | None) -> None:  # the first line says where, once the kernel is ready
        said = (UNCONFINED if why else SANDBOXED).format(name=shown(path.name), why=shown(why or ""))
        judge_checks(notebook, called, verdicts, sandboxed=not why, timeout=args.cell_timeout, announce=said)

    stopped = None
    why = sandbox_unavailable()
    try:
        if why is None:
            try:
                run(None)
            except KernelDidNotStart as error:  # before any cell ran: as where there is no sandbox
                why = f"the sandbox could not start the kernel: {error}"
        if why is not None:
            run(why)
    except KernelDidNotStart as error:
        stopped = f"the kernel did not start ({error}): no cell ran"
    except CellTimeoutError:
        stopped = f"a cell ran past {args.cell_timeout} s and was stopped; the cells after it did not run"
    except DeadKernelError:
        stopped = "the kernel died (out of memory, or the notebook ended it); the cells after it did not run"
    except RuntimeError as error:  # nbclient's word for a kernel that stopped answering
        stopped = f"the kernel stopped answering ({error}); the cells after it did not run"
    passed = 0
    calls = {name for names in called.values() for name in names}
    for name in expected:
        verdict = verdicts.get(name)
        if verdict is None and name in calls:
            print(f"not run {name}")
        elif verdict is None:
            print(f"FAILED {name}: no test cell of this notebook runs it")
        elif verdict.passed:
            passed += 1
            print(f"passed {name}")
        else:  # as the notebook shows it; the student's text indented, so that it cannot forge a line
            print(f"FAILED {name}: CheckFailed: " + shown_lines(str(verdict)).replace("\n", "\n    "))
    if stopped:
        print(shown(stopped))
    print(
        f"{passed}/{len(expected)} visible checks pass in {shown(path.name)}, as judged outside its kernel "
        "(your notebook is left as it was)"
    )
    return 0 if passed == len(expected) and not stopped else 1


def visible_checks(notebook) -> tuple[list[str], dict[int, list[str]]]:
    """The visible checks of the course's notebook this one is (by the checks its test cells call),
    and the index of each test cell with those it calls."""
    from .progress import course_questions, test_cells

    index = {id(cell): i for i, cell in enumerate(notebook.cells)}
    found = {index[id(c)]: [n for n, hidden in calls if not hidden] for c, calls in test_cells(notebook)}
    named = {name for names in found.values() for name in names}
    for questions in course_questions().values():
        expected = [name for q in questions for name in q.checks]
        if named & set(expected):
            called = {i: [n for n in names if n in expected] for i, names in found.items()}
            return expected, {i: names for i, names in called.items() if names}
    return [], {}


def sandbox_unavailable() -> str | None:
    """Why this machine cannot run a notebook in the grader's sandbox; None where it can."""
    try:
        from . import sandbox
    except ImportError as error:  # Windows: no `resource` module, and no bubblewrap either
        return f"no sandbox on this system: {error}"
    return sandbox.unavailable_reason()


class KernelDidNotStart(RuntimeError):
    """The kernel never became ready: no cell of the notebook ran."""


def judge_checks(
    notebook, called: dict[int, list[str]], verdicts: dict, *, sandboxed: bool, timeout: int, announce: str
) -> None:
    """Run the notebook once, in the sandbox or not, its visible checks judged here into `verdicts` as
    their cells end. `announce` is printed once the kernel is ready, before any cell runs; raises
    KernelDidNotStart where it never got there, else as nbclient does where the kernel dies or a cell
    runs past `timeout`."""
    from . import exchange

    ready = []
    root = Path(tempfile.mkdtemp(prefix="course-check-"))  # short: the kernel's socket paths
    printed = root / "kernel.out"  # the kernel process's own output: never the terminal's
    client = _client_class()(
        notebook,
        called,
        verdicts,
        root,
        sandboxed,
        timeout=timeout,
        on_notebook_start=lambda **_: (ready.append(True), print(announce, flush=True)),
    )
    try:
        (root / "home").mkdir()
        # Unconfined, the kernel learns where the exchange is as a sandboxed one does; either way it
        # works in a folder of its own, removed with it.
        env = {**os.environ, exchange.ENV: str(root / "exchange")}
        with printed.open("ab") as output:
            client.execute(env=env, cwd=str(root / "home"), stdout=output, stderr=output)
    except Exception as error:
        if not ready:  # nbclient cleaned up, but left its clean-up at exit to fail on what is gone
            atexit.unregister(client._cleanup_kernel)
            raise KernelDidNotStart(_last_words(printed) or str(error) or type(error).__name__) from error
        raise
    finally:
        exchange.remove_tree(root)


def _last_words(printed: Path) -> str:
    """The last line a kernel that never started printed (the import that failed, say)."""
    try:
        with printed.open("rb") as file:
            file.seek(max(0, printed.stat().st_size - 4096))
            lines = file.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return ""
    return next((line.strip() for line in reversed(lines) if line.strip()), "")


@cache
def _client_class():
    """nbclient's NotebookClient, subclassed once imported (a second: only `check` needs it)."""
    from jupyter_client.manager import AsyncKernelManager
    from nbclient import NotebookClient

    from . import exchange
    from .api import load_snapshot
    from .checks import CHECKS
    from .core import MAX_ERROR_CHARS, Verdict, judge

    class Client(NotebookClient):
        """A notebook run whose test cells' checks do stage 2 in the kernel and stage 3 here: before
        such a cell, the visible cases of its checks go into the exchange; after it, what came back
        is judged against their expected outputs (or fails, saying why nothing came back)."""

        def __init__(self, notebook, called, verdicts, root: Path, sandboxed: bool, **kwargs):
            super().__init__(notebook, kernel_name="python3", allow_errors=True, **kwargs)
            self.called, self.verdicts, self.root, self.sandboxed = called, verdicts, root, sandboxed

        def create_kernel_manager(self):
            if self.sandboxed:
                from .sandbox import SandboxedKernelManager, prepare_root

                prepare_root(self.root)
                self.km = SandboxedKernelManager(
                    kernel_name=self.kernel_name, root=str(self.root), log_file=str(self.root / "kernel.out")
                )
            else:
                self.km = AsyncKernelManager(kernel_name=self.kernel_name)
            return self.km

        async def async_execute_cell(self, cell, cell_index, execution_count=None, store_history=True):
            names = self.called.get(cell_index)
            if not names:
                return await super().async_execute_cell(cell, cell_index, execution_count, store_history)
            folder = self.root / "exchange"
            exchange.prepare(folder)
            snapshots = {name: load_snapshot(name) for name in names}
            for name, (cases, _, _) in snapshots.items():
                exchange.write_cases(folder, name, False, cases)
            cell = await super().async_execute_cell(cell, cell_index, execution_count, store_history)
            error = next((o for o in cell.outputs if o.output_type == "error"), None)
            for name, (cases, expected, known) in snapshots.items():
                self.verdicts[name] = self._judged(name, cases, expected, known, error)
            return cell

        def _judged(self, name, cases, expected, known, error) -> Verdict:
            check = CHECKS[name]
            try:
                results = exchange.read_results(self.root / "exchange", name, False, len(cases))
            except exchange.MalformedResults as problem:
                why = f"the results of this test are malformed: {problem}"
                return Verdict(name, False, why, check.points)
            if results is None:
                why = "`check` was redefined, patched or bypassed"
                if error is not None:
                    why = f"the cell raised {error.ename[:200]}: {error.evalue[:MAX_ERROR_CHARS]}"
                return Verdict(name, False, f"no results came back from this test: {why}", check.points)
            return judge(check, cases, results, expected, known).worth(check.points)

    return Client


def _progress(args) -> int:
    from .progress import folder_progress

    folder = Path(args.folder)
    if not folder.exists():
        print(shown(f"{folder} does not exist: give the folder that holds your notebooks"), file=sys.stderr)
        return 2
    if not folder.is_dir():
        print(shown(f"{folder} is a file: give the folder that holds your notebooks"), file=sys.stderr)
        return 2
    summary, notes, found = folder_progress(folder)
    if not found:
        print(
            shown(f"no notebook of the course under {folder}: run this in the folder that holds them ")
            + "(e.g. course progress notebooks/)",
            file=sys.stderr,
        )
        return 1
    print(summary)
    for note in notes:
        print(note)
    print(
        "From the verdicts your notebooks' test cells showed when last saved, not run again here (`course "
        "check NOTEBOOK` runs one and judges it): run a question's check cell and save to update its row. "
        "A check whose answer cell is still as released counts as to do. Hidden tests add the rest of each "
        "question's points when your work is graded."
    )
    return 0


def add_commands(sub) -> None:
    """The student's subcommands, on an argparse subparsers object."""
    p = sub.add_parser(
        "check",
        help="run the notebook's code (sandboxed where bubblewrap is installed, else as you) and judge its "
        "visible checks (your notebook is left as it is)",
        description=CHECK_DESCRIPTION,
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
