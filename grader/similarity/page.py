"""The flagged pairs, for the instructor: a section of each notebook in OUT/report.html and
OUT/similar-answers.csv. Students never see either: neither is in a feedback page, an upload
or OUT/course.

A pair shows both answers side by side, the lines they share marked and the lines the notebook
gives dimmed, with links to both feedback pages; a source file shows only the lines around what
it shares. Everything shown was written by students or found on the internet: escaped.
"""

import csv
import html
from pathlib import Path
from urllib.parse import quote

from autograder.printable import shown, shown_text
from grader.grades import csv_cell
from grader.similarity.answers import Answer, given_code, given_lines
from grader.similarity.matching import MIN_SHARE, Match

CSV_NAME = "similar-answers.csv"
COLUMNS = [
    "notebook",
    "question",
    "student",
    "other",
    "other_from",
    "share",
    "evidence",
    "lines",
    "other_lines",
]
CONTEXT = 2  # lines shown around what a source file shares
MAX_LINES = 200  # of one answer shown


def write_csv(path: Path, matches: list[Match]) -> None:
    partial = path.with_name(path.name + ".partial")
    with partial.open("w", newline="", encoding="utf-8") as file:
        writer = csv.writer(file)
        writer.writerow(COLUMNS)
        for m in matches:
            writer.writerow(
                [
                    m.notebook,
                    csv_cell(m.question),
                    csv_cell(m.a.owner),
                    csv_cell(m.b.owner),
                    csv_cell(_from(m.b)),
                    f"{m.share:.2f}",
                    f"{m.evidence:g}",
                    _spans(m.lines_a),
                    _spans(m.lines_b),
                ]
            )
    partial.rename(path)


def section(notebook: str, matches: list[Match], failure: str = "") -> str:
    """The notebook's similar answers, as a part of the class report (or why none were sought)."""
    head = (
        f"<h3 id='similar-{_e(notebook)}'>Similar answers</h3><p class='advice'>Pairs that share what "
        f"the rest of the class does not write: at least {MIN_SHARE:.0%} of the smaller answer, given "
        "code left out (docs/similar-answers.md). A pair is a reason to look, not a finding: read both "
        "answers.</p>"
    )
    if failure:
        return head + f"<p class='none'>Not compared: {_e(failure)}.</p>"
    if not matches:
        return head + "<p class='none'>No pair of answers was flagged.</p>"
    rows = "".join(
        f"<tr><td>{_e(m.question)}</td><td>{_who(m.a)}</td><td>{_who(m.b)}</td>"
        f"<td class='n'>{m.share:.0%}</td><td class='n'>{m.evidence:g}</td>"
        f"<td><a href='#pair-{_e(notebook)}-{i}'>side by side</a></td></tr>"
        for i, m in enumerate(matches)
    )
    table = (
        "<table class='similar'><tr><th>question</th><th>student</th><th>shares with</th><th>share</th>"
        f"<th>evidence</th><th></th></tr>{rows}</table>"
    )
    return head + table + "".join(_side_by_side(notebook, i, m) for i, m in enumerate(matches))


STYLE = """
table.pair { table-layout: fixed; width: 100%; } table.pair td { width: 50%; padding: 0 .4em; }
table.pair pre { margin: 0; font-size: 12.5px; white-space: pre-wrap; overflow-wrap: anywhere; }
pre span.shared { background: #ffe08a; } pre span.given { color: #999; } pre span.gap { color: #777; }
"""


def _side_by_side(notebook: str, index: int, m: Match) -> str:
    given = given_lines(given_code(m.notebook))
    return (
        f"<details id='pair-{_e(notebook)}-{index}'><summary>{_e(m.question)}: {_e(m.a.owner)} and "
        f"{_e(m.b.owner)}, {m.share:.0%}</summary><table class='pair'><tr>"
        f"<td>{_listing(m.a, m.lines_a, given)}</td><td>{_listing(m.b, m.lines_b, given)}</td>"
        "</tr></table></details>"
    )


def _listing(answer: Answer, shared: tuple[int, ...], given: set[str]) -> str:
    lines = answer.source.split("\n")
    shown = range(1, min(len(lines), MAX_LINES) + 1)
    if answer.notebook == "":  # a source file: what it shares, with a little context
        near = {n for s in shared for n in range(s - CONTEXT, s + CONTEXT + 1) if 1 <= n <= len(lines)}
        shown = sorted(near)
    out, previous = [], 0
    for n in shown:
        if n != previous + 1:
            out.append(f"<span class='gap'>... line {n}</span>")
        text = html.escape(shown_text(lines[n - 1]), quote=True) or " "
        kind = "given" if lines[n - 1].strip() in given else "shared" if n in shared else ""
        out.append(f"<span class='{kind}'>{text}</span>" if kind else text)
        previous = n
    if answer.notebook and len(lines) > MAX_LINES:
        out.append(f"<span class='gap'>... {len(lines) - MAX_LINES} more lines</span>")
    return f"<p>{_who(answer)}</p><pre>" + "\n".join(out) + "</pre>"


def _who(answer: Answer) -> str:
    if answer.notebook == "":
        return f"{_e(answer.owner)} <span class='advice'>({_e(_from(answer))})</span>"
    page = answer.page
    href = page.as_uri() if page.is_absolute() else "/".join(quote(part) for part in page.parts)
    label = _e(answer.owner) + (
        "" if answer.in_this_class else f" <span class='advice'>({_e(_from(answer))})</span>"
    )
    return f"<a href='{_e(href)}'>{label}</a>"


def _from(answer: Answer) -> str:
    if answer.in_this_class:
        return "this class"
    return f"earlier class: {answer.origin}" if answer.notebook else f"source: {answer.origin}"


def _spans(lines: tuple[int, ...]) -> str:
    """1-3 5 8-9: lines as ranges."""
    spans, start = [], None
    for i, n in enumerate(lines):
        start = n if start is None else start
        if i + 1 == len(lines) or lines[i + 1] != n + 1:
            spans.append(f"{start}" if start == n else f"{start}-{n}")
            start = None
    return " ".join(spans)


def _e(text) -> str:
    """Text for the page: unprintable characters (controls, text-direction overrides, lone
    surrogates) as escapes, then HTML-escaped."""
    return html.escape(shown(str(text)), quote=True)
