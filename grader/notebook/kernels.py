"""Grading kernels started ahead of the notebooks that need them.

A sandboxed kernel's start (bubblewrap, ipykernel, then torch, matplotlib and this package:
kernel_launcher.py) takes 2-4 s of a 5-10 s notebook. A grading worker grades its notebooks one
after another, so while one runs, the kernel of the next starts beside it and has done its imports
by the time that notebook needs it (`KernelsAhead`).

Each kernel is new and serves one notebook. It is started before any student's code runs in it, in
a root, a process group and namespaces (processes, network, IPC, mounts) of its own, so nothing of
the notebook graded while it waited can reach it (tests/test_grading.py grades a notebook that
leaves files, processes and module state behind, then one that looks for them).

What it costs: a second kernel per worker, idle with torch imported, while the first runs
(benchmarks/README.md, "Class throughput").
"""

import atexit
import logging
from collections.abc import Callable, Hashable
from pathlib import Path

from jupyter_core.utils import run_sync

from autograder.exchange import remove_tree
from autograder.sandbox import SandboxedKernelManager

# What nbclient passes to a Python kernel it starts itself (its `ipython_hist_file`): no history file.
KERNEL_ARGUMENTS = ["--HistoryManager.hist_file=:memory:"]


class KernelsAhead:
    """One kernel kept started ahead for the next notebook of this process."""

    def __init__(self) -> None:
        self._spare: tuple[Hashable, SandboxedKernelManager] | None = None
        atexit.register(self.close)  # also where no worker ends it (Worker.grade called in a test, say)

    def take(self, settings: Hashable) -> SandboxedKernelManager | None:
        """The kernel started ahead, if it was made with these `settings` and is still alive."""
        spare, self._spare = self._spare, None
        if spare is None:
            return None
        made_with, manager = spare
        if made_with == settings and run_sync(manager.is_alive)():
            return manager
        run_sync(_stop)(manager)
        return None

    async def start_next(self, settings: Hashable, make: Callable[[], SandboxedKernelManager]) -> None:
        """Start the next notebook's kernel; returns once it is launched, not once it is ready."""
        spare, self._spare = self._spare, None
        if spare is not None:
            await _stop(spare[1])
        manager = None
        try:
            manager = make()
            await manager.start_kernel(extra_arguments=KERNEL_ARGUMENTS)
        except Exception as error:  # the grader's trouble, not this notebook's: the next starts its own
            logging.getLogger(__name__).warning("the next notebook's kernel could not start ahead: %s", error)
            if manager is not None:
                await _stop(manager)
            return
        self._spare = (settings, manager)

    def close(self) -> None:
        """Stop the kernel started ahead, if any (the end of a worker)."""
        spare, self._spare = self._spare, None
        if spare is not None:
            run_sync(_stop)(spare[1])


async def _stop(manager: SandboxedKernelManager) -> None:
    """Shut a kernel down for good: its processes, its process group and its root."""
    try:
        await manager.shutdown_kernel(now=True)
    except Exception as error:  # already gone; what matters is what follows
        logging.getLogger(__name__).debug("a kernel started ahead would not shut down: %s", error)
    finally:
        manager.end_process_group()
        remove_tree(Path(manager.root))


AHEAD = KernelsAhead()  # this process's: a grading worker grades one notebook at a time
