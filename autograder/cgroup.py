"""A control group per sandbox: a cap on its processes and memory as a whole, and its share of CPU.

rlimits bound each process of a sandbox, not their number or their sum: a fork bomb, or
ten processes of 4 GiB each, would slow the whole machine and could make the kernel's
out-of-memory killer pick another notebook's kernel. A group with `pids` and `memory`
limits stops them at the sandbox's own limits, and lets the grader kill every process of
a sandbox, whatever it forked or detached, before it touches the sandbox's folders. Where
the `cpu` controller is there too, every sandbox weighs the same whatever it runs: without
it, 150 processes each in a session of its own (the scheduler's autogroups) would leave
another notebook's kernel 1/150 of the processor, and its cells would time out.

cgroup v2 is used where its controllers are delegated to the grader's group; else cgroup v1
(a group in each controller's hierarchy); else none, and `unavailable_reason` says why (the
grader then warns once per batch).
"""

import os
import secrets
import signal
import time
from dataclasses import dataclass
from pathlib import Path

CONTROLLERS = ("pids", "memory")  # needed
SHARES = "cpu"  # used where there
KILL_PATIENCE_S = 10.0  # for a group's processes to go once killed (a fork bomb keeps forking)


@dataclass(frozen=True)
class Limits:
    processes: int  # processes and threads, together (what the kernel's pids controller counts)
    memory_bytes: int  # resident memory and tmpfs pages of all its processes together


@dataclass(frozen=True)
class ProcessGroup:
    """One sandbox's group: its folder in each hierarchy, by controller (v2: one folder, under "")."""

    folders: dict[str, Path]
    version: int

    @classmethod
    def create(cls, limits: Limits, batch: str = "") -> "ProcessGroup":
        """A new group under the grader's own (in its batch's group, if named), with the limits;
        raises OSError where none can be made."""
        parents, version = _parents()
        if batch:  # made by start_batch, before any worker started
            parents = {controller: parent / batch for controller, parent in parents.items()}
        name = f"course-{secrets.token_hex(6)}"
        group = cls({controller: parent / name for controller, parent in parents.items()}, version)
        try:
            for folder in group.folders.values():
                folder.mkdir()
            group._limit(limits)
        except BaseException:  # no half-made group is left behind, whatever stopped its making
            group.remove()
            raise
        return group

    def _limit(self, limits: Limits) -> None:
        # The CPU share is the default one (cpu.shares 1024, cpu.weight 100): equal for every sandbox.
        if self.version == 2:
            folder = self.folders[""]
            _write(folder / "pids.max", limits.processes)
            _write(folder / "memory.max", limits.memory_bytes)
            _write(folder / "memory.swap.max", 0, missing_ok=True)
            return
        _write(self.folders["pids"] / "pids.max", limits.processes)
        memory = self.folders["memory"]
        _write(memory / "memory.limit_in_bytes", limits.memory_bytes)
        _write(memory / "memory.memsw.limit_in_bytes", limits.memory_bytes, missing_ok=True)  # no swap

    def join(self) -> None:
        """Move the calling process into the group (from a child, before it executes the kernel)."""
        for folder in self.folders.values():
            _write(folder / "cgroup.procs", os.getpid())

    def processes(self) -> set[int]:
        found: set[int] = set()
        for folder in self.folders.values():
            try:
                found.update(int(line) for line in (folder / "cgroup.procs").read_text().split())
            except FileNotFoundError:
                pass
        return found

    def kill_all(self) -> bool:
        """SIGKILL every process in the group until none is left; False if some outlived the patience."""
        deadline = time.monotonic() + KILL_PATIENCE_S
        while pids := self.processes():
            if time.monotonic() > deadline:
                return False
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.02)
        return True

    def events(self) -> list[str]:
        """What the limits stopped, in words for the grader's log (empty when nothing was stopped)."""
        if self.version == 2:
            folder = self.folders[""]
            refused = _counter(folder / "pids.events", "max")
            killed = _counter(folder / "memory.events", "oom_kill")
        else:
            refused = _counter(self.folders["pids"] / "pids.events", "max")
            killed = _counter(self.folders["memory"] / "memory.oom_control", "oom_kill")
        said = []
        if refused:
            said.append(f"the sandbox refused {refused} new processes or threads (its limit was reached)")
        if killed:
            said.append(f"the sandbox ran out of memory: {killed} of its processes were killed")
        return said

    def remove(self) -> None:
        """Delete the group's folders (they must be empty: kill_all first)."""
        for folder in self.folders.values():
            try:
                folder.rmdir()
            except FileNotFoundError:
                pass


def start_batch(batch: str) -> bool:
    """Make the batch's group, in which each sandbox's is made: once, before any worker starts
    (in v2 it must hand its controllers on before a child exists). False where none can be made."""
    try:
        parents, version = _parents()
        for parent in parents.values():
            (parent / batch).mkdir(exist_ok=True)
            if version == 2:
                enabled = (parent / "cgroup.subtree_control").read_text().split()
                handed_on = " ".join(f"+{c}" for c in (*CONTROLLERS, SHARES) if c in enabled)
                (parent / batch / "cgroup.subtree_control").write_text(handed_on)
    except (OSError, LookupError):
        return False
    return True


def end_batch(batch: str) -> int:
    """Kill and remove every group left in the batch's, then the batch's own; returns how many
    sandboxes' groups were left there (a worker killed midway never ends its sandbox)."""
    try:
        parents, version = _parents()
    except (OSError, LookupError):
        return 0
    folders = {controller: parent / batch for controller, parent in parents.items()}
    names = {
        child.name
        for folder in folders.values()
        if folder.is_dir()
        for child in folder.iterdir()
        if child.is_dir()
    }
    for name in names:
        group = ProcessGroup({controller: folder / name for controller, folder in folders.items()}, version)
        group.kill_all()
        group.remove()
    ProcessGroup(folders, version).remove()
    return len(names)


def unavailable_reason() -> str | None:
    """Why no group can be made here (None: one can). Makes one with tiny limits to see."""
    try:
        group = ProcessGroup.create(Limits(processes=16, memory_bytes=64 * 2**20))
    except (OSError, LookupError) as error:
        return str(error) if isinstance(error, LookupError) else f"{error.strerror}: {error.filename}"
    group.remove()
    return None


def _parents() -> tuple[dict[str, Path], int]:
    """The grader's own group in each hierarchy that has the controllers, and the cgroup version."""
    mounts = _mounts()
    own = _own_groups()
    if "" in mounts and "" in own:  # cgroup v2: usable when the grader's group hands out the controllers
        folder = mounts[""] / own[""].lstrip("/")
        enabled = (folder / "cgroup.subtree_control").read_text().split() if folder.is_dir() else []
        if all(c in enabled for c in CONTROLLERS):
            return {"": folder}, 2
    if all(c in mounts and c in own for c in CONTROLLERS):
        wanted = [*CONTROLLERS, SHARES] if SHARES in mounts and SHARES in own else CONTROLLERS
        return {c: mounts[c] / own[c].lstrip("/") for c in wanted}, 1
    raise LookupError(
        "no cgroup hierarchy offers the pids and memory controllers to the grader "
        "(cgroup v2 with both in the grader's cgroup.subtree_control, or cgroup v1 mounted with both)"
    )


def _mounts() -> dict[str, Path]:
    """Mount point of each v1 controller, and of the v2 hierarchy under the key ''."""
    mounts: dict[str, Path] = {}
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split(" - ")
        if len(fields) != 2:
            continue
        before, after = fields[0].split(), fields[1].split()
        root, point, kind = before[3], Path(before[4]), after[0]
        if root != "/":  # a group mounted as if it were the root: paths would not line up
            continue
        if kind == "cgroup2":
            mounts.setdefault("", point)
        elif kind == "cgroup":
            for option in after[2].split(","):
                if option in (*CONTROLLERS, SHARES):
                    mounts.setdefault(option, point)
    return mounts


def _own_groups() -> dict[str, str]:
    """The grader's group in each hierarchy (/proc/self/cgroup), v2's under the key ''."""
    groups: dict[str, str] = {}
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        for controller in controllers.split(",") if controllers else [""]:
            groups[controller] = path
    return groups


def _write(path: Path, value: int, *, missing_ok: bool = False) -> None:
    try:
        path.write_text(str(value))
    except FileNotFoundError:
        if not missing_ok:
            raise


def _counter(path: Path, key: str) -> int:
    """The number after `key` in a cgroup file of `key value` lines (0 where there is none)."""
    try:
        text = path.read_text()
    except OSError:
        return 0
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == key:
            return int(parts[1])
    return 0
