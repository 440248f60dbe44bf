"""The grading kernel's sandbox: bubblewrap, resource limits, and a kernel manager that uses them.

Inside the sandbox a student's notebook sees: the Python environment and the system's
libraries read-only, the autograder package read-only (without the visible cases'
expected outputs), and the folders of its root (LAYOUT: its home, the kernel's sockets,
the exchange with the grader), each writable or not as marked. It does not see solutions/,
the gradebook, the output folder, other submissions or the instructor's home. It has no
network, its own process tree (everything in it dies with the kernel), a private /tmp, and
rlimits on memory (address space), CPU time and file size; where the machine has cgroups, a
process group of its own caps its processes and memory as a whole and gives it an equal share
of the processor (autograder/cgroup.py).

What it guards against: docs/security.md. What it costs and how much memory the notebooks need:
benchmarks/README.md, "Grading overhead", "Starting a grading kernel" and "Sandbox memory".
"""

import copy
import os
import resource
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from jupyter_client.manager import AsyncKernelManager
from traitlets import Bool, Integer, Unicode

from . import cgroup
from .exchange import ENV as EXCHANGE_ENV
from .kernel_user import KernelUser
from .paths import EXPECTED

PACKAGE = Path(__file__).resolve().parent
TMP_BYTES = 256 * 2**20  # each of the sandbox's private tmpfs, /tmp and its home (held in memory)
SHM_BYTES = 64 * 2**20  # /dev/shm (POSIX shared memory, e.g. torch's DataLoader workers)
SYSTEM_DIRS = ["/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"]
SYSTEM_FILES = [  # what the dynamic loader, Python and matplotlib read from /etc
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/localtime",
    "/etc/passwd",
    "/etc/group",
    "/etc/nsswitch.conf",
    "/etc/fonts",
    "/etc/alternatives",
]
NOBODY = "65534"
LAUNCHER = "autograder.kernel_launcher"
MPLCONFIGDIR = "/tmp/matplotlib"  # matplotlib's settings and caches, in the sandbox's private /tmp


def unavailable_reason() -> str | None:
    """Why this machine cannot sandbox a kernel (None: it can). Runs bubblewrap once to see."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return "bubblewrap (`bwrap`) is not installed"
    probe = subprocess.run(
        [bwrap, *_isolation(), *_readonly_system(), "--", "/bin/true"],
        capture_output=True,
        text=True,
    )
    if probe.returncode != 0:
        said = probe.stderr.strip()[:300] or f"it ended with status {probe.returncode}, saying nothing"
        return f"bubblewrap cannot create a sandbox here: {said}"
    return None


def _isolation() -> list[str]:
    return [
        "--unshare-all",  # network, processes, IPC, hostname, cgroup
        "--unshare-user",
        "--uid", NOBODY,
        "--gid", NOBODY,
        "--cap-drop", "ALL",
        "--die-with-parent",  # a killed grader takes its kernels with it
        "--proc", "/proc",
        # bwrap's /dev is a writable tmpfs as large as half the host's memory, outside every
        # other cap: read-only, with a small /dev/shm of its own
        "--dev", "/dev",
        "--size", str(SHM_BYTES), "--tmpfs", "/dev/shm",
        "--remount-ro", "/dev",
        "--size", str(TMP_BYTES), "--tmpfs", "/tmp",  # first: binds under /tmp come after it
    ]  # fmt: skip


def _readonly_system() -> list[str]:
    args: list[str] = []
    for path in SYSTEM_DIRS:
        if os.path.islink(path):  # merged /usr: /bin -> usr/bin
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    for path in SYSTEM_FILES:
        args += ["--ro-bind-try", path, path]
    return args


def _python_prefixes() -> list[str]:
    """The environment (venv) and the interpreter it was made from, as real paths, then the venv's
    own path where it differs."""
    return list(dict.fromkeys(
        [*(os.path.realpath(p) for p in (sys.prefix, sys.base_prefix)), os.path.abspath(sys.prefix)]
    ))  # fmt: skip


def _readonly_python() -> list[str]:
    """The environment (venv) and the interpreter it was made from, at their own paths."""
    args: list[str] = []
    for prefix in _python_prefixes():
        args += ["--ro-bind", prefix, prefix]
    args += ["--ro-bind", str(PACKAGE), str(PACKAGE)]
    if EXPECTED.is_dir():  # the visible cases' reference outputs: nothing a grading kernel needs
        args += ["--tmpfs", str(EXPECTED), "--remount-ro", str(EXPECTED)]  # empty, and stays so
    return args


# The kernel's root, as the grader lays it out. Only the folders marked writable are, and
# each is its own mount point inside the sandbox: the kernel can fill them but cannot
# replace one with a symlink that the grader would then follow outside the sandbox.
# "private" is a size-limited tmpfs of the sandbox's own, which the grader never reads.
LAYOUT = {
    "home": "private",  # the kernel's working directory and $HOME
    "kernel": "writable",  # the Unix sockets of the kernel's channels
    "connection": "read-only",  # connection.json, written by the grader before the start
    "exchange/cases": "read-only",  # the cases of the test cell about to run
    "exchange/results": "writable",  # what check() sends back
}


def prepare_root(root: Path) -> None:
    for sub in LAYOUT:
        (root / sub).mkdir(parents=True, exist_ok=True)


def write_font_list(folder: Path) -> Path | None:
    """matplotlib's list of the fonts a sandbox can see, written into `folder` unless it is there
    already (None: it could not be written). A kernel given it (`bwrap_command`) reads it where
    matplotlib keeps its cache instead of listing every font again: 0.18 s of a kernel's 2.5 s
    start. Fonts outside the sandbox's read-only folders (in the instructor's home) are left out:
    matplotlib lists every font again where one of its list is missing."""
    from matplotlib import font_manager

    path = Path(folder) / f"fontlist-v{font_manager.FontManager.__version__}.json"
    if path.is_file():
        return path
    visible = tuple(
        os.path.join(top, "")
        for top in [*(os.path.realpath(p) for p in SYSTEM_DIRS if os.path.isdir(p)), *_python_prefixes()]
    )
    fonts = copy.copy(font_manager.fontManager)
    fonts.ttflist = [f for f in fonts.ttflist if os.path.realpath(f.fname).startswith(visible)]
    fonts.afmlist = [f for f in fonts.afmlist if os.path.realpath(f.fname).startswith(visible)]
    with tempfile.TemporaryDirectory(dir=folder) as staging:  # whole or absent, for every worker
        written = Path(staging) / path.name
        font_manager.json_dump(fonts, written)  # warns and writes nothing where it cannot
        if not written.is_file():
            return None
        os.replace(written, path)
    return path


def kernel_env(root: Path, threads: int, matplotlib_folder: str) -> dict[str, str]:
    """The whole environment of a confined kernel (nothing of the grader's own): this package
    importable from its folder, which holds nothing else a kernel can see."""
    return {
        "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
        "HOME": str(root / "home"),
        "LANG": "C.UTF-8",
        "MPLCONFIGDIR": matplotlib_folder,
        "PYTHONNOUSERSITE": "1",
        "PYTHONPATH": str(PACKAGE.parent),
        "USER": "student",  # the kernel's user has no account: getpass.getuser() reads this first
        "LOGNAME": "student",
        "OMP_NUM_THREADS": str(threads),
        "MKL_NUM_THREADS": str(threads),
        "MALLOC_ARENA_MAX": "2",  # glibc reserves 64 MiB of address space per thread arena
        EXCHANGE_ENV: str(root / "exchange"),
    }


def bwrap_command(root: Path, threads: int, font_list: Path | None = None) -> list[str]:
    """The bubblewrap prefix that runs a kernel whose only writable places are its root's folders;
    with `font_list` (`write_font_list`) read-only where the kernel's matplotlib looks for it."""
    root = root.resolve()
    env = kernel_env(root, threads, MPLCONFIGDIR)
    args = [shutil.which("bwrap") or "bwrap", *_isolation(), *_readonly_system(), *_readonly_python()]
    if font_list is not None:
        args += ["--ro-bind", str(font_list), f"{MPLCONFIGDIR}/{font_list.name}"]
    for sub, access in LAYOUT.items():
        if access == "private":
            args += ["--size", str(TMP_BYTES), "--tmpfs", str(root / sub)]
        else:
            args += ["--bind" if access == "writable" else "--ro-bind", str(root / sub), str(root / sub)]
    args += ["--remount-ro", "/", "--chdir", str(root / "home"), "--clearenv"]  # then only those and /tmp
    for name, value in env.items():
        args += ["--setenv", name, value]
    return [*args, "--"]


class SandboxedKernelManager(AsyncKernelManager):
    """A kernel manager whose kernel runs in `root` under bubblewrap and rlimits.

    The connection uses Unix sockets in root/kernel (TCP cannot cross the sandbox's network
    namespace), and interrupts are sent as messages (a signal to bubblewrap would stop it).
    With `sandboxed=False` the kernel runs unconfined but keeps the limits and the exchange,
    for machines without bubblewrap when the instructor asks for it explicitly; with a
    `kernel_uid` as well, it runs as that unprivileged user (kernel_user.py), as on the grading
    platforms whose containers deny bubblewrap.
    """

    root = Unicode(help="The kernel's own folder; created by the grader.").tag(config=True)
    sandboxed = Bool(True).tag(config=True)
    memory_bytes = Integer(4 * 2**30, help="RLIMIT_AS of the kernel.").tag(config=True)
    cpu_seconds = Integer(1800, help="RLIMIT_CPU of the kernel.").tag(config=True)
    file_bytes = Integer(512 * 2**20, help="RLIMIT_FSIZE: the largest file the kernel may write.").tag(
        config=True
    )
    threads = Integer(1, help="Math library threads in the kernel.").tag(config=True)
    processes = Integer(256, help="Processes and threads the kernel and its children may hold.").tag(
        config=True
    )
    batch_group = Unicode("", help="The batch's cgroup, where the kernel gets its own (none: no group).").tag(
        config=True
    )
    log_file = Unicode(help="Where the kernel process's own stdout and stderr go.").tag(config=True)
    font_list = Unicode(
        "", help="matplotlib's list of fonts for the kernel (write_font_list; none: its own)."
    ).tag(config=True)
    kernel_uid = Integer(
        0, help="Unsandboxed: the unprivileged user id the kernel runs as (kernel_user.py; 0: the grader's)."
    ).tag(config=True)

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        root = Path(self.root)
        self.transport = "ipc"
        self.ip = str(root / "kernel" / "ipc")
        self.connection_file = str(root / "connection" / "connection.json")
        self._group: cgroup.ProcessGroup | None = None

    @property
    def kernel_spec(self):
        spec = super().kernel_spec
        if spec is not None:
            spec.interrupt_mode = "message"
        return spec

    def format_kernel_cmd(self, extra_arguments=None):
        # ipykernel's launcher, with the imports every notebook makes done first (kernel_launcher.py)
        command = [
            LAUNCHER if part == "ipykernel_launcher" else part
            for part in super().format_kernel_cmd(extra_arguments)
        ]
        if self.sandboxed:
            font_list = Path(self.font_list) if self.font_list else None
            return bwrap_command(Path(self.root), self.threads, font_list) + command
        return command

    async def _async_launch_kernel(self, kernel_cmd, **kw):
        root = Path(self.root)
        limits = [
            (resource.RLIMIT_AS, self.memory_bytes),
            (resource.RLIMIT_CPU, self.cpu_seconds),
            (resource.RLIMIT_FSIZE, self.file_bytes),
            (resource.RLIMIT_CORE, 0),
        ]
        user = None
        if not self.sandboxed:
            kw["cwd"] = str(root / "home")
            if self.kernel_uid:  # nothing of the grader's environment, as in bubblewrap
                user = KernelUser.of(self.kernel_uid)
                owned = [sub for sub, access in LAYOUT.items() if access != "read-only"]
                readable = ["", "exchange", *(sub for sub, access in LAYOUT.items() if access == "read-only")]
                user.hand_over(root, owned, readable, Path(self.connection_file))
                kw["env"] = kernel_env(root, self.threads, str(root / "home" / ".matplotlib"))
                limits.append((resource.RLIMIT_NPROC, self.processes))  # the user's processes: the kernel's
            else:
                kw["env"] = {**kw.get("env", os.environ), EXCHANGE_ENV: str(root / "exchange")}
        log = open(self.log_file or os.devnull, "ab")  # noqa: SIM115 (Popen inherits it; closed below)
        group = self._group = self._new_process_group()
        kw.update(stdout=log, stderr=log, preexec_fn=lambda: _enter(group, limits, user))
        try:
            await super()._async_launch_kernel(kernel_cmd, **kw)
        finally:
            log.close()

    def _new_process_group(self) -> cgroup.ProcessGroup | None:
        if not self.batch_group:  # none on this machine (the batch warned once), or not a batch's kernel
            return None
        try:
            return cgroup.ProcessGroup.create(
                cgroup.Limits(self.processes, self.memory_bytes), self.batch_group
            )
        except (OSError, LookupError) as error:
            self.log.warning("[course] this sandbox has no process group of its own (%s)", error)
            return None

    async def _async_cleanup_resources(self, restart: bool = False) -> None:
        # Every shutdown and restart ends here once the kernel's process is gone (the public
        # shutdown_kernel is bound to the base class's function, so overriding it would not be).
        try:
            await super()._async_cleanup_resources(restart=restart)
        finally:
            self.end_process_group()

    def end_process_group(self) -> None:
        """Kill whatever the kernel left running (children, detached or not) and report what its
        group's limits stopped. Safe to call again; without a group, bubblewrap's own process
        namespace ends them when the kernel goes."""
        if self.kernel_uid and not self.sandboxed and not KernelUser.of(self.kernel_uid).kill_all():
            self.log.warning("[course] some processes of the kernel's user outlived being killed")
        group, self._group = self._group, None
        if group is None:
            return
        if not group.kill_all():
            self.log.warning("[course] some processes of the sandbox outlived being killed")
        for event in group.events():
            self.log.warning("[course] %s", event)
        try:
            group.remove()
        except OSError as error:  # the batch tries again at its end
            self.log.warning("[course] the sandbox's process group could not be removed yet: %s", error)


def _enter(group: cgroup.ProcessGroup | None, limits, user: KernelUser | None) -> None:
    """In the kernel's process, before it starts: join its group, take its rlimits, then become
    its user, if it has one."""
    if group is not None:
        group.join()
    for which, value in limits:
        resource.setrlimit(which, (value, value))
    if user is not None:
        user.become()
