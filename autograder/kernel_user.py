"""A grading kernel run as an unprivileged user of its own, where bubblewrap cannot run.

Gradescope and PrairieLearn grade each submission in a container as root, and some such containers
deny the user namespaces bubblewrap needs. There the grader (root) runs the kernel as a user made for
it (`useradd` in the platform's set-up: grader/platforms/), who owns only the kernel's writable
folders and cannot read the course's source, the hidden material or the results, which are root's
alone (mode 700). Its limits are the sandbox's rlimits, with RLIMIT_NPROC for the number of its
processes (the user runs nothing else), and the container's out-of-memory killer takes its processes
first; when the kernel ends, every process of the user is killed.

Weaker than bubblewrap, and said so in docs/security.md: the kernel shares the container's network,
/tmp and view of the processes, and reads whatever the container leaves readable by everyone.
"""

import ctypes
import os
import pwd
import shutil
import signal
import time
from dataclasses import dataclass
from pathlib import Path

PR_SET_NO_NEW_PRIVS = 38  # linux/prctl.h
_libc = ctypes.CDLL(None, use_errno=True)
KILL_PATIENCE_S = 10.0  # for the user's processes to go once killed (a fork bomb keeps forking)
# The kernel's root (sandbox.LAYOUT): what the user owns, and what it may only read (the grader's)
OWNED = ("home", "kernel", "exchange/results")
READABLE = ("", "connection", "exchange", "exchange/cases")


@dataclass(frozen=True)
class KernelUser:
    name: str
    uid: int
    gid: int

    @classmethod
    def named(cls, name: str) -> "KernelUser":
        """The user `name`; LookupError where there is none, or where it is root's own."""
        try:
            entry = pwd.getpwnam(name)
        except KeyError:
            raise LookupError(f"no user {name!r} to run the kernel as") from None
        if entry.pw_uid == 0 or entry.pw_gid == 0:
            raise LookupError(f"the user {name!r} has root's privileges: not a user to run a kernel as")
        return cls(name, entry.pw_uid, entry.pw_gid)

    def hand_over(self, root: Path, connection_file: Path) -> None:
        """Give the user the kernel's writable folders and its connection file; the rest of the root
        stays the grader's, which the user may go through and read but not change."""
        for sub in READABLE:
            os.chmod(root / sub, 0o755)
        for sub in OWNED:
            os.chown(root / sub, self.uid, self.gid)
            os.chmod(root / sub, 0o700)
        os.chown(connection_file, self.uid, self.gid)  # the kernel's key: written 600 by jupyter_client

    def become(self) -> None:
        """In the kernel's process, before it starts, once its rlimits are set: drop to the user,
        for good (no setuid program of the container's gives root back). Its processes are the first
        the container's out-of-memory killer takes, never the grader."""
        with open("/proc/self/oom_score_adj", "w") as adjust:
            adjust.write("1000")
        if _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")
        os.setgroups([])
        os.setgid(self.gid)
        os.setuid(self.uid)

    def kill_all(self) -> bool:
        """SIGKILL every process of the user until none is left (the kernel, and whatever it forked
        or detached); False if some outlived the patience. Killed at least once whatever is seen: a
        process whose first thread has ended reads as a zombie while its other threads run on."""
        deadline = time.monotonic() + KILL_PATIENCE_S
        while True:
            pid = os.fork()
            if pid == 0:  # as the user, kill(-1) reaches every process of the user's but this one
                try:
                    self.become()
                    os.kill(-1, signal.SIGKILL)
                finally:
                    os._exit(0)
            os.waitpid(pid, 0)
            if not self.processes():
                return True
            if time.monotonic() > deadline:
                return False
            time.sleep(0.02)

    def processes(self) -> list[int]:
        """The user's processes with a thread still running (a zombie's threads have all ended)."""
        found = []
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                if entry.stat().st_uid != self.uid:
                    continue
                states = [
                    Path(task.path, "stat").read_text().rpartition(")")[2].split()[0]
                    for task in os.scandir(Path(entry.path, "task"))
                ]
            except (FileNotFoundError, ProcessLookupError, IndexError):
                continue
            if any(state != "Z" for state in states):
                found.append(int(entry.name))
        return found

    def remove_files(self, folders: list[str]) -> None:
        """Delete what the user left in the container's shared folders (/tmp, /dev/shm): space the
        grader needs to write the results. Never through a link; its processes are gone already."""
        for folder in folders:
            for top, dirs, files in os.walk(folder, topdown=False):
                for name in files + dirs:
                    path = os.path.join(top, name)
                    try:
                        if os.lstat(path).st_uid != self.uid:
                            continue
                        if name in dirs and not os.path.islink(path):
                            shutil.rmtree(path, ignore_errors=True)
                        else:
                            os.unlink(path)
                    except OSError:
                        continue
