"""nbgrader preprocessors that fix what plain nbgrader gets wrong for this course.

- Canonicalize: a submission goes back into the shape of the release before grading
  (deleted locked cells restored, moved cells put back in order, another assignment's
  notebook refused with a reason); nbgrader's OverwriteCells then restores locked sources,
  cell types and points.
- JudgedExecute: runs the notebook in the sandbox (autograder/sandbox.py) and writes the
  judge's verdict, reached outside the kernel, as the output of every test cell, so that
  nbgrader's SaveAutoGrades, feedback and formgrader record the judge, not the kernel.
- HideHiddenTests / PlainErrors: feedback without hidden-test source or grader tracebacks.

Whatever these find worth an instructor's eye (a changed locked cell, a test whose results
never came back, an error raised in the sandbox) is logged with the prefix "[course]"; the
grader keeps that log per submission.
"""

import copy
import dataclasses
import json
import math
import os
import re
import stat
import tempfile
import time
import traceback
from pathlib import Path

import nbformat
from jupyter_core.utils import run_sync
from nbclient.exceptions import CellExecutionComplete, CellTimeoutError, DeadKernelError
from nbformat.v4 import new_output
from nbgrader.preprocessors import Execute
from nbgrader.preprocessors.base import NbGraderPreprocessor as Preprocessor
from traitlets import Bool, Integer, Unicode

from autograder import api, exchange
from autograder.cells import check_calls, grade_id, is_test_cell, nbgrader_meta
from autograder.core import UNDEFINED_NAME, Finding, Verdict, missing_import
from autograder.printable import shown
from autograder.sandbox import SandboxedKernelManager, prepare_root
from grader.notebook import clean
from grader.notebook.kernels import AHEAD

HIDDEN_TESTS = re.compile(r"### BEGIN HIDDEN TESTS.*?### END HIDDEN TESTS", re.DOTALL)
HIDDEN_PLACEHOLDER = "# (hidden tests, run at grading time)"
MAX_RECOVERIES = 3  # kernels a notebook may kill or hang before the rest of it is not run
OUTPUT_MESSAGES = {"stream", "display_data", "execute_result", "update_display_data", "error"}
KERNEL_LOG_BYTES = 2**20  # what is kept of the kernel process's own output
LOGGED_ERRORS = 2  # per cell


class NotebookFailed(RuntimeError):
    """The notebook as a whole could not be graded; the message is the reason shown to people."""


def refuse(failure_file: str, reason: str) -> NotebookFailed:
    """The exception to raise for a notebook that cannot be graded, its reason saved first: the
    grader reads it from that file, never from the log, where a student's text can be."""
    if failure_file:
        Path(failure_file).write_text(reason)
    return NotebookFailed(reason)


class JudgedExecute(Execute):
    """Execute in a sandboxed kernel; judge each test cell's checks in this (trusted) process.

    Before a test cell runs, the cases of the checks it calls are drawn here (seeds from the
    batch) and written to the exchange; after it ran, the outputs the kernel wrote are read
    back as data and judged against the reference. The cell's outputs become the verdicts:
    whatever the kernel printed, patched or redefined, the grade is the judge's.

    A notebook that stops early (the kernel died, a cell would not stop, the total time ran
    out) keeps the verdicts reached so far; the test cells after it fail with the reason.
    """

    notebook_timeout = Integer(900, help="Seconds the whole notebook may run.").tag(config=True)
    output_bytes = Integer(4 * 2**20, help="Output a notebook may keep; the rest is dropped.").tag(
        config=True
    )
    batch_seed = Integer(0, help="The batch's seed: the cases of every check derive from it.").tag(
        config=True
    )
    sandboxed = Bool(True, help="Run the kernel under bubblewrap.").tag(config=True)
    sandbox_parent = Unicode("", help="The batch's folder for sandboxes (default: the system's).").tag(
        config=True
    )
    kernel_log = Unicode("", help="Where the start of the kernel process's own output is kept.").tag(
        config=True
    )
    reasons_file = Unicode("", help="JSON list of what cost points outside the checks.").tag(config=True)
    verdicts_file = Unicode("", help="JSON list of the verdicts, as data (the class report's).").tag(
        config=True
    )
    kernels_ahead = Bool(
        False, help="Start the next notebook's kernel while this one runs (a batch's worker: kernels.py)."
    ).tag(config=True)
    store_widget_state = Bool(False)  # widget state from the kernel is unbounded, and not graded

    def create_kernel_manager(self):
        manager = AHEAD.take(self._kernel_settings())  # None unless the notebook before started one
        if manager is None:
            manager = self._new_kernel_manager()
            self.log.info("[course] kernel: started now")
        else:
            manager.log = self.log
            self.log.info("[course] kernel: started ahead, while the previous notebook ran")
        self.km = self._sandbox = manager
        self._root = Path(manager.root)
        return manager

    def _new_kernel_manager(self) -> SandboxedKernelManager:
        root = Path(tempfile.mkdtemp(prefix="k-", dir=self.sandbox_parent or None))  # short: socket paths
        prepare_root(root)
        return SandboxedKernelManager(
            kernel_name=self.kernel_name or "python3",
            config=self.config,
            root=str(root),
            sandboxed=self.sandboxed,
            # Written inside the sandbox's root, which only the grader can reach: the kernel holds
            # that file and could make it anything (setuid root, where the sandbox maps to root).
            log_file=str(root / "kernel.out"),
            log=self.log,  # what its process group stopped goes to the notebook's log
        )

    def _kernel_settings(self) -> str:
        """What a kernel started ahead must have been made with to serve this notebook."""
        made_with = [
            self.kernel_name,
            self.sandboxed,
            self.sandbox_parent,
            self.config.get("SandboxedKernelManager"),
        ]
        return json.dumps(made_with, sort_keys=True, default=str)

    async def async_start_new_kernel_client(self):
        if self.kernels_ahead:  # while this notebook waits for its kernel and runs
            await AHEAD.start_next(self._kernel_settings(), self._new_kernel_manager)
        return await super().async_start_new_kernel_client()

    # nbclient binds its synchronous name to its own coroutine function: bound again, to this one
    start_new_kernel_client = run_sync(async_start_new_kernel_client)

    def preprocess(self, nb, resources=None, km=None):
        self._deadline = time.monotonic() + self.notebook_timeout
        self._stopped: str | None = None
        self._judged: set[int] = set()
        self._broken: set[int] = set()  # cells that killed or hung a kernel: never run again
        self._kept_bytes = 0
        self._reasons: list[str] = []
        self._verdicts: list[dict] = []  # each test's verdict as data (Verdict.record), in order
        self._errors: dict[int, str] = {}  # the first error of each cell that is not a test, as text
        self._sandbox: SandboxedKernelManager | None = None
        self._root: Path | None = None  # the kernel's, once it has one
        try:
            nb, resources = super().preprocess(nb, resources, km)
        finally:
            if self._sandbox is not None:  # nbclient lets go of self.km once the kernel is shut down
                self._sandbox.end_process_group()  # nothing of the kernel runs on while its folders go
            if self._root is not None:
                self._keep_kernel_log()
                self._remove_root()
        for index, cell in enumerate(nb.cells):  # a display update from a later cell rewrites earlier outputs
            if cell.cell_type == "code" and not is_test_cell(cell):
                self._clean(cell, index)
        not_run = [i for i, cell in enumerate(nb.cells) if is_test_cell(cell) and i not in self._judged]
        for index in not_run:
            calls = check_calls(nb.cells[index].source)
            verdicts = [
                _failure(n, h, f"not run: {self._stopped}", "not run: the notebook stopped") for n, h in calls
            ]
            self._verdicts += [v.record(h) for v, (_, h) in zip(verdicts, calls, strict=True)]
            nb.cells[index].outputs = _outputs(verdicts)
        if self._stopped:
            self._note(f"notebook stopped: {self._stopped}; {len(not_run)} test cells did not run (0 points)")
        if self.reasons_file:
            Path(self.reasons_file).write_text(json.dumps(self._reasons))
        if self.verdicts_file:
            Path(self.verdicts_file).write_text(json.dumps(self._verdicts))
        return nb, resources

    def _clean(self, cell, index: int) -> None:
        for kind in clean.clean_cell(cell):
            self.log.warning("[course] cell %s: an output of type %r was dropped", _label(cell, index), kind)

    def _keep_kernel_log(self) -> None:
        """The start of what the kernel process printed, copied as data into a new file of the
        grader's (ordinary mode) beside the run."""
        if not self.kernel_log:
            return
        try:
            fd = os.open(self._root / "kernel.out", os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
            with os.fdopen(fd, "rb") as printed:
                start = printed.read(KERNEL_LOG_BYTES) if stat.S_ISREG(os.fstat(fd).st_mode) else b""
        except OSError as error:  # the kernel holds that file: it may have made it unreadable
            start = f"[the kernel's own output could not be read: {error.strerror}]\n".encode()
        Path(self.kernel_log).write_bytes(start)

    def _remove_root(self) -> None:
        """Remove the sandbox's folders; a failure is logged, never the notebook's: it was graded."""
        try:
            exchange.remove_tree(self._root)
        except OSError as error:
            self.log.warning("[course] the sandbox's folder %s could not be removed: %s", self._root, error)

    def preprocess_cell(self, cell, resources, index):
        if self._stopped or cell.cell_type != "code":
            return cell, resources
        if time.monotonic() >= self._deadline:
            self._stopped = self._past_deadline()
            return cell, resources
        calls = self._prepare_checks(cell)
        crash = None
        source = cell.source
        if calls is not None:  # the kernel gets the grader's calls, never the test's source (hidden tests)
            cell.source = _kernel_source(calls)
        try:
            cell, resources = super().preprocess_cell(cell, resources, index)
        except (DeadKernelError, CellTimeoutError) as error:
            crash = (
                "the kernel died (it crashed, exited or ran out of memory)"
                if isinstance(error, DeadKernelError)
                else "it did not stop at its time limit, even when interrupted"
            )
            cell.outputs.append(new_output("error", ename="CellSkipped", evalue=crash, traceback=[crash]))
            self._recover(index, f"cell {_label(cell, index)}: {crash}")
        finally:
            cell.source = source
        self._clean(cell, index)
        self._report_errors(cell, index)
        if calls is not None:
            self._judge(cell, index, calls, crash)
        return cell, resources

    def _recover(self, index: int, what: str) -> None:
        """Go on in a fresh kernel that has re-run every earlier cell but those that broke one.

        A cell that kills or hangs its kernel costs its own result, not the other cells'.
        """
        self._broken.add(index)
        if len(self._broken) > MAX_RECOVERIES:
            self._stopped = f"{what}, after {MAX_RECOVERIES} kernels were lost already"
            return
        self._note(f"{what}: skipped, and the cells before it re-run in a fresh kernel")
        run_sync(self.km.restart_kernel)(now=True)
        run_sync(self.kc.wait_for_ready)(timeout=60)
        for earlier, cell in enumerate(self.nb.cells[:index]):
            if time.monotonic() >= self._deadline:  # replays count towards the notebook's limit too
                self._stopped = self._stopped or self._past_deadline()
            if self._stopped or cell.cell_type != "code" or earlier in self._broken or is_test_cell(cell):
                continue
            try:
                self.execute_cell(copy.deepcopy(cell), earlier, store_history=False)
            except (DeadKernelError, CellTimeoutError):
                self._recover(earlier, f"cell {_label(cell, earlier)} broke the kernel when re-run")
            finally:
                self.nb.cells[earlier] = cell  # the replay's outputs are not the cell's

    def _past_deadline(self) -> str:
        return f"the notebook ran past its total time limit of {self.notebook_timeout} s"

    def _note(self, reason: str) -> None:
        """Something that cost points outside the checks: logged, and kept for grades.csv."""
        self._reasons.append(reason)
        self.log.warning("[course] %s", reason)

    def _get_timeout(self, cell):
        per_cell = super()._get_timeout(cell)
        # Rounded up: a cell cut off by the notebook's limit ends past it, so none starts after it
        # (rounded down, a test cell could start in the last second and run past the limit).
        remaining = max(1, math.ceil(self._deadline - time.monotonic()))
        return min(per_cell or remaining, remaining)

    def process_message(self, msg, cell, cell_index):
        """Every message the kernel sends on a cell: widget messages dropped, outputs bounded, and
        a message nbclient or nbformat cannot take (a string as execution_count, a status without
        a state) dropped with a line in the log, instead of failing the notebook."""
        kind = msg["msg_type"]
        if kind.startswith("comm"):  # widgets are not graded, and their state is unbounded
            return None
        if kind in OUTPUT_MESSAGES and (msg := self._bounded(msg, cell, cell_index)) is None:
            return None
        try:
            return super().process_message(msg, cell, cell_index)
        except CellExecutionComplete:  # how nbclient learns that the cell is done
            raise
        except Exception as error:
            what = f"a malformed {kind} message was dropped ({type(error).__name__})"
            self.log.warning("[course] cell %d: %s", cell_index, what)
            return None

    def _bounded(self, msg, cell, cell_index):
        """The output message within the notebook's `output_bytes`, or None once they are spent.

        Every kind counts, display updates once per output they rewrite. An error keeps its
        name and message, cut short, without its traceback. Past the cap only a test cell's first
        error is kept: the verdict cites it when the cell sent no results."""
        kind, content = msg["msg_type"], msg["content"]
        display_id = (content.get("transient") or {}).get("display_id")
        copies = sum(map(len, self._display_id_map.get(display_id, {}).values())) if display_id else 0
        size = len(str(content)) * (1 + copies)
        if kind == "error" and size > clean.MAX_ERROR_CHARS:
            ename = str(content.get("ename"))[: clean.MAX_ENAME_CHARS]
            evalue = str(content.get("evalue"))[: clean.MAX_ERROR_CHARS]
            msg = {**msg, "content": {**content, "ename": ename, "evalue": evalue, "traceback": []}}
            size = len(ename) + len(evalue)
        cited = (
            kind == "error" and is_test_cell(cell) and not any(o.output_type == "error" for o in cell.outputs)
        )
        if self._kept_bytes + size > self.output_bytes and not cited:
            if self._kept_bytes <= self.output_bytes:
                self._kept_bytes = self.output_bytes + 1
                self.log.warning(
                    "[course] output beyond %d bytes dropped (cell %d)", self.output_bytes, cell_index
                )
                truncated = f"[output truncated at {self.output_bytes} bytes]\n"
                cell.outputs.append(new_output("stream", name="stdout", text=truncated))
            return None
        self._kept_bytes += size
        return msg

    # ---------------------------------------------------------------- the judge's side

    def _prepare_checks(self, cell) -> list | None:
        """Draw and write the cases of the cell's checks; None for cells that are not tests."""
        if not is_test_cell(cell):
            return None
        folder = self._root / "exchange"
        exchange.prepare(folder)
        calls = []
        for name, hidden in check_calls(cell.source):
            drawn = api.draw(name, hidden=hidden, seed=api.grading_seed(self.batch_seed, name, hidden))
            exchange.write_cases(folder, name, hidden, drawn.cases)
            calls.append((name, hidden, drawn))
        return calls

    def _judge(self, cell, index: int, calls: list, crash: str | None) -> None:
        label = _label(cell, index)
        error = next((o for o in cell.get("outputs", []) if o.output_type == "error"), None)
        for output in cell.get("outputs", []):
            if output.output_type != "error":
                self.log.warning(
                    "[course] test cell %s printed output of its own (ignored): %.120r",
                    label,
                    str(output.get("text") or output.get("data", "")),
                )
        verdicts = [self._verdict(label, index, n, h, drawn, error, crash) for n, h, drawn in calls]
        self._verdicts += [v.record(h) for v, (_, h, _) in zip(verdicts, calls, strict=True)]
        cell.outputs = _outputs(verdicts)
        for cells in self._display_id_map.values():  # a later display update must not touch the verdicts
            cells.pop(index, None)
        self._judged.add(index)

    def _verdict(
        self, label: str, index: int, name: str, hidden: bool, drawn: api.Drawn, error, crash: str | None
    ) -> Verdict:
        """The judge's verdict on what the kernel sent for one check. Whatever the kernel sent
        costs at most this check: the grader's own failures on it are caught and logged here."""
        try:
            return self._judged_verdict(label, index, name, hidden, drawn, error, crash)
        except Exception:
            details = traceback.format_exc()
            self.log.warning("[course] test cell %s: judging %s failed:\n%s", label, name, details)
            return _failure(name, hidden, "the grader could not judge the results of this test", "not judged")

    def _judged_verdict(self, label, index, name, hidden, drawn, error, crash) -> Verdict:
        folder = self._root / "exchange"
        try:
            results = exchange.read_results(folder, name, hidden, len(drawn.cases))
        except exchange.MalformedResults as problem:
            self.log.warning("[course] test cell %s: malformed results for %s: %s", label, name, problem)
            return _failure(
                name, hidden, f"the results of this test are malformed: {problem}", "malformed results"
            )
        if results is None:
            if crash or self._stopped:
                why = kind = crash or self._stopped
            elif error is not None:
                cause = self._undefined(str(error.evalue), index)
                why = f"the cell raised {error.ename}: {error.evalue}{cause}"
                kind = f"the test cell raised {shown(str(error.ename))[:80]}"
            else:
                why = kind = "`check` was redefined, patched or bypassed"
                self.log.warning("[course] test cell %s: no results came back for %s: %s", label, name, why)
            return _failure(
                name, hidden, f"no results came back from this test: {why}", f"no results: {kind}"
            )
        verdict = api.judge_results(drawn, results)
        if not verdict.passed and (cause := self._undefined(verdict.message, index)):
            verdict = dataclasses.replace(verdict, message=verdict.message + cause)
        self.log.info("[course] %s", str(verdict).replace("\n", "\n    "))  # student text stays indented
        return verdict

    def _report_errors(self, cell, index: int) -> None:
        """Name, in the log, each error raised outside test cells (a sandbox denial shows up here)."""
        if is_test_cell(cell):
            return
        errors = [o for o in cell.get("outputs", []) if o.output_type == "error"]
        label = _label(cell, index)
        if errors:
            first = errors[0]
            text = f"{shown(first.ename)}: {str(first.evalue)[: clean.MAX_ERROR_CHARS]}"
            self._errors[index] = text + missing_import(str(first.evalue))
        for error in errors[:LOGGED_ERRORS]:  # an interrupt, then the time-out, say; a kernel can send many
            self.log.warning("[course] cell %s raised %s: %.200r", label, shown(error.ename), error.evalue)
        if len(errors) > LOGGED_ERRORS:
            self.log.warning("[course] cell %s raised %d more errors", label, len(errors) - LOGGED_ERRORS)

    def _undefined(self, message: str, index: int) -> str:
        """Why a name that `message` (an error's, a verdict's) reports as not defined is not: the
        cell above that defines it stopped early (an import it lacks, say), or no cell defines it."""
        found = UNDEFINED_NAME.search(message)
        if found is None:
            return ""
        name = found.group(1)
        defines = re.compile(rf"^(class|def)\s+{name}\b|^{name}\s*=", re.MULTILINE)
        above = self.nb.cells[:index]
        cells = [i for i, c in enumerate(above) if c.cell_type == "code" and defines.search(c.source)]
        if not cells:
            return f"\nNo cell above this test defines {name}."
        if cells[-1] in self._errors:
            where = _label(self.nb.cells[cells[-1]], cells[-1])
            return (
                f"\nThe cell that defines {name}, {where}, stopped before it did: {self._errors[cells[-1]]}"
            )
        return ""


def _failure(name: str, hidden: bool, message: str, unjudged: str) -> Verdict:
    """A check failed without its outputs being judged (not run, nothing or garbage sent back);
    `unjudged` says which, in a few words the class report counts."""
    return Verdict(name, False, message, api.points(name, hidden), finding=Finding(unjudged=unjudged))


def _kernel_source(calls: list) -> str:
    """What a test cell runs in the kernel: its checks' calls, written by the grader."""
    return "\n".join(
        f"check({name!r}, {api.get_check(name).target_source}, hidden={hidden})" for name, hidden, _ in calls
    )


def _label(cell, index: int) -> str:
    return f"{grade_id(cell) or 'untracked'} (#{index})"


def _outputs(verdicts: list[Verdict]) -> list:
    """A test cell's outputs as nbgrader grades them: every check passed is full marks (text
    only); nothing earned is an error output (0); in between, the verdicts as text and then
    the points earned as the cell's result, which nbgrader records as partial credit."""
    if not verdicts:  # never full marks for a cell nothing judged (tests/test_notebooks.py forbids it)
        problem = "this test cell calls no check"
        return [new_output("error", ename="CheckFailed", evalue=problem, traceback=[problem])]
    text = [new_output("stream", name="stdout", text=f"{v}\n") for v in verdicts]
    earned = sum(v.points for v in verdicts)
    if all(v.passed for v in verdicts):
        return text
    if earned > 0:
        return [*text, new_output("execute_result", data={"text/plain": f"{earned:g}"}, execution_count=None)]
    return [
        new_output("error", ename="CheckFailed", evalue=str(v), traceback=[f"CheckFailed: {v}"])
        if not v.passed
        else new_output("stream", name="stdout", text=f"{v}\n")
        for v in verdicts
    ]


class HideHiddenTests(Preprocessor):
    def preprocess(self, nb, resources):
        for cell in nb.cells:
            cell.source = HIDDEN_TESTS.sub(HIDDEN_PLACEHOLDER, cell.source)
        return nb, resources


class PlainErrors(Preprocessor):
    """Errors as `Name: message` only: tracebacks would show hidden tests and grader code."""

    def preprocess(self, nb, resources):
        for cell in nb.cells:
            for output in cell.get("outputs", []):
                if output.output_type == "error":
                    output.traceback = [f"{output.ename}: {output.evalue}"]
        return nb, resources


class Canonicalize(Preprocessor):
    """Put a submission back into the shape of the release, before nbgrader's OverwriteCells.

    - A notebook of another assignment (or none of this one's cells) is refused with a reason.
    - Deleted locked cells come back from the release (nbgrader 0.9.6's add_missing_cells
      crashes when the cell before a deleted one is a plain locked cell).
    - Tracked cells go back into the release's order, each keeping the untracked cells the
      student wrote after it, so a test cell moved above its answer still tests it.
    - Locked cells come back as released (source, type, points); answer cells keep the
      student's source with the release's type and grading metadata.
    """

    release_directory = Unicode("", help="Folder holding <assignment>/<notebook>.ipynb as released.").tag(
        config=True
    )
    failure_file = Unicode("", help="Where the reason is written when the notebook is refused.").tag(
        config=True
    )

    def preprocess(self, nb, resources):
        info = resources["nbgrader"]
        released = self._release(info["assignment"], info["notebook"])
        order = [grade_id(c) for c in released.cells if grade_id(c)]
        by_id = {grade_id(c): c for c in released.cells if grade_id(c)}
        self._check_identity(nb, info["assignment"], released)

        anchor = None
        mine: dict[str, object] = {}
        following: dict[str | None, list] = {None: []}
        for cell in nb.cells:
            gid = grade_id(cell)
            if gid in by_id and gid not in mine:
                anchor = gid
                mine[gid] = cell
                following[gid] = []
            else:
                if gid is not None:
                    self.log.warning(  # the id is the student's: one line, whatever it holds
                        "[course] cell %s is not part of this notebook: kept, not graded", shown(str(gid))
                    )
                cell.metadata.pop("nbgrader", None)  # e.g. the {} DeduplicateIds leaves on a copy
                following[anchor].append(cell)
        if [g for g in order if g in mine] != list(mine):
            self.log.warning("[course] tracked cells were moved: put back in the released order")
        cells = list(following[None])
        for gid in order:
            if gid in mine:
                cells += [self._restored(mine[gid], by_id[gid]), *following[gid]]
            elif nbgrader_meta(by_id[gid]).get("locked"):
                self.log.warning("[course] locked cell %s was deleted: restored", gid)
                cells.append(copy.deepcopy(by_id[gid]))
        nb.cells = cells
        return nb, resources

    def _restored(self, cell, released):
        """A locked cell as released; an answer cell with the student's source, the release's type and
        grading metadata (OverwriteCells then puts back hidden tests and checks what it knows of)."""
        changed = [
            what
            for what, differs in (
                ("cell type", cell.cell_type != released.cell_type),
                ("grading metadata", _grading(cell) != _grading(released)),
                ("source", nbgrader_meta(released).get("locked") and cell.source != released.source),
            )
            if differs
        ]
        if changed:
            self.log.warning("[course] cell %s: %s changed: restored", grade_id(released), ", ".join(changed))
        if nbgrader_meta(released).get("locked"):
            return copy.deepcopy(released)
        answer = copy.deepcopy(released)
        answer.source = cell.source
        return answer

    def _release(self, assignment: str, notebook: str):
        return nbformat.read(Path(self.release_directory) / assignment / f"{notebook}.ipynb", as_version=4)

    def _check_identity(self, nb, assignment: str, released) -> None:
        ids = {grade_id(c) for c in nb.cells} - {None}
        if ids & _answer_ids(released):
            return
        for other in sorted(Path(self.release_directory).iterdir()):
            if other.name != assignment and any(
                ids & _answer_ids(nbformat.read(f, as_version=4)) for f in other.glob("*.ipynb")
            ):
                raise refuse(
                    self.failure_file, f"this file holds the notebook of {other.name}, not {assignment}"
                )
        if not ids & {grade_id(c) for c in released.cells}:
            raise refuse(
                self.failure_file,
                f"none of the cells of {assignment} are in this file: was it made from the released "
                "notebook?",
            )


def _grading(cell) -> dict:
    """What decides how a cell is graded (not nbgrader's checksums and versions)."""
    return {
        k: nbgrader_meta(cell).get(k) for k in ("grade", "solution", "locked", "task", "points", "grade_id")
    }


def _answer_ids(notebook) -> set[str]:
    return {grade_id(c) for c in notebook.cells if nbgrader_meta(c).get("solution")}
