"""The feedback pages bundled the way each LMS takes feedback files back, beside the grades upload.

    upload/canvas-feedback.zip   Canvas, "Re-Upload Submissions" (Assignment > Submissions): each
                                 page under the name of the file it answers, as Canvas downloaded it
    upload/moodle-feedback.zip   Moodle, "Upload multiple feedback files in a zip": each page in the
                                 student's folder as Moodle names it, as <notebook>-feedback.html

What each LMS reads of those names, from its source (docs/lms-exports.md says how sure we are):
- Canvas (app/models/assignment.rb, infer_comment_context_from_filename) splits the file's base name
  at "_" and takes the first two parts made of digits as the user id and the attachment id; the
  attachment must be one of that submission's files. The page becomes a comment on the submission,
  its file shown under the name of the student's own file.
- Moodle (mod/assign/feedback/file/importziplib.php) splits a folder name at "_" into
  fullname_participantid_plugintype_pluginname, a trailing "_" allowed; a file that is not one of the
  submission's own becomes a feedback file of that participant.

The plain layouts, Blackboard and Gradescope take no such bundle: OUT/feedback/<student>/ is one
folder per student to hand out. A page is one file (its maths is MathML): nothing beside it is needed.
"""

import re
import zipfile
from pathlib import Path, PurePosixPath

from grader.grades import Result

CANVAS_BUNDLE = "canvas-feedback.zip"
MOODLE_BUNDLE = "moodle-feedback.zip"
MOODLE_FOLDER = "{name}_{student}_assignsubmission_file_"  # a trailing "_": read by Moodle 3 and 4


def write_feedback_bundles(out: Path, rows: list[Result]) -> list[Path]:
    """The bundles of the LMSs the record's submissions came from; the paths written (a bundle no
    row needs any more is removed)."""
    pages = [(row, out / "feedback" / row.student / f"{row.notebook}.html") for row in rows]
    pages = [(row, page) for row, page in pages if row.origin and page.exists()]
    entries = {
        bundle: {name_in(row): page for row, page in pages if row.lms == lms}
        for lms, (bundle, name_in) in BUNDLES.items()
    }
    written = []
    for bundle, files in entries.items():
        path = out / "upload" / bundle
        if not files:
            path.unlink(missing_ok=True)
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(".partial")
        with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as archive:
            for name, page in sorted(files.items()):
                archive.write(page, name)
        partial.rename(path)
        written.append(path)
    return written


def canvas_name(row: Result) -> str:
    """The name Canvas downloaded the graded file under (`<name>[_LATE]_<user id>_<attachment id>_<file>`)."""
    return PurePosixPath(row.origin).name


def moodle_name(row: Result) -> str:
    """The page in the student's folder, named as Moodle reads a folder: the id is the participant's."""
    name = re.sub(r"[_/\\]", " ", row.name).strip() or "Participant"
    return f"{MOODLE_FOLDER.format(name=name, student=row.student)}/{row.notebook}-feedback.html"


# The LMSs that take feedback back as a bundle (by exports.EXPORTS' key): its name, and each page's in it.
BUNDLES = {"canvas": (CANVAS_BUNDLE, canvas_name), "moodle": (MOODLE_BUNDLE, moodle_name)}
