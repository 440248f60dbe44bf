"""A small class written the way each learning-management system exports it (docs/lms-exports.md).

Each builder takes the notebook bytes each student hands in, keyed (student, notebook) with the
students of STUDENTS, and writes them into a folder as Canvas, Moodle, Blackboard or Gradescope
names them, with what a real export holds besides. Roles go by the order of the sorted keys:

- the 1st file is resubmitted: an older attempt holding the unanswered release comes first
  (Canvas, Blackboard; Moodle and Gradescope export only a submission's latest files);
- the 2nd is renamed by its student (each export its own rename), so only its cells tell it;
- the 3rd is late (Canvas, the only one of the four that marks it in the file name);
- the 1st student also hands in a file that is not a notebook.

Each returns an Export: which bytes must be graded for each (student id, notebook), and what the
intake must say of each file it wrote. `Export.zip` packs the folder as the system's download does.
"""

import zipfile
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

from autograder.paths import NOTEBOOKS


@dataclass(frozen=True)
class Student:
    first: str
    last: str
    canvas: int  # Canvas user id
    moodle: int  # Moodle participant id
    username: str  # Blackboard username
    sid: str  # Gradescope student id ("": the email stands in for it)
    email: str

    @property
    def full_name(self) -> str:
        return f"{self.first} {self.last}"


STUDENTS = {
    "jane": Student("Jane", "Smith", 48211, 123451, "jsmith", "1001", "jane.smith@uni.example"),
    "jose": Student("José", "García-López", 48212, 123456, "jgarcia", "1002", "jose.garcia@uni.example"),
    "li": Student("Li", "Wei", 48213, 123457, "lwei", "", "li.wei@uni.example"),
    "ann": Student("Ann", "O'Neil", 48214, 123458, "aoneil_2", "1004", "ann.oneil@uni.example"),
}

Files = dict[tuple[str, str], bytes]  # (student of STUDENTS, notebook) -> the notebook file's bytes


@dataclass
class Export:
    lms: str
    folder: Path
    graded: dict[tuple[str, str], bytes] = field(default_factory=dict)  # (student id, notebook) -> bytes
    names: dict[str, str] = field(default_factory=dict)  # student id -> the name the intake gives
    late: set[tuple[str, str]] = field(default_factory=set)  # (student id, notebook) marked late
    submitted_at: dict[tuple[str, str], str] = field(default_factory=dict)  # where the export says
    outcomes: dict[str, str] = field(default_factory=dict)  # each file written (its path) -> intake outcome
    renamed: dict[tuple[str, str], str] = field(default_factory=dict)  # -> the name its student gave it

    def write(self, path: str, data: bytes, outcome: str) -> None:
        (self.folder / path).parent.mkdir(parents=True, exist_ok=True)
        (self.folder / path).write_bytes(data)
        self.outcomes[path] = outcome

    def zip(self, archive: Path, top: str = "") -> Path:
        """The folder as a zip, its files under `top/` where given (Gradescope's download has one)."""
        with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zf:
            for path in sorted(self.outcomes):
                zf.write(self.folder / path, f"{top}/{path}" if top else path)
        return archive


def release(notebook: str) -> bytes:
    """The unanswered student notebook: what an older attempt holds."""
    return (NOTEBOOKS / notebook / f"{notebook}.ipynb").read_bytes()


def _roles(files: Files) -> dict[str, tuple[str, str] | None]:
    keys = sorted(files)
    return {
        role: keys[i] if i < len(keys) else None for i, role in enumerate(("resubmitted", "renamed", "late"))
    }


# ------------------------------------------------------------------------------ Canvas


def canvas_name(student: Student) -> str:
    """Canvas's name in a file name: the sortable name 'Last, First', lowercased, without what is not
    an ASCII letter or digit (a guess for accents: see docs/lms-exports.md)."""
    return "".join(c for c in f"{student.last}{student.first}".lower() if c.isascii() and c.isalnum())


def canvas_export(folder: Path, files: Files) -> Export:
    """Canvas's "Download Submissions": flat `<lastfirst>[_LATE]_<user id>_<attachment id>_<file>`."""
    export, roles = Export("canvas", folder), _roles(files)
    attachment = 9933001
    for key, notebook in sorted(files):
        student = STUDENTS[key]
        sid = str(student.canvas)
        late = (key, notebook) == roles["late"]
        prefix = f"{canvas_name(student)}{'_LATE' if late else ''}_{sid}"
        file = f"{notebook}.ipynb"
        if (key, notebook) == roles["resubmitted"]:
            export.write(f"{prefix}_{attachment}_{file}", release(notebook), "superseded")
            attachment += 1
            file = f"{notebook}-1.ipynb"  # Canvas renames a second upload of the same name
            export.write(f"{prefix}_{attachment + 5}_notes.pdf", b"%PDF-1.4 not a notebook", "ignored")
        if (key, notebook) == roles["renamed"]:
            file = f"Copy of {notebook}.ipynb"
            export.renamed[sid, notebook] = file
        export.write(f"{prefix}_{attachment}_{file}", files[key, notebook], "graded")
        attachment += 10
        export.graded[sid, notebook] = files[key, notebook]
        export.names[sid] = canvas_name(student)
        if late:
            export.late.add((sid, notebook))
    return export


# ------------------------------------------------------------------------------ Moodle


def moodle_export(folder: Path, files: Files, blind: bool = False, flat: bool = False) -> Export:
    """Moodle's "Download all submissions": `<Full Name>_<participant id>_assignsubmission_file_/<file>`
    (blind marking: `Participant_<id>`; `flat`: the file name appended to that prefix)."""
    export, roles = Export("moodle", folder), _roles(files)
    for key, notebook in sorted(files):
        student = STUDENTS[key]
        sid = str(student.moodle)
        person = "Participant" if blind else student.full_name
        prefix = f"{person}_{sid}_assignsubmission"
        join = "_" if flat else "_/"
        file = f"{notebook}.ipynb"
        if (key, notebook) == roles["renamed"]:
            file = f"{notebook} (1).ipynb"
            export.renamed[sid, notebook] = file
        if (key, notebook) == roles["resubmitted"]:  # the 1st student: online text and a PDF besides
            export.write(f"{prefix}_onlinetext{join}onlinetext.html", b"<p>see my notebook</p>", "ignored")
            export.write(f"{prefix}_file{join}notes.pdf", b"%PDF-1.4 not a notebook", "ignored")
        export.write(f"{prefix}_file{join}{file}", files[key, notebook], "graded")
        export.graded[sid, notebook] = files[key, notebook]
        export.names[sid] = "" if blind else student.full_name
    return export


# ------------------------------------------------------------------------------ Blackboard


def blackboard_assignment(notebook: str) -> str:
    return (
        f"HW {int(notebook[:2])} {notebook[3:].title()}"  # e.g. "HW 4 Rope": spaces, as instructors name them
    )


def blackboard_export(folder: Path, files: Files) -> Export:
    """Blackboard Learn's "Download Assignment": `<Assignment>_<username>_attempt_<time>_<file>`,
    each attempt with its receipt `<Assignment>_<username>_attempt_<time>.txt`."""
    export, roles = Export("blackboard", folder), _roles(files)
    when = datetime(2026, 11, 20, 22, 10, 5)
    for key, notebook in sorted(files):
        student = STUDENTS[key]
        attempts = [(release(notebook), f"{notebook}.ipynb", "superseded")]
        if (key, notebook) != roles["resubmitted"]:
            attempts = []
        file = "homework.ipynb" if (key, notebook) == roles["renamed"] else f"{notebook}.ipynb"
        attempts.append((files[key, notebook], file, "graded"))
        for data, original, outcome in attempts:
            when += timedelta(minutes=7)
            prefix = f"{blackboard_assignment(notebook)}_{student.username}_attempt_{when:%Y-%m-%d-%H-%M-%S}"
            others = ["notes.pdf"] if outcome == "graded" and (key, notebook) == roles["resubmitted"] else []
            export.write(f"{prefix}.txt", _receipt(student, notebook, when, [original, *others]), "read")
            export.write(f"{prefix}_{original}", data, outcome)
            for other in others:
                export.write(f"{prefix}_{other}", b"%PDF-1.4 not a notebook", "ignored")
        export.graded[student.username, notebook] = files[key, notebook]
        export.names[student.username] = student.full_name
        export.submitted_at[student.username, notebook] = when.isoformat()
        if file != f"{notebook}.ipynb":
            export.renamed[student.username, notebook] = file
    return export


def _receipt(student: Student, notebook: str, when: datetime, originals: list[str]) -> bytes:
    assignment = blackboard_assignment(notebook)
    prefix = f"{assignment}_{student.username}_attempt_{when:%Y-%m-%d-%H-%M-%S}"
    listed = "".join(f"\tOriginal filename: {o}\n\tFilename: {prefix}_{o}\n" for o in originals)
    return (
        f"Name: {student.full_name} ({student.username})\n"
        f"Assignment: {assignment}\n"
        f"Date Submitted: {when:%A, %d %B %Y %H:%M:%S} o'clock CET\n"
        "Current Grade: Needs Grading\n\n"
        "Submission Field:\nThere is no student submission text data for this assignment.\n\n"
        "Comments:\nThere are no student comments for this assignment.\n\n"
        f"Files:\n{listed}"
    ).encode()


# ------------------------------------------------------------------------------ Gradescope


def gradescope_export(folder: Path, files: Files, groups: tuple[tuple[str, ...], ...] = ()) -> Export:
    """Gradescope's "Export Submissions": submission_metadata.yml beside one submission_<id>/ folder
    per submission, each holding its files (one submission per student, or per group: the files
    are the first member's, and every member is graded on them)."""
    export, roles = Export("gradescope", folder), _roles(files)
    members = {group[0]: group for group in groups}
    in_group = {key for group in groups for key in group[1:]}
    if clash := {k for k, _ in files} & in_group:
        raise ValueError(f"{sorted(clash)} hand in as a group: their files are their group's first member's")
    metadata, number = ["---"], 4567
    when = datetime(2026, 11, 20, 22, 10, 5)
    for key in sorted({k for k, _ in files}):
        folder_name = f"submission_{number}"
        group = [STUDENTS[k] for k in members.get(key, (key,))]
        when += timedelta(minutes=13)
        submitted_at = f"{when.isoformat()}-08:00"
        metadata += [f":{folder_name}:", "  :submitters:"]
        for student in group:
            sid = f"'{student.sid}'" if student.sid else ""
            metadata += [
                f"  - :name: {student.full_name}",
                f"    :sid: {sid}",
                f"    :email: {student.email}",
            ]
        metadata += [f"  :created_at: {when:%Y-%m-%d %H:%M:%S}.123456000 -08:00", "  :score: 8.0"]
        for notebook in sorted(nb for k, nb in files if k == key):
            file = f"{notebook}.ipynb"
            if (key, notebook) == roles["renamed"]:
                file = f"{notebook[:3]}{notebook[3:].upper()}.ipynb"  # 04_ROPE.ipynb
            export.write(f"{folder_name}/{file}", files[key, notebook], "graded")
            for student in group:
                sid = student.sid or student.email
                export.graded[sid, notebook] = files[key, notebook]
                export.names[sid] = student.full_name
                export.submitted_at[sid, notebook] = submitted_at
                if file != f"{notebook}.ipynb":
                    export.renamed[sid, notebook] = file
        if key == sorted(files)[0][0]:
            export.write(f"{folder_name}/helpers.py", b"print('not a notebook')\n", "ignored")
        number += 1
    export.write("submission_metadata.yml", ("\n".join(metadata) + "\n").encode(), "read")
    return export
