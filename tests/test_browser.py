"""JupyterLab serves the notebooks and their widgets work, in a real headless Chromium.

The student's release and the instructor's pages have their own browser tests: test_release.py
(a release notebook in its fresh environment), test_feedback_pages.py (feedback pages and
formgrader), test_class_report.py (the class report). Each saves a screenshot in its tmp_path."""

import shutil

import nbformat
import pytest

from .helpers.jupyter_server import browse, running_lab
from .helpers.submissions import perfect

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytest.importorskip("playwright.sync_api")
pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="Chromium is not installed (make setup installs it as root)"
)


@pytest.mark.parametrize(
    ("assignment", "scenario"),
    [("07_rmsnorm", "hints"), ("00_warmup", "playground")],
    ids=["hint widget reveals hints then solution", "spirals playground retrains and redraws"],
)
def test_notebook_runs_and_its_widget_works(assignment, scenario, tmp_path):
    nbformat.write(perfect(assignment), tmp_path / f"{assignment}.ipynb")
    with running_lab(tmp_path) as (base, token):
        url = f"{base}/lab/tree/{assignment}.ipynb?token={token}"
        status, output = browse(url, tmp_path / "lab.png", scenario)
    assert status == 0, output[-3000:]
