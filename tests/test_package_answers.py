"""No object of the shipped `autograder` package answers a question.

The package is importable in every grading kernel and shipped to students, so a function or
class defined in it that passes a check is a free answer (there were some: a gradient step
computed with autograd, a trusted attention module, the causal mask the cases used). This
test imports every module of the package, collects every callable defined there, and judges
each one as the answer to every check, on hidden cases drawn from a fixed seed. For a check
of several objects, e.g. (MLP, train), it tries each slot in turn with the reference's
objects in the others, so that "the package answers this part" is caught too.

Package functions called with tensors must do no damage (some delete folders, others start
processes), so the candidates run in a child process under an audit hook that refuses to
write, delete or rename files, start processes or threads, open sockets, load libraries or
change the process's limits, and that hides solutions/, which the student's side does not
have. The reference runs before the hook is installed; run through the same harness before
and after the candidates, it must pass every check, so that a harness that breaks everything
cannot pass this test vacuously.
"""

import importlib
import inspect
import json
import os
import pkgutil
import signal
import subprocess
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import autograder
from autograder import reference
from autograder.api import make_cases
from autograder.checks import CHECKS
from autograder.core import expectations, judge, run_stage
from autograder.paths import SOLUTIONS

REPO = Path(__file__).resolve().parents[1]
SEED = 20240611
TIME_LIMIT_S = 30  # per candidate and check: the longest honest run trains two MLPs
CHILD_TIMEOUT_S = 600  # 126 s of CPU alone, 241 s wall beside the suite's other worker on 2 cores (11-29)

# Audit events (https://docs.python.org/3/library/audit_events.html) refused to candidates:
# everything that changes files, starts a process or a thread, reaches the network, or changes
# this process's limits or folder (the grader's own helpers set rlimits, for instance).
REFUSED_EVENTS = {
    "os.chmod", "os.chown", "os.chflags", "os.link", "os.mkdir", "os.remove", "os.rename",
    "os.rmdir", "os.symlink", "os.truncate", "os.utime", "os.putenv", "os.unsetenv",
    "os.setxattr", "os.removexattr", "shutil.rmtree", "shutil.move", "shutil.copyfile",
    "os.system", "os.exec", "os.fork", "os.forkpty", "os.posix_spawn", "os.spawn", "os.kill",
    "os.killpg", "subprocess.Popen", "pty.spawn", "_thread.start_new_thread",
    "ctypes.dlopen", "ctypes.dlsym", "ctypes.call_function", "resource.setrlimit",
    "resource.prlimit", "os.chdir",
}  # fmt: skip
REFUSED_PREFIXES = ("socket.", "urllib.", "http.", "ftplib.", "smtplib.", "webbrowser.")
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


# ------------------------------------------------------------------ the test (parent side)


def test_no_package_object_passes_a_check():
    child = subprocess.run(
        [sys.executable, "-m", "tests.test_package_answers"],
        cwd=REPO,
        env={**os.environ, "OMP_NUM_THREADS": "1"},  # tiny tensors, as in tests/conftest.py
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=CHILD_TIMEOUT_S,
    )
    assert child.returncode == 0, child.stderr[-3000:]
    report = json.loads(child.stdout)
    assert not report["control_failures"], f"the harness fails the reference itself: {report}"
    assert report["candidates"] > 100, report  # the whole package was searched
    passes = [f"{name} passes {check} as {slot}" for name, check, slot in report["passes"]]
    assert not passes, "objects of the shipped package answer questions:\n" + "\n".join(passes)


# ------------------------------------------------------------------ the child process


def package_modules() -> list:
    return [autograder] + [
        importlib.import_module(info.name)
        for info in pkgutil.walk_packages(autograder.__path__, "autograder.")
    ]


def _from_package(obj: Any) -> bool:
    """Defined in the package: functions and classes by their module, instances by their class's."""
    module = getattr(obj, "__module__", None) or type(obj).__module__
    return isinstance(module, str) and module.startswith("autograder")


def candidates() -> dict[str, Any]:
    """Every callable a student can import from the package, by its dotted name.

    Module attributes (functions, classes, callable instances), and the functions, static and
    class methods that classes of the package define. Non-callable objects (a Check, a table of
    tolerances) cannot be answers: every check calls what it is given.
    """
    found: dict[int, tuple[str, Any]] = {}
    for module in package_modules():
        for name, obj in vars(module).items():
            if callable(obj) and _from_package(obj):
                found.setdefault(id(obj), (f"{module.__name__}.{name}", obj))
                if inspect.isclass(obj):
                    for member_name, member in _members(obj):
                        found.setdefault(id(member), (f"{module.__name__}.{name}.{member_name}", member))
    return dict(found.values())


def _members(cls: type) -> Iterator[tuple[str, Any]]:
    for name in vars(cls):
        if name.startswith("__"):
            continue
        member = inspect.getattr_static(cls, name)
        if isinstance(member, staticmethod | classmethod) or inspect.isfunction(member):
            yield name, getattr(cls, name)


def slots(check, obj: Any, reference: Any) -> Iterator[tuple[str, Any]]:
    """`obj` as the whole answer, or in each slot of a several-object answer beside the reference's."""
    if isinstance(check.target, str):
        yield check.target, obj
        return
    for i, slot in enumerate(check.target):
        if slot not in check.diagnostic:  # called to name a mistake, never graded
            yield slot, tuple(obj if j == i else part for j, part in enumerate(reference))


def passes(check, answer: Any, cases: list, expected: list) -> bool:
    """Judged case by case, stopping at the first failure (the verdict of `judge` on them all)."""
    for case, expect in zip(cases, expected, strict=True):
        signal.alarm(TIME_LIMIT_S)
        try:
            result = run_stage(check, answer, [case])
        except BaseException:  # SystemExit and the like escape run_stage: a failure all the same
            return False
        finally:
            signal.alarm(0)
        if not judge(check, [case], result, [expect], []).passed:
            return False
    return True


def _on_alarm(signum, frame):
    raise TimeoutError(f"no answer within {TIME_LIMIT_S} s")


def _student_side_audit(solutions: str):
    """An audit hook that refuses what could damage this machine, and reading solutions/."""

    def hook(event: str, args: tuple) -> None:
        if event in REFUSED_EVENTS or event.startswith(REFUSED_PREFIXES):
            raise PermissionError(f"refused to a candidate answer: {event}")
        if event == "open" and (
            (isinstance(args[1], str) and set(args[1]) & set("wax+")) or (args[2] or 0) & WRITE_FLAGS
        ):
            raise PermissionError(f"refused to a candidate answer: writing {args[0]}")
        if event in ("open", "os.listdir", "os.scandir") and str(args[0]).startswith(solutions):
            raise FileNotFoundError(f"{args[0]}: solutions/ is not on the student's side")

    return hook


def judging_plan() -> list[tuple]:
    """(name, check, reference answer, hidden cases, expectations) for every check."""
    plan = []
    for name, check in CHECKS.items():
        cases = make_cases(name, hidden=True, seed=SEED)
        answer = reference.reference_object(name, check.target)
        plan.append((name, check, answer, cases, expectations(check, answer, [], cases)))
    return plan


def control(plan: list[tuple]) -> list[str]:
    """The checks that the reference fails when run through this harness (none, when it works)."""
    return [
        name for name, check, answer, cases, expected in plan if not passes(check, answer, cases, expected)
    ]


def passing(plan: list[tuple], found: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(candidate, check, slot) for each candidate that passes a check in some slot."""
    return [
        (candidate, name, slot)
        for name, check, answer, cases, expected in plan
        for candidate, obj in found.items()
        for slot, attempt in slots(check, obj, answer)
        if passes(check, attempt, cases, expected)
    ]


def main() -> None:
    report_fd = os.dup(1)  # the report goes there; whatever else is printed goes nowhere
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
    warnings.simplefilter("ignore")  # candidates called with odd arguments warn a lot
    signal.signal(signal.SIGALRM, _on_alarm)
    found, plan = candidates(), judging_plan()
    failures = control(plan)  # also imports what torch loads lazily, before the hook refuses it
    sys.dont_write_bytecode = True
    reference.namespace.cache_clear()
    reference.instructor_module.cache_clear()
    sys.addaudithook(_student_side_audit(str(SOLUTIONS.resolve())))
    failures += control(plan)
    passes_found = passing(plan, found)
    report = {"candidates": len(found), "control_failures": failures + control(plan), "passes": passes_found}
    os.write(report_fd, json.dumps(report).encode())


if __name__ == "__main__":
    main()
