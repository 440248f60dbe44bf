"""What a student has: the checks (run in the notebooks and judged at grading), self-study and the
student's commands. A release ships this package as it is; the instructor's side is grader/."""

from importlib import import_module

# Each public name is imported on first use (PEP 562): `course --help`, and the commands that need
# no torch, start without importing it (about 3 s idle, 12 s on a loaded machine).
_PUBLIC = {
    "check": ".api",
    "evaluate": ".api",
    "CHECKS": ".checks",
    "CheckFailed": ".core",
    "Verdict": ".core",
}
__all__ = sorted(_PUBLIC)


def __getattr__(name: str):
    if name in _PUBLIC:
        return getattr(import_module(_PUBLIC[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
