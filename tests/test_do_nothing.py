"""No free points: a notebook whose answers do nothing earns nothing, visible or hidden.

The answers are the source notebook's, with every answer region replaced by code that does no
work (tests/helpers/do_nothing.py says how, kind by kind); the given code around them stays as it is. A
point earned here is a point for given code or for a do-nothing answer (the unfilled stub's own
test is test_checks.py::test_release_stub_fails).
"""

import pytest

from autograder.paths import assignments

from .helpers.do_nothing import KINDS, do_nothing_notebook, do_nothing_source
from .helpers.submissions import checks_of, verdicts_when_graded

BATCH_SEED = 11


@pytest.mark.parametrize("kind", [k for k in KINDS if k != "stub"])
@pytest.mark.parametrize("assignment", assignments())
def test_do_nothing_answers_earn_nothing(assignment, kind):
    verdicts = verdicts_when_graded(do_nothing_notebook(assignment, kind), BATCH_SEED, checks_of(assignment))
    earned = {
        f"{name} ({'hidden' if hidden else 'visible'})": verdict.message
        for (name, hidden), verdict in verdicts.items()
        if verdict.points > 0
    }
    assert not earned, earned


SOURCE = """class Layer:
    def __init__(self, size):
        ### BEGIN SOLUTION
        self.weight = [1.0] * size
        ### END SOLUTION

    def forward(self, x, y):
        ### BEGIN SOLUTION
        h = x * 2
        squares = [v * v for v in range(3)]
        ### END SOLUTION
        return h + y


class Cache:
    def write(self, k):
        ### BEGIN SOLUTION
        self.k[0] = k
        return k.sum()
        ### END SOLUTION


def answer(x):
    ### BEGIN SOLUTION
    def inner(z):
        return z
    return inner(
        x
    )
    ### END SOLUTION
"""


def test_do_nothing_kinds_replace_only_the_answer_regions():
    assert do_nothing_source(SOURCE, "stub").count("raise NotImplementedError()") == 4
    passed = do_nothing_source(SOURCE, "pass")
    assert "self.weight" not in passed and "h = x * 2" not in passed and "return h + y" in passed
    identity = do_nothing_source(SOURCE, "identity")
    assert "    return x\n" in identity and "h = x * 2" not in identity  # forward's region returns nothing
    zeros = do_nothing_source(SOURCE, "zeros")
    # __init__ registers nothing; forward's local tensor is replaced, not the comprehension's variable;
    # only answer's own return is wrapped, not the inner function's.
    assert "self.weight" not in zeros
    assert "h = __do_nothing__(h)" in zeros and "v = __do_nothing__" not in zeros
    assert "return __do_nothing__(inner(\n        x\n    ))" in zeros and "        return z\n" in zeros
    assert "self.k[0] = k" not in zeros and "return __do_nothing__(k)" in zeros  # its write is the work
    compile(zeros, "zeros", "exec")
