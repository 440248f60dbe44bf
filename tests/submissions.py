"""Synthetic submissions made from the release and the reference: the students of the tests."""

import hashlib
from pathlib import Path

import nbformat

from autograder.cells import grade_id, nbgrader_meta
from autograder.paths import NOTEBOOKS, SOLUTIONS, source_notebook


def release(assignment: str) -> nbformat.NotebookNode:
    """The untouched student notebook."""
    return nbformat.read(NOTEBOOKS / assignment / f"{assignment}.ipynb", as_version=4)


def solution_sources(assignment: str) -> dict[str, str]:
    notebook = nbformat.read(source_notebook(assignment), as_version=4)
    return {grade_id(c): c.source for c in notebook.cells if nbgrader_meta(c).get("solution")}


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
    """A perfect submission whose answer cell defines `target` as a known mistake instead.

    For a check of several names (`target` a tuple), the mistake is a tuple of as many objects."""
    module_source = (SOLUTIONS / assignment / "mistakes.py").read_text()
    names = [target] if isinstance(target, str) else list(target)
    impls = [impl] if isinstance(target, str) else list(impl)
    assignments = "".join(f"{name} = {obj.__name__}\n" for name, obj in zip(names, impls, strict=True))
    return with_answer(perfect(assignment), answer_id, f"{module_source}\n{assignments}")


def digests(folder: Path) -> dict[str, str]:
    """sha256 of every file under a folder: submissions must come out of grading unchanged."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }
