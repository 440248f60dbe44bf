"""Text that students control, as it may be written to a file or a terminal.

File and folder names, reasons quoting them and errors quoting notebooks reach grades.csv, logs,
feedback and the student's commands: what is written or printed of them goes through `shown`.
"""

import json
import re
import unicodedata

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


def shown_lines(text: str) -> str:
    """`text` as `shown` writes it, its line breaks kept: for a log or a message of several lines
    (tracebacks, verdicts, a kernel's output). Idempotent, as `shown` is."""
    return "\n".join(shown(line) for line in text.split("\n"))


def shown_text(text: str) -> str:
    """`text` as `shown` writes it, its line breaks and tabs kept: a notebook's output or a page,
    shown as text (a tab is layout there, as in JSON)."""
    return "\n".join("\t".join(shown(part) for part in line.split("\t")) for line in text.split("\n"))


def shown_json(text: str) -> str:
    """JSON text with each unprintable character in its strings written as JSON's own escape
    (`\\u009b`): the same value once parsed, and nothing a terminal acts on or hides when the file is
    shown. JSON's whitespace (tab, line feed, carriage return) stays: outside strings it is layout,
    and inside them JSON escapes it already."""
    return re.sub(r"[^\t\n\r\x20-\x7e]", _json_escape, text)


def _json_escape(found: re.Match) -> str:
    char = found.group()
    return json.dumps(char)[1:-1] if unicodedata.category(char) in UNPRINTABLE else char


def _escape(char: str) -> str:
    if "\udc80" <= char <= "\udcff":  # how Python reads the byte 0x80-0xff of a non-UTF-8 file name
        return f"\\x{ord(char) - 0xDC00:02x}"
    return repr(char)[1:-1]
