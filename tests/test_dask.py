"""`course grade --dask`: the same class graded through a LocalCluster of two Dask workers and
through the local process pool gives the same grades, row for row and cell for cell; and the
workers of a scheduler started by hand, as on other machines, grade too."""

import csv
import os
import signal
import socket
import subprocess
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path

import nbformat
import pytest
from distributed import Client

from autograder.cli import main

from .machine import needs_sandbox
from .submissions import mistake, mutant, perfect, release

SEED = 20261126  # both output folders draw the same cases


def _class(folder: Path) -> None:
    """Full marks, nothing, partial credit (a causal mask of floats: its positions right, its dtype
    not), and a file that is not a notebook."""
    notebooks = {
        ("perfect", "07_rmsnorm"): perfect("07_rmsnorm"),
        ("perfect", "04_rope"): perfect("04_rope"),
        ("untouched", "07_rmsnorm"): release("07_rmsnorm"),
        ("mistaken", "01_attention"): mutant(
            "01_attention", "causal_mask", "causal_mask", mistake("01.causal_mask", "mask_of_floats")
        ),
    }
    for (student, notebook), content in notebooks.items():
        (folder / student).mkdir(parents=True, exist_ok=True)
        nbformat.write(content, folder / student / f"{notebook}.ipynb")
    (folder / "broken").mkdir()
    (folder / "broken" / "04_rope.ipynb").write_text('{"cells": [')


def _graded(submissions: Path, out: Path, *dispatch: str) -> str:
    (out / "work").mkdir(parents=True)
    (out / "work" / "case_seed").write_text(str(SEED))
    assert main(["grade", str(submissions), "--out", str(out), *dispatch]) == 0
    return (out / "grades.csv").read_text()


@needs_sandbox
def test_a_local_cluster_grades_as_the_local_pool_does(tmp_path):
    _class(tmp_path / "in")
    pool = _graded(tmp_path / "in", tmp_path / "pool", "--jobs", "2")
    cluster = _graded(tmp_path / "in", tmp_path / "cluster", "--dask", "local:2")
    assert cluster == pool
    rows = {(r["student"], r["notebook"]): r for r in csv.DictReader(pool.splitlines())}
    assert len(rows) == 5 and rows["broken", "04_rope"]["status"] == "failed"
    assert rows["perfect", "07_rmsnorm"]["score"] == "6" and rows["untouched", "07_rmsnorm"]["score"] == "0"
    mistaken = rows["mistaken", "01_attention"]
    assert 0 < float(mistaken["score"]) < float(mistaken["max_score"])
    pages = [("perfect", "07_rmsnorm"), ("untouched", "07_rmsnorm"), ("mistaken", "01_attention")]
    for student, notebook in pages:  # the pages came back too, whole
        page = tmp_path / "cluster" / "feedback" / student / f"{notebook}.html"
        assert page.read_text().endswith("</html>\n")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextmanager
def _running(*command: str):
    """A Dask process of this test's, stopped (with its children) at the end."""
    process = subprocess.Popen(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    try:
        yield process
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)


def _wait_for_workers(address: str, count: int) -> None:
    with Client(address, timeout=60) as client:
        client.wait_for_workers(count, timeout=60)


@needs_sandbox
def test_the_workers_of_a_scheduler_grade_and_one_of_several_threads_is_refused(tmp_path):
    """As an instructor runs it on other machines: `dask scheduler`, `dask worker`, then
    `course grade --dask tcp://...`; the workers make and remove their own scratch folders."""
    for student, notebook in (("perfect", perfect("07_rmsnorm")), ("untouched", release("07_rmsnorm"))):
        (tmp_path / "in" / student).mkdir(parents=True)
        nbformat.write(notebook, tmp_path / "in" / student / "07_rmsnorm.ipynb")
    dask = str(Path(sys.executable).parent / "dask")
    address = f"tcp://127.0.0.1:{_free_port()}"
    grade = ["grade", str(tmp_path / "in"), "--out", str(tmp_path / "out"), "--dask", address]
    scratch_before = set(Path(tempfile.gettempdir()).glob("course-*"))
    with _running(
        dask, "scheduler", "--host", "127.0.0.1", "--port", address.rsplit(":", 1)[1], "--no-dashboard"
    ):
        with _running(dask, "worker", address, "--nthreads", "2", "--no-dashboard"):
            _wait_for_workers(address, 1)
            with pytest.raises(SystemExit, match="--nthreads 1"):
                main(grade)
        with _running(dask, "worker", address, "--nworkers", "2", "--nthreads", "1", "--no-dashboard"):
            _wait_for_workers(address, 2)
            assert main(grade) == 0
    rows = {r["student"]: r for r in csv.DictReader((tmp_path / "out" / "grades.csv").open())}
    assert (rows["perfect"]["score"], rows["untouched"]["score"]) == ("6", "0")
    assert set(Path(tempfile.gettempdir()).glob("course-*")) <= scratch_before
