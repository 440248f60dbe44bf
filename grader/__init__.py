"""The instructor's side of the course: building it, releasing it, and grading a class.

A submission passes through the stages in this order (docs/design.md, "Grading"):
intake/ (what the LMS export holds, and whose it is), dispatch/ (which worker grades it),
notebook/ (one notebook, in a sandboxed kernel, judged outside it) and record/ (the gradebook,
grades.csv, feedback pages and the class report). grading.py runs them; cli.py is `course`.
Nothing here ships to students or is importable from a sandboxed kernel: that side is autograder/.
"""

import sys
from pathlib import Path

# jsonschema imports rfc3987_syntax where it is installed (jupyter-events asks for it), and that
# module builds a parser on import: 1.7 s of the start of every process that reads a notebook, for
# a check of IRI strings that nbformat and nbgrader never make. Marked absent, jsonschema skips it.
sys.modules.setdefault("rfc3987_syntax", None)

TEMPLATES = Path(__file__).resolve().with_name("templates")
