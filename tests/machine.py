"""What this machine can do for the tests: some need the grading sandbox."""

import pytest

from autograder.sandbox import unavailable_reason

SANDBOX_MISSING = unavailable_reason()
needs_sandbox = pytest.mark.skipif(
    bool(SANDBOX_MISSING), reason=f"no grading sandbox here: {SANDBOX_MISSING} (README, Instructors)"
)
