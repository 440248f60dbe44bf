"""OUT/report.html: what a class made of each notebook, on one self-contained page.

For each notebook: how many students were graded, failed or missing and how the scores spread (a
histogram); for each question, the share of students with all its points; and for each check, the
known mistakes the judge named with how many students made each (the catalogue's names and
advice), the cases and properties that failed most often, why some tests could not be judged, and
the students whose notebooks failed or are missing; then the pairs of similar answers
(grader/similarity), for the instructor's eyes only.

It is made from the grades' rows, which carry each test's verdict as data (core.Verdict.record),
and the pairs found before it is written: no notebook is read here. Every text that comes from
students (ids, names, reasons quoting their errors, answers) is escaped, the page holds no script
and its policy allows none, and the figures are PNG images inside the page: it opens from disk
with no network, anywhere.
"""

import base64
import html
import io
import math
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from statistics import mean, median

from autograder.core import as_sentence
from autograder.paths import assignments
from autograder.reference import mistakes
from grader.grades import Result
from grader.similarity import page as similar
from grader.similarity.matching import Match

TOP = 5  # failing cases and properties listed per check
POLICY = "default-src 'none'; img-src data:; style-src 'unsafe-inline'"


@dataclass
class CheckTally:
    """What the class's submissions of one notebook made of one check."""

    max_points: float = 0.0  # visible + hidden
    submissions: int = 0  # judged at least once
    full: int = 0  # with all the check's points
    points: float = 0.0  # earned, summed over submissions
    mistakes: Counter = field(default_factory=Counter)  # name -> students
    cases: Counter = field(default_factory=Counter)  # (concern, case) -> students
    properties: Counter = field(default_factory=Counter)  # name -> students
    unjudged: Counter = field(default_factory=Counter)  # why -> students


def tally(rows: list[Result]) -> dict[str, dict[str, CheckTally]]:
    """notebook -> check -> its tally, over the rows that were graded. A student counts once per
    mistake, case, property or reason, however many of the check's tests show it."""
    tallies: dict[str, dict[str, CheckTally]] = defaultdict(dict)
    for row in rows:
        if row.status not in ("graded", "needs_manual_grading") or not row.checks:
            continue
        by_check = defaultdict(list)
        for verdict in row.checks:
            by_check[verdict["check"]].append(verdict)
        for check, verdicts in by_check.items():
            if not any(v["max_points"] for v in verdicts):
                continue  # advice only (07.rmsnorm, which runs given code): nothing to tally
            one = tallies[row.notebook].setdefault(check, CheckTally())
            one.max_points = sum(v["max_points"] for v in verdicts)
            one.submissions += 1
            earned = sum(v["points"] for v in verdicts)
            one.points += earned
            one.full += earned >= one.max_points - 1e-9
            findings = [
                (part["concern"], part["finding"])
                for v in verdicts
                for part in (v["parts"] or [{"concern": "", "finding": v["finding"]}])
                if part["finding"]
            ]
            one.mistakes.update({m for _, f in findings for m in f["mistakes"]})
            one.cases.update({(c, f["case"]) for c, f in findings if f["case"]})
            one.properties.update({p for _, f in findings for p in f["properties"]})
            one.unjudged.update({f["unjudged"] for _, f in findings if f["unjudged"]})
    return tallies


def write_class_report(path: Path, rows: list[Result], matches: list[Match] = (), failure: str = "") -> None:
    """The report of the class `rows` make; `matches`: its flagged pairs of similar answers, or
    `failure`: why they could not be sought."""
    course = set(assignments())
    unmatched = [r for r in rows if r.notebook not in course]  # files refused before any notebook
    rows = [r for r in rows if r.notebook in course]
    tallies = tally(rows)
    notebooks = sorted({r.notebook for r in rows})
    students = len({r.student for r in rows})
    body = [
        f"<h1>Class report</h1><p>{_count(students, 'student')}, {_count(len(notebooks), 'notebook')}.</p>"
    ]
    body.append(_overview(rows, notebooks))
    for notebook in notebooks:
        body.append(
            _notebook(
                notebook,
                [r for r in rows if r.notebook == notebook],
                tallies.get(notebook, {}),
                [m for m in matches if m.notebook == notebook],
                failure,
            )
        )
    if unmatched:
        body.append(
            "<section><h2>Files not taken as any notebook</h2><table><tr><th>file or student</th>"
            "<th>notebook</th><th>why</th></tr>"
            + "".join(
                f"<tr><td>{_e(r.student)}</td><td>{_e(r.notebook)}</td><td>{_e(r.reason)}</td></tr>"
                for r in unmatched
            )
            + "</table></section>"
        )
    page = (
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>"
        f"<meta http-equiv='Content-Security-Policy' content=\"{POLICY}\">"
        f"<title>Class report</title><style>{STYLE}{similar.STYLE}</style></head>"
        f"<body>{''.join(body)}</body></html>\n"
    )
    partial = path.with_suffix(".partial")
    partial.write_text(page, encoding="utf-8")
    partial.rename(path)


STYLE = """
body { font: 15px/1.45 system-ui, sans-serif; max-width: 72em; margin: 2em auto; padding: 0 1em; }
h2 { margin-top: 2.2em; border-bottom: 1px solid #ccc; } h3 { margin-bottom: .3em; }
table { border-collapse: collapse; margin: .5em 0 1em; }
td, th { padding: .2em .7em; text-align: left; vertical-align: top; }
th { border-bottom: 1px solid #999; } tr:nth-child(even) td { background: #f6f6f6; }
td.n { text-align: right; font-variant-numeric: tabular-nums; }
.bar { display: inline-block; height: .8em; background: #4a7ab5; vertical-align: middle; }
.advice { color: #555; font-size: 90%; } .none { color: #777; }
img { max-width: 100%; }
"""


def _count(n: int, what: str) -> str:
    return f"{n} {what}{'' if n == 1 else 's'}"


def _e(text) -> str:
    return html.escape(str(text), quote=True)


def _overview(rows: list[Result], notebooks: list[str]) -> str:
    lines = [
        "<table><tr><th>notebook</th><th>graded</th><th>needs manual grading</th><th>failed</th>"
        "<th>missing</th><th>mean</th><th>median</th></tr>"
    ]
    for notebook in notebooks:
        chosen = [r for r in rows if r.notebook == notebook]
        counts = Counter(r.status for r in chosen)
        scores = [r.score for r in chosen if r.score is not None]
        top = next((r.max_score for r in chosen if r.max_score), 0)
        stats = (f"{mean(scores):.2f} / {top:g}", f"{median(scores):g}") if scores else ("", "")
        lines.append(
            f"<tr><td><a href='#{_e(notebook)}'>{_e(notebook)}</a></td>"
            + "".join(
                f"<td class='n'>{counts[s]}</td>"
                for s in ("graded", "needs_manual_grading", "failed", "missing")
            )
            + f"<td class='n'>{stats[0]}</td><td class='n'>{stats[1]}</td></tr>"
        )
    return "".join(lines) + "</table>"


def _notebook(
    notebook: str, rows: list[Result], checks: dict[str, CheckTally], matches: list[Match], failure: str
) -> str:
    scores = [r.score for r in rows if r.score is not None]
    top = next((r.max_score for r in rows if r.max_score), 0.0)
    parts = [f"<section id='{_e(notebook)}'><h2>{_e(notebook)}</h2>"]
    if scores:
        parts.append(
            f"<p>{len(scores)} scored: mean {mean(scores):.2f}, median {median(scores):g} of {top:g} points "
            "(hand grades included, before any late penalty).</p>"
            f"<img alt='the scores of {_e(notebook)}' src='data:image/png;base64,{_histogram(scores, top)}'>"
        )
    else:
        parts.append("<p class='none'>No notebook was scored.</p>")
    if checks:
        parts.append(
            "<h3>Questions</h3><p>As the grader judged them (before any grade given by hand).</p>"
            "<table><tr><th>check</th><th>points</th><th>mean</th>"
            "<th colspan='2'>students with all its points</th></tr>"
        )
        for name in sorted(checks):
            one = checks[name]
            rate = one.full / one.submissions
            parts.append(
                f"<tr><td><a href='#check-{_e(name)}'>{_e(name)}</a></td>"
                f"<td class='n'>{one.max_points:g}</td>"
                f"<td class='n'>{one.points / one.submissions:.2f}</td>"
                f"<td class='n'>{one.full} of {one.submissions} ({rate:.0%})</td>"
                f"<td><span class='bar' style='width:{rate * 8:.2f}em'></span></td></tr>"
            )
        parts.append("</table>")
        parts += [_check(name, checks[name]) for name in sorted(checks)]
    parts.append(_not_graded(rows))
    parts.append(similar.section(notebook, matches, failure))
    return "".join(parts) + "</section>"


def _check(name: str, one: CheckTally) -> str:
    parts = [f"<section class='check' id='check-{_e(name)}'><h3>{_e(name)}</h3>"]
    if one.full == one.submissions:
        return parts[0] + f"<p class='none'>All {one.submissions} students have all its points.</p></section>"
    advice = _advice(name)
    if one.mistakes:
        parts.append(
            "<table class='mistakes'><tr><th>known mistake named</th><th>students</th><th>advice</th></tr>"
        )
        for mistake, count in one.mistakes.most_common():
            parts.append(
                f"<tr><td class='name'>{_e(mistake)}</td><td class='n count'>{count}</td>"
                f"<td class='advice'>{_e(advice.get(mistake, ''))}</td></tr>"
            )
        parts.append("</table>")
    else:
        parts.append("<p class='none'>No known mistake was named.</p>")
    tables = [
        (
            "failing case",
            "cases",
            [
                (f"{case} ({concern})" if concern else case, n)
                for (concern, case), n in one.cases.most_common(TOP)
            ],
        ),
        ("property broken", "properties", one.properties.most_common(TOP)),
        ("not judged: why", "unjudged", one.unjudged.most_common(TOP)),
    ]
    for heading, kind, counted in tables:
        if counted:
            parts.append(f"<table class='{kind}'><tr><th>{heading}</th><th>students</th></tr>")
            parts += [
                f"<tr><td class='name'>{_e(what)}</td><td class='n count'>{n}</td></tr>"
                for what, n in counted
            ]
            parts.append("</table>")
    return "".join(parts) + "</section>"


def _not_graded(rows: list[Result]) -> str:
    failed = sorted((r for r in rows if r.status == "failed"), key=lambda r: r.student)
    missing = sorted((r for r in rows if r.status == "missing"), key=lambda r: r.student)
    parts = []
    if failed:
        parts.append(
            "<h3>Not graded</h3><table class='failed'><tr><th>student</th><th>name</th><th>why</th></tr>"
        )
        parts += [
            f"<tr><td>{_e(r.student)}</td><td>{_e(r.name)}</td><td>{_e(r.reason)}</td></tr>" for r in failed
        ]
        parts.append("</table>")
    if missing:
        parts.append("<h3>Missing</h3><table class='missing'><tr><th>student</th><th>name</th></tr>")
        parts += [f"<tr><td>{_e(r.student)}</td><td>{_e(r.name)}</td></tr>" for r in missing]
        parts.append("</table>")
    return "".join(parts)


def _advice(check: str) -> dict[str, str]:
    """The catalogue's advice for each known mistake of a check (none where the solutions that
    hold the catalogue do not know the check)."""
    try:
        return {m.name: as_sentence(m.advice) for m in mistakes(check)}
    except LookupError:
        return {}


def _histogram(scores: list[float], top: float) -> str:
    """The scores' histogram as a base64 PNG: a bar per point (per 1/20 of the top, for larger tops)."""
    from matplotlib.figure import Figure  # drawn without pyplot: no backend, no display

    width = max(1.0, top / 20)  # the last bar holds its right edge too: full marks
    edges = [i * width for i in range(max(1, math.ceil(max(top, *scores) / width)) + 1)]
    figure = Figure(figsize=(6, 2.4), dpi=100)
    axes = figure.subplots()
    axes.hist(scores, bins=edges, color="#4a7ab5", edgecolor="white")
    axes.set_xlabel("score")
    axes.set_ylabel("students")
    axes.yaxis.get_major_locator().set_params(integer=True)
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    return base64.b64encode(buffer.getvalue()).decode()
