"""The three places that pin the environment agree: pyproject.toml (the direct dependencies),
requirements.lock (everything, what `make setup` installs) and environment.yml (conda, Binder); and
the course installed from its wheel holds its data."""

import re
import shutil
import subprocess
import tomllib
import zipfile
from pathlib import Path

import yaml

from grader.release import build_wheel

REPO = Path(__file__).resolve().parents[1]
PIN = re.compile(r"([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;#]+)")


def pins_of(lines) -> dict[str, str]:
    """name -> version of each `name==version` among `lines`, names as pip compares them."""
    pins = {}
    for line in lines:
        if match := PIN.fullmatch(line.split("#")[0].strip()):
            pins[re.sub(r"[-_.]+", "-", match[1]).lower()] = match[2]
    return pins


def _pyproject() -> dict[str, str]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    pins = pins_of(project["dependencies"])
    assert len(pins) == len(project["dependencies"]), "every direct dependency is pinned with =="
    return pins


def test_environment_yml_pins_what_pyproject_pins():
    environment = yaml.safe_load((REPO / "environment.yml").read_text())
    [pip] = [entry["pip"] for entry in environment["dependencies"] if isinstance(entry, dict)]
    assert "-e ." in pip, "environment.yml installs the course package itself"
    assert pip[0] == "--extra-index-url https://download.pytorch.org/whl/cpu", "PyTorch's CPU build"
    assert pins_of(pip) == _pyproject()


def test_the_lock_pins_every_direct_dependency_at_the_same_version():
    lock = pins_of((REPO / "requirements.lock").read_text().splitlines())
    direct = _pyproject()
    assert {name: lock.get(name) for name in direct} == direct


def test_an_installed_course_holds_every_file_its_package_reads(tmp_path):
    """A non-editable install (a wheel) must carry the package's data: the feedback and formgrader
    templates, the visible cases, the questions and the checkpoint. Every tracked file under
    autograder/ that is not Python must be in the wheel."""
    tracked = subprocess.run(
        ["git", "ls-files", "-z"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.split("\0")
    source = tmp_path / "source"
    for name in filter(None, tracked):
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(REPO / name, source / name)
    wheel = build_wheel(source, tmp_path)
    data = {n for n in tracked if n.startswith(("autograder/", "grader/")) and not n.endswith(".py")}
    assert data, "no data files found: the test would pass vacuously"
    assert data - set(zipfile.ZipFile(wheel).namelist()) == set()
