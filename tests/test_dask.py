"""`course grade --dask`: the same class graded through a LocalCluster of two Dask workers and
through the local process pool gives the same grades, row for row and cell for cell; and the
workers of a scheduler started by hand, as on other machines, grade too. A local cluster admits
no process without its run's key, and none of its ports answers HTTP."""

import asyncio
import csv
import os
import shutil
import signal
import socket
import ssl
import stat
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit

import dask
import nbformat
import psutil
import pytest
from distributed import Client
from distributed.comm import connect

from grader.cli import main
from grader.dispatch import dask_cluster
from grader.dispatch.dispatch import Batch
from grader.notebook.autograde import Limits

from .helpers.machine import needs_sandbox
from .helpers.submissions import mistake, mutant, perfect, release

pytestmark = pytest.mark.batches  # make test runs it beside another file of batches

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
def _running(*command: str, env: dict[str, str] | None = None):
    """A Dask process of this test's, stopped (with its children) at the end."""
    process = subprocess.Popen(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True, env=env
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


@contextmanager
def _environment(**variables: str):
    """Dask's settings as `course grade` reads them from its environment when it starts."""
    saved = dict(os.environ)
    os.environ.update(variables)
    dask.config.refresh()
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)
        dask.config.refresh()


@needs_sandbox
def test_the_workers_of_a_scheduler_grade_and_one_of_several_threads_is_refused(tmp_path):
    """As an instructor runs it on other machines, with TLS as docs/grading-at-scale.md says: a
    certificate made with openssl, `dask scheduler` and `dask worker` given it, then `course grade
    --dask tls://...` given it through Dask's environment variables; the workers make and remove
    their own scratch folders."""
    for student, notebook in (("perfect", perfect("07_rmsnorm")), ("untouched", release("07_rmsnorm"))):
        (tmp_path / "in" / student).mkdir(parents=True)
        nbformat.write(notebook, tmp_path / "in" / student / "07_rmsnorm.ipynb")
    cert, key = tmp_path / "dask.pem", tmp_path / "dask.key"
    make = "openssl req -x509 -nodes -newkey ec -pkeyopt ec_paramgen_curve:P-256 -days 365".split()
    subprocess.run([*make, "-subj", "/CN=course-dask", "-keyout", key, "-out", cert], check=True)
    tls = ["--tls-ca-file", str(cert), "--tls-cert", str(cert), "--tls-key", str(key), "--no-dashboard"]
    cli = str(Path(sys.executable).parent / "dask")
    address = f"tls://127.0.0.1:{_free_port()}"
    grade = ["grade", str(tmp_path / "in"), "--out", str(tmp_path / "out"), "--dask", address]
    # The workers' own temporary folder, not /tmp (where other processes make folders too); short,
    # for the Unix sockets of the kernels' sandboxes made in it.
    scratch = Path(tempfile.mkdtemp(prefix="workers-"))
    workers = {**os.environ, "TMPDIR": str(scratch)}
    with (
        _environment(
            DASK_DISTRIBUTED__COMM__REQUIRE_ENCRYPTION="True",
            DASK_DISTRIBUTED__COMM__TLS__CA_FILE=str(cert),
            DASK_DISTRIBUTED__COMM__TLS__CLIENT__CERT=str(cert),
            DASK_DISTRIBUTED__COMM__TLS__CLIENT__KEY=str(key),
        ),
        _running(cli, "scheduler", "--host", "127.0.0.1", "--port", address.rsplit(":", 1)[1], *tls),
    ):
        with _running(cli, "worker", address, "--nthreads", "2", *tls, env=workers):
            _wait_for_workers(address, 1)
            with pytest.raises(SystemExit, match="--nthreads 1"):
                main(grade)
        with _running(cli, "worker", address, "--nworkers", "2", "--nthreads", "1", *tls, env=workers):
            _wait_for_workers(address, 2)
            assert main(grade) == 0
    rows = {r["student"]: r for r in csv.DictReader((tmp_path / "out" / "grades.csv").open())}
    assert (rows["perfect"]["score"], rows["untouched"]["score"]) == ("6", "0")
    assert list(scratch.glob("course-*")) == []
    shutil.rmtree(scratch)  # what Dask left there


def _listening() -> set[int]:
    """The TCP ports this process and its children listen on."""
    me = psutil.Process()
    ports = set()
    for process in [me, *me.children(recursive=True)]:
        try:
            connections = process.net_connections(kind="tcp")
        except psutil.NoSuchProcess:
            continue
        ports |= {c.laddr.port for c in connections if c.status == psutil.CONN_LISTEN}
    return ports


@contextmanager
def _local_cluster(tmp_path: Path):
    """The local cluster of a `--dask local:2` run (a template of one file: no notebook is graded),
    and the ports it opened."""
    (tmp_path / "template").mkdir()
    (tmp_path / "template" / "gradebook.db").write_bytes(b"")
    (tmp_path / "scratch").mkdir(mode=0o700)
    before = _listening()
    cluster = dask_cluster.DaskCluster(
        "local:2", Limits(), tmp_path / "template", Batch(str(tmp_path / "scratch"))
    )
    try:
        yield cluster, _listening() - before
    finally:
        cluster.close()


def _admitted(address: str, **connection_args) -> bool:
    """Whether a Dask process at `address` takes a connection (and so the code it may carry)."""

    async def attempt():
        try:
            comm = await connect(address, timeout=3, **connection_args)
        except OSError:
            return False
        await comm.close()
        return True

    return asyncio.run(attempt())


def test_a_local_cluster_admits_no_process_without_its_runs_key(tmp_path):
    """A local user who reaches the run's ports, with no certificate or another run's, can neither
    open a Client nor connect to the scheduler, a nanny or a worker; its key is the run's user's
    alone, and goes with the run."""
    stranger = tmp_path / "stranger"
    stranger.mkdir(mode=0o700)
    strangers = dask_cluster.run_security(stranger).get_connection_args("client")
    with _local_cluster(tmp_path) as (cluster, ports):
        scheduler = urlsplit(cluster.client.scheduler.address).port
        started = time.monotonic()
        with pytest.raises(OSError):
            Client(f"tcp://127.0.0.1:{scheduler}", timeout=3).run(os.getpid)
        assert time.monotonic() - started < 10
        assert scheduler in ports and len(ports) == 5  # and two nannies, two workers
        for port in ports:
            assert not _admitted(f"tcp://127.0.0.1:{port}")
            assert not _admitted(f"tls://127.0.0.1:{port}", **strangers)
        assert cluster.client.run(os.getpid)  # the run's own client is admitted
        (folder,) = (tmp_path / "scratch").glob("tls-*")
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700
        assert {stat.S_IMODE(f.stat().st_mode) for f in folder.iterdir() if f.suffix == ".key"} == {0o600}
    assert not folder.exists()


def _answers_http(port: int) -> bool:
    """Whether the port answers a GET, in plain text or over TLS without a certificate."""
    unverified = ssl.create_default_context()
    unverified.check_hostname, unverified.verify_mode = False, ssl.CERT_NONE
    for tls in (False, True):
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=3) as raw:
                sock = unverified.wrap_socket(raw) if tls else raw
                sock.sendall(b"GET / HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
                if sock.recv(5) == b"HTTP/":
                    return True
        except OSError:  # refused, reset, timed out, or a TLS handshake the port would not finish
            pass
    return False


def test_no_port_of_a_local_cluster_answers_http(tmp_path):
    """No dashboard, no info pages, no Prometheus metrics: nothing of the run speaks HTTP."""
    with _local_cluster(tmp_path) as (cluster, ports):
        assert ports
        assert [port for port in ports if _answers_http(port)] == []
        assert "dashboard" not in cluster.client.scheduler_info()["services"]
