"""The reference implementation, read from the solution notebooks (never copied).

The reference of an assignment is what its source notebook defines: the cell with
grade_id 'imports' and every solution cell, executed in order in a fresh namespace. The
known mistakes, the checks' case generators and the tests' correct alternatives live beside the
notebook, in solutions/<assignment>/mistakes.py, cases.py and alternatives.py. All stay on the
instructor's side: nbgrader's release does not copy them, nor does the course's release.
"""

import importlib.util
from collections.abc import Callable
from functools import cache
from types import ModuleType
from typing import Any

import torch

from .cells import grade_id, nbgrader_meta
from .core import Case, Mistake
from .paths import SOLUTIONS, source_notebook


def assignment_of(check_name: str) -> str:
    """'07.rmsnorm' -> '07_rmsnorm' (the solutions folder whose number matches)."""
    number = check_name.split(".")[0]
    matches = [p.name for p in SOLUTIONS.iterdir() if p.name.startswith(f"{number}_")]
    if len(matches) != 1:
        raise LookupError(f"no single assignment numbered {number} in {SOLUTIONS}")
    return matches[0]


def is_reference_cell(cell) -> bool:
    meta = nbgrader_meta(cell)
    return cell.cell_type == "code" and (meta.get("solution") or meta.get("grade_id") == "imports")


@cache
def namespace(assignment: str) -> dict[str, Any]:
    path = source_notebook(assignment)
    if not path.exists():
        raise FileNotFoundError(
            f"{path} is not here: the reference solutions are only on the instructor's side."
        )
    import nbformat  # here: every kernel imports this module, and nbformat takes a second (its JSON schemas)

    notebook = nbformat.read(path, as_version=4)
    names: dict[str, Any] = {"__name__": f"reference_{assignment}"}
    for cell in notebook.cells:
        if is_reference_cell(cell):
            exec(compile(cell.source, f"{path.name}:{grade_id(cell)}", "exec"), names)
    return names


def reference_object(check_name: str, target: str | tuple[str, ...]) -> Any:
    names = namespace(assignment_of(check_name))
    return names[target] if isinstance(target, str) else tuple(names[t] for t in target)


@cache
def instructor_module(assignment: str, file: str) -> ModuleType | None:
    """solutions/<assignment>/<file> (mistakes.py, cases.py, alternatives.py), loaded by path as the
    module `<stem>_<assignment>` (e.g. alternatives_09_kv_cache), once: it is never released."""
    path = SOLUTIONS / assignment / file
    if not path.exists():
        return None
    spec = importlib.util.spec_from_file_location(f"{path.stem}_{assignment}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def mistakes(check_name: str) -> list[Mistake]:
    module = instructor_module(assignment_of(check_name), "mistakes.py")
    return list(getattr(module, "MISTAKES", {}).get(check_name, [])) if module else []


def case_generator(check_name: str) -> Callable[[torch.Generator, bool], list[Case]]:
    """The check's cases: (generator, hidden) -> cases, from solutions/<assignment>/cases.py."""
    try:
        module = instructor_module(assignment_of(check_name), "cases.py")
    except OSError:  # no solutions/ folder at all
        module = None
    if module is None:
        raise LookupError(
            "this copy of the course has the visible cases only (autograder/expected/): hidden cases are "
            "drawn where the solutions are, when the work is graded"
        )
    return module.CASES[check_name]
