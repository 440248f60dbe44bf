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


def test_the_widget_reads_as_one_line_where_widgets_do_not_render():
    bundle = selfstudy.study_widget("07.rmsnorm")._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in bundle  # JupyterLab still draws the widget
    assert bundle["text/plain"] == (
        'Hints and the solution: the widget in the notebook, or study("07.rmsnorm", text=True)'
    )


@pytest.mark.parametrize("name", ["07.rmsnorm", "00.spirals"])
def test_text_mode_prints_one_hint_per_call_then_the_solution(name, monkeypatch, capsys):
    monkeypatch.setattr(selfstudy, "_hints_printed", {})
    hints = CHECKS[name].hints
    for number, hint in enumerate(hints, start=1):
        selfstudy.study(name, text=True)
        shown = capsys.readouterr().out
        assert shown.startswith(f"Hint {number} of {len(hints)}: {hint}\n"), shown
        assert "Reference solution" not in shown
        then = "the reference solution" if number == len(hints) else "the next hint"
        assert f'run study("{name}", text=True) again for {then}' in shown
    for _ in range(2):  # the solution, and again at every later call
        selfstudy.study(name, text=True)
        shown = capsys.readouterr().out
        assert shown.startswith("Reference solution:\n")
        assert all(target in shown for target in CHECKS[name].target_names)
        assert "### BEGIN SOLUTION" not in shown and "Hint" not in shown


def test_text_mode_without_solutions_says_so(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(selfstudy, "_hints_printed", {"07.rmsnorm": len(CHECKS["07.rmsnorm"].hints)})
    monkeypatch.setattr(selfstudy, "source_notebook", lambda assignment: tmp_path / "absent.ipynb")
    selfstudy.study("07.rmsnorm", text=True)
    assert "not available in this copy of the course" in capsys.readouterr().out


def test_study_without_text_still_shows_the_widget(monkeypatch):
    shown = []
    monkeypatch.setattr(selfstudy, "display", shown.append)
    selfstudy.study("07.rmsnorm")
    [box] = shown
    assert isinstance(box, selfstudy.StudyBox) and box.check_name == "07.rmsnorm"
