"""A grading kernel run as an unprivileged user of its own, where bubblewrap cannot run.

Gradescope and PrairieLearn grade each submission in a container as root, and some such containers
deny the user namespaces bubblewrap needs. There the grader (root) runs the kernel as a user id
drawn for the run (`KernelUser.drawn`: no account, no other process of the machine's has it, so its
process limit is the kernel's own even where containers share the host's user ids), which owns only
the kernel's writable folders and cannot read the course's source, the hidden material or the
results, root's alone (grader/platforms/run.py makes them so). Its limits are the sandbox's rlimits,
with RLIMIT_NPROC for the number of its processes; it gains no privileges again (no setuid program
gives root back), the container's out-of-memory killer takes its processes first, and when the
kernel ends every process of the user is killed and its files in the shared folders removed.

Weaker than bubblewrap, and said so in docs/platforms.md: the kernel shares the container's network,
/tmp and view of the processes, and reads whatever the container leaves readable by everyone.
"""

import ctypes
import os
import secrets
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

PR_SET_NO_NEW_PRIVS = 38  # linux/prctl.h
_libc = ctypes.CDLL(None, use_errno=True)
KILL_PATIENCE_S = 10.0  # for the user's processes to go once killed (a fork bomb keeps forking)
KILLER = ["/bin/sh", "-c", "kill -9 -1"]  # the shell's own kill: kill(-1, SIGKILL)
# Drawn ids: above those of accounts and of the usual subordinate ranges (100000 + 65536 per user)
FIRST_ID, IDS = 2**24, 2**30


@dataclass(frozen=True)
class KernelUser:
    uid: int
    gid: int

    @classmethod
    def drawn(cls) -> "KernelUser":
        """A user of the run's own, its group id the same number."""
        return cls.of(FIRST_ID + secrets.randbelow(IDS))

    @classmethod
    def of(cls, number: int) -> "KernelUser":
        return cls(number, number)

    def hand_over(self, root: Path, owned: list[str], readable: list[str], connection_file: Path) -> None:
        """Give the user the root's folders `owned` and the kernel's connection file; the folders
        `readable` stay the grader's, which the user may go through and read but not change."""
        for sub in readable:
            os.chmod(root / sub, 0o755)
        for sub in owned:
            os.chown(root / sub, self.uid, self.gid)
            os.chmod(root / sub, 0o700)
        os.chown(connection_file, self.uid, self.gid)  # the kernel's key: written 600 by jupyter_client

    def become(self) -> None:
        """In the kernel's process, before it starts, once its rlimits are set: drop to the user,
        for good. Its processes are the first the container's out-of-memory killer takes."""
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
            # As the user, kill(-1) reaches every process of the user's but the killer itself.
            subprocess.run(KILLER, user=self.uid, group=self.gid, extra_groups=[], capture_output=True)
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
