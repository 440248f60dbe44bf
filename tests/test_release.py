"""The student's release: what it holds, that nothing of the instructor's leaks into it, and that
it installs and checks a notebook in a fresh environment (also one saved by Google Colab).

The fresh environment is a new venv with the release's wheel installed in it and nothing of the
course: its third-party packages (torch, JupyterLab) are this environment's, reached through a
.pth file, and so are their Jupyter data files (share/jupyter: the widgets' JupyterLab extension),
as downloading them again would take minutes.
"""

import ast
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import nbformat
import pytest

from autograder.checks import CHECKS
from autograder.paths import SOLUTIONS, assignments, source_notebook
from autograder.reference import case_generator, mistakes
from grader import release as rel

from .helpers.jupyter_server import browse, running_lab
from .helpers.submissions import mutant, perfect
from .test_environment import pins_of

REPO = Path(__file__).resolve().parents[1]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
SHORTEST_TELLING_LINE = 20  # shorter lines (`return x`, `x = x.float()`) are common to any code
# Longer lines as common, in an answer or a known mistake and in the package's own code (its training
# loop, the lent model's pass through its blocks, a tracer that needs autograd): they tell nothing.
COMMON_LINES = {
    "with torch.enable_grad():",
    "except RuntimeError:",
    "for block in self.blocks:",
    "losses.append(loss.item())",
}
# `-m nbconvert`, not `jupyter nbconvert`, which may find another environment's script on PATH
EXECUTE_IN_PLACE = ("-m", "nbconvert", "--to", "notebook", "--execute", "--inplace")


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("release") / "transformer-internals"
    rel.release(out)
    return out


def files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file())


def test_it_holds_what_students_get(bundle):
    names = {p.relative_to(bundle).as_posix() for p in files(bundle)}
    for assignment in assignments():
        assert f"notebooks/{assignment}/{assignment}.ipynb" in names
        notebook = nbformat.read(bundle / f"notebooks/{assignment}/{assignment}.ipynb", as_version=4)
        code = [cell for cell in notebook.cells if cell.cell_type == "code"]
        assert not any(cell.outputs or cell.execution_count for cell in code), assignment
    assert {"README.md", "environment.yml", "requirements.txt", "checks/pyproject.toml"} <= names
    linked = {
        name
        for path in (bundle / "notebooks").rglob("*.ipynb")
        for cell in nbformat.read(path, as_version=4).cells
        for name in rel.IMAGE_LINK.findall(cell.source)
    }  # images/ holds the reference's outputs, some graded answers: only what the text shows
    assert {p.name for p in (bundle / "images").glob("*")} == linked
    assert len(list(bundle.glob("transformer_internals_checks-*.whl"))) == 1
    readme = (bundle / "README.md").read_text()
    assert "{wheel}" not in readme and "course progress" in readme
    assert "pip install -r requirements.txt" in readme


def test_its_package_is_the_students_side_only(bundle):
    package = bundle / "checks" / "autograder"
    modules = {p.relative_to(package).as_posix() for p in package.rglob("*.py")}
    source = REPO / "autograder"
    assert modules == {p.relative_to(source).as_posix() for p in source.rglob("*.py")}
    leaked = {"mistakes.py", "alternatives.py", "gradebook.db"}
    assert not any(p.name in leaked or "solutions" in p.parts for p in files(bundle))
    for path in package.rglob("*.pt"):
        import torch

        torch.load(path, weights_only=True)  # tensors and plain values only: nothing that runs


def _between(source: str, begin: str, end: str) -> list[str]:
    inside, found = False, []
    for line in source.splitlines():
        if line.strip() == begin:
            inside = True
        elif line.strip() == end:
            inside = False
        elif inside:
            found.append(line.strip())
    return found


def _code_of_mistakes(path: Path) -> list[str]:
    """The lines of the known mistakes' code, their advice strings left out (the visible
    snapshots hold those, as they may)."""
    tree = ast.parse(path.read_text())
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.Lambda):
            body = node.body if isinstance(node.body, list) else [node.body]
            for statement in body:
                if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant):
                    continue  # a docstring
                lines += ast.get_source_segment(path.read_text(), statement).splitlines()
    return [line.strip() for line in lines]


def telling_lines() -> dict[str, str]:
    """Telling lines of what must not leak, each with where it comes from.

    Lines the student notebooks show anyway (given code, the questions' text) are left out; the
    package's own source is not: an answer in a check's message or a run-stage helper leaks too."""
    given = set()
    for path in (REPO / "notebooks").glob("*/*.ipynb"):
        for cell in nbformat.read(path, as_version=4).cells:
            given |= {line.strip() for line in cell.source.splitlines()}
    found = {}
    for assignment in assignments():
        source = nbformat.read(source_notebook(assignment), as_version=4)
        for cell in source.cells:
            for line in _between(cell.source, "### BEGIN SOLUTION", "### END SOLUTION"):
                found[line] = f"a solution line of {assignment}"
            for line in _between(cell.source, "### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS"):
                found[line] = f"a hidden test of {assignment}"
        for line in _code_of_mistakes(SOLUTIONS / assignment / "mistakes.py"):
            found[line] = f"the code of a known mistake of {assignment}"
    left_out = given | COMMON_LINES
    return {
        line: origin
        for line, origin in found.items()
        if len(line) >= SHORTEST_TELLING_LINE and line not in left_out and not line.startswith("#")
    }


def texts(path: Path) -> list[tuple[str, str]]:
    """(where, text) of a file, and of each member of a zip (a wheel, a torch.save file)."""
    data = path.read_bytes()
    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as archive:
            return [(f"{path}!{m}", archive.read(m).decode("utf-8", "ignore")) for m in archive.namelist()]
    return [(str(path), data.decode("utf-8", "ignore"))]


def test_no_file_holds_a_solution_a_hidden_test_or_a_mistake(bundle):
    telling = telling_lines()
    assert len(telling) > 500, "too few lines to look for: the test would find nothing"
    leaks = []
    for path in files(bundle):
        if path.suffix == ".png":
            continue
        for where, text in texts(path):
            lines = {line.strip() for line in text.splitlines()}
            leaks += [f"{where}: {telling[line]}: {line}" for line in lines & telling.keys()]
    assert not leaks, "\n".join(leaks[:20])


def test_no_hint_quotes_a_line_of_an_answer():
    """The hints ship with the checks: a rung may show an API or a shape, not the answer's own line."""
    answer_lines = [line for line, origin in telling_lines().items() if "solution line" in origin]
    quoted = [
        f"{name}: {line}" for name, check in CHECKS.items() for hint in check.hints for line in answer_lines
        if line in hint
    ]  # fmt: skip
    assert not quoted, "\n".join(quoted)


def test_the_case_generators_are_not_in_it(bundle):
    """Each check's cases come from the visible snapshot; the code that draws hidden ones lives in
    solutions/<a>/cases.py (and grader/casework.py), which the release never reads."""
    released = "\n".join(p.read_text() for p in (bundle / "checks/autograder").rglob("*.py"))
    generators = {case_generator(name).__qualname__.split(".")[0] for name in CHECKS}
    assert len(generators) > 40, "too few generator names to look for: the test would pass vacuously"
    kept = [name for name in generators if re.search(rf"^def {name}\(", released, re.M)]
    assert not kept, f"case generators in the release: {kept}"
    assert not any(p.name in {"cases.py", "casework.py"} for p in files(bundle))


def test_the_environment_pins_equal_the_lock(bundle):
    locked = pins_of((REPO / "requirements.lock").read_text().splitlines())
    lines = (bundle / "requirements.txt").read_text().splitlines()
    pinned = pins_of(lines)
    assert set(pinned) == set(pins_of(f"{name}==0" for name in rel.STUDENT_REQUIREMENTS))
    assert all(locked[name] == version for name, version in pinned.items())
    assert lines[0] == rel.TORCH_CPU_INDEX and lines[-1] == "./checks"
    environment = (bundle / "environment.yml").read_text()
    assert all(f"      - {line}\n" in environment for line in lines)


# ------------------------------------------------------------------ in a fresh environment


@pytest.fixture(scope="module")
def fresh(bundle, tmp_path_factory) -> Path:
    """A new venv with the release's wheel installed; returns its python."""
    venv = tmp_path_factory.mktemp("venv") / "student"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    ours = Path(
        subprocess.run(
            [sys.executable, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    Path(site, "third_party.pth").write_text(f"{ours}\n")  # torch & co.; its .pth files are not read
    (venv / "share").mkdir(exist_ok=True)
    (venv / "share" / "jupyter").symlink_to(Path(sys.prefix) / "share" / "jupyter")
    (wheel,) = bundle.glob("*.whl")
    install = [python, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index", str(wheel)]
    subprocess.run(install, check=True)
    return python


def run_in(python: Path, *args: str, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    environment = {k: v for k, v in os.environ.items() if k not in {"COURSE_SOLUTIONS", "PYTHONPATH"}}
    environment["PATH"] = f"{python.parent}{os.pathsep}{environment['PATH']}"
    command = [str(a) for a in args]
    return subprocess.run(command, cwd=cwd, env=environment | (env or {}), capture_output=True, text=True)


def test_the_installed_package_is_the_releases_and_imports(fresh, tmp_path):
    script = (
        "import autograder, autograder.selfstudy, autograder.progress, autograder.playground, "
        "autograder.language_model, autograder.student\n"
        "print(autograder.__file__)\n"
        "from autograder.selfstudy import solution_text\n"
        "print(solution_text('07.rmsnorm'))\n"
        "from autograder import evaluate\n"
        "try:\n    evaluate('07.rmsnorm', None, hidden=True)\n"
        "except LookupError as e:\n    print('hidden:', e)\n"
    )
    result = run_in(fresh, fresh, "-c", script, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    location, solution, hidden = result.stdout.splitlines()[:3]
    assert location.startswith(str(fresh.parents[1])), location  # not the course's own copy
    assert "not available" in solution
    assert "visible cases only" in hidden


ALL_VISIBLE_CHECKS = """
import sys
from autograder import evaluate
from autograder.checks import CHECKS
from autograder.reference import reference_object
failed = [n for n, c in CHECKS.items() if not evaluate(n, reference_object(n, c.target)).passed]
print(len(CHECKS), "checks;", "failed:", failed)
sys.exit(bool(failed))
"""


def test_every_visible_check_passes_on_the_reference_there(fresh, tmp_path):
    """The release's checks judge from their snapshots alone: the reference passes all of them
    (the release finds no solutions/; this test points it at the course's for the reference)."""
    solutions = {"COURSE_SOLUTIONS": str(SOLUTIONS)}
    result = run_in(fresh, fresh, "-c", ALL_VISIBLE_CHECKS, cwd=tmp_path, env=solutions)
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    assert f"{len(CHECKS)} checks; failed: []" in result.stdout


def test_course_check_and_progress_on_a_notebook(fresh, bundle, tmp_path):
    work = tmp_path / "work"
    (work / "07_rmsnorm").mkdir(parents=True)
    untouched = bundle / "notebooks/07_rmsnorm/07_rmsnorm.ipynb"
    failing = run_in(fresh, fresh.parent / "course", "check", untouched, cwd=tmp_path)
    assert failing.returncode == 1, failing.stdout + failing.stderr
    assert "FAILED 07.rmsnorm_norm: CheckFailed" in failing.stdout and "NotImplementedError" in failing.stdout

    done = work / "07_rmsnorm/07_rmsnorm.ipynb"
    nbformat.write(perfect("07_rmsnorm"), done)
    passing = run_in(fresh, fresh.parent / "course", "check", done, cwd=tmp_path)
    assert passing.returncode == 0, passing.stdout + passing.stderr
    assert "2/2 visible checks pass" in passing.stdout

    executed = run_in(fresh, fresh, *EXECUTE_IN_PLACE, done, cwd=work)
    assert executed.returncode == 0, executed.stderr[-3000:]
    last = nbformat.read(done, as_version=4).cells[-1]
    summary = "".join(o.get("text", "") for o in last.outputs)
    assert "07_rmsnorm: 2 of 2 questions pass in this session" in summary, summary
    table = run_in(fresh, fresh.parent / "course", "progress", work, cwd=tmp_path)
    assert table.returncode == 0, table.stderr
    row = next(line for line in table.stdout.splitlines() if line.startswith("07_rmsnorm"))
    assert re.match(r"07_rmsnorm\s+2/2\s+2/2\s+~0 min\s+all done", row), row
    first = next(line for line in table.stdout.splitlines() if line.startswith("00_warmup"))
    assert first.endswith("not found in this folder"), first  # only 07 is in it


def colab_saved(notebook: nbformat.NotebookNode, keep_nbgrader: bool) -> nbformat.NotebookNode:
    """The notebook as Google Colab saves it: its own notebook metadata, an id per cell, and (where
    it drops what it does not know) no nbgrader metadata."""
    notebook.metadata = nbformat.from_dict(
        {
            "colab": {"provenance": [], "name": "07_rmsnorm.ipynb"},
            "kernelspec": {"name": "python3", "display_name": "Python 3"},
            "language_info": {"name": "python"},
        }
    )
    for index, cell in enumerate(notebook.cells):
        nbgrader = cell.metadata.get("nbgrader")
        kept = {"nbgrader": nbgrader} if keep_nbgrader and nbgrader else {}
        cell.metadata = nbformat.from_dict({"id": f"c{index:04d}x", **kept})
        if cell.cell_type == "code":
            cell.metadata["colab"] = {"base_uri": "https://localhost:8080/"}
    return notebook


@pytest.mark.parametrize("keep_nbgrader", [True, False], ids=["nbgrader metadata kept", "dropped"])
def test_a_notebook_saved_by_colab_runs_and_checks(fresh, tmp_path, keep_nbgrader):
    path = tmp_path / "07_rmsnorm.ipynb"
    nbformat.write(colab_saved(perfect("07_rmsnorm"), keep_nbgrader), path)
    result = run_in(fresh, fresh.parent / "course", "check", path, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2/2 visible checks pass" in result.stdout
    executed = run_in(fresh, fresh, *EXECUTE_IN_PLACE, path, cwd=tmp_path)
    assert executed.returncode == 0, executed.stderr[-3000:]
    outputs = [o for cell in nbformat.read(path, as_version=4).cells for o in cell.get("outputs", [])]
    widgets = [o for o in outputs if "application/vnd.jupyter.widget-view+json" in o.get("data", {})]
    assert len(widgets) == 2  # the hint widget of each question, drawn by the frontend
    assert all('study("07.' in o["data"]["text/plain"] for o in widgets)  # and where it cannot draw
    table = run_in(fresh, fresh.parent / "course", "progress", tmp_path, cwd=tmp_path)
    assert re.search(r"^07_rmsnorm\s+2/2", table.stdout, re.M), table.stdout


def test_a_release_needs_a_new_folder_and_a_failed_one_leaves_nothing(bundle, tmp_path, monkeypatch):
    a_file = tmp_path / "file"
    a_file.write_text("mine")
    for taken in (bundle, a_file):
        with pytest.raises(SystemExit, match="not a new or empty folder"):
            rel.release(taken)
    assert a_file.read_text() == "mine"

    def broken(*_):
        raise RuntimeError("no package today")

    monkeypatch.setattr(rel, "write_package", broken)
    with pytest.raises(RuntimeError, match="no package today"):
        rel.release(tmp_path / "release")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]  # no half-made release beside it


@pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed (make setup installs it as root)")
def test_in_a_browser_a_student_fails_a_check_and_asks_for_hints(fresh, bundle, tmp_path):
    """JupyterLab of the fresh environment on a copy of the release, notebook 07 answered with a
    known mistake: run all cells, read the failed check, then the hints; Show solution says that
    the release holds none."""
    copy = tmp_path / "course"
    shutil.copytree(bundle / "notebooks", copy)
    check = CHECKS["07.rmsnorm_norm"]
    [eps_outside, *_] = mistakes("07.rmsnorm_norm")
    answered = mutant("07_rmsnorm", check.answer_cell, check.target, eps_outside.impl)
    nbformat.write(answered, copy / "07_rmsnorm/07_rmsnorm.ipynb")
    with running_lab(copy, python=fresh) as (base, token):
        url = f"{base}/lab/tree/07_rmsnorm/07_rmsnorm.ipynb?token={token}"
        status, output = browse(url, tmp_path / "release.png", "release")
    assert status == 0, output[-3000:]
