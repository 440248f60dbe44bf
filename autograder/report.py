"""What a batch reports: one row per student and notebook (OUT/grades.csv).

Rows carry text that students control (file and folder names, reasons quoting them, errors
quoting their notebooks), so what is written or printed from a row goes through `shown`, and
grades.csv's text fields through `_cell` as well.
"""

import csv
import unicodedata
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Result:
    student: str
    notebook: str
    score: float | None
    max_score: float | None
    status: str
    reason: str = ""


def failed(student: str, notebook: str, reason: str) -> Result:
    """A row for a notebook that could not be graded: no score, the reason instead."""
    return Result(student, notebook, None, None, "failed", reason)


def write_csv(path: Path, results: list[Result]) -> None:
    partial = path.with_suffix(".partial")
    with partial.open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["student", "notebook", "score", "max_score", "status", "reason"])
        for r in results:
            writer.writerow(
                [
                    _cell(r.student),
                    _cell(r.notebook),
                    _number(r.score),
                    _number(r.max_score),
                    _cell(r.status),
                    _cell(r.reason),
                ]
            )
    partial.rename(path)


# Control characters (line breaks, terminal escape codes), invisible formatting (text-direction
# overrides such as U+202E), Unicode's own line and paragraph separators, and the lone
# surrogates that stand for the bytes of a file name that is not UTF-8.
UNPRINTABLE = {"Cc", "Cf", "Cs", "Zl", "Zp"}


def shown(text: str) -> str:
    """`text` as it may be written to a file or a terminal: each unprintable character as an escape.

    A name holding a newline would otherwise forge a line of grades.csv or of the summary, and an
    escape code would rewrite what the terminal shows. Escapes read as in Python (`\\n`, `\\x1b`,
    `\\u202e`; a byte of a name that is not UTF-8 as `\\xff`). Backslashes themselves are kept,
    so that showing text twice changes nothing: rows may be shown at every step they pass.
    """
    return "".join(_escape(c) if unicodedata.category(c) in UNPRINTABLE else c for c in text)


def _escape(char: str) -> str:
    if "\udc80" <= char <= "\udcff":  # how Python reads the byte 0x80-0xff of a non-UTF-8 file name
        return f"\\x{ord(char) - 0xDC00:02x}"
    return repr(char)[1:-1]


FORMULA_STARTS = ("=", "+", "-", "@")  # OWASP's list, less tab and CR: `shown` has escaped those


def _cell(text: str) -> str:
    """A text field of grades.csv: shown, and never read as a formula by a spreadsheet.

    A field starting with a formula character gets a leading apostrophe, as OWASP recommends
    against CSV injection (`=HYPERLINK(...)` as a folder name). Scores are numbers we write
    ourselves (`_number`) and are left alone.
    """
    text = shown(text)
    return "'" + text if text.startswith(FORMULA_STARTS) else text


def _number(value: float | None) -> str:
    return "" if value is None else f"{value:g}"
