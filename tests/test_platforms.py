"""Gradescope's autograder and PrairieLearn's external grader, run as those platforms run them.

No network reaches either service: each is simulated from its documented contract
(tests/helpers/platform_root.py). The bundle that `course release --gradescope` writes is unzipped
where Gradescope puts it, its setup.sh builds the image as root, and each submission is graded by
run_autograder in a fresh copy of that image, as root; the same for PrairieLearn's image and job
layout. A perfect, a blank, a buggy and a hostile notebook (it tries to read the hidden material,
to write results.json, and leaves a process behind to write it later) are graded there, under
bubblewrap and, where the container denies bubblewrap, as the kernel's own user; each results.json
must hold to the documented schema and give the score `course grade` gives the same notebook.
"""

import json
import os
import shutil
import zipfile
from pathlib import Path

import jsonschema
import nbformat
import pytest

from grader.cli import main

from .helpers.machine import needs_sandbox
from .helpers.platform_root import Image
from .helpers.platform_schemas import GRADESCOPE, MAX_PRAIRIELEARN_BYTES, PRAIRIELEARN
from .helpers.submissions import grade_id, perfect, release, solution_sources, with_answer

pytestmark = [
    pytest.mark.batches,
    needs_sandbox,
    pytest.mark.skipif(os.geteuid() != 0, reason="the platforms grade as root: the simulation needs root"),
]

NOTEBOOK = "07_rmsnorm"  # the quickest notebook to grade (6 points, partial credit per check)
ANSWER = "rmsnorm"
NORM = "return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps)"
SERVED = "/grade/serverFilesCourse/transformer_internals"
UNREADABLE = [  # what the kernel must not read, on either platform
    "/autograder/source/platform.json",  # the cases' seed
    "/autograder/source/course/solutions/07_rmsnorm/cases.py",
    "/autograder/submission_metadata.json",  # earlier submissions' results, hidden verdicts included
    "/opt/course/cache",  # the nbgrader course
    f"{SERVED}/platform.json",
    f"{SERVED}/course/solutions/07_rmsnorm/cases.py",
    "/grade/data/data.json",
]
RESULTS = ["/autograder/results/results.json", "/grade/results/results.json"]  # nor write
# A correct answer that gives itself away (its norm is then wrong) if any secret was reached or its
# process did not start: a process left to forge results.json once the kernel has gone.
HOSTILE = f"""import os, subprocess, sys, time

def _reached(path):
    try:
        if path.endswith("results.json"):
            with open(path, "w") as forged:
                forged.write('{{"score": 1000}}')
        elif os.path.isdir(path):
            os.listdir(path)
        else:
            open(path).read()
        return True
    except OSError:
        return False

_HONEST = 0.0 if any(_reached(p) for p in {UNREADABLE + RESULTS!r}) else 1.0
_LATER = '''import os, sys, time
open("/tmp/started", "w").close()
while os.path.exists(f"/proc/{{sys.argv[1]}}"):  # until the kernel is gone, then a while longer
    time.sleep(0.1)
while True:  # and on, to be found if it is not killed
    for path in {RESULTS!r} + ["/tmp/outlived"]:
        try:
            open(path, "w").write("forged")
        except OSError:
            pass
    time.sleep(0.2)
'''
subprocess.Popen([sys.executable, "-c", _LATER, str(os.getpid()), "course-leftover"], start_new_session=True,
                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
for _ in range(200):  # it started (else this answer gives itself away too)
    if os.path.exists("/tmp/started"):
        break
    time.sleep(0.05)
else:
    _HONEST = 0.0

"""


def submissions() -> dict[str, nbformat.NotebookNode]:
    reference = solution_sources(NOTEBOOK)[ANSWER]
    buggy = reference.replace(NORM, NORM.replace(".mean(", ".sum("))  # and a locked test cell edited
    hostile = HOSTILE + reference.replace(NORM, NORM.replace("return x *", "return _HONEST * x *"))
    assert buggy != reference and NORM not in hostile
    edited = with_answer(perfect(NOTEBOOK), ANSWER, buggy)
    (test,) = [cell for cell in edited.cells if grade_id(cell) == "rmsnorm_norm_test"]
    test.source += "\n# passed, surely"
    return {
        "perfect": perfect(NOTEBOOK),
        "blank": release(NOTEBOOK),
        "buggy": edited,
        "hostile": with_answer(perfect(NOTEBOOK), ANSWER, hostile),
    }


@pytest.fixture(scope="module")
def bundles(tmp_path_factory):
    out = tmp_path_factory.mktemp("bundles")
    assert (
        main(["release", "--gradescope", "--prairielearn", "me/grader", str(out), "--notebook", NOTEBOOK])
        == 0
    )
    return out


@pytest.fixture(scope="module")
def local_scores(bundles, tmp_path_factory):
    """What `course grade` gives each notebook, with the cases' seed of the Gradescope bundle."""
    source, out = tmp_path_factory.mktemp("class"), tmp_path_factory.mktemp("graded")
    for student, notebook in submissions().items():
        (source / student).mkdir()
        nbformat.write(notebook, source / student / f"{NOTEBOOK}.ipynb")
    with zipfile.ZipFile(bundles / "gradescope" / NOTEBOOK / "autograder.zip") as archive:
        seed = json.loads(archive.read("platform.json"))["seed"]
    (out / "work").mkdir()
    (out / "work" / "case_seed").write_text(str(seed))
    assert main(["grade", str(source), "--out", str(out), "--jobs", "2"]) == 0
    rows = (out / "grades.csv").read_text().splitlines()[1:]
    return {row.split(",")[0]: float(row.split(",")[3]) for row in rows}


@pytest.fixture(scope="module")
def gradescope(bundles, tmp_path_factory):
    """Gradescope's image of the bundle's zip, built as Gradescope builds it."""
    zipped = bundles / "gradescope" / NOTEBOOK / "autograder.zip"
    with zipfile.ZipFile(zipped) as archive:
        names = set(archive.namelist())
        mode = archive.getinfo("run_autograder").external_attr >> 16
    assert {"setup.sh", "run_autograder", "platform.json"} <= names  # at the zip's root
    assert mode & 0o111, "run_autograder must be executable"
    return Image.gradescope(tmp_path_factory.mktemp("gradescope") / "image", zipped)


def run_autograder(image: Image, container: Path, files, *, bwrap_denied: bool) -> tuple[dict, str]:
    """One submission (a notebook, or files by name) graded in a fresh container; (results.json, what
    the container showed after)."""
    submission = image.root / "autograder" / "submission"
    for old in submission.iterdir():
        old.unlink()
    if isinstance(files, nbformat.NotebookNode):
        files = {"my homework.ipynb": files}  # the intake recognises it by its cells
    for name, notebook in files.items():
        nbformat.write(notebook, submission / name)
    before = "sha256sum /autograder/results/results.json"
    command = (
        f"cd /autograder && /autograder/run_autograder > /autograder/results/stdout; {before}; sleep 4; "
        f"{before}; ls /tmp/outlived 2>&1; pgrep -f 'course-leftove[r]'; echo \"pgrep: $?\""
    )
    done = image.run(container, command, bwrap_denied=bwrap_denied)
    assert done.returncode == 0, done.stderr
    return json.loads((container / "autograder" / "results" / "results.json").read_text()), done.stdout


@pytest.mark.parametrize("bwrap_denied", [False, True], ids=["bubblewrap", "kernel-user"])
def test_gradescope_results_match_the_local_grader(gradescope, local_scores, tmp_path, bwrap_denied):
    for student, notebook in submissions().items():
        if bwrap_denied and student == "blank":  # nothing of the student's runs: the same either way
            continue
        results, shown = run_autograder(gradescope, tmp_path / student, notebook, bwrap_denied=bwrap_denied)
        jsonschema.validate(results, GRADESCOPE)
        assert results["score"] == local_scores[student], (student, results["output"])
        assert sum(t["score"] for t in results["tests"]) == results["score"], student
        assert sum(t["max_score"] for t in results["tests"]) == 6.0, student
        hidden = [t for t in results["tests"] if "(hidden cases)" in t["name"]]
        assert hidden and all(t["visibility"] == "after_published" for t in hidden), student
        assert all(t["visibility"] == "visible" for t in results["tests"] if t not in hidden), student
        isolation = "an unprivileged user of its own" if bwrap_denied else "bubblewrap"
        assert isolation in results["output"], results["output"]
        checksums = [line for line in shown.splitlines() if line.endswith("results.json")]
        assert len(checksums) == 2 and checksums[0] == checksums[1], shown  # nothing wrote it afterwards
        assert "cannot access '/tmp/outlived'" in shown and "pgrep: 1" in shown, shown  # none left behind
        restored = "cell rmsnorm_norm_test: source changed: restored" in results["output"]
        assert restored == (student == "buggy"), results["output"]  # from the grader's log, as logged
        failed = [t for t in results["tests"] if t["status"] == "failed"]
        assert bool(failed) == (student in ("blank", "buggy")), student
        # each with the verdict's words; an advice part (no points) may fail too
        assert all(t["output"] and (t["score"] < t["max_score"] or not t["max_score"]) for t in failed), (
            failed
        )
    assert local_scores["perfect"] == 6.0 and local_scores["hostile"] == 6.0  # it reached nothing
    assert local_scores["blank"] == 0.0 and 0.0 <= local_scores["buggy"] < 6.0


@pytest.mark.parametrize(
    "files, said",
    [
        ({"rope.ipynb": perfect("04_rope")}, f"None of the files submitted is the notebook {NOTEBOOK}"),
        ({"a.ipynb": perfect(NOTEBOOK), "b.ipynb": perfect(NOTEBOOK)}, "2 files submitted are the notebook"),
        ({}, f"Nothing was submitted: upload your {NOTEBOOK}.ipynb"),
    ],
    ids=["another-notebook", "two-copies", "nothing"],
)
def test_gradescope_tells_what_came_and_grades_nothing_else(gradescope, tmp_path, files, said):
    results, _ = run_autograder(gradescope, tmp_path / "other", files, bwrap_denied=True)
    jsonschema.validate(results, GRADESCOPE)
    assert results["score"] == 0 and results["tests"] == []
    assert said in results["output"], results["output"]
    for name in files:
        assert f"{name}" in results["output"], results["output"]  # each file, with why it was not graded


@pytest.fixture(scope="module")
def prairielearn(bundles, tmp_path_factory):
    """PrairieLearn's grader image, built as its Dockerfile says: the folder in /opt/course/image,
    setup.sh run as root. It holds no solutions: Docker Hub may show it to anyone."""
    folder = bundles / "prairielearn"
    assert not list((folder / "image").rglob("solutions")) and not list((folder / "image").rglob("*.ipynb"))
    dockerfile = (folder / "image" / "Dockerfile").read_text()
    assert "COPY . /opt/course/image" in dockerfile and "bash /opt/course/image/setup.sh" in dockerfile
    build = "chmod +x /opt/course/image/run_prairielearn && bash /opt/course/image/setup.sh"
    root = tmp_path_factory.mktemp("prairielearn") / "image"
    return Image.build(root, {"/opt/course/image": folder / "image"}, build), folder


@pytest.mark.parametrize("student", ["hostile", "nothing"])
def test_prairielearn_job(prairielearn, local_scores, tmp_path, student):
    image, folder = prairielearn
    info = json.loads((folder / "questions" / NOTEBOOK / "info.json").read_text())
    options = info["externalGradingOptions"]
    job = image.root / "grade"
    shutil.rmtree(job, ignore_errors=True)
    (job / "student").mkdir(parents=True)
    for served in options["serverFilesCourse"]:  # what PrairieLearn copies from the course's repository
        shutil.copytree(folder / "serverFilesCourse" / served, job / "serverFilesCourse" / served)
    (job / "data").mkdir()
    (job / "data" / "data.json").write_text('{"params": {}}')
    if student != "nothing":
        nbformat.write(submissions()[student], job / "student" / f"{NOTEBOOK}.ipynb")
    environment = " ".join(f"{k}={v}" for k, v in options["environment"].items())
    entrypoint = " ".join(options["entrypoint"])
    done = image.run(tmp_path / "job", f"env {environment} {entrypoint}", bwrap_denied=True)
    assert done.returncode == 0, done.stderr  # PrairieLearn reads results.json only after exit 0
    written = tmp_path / "job" / "grade" / "results" / "results.json"
    assert written.stat().st_size < MAX_PRAIRIELEARN_BYTES
    results = json.loads(written.read_text())
    jsonschema.validate(results, PRAIRIELEARN)
    if student == "nothing":
        assert results["gradable"] is False and "Nothing was submitted" in results["message"]
        return
    assert results["score"] == local_scores[student] / 6.0
    assert sum(t["points"] for t in results["tests"]) == local_scores[student]
    hidden = [t for t in results["tests"] if "(hidden cases)" in t["name"]]
    assert hidden and all(t["output"].startswith("(") for t in hidden)  # kept back: no hidden verdict
