"""`course release OUT`: what students get, and nothing of the instructor's.

    OUT/README.md                   for students: install, open, check, progress, submit
    OUT/environment.yml             conda, mamba and Binder; OUT/requirements.txt the same for pip
    OUT/notebooks/<a>/<a>.ipynb     the student notebooks (`course build`'s notebooks/)
    OUT/images/                     the course's figures
    OUT/checks/                     the visible checks, an installable package (`pip install ./checks`)
    OUT/<wheel>                     the same package built, for Google Colab (upload, then pip install)

The package is the student's side of `autograder` only: the checks (run and judge), the visible
cases with what they should give (autograder/expected/), self-study and progress. Each check's
case generator is taken out of its module with whatever only it used: the visible cases are in
the snapshots, the hidden ones are drawn at grading time from the instructor's copy. No
solutions/, no mistakes.py, no grading pipeline, no sandbox.
"""

import ast
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from .paths import EXPECTED, IMAGES, NOTEBOOKS, REPO

PACKAGE = REPO / "autograder"
# The modules a student's kernel and the student's commands import (tests/test_release.py imports
# each in a fresh environment, so a missing one fails there).
STUDENT_MODULES = [
    "__init__.py",
    "api.py",
    "cells.py",
    "core.py",
    "exchange.py",
    "language_model.py",
    "paths.py",
    "playground.py",
    "progress.py",
    "reference.py",  # finds no solutions/ in a release, and says so
    "selfstudy.py",
    "student.py",
]
STUDENT_DATA = ["expected/*.pt", "expected/questions.json", "data/course_model.pt"]
DISTRIBUTION = "transformer-internals-checks"
VERSION = "0.1.0"
# What the student's environment installs, by name: the pins come from requirements.lock.
STUDENT_REQUIREMENTS = ["torch", "jupyterlab", "ipywidgets", "matplotlib", "nbclient", "nbformat"]
STUDENT_REQUIREMENTS += ["nbconvert", "ipykernel"]
# The package's own requirements are lower bounds: on Colab, pip must not replace its torch.
PACKAGE_REQUIREMENTS = ["torch>=2.4", "ipywidgets>=7.6", "matplotlib>=3.7", "nbclient>=0.7", "nbformat>=5.7"]
TORCH_CPU_INDEX = "--extra-index-url https://download.pytorch.org/whl/cpu"  # Linux: not the CUDA build
TEMPLATE = PACKAGE / "templates" / "release" / "README.md"


def release(out: Path) -> list[Path]:
    """Write the bundle into `out` (new or empty); returns the files written."""
    out = Path(out)
    if out.exists() and any(out.iterdir()):
        raise SystemExit(f"{out} is not empty: give a new folder (nothing there is overwritten)")
    notebooks = sorted(NOTEBOOKS.glob("[0-9][0-9]_*/[0-9][0-9]_*.ipynb"))
    if not notebooks:
        raise SystemExit(f"no student notebooks in {NOTEBOOKS}: run `course build` first")
    for path in notebooks:
        target = out / "notebooks" / path.relative_to(NOTEBOOKS)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)
    shutil.copytree(IMAGES, out / "images", ignore=shutil.ignore_patterns(".*"))
    write_package(out / "checks")
    wheel = build_wheel(out / "checks", out)
    (out / "environment.yml").write_text(environment_yml(), encoding="utf-8")
    (out / "requirements.txt").write_text(requirements_txt(), encoding="utf-8")
    readme = TEMPLATE.read_text(encoding="utf-8").replace("{wheel}", wheel.name)
    (out / "README.md").write_text(readme, encoding="utf-8")
    return sorted(p for p in out.rglob("*") if p.is_file())


# ------------------------------------------------------------------------------ the package


def write_package(target: Path) -> None:
    package = target / "autograder"
    for name in STUDENT_MODULES:
        (package / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(PACKAGE / name, package / name)
    checks = {p.stem: p.read_text(encoding="utf-8") for p in sorted((PACKAGE / "checks").glob("*.py"))}
    (package / "checks").mkdir()
    for stem, source in without_case_generators(checks).items():
        (package / "checks" / f"{stem}.py").write_text(source, encoding="utf-8")
    for pattern in STUDENT_DATA:
        for path in sorted(PACKAGE.glob(pattern)):
            (package / path.relative_to(PACKAGE)).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, package / path.relative_to(PACKAGE))
    if not (package / EXPECTED.name / "questions.json").exists():
        raise SystemExit("autograder/expected/questions.json is missing: run `course build` first")
    (target / "pyproject.toml").write_text(package_pyproject(), encoding="utf-8")


def package_pyproject() -> str:
    requirements = "".join(f'    "{r}",\n' for r in PACKAGE_REQUIREMENTS)
    data = ", ".join(f'"{p}"' for p in STUDENT_DATA)
    return f"""[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[project]
name = "{DISTRIBUTION}"
version = "{VERSION}"
description = "The visible checks, hints and progress of the transformer-internals course"
requires-python = ">=3.10"
dependencies = [
{requirements}]

[project.scripts]
course = "autograder.student:main"

[tool.setuptools.packages.find]
include = ["autograder*"]

[tool.setuptools.package-data]
autograder = [{data}]
"""


def build_wheel(package: Path, out: Path) -> Path:
    """The package as a wheel, built here without the network (setuptools of this environment),
    from a copy: a build leaves build/ and *.egg-info beside the sources."""
    with tempfile.TemporaryDirectory() as tmp:
        sources, wheels = Path(tmp) / "package", Path(tmp) / "wheels"
        shutil.copytree(package, sources)
        command = [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation"]
        subprocess.run([*command, "--wheel-dir", str(wheels), str(sources)], check=True, cwd=tmp)
        (built,) = wheels.glob("*.whl")
        return Path(shutil.copy(built, out / built.name))


def pins() -> dict[str, str]:
    """requirements.lock's versions by normalised name."""
    found = {}
    for line in (REPO / "requirements.lock").read_text().splitlines():
        line = line.split("#")[0].strip()
        if "==" in line:
            name, version = line.split("==", 1)
            found[normalised(name)] = version.strip()
    return found


def normalised(name: str) -> str:
    return name.strip().lower().replace("_", "-").replace(".", "-")


def requirements_txt() -> str:
    locked = pins()
    lines = [TORCH_CPU_INDEX, *(f"{name}=={locked[normalised(name)]}" for name in STUDENT_REQUIREMENTS)]
    return "\n".join([*lines, "./checks"]) + "\n"


def environment_yml() -> str:
    pip_lines = "".join(f"      - {line}\n" for line in requirements_txt().splitlines())
    return f"""# conda env create -f environment.yml (or mamba; Binder reads it too)
name: transformer-internals-student
channels:
  - conda-forge
dependencies:
  - python=3.11
  - pip
  - pip:
{pip_lines}"""


# ----------------------------------------------------------- checks without their case generators

GENERATOR_STUB = "_cases_drawn_by_the_grader"
STUB_SOURCE = f'''

def {GENERATOR_STUB}(generator, hidden):
    """The cases of a check: in a student's copy, the visible ones come from autograder/expected/;
    the hidden ones are drawn when the work is graded."""
    raise LookupError("this copy of the course has the visible cases only (autograder/expected/)")
'''
ROOTS = {"CHECKS", "__all__"}


def without_case_generators(modules: dict[str, str]) -> dict[str, str]:
    """The checks package's modules (stem -> source) with each Check's `cases=` replaced by a stub
    that raises, and every top-level definition that only the generators used removed, across
    modules (a name another module imports stays while that import is used). Comments stay."""
    trees = {stem: ast.parse(source) for stem, source in modules.items()}
    live = {stem: set(ROOTS) for stem in trees}
    while True:  # grow the live names of every module until nothing changes
        grown = False
        for stem, tree in trees.items():
            for statement in tree.body:
                if not _kept(statement, live[stem]):
                    continue
                for other, name in _uses(statement, live[stem], set(trees)):
                    target = live[other if other else stem]
                    if name not in target:
                        target.add(name)
                        grown = True
        if not grown:
            break
    return {stem: _rewrite(modules[stem], trees[stem], live[stem]) for stem in modules}


def _defined(statement: ast.stmt) -> set[str]:
    if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return {statement.name}
    if isinstance(statement, ast.Assign | ast.AnnAssign | ast.AugAssign):
        targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
        return {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    if isinstance(statement, ast.Import | ast.ImportFrom):
        return {(a.asname or a.name).split(".")[0] for a in statement.names}
    return set()


def _kept(statement: ast.stmt, live: set[str]) -> bool:
    defined = _defined(statement)
    return not defined or bool(defined & live)


def _generator_values(node: ast.AST) -> list[ast.expr]:
    """The `cases=` arguments of the Check(...) calls inside a node."""
    return [
        keyword.value
        for call in ast.walk(node)
        if isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "Check"
        for keyword in call.keywords
        if keyword.arg == "cases"
    ]


def _uses(statement: ast.stmt, live: set[str], checks_modules: set[str]) -> list[tuple[str, str]]:
    """(module or '' for this one, name) that a kept statement needs, generators left out."""
    skipped = {id(n) for value in _generator_values(statement) for n in ast.walk(value)}
    if isinstance(statement, ast.ImportFrom):
        module = _checks_module(statement, checks_modules)
        if module is None:
            return []
        return [(module, a.name) for a in statement.names if (a.asname or a.name) in live]
    modules = {}  # `from . import attention`: attention.X uses X of that module
    found = []
    for node in ast.walk(statement):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Name):
            found.append(("", node.id))
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            modules.setdefault(node.value.id, []).append(node.attr)
    for alias, attributes in modules.items():
        if alias in checks_modules:
            found += [(alias, attr) for attr in attributes]
    return found


def _checks_module(statement: ast.ImportFrom, checks_modules: set[str]) -> str | None:
    """The checks module a relative import names (`from .rope import x` -> 'rope'), else None."""
    if statement.level == 1 and statement.module in checks_modules:
        return statement.module
    return None


def _rewrite(source: str, tree: ast.Module, live: set[str]) -> str:
    lines = source.splitlines(keepends=True)
    edits: list[tuple[int, int, int, int, str]] = []  # (line, col, end line, end col, text), 1-based lines
    for statement in tree.body:
        if not _kept(statement, live):
            first = min([statement.lineno, *(d.lineno for d in getattr(statement, "decorator_list", []))])
            while first > 1 and lines[first - 2].lstrip().startswith("#"):  # its comment goes with it
                first -= 1
            edits.append((first, 0, statement.end_lineno + 1, 0, ""))
        elif isinstance(statement, ast.ImportFrom) and statement.level and _defined(statement) - live:
            kept = [a for a in statement.names if (a.asname or a.name) in live]
            text = ast.unparse(ast.ImportFrom(statement.module, kept, statement.level)) + "\n" if kept else ""
            edits.append((statement.lineno, 0, statement.end_lineno + 1, 0, text))
        else:
            for value in _generator_values(statement):
                span = (value.lineno, value.col_offset, value.end_lineno, value.end_col_offset)
                edits.append((*span, GENERATOR_STUB))
    if any(replacement == GENERATOR_STUB for *_, replacement in edits):
        after_imports = 1 + max(s.end_lineno for s in tree.body if isinstance(s, ast.Import | ast.ImportFrom))
        edits.append((after_imports, 0, after_imports, 0, STUB_SOURCE))
    text = _apply(lines, edits)
    while "\n\n\n\n" in text:
        text = text.replace("\n\n\n\n", "\n\n\n")
    return text


def _apply(lines: list[str], edits: list[tuple[int, int, int, int, str]]) -> str:
    """Replace spans of the source, from the last to the first so positions stay valid."""
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line))
    text = "".join(lines)

    def position(line: int, col: int) -> int:  # ast's columns count UTF-8 bytes
        return offsets[line - 1] + len(lines[line - 1].encode("utf-8")[:col].decode("utf-8"))

    for line, col, end_line, end_col, replacement in sorted(edits, reverse=True):
        start = position(line, col)
        end = offsets[end_line - 1] if end_col == 0 else position(end_line, end_col)
        text = text[:start] + replacement + text[end:]
    return text
