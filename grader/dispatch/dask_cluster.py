"""The Dask implementation of dispatch.Dispatcher: `course grade ... --dask ADDRESS`.

ADDRESS is a Dask scheduler's (`tls://host:8786`), whose workers may run on other machines, or
`local[:N]` for a LocalCluster of N worker processes on this machine (default: one per CPU). Each
worker grades one notebook at a time with autograde.Worker: it needs the course installed (the same
version: a worker with other solutions stops the batch) and bubblewrap, nothing else. A notebook
travels to it as bytes with its task, what grading it gave comes back as data, and only the batch's
process writes the output folder (docs/grading-at-scale.md).

A local cluster speaks mutual TLS only, with a certificate made for the run, and serves no HTTP: no
process without the run's key can reach it (docs/grading-at-scale.md, "Who can reach a local
cluster"). A remote cluster is as safe as its own configuration ("Securing a cluster", there).
"""

import functools
import os
import re
import secrets
import subprocess
import sys
import tempfile
import time
from collections import deque
from collections.abc import Iterator
from concurrent.futures import CancelledError
from dataclasses import replace
from pathlib import Path

import dask
import distributed
from distributed import Client, Nanny, Scheduler, Security, SpecCluster, WorkerPlugin, get_worker, wait
from distributed.comm import parse_address
from distributed.scheduler import KilledWorker

from autograder import cgroup
from autograder.exchange import remove_tree
from autograder.sandbox import unavailable_reason
from grader.dispatch.dispatch import WORKER_DIED, Batch, failure, patience, starts_next, worker_bytes
from grader.notebook.autograde import (
    Graded,
    Limits,
    NotebookTask,
    UnfitWorker,
    Worker,
    pack_template,
    unpack_template,
)
from grader.notebook.kernels import AHEAD

LOCAL = re.compile(r"local(?::([1-9]\d*))?")


class CourseWorker(WorkerPlugin):
    """Makes each Dask worker a grading worker: an autograde.Worker of its own, made when the plugin
    reaches the worker (also one that joins later) and removed with it.

    A worker of this machine (`batch` given) makes its sandboxes in the batch's folder and cgroup,
    which the batch removes even after a crash; a worker elsewhere makes a folder and a cgroup of its
    own, and removes them when it closes.
    """

    name = "course-grader"

    def __init__(self, packed_template: bytes, threads: int, batch: Batch | None):
        self.packed_template, self.threads, self.batch = packed_template, threads, batch
        self.worker: Worker | None = None
        self.own_group = ""

    def setup(self, worker=None) -> None:
        scratch = Path(tempfile.mkdtemp(prefix="course-", dir=self.batch.scratch if self.batch else None))
        if self.batch is not None:
            group = self.batch.group
        else:
            group = f"course-batch-{secrets.token_hex(4)}"
            self.own_group = group = group if cgroup.start_batch(group) else ""
        template = unpack_template(self.packed_template, scratch / "template")
        self.worker = Worker(template, scratch, group, self.threads)

    def teardown(self, worker=None) -> None:
        AHEAD.close()
        if self.own_group:
            cgroup.end_batch(self.own_group)
        if self.worker is not None:
            remove_tree(self.worker.scratch)


def grade_on_worker(task: NotebookTask, start_next: bool) -> Graded:
    """The task a Dask worker runs: one notebook at a time (nbgrader's runs and the kernel started
    ahead are the process's own), so a worker of several threads is refused. `start_next`: as
    Worker.grade's."""
    worker = get_worker()
    if worker.state.nthreads != 1:
        raise UnfitWorker(
            f"the Dask worker {worker.address} runs {worker.state.nthreads} threads: start grading workers "
            "with --nthreads 1 (docs/grading-at-scale.md)"
        )
    if task.limits.sandboxed and (why := _sandbox_problem()):
        raise UnfitWorker(f"the Dask worker {worker.address} cannot sandbox a kernel: {why}")
    return worker.plugins[CourseWorker.name].worker.grade(task, start_next=start_next)


_sandbox_problem = functools.cache(unavailable_reason)  # asked once per worker process


def run_security(folder: Path) -> Security:
    """Mutual TLS for one local run: a self-signed certificate and its key, made for the run in
    `folder` (mkdtemp's: only this user may open it). The run's scheduler, nannies, workers and
    client each present that certificate and trust nothing else, so a process without the key
    (another user's, another run's) cannot connect, and plain TCP is refused."""
    cert, key, config = folder / "run.pem", folder / "run.key", folder / "openssl.cnf"
    config.write_text("[req]\ndistinguished_name = name\n[name]\n")  # the system's may be missing
    key.touch(mode=0o600)  # openssl keeps the mode of the file it overwrites
    # 30 days: a large class can take days to grade, and the key is never used after its run
    make = "openssl req -x509 -nodes -newkey ec -pkeyopt ec_paramgen_curve:P-256 -days 30"
    command = [*make.split(), "-subj", "/CN=course-grader-run", "-config", str(config)]
    command += ["-keyout", str(key), "-out", str(cert)]
    try:
        subprocess.run(command, check=True, capture_output=True, text=True)
    except FileNotFoundError:
        raise SystemExit("--dask local needs openssl (Debian/Ubuntu: `apt-get install openssl`)") from None
    except subprocess.CalledProcessError as error:
        raise SystemExit(
            f"--dask local: openssl could not make the run's certificate: {error.stderr}"
        ) from None
    roles = {f"tls_{role}_cert": str(cert) for role in ("client", "scheduler", "worker")}
    roles |= {f"tls_{role}_key": str(key) for role in ("client", "scheduler", "worker")}
    return Security(require_encryption=True, tls_ca_file=str(cert), **roles)


class _NoHttp:
    """Every Dask scheduler and worker starts an HTTP server (info pages, Prometheus metrics,
    worker logs) on a port of its own, even without a dashboard and without routes; these start none."""

    def start_http_server(self, *args, **kwargs) -> None:
        """Nothing to start: the run is watched through its client only."""


class SchedulerWithoutHttp(_NoHttp, Scheduler):
    pass


class WorkerWithoutHttp(_NoHttp, distributed.Worker):
    pass


def local_cluster(workers: int, limits: Limits, security: Security) -> SpecCluster:
    """The cluster of `--dask local:N`: `workers` worker processes (each with its nanny) and a
    scheduler on 127.0.0.1, reached through TLS only, with no HTTP server."""
    common = {"host": "127.0.0.1", "protocol": "tls://", "security": security}
    scheduler = {"cls": SchedulerWithoutHttp, "options": {**common, "port": 0, "dashboard": False}}
    worker = {
        "cls": Nanny,
        "options": {
            **common,
            "worker_class": WorkerWithoutHttp,
            "silence_logs": 40,
            "nthreads": 1,  # a worker grades one notebook at a time (kernels.py)
            "memory_limit": worker_bytes(limits),  # the local pool's cap on a worker
        },
    }
    # A notebook that kills its worker is tried once more, on another (as the local pool does).
    with dask.config.set({"distributed.scheduler.allowed-failures": 1}):
        return SpecCluster(
            scheduler=scheduler,
            workers=dict.fromkeys(range(workers), worker),
            security=security,
            silence_logs=40,
        )


class DaskCluster:
    """The workers of a Dask cluster (see the module's docstring for `address`)."""

    def __init__(self, address: str, limits: Limits, template: Path, batch: Batch):
        self.limits, self.cluster, self.tls = limits, None, None
        local = LOCAL.fullmatch(address)
        if local:
            workers = int(local.group(1) or os.cpu_count() or 1)
            # In the batch's folder: removed at the end, and by the next run into OUT after a crash.
            self.tls = Path(tempfile.mkdtemp(prefix="tls-", dir=batch.scratch))
            self.cluster = local_cluster(workers, limits, run_security(self.tls))
            self.client = Client(self.cluster)
            threads, shared = max(1, (os.cpu_count() or 1) // workers), batch
        else:
            try:
                self.client = Client(address, timeout=30)
            except (OSError, ValueError, TimeoutError) as error:
                raise SystemExit(f"cannot reach the Dask scheduler at {address}: {error}") from None
            if parse_address(self.client.scheduler.address)[0] not in ("tls", "wss"):
                print(
                    f"warning: {address} is not authenticated: whoever reaches the scheduler or a worker can "
                    "run code on the workers and read the notebooks; use TLS (docs/grading-at-scale.md)",
                    file=sys.stderr,
                )
            threads, shared = 1, None  # one math thread per kernel: run a worker per core
        try:
            self.client.register_plugin(
                CourseWorker(pack_template(template), threads, shared), name=CourseWorker.name
            )
        except Exception as error:  # a worker could not take the course: nothing graded yet
            self._let_go()
            raise SystemExit(f"the Dask workers could not be set up for grading: {error}") from None

    def close(self) -> None:
        try:
            self.client.unregister_worker_plugin(CourseWorker.name)  # each worker's teardown
        finally:
            self._let_go()

    def _let_go(self) -> None:
        self.client.close()
        if self.cluster is not None:
            self.cluster.close()
        if self.tls is not None:
            remove_tree(self.tls)

    def graded(self, tasks: list[NotebookTask]) -> Iterator[tuple[NotebookTask, Graded]]:
        """A few tasks in flight per worker (each carries its notebook's bytes), taken back as each
        ends. One not back within two notebooks' patience of its submission (it may wait for one
        notebook before it starts) is given up, and its worker restarted."""
        waiting, running = deque(tasks), {}
        longest = 2 * patience(self.limits)
        while waiting or running:
            workers = max(1, sum(self.client.nthreads().values()))
            while waiting and len(running) < 2 * workers:
                task = waiting.popleft()
                future = self.client.submit(
                    grade_on_worker,
                    replace(task, content=task.read()),
                    starts_next(len(waiting), workers),
                    pure=False,
                )
                running[future] = (task, time.monotonic() + longest)
            deadline = min(due for _, due in running.values())
            try:
                finished = wait(
                    list(running),
                    timeout=max(0.0, deadline - time.monotonic()),
                    return_when="FIRST_COMPLETED",
                ).done
            except TimeoutError:
                finished = set()
            except CancelledError:  # the cluster cancelled some (lost its client, restarted)
                finished = {future for future in running if future.status != "pending"}
            for future in finished:
                task, _ = running.pop(future)
                try:
                    graded = future.result()
                except KilledWorker:
                    graded = failure(task, WORKER_DIED)
                except UnfitWorker:
                    raise  # the batch stops, saying why
                except Exception as error:  # the cluster lost it (cancelled, a worker's own failure)
                    graded = failure(
                        task, f"the Dask cluster gave no result for this notebook ({type(error).__name__})"
                    )
                yield task, graded
            for future, (task, due) in list(running.items()):
                if due <= time.monotonic():
                    del running[future]
                    self._give_up(future)
                    yield task, failure(task, f"grading this notebook did not finish within {longest:g} s")

    def _give_up(self, future) -> None:
        """Cancel a task that hangs its worker, and restart that worker."""
        hung = [address for address, keys in self.client.processing().items() if future.key in keys]
        future.cancel()
        if hung:
            self.client.restart_workers(hung, raise_for_error=False)
