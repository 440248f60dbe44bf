"""Where a batch's notebooks are graded: worker processes of this machine (`LocalPool`, the
default), or the workers of a Dask cluster (dask_cluster.py, `course grade --dask`).

    for task, graded in dispatcher.graded(tasks):   # each task once, as it is done
        ...                                         # the batch's process stores what came back

Either way a worker runs autograde.Worker.grade on one notebook at a time and sends back what it
graded as data (autograde.Graded); only the batch's own process writes the output folder. A worker
that dies, or is still busy long after the notebook's time limit, costs only that notebook: it gets
a `failed` result saying so.
"""

import os
import resource
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from dataclasses import dataclass
from multiprocessing.util import Finalize
from pathlib import Path
from typing import Protocol

import torch

from grader.grades import failed
from grader.notebook.autograde import Graded, Limits, NotebookTask, Worker
from grader.notebook.kernels import AHEAD

WORKER_GRACE_S = 300  # past the notebook's own limit: judging, saving grades, the feedback page
WORKER_DIED = "the grader's worker died on this notebook (out of memory?)"


class Dispatcher(Protocol):
    def graded(self, tasks: list[NotebookTask]) -> Iterator[tuple[NotebookTask, Graded]]:
        """Each task with what grading it gave, as each is done; every task comes back once."""

    def close(self) -> None:
        """Let the workers go."""


@dataclass(frozen=True)
class Batch:
    """What the grading workers of this machine share for one `course grade` run: the folder their
    sandboxes are made in and the cgroup each sandbox's group is made in (grading.py makes both, and
    removes them with whatever a worker killed midway left there)."""

    scratch: str
    group: str = ""


def failure(task: NotebookTask, reason: str) -> Graded:
    """What a notebook gets whose worker died or hung (grading it gave nothing back): the next
    run grades it again, and it never replaces an earlier outcome of the same file (record.store)."""
    return Graded(failed(task.student, task.notebook, reason), reason, retry=True)


def starts_next(left: int, workers: int) -> bool:
    """Whether a notebook with `left` more after it in its batch starts the kernel of its worker's
    next (kernels.py): not one of the last `workers`, whose workers may get no other."""
    return left >= workers


def patience(limits: Limits) -> float:
    """How long a worker may take over one notebook before it is taken for hung."""
    return limits.notebook_timeout + WORKER_GRACE_S


def worker_bytes(limits: Limits) -> int:
    """The address space of a grading worker: the kernel's own cap must fit under it (a child
    can only lower its limits), with room for the judge."""
    return limits.memory_bytes + 4 * 2**30


# ------------------------------------------------------------------------------ this machine


_WORKER: Worker | None = None  # in each worker process of the local pool


def grade_here(task: NotebookTask, start_next: bool) -> Graded:
    """The local pool's task, in a worker process."""
    return _WORKER.grade(task, start_next=start_next)


def _start_worker(template: Path, batch: Batch, threads: int, memory_limit: int) -> None:
    """Cap the worker's memory (the judge's inputs come from students), keep its torch on one thread,
    and make its Worker.

    A worker is forked. If the parent ever ran a parallel torch operation, the child inherits
    an OpenMP thread pool whose threads did not survive the fork, and its first parallel
    operation (the judge's) waits for them forever; one thread never waits. The judge's
    tensors are small, so nothing is lost.
    """
    global _WORKER
    resource.setrlimit(resource.RLIMIT_AS, (memory_limit, memory_limit))
    torch.set_num_threads(1)
    _WORKER = Worker(template, Path(batch.scratch), batch.group, threads)
    Finalize(AHEAD, AHEAD.close, exitpriority=10)  # a worker ends without running atexit


class WorkerHung(BrokenProcessPool):
    """A worker still busy far past the notebook's time limit; the pool's workers were killed."""


class LocalPool:
    """`jobs` worker processes of this machine."""

    def __init__(self, jobs: int, limits: Limits, template: Path, batch: Batch):
        self.jobs, self.limits = jobs, limits
        self.start = (template, batch, max(1, (os.cpu_count() or 1) // jobs))

    @contextmanager
    def _pool(self, jobs: int) -> Iterator[ProcessPoolExecutor]:
        memory = worker_bytes(self.limits)
        pool = ProcessPoolExecutor(jobs, initializer=_start_worker, initargs=(*self.start, memory))
        try:
            yield pool
        finally:  # stopped early (an interrupt, a worker with other solutions): the rest is not graded
            pool.shutdown(cancel_futures=True)

    def close(self) -> None:
        """Nothing to let go: each call of `graded` starts and ends its own pool."""

    def graded(self, tasks: list[NotebookTask]) -> Iterator[tuple[NotebookTask, Graded]]:
        """A worker that dies, or hangs (it is then killed), breaks the pool: what the pool left
        unfinished is graded again one at a time, so that only the notebook that kills or hangs a
        worker fails."""
        crashed = []
        with self._pool(self.jobs) as pool:
            futures = [
                (pool.submit(grade_here, task, starts_next(len(tasks) - n - 1, self.jobs)), task)
                for n, task in enumerate(tasks)
            ]
            for future, task in futures:
                try:
                    yield task, self._result_within(future, pool)
                except WorkerHung as hung:  # not worth a second wait; the others killed with it are
                    yield task, failure(task, str(hung))
                except BrokenProcessPool:
                    crashed.append(task)
        for task in crashed:
            with self._pool(1) as pool:
                try:
                    yield task, self._result_within(pool.submit(grade_here, task, False), pool)
                except BrokenProcessPool as error:
                    yield task, failure(task, str(error) if isinstance(error, WorkerHung) else WORKER_DIED)

    def _result_within(self, future, pool: ProcessPoolExecutor) -> Graded:
        """The future's result; a worker that does not finish within the patience of this call is
        killed with the rest of the pool (a pool cannot kill one worker), which breaks it."""
        seconds = patience(self.limits)
        try:
            return future.result(timeout=seconds)
        except TimeoutError:
            for process in list(pool._processes.values()):  # no public way to reach the workers
                process.kill()
            raise WorkerHung(f"grading this notebook did not finish within {seconds:g} s") from None
