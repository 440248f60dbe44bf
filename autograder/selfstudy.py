"""Self-study: under each question, hints one at a time, then the reference solution.

`study(name)` shows a widget: a Hint button, then a Show solution button. Where widgets do not
render (a plain frontend, an exported page, a feedback page), its text says so, and
`study(name, text=True)` does the same in print: each call prints the next hint, and the call
after the last hint prints the solution.

The solution is read from solutions/ when it is on disk (a clone of the course); in a
graded release it is not, and the button says so instead of failing.
"""

import ipywidgets as widgets
from IPython.display import display

from .api import get_check
from .cells import grade_id
from .paths import source_notebook
from .reference import assignment_of

SOLUTION_MARKERS = {"### BEGIN SOLUTION", "### END SOLUTION"}
NO_SOLUTION = "The reference solution is not available in this copy of the course (graded release)."

_hints_printed: dict[str, int] = {}  # check name -> hints `study(name, text=True)` has printed


def solution_source(check_name: str) -> str | None:
    """The reference answer cell of a check, or None where solutions/ is not available."""
    check = get_check(check_name)
    try:
        path = source_notebook(assignment_of(check_name))
    except (LookupError, FileNotFoundError):
        return None
    if not path.exists():
        return None
    import nbformat  # here: every notebook imports this module; nbformat takes a second (JSON schemas)

    for cell in nbformat.read(path, as_version=4).cells:
        if grade_id(cell) == check.answer_cell:
            lines = cell.source.splitlines()
            return "\n".join(line for line in lines if line.strip() not in SOLUTION_MARKERS)
    return None


def solution_text(check_name: str) -> str:
    """The reference solution as shown to a student, or why it cannot be shown."""
    source = solution_source(check_name)
    return NO_SOLUTION if source is None else "Reference solution:\n\n" + source


def study(check_name: str, text: bool = False) -> None:
    """Show the self-study control of a check under its question.

    text=True, for frontends that do not render widgets: print the next hint, one per call;
    after the last hint, the reference solution (again at every later call). Where a check
    stands is kept until the kernel restarts.
    """
    if text:
        print(next_study_text(check_name))
    else:
        display(study_widget(check_name))


def text_call(check_name: str) -> str:
    """The call that prints the hints, written as the notebooks write `study`."""
    return f'study("{check_name}", text=True)'


def next_study_text(check_name: str) -> str:
    """What `study(check_name, text=True)` prints at this call; each call moves one step on."""
    hints = list(get_check(check_name).hints)
    count = _hints_printed.get(check_name, 0)
    if count == len(hints):
        return solution_text(check_name)
    _hints_printed[check_name] = count + 1
    last = "the reference solution" if solution_source(check_name) is not None else "a note on the solution"
    then = "the next hint" if count + 1 < len(hints) else last
    call = text_call(check_name)
    return f"Hint {count + 1} of {len(hints)}: {hints[count]}\n(run {call} again for {then})"


class StudyBox(widgets.VBox):
    """The self-study widget of one check. Its plain-text form, which frontends without widgets
    and the graded notebook's feedback page show instead of it, says how to study without it."""

    def __init__(self, check_name: str, children):
        super().__init__(children)
        self.check_name = check_name

    def _repr_mimebundle_(self, **kwargs):
        bundle = super()._repr_mimebundle_(**kwargs) or {}
        call = text_call(self.check_name)
        bundle["text/plain"] = f"Hints and the solution: the widget in the notebook, or {call}"
        return bundle


def study_widget(check_name: str) -> StudyBox:
    """A 'Hint' button revealing one hint per click, then a 'Show solution' button."""
    hints = list(get_check(check_name).hints)
    shown = widgets.Output()
    hint_button = widgets.Button(description=f"Hint (0/{len(hints)})", icon="lightbulb-o")
    solution_button = widgets.Button(description="Show solution", icon="eye", disabled=bool(hints))
    count = 0

    def next_hint(_):
        nonlocal count
        if count < len(hints):
            with shown:
                print(f"Hint {count + 1}: {hints[count]}")
            count += 1
            hint_button.description = f"Hint ({count}/{len(hints)})"
        hint_button.disabled = count == len(hints)
        solution_button.disabled = count < len(hints)

    def reveal(_):
        with shown:
            print(solution_text(check_name))
        solution_button.disabled = True

    hint_button.on_click(next_hint)
    solution_button.on_click(reveal)
    return StudyBox(check_name, [widgets.HBox([hint_button, solution_button]), shown])
