"""`course build` rewrites only the derived files whose content changed: one built on another CPU, whose
floats differ in their last bits, leaves the instructor's `git status` clean. And it writes the points
table into docs/, where the build check finds a hand-edited one stale, and each check's points into
its test cells.
"""

import dataclasses
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import numpy as np
import pytest
import torch
from PIL import Image

from autograder import language_model as lm
from autograder.checks import CHECKS
from autograder.paths import REPO
from grader import build
from grader.build import (
    POINTS_TABLE_END,
    POINTS_TABLE_START,
    install,
    same_checkpoint,
    same_content,
    stale_files,
    write_points_tables,
)
from grader.points import points_table

ASSIGNMENT = "07_rmsnorm"  # a quick one with both a figure and visible cases
SNAPSHOT = Path("autograder/expected/07.rmsnorm.pt")
FIGURE = Path("images/07_rms_before_after.png")
NOTEBOOK = Path(f"notebooks/{ASSIGNMENT}/{ASSIGNMENT}.ipynb")
PAGE = Path("docs/points.md")
LONG_AGO = 1_000_000_000 * 10**9  # ns: an mtime that any write replaces
HAND_EDITED = points_table() + "\n| `12.extra` | 1 | 1 | pasted by hand |"


def one_ulp_off(path: Path) -> None:
    """Move one float of a snapshot's reference outputs to the next float up: another CPU's build."""
    snapshot = torch.load(path, weights_only=True)
    output = next(v for v in snapshot["expected"][0]["reference"].values() if v.is_floating_point())
    output.view(-1)[0] = torch.nextafter(output.view(-1)[0], torch.tensor(float("inf"), dtype=output.dtype))
    torch.save(snapshot, path)


def one_pixel_off(path: Path) -> None:
    """Change one channel of one pixel by one step and encode the PNG again (other bytes, one figure)."""
    with Image.open(path) as image:
        pixels = np.asarray(image.convert("RGBA")).copy()
    pixels[0, 0, 0] ^= 1
    Image.fromarray(pixels).save(path)


def git(repo: Path, *args: str) -> str:
    command = ["git", "-c", "user.name=test", "-c", "user.email=test@example.org", *args]
    return subprocess.run(command, cwd=repo, check=True, capture_output=True, text=True).stdout


def page_text(table: str) -> str:
    return f"# Points\n\n{POINTS_TABLE_START}\n{table}\n{POINTS_TABLE_END}\n\nThe rest.\n"


@pytest.fixture
def clone(tmp_path) -> Path:
    """The working tree's files (tracked and not ignored) in a repository of their own, committed: a
    fresh clone of the course as it is now."""
    repo = tmp_path / "course"
    files = git(REPO, "ls-files", "-z", "--cached", "--others", "--exclude-standard").split("\0")
    for name in filter(None, files):
        if (REPO / name).is_file():  # not one deleted in the working tree
            (repo / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, repo / name)
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "the course")
    return repo


def build_in(repo: Path, assignment: str) -> None:
    """`course build <assignment>` without the checkpoint, with `repo` as the course (autograder.paths
    finds REPO from the package's own place, and the solution notebooks' kernels import it too)."""
    env = {k: v for k, v in os.environ.items() if k != "COURSE_SOLUTIONS"}
    env["PYTHONPATH"] = str(repo)
    code = (
        "import grader.build as b, pathlib; "
        "assert pathlib.Path(b.__file__).parent.parent == pathlib.Path.cwd(), b.__file__; "
        f"b.build(only=[{assignment!r}], checkpoint=False)"
    )
    subprocess.run([sys.executable, "-c", code], cwd=repo, env=env, check=True, timeout=300)


def test_a_build_on_another_cpu_leaves_the_clone_clean(clone):
    """The committed snapshot one ulp off and the figure one pixel step off (as another CPU builds them)
    are left as committed, bytes and modification time; a hand-edited notebook and points table and a
    stray file are made right again. Before, the build wrote every file it made: `git status` listed the
    snapshot and the figure."""
    one_ulp_off(clone / SNAPSHOT)
    one_pixel_off(clone / FIGURE)
    (clone / PAGE).write_text(page_text(points_table()))
    git(clone, "add", "-A")
    git(clone, "commit", "-q", "-m", "built on another CPU; a page with the points table")
    tracked = git(clone, "ls-files", "-z").split("\0")[:-1]
    for name in tracked:
        os.utime(clone / name, ns=(LONG_AGO, LONG_AGO))
    (clone / NOTEBOOK).write_text((clone / NOTEBOOK).read_text().replace("rmsnorm", "RMSNorm"))
    (clone / PAGE).write_text(page_text(HAND_EDITED))
    (clone / NOTEBOOK).with_name("stray.txt").write_text("not built")
    assert git(clone, "status", "--porcelain") != ""

    build_in(clone, ASSIGNMENT)

    status = git(clone, "status", "--porcelain")
    assert status == "", f"the build of {ASSIGNMENT} left the clone changed:\n{status}"
    touched = sorted(n for n in tracked if (clone / n).stat().st_mtime_ns != LONG_AGO)
    assert touched == [str(PAGE), str(NOTEBOOK)], "the build wrote files whose content it did not change"


def test_install_keeps_an_equal_file_and_writes_a_changed_one(tmp_path):
    """Within the build check's tolerance a file is kept as it is, bytes and mtime; beyond, written."""
    committed, new = tmp_path / "committed", tmp_path / "new"
    kept, changed = SNAPSHOT, SNAPSHOT.with_name("07.rmsnorm_norm.pt")
    for root in (committed, new):
        (root / SNAPSHOT.parent).mkdir(parents=True)
        for name in (kept, changed):
            shutil.copyfile(REPO / name, root / name)
        (root / "notes.txt").write_text("text compares by bytes\n")
    one_ulp_off(new / kept)
    snapshot = torch.load(new / changed, weights_only=True)
    output = next(v for v in snapshot["expected"][0]["reference"].values() if v.is_floating_point())
    output.view(-1)[0] += 1e-3 * output.abs().max() + 1e-3  # a changed reference moves far more than this
    torch.save(snapshot, new / changed)
    (new / "notes.txt").write_text("text compares by bytes \n")
    for path in committed.rglob("*"):
        os.utime(path, ns=(LONG_AGO, LONG_AGO))
    assert stale_files(new, committed) == [str(changed), "notes.txt"]

    install(new, committed)

    assert (committed / kept).read_bytes() != (new / kept).read_bytes()
    assert (committed / kept).stat().st_mtime_ns == LONG_AGO
    assert (committed / changed).read_bytes() == (new / changed).read_bytes()
    assert (committed / "notes.txt").read_text() == "text compares by bytes \n"
    assert stale_files(new, committed) == []


def test_a_figure_one_pixel_step_off_is_the_same_and_a_redrawn_one_is_not(tmp_path):
    a, b = tmp_path / "a" / FIGURE.name, tmp_path / "b" / FIGURE.name
    for path in (a, b):
        path.parent.mkdir()
        shutil.copyfile(REPO / FIGURE, path)
    one_pixel_off(b)
    assert a.read_bytes() != b.read_bytes() and same_content(a, b)
    with Image.open(b) as image:
        image.rotate(90).save(b)
    assert not same_content(a, b)


# --------------------------------------------------------------------------------- the checkpoint


@pytest.fixture(scope="module")
def checkpoint():
    return torch.load(lm.CHECKPOINT, weights_only=True)


def saved(tmp_path: Path, contents: dict, folder: str) -> Path:
    path = tmp_path / folder / lm.CHECKPOINT.name
    path.parent.mkdir()
    torch.save(contents, path)
    return path


def test_a_checkpoint_trained_on_another_cpu_is_the_same(tmp_path, checkpoint):
    """Other weights (training carries another CPU's last bits far), the same recipe and first losses:
    as measured in build.py, 3 ulps apart for 50 steps, then parting; the held-out loss 2e-4 away."""
    losses = checkpoint["losses"].clone()
    losses[:50] += 7.2e-7
    losses[50:] += 0.02
    other = {
        **checkpoint,
        "state_dict": {k: v * 1.5 for k, v in checkpoint["state_dict"].items()},
        "losses": losses,
        "held_out_loss": checkpoint["held_out_loss"] + 2e-4,
    }
    assert same_content(saved(tmp_path, checkpoint, "a"), saved(tmp_path, other, "b"))


@pytest.mark.parametrize(
    "change",
    ["the first loss", "the held-out loss", "the recipe", "a parameter's shape", "a parameter's name"],
)
def test_a_checkpoint_of_another_recipe_or_model_is_not_the_same(tmp_path, checkpoint, change):
    other = {**checkpoint, "state_dict": dict(checkpoint["state_dict"])}
    if change == "the first loss":
        other["losses"] = checkpoint["losses"].clone()
        other["losses"][0] += 1e-3
    elif change == "the held-out loss":
        other["held_out_loss"] += 1e-2
    elif change == "the recipe":
        other["recipe"] = {**checkpoint["recipe"], "lr": 1e-3}
    elif change == "a parameter's shape":
        other["state_dict"]["out.bias"] = torch.zeros(31)
    else:
        other["state_dict"]["head.bias"] = other["state_dict"].pop("out.bias")
    assert not same_checkpoint(saved(tmp_path, checkpoint, "a"), saved(tmp_path, other, "b"))


# ------------------------------------------------------------------------------ the points table


def test_the_build_writes_the_points_table_between_the_markers(tmp_path):
    docs, out = tmp_path / "docs", tmp_path / "out"
    docs.mkdir()
    (docs / "students.md").write_text(page_text("| an old | table |\n| --- | --- |"))
    (docs / "other.md").write_text("No table here.\n")
    write_points_tables(docs, out)
    assert sorted(p.name for p in out.iterdir()) == ["students.md"]  # a page without markers: left alone
    assert (out / "students.md").read_text() == page_text(points_table())


def test_the_build_check_finds_a_hand_edited_points_table_stale(tmp_path):
    committed, fresh = tmp_path / "committed", tmp_path / "fresh"
    (committed / "docs").mkdir(parents=True)
    (committed / "docs" / "students.md").write_text(page_text(points_table()))
    write_points_tables(committed / "docs", fresh / "docs")
    assert stale_files(fresh, committed) == []
    (committed / "docs" / "students.md").write_text(page_text(HAND_EDITED))
    assert stale_files(fresh, committed) == ["docs/students.md"]


def test_a_checks_points_are_written_into_its_test_cells(tmp_path, monkeypatch):
    """Points are written in the check alone: the build writes them into the source notebook's cells
    (nbgrader's gradebook reads them there), and leaves a notebook that already has them unwritten."""
    build.write_points(tmp_path / "unchanged", [ASSIGNMENT])
    assert not (tmp_path / "unchanged").exists()
    changed = {**CHECKS, "07.rmsnorm_norm": dataclasses.replace(CHECKS["07.rmsnorm_norm"], hidden_points=5.0)}
    monkeypatch.setattr(build, "CHECKS", changed)
    build.write_points(tmp_path / "solutions", [ASSIGNMENT])
    written = nbformat.read(tmp_path / "solutions" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb", as_version=4)
    points = {c.metadata.nbgrader["grade_id"]: c.metadata.nbgrader.get("points") for c in written.cells}
    assert points["rmsnorm_norm_hidden"] == 5.0
    assert points["rmsnorm_norm_test"] == CHECKS["07.rmsnorm_norm"].points
    assert f"solutions/{ASSIGNMENT}/{ASSIGNMENT}.ipynb" in stale_files(
        tmp_path, REPO
    )  # the build check fails


@pytest.mark.parametrize(
    "text, message",
    [
        (f"{POINTS_TABLE_START}\n| a table |\n", "students.md:1: the points table's start marker has no end"),
        (f"{POINTS_TABLE_START}\n\n{POINTS_TABLE_START}\n{POINTS_TABLE_END}\n", "before the next start"),
        (f"text\n{POINTS_TABLE_END}\n", f"students.md:2: {POINTS_TABLE_END} with no {POINTS_TABLE_START}"),
    ],
    ids=["no end", "two starts", "an end alone"],
)
def test_unbalanced_markers_stop_the_build_naming_the_line(tmp_path, text, message):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "students.md").write_text(text)
    with pytest.raises(SystemExit, match=re.escape(message)):
        write_points_tables(tmp_path / "docs", tmp_path / "out")
