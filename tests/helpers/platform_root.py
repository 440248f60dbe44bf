"""A grading platform's container, simulated: a root of its own under bubblewrap, as root.

`Image.build(bundle)` lays out what the platform's image build makes (the bundle's files where the
platform puts them, a copy of this machine's /etc, an /opt) and runs setup.sh in it; each
`image.run(...)` then runs a command in a fresh copy of that image, as the platform starts a fresh
container per submission. The system's /usr is shared read-only, and the course's environment is
this checkout's .venv (setup.sh's COURSE_VENV): no package is downloaded. `bwrap_denied` stands in
for a container that denies user namespaces: bubblewrap is there but cannot make a sandbox.
"""

import os
import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

VENV = Path(sys.prefix)
SYSTEM = ["/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"]
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


@dataclass(frozen=True)
class Image:
    root: Path  # the image's files: etc/, opt/, root/ and the platform's own folder (autograder/, ...)

    @classmethod
    def build(cls, root: Path, files: dict[str, Path], setup: str) -> "Image":
        """`files`: path inside the container -> a folder of this machine copied there; `setup`: the
        command that builds the image (setup.sh), run once as root."""
        for name in ("opt", "root", "tmp"):
            (root / name).mkdir(parents=True)
        (root / "tmp").chmod(0o1777)  # everyone's, as a container's /tmp is
        subprocess.run(["cp", "-a", "/etc", str(root / "etc")], check=True)
        for inside, source in files.items():
            (root / inside.lstrip("/")).mkdir(parents=True)
            subprocess.run(["cp", "-a", f"{source}/.", str(root / inside.lstrip("/"))], check=True)
        image = cls(root)
        done = image._bwrap(root, setup, bwrap_denied=False, timeout=600)
        if done.returncode != 0:
            raise AssertionError(f"the image's set-up failed:\n{done.stdout}\n{done.stderr}")
        return image

    @classmethod
    def gradescope(cls, root: Path, autograder_zip: Path) -> "Image":
        """Gradescope's image of an autograder.zip: unpacked into /autograder/source, setup.sh run as
        root, run_autograder copied to /autograder/run_autograder, as its image build does, and the
        submission's metadata as Gradescope writes it, readable by all."""
        source = root.with_name(root.name + "-source")
        with zipfile.ZipFile(autograder_zip) as archive:
            archive.extractall(source)
            mode = archive.getinfo("run_autograder").external_attr >> 16
        (source / "run_autograder").chmod(mode & 0o777)  # extractall drops the modes
        build = (
            "bash /autograder/source/setup.sh"
            " && cp /autograder/source/run_autograder /autograder/run_autograder"
            " && mkdir -p /autograder/submission /autograder/results"
            " && echo '{\"previous_submissions\": []}' > /autograder/submission_metadata.json"
        )
        return cls.build(root, {"/autograder/source": source}, build)

    def run(self, container: Path, command: str, *, bwrap_denied: bool = False, timeout: int = 600):
        """Run `command` in `container`, a fresh copy of the image; the completed process."""
        subprocess.run(["cp", "-a", str(self.root), str(container)], check=True)
        return self._bwrap(container, command, bwrap_denied=bwrap_denied, timeout=timeout)

    @staticmethod
    def _bwrap(root: Path, command: str, *, bwrap_denied: bool, timeout: int):
        args = ["bwrap", "--unshare-ipc", "--unshare-uts", "--die-with-parent"]
        for path in SYSTEM:
            if os.path.islink(path):
                args += ["--symlink", os.readlink(path), path]
            elif os.path.isdir(path):
                args += ["--ro-bind", path, path]
        for name in sorted(p.name for p in root.iterdir()):
            args += ["--bind", str(root / name), f"/{name}"]
        for prefix in dict.fromkeys([str(VENV), os.path.realpath(sys.base_prefix)]):  # and the interpreter
            args += [*_mount_point(root, Path(prefix)), "--ro-bind", prefix, prefix]
        args += ["--dev", "/dev"]
        if bwrap_denied:  # as where user namespaces are denied: bubblewrap runs, and fails
            args += ["--unshare-pid", "--proc", "/proc"]
            args += ["--ro-bind", shutil.which("false"), shutil.which("bwrap")]
        else:  # a sandbox mounts its own /proc only where /proc is whole: this machine's
            args += ["--bind", "/proc", "/proc"]
        args += ["--clearenv", "--setenv", "PATH", PATH, "--setenv", "HOME", "/root"]
        args += ["--setenv", "COURSE_VENV", str(VENV), "--chdir", "/", "--", "bash", "-c", command]
        return subprocess.run(args, capture_output=True, text=True, timeout=timeout)


def _mount_point(root: Path, path: Path) -> list[str]:
    """The folders above `path` made as bubblewrap would (in the container's own folders, or its
    root), but readable by all, as those of the interpreter are on this machine; bubblewrap's
    arguments for those of its root."""
    if (root / path.parts[1]).is_dir():  # /root/.pyenv/...
        inside = root / path.relative_to("/")
        inside.mkdir(parents=True, exist_ok=True)
        for folder in [inside, *inside.parents]:
            if folder == root:
                break
            folder.chmod(0o755)
        return []
    return [
        arg for folder in reversed(path.parents[:-1]) for arg in ("--perms", "0755", "--dir", str(folder))
    ]
