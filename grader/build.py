"""`course build`: derive everything from solutions/ (student notebooks, figures, visible cases).

    notebooks/<a>/<a>.ipynb   nbgrader's release: answers become `raise NotImplementedError()`,
                              hidden tests removed, no outputs, no widget state
    images/<name>.png         the output of each solution cell tagged `image:<name>.png`
    autograder/expected/*.pt  the visible cases of each check with the reference's outputs
    autograder/expected/questions.json
                              each notebook's questions, their checks and labels (progress.py)
    autograder/data/course_model.pt
                              the model notebook 08 trains and notebook 10 inspects (about a minute)
    docs/*.md                 the points table (`points_table`) between the two POINTS_TABLE markers
    solutions/<a>/<a>.ipynb   the points of each test cell, from its check (`with_points`): a check's
                              points are written in the check alone

`build(out)` writes them under another root so that a test can compare them with the
committed files (`stale_files`). Every file goes through `install`, which leaves a file that
already holds the same content (`same_content`) untouched: a build on another CPU, whose floats
differ in their last bits, leaves a clean `git status`.
"""

import base64
import contextlib
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import nbformat
import numpy as np
import torch
from nbclient import NotebookClient
from nbgrader.apps import NbGraderAPI
from traitlets.config import Config

from autograder import api, language_model
from autograder.checks import CHECKS
from autograder.paths import EXPECTED, IMAGES, NOTEBOOKS, REPO, SOLUTIONS, assignments, source_notebook
from autograder.playground import one_thread
from autograder.progress import QUESTIONS, read_questions, write_questions
from autograder.reference import namespace
from grader.points import points_table

# Files next to a source notebook that stay on the instructor's side.
INSTRUCTOR_ONLY = ["mistakes.py", "cases.py", "alternatives.py"]
EXECUTION_TIMEOUT = 300  # seconds per cell when executing a solution notebook


def nbgrader_config(root: Path, source: Path, db: Path, **extra) -> Config:
    """The course's nbgrader settings; NbGraderAPI does not read nbgrader_config.py by itself."""
    # nbgrader runs `alembic` (its database migrations) from PATH: use this environment's.
    bin_dir = str(Path(sys.executable).parent)
    if bin_dir not in os.environ["PATH"].split(os.pathsep):
        os.environ["PATH"] = bin_dir + os.pathsep + os.environ["PATH"]
    config = Config()
    config.CourseDirectory.root = str(root)
    config.CourseDirectory.source_directory = str(source)
    config.CourseDirectory.db_url = f"sqlite:///{db}"
    config.CourseDirectory.course_id = "transformer-internals"
    config.CourseDirectory.ignore = [
        ".ipynb_checkpoints",
        "*.pyc",
        "__pycache__",
        "feedback",
        *INSTRUCTOR_ONLY,
    ]
    for section, values in extra.items():
        for key, value in values.items():
            setattr(config[section], key, value)
    return config


def generate_all(config: Config, chosen: list[str] | None = None) -> None:
    """nbgrader generate_assignment for every assignment (or the chosen ones): fills the
    gradebook and release/."""
    nbgrader = NbGraderAPI(config=config)
    for assignment in chosen or assignments():
        result = nbgrader.generate_assignment(assignment, force=True, create=True)
        if not result["success"]:
            raise RuntimeError(f"nbgrader could not generate {assignment}:\n{result['log']}")


def generate_release(out: Path, chosen: list[str], source: Path = SOLUTIONS) -> None:
    """nbgrader generate_assignment for the chosen assignments of `source` (solutions/, or a copy
    with questions left out: leave_out.py), into out/<assignment>/; the files of out/<assignment>/
    that it no longer writes are removed."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        config = nbgrader_config(root, source, root / "gradebook.db")
        config.CourseDirectory.release_directory = "release"
        generate_all(config, chosen)
        for assignment in chosen:
            released = root / "release" / assignment
            for path in released.glob("*.ipynb"):
                notebook = nbformat.read(path, as_version=4)
                notebook.metadata.pop("widgets", None)
                nbformat.write(notebook, path)
            install(released, out / assignment, whole=True)


def execute_source(assignment: str) -> nbformat.NotebookNode:
    """Run a solution notebook top to bottom in a fresh kernel; raises on the first error."""
    path = source_notebook(assignment)
    notebook = nbformat.read(path, as_version=4)
    NotebookClient(
        notebook, timeout=EXECUTION_TIMEOUT, resources={"metadata": {"path": str(path.parent)}}
    ).execute()
    return notebook


def figures(notebook: nbformat.NotebookNode) -> dict[str, bytes]:
    """PNG outputs of the cells tagged `image:<file name>`."""
    found = {}
    for cell in notebook.cells:
        for tag in cell.metadata.get("tags", []):
            if tag.startswith("image:"):
                pngs = [
                    o["data"]["image/png"]
                    for o in cell.get("outputs", [])
                    if "image/png" in o.get("data", {})
                ]
                if len(pngs) != 1:
                    raise RuntimeError(f"cell tagged {tag} drew {len(pngs)} figures, expected one")
                found[tag.removeprefix("image:")] = base64.b64decode(pngs[0])
    return found


def build(root: Path = REPO, only: list[str] | None = None, *, checkpoint: bool = True) -> None:
    """Regenerate notebooks/, images/ and the expected visible outputs under `root`, for every
    assignment or only the named ones (a quicker loop while writing one notebook), the questions and
    the points table in docs/, and the course's checkpoint with notebook 08 unless `checkpoint` is
    False (the notebook reads the committed one). A file whose content is unchanged is left as it is."""
    chosen = only or assignments()
    known = assignments()
    if unknown := sorted(set(chosen) - set(known)):
        raise SystemExit(f"no assignment {', '.join(unknown)} in solutions/; known: {', '.join(known)}")
    # First the checkpoint, from which 10's visible cases are computed, and the visible cases, which
    # the solution notebooks' checks read from `root` when it is the repository.
    # The points into the source notebooks themselves (COURSE_SOLUTIONS may name another folder), or,
    # in a build under another root, beside the other derived files for the build check to compare.
    with staged(SOLUTIONS if root == REPO else root / "solutions") as out:
        write_points(out, chosen)
    with staged(root) as out:
        write_questions(out / QUESTIONS.relative_to(REPO), read_all_questions())
        write_points_tables(DOCS, out / DOCS.relative_to(REPO))
        if checkpoint and CHECKPOINT_SOURCE in chosen:
            write_checkpoint(out / language_model.CHECKPOINT.relative_to(REPO))
    with staged(root) as out:
        write_snapshots(out / EXPECTED.relative_to(REPO), chosen)
    generate_release(root / NOTEBOOKS.relative_to(REPO), chosen)
    with staged(root) as out:
        images = out / IMAGES.relative_to(REPO)
        images.mkdir(parents=True)
        for assignment in chosen:
            for name, png in figures(execute_source(assignment)).items():
                (images / name).write_bytes(png)


def write_points(directory: Path, chosen: list[str]) -> None:
    """Each chosen source notebook whose test cells' points differ from its checks', with theirs; the
    others are not written, so that the source notebooks stay as their author saved them."""
    for assignment in chosen:
        notebook = nbformat.read(source_notebook(assignment), as_version=4)
        if with_points(notebook, assignment):
            path = directory / assignment / f"{assignment}.ipynb"
            path.parent.mkdir(parents=True)
            nbformat.write(notebook, path)


def with_points(notebook: nbformat.NotebookNode, assignment: str) -> bool:
    """Sets the points of each visible and hidden test cell of the assignment's checks to the check's;
    whether any changed."""
    cells = {cell.metadata.get("nbgrader", {}).get("grade_id"): cell for cell in notebook.cells}
    changed = False
    for name, check in CHECKS.items():
        number, question = name.split(".", 1)
        if not assignment.startswith(f"{number}_"):
            continue
        for grade_id, points in (
            (f"{question}_test", check.points),
            (f"{question}_hidden", check.hidden_points),
        ):
            if grade_id not in cells:
                raise RuntimeError(f"{assignment} has no test cell {grade_id} for the check {name}")
            changed |= cells[grade_id].metadata.nbgrader.get("points") != points
            cells[grade_id].metadata.nbgrader["points"] = points
    return changed


def write_snapshots(directory: Path, chosen: list[str], left_out: frozenset[str] = frozenset()) -> None:
    """The visible cases of the chosen assignments' checks but those `left_out`, with what they
    should give; on one thread, so that they do not depend on the machine's core count (reductions
    split by thread)."""
    with one_thread():
        for name in (name for name in CHECKS if name not in left_out):
            if any(assignment.startswith(name.split(".")[0] + "_") for assignment in chosen):
                api.write_snapshot(name, directory)


def read_all_questions(source: Path = SOLUTIONS) -> dict[str, list]:
    """Every assignment's questions, read from its source notebook in `source` (solutions/, or a copy
    with questions left out)."""
    return {
        a: read_questions(nbformat.read(source / a / f"{a}.ipynb", as_version=4), a) for a in assignments()
    }


DOCS = REPO / "docs"
# Around the points table in a page of DOCS, each alone on its line; a page without them is not derived.
POINTS_TABLE_START = "<!-- points table: written by `course build`, do not edit -->"
POINTS_TABLE_END = "<!-- end of points table -->"


def write_points_tables(docs: Path, out: Path) -> None:
    """Each page docs/*.md that holds the points table's markers, into out/, with points_table()
    between them; the other pages are not derived."""
    for page in sorted(docs.glob("*.md")):
        text = page.read_text(encoding="utf-8")
        if {POINTS_TABLE_START, POINTS_TABLE_END} & {line.strip() for line in text.splitlines()}:
            out.mkdir(parents=True, exist_ok=True)
            (out / page.name).write_text(with_points_table(text, page), encoding="utf-8")


def with_points_table(text: str, page: Path) -> str:
    """`text` with points_table() between each start marker line and the end marker line below it."""
    kept, start = [], None  # start: the line number of the start marker whose end is not yet seen
    for number, line in enumerate(text.splitlines(keepends=True), 1):
        if start is None:
            kept.append(line)
            if line.strip() == POINTS_TABLE_START:
                start = number
                kept.append(points_table() + "\n")
            elif line.strip() == POINTS_TABLE_END:
                raise SystemExit(f"{page}:{number}: {POINTS_TABLE_END} with no {POINTS_TABLE_START} above it")
        elif line.strip() == POINTS_TABLE_END:
            kept.append(line)
            start = None
        elif line.strip() == POINTS_TABLE_START:
            raise SystemExit(
                f"{page}:{start}: the points table's start marker has no end marker before the next start "
                f"(line {number}): add a line {POINTS_TABLE_END} below the table"
            )
    if start is not None:
        raise SystemExit(
            f"{page}:{start}: the points table's start marker has no end marker below it: add a line "
            f"{POINTS_TABLE_END} below the table"
        )
    return "".join(kept)


CHECKPOINT_SOURCE = "08_transformer"  # the notebook whose Transformer the checkpoint holds


def write_checkpoint(path: Path) -> None:
    """Train the course's model with the reference's Transformer (one thread: the same bytes on
    every run of one machine) and save it, tensors and plain values only (torch.load(...,
    weights_only=True) reads it)."""
    path = Path(path)  # first: anything else fails here, not after a minute of training
    transformer = namespace(CHECKPOINT_SOURCE)["Transformer"]
    with one_thread():
        contents = language_model.train_course_model(transformer)
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(contents, path)


def stale_files(root: Path, committed: Path = REPO) -> list[str]:
    """Derived files under `root` (a fresh build) that differ from those under `committed` (the
    repository's), by `same_content`: the comparison `install` makes before it writes a file."""
    stale = []
    for folder in (NOTEBOOKS, IMAGES, EXPECTED):
        folder = committed / folder.relative_to(REPO)
        for old in folder.rglob("*"):
            if any(part.startswith(".") for part in old.relative_to(folder).parts):
                continue  # not derived: make's stamp, JupyterLab's .ipynb_checkpoints
            if old.is_file() and not (root / old.relative_to(committed)).exists():
                stale.append(f"{old.relative_to(committed)} (no longer built)")
    for fresh in sorted(p for p in root.rglob("*") if p.is_file()):
        old = committed / fresh.relative_to(root)
        if not old.exists():
            stale.append(f"{old.relative_to(committed)} (missing)")
        elif not same_content(fresh, old):
            stale.append(str(old.relative_to(committed)))
    return stale


@contextlib.contextmanager
def staged(root: Path) -> Iterator[Path]:
    """A folder to write derived files into, laid out as `root`; on leaving, `install`ed into root."""
    with tempfile.TemporaryDirectory() as tmp:
        yield Path(tmp)
        install(Path(tmp), root)


def install(new: Path, target: Path, *, whole: bool = False) -> None:
    """Copy the files under `new` to the same places under `target`, except where the file there
    already holds the same content (`same_content`): that one keeps its bytes and modification time.
    whole: `new` is all of `target`; the files it lacks are removed (not hidden ones such as
    JupyterLab's .ipynb_checkpoints/, which are not derived)."""
    written = set()
    for path in sorted(p for p in new.rglob("*") if p.is_file()):
        relative = path.relative_to(new)
        written.add(relative)
        old = target / relative
        if old.is_file() and same_content(path, old):
            continue
        old.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, old)
    if whole and target.is_dir():
        for old in sorted(p for p in target.rglob("*") if p.is_file()):
            relative = old.relative_to(target)
            if relative not in written and not any(part.startswith(".") for part in relative.parts):
                old.unlink()


def same_content(new: Path, old: Path) -> bool:
    """Whether two versions of a derived file hold the same, up to what two machines' builds of the
    same sources differ by: their floats round differently in the last bits (tensors of the visible
    cases, figures, the trained checkpoint); text must match byte for byte."""
    if new.name == language_model.CHECKPOINT.name:
        return same_checkpoint(new, old)
    if new.suffix == ".pt":
        return api.same_snapshot(new, old)
    if new.suffix == ".png":
        return same_picture(new, old)
    return new.read_bytes() == old.read_bytes()


# The checkpoint's 1200 steps of training carry another CPU's last bits (its other vector paths through
# the same calls) into other weights. Measured against this machine's AVX2 build: a build with
# ATEN_CPU_CAPABILITY=default, and three whose initial weights were moved by one ulp, have every tensor
# different (by up to 58% of its largest value; logits 12 apart where they reach 30), so weights cannot
# be compared. What ties a checkpoint to its recipe and model is what tests/test_course_model.py checks:
# its description, and the start of its loss curve. In those four builds the first 50 losses stayed
# within 7.2e-7 of this machine's (3 ulps); they part past 1e-4 abruptly, at steps 109 to 194. The
# held-out loss they end at lay 1.8e-5 to 2.0e-4 away. A changed model, recipe or training loop moves
# the first losses far more.
CHECKPOINT_STEPS = 50  # the steps of the loss curve compared
CHECKPOINT_LOSS_ATOL = 1e-4  # nats, on each of those steps (tests/test_course_model.py's) and the baselines
HELD_OUT_ATOL = 2e-3  # nats: ten times the largest of the four measured


def same_checkpoint(a: Path, b: Path) -> bool:
    """Whether two checkpoints come from one recipe and one model, trained on two machines: the same
    description and parameter names, shapes and dtypes, the same first CHECKPOINT_STEPS losses and
    baselines to CHECKPOINT_LOSS_ATOL, the same held-out loss to HELD_OUT_ATOL; not the same weights."""
    x, y = (torch.load(path, weights_only=True) for path in (a, b))
    if x.keys() != y.keys():
        return False
    for key in x:
        first, second = x[key], y[key]
        if key == "state_dict":
            same = parameters(first) == parameters(second)
        elif key == "losses":
            steps = slice(CHECKPOINT_STEPS)
            same = first.shape == second.shape and bool(
                torch.isclose(first[steps], second[steps], rtol=0, atol=CHECKPOINT_LOSS_ATOL).all()
            )
        elif key.endswith("_loss"):  # held_out_loss, and the baselines' (from the text alone)
            same = abs(first - second) <= (HELD_OUT_ATOL if key == "held_out_loss" else CHECKPOINT_LOSS_ATOL)
        else:
            same = first == second
        if not same:
            return False
    return True


def parameters(state_dict: dict[str, torch.Tensor]) -> dict[str, tuple]:
    """Each parameter's shape and dtype, by name."""
    return {name: (tuple(value.shape), value.dtype) for name, value in state_dict.items()}


# A figure drawn from floats that differ in their last bits on another CPU (a trained model's
# decision boundary, a colour map's bin edge) differs in a few pixels: 0.09% of 00_spirals_boundary's
# between two machines. A changed figure (another curve, a title) changes far more.
PICTURE_PIXELS = 0.0025  # the share of pixels that may differ by more than one step of 255


def same_picture(a: Path, b: Path) -> bool:
    """Whether two PNGs draw the same figure: the same size, at most PICTURE_PIXELS of the pixels
    differing by more than one step in a channel."""
    from PIL import Image  # matplotlib's own dependency

    with Image.open(a) as first, Image.open(b) as second:
        if first.size != second.size:
            return False
        x, y = (np.asarray(image.convert("RGBA"), dtype=np.int16) for image in (first, second))
    differing = (np.abs(x - y).max(axis=-1) > 1).mean()
    return bool(differing <= PICTURE_PIXELS)
