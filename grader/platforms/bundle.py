"""What `course release --gradescope OUT` and `course release --prairielearn IMAGE OUT` write (both
flags: OUT/gradescope/ and OUT/prairielearn/).

    OUT/<notebook>/autograder.zip   Gradescope's "Upload Autograder", one per notebook:
        setup.sh, run_autograder    at the zip's root, as Gradescope requires
        platform.json               the notebook, the cases' seed, what students see, the limits
        course/                     the grader: autograder/, grader/, solutions/, course.toml, the pins

    OUT/image/                      PrairieLearn's grader image, one for every notebook: Dockerfile,
                                    setup.sh, run_prairielearn and the pins; no solutions (Docker Hub
                                    may show it to anyone)
    OUT/serverFilesCourse/transformer_internals/
                                    the grader and platform.json, which each job brings from the
                                    course's own (private) repository (info.json names it)
    OUT/questions/<notebook>/       a question per notebook: info.json (the image, the course's
                                    folder, the notebook it grades) and question.html (the upload)

The zips and serverFilesCourse/ hold the solutions and the hidden cases: they go to the platform,
never to students.
"""

import json
import shutil
import tempfile
import uuid
import zipfile
from dataclasses import asdict
from pathlib import Path

from autograder.paths import REPO, assignments
from grader import TEMPLATES
from grader.platforms.submission import Settings, new_seed

SCRIPTS = TEMPLATES / "platforms"
COURSE_FILES = ["autograder", "grader", "solutions", "course.toml", "requirements.lock", "pyproject.toml"]
SKIPPED = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
EXECUTABLE = 0o755
PRAIRIELEARN_TIMEOUT = 600  # PrairieLearn's longest job, in seconds
KERNEL_START_S = 60  # what a job needs besides the notebook's time: the nbgrader course, the kernel
SERVED = "transformer_internals"  # the course's folder in serverFilesCourse/
QUESTIONS = uuid.UUID("6f1b7d2e-55c4-4b8e-9a51-3c2f0e8d4a17")  # this course's questions' namespace


def write_gradescope(out: Path, notebooks: list[str], settings: dict) -> list[Path]:
    """One autograder.zip per notebook; returns them. `settings`: Settings' fields but the notebook
    and the seed, which each zip draws for itself."""
    written = []
    with tempfile.TemporaryDirectory() as tmp:
        course = Path(tmp) / "course"
        copy_course(course)
        for notebook in notebooks:
            zipped = out / notebook / "autograder.zip"
            zipped.parent.mkdir(parents=True)
            chosen = Settings(notebook=notebook, seed=new_seed(), **settings)
            with zipfile.ZipFile(zipped, "w", zipfile.ZIP_DEFLATED) as archive:
                _add(archive, SCRIPTS / "setup.sh", "setup.sh")
                _add(archive, SCRIPTS / "run_autograder", "run_autograder", EXECUTABLE)
                archive.writestr("platform.json", json.dumps(asdict(chosen), indent=1))
                for path in sorted(course.rglob("*")):
                    if path.is_file():
                        _add(archive, path, path.relative_to(course.parent).as_posix())
            written.append(zipped)
    return written


def write_prairielearn(out: Path, notebooks: list[str], settings: dict, image: str) -> list[Path]:
    """The grader image's folder (the environment only), the course for serverFilesCourse/ and one
    question per notebook; returns the files written."""
    folder = out / "image"
    (folder / "course").mkdir(parents=True)
    shutil.copyfile(REPO / "requirements.lock", folder / "course" / "requirements.lock")
    for name in ("Dockerfile", "setup.sh", "run_prairielearn"):
        shutil.copyfile(SCRIPTS / name, folder / name)
    (folder / "run_prairielearn").chmod(EXECUTABLE)
    served = out / "serverFilesCourse" / SERVED
    copy_course(served / "course")
    chosen = Settings(notebook="", seed=new_seed(), **settings)  # the notebook: each question's
    (served / "platform.json").write_text(json.dumps(asdict(chosen), indent=1))
    for notebook in notebooks:
        question = out / "questions" / notebook
        question.mkdir(parents=True)
        (question / "info.json").write_text(json.dumps(question_info(notebook, image), indent=1))
        (question / "question.html").write_text(QUESTION.format(notebook=notebook))
    return sorted(p for p in out.rglob("*") if p.is_file())


def copy_course(target: Path) -> None:
    """The grader's files of this course (what `course grade` reads), without caches."""
    target.mkdir(parents=True)
    for name in COURSE_FILES:
        source = REPO / name
        if source.is_dir():
            shutil.copytree(source, target / name, ignore=SKIPPED)
        else:
            shutil.copyfile(source, target / name)


def question_info(notebook: str, image: str) -> dict:
    return {
        "uuid": str(uuid.uuid5(QUESTIONS, notebook)),  # the same question, release after release
        "title": f"Notebook {notebook}",
        "topic": "Transformer internals",
        "type": "v3",
        "singleVariant": True,
        "gradingMethod": "External",
        "externalGradingOptions": {
            "image": image,
            "entrypoint": ["/opt/course/image/run_prairielearn", f"/grade/serverFilesCourse/{SERVED}"],
            "serverFilesCourse": [f"{SERVED}/"],
            "timeout": PRAIRIELEARN_TIMEOUT,
            "environment": {"COURSE_NOTEBOOK": notebook},
        },
    }


QUESTION = """<pl-question-panel>
  <p>Upload your notebook <code>{notebook}.ipynb</code>, as Jupyter saves it (File &gt; Download).
  It is graded by the course's checks, visible and hidden, with partial credit per concern.</p>
</pl-question-panel>
<pl-file-upload file-patterns="*.ipynb"></pl-file-upload>
<pl-submission-panel>
  <pl-external-grader-results></pl-external-grader-results>
  <pl-file-preview></pl-file-preview>
</pl-submission-panel>
"""


def _add(archive: zipfile.ZipFile, path: Path, name: str, mode: int = 0o644) -> None:
    """A file in the zip with its Unix mode (run_autograder must be executable)."""
    info = zipfile.ZipInfo.from_file(path, name)
    info.external_attr = (0o100000 | mode) << 16
    info.compress_type = zipfile.ZIP_DEFLATED
    archive.writestr(info, path.read_bytes())


def known(notebooks: list[str]) -> list[str]:
    """The notebooks asked for (default: every one), checked against the course's."""
    every = assignments()
    unknown = [n for n in notebooks if n not in every]
    if unknown:
        raise SystemExit(
            f"no notebook {', '.join(unknown)} in this course (its notebooks: {', '.join(every)})"
        )
    return notebooks or every
