"""How learning-management systems name the files of a class's submissions, read back.

Pure functions from a file's path in a source (a folder or zip of submissions, as a tuple of
its folders and name) to what the path says: which export it comes from, whose work it is,
which attempt, and under what name the student saved it. Nothing here opens a file: inbox.py
copies and reads, recognition.py tells a notebook by its cells. docs/lms-exports.md says where
each rule comes from and how sure it is.

    Canvas      <lastfirst>[_LATE]_<user id>_<attachment id>_<file>   (Canvas adds -1, -2 to a duplicate)
    Moodle      <Full Name>_<participant id>_assignsubmission_file_/<file>   (or flat: ..._file_<file>)
                Participant_<participant id>_assignsubmission_file_/<file>   (blind marking)
    Blackboard  <Assignment>_<username>_attempt_<YYYY-MM-DD-HH-MM-SS>_<file>, and the attempt's
                receipt <Assignment>_<username>_attempt_<YYYY-MM-DD-HH-MM-SS>.txt
    Gradescope  submission_metadata.yml beside submission_<id>/<file>
    plain       <student>/<file>, or <student>_<notebook>.ipynb

An export's file name starts with what the system wrote and ends with the name the student gave
the file: each pattern is anchored at the start, so that what a student names a file can never
make it someone else's. Only files at the top of the source are read as flat names, and only
metadata at the top is read: in a student's folder a file's name or content says nothing about
whose work it is. The one folder looked through is the one an export itself wraps its files in
(Gradescope's assignment_<id>_export/); any other folder at the top may be a student's, so its
files are that student's whatever they are named.

Each LMS is one row of EXPORTS (at the end), read in its order: a new one is one row and its tests,
besides its roster format (record/roster.py) and any feedback bundle (record/feedback_return.py).
"""

import re
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime

import yaml

from autograder.printable import shown

STUDENT_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@+-]*$")  # also a folder name in OUT: nothing else
ID_RULE = "a student id holds only ASCII letters, digits and . _ @ + -, and starts with a letter or digit"
METADATA = "submission_metadata.yml"  # Gradescope's list of submissions and their students

CANVAS = re.compile(
    r"(?P<name>.*?)(?P<late>_LATE)?_(?P<user>[1-9][0-9]*)_(?P<attachment>[1-9][0-9]*)_(?P<file>.+)"
)
CANVAS_IDS = re.compile(r"_[1-9][0-9]*_[1-9][0-9]*_")  # what only a Canvas name holds before its file
CANVAS_DUPLICATE = re.compile(r"(?P<stem>.+)-(?P<n>[1-9][0-9]*)(?P<suffix>\.[^.]+)")  # 04_rope-1.ipynb
# Moodle turns `_` in a name into a space, so the name part holds none.
MOODLE = re.compile(r"(?P<name>[^_]+)_(?P<id>[0-9]+)_assignsubmission_(?P<plugin>[a-z]+)_(?P<file>.*)")
MOODLE_BLIND = "Participant"
BLACKBOARD = re.compile(
    r"(?P<prefix>.+?)_attempt_(?P<time>[0-9]{4}(?:-[0-9]{2}){5})(?:_(?P<file>.+)|(?P<receipt>\.txt))"
)
# A receipt's line `Name: <full name> (<username>)`: the username is the last parenthesis, closing the
# line (a full name may hold parentheses of its own: `Lee (Ann) Kim (lee_kim)`).
NAME_LINE = re.compile(r"^Name:[^\n]*", re.MULTILINE)
RECEIPT_NAME = re.compile(r"Name:[ \t]*(?P<name>[^\n]*)\((?P<username>[^()\s]+)\)[ \t]*\r?")
SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's, where PyYAML has it: 10x faster
GRADESCOPE_FOLDER = re.compile(r"submission_(?P<id>[0-9]+)")
EXPORT_FOLDER = re.compile(r"assignment_[0-9]+_export")  # the folder Gradescope's download wraps its files in
RECEIPT_CHARS = 2**16  # a receipt's name is in its first lines; a longer one is not read further
MAX_METADATA_DEPTH = 32  # Gradescope's metadata nests 4 deep; a deeper file is not an export's


@dataclass(frozen=True)
class Identified:
    """What a file's path says about it."""

    kind: str  # "notebook", "receipt" (Blackboard), "metadata" (Gradescope), "other" (no notebook), "refused"
    lms: str = ""  # the key of its row of EXPORTS, "" for the plain layouts
    student: str = ""  # the id the path gives ("" for Gradescope, whose metadata names the students)
    name: str = ""  # the student's name where the path gives one
    file: str = ""  # the file's name as the student saved it: what tells its notebook
    notebook: str = ""  # the notebook that name names exactly ("" where only its cells can tell)
    late: bool = False  # Canvas's _LATE_
    submitted_at: str = ""  # ISO 8601, where the path says
    attempt: tuple = ()  # orders one student's files for one notebook: the largest is the latest
    attempt_label: str = ""  # that attempt in words, e.g. "attachment 9933017"
    key: str = ""  # Blackboard: the attempt (its receipt's name without .txt); Gradescope: the submission id
    detail: str = ""  # why it is refused, or what it is when it is no notebook
    note: str = ""  # what the path says that was not believed (a student's file named as another's)


def is_notebook(name: str) -> bool:
    return name.lower().endswith(".ipynb")


def wanted(name: str) -> bool:
    """Whether the intake copies and reads a file of this name: notebooks, and the files an export
    writes beside them (Blackboard's receipts, Gradescope's metadata); everything else is only listed."""
    return is_notebook(name) or any(export.writes(name) for export in EXPORTS)


def named(file: str, known: tuple[str, ...]) -> str:
    """The notebook a file name names exactly (`04_rope.ipynb`), else ""."""
    stem = file.removesuffix(".ipynb")
    return stem if stem != file and stem in known else ""


# ------------------------------------------------------------------------------ a source's layout


@dataclass(frozen=True)
class Layout:
    """How a source's files are read: the folders all of them share (looked through), and whether
    a Gradescope export's metadata lies at the top of what is left."""

    known: tuple[str, ...]  # the course's notebooks
    wrapper: tuple[str, ...] = ()
    gradescope: bool = False
    nested_gradescope: frozenset[str] = frozenset()  # top folders that are Gradescope exports of their own

    def identify(self, parts: tuple[str, ...]) -> Identified:
        """What the path of one file says (parts: its folders and name, from the source's top)."""
        relative = parts[len(self.wrapper) :] if parts[: len(self.wrapper)] == self.wrapper else parts
        if len(relative) == 1:
            return self._top(relative[0])
        folder, file = relative[0], relative[-1]
        for export in EXPORTS:
            if found := export.read_folder(relative, self):
                return found
        if not is_notebook(file):
            return Identified("other", detail=not_a_notebook(file))
        if len(relative) > 2:
            inner = "/".join(relative[:-1])
            return Identified(
                "refused",
                detail=f"it lies in '{inner}/': only the files directly in a student's folder are that "
                f"student's (<student>/<notebook>.ipynb); move it into '{folder}/' if it is {folder}'s",
            )
        return self._plain_folder(folder, file)

    def _top(self, name: str) -> Identified:
        """A file at the top of the source: named the way an export names flat files, or
        <student>_<notebook>.ipynb."""
        for export in EXPORTS:
            if found := export.read_top(name, self):
                return found
        plain = self._plain_flat(name)
        if plain:
            return plain
        if not is_notebook(name):
            return Identified("other", detail=not_a_notebook(name))
        if named(name, self.known):
            return Identified(
                "refused",
                detail=f"it lies at the top of the source, in no student's folder: put it in a folder named "
                f"after its student (<student>/{name}) or name it <student>_{name}",
            )
        return Identified(
            "refused",
            detail=f"a file at the top of the source must be named <student>_<notebook>.ipynb, ending "
            f"in a notebook's exact name ({', '.join(self.known)}), for its student and notebook to be told "
            f"apart: rename it (e.g. {_example_flat(name, self.known)}), or put it in a folder named after "
            "its student, where its notebook is recognised by its cells",
        )

    def _plain_flat(self, name: str) -> Identified | None:
        stem = name.removesuffix(".ipynb")
        endings = [a for a in self.known if stem.endswith("_" + a) and len(stem) > len(a) + 1]
        if stem == name or not endings:
            return None
        notebook = max(endings, key=len)
        student = stem[: -len(notebook) - 1]
        if problem := id_problem(student):
            fix = f"rename the file, e.g. to {suggested_id(student) or '<student>'}_{notebook}.ipynb"
            return Identified("refused", detail=f"'{student}' cannot be a student id: {problem}; {fix}")
        return Identified("notebook", student=student, file=name, notebook=notebook)

    def _plain_folder(self, folder: str, file: str) -> Identified:
        if problem := id_problem(folder):
            fix = (
                f"rename the folder, e.g. to '{better}'"
                if (better := suggested_id(folder))
                else "rename the folder"
            )
            moodle = ""
            if " " in folder or not folder.isascii():
                moodle = (
                    " (it is not a Moodle export's folder either: Moodle names those "
                    "'<Full Name>_<id>_assignsubmission_file_')"
                )
            return Identified(
                "refused",
                detail=f"the folder name '{folder}' cannot be a student id: {problem}; {fix}{moodle}",
            )
        return Identified(
            "notebook",
            student=folder,
            file=file,
            notebook=named(file, self.known),
            note=_disbelieved(folder, file, self.known),
        )


def _disbelieved(folder: str, file: str, known: tuple[str, ...]) -> str:
    """What a file's name in a student's folder would say at the top of a source, where it names
    someone else: said in the log, never believed."""
    flat = Layout(known).identify((file,))
    if (
        flat.kind not in ("notebook", "receipt")
        or not flat.lms
        and not flat.student
        or flat.student == folder
    ):
        return ""
    named_as = f"a {LMS_NAMES[flat.lms]} export's file" if flat.lms else "a flat <student>_<notebook> file"
    who = f" of '{flat.student}'" if flat.student else ""
    return (
        f"'{file}' is named as {named_as}{who}, but it lies in '{folder}/': a file in a student's folder is "
        "that student's, whatever its name says"
    )


def layout_of(paths: list[tuple[str, ...]], known: tuple[str, ...]) -> Layout:
    """The layout of a source from the paths of the files the intake reads.

    The source's top is where the instructor put it: no folder there is looked through on the
    strength of what it holds, since a student's folder holds what she chose. The exception is the
    folder an export wraps its files in (Gradescope's `assignment_<id>_export/`), by its name.
    """
    wrapper = ()
    if (
        paths
        and all(len(p) > 1 and p[0] == paths[0][0] for p in paths)
        and EXPORT_FOLDER.fullmatch(paths[0][0])
    ):
        wrapper = paths[0][:1]
    relative = [p[len(wrapper) :] for p in paths]
    return Layout(
        known,
        wrapper,
        gradescope=(METADATA,) in relative,
        nested_gradescope=frozenset(p[0] for p in relative if len(p) == 2 and p[1] == METADATA),
    )


# ------------------------------------------------------------------------------ each system


def _canvas(match: re.Match, known: tuple[str, ...]) -> Identified:
    original = match["file"]
    duplicate = CANVAS_DUPLICATE.fullmatch(original)
    file = duplicate["stem"] + duplicate["suffix"] if duplicate else original
    copy = int(duplicate["n"]) if duplicate else 0
    label = f"attachment {match['attachment']}" + (f", copy -{copy}" if copy else "")
    kind = "notebook" if is_notebook(file) else "other"
    return Identified(
        kind,
        "canvas",
        student=match["user"],
        name=match["name"],
        file=file,
        notebook=named(file, known),
        late=bool(match["late"]),
        attempt=(int(match["attachment"]), copy),
        attempt_label=label,
        detail="" if kind == "notebook" else not_a_notebook(file),
    )


def _moodle(match: re.Match, file: str, known: tuple[str, ...]) -> Identified:
    name = "" if match["name"] == MOODLE_BLIND else match["name"]
    plugin = match["plugin"]
    if plugin != "file":
        what = "online text" if plugin == "onlinetext" else f"a '{plugin}' submission"
        detail = f"Moodle's {what} (assignsubmission_{plugin}), not a submitted file"
        return Identified("other", "moodle", match["id"], name, file=file, detail=detail)
    if not is_notebook(file):
        return Identified("other", "moodle", match["id"], name, file=file, detail=not_a_notebook(file))
    return Identified("notebook", "moodle", match["id"], name, file=file, notebook=named(file, known))


def _blackboard(match: re.Match, known: tuple[str, ...]) -> Identified | None:
    """A Blackboard attempt's file or receipt; None where the name only looks like one (a Canvas
    name whose student's file name holds `_attempt_<time>`, or a time that is no date)."""
    prefix, time = match["prefix"], match["time"]
    if CANVAS_IDS.search(prefix + "_") or "_" not in prefix:
        return None
    try:
        when = datetime.strptime(time, "%Y-%m-%d-%H-%M-%S")
    except ValueError:
        return None
    key = f"{prefix}_attempt_{time}"
    username = prefix.rpartition("_")[2]  # the receipt may say otherwise: see blackboard_student
    label = f"submitted {when:%Y-%m-%d %H:%M:%S}"
    if match["receipt"]:
        return Identified(
            "receipt",
            "blackboard",
            username,
            key=key,
            attempt_label=label,
            detail="Blackboard's receipt of an attempt",
        )
    file = match["file"]
    kind = "notebook" if is_notebook(file) else "other"
    return Identified(
        kind,
        "blackboard",
        student=username,
        file=file,
        notebook=named(file, known),
        submitted_at=when.isoformat(),
        attempt=(when,),
        attempt_label=label,
        key=key,
        detail="" if kind == "notebook" else not_a_notebook(file),
    )


@dataclass(frozen=True)
class Receipt:
    name: str
    username: str


def read_receipt(text: str) -> Receipt | None:
    """The student of a Blackboard receipt, from its line `Name: Jane Doe (jdoe12)`."""
    first = NAME_LINE.search(text[:RECEIPT_CHARS])  # Blackboard's own; later ones may be the student's text
    match = RECEIPT_NAME.fullmatch(first[0]) if first else None
    return Receipt(clean_name(match["name"]), match["username"]) if match else None


class Unowned(ValueError):
    """Whose work an export's file is cannot be told; the message says why and what to do."""


class Ambiguous(Unowned):
    """A file name that can be read as more than one student's."""


def blackboard_student(key: str, receipt: Receipt | None) -> tuple[str, str]:
    """The username and name of a Blackboard attempt (`key`: its receipt's name without .txt).

    The file name does not say where the assignment's name ends and the username starts, and
    both may hold `_`: the receipt's `(username)` says, where the name ends in it. Without a
    receipt that says, only a name with one `_` before `_attempt_` has one reading; any other
    raises Ambiguous (`kim` and `lee_kim` are both usernames of `HW 4_lee_kim`).
    """
    prefix = key.rpartition("_attempt_")[0]
    if receipt and prefix.endswith("_" + receipt.username) and len(prefix) > len(receipt.username) + 1:
        return receipt.username, receipt.name
    if prefix.count("_") == 1:
        username = prefix.partition("_")[2]
        return username, receipt.name if receipt and receipt.username == username else ""
    readings = [prefix[i + 1 :] for i, c in enumerate(prefix) if c == "_" and i and prefix[i + 1 :]]
    said = f"its receipt names '{receipt.username}'" if receipt else "there is no receipt of the attempt"
    raise Ambiguous(
        f"whose attempt it is cannot be told: the username in '{prefix}_attempt_…' may be "
        f"{' or '.join(repr(r) for r in readings[-3:])}, and {said}: download the assignment again with "
        "its receipts (Blackboard writes one per attempt)"
    )


@dataclass(frozen=True)
class Submitter:
    student: str  # the sid, else the email ("" if the metadata gives neither)
    name: str


@dataclass(frozen=True)
class GradescopeSubmission:
    id: str
    submitters: tuple[Submitter, ...]
    submitted_at: str  # ISO 8601, "" if the metadata does not say


def gradescope_submissions(text: str) -> dict[str, GradescopeSubmission]:
    """Gradescope's submission_metadata.yml, by submission id; ValueError says why it cannot be read.

    It is YAML written by Ruby: `submission_4567:` (or `:submission_4567:`) mapping to
    `:submitters:` (a list of `:name:`, `:sid:`, `:email:`), `:created_at:`, `:score:`...
    Read by PyYAML's safe loader (plain data only, whatever the file holds), once its depth is
    known to be an export's.
    """
    try:
        _bounded_depth(text)
        data = yaml.load(text, Loader=SAFE_LOADER)
    except yaml.YAMLError as error:
        raise ValueError(f"it is not readable YAML ({' '.join(str(error).split())})") from None
    if not isinstance(data, dict):
        raise ValueError("it does not map submissions to their students (no 'submission_<id>:' keys)")
    found = {}
    for key, value in data.items():
        match = GRADESCOPE_FOLDER.fullmatch(str(key).lstrip(":"))
        if not match or not isinstance(value, dict):
            continue
        submitters = _field(value, "submitters")
        if not isinstance(submitters, list):
            raise ValueError(f"{match[0]} has no list of :submitters:")
        people = []
        for person in submitters:
            person = person if isinstance(person, dict) else {}
            sid, email = _text(_field(person, "sid")), _text(_field(person, "email"))
            people.append(Submitter(sid or email, clean_name(_text(_field(person, "name")))))
        found[match["id"]] = GradescopeSubmission(
            match["id"], tuple(people), _iso(_field(value, "created_at"))
        )
    if not found:
        raise ValueError("it names no submission (no 'submission_<id>:' keys)")
    return found


def _bounded_depth(text: str) -> None:
    """ValueError if the YAML nests deeper than an export's: PyYAML builds nested nodes by
    recursion, so 30,000 levels would end the whole run. Its parser is not recursive: it is read
    as events first, counting the depth."""
    depth = 0
    for event in yaml.parse(text, Loader=SAFE_LOADER):
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > MAX_METADATA_DEPTH:
                raise ValueError(f"it nests more than {MAX_METADATA_DEPTH} levels deep, unlike any export")
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1


def _field(mapping: dict, name: str):
    """A field of a Ruby hash dumped as YAML: keyed `:name` (a Ruby symbol) or `name`."""
    return mapping.get(f":{name}", mapping.get(name))


def _text(value) -> str:
    """A scalar field as text; anything else (a list, a mapping) is no value. YAML aliases make a
    small file hold a structure of billions of items by reference: only scalars are ever written out."""
    return str(value).strip() if isinstance(value, str | int | float | date) else ""


def _iso(value) -> str:
    """A time as ISO 8601 to the second (with its offset where it has one); "" if it is none."""
    if isinstance(value, datetime):
        return value.replace(microsecond=0).isoformat()
    if isinstance(value, date):
        return value.isoformat()
    match = re.match(r"([0-9]{4}-[0-9]{2}-[0-9]{2})[T ]([0-9]{2}:[0-9]{2}:[0-9]{2})", _text(value))
    return f"{match[1]}T{match[2]}" if match else ""


def instant(iso: str) -> tuple:
    """An ISO 8601 time as something that orders by when it happened (offsets differ across a
    change of clocks); () for none, before every time."""
    try:
        when = datetime.fromisoformat(iso)
    except ValueError:
        return ()
    return (when.astimezone(UTC).replace(tzinfo=None) if when.tzinfo else when,)


# ------------------------------------------------------------------------------ the table


@dataclass(frozen=True)
class Companions:
    """What the files an export writes beside the notebooks said, read first (inbox.py)."""

    receipts: dict[str, Receipt]  # Blackboard's, by attempt
    metadata: dict[str, GradescopeSubmission] | str  # Gradescope's, by submission id; or why there is none


@dataclass(frozen=True)
class Owners:
    """Whose work a file is: each member (a Gradescope group has several), and its attempt."""

    members: tuple[tuple[str, str], ...]  # (student id, name)
    attempt: tuple
    attempt_label: str
    submitted_at: str


def _named_by_path(what: Identified, companions: Companions) -> Owners:
    """The student the path names (Canvas, Moodle, the plain layouts)."""
    return Owners(((what.student, what.name),), what.attempt, what.attempt_label, what.submitted_at)


def _blackboard_owner(what: Identified, companions: Companions) -> Owners:
    member = blackboard_student(what.key, companions.receipts.get(what.key))
    return Owners((member,), what.attempt, what.attempt_label, what.submitted_at)


def _gradescope_owners(what: Identified, companions: Companions) -> Owners:
    metadata = companions.metadata
    if isinstance(metadata, str):
        raise Unowned(f"whose work it is cannot be told: {metadata}")
    if what.key not in metadata:
        raise Unowned(
            f"submission_{what.key} is not in Gradescope's {METADATA}, so whose work it is cannot be "
            "told: the metadata and the folders must come from the same export (download it again)"
        )
    submission = metadata[what.key]
    if not submission.submitters:
        raise Unowned(f"{METADATA} names no student for submission_{what.key}")
    members = tuple((s.student, s.name) for s in submission.submitters)
    attempt = (instant(submission.submitted_at), int(what.key))
    return Owners(members, attempt, f"submission {what.key}", submission.submitted_at)


def _id_in_file_name(title: str) -> Callable[[Identified, str, str, str], str]:
    def refusal(what: Identified, student: str, name: str, problem: str) -> str:
        better = suggested_id(student)
        fix = "rename this student's files" + (f", e.g. with '{better}' in its place" if better else "")
        return f"the {title} '{student}' in the file name cannot be a student id: {problem}; {fix}"

    return refusal


def _id_in_metadata(what: Identified, student: str, name: str, problem: str) -> str:
    who = f"{name} in submission_{what.key}" if name else f"a student of submission_{what.key}"
    if not student:
        return f"Gradescope's {METADATA} gives {who} no :sid: and no :email:: add their sid there"
    return (
        f"the Gradescope sid (or email) '{student}' of {who} cannot be a student id: {problem}; "
        f"correct it in {METADATA}"
    )


def _canvas_top(name: str, layout: "Layout") -> Identified | None:
    canvas = CANVAS.fullmatch(name)
    if not canvas:
        return None
    plain = layout._plain_flat(name)
    # Not Canvas's where the plain reading's notebook spans the ids: `jdoe_2_10_moe.ipynb` is jdoe_2's
    # 10_moe, where no Canvas file would have attachment id 10 and the student's file `moe.ipynb`.
    if plain and plain.notebook and len(plain.notebook) + 6 > len(canvas["file"]):
        return None
    return _canvas(canvas, layout.known)


def _moodle_top(name: str, layout: "Layout") -> Identified | None:
    moodle = MOODLE.fullmatch(name)
    return _moodle(moodle, moodle["file"], layout.known) if moodle and moodle["file"] else None


def _moodle_folder(relative: tuple[str, ...], layout: "Layout") -> Identified | None:
    moodle = MOODLE.fullmatch(relative[0])
    return _moodle(moodle, relative[-1], layout.known) if moodle and not moodle["file"] else None


def _blackboard_top(name: str, layout: "Layout") -> Identified | None:
    blackboard = BLACKBOARD.fullmatch(name)
    return _blackboard(blackboard, layout.known) if blackboard else None


def _is_receipt(name: str) -> bool:
    match = BLACKBOARD.fullmatch(name)
    return bool(match and match["receipt"])


def _gradescope_top(name: str, layout: "Layout") -> Identified | None:
    if name != METADATA:
        return None
    return Identified("metadata", "gradescope", detail="Gradescope's list of submissions and their students")


def _gradescope_folder(relative: tuple[str, ...], layout: "Layout") -> Identified | None:
    """A file in a submission_<id>/ folder of the export whose metadata lies at the source's top;
    and the refusals of what looks like Gradescope's elsewhere."""
    folder, file = relative[0], relative[-1]
    submission = GRADESCOPE_FOLDER.fullmatch(folder)
    if submission and layout.gradescope:
        kind = "notebook" if is_notebook(file) else "other"
        detail = "" if kind == "notebook" else not_a_notebook(file)
        return Identified(
            kind,
            "gradescope",
            file=file,
            notebook=named(file, layout.known),
            key=submission["id"],
            detail=detail,
        )
    if file == METADATA and len(relative) == 2 and folder not in layout.nested_gradescope:
        return Identified(
            "other",
            detail=f"{METADATA} in '{folder}/', a student's folder, is not read: Gradescope's metadata "
            "is read at the top of its export only",
        )
    if not is_notebook(file):
        return None
    if folder in layout.nested_gradescope and GRADESCOPE_FOLDER.fullmatch(relative[1]):
        return Identified(
            "refused",
            "gradescope",
            detail=f"'{folder}/' is a Gradescope export (it holds {METADATA}) beside other files of "
            "the source: grade it on its own (its folder or zip as downloaded)",
        )
    if submission:
        return Identified(
            "refused",
            "gradescope",
            detail=f"'{folder}/' is named as a Gradescope export's submission folder, but there is "
            f"no {METADATA} at the top of the source to say whose it is: grade the export's folder or "
            "zip as downloaded, with its metadata",
        )
    return None


def _nothing(*_) -> None:
    return None


@dataclass(frozen=True)
class Export:
    """One LMS's export, as the intake reads it: a row of EXPORTS (docs/lms-exports.md)."""

    key: str  # Identified.lms, the record's `lms` column, roster.FORMATS' key
    title: str
    read_top: Callable[[str, "Layout"], Identified | None]  # a file at the source's top; None: not its
    refuse_id: Callable[[Identified, str, str, str], str]  # (what, student, name, problem) -> the refusal
    read_folder: Callable[[tuple[str, ...], "Layout"], Identified | None] = _nothing  # in a top folder
    owners: Callable[[Identified, Companions], Owners] = _named_by_path  # raises Unowned
    writes: Callable[[str], bool] = _nothing  # the names of what it writes beside the notebooks


# Read in this order; the patterns overlap, so each reader guards against the ones it must yield to
# (Blackboard's against Canvas ids, Canvas's against a plain name whose notebook spans its ids).
EXPORTS = (
    Export("moodle", "Moodle", _moodle_top, _id_in_file_name("Moodle id"), read_folder=_moodle_folder),
    Export(
        "gradescope",
        "Gradescope",
        _gradescope_top,
        _id_in_metadata,
        read_folder=_gradescope_folder,
        owners=_gradescope_owners,
        writes=lambda name: name == METADATA,
    ),
    Export(
        "blackboard",
        "Blackboard",
        _blackboard_top,
        _id_in_file_name("Blackboard username"),
        owners=_blackboard_owner,
        writes=_is_receipt,
    ),
    Export("canvas", "Canvas", _canvas_top, _id_in_file_name("Canvas id")),
)
BY_KEY = {export.key: export for export in EXPORTS}
LMS_NAMES = {export.key: export.title for export in EXPORTS}
PLAIN = Export("", "plain layout", _nothing, _id_in_file_name("student id"))  # <student>/<file>, flat names


def export_of(lms: str) -> Export:
    return BY_KEY.get(lms, PLAIN)


# ------------------------------------------------------------------------------ words


def clean_name(text: str) -> str:
    """A person's name as given, on one line, unprintable characters escaped (printable.shown)."""
    return shown(" ".join(text.split()))[:200]


def id_problem(text: str) -> str:
    """Why `text` cannot be a student id, naming each character at fault; "" if it can."""
    if STUDENT_ID.fullmatch(text):
        return ""
    if not text:
        return f"it is empty ({ID_RULE})"
    faults = []
    if not (text[0].isascii() and text[0].isalnum()):
        faults.append(f"it starts with {_described(text[0])}")
    bad = [_described(c) for c in dict.fromkeys(text[1:]) if not re.fullmatch(r"[A-Za-z0-9._@+-]", c)]
    bad = [b for b in bad if not faults or b != _described(text[0])]
    if bad:
        listed = bad[0] if len(bad) == 1 else ", ".join(bad[:-1]) + " and " + bad[-1]
        faults.append(f"{listed} {'is' if len(bad) == 1 else 'are'} not allowed in one")
    return f"{'; '.join(faults)} ({ID_RULE})"


def suggested_id(text: str) -> str:
    """`text` made into a student id (accents dropped, other characters as `_`), "" if nothing is left."""
    folded = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    folded = re.sub(r"[^A-Za-z0-9._@+-]+", "_", folded).strip("_")
    folded = re.sub(r"^[^A-Za-z0-9]+", "", folded)
    return folded if STUDENT_ID.fullmatch(folded) else ""


def _described(char: str) -> str:
    if char == " ":
        return "' ' (a space)"
    if char.isspace():
        return f"U+{ord(char):04X} (a space)"
    if char.isascii():
        return f"'{char}'"
    base = unicodedata.normalize("NFKD", char)
    if base[0].isascii() and base[0].isalpha():
        return f"'{char}' (a letter with an accent)"
    if char.isalpha():
        return f"'{char}' (a letter outside ASCII)"
    return f"'{char}' (U+{ord(char):04X})"


def _example_flat(name: str, known: tuple[str, ...]) -> str:
    first = name.split("_")[0]
    student = first if first != name and STUDENT_ID.fullmatch(first) else "<student>"
    return f"{student}_{known[0]}.ipynb if it holds {known[0]}" if known else f"{student}_<notebook>.ipynb"


def not_a_notebook(name: str) -> str:
    suffix = name.rpartition(".")[2].lower() if "." in name.lstrip(".") else ""
    return f"not a notebook (.{suffix} file)" if suffix else "not a notebook"
