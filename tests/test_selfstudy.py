"""The self-study widget: hints one click at a time, then the solution, or a clear message without one."""

import pytest

from autograder import selfstudy
from autograder.checks import CHECKS


def _buttons(box):
    hint, solution = box.children[0].children
    return hint, solution


@pytest.mark.parametrize("name", sorted(CHECKS))
def test_hints_then_solution(name, capsys):
    hints = CHECKS[name].hints
    assert hints, f"{name} has no hints"
    hint, solution = _buttons(selfstudy.study_widget(name))
    assert solution.disabled
    for _ in hints:
        hint.click()
    assert hint.disabled and not solution.disabled
    solution.click()
    shown = capsys.readouterr().out  # outside a kernel the Output widget lets prints through
    assert all(h in shown for h in hints)
    assert all(target in shown for target in CHECKS[name].target_names)
    assert "### BEGIN SOLUTION" not in shown
    assert solution.disabled


def test_without_solutions_the_widget_says_so(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(selfstudy, "source_notebook", lambda assignment: tmp_path / "absent.ipynb")
    hint, solution = _buttons(selfstudy.study_widget("07.rmsnorm"))
    for _ in CHECKS["07.rmsnorm"].hints:
        hint.click()
    solution.click()
    assert "not available in this copy of the course" in capsys.readouterr().out
