"""`course release OUT`: what students get, and nothing of the instructor's.

    OUT/README.md                   for students: install, open, check, progress, submit
    OUT/environment.yml             conda, mamba and Binder; OUT/requirements.txt the same for pip
    OUT/notebooks/<a>/<a>.ipynb     the student notebooks
    OUT/checks/                     the visible checks, an installable package (`pip install ./checks`)
    OUT/<wheel>                     the same package built, for Google Colab (upload, then pip install)
    OUT/images/                     the figures the notebooks' text shows, if any (none today)

Everything that comes from solutions/ is made again from it here, as `course build` makes it (the
notebooks by nbgrader, the visible cases with what they should give, the questions), so that a
notebook edited in notebooks/ or a stale snapshot cannot slip into a release. images/ is not
shipped as a whole: its figures are the reference solution's outputs, some of them graded answers.

The package is the student's side of `autograder` only: the checks (run and judge), the visible
cases, self-study and progress, and the sandbox `course check` runs a notebook in. Each check's
case generator is taken out of its module with whatever only it used: the visible cases are in the
snapshots, the hidden ones are drawn at grading time from the instructor's copy. No solutions/, no
mistakes.py, no grading pipeline.
"""

import ast
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from autograder import language_model
from autograder.paths import IMAGES, REPO, assignments
from grader import TEMPLATES

PACKAGE = REPO / "autograder"  # what a student's kernel and commands import: shipped whole
# Trained by `course build` (minutes): copied, not made again.
CHECKPOINT = language_model.CHECKPOINT.relative_to(PACKAGE).as_posix()
DISTRIBUTION = "transformer-internals-checks"
VERSION = "0.1.0"
# What the student's environment installs, by name: the pins come from requirements.lock.
STUDENT_REQUIREMENTS = ["torch", "jupyterlab", "ipywidgets", "matplotlib", "nbclient", "nbformat"]
STUDENT_REQUIREMENTS += ["nbconvert", "ipykernel"]
# The package's own requirements are lower bounds: on Colab, pip must not replace its torch.
PACKAGE_REQUIREMENTS = ["torch>=2.6", "ipywidgets>=7.6", "matplotlib>=3.7", "nbclient>=0.7", "nbformat>=5.7"]
TORCH_CPU_INDEX = "--extra-index-url https://download.pytorch.org/whl/cpu"  # Linux: not the CUDA build
TEMPLATE = TEMPLATES / "release" / "README.md"
IMAGE_LINK = re.compile(r"images/([\w.-]+\.png)")


def release(out: Path) -> list[Path]:
    """Write the bundle into `out` (new, or an empty folder); returns the files written. It is made
    in a folder beside `out` and moved there at the end: a failure leaves `out` as it was."""
    out = Path(out).absolute()
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise SystemExit(f"{out} is not a new or empty folder: give one (nothing there is overwritten)")
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".{out.name}-", dir=out.parent) as tmp:
        bundle = Path(tmp) / "bundle"
        write_notebooks(bundle / "notebooks")
        write_package(bundle / "checks")
        wheel = build_wheel(bundle / "checks", bundle)
        (bundle / "environment.yml").write_text(environment_yml(), encoding="utf-8")
        (bundle / "requirements.txt").write_text(requirements_txt(), encoding="utf-8")
        readme = TEMPLATE.read_text(encoding="utf-8").replace("{wheel}", wheel.name)
        (bundle / "README.md").write_text(readme, encoding="utf-8")
        if out.exists():
            out.rmdir()
        bundle.rename(out)
    return sorted(p for p in out.rglob("*") if p.is_file())


def write_notebooks(target: Path) -> None:
    """The student notebooks, made by nbgrader from solutions/, and the figures their text links."""
    import nbformat

    from grader.build import generate_release

    generate_release(target, assignments())  # leaves out build.INSTRUCTOR_ONLY (mistakes.py)
    linked = set()
    for path in target.rglob("*.ipynb"):
        for cell in nbformat.read(path, as_version=4).cells:
            if cell.cell_type == "markdown":
                linked.update(IMAGE_LINK.findall(cell.source))
    for name in sorted(linked):
        (target.parent / "images").mkdir(exist_ok=True)
        shutil.copyfile(IMAGES / name, target.parent / "images" / name)


# ------------------------------------------------------------------------------ the package


def write_package(target: Path) -> None:
    """The student's modules, the checks without their case generators, and the data they read:
    the visible cases and the questions made again from solutions/, the course's checkpoint."""
    from autograder.progress import write_questions
    from grader.build import read_all_questions, write_snapshots

    package = target / "autograder"
    package.mkdir(parents=True)
    for module in sorted(PACKAGE.glob("*.py")):
        shutil.copyfile(module, package / module.name)
    checks = {p.stem: p.read_text(encoding="utf-8") for p in sorted((PACKAGE / "checks").glob("*.py"))}
    (package / "checks").mkdir()
    for stem, source in without_case_generators(checks).items():
        (package / "checks" / f"{stem}.py").write_text(source, encoding="utf-8")
    write_snapshots(package / "expected", assignments())
    write_questions(package / "expected" / "questions.json", read_all_questions())
    (package / CHECKPOINT).parent.mkdir(parents=True)
    shutil.copyfile(PACKAGE / CHECKPOINT, package / CHECKPOINT)
    (target / "pyproject.toml").write_text(package_pyproject(), encoding="utf-8")


def package_pyproject() -> str:
    requirements = "".join(f'    "{r}",\n' for r in PACKAGE_REQUIREMENTS)
    data = ", ".join(f'"{p}"' for p in ["expected/*.pt", "expected/questions.json", CHECKPOINT])
    return f"""[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[project]
name = "{DISTRIBUTION}"
version = "{VERSION}"
description = "The visible checks, hints and progress of the transformer-internals course"
requires-python = ">=3.11"  # as the course: tested on 3.11
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
    """A distribution's name as pip compares names (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name.strip()).lower()


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
STUB_SOURCE = f'''def {GENERATOR_STUB}(generator, hidden):
    """The cases of a check: in a student's copy, the visible ones come from autograder/expected/;
    the hidden ones are drawn when the work is graded."""
    raise LookupError("this copy of the course has the visible cases only (autograder/expected/)")


'''
ROOTS = {"CHECKS", "__all__"}


class Unprunable(ValueError):
    """A checks module written in a way the release cannot take its generators out of safely."""


def without_case_generators(modules: dict[str, str]) -> dict[str, str]:
    """The checks package's modules (stem -> source) with each Check's `cases=` replaced by a stub
    that raises, and every top-level definition that only the generators used removed, across
    modules (a name another module imports stays while that import is used). Comments stay.
    Raises Unprunable on what it does not follow: statements joined by `;`, star imports, a Check
    given its cases by position."""
    trees = {stem: ast.parse(source) for stem, source in modules.items()}
    for stem, tree in trees.items():
        _refuse_the_unfollowable(tree, stem)
    live = {stem: set(ROOTS) for stem in trees}
    while True:  # grow the live names of every module until nothing changes
        grown = False
        for stem, tree in trees.items():
            aliases = _module_aliases(tree, set(trees))
            for statement in tree.body:
                if not _kept(statement, live[stem]):
                    continue
                for other, name in _uses(statement, live[stem], set(trees), aliases):
                    target = live[other if other else stem]
                    if name not in target:
                        target.add(name)
                        grown = True
        if not grown:
            break
    return {stem: _rewrite(modules[stem], trees[stem], live[stem]) for stem in modules}


def _refuse_the_unfollowable(tree: ast.Module, stem: str) -> None:
    for before, statement in zip(tree.body, tree.body[1:], strict=False):
        if statement.lineno <= before.end_lineno:
            raise Unprunable(f"checks/{stem}.py:{statement.lineno}: one statement per line (no `;`)")
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and any(a.name == "*" for a in node.names):
            raise Unprunable(f"checks/{stem}.py:{node.lineno}: no star imports")
        if _is_check_call(node) and (len(node.args) > 2 or any(k.arg is None for k in node.keywords)):
            raise Unprunable(f"checks/{stem}.py:{node.lineno}: give Check its cases as cases=...")


def _is_check_call(node: ast.AST) -> bool:
    """Check(...) or core.Check(...)."""
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    return (isinstance(func, ast.Name) and func.id == "Check") or (
        isinstance(func, ast.Attribute) and func.attr == "Check"
    )


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
        if _is_check_call(call)
        for keyword in call.keywords
        if keyword.arg == "cases"
    ]


def _module_aliases(tree: ast.Module, checks_modules: set[str]) -> dict[str, str]:
    """`from . import attention [as att]`: the local name of each checks module imported whole."""
    return {
        alias.asname or alias.name: alias.name
        for statement in tree.body
        if isinstance(statement, ast.ImportFrom) and statement.level == 1 and statement.module is None
        for alias in statement.names
        if alias.name in checks_modules
    }


def _uses(
    statement: ast.stmt, live: set[str], checks_modules: set[str], aliases: dict[str, str]
) -> list[tuple[str, str]]:
    """(module or '' for this one, name) that a kept statement needs, generators left out."""
    if isinstance(statement, ast.ImportFrom):
        if statement.level == 1 and statement.module in checks_modules:  # from .rope import x
            return [(statement.module, a.name) for a in statement.names if (a.asname or a.name) in live]
        return []
    skipped = {id(n) for value in _generator_values(statement) for n in ast.walk(value)}
    found = []
    for node in ast.walk(statement):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Name):
            found.append(("", node.id))
        elif (
            isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases
        ):
            found.append((aliases[node.value.id], node.attr))  # attention.X: X of that module
    return found


def _lines(source: str) -> list[str]:
    """The source's lines as ast counts them (str.splitlines also splits on \\f and U+2028)."""
    return re.split(r"(?<=\n)", source)


def _start(statement: ast.stmt, lines: list[str]) -> int:
    """The first line of a top-level statement: its decorators, and the comment right above it."""
    first = min([statement.lineno, *(d.lineno for d in getattr(statement, "decorator_list", []))])
    while first > 1 and lines[first - 2].lstrip().startswith("#"):
        first -= 1
    return first


def _rewrite(source: str, tree: ast.Module, live: set[str]) -> str:
    lines = _lines(source)
    edits: list[tuple[int, int, int, int, str]] = []  # (line, col, end line, end col, text), 1-based lines
    for statement in tree.body:
        if not _kept(statement, live):
            end = statement.end_lineno + 1
            while end <= len(lines) and not lines[end - 1].strip():  # and the blank lines after it
                end += 1
            edits.append((_start(statement, lines), 0, end, 0, ""))
        elif isinstance(statement, ast.ImportFrom) and statement.level and _defined(statement) - live:
            kept = [a for a in statement.names if (a.asname or a.name) in live]
            text = ast.unparse(ast.ImportFrom(statement.module, kept, statement.level)) + "\n" if kept else ""
            edits.append((statement.lineno, 0, statement.end_lineno + 1, 0, text))
        else:
            for value in _generator_values(statement):
                span = (value.lineno, value.col_offset, value.end_lineno, value.end_col_offset)
                edits.append((*span, GENERATOR_STUB))
    if any(replacement == GENERATOR_STUB for *_, replacement in edits):
        # before the first statement that is not the docstring or an import: above any use
        first = next(
            s
            for index, s in enumerate(tree.body)
            if not isinstance(s, ast.Import | ast.ImportFrom)
            and not (index == 0 and isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))
        )
        at = _start(first, lines)
        edits.append((at, 0, at, 0, STUB_SOURCE))
    return _apply(lines, edits)


def _apply(lines: list[str], edits: list[tuple[int, int, int, int, str]]) -> str:
    """Replace spans of the source, from the last to the first so positions stay valid."""
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line))
    text = "".join(lines)

    def position(line: int, col: int) -> int:  # ast's columns count UTF-8 bytes
        if line > len(lines):
            return len(text)
        return offsets[line - 1] + len(lines[line - 1].encode("utf-8")[:col].decode("utf-8"))

    for line, col, end_line, end_col, replacement in sorted(edits, reverse=True):
        text = text[: position(line, col)] + replacement + text[position(end_line, end_col) :]
    return text
