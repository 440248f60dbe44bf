"""Self-study: under each question, hints one at a time, then the reference solution.

The solution is read from solutions/ when it is on disk (a clone of the course); in a
graded release it is not, and the button says so instead of failing.
"""

import ipywidgets as widgets
import nbformat
from IPython.display import display

from .api import get_check
from .cells import grade_id
from .paths import source_notebook
from .reference import assignment_of

SOLUTION_MARKERS = {"### BEGIN SOLUTION", "### END SOLUTION"}


def solution_source(check_name: str) -> str | None:
    """The reference answer cell of a check, or None where solutions/ is not available."""
    check = get_check(check_name)
    try:
        path = source_notebook(assignment_of(check_name))
    except (LookupError, FileNotFoundError):
        return None
    if not path.exists():
        return None
    for cell in nbformat.read(path, as_version=4).cells:
        if grade_id(cell) == check.answer_cell:
            lines = cell.source.splitlines()
            return "\n".join(line for line in lines if line.strip() not in SOLUTION_MARKERS)
    return None


def study(check_name: str) -> None:
    """Show the self-study control of a check under its question."""
    display(study_widget(check_name))


def study_widget(check_name: str) -> widgets.VBox:
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
        source = solution_source(check_name)
        with shown:
            if source is None:
                print("The reference solution is not available in this copy of the course (graded release).")
            else:
                print("Reference solution:\n\n" + source)
        solution_button.disabled = True

    hint_button.on_click(next_hint)
    solution_button.on_click(reveal)
    return widgets.VBox([widgets.HBox([hint_button, solution_button]), shown])
