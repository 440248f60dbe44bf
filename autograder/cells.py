"""What the course's notebook cells are, read from their nbgrader metadata and source."""

import ast


def nbgrader_meta(cell) -> dict:
    """A cell's nbgrader metadata ({} for cells nbgrader does not track, or a saved notebook's value
    that is not a mapping)."""
    meta = cell.metadata.get("nbgrader", {})
    return meta if isinstance(meta, dict) else {}


def grade_id(cell) -> str | None:
    """The nbgrader id of a cell, None for cells nbgrader does not track."""
    return nbgrader_meta(cell).get("grade_id")


def is_test_cell(cell) -> bool:
    """An autograded test cell: a locked code cell with points (not an answer cell)."""
    meta = nbgrader_meta(cell)
    return cell.cell_type == "code" and bool(meta.get("grade")) and not meta.get("solution")


def check_calls(source: str) -> list[tuple[str, bool]]:
    """The `check("NN.name", obj[, hidden=True])` calls of a test cell, in order.

    The grader reads them from the instructor's source of the cell (never the student's copy)
    to know which cases to prepare and which verdicts the cell earns.
    """
    calls = []
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "check"):
            continue
        if not (node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            raise ValueError("check() must name its check with a string literal")
        hidden = next((k.value for k in node.keywords if k.arg == "hidden"), ast.Constant(False))
        if not isinstance(hidden, ast.Constant) or not isinstance(hidden.value, bool):
            raise ValueError("check()'s hidden= must be True or False literally")
        calls.append(((node.lineno, node.col_offset), node.args[0].value, hidden.value))
    return [(name, hidden) for _, name, hidden in sorted(calls)]
