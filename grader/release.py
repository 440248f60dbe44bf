"""`course release OUT`: what students get, and nothing of the instructor's.

    OUT/README.md                   for students: install, open, check, progress, submit
    OUT/environment.yml             conda, mamba and Binder; OUT/requirements.txt the same for pip
    OUT/notebooks/<a>/<a>.ipynb     the student notebooks
    OUT/checks/                     the visible checks, an installable package (`pip install ./checks`)
    OUT/<wheel>                     the same package built, for Google Colab (upload, then pip install)
    OUT/images/                     the figures the notebooks' text shows, if any (none today)

Everything that comes from solutions/ is made again from it here, as `course build` makes it (the
notebooks by nbgrader, the visible cases with what they should give, the questions), so that a
notebook edited in notebooks/ or a stale snapshot cannot slip into a release; without the questions
course.toml leaves out (leave_out.py), which `course grade` leaves out too. images/ is not
shipped as a whole: its figures are the reference solution's outputs, some of them graded answers.

The package is `autograder/` as it is: the checks (run and judge), self-study and progress, and the
sandbox `course check` runs a notebook in, with the visible cases made again. The case generators,
the known mistakes and the grading pipeline are not in it: they live in solutions/<a>/cases.py,
solutions/<a>/mistakes.py and grader/, and the hidden cases are drawn at grading time from there.
"""

import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from autograder import language_model
from autograder.paths import IMAGES, REPO, assignments
from grader import TEMPLATES, leave_out

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


@contextmanager
def new_folder(out: Path) -> Iterator[Path]:
    """Where to write what goes into `out` (new, or an empty folder): a folder beside it, moved
    there at the end, so that a failure leaves `out` as it was."""
    out = Path(out).absolute()
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise SystemExit(f"{out} is not a new or empty folder: give one (nothing there is overwritten)")
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".{out.name}-", dir=out.parent) as tmp:
        staged = Path(tmp) / "out"
        yield staged
        if out.exists():
            out.rmdir()
        staged.rename(out)


def release(out: Path) -> list[Path]:
    """Write the bundle into `out` (new, or an empty folder: `new_folder`); returns the files written."""
    from grader.build import INSTRUCTOR_ONLY  # mistakes, cases, alternatives: nbgrader ignores them anyway

    out = Path(out).absolute()
    checks_left_out = leave_out.left_out()  # a bad course.toml stops it before anything is written
    # The source notebooks as released, away from `out`'s folder: a run killed midway leaves no
    # solutions beside the students' bundle.
    with new_folder(out) as bundle, tempfile.TemporaryDirectory() as sources:
        source = Path(sources) / "solutions"
        leave_out.copy_solutions(source, checks_left_out, ignore=INSTRUCTOR_ONLY)
        write_notebooks(bundle / "notebooks", source)
        write_package(bundle / "checks", source, checks_left_out)
        wheel = build_wheel(bundle / "checks", bundle)
        (bundle / "environment.yml").write_text(environment_yml(), encoding="utf-8")
        (bundle / "requirements.txt").write_text(requirements_txt(), encoding="utf-8")
        readme = TEMPLATE.read_text(encoding="utf-8").replace("{wheel}", wheel.name)
        (bundle / "README.md").write_text(readme, encoding="utf-8")
    return sorted(p for p in out.rglob("*") if p.is_file())


def write_notebooks(target: Path, source: Path) -> None:
    """The student notebooks, made by nbgrader from `source` (solutions/ without the questions left
    out), and the figures their text links."""
    import nbformat

    from grader.build import generate_release

    generate_release(target, assignments(), source)
    linked = set()
    for path in target.rglob("*.ipynb"):
        for cell in nbformat.read(path, as_version=4).cells:
            if cell.cell_type == "markdown":
                linked.update(IMAGE_LINK.findall(cell.source))
    for name in sorted(linked):
        (target.parent / "images").mkdir(exist_ok=True)
        shutil.copyfile(IMAGES / name, target.parent / "images" / name)


# ------------------------------------------------------------------------------ the package


def write_package(target: Path, source: Path, checks_left_out: frozenset[str]) -> None:
    """The student's modules (autograder/, copied) and the data they read: the visible cases and the
    questions made again from `source` (solutions/ without the questions left out), but for the
    checks left out, and the course's checkpoint."""
    from autograder.progress import write_questions
    from grader.build import read_all_questions, write_snapshots

    package = target / "autograder"
    for module in sorted(PACKAGE.rglob("*.py")):
        (package / module.relative_to(PACKAGE)).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(module, package / module.relative_to(PACKAGE))
    write_snapshots(package / "expected", assignments(), checks_left_out)
    write_questions(package / "expected" / "questions.json", read_all_questions(source))
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
