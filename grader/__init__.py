"""The instructor's side of the course: building it, releasing it, and grading a class.

A submission passes through the stages in this order (docs/design.md, "Grading"):
intake/ (what the LMS export holds, and whose it is), dispatch/ (which worker grades it),
notebook/ (one notebook, in a sandboxed kernel, judged outside it) and record/ (the gradebook,
grades.csv, feedback pages and the class report). grading.py runs them; cli.py is `course`.
Nothing here ships to students or is importable from a sandboxed kernel: that side is autograder/.
"""

from pathlib import Path

TEMPLATES = Path(__file__).resolve().with_name("templates")
