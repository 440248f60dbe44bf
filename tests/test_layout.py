"""The house's shape (docs/design.md, "Layout"): what a student has (autograder/) never imports
the instructor's side (grader/), and no two modules import each other, however indirectly."""

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("autograder", "grader")


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for package in PACKAGES for p in sorted((REPO / package).rglob("*.py"))}


def imported(path: Path, name: str, known: set[str], *, top_level: bool) -> set[str]:
    """The course's modules that a module imports: all of them, or only those its import runs
    (top level, not under `if TYPE_CHECKING:`, not inside a function)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    nodes = tree.body if top_level else list(ast.walk(tree))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            found |= {f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names}
    return {m for m in found if m in known}


def test_no_module_a_student_gets_imports_the_instructors_package():
    """autograder/ ships whole and runs in the sandboxed kernel, where grader/ is not mounted: an
    import of it there, even inside a function, would fail a student's copy or a grading kernel."""
    known = set(modules())
    found = {
        name: sorted(m for m in imported(path, name, known, top_level=False) if m.startswith("grader"))
        for name, path in modules().items()
        if name.startswith("autograder")
    }
    assert {name: m for name, m in found.items() if m} == {}


def test_no_import_cycle():
    known = set(modules())
    graph = {name: imported(path, name, known, top_level=True) - {name} for name, path in modules().items()}
    assert graph["grader.grading"], "no imports found: the test would pass vacuously"
    cycles, done = [], set()

    def visit(name: str, path: list[str]) -> None:
        if name in path:
            cycles.append(path[path.index(name) :] + [name])
            return
        if name in done:
            return
        for other in sorted(graph[name]):
            visit(other, [*path, name])
        done.add(name)

    for name in sorted(graph):
        visit(name, [])
    assert cycles == []
