"""Correct answers written differently from the reference: every check must accept them.

One module per notebook, solutions/<assignment>/alternatives.py beside its mistakes.py and cases.py,
each with its ALTERNATIVES by check name. Like them it stays on the instructor's side and is loaded
by path (autograder.reference.instructor_module, once: every test gets the same objects).
"""

from autograder import reference
from autograder.paths import assignments


def _alternatives(assignment: str) -> dict[str, list]:
    module = reference.instructor_module(assignment, "alternatives.py")
    return getattr(module, "ALTERNATIVES", {}) if module else {}


ALTERNATIVES = {name: answers for a in assignments() for name, answers in _alternatives(a).items()}

_rope = reference.instructor_module("04_rope", "alternatives.py")
RoPEReal = _rope.RoPEReal
rotation_matrix_complex = _rope.rotation_matrix_complex
rotation_matrix_exp = _rope.rotation_matrix_exp
RMSNormOneOverSqrt = reference.instructor_module("07_rmsnorm", "alternatives.py").RMSNormOneOverSqrt

__all__ = ["ALTERNATIVES", "RMSNormOneOverSqrt", "RoPEReal", "rotation_matrix_complex", "rotation_matrix_exp"]
