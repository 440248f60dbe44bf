"""Checks, grading pipeline and self-study helpers of the transformer-internals course."""

from .api import check, evaluate
from .checks import CHECKS
from .core import CheckFailed, Verdict

__all__ = ["CHECKS", "CheckFailed", "Verdict", "check", "evaluate"]
