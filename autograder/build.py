"""`course build`: derive everything from solutions/ (student notebooks, figures, visible cases).

    notebooks/<a>/<a>.ipynb   nbgrader's release: answers become `raise NotImplementedError()`,
                              hidden tests removed, no outputs, no widget state
    images/<name>.png         the output of each solution cell tagged `image:<name>.png`
    autograder/expected/*.pt  the visible cases of each check with the reference's outputs
    autograder/expected/questions.json
                              each notebook's questions, their checks and labels (progress.py)
    autograder/data/course_model.pt
                              the model notebook 08 trains and notebook 10 inspects (about a minute)

`build(out)` writes them under another root so that a test can compare them with the
committed files (`stale_files`).
"""

import base64
import os
import shutil
import sys
import tempfile
from pathlib import Path

import nbformat
import numpy as np
import torch
from nbclient import NotebookClient
from nbgrader.apps import NbGraderAPI
from traitlets.config import Config

from . import api, language_model
from .checks import CHECKS
from .paths import EXPECTED, IMAGES, NOTEBOOKS, REPO, SOLUTIONS, assignments, source_notebook
from .playground import one_thread
from .progress import QUESTIONS, read_questions, write_questions
from .reference import namespace

# Files next to a source notebook that stay on the instructor's side.
INSTRUCTOR_ONLY = ["mistakes.py"]
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


def generate_release(out: Path, chosen: list[str]) -> None:
    """nbgrader generate_assignment for the chosen assignments, into out/<assignment>/."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        config = nbgrader_config(root, SOLUTIONS, root / "gradebook.db")
        config.CourseDirectory.release_directory = "release"
        generate_all(config, chosen)
        for assignment in chosen:
            released = root / "release" / assignment
            target = out / assignment
            shutil.rmtree(target, ignore_errors=True)
            shutil.copytree(released, target)
            for path in target.glob("*.ipynb"):
                notebook = nbformat.read(path, as_version=4)
                notebook.metadata.pop("widgets", None)
                nbformat.write(notebook, path)


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
    assignment or only the named ones (a quicker loop while writing one notebook), and the course's
    checkpoint with notebook 08 unless `checkpoint` is False (the notebook reads the committed one)."""
    chosen = only or assignments()
    known = assignments()
    if unknown := sorted(set(chosen) - set(known)):
        raise SystemExit(f"no assignment {', '.join(unknown)} in solutions/; known: {', '.join(known)}")
    write_questions(root / QUESTIONS.relative_to(REPO), read_all_questions())
    if checkpoint and CHECKPOINT_SOURCE in chosen:
        write_checkpoint(root / language_model.CHECKPOINT.relative_to(REPO))
    # First the visible cases, which the solution notebooks' checks read.
    write_snapshots(root / EXPECTED.relative_to(REPO), chosen)
    generate_release(root / NOTEBOOKS.relative_to(REPO), chosen)
    images = root / IMAGES.relative_to(REPO)
    images.mkdir(parents=True, exist_ok=True)
    for assignment in chosen:
        for name, png in figures(execute_source(assignment)).items():
            (images / name).write_bytes(png)


def write_snapshots(directory: Path, chosen: list[str]) -> None:
    """The visible cases of the chosen assignments' checks, with what they should give; on one
    thread, so that they do not depend on the machine's core count (reductions split by thread)."""
    with one_thread():
        for name in CHECKS:
            if any(assignment.startswith(name.split(".")[0] + "_") for assignment in chosen):
                api.write_snapshot(name, directory)


def read_all_questions() -> dict[str, list]:
    """Every assignment's questions, read from its source notebook."""
    return {a: read_questions(nbformat.read(source_notebook(a), as_version=4), a) for a in assignments()}


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


def stale_files(root: Path) -> list[str]:
    """Derived files under `root` (a fresh build) that differ from the committed ones."""
    stale = []
    for folder in (NOTEBOOKS, IMAGES, EXPECTED):
        for committed in folder.rglob("*"):
            if any(part.startswith(".") for part in committed.relative_to(folder).parts):
                continue  # not derived: make's stamp, JupyterLab's .ipynb_checkpoints
            if committed.is_file() and not (root / committed.relative_to(REPO)).exists():
                stale.append(f"{committed.relative_to(REPO)} (no longer built)")
    for fresh in sorted(p for p in root.rglob("*") if p.is_file()):
        committed = REPO / fresh.relative_to(root)
        if not committed.exists():
            stale.append(f"{committed.relative_to(REPO)} (missing)")
        elif fresh.suffix == ".pt":
            if not api.same_snapshot(fresh, committed):
                stale.append(str(committed.relative_to(REPO)))
        elif fresh.suffix == ".png":
            if not same_picture(fresh, committed):
                stale.append(str(committed.relative_to(REPO)))
        elif fresh.read_bytes() != committed.read_bytes():
            stale.append(str(committed.relative_to(REPO)))
    return stale


# A figure drawn from floats that differ in their last bits on another CPU (a trained model's
# decision boundary, a colour map's bin edge) differs in a few pixels: 0.09% of 00_spirals_boundary's
# between two machines. A changed figure (another curve, a title) changes far more.
PICTURE_PIXELS = 0.0025  # the share of pixels that may differ by more than one step of 255


def same_picture(a: Path, b: Path) -> bool:
    from PIL import Image  # matplotlib's own dependency

    with Image.open(a) as first, Image.open(b) as second:
        if first.size != second.size:
            return False
        x, y = (np.asarray(image.convert("RGBA"), dtype=np.int16) for image in (first, second))
    differing = (np.abs(x - y).max(axis=-1) > 1).mean()
    return bool(differing <= PICTURE_PIXELS)
