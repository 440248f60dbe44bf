"""Synthetic submissions made from the release and the reference: the students of the tests."""

import ast
import hashlib
import re
from collections.abc import Iterable
from functools import cache
from pathlib import Path

import nbformat

from autograder import evaluate
from autograder.api import draw, grading_seed, judge_results
from autograder.cells import grade_id, nbgrader_meta
from autograder.checks import CHECKS
from autograder.core import Check, Verdict, run_stage
from autograder.paths import NOTEBOOKS, SOLUTIONS, source_notebook
from autograder.reference import assignment_of, is_reference_cell, mistakes


def release(assignment: str) -> nbformat.NotebookNode:
    """The untouched student notebook."""
    return nbformat.read(NOTEBOOKS / assignment / f"{assignment}.ipynb", as_version=4)


def solution_sources(assignment: str) -> dict[str, str]:
    notebook = nbformat.read(source_notebook(assignment), as_version=4)
    return {grade_id(c): c.source for c in notebook.cells if nbgrader_meta(c).get("solution")}


SOLUTION_REGION = re.compile(r"### BEGIN SOLUTION\n(.*?)### END SOLUTION", re.DOTALL)


@cache
def answer_lines(assignment: str) -> frozenset[str]:
    """The lines of the reference's answers, stripped, less those the notebook gives too (notebook 03's
    loop splits q, k and v as the vectorised answer does) and lines of brackets alone."""
    cells = nbformat.read(source_notebook(assignment), as_version=4).cells
    given = {line.strip() for cell in cells for line in SOLUTION_REGION.sub("", cell.source).splitlines()}
    return frozenset(
        line.strip()
        for source in solution_sources(assignment).values()
        for region in SOLUTION_REGION.findall(source)
        for line in region.splitlines()
        if any(c.isalnum() for c in line) and line.strip() not in given
    )


def perfect(assignment: str) -> nbformat.NotebookNode:
    """The release with every answer cell filled in with the reference's answer."""
    notebook = release(assignment)
    answers = solution_sources(assignment)
    for cell in notebook.cells:
        if grade_id(cell) in answers:
            cell.source = answers[grade_id(cell)]
    return notebook


def with_answer(notebook: nbformat.NotebookNode, answer_id: str, source: str) -> nbformat.NotebookNode:
    for cell in notebook.cells:
        if grade_id(cell) == answer_id:
            cell.source = source
            return notebook
    raise KeyError(answer_id)


def mutant(assignment: str, answer_id: str, target: str | tuple[str, ...], impl) -> nbformat.NotebookNode:
    """A perfect submission whose answer cell ends by redefining `target` as a known mistake.

    The reference's answer stays above it, so the other names of a shared answer cell remain
    defined. For a check of several names (`target` a tuple), the mistake is a tuple of as
    many objects."""
    module_source = (SOLUTIONS / assignment / "mistakes.py").read_text()
    names = [target] if isinstance(target, str) else list(target)
    impls = [impl] if isinstance(target, str) else list(impl)
    assignments = "".join(f"{name} = {obj.__name__}\n" for name, obj in zip(names, impls, strict=True))
    answer = solution_sources(assignment)[answer_id]
    return with_answer(perfect(assignment), answer_id, f"{answer}\n\n{module_source}\n{assignments}")


@cache
def names_the_notebook_binds(assignment: str) -> frozenset[str]:
    """Every name a code cell of the source notebook binds at its top level, locked cells included:
    `mutant` pastes mistakes.py into an answer cell, and the cells after it run too."""
    notebook = nbformat.read(source_notebook(assignment), as_version=4)
    names = set()
    for cell in notebook.cells:
        if cell.cell_type != "code":
            continue
        for node in ast.walk(ast.parse(cell.source)):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
            elif isinstance(node, ast.FunctionDef | ast.ClassDef) and node.col_offset == 0:
                names.add(node.name)
            elif isinstance(node, ast.Import | ast.ImportFrom):
                names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
    return frozenset(names)


def namespace(notebook: nbformat.NotebookNode) -> dict:
    """What a notebook defines through its imports cell and answer cells, executed here."""
    names = {"__name__": "submission"}
    for cell in notebook.cells:
        if is_reference_cell(cell):
            exec(compile(cell.source, grade_id(cell), "exec"), names)
    return names


def objects_for(check: Check, names: dict):
    """What the test cell of `check` passes: one object, or a tuple of several."""
    objects = tuple(names[target] for target in check.target_names)
    return objects[0] if isinstance(check.target, str) else objects


def checks_of(assignment: str) -> list[str]:
    return [name for name in CHECKS if assignment_of(name) == assignment]


def verdicts_when_graded(
    notebook: nbformat.NotebookNode, batch_seed: int, checks: Iterable[str]
) -> dict[tuple[str, bool], Verdict]:
    """The verdict the grader must give each test cell (check, hidden) of `checks` in `notebook`,
    worked out here without kernel or sandbox, on the cases the batch seed draws. A check whose
    objects the notebook does not define has none: its test cell raises NameError, earning nothing."""
    names = namespace(notebook)
    verdicts = {}
    for name in checks:
        check = CHECKS[name]
        try:
            objects = objects_for(check, names)
        except KeyError:
            continue
        for hidden in (False, True):
            drawn = draw(name, hidden=hidden, seed=grading_seed(batch_seed, name, hidden))
            verdicts[name, hidden] = judge_results(drawn, run_stage(check, objects, drawn.cases))
    return verdicts


def score_when_graded(assignment: str, notebook: nbformat.NotebookNode, batch_seed: int) -> float:
    """The score the grader must give `notebook`: every check of its assignment, visible and hidden."""
    return sum(v.points for v in verdicts_when_graded(notebook, batch_seed, checks_of(assignment)).values())


def digests(folder: Path) -> dict[str, str]:
    """sha256 of every file under a folder: submissions must come out of grading unchanged."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def verdict(name: str, answer, seed: int | None = None) -> Verdict:
    """`answer` judged by check `name`, in this process: on its visible cases (seed None, from the
    snapshot, as a student's notebook judges them) or on the hidden cases that `seed` draws."""
    return evaluate(name, answer, hidden=seed is not None, seed=seed)


def parts(result: Verdict) -> dict[str, bool]:
    """Whether each concern of a verdict passed, by its name."""
    return {part.concern: part.passed for part in result.parts}


def mistake(name: str, impl_name: str):
    """The known mistake of check `name` whose implementation (or first object) is called `impl_name`."""
    impls = [m.impl for m in mistakes(name)]
    (impl,) = [i for i in impls if (i[0] if isinstance(i, tuple) else i).__name__ == impl_name]
    return impl
