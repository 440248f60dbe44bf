"""OUT/report.html, made from a synthetic class whose mistakes are known: the counts it shows,
what it escapes, and the page in a browser (offline, no script, every figure drawn)."""

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from grader.grades import Result, failed, missing
from grader.record.class_report import write_class_report

from .helpers.feedback import report_tables
from .helpers.submissions import checks_of, mistake, mutant, perfect, release, verdicts_when_graded

SEED = 7
NOTEBOOK = "07_rmsnorm"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CANARY = Path(__file__).parent / "helpers" / "canary.py"
HOSTILE = "<script>window.PWNED=1</script><img src=x onerror='window.PWNED=2'>"


def _graded(student: str, notebook, name: str = "") -> Result:
    """The row the grader gives `notebook`, with its verdicts as data, worked out in this process."""
    verdicts = verdicts_when_graded(notebook, SEED, checks_of(NOTEBOOK))
    score = sum(v.points for v in verdicts.values())
    records = tuple(v.record(hidden) for (_, hidden), v in verdicts.items())
    return Result(student, NOTEBOOK, score, 6.0, "graded", name=name, checks=records)


def _class() -> list[Result]:
    outside = mutant(NOTEBOOK, "rmsnorm", "RMSNorm", mistake("07.rmsnorm_norm", "EpsOutsideRoot"))
    mean_of_x = mutant(NOTEBOOK, "rmsnorm", "RMSNorm", mistake("07.rmsnorm_norm", "MeanOfX"))
    rows = [_graded("ann", perfect(NOTEBOOK)), _graded("bob", perfect(NOTEBOOK), name=HOSTILE)]
    rows += [_graded(f"outside-{i}", outside) for i in range(3)]
    rows += [_graded(f"mean-{i}", mean_of_x) for i in range(2)]
    rows += [_graded("untouched", release(NOTEBOOK))]
    rows += [
        failed("broken", NOTEBOOK, f"not a readable notebook: {HOSTILE}"),
        missing("gone", NOTEBOOK, "Gone Away"),
        failed(f"export/{HOSTILE}.pdf", "", "not a notebook of the course"),  # refused at intake
    ]
    return rows


@pytest.fixture(scope="module")
def page(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("report") / "report.html"
    write_class_report(path, _class())
    return path


def test_each_known_mistake_is_counted_with_its_advice(page):
    tables = report_tables(page)
    [mistakes] = [t for t in tables["check-07.rmsnorm_norm"] if t[0][0] == "known mistake named"]
    counted = {row[0]: int(row[1]) for row in mistakes[1:]}
    assert counted == {
        "eps added outside the square root": 3,
        "mean of x instead of the mean of x squared": 2,
    }
    advice = {row[0]: row[2] for row in mistakes[1:]}
    assert advice["eps added outside the square root"].startswith("Use rsqrt(mean(x ** 2) + eps)")


def test_pass_rates_failing_cases_and_what_could_not_be_judged(page):
    tables = report_tables(page)
    questions = next(t for t in tables[NOTEBOOK] if t[0][0] == "check")
    rates = {row[0]: row[3] for row in questions[1:]}
    # ann and bob pass; the mutants and the stub fail; 07.rmsnorm (advice only, no points) is left out
    assert rates == {"07.rmsnorm_norm": "2 of 8 (25%)"}
    cases = next(t for t in tables["check-07.rmsnorm_norm"] if t[0][0] == "failing case")
    # the first case fails for the five mutants and the stub
    assert [(row[0], int(row[1])) for row in cases[1:]] == [(cases[1][0], 6)]
    assert cases[1][0].startswith("x of shape (2, 4, 8)")


def test_failed_and_missing_students_are_listed_and_student_text_is_escaped(page):
    text = page.read_text()
    tables = report_tables(page)
    failed_rows = next(t for t in tables[NOTEBOOK] if t[0] == ["student", "name", "why"])
    assert failed_rows[1][0] == "broken" and HOSTILE in failed_rows[1][2]  # shown as text
    missing_rows = next(t for t in tables[NOTEBOOK] if t[0] == ["student", "name"])
    assert missing_rows[1] == ["gone", "Gone Away"]
    assert "<script" not in text and "onerror=" not in text.replace("onerror=&#x27;", "")
    overview = tables[""][0]
    assert overview[1][:5] == [NOTEBOOK, "8", "0", "1", "1"]
    assert "10 students, 1 notebook." in text  # not the file refused before it was any notebook
    unmatched = next(t for t in tables[""] if t[0] == ["file or student", "notebook", "why"])
    assert unmatched[1:] == [[f"export/{HOSTILE}.pdf", "", "not a notebook of the course"]]
    assert len(re.findall(r"src='data:image/png;base64,", text)) == 1  # the histogram, in the page


@pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed (make setup installs it as root)")
def test_in_a_browser_offline_no_script_runs_and_the_figures_draw(page, tmp_path):
    command = [sys.executable, str(CANARY), "--read", f"--screenshots={tmp_path}", str(page)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout)[str(page)]
    assert seen["pwned"] is None and seen["outside"] == []
    assert seen["images"] == {"shown": 1, "broken": 0}
    assert (tmp_path / "1-report.png").stat().st_size > 10_000  # what the instructor sees
