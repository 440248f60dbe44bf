"""The student-side and listing subcommands of `course`."""

import nbformat

from autograder.checks import CHECKS
from autograder.cli import main

from .submissions import perfect, release


def test_list_names_every_check(capsys):
    assert main(["list"]) == 0
    listed = capsys.readouterr().out
    assert all(name in listed for name in CHECKS)


def test_check_reports_visible_checks(tmp_path, capsys):
    done, todo = tmp_path / "done.ipynb", tmp_path / "todo.ipynb"
    nbformat.write(perfect("07_rmsnorm"), done)
    nbformat.write(release("07_rmsnorm"), todo)
    assert main(["check", str(done)]) == 0
    assert "2/2 visible checks pass" in capsys.readouterr().out
    assert main(["check", str(todo)]) == 1
    report = capsys.readouterr().out
    assert "0/2 visible checks pass" in report and "NotImplementedError" in report
