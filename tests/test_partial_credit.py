"""Partial credit per concern, and how verdicts read: on a small check of its own, then on
every check of the course (each names its outputs for the student, each case's concern exists)."""

import linecache
from dataclasses import replace

import pytest
import torch
from nbformat.v4 import new_code_cell
from nbgrader.utils import determine_grade

from autograder.api import VISIBLE_SEED, live_expectations, make_cases
from autograder.checks import CHECKS
from autograder.core import (
    Case,
    Check,
    Concern,
    Expectation,
    Mistake,
    OperationCount,
    Property,
    compare_tensors,
    expectations,
    judge,
    run_stage,
)
from grader.notebook.preprocessors import _outputs

CORE, BFLOAT16, ADVICE = "float32 x", "bfloat16 x", "T = 1"


def toy_cases(g: torch.Generator, hidden: bool) -> list[Case]:
    return [
        Case("x of shape (3, 4)", {"x": torch.randn(3, 4, generator=g)}),
        Case("x of shape (2, 5)", {"x": torch.randn(2, 5, generator=g)}, concern=CORE),
        Case("bfloat16 x", {"x": torch.randn(2, 3, generator=g).bfloat16()}, concern=BFLOAT16),
        Case("one row", {"x": torch.randn(1, 6, generator=g)}, concern=ADVICE),
    ]


def toy_run(double, case: Case) -> dict:
    y = double(case.inputs["x"])
    return {"y": y, "total": y.float().sum()}


TOY = Check(
    name="toy.double",
    target="double",
    run=toy_run,
    concerns=[Concern(CORE, weight=3), Concern(BFLOAT16, weight=1), Concern(ADVICE, weight=0)],
    outputs={"y": "the doubled tensor", "total": "the sum of the doubled tensor"},
)


def double(x):
    return 2 * x


def double_float32(x):  # right values, loses the dtype of a bfloat16 input
    return 2 * x.float()


def double_no_rows(x):  # right but for a single row, which only the advice concern has
    if x.shape[0] == 1:
        raise ValueError("one row is not enough")
    return 2 * x


def verdict_of(impl, points: float = 2.0, mistakes=()):
    cases = toy_cases(torch.Generator().manual_seed(0), False)
    expected = expectations(TOY, double, mistakes, cases)
    return judge(TOY, cases, run_stage(TOY, impl, cases), expected, mistakes).worth(points)


def test_a_right_answer_earns_every_concern():
    verdict = verdict_of(double)
    assert verdict.passed and verdict.points == verdict.max_points == 2.0
    assert [(p.concern, p.max_points) for p in verdict.parts] == [(CORE, 1.5), (BFLOAT16, 0.5), (ADVICE, 0.0)]


def test_wrong_on_one_edge_loses_only_that_edge_and_says_which():
    verdict = verdict_of(double_float32)
    assert not verdict.passed and verdict.points == 1.5
    lines = str(verdict).splitlines()
    assert lines[0] == "[toy.double] FAILED (1.5/2):"
    assert lines[1].startswith(f"- {CORE} (1.5/1.5): passed: 2 cases match the reference")
    assert lines[2].startswith(
        f"- {BFLOAT16} (0/0.5): FAILED: case bfloat16 x: the doubled tensor has dtype torch.float32, "
        "expected torch.bfloat16"
    )


def test_an_advice_concern_is_reported_but_costs_nothing():
    verdict = verdict_of(double_no_rows)
    assert verdict.passed and verdict.points == 2.0
    assert f"- {ADVICE} (advice, no points): FAILED: case one row: your code raised ValueError" in str(
        verdict
    )


def test_the_test_cell_records_partial_credit_as_nbgrader_reads_it():
    """Full marks as text, nothing earned as an error, in between the points as the cell's result."""
    for impl, earned in ((double, 2.0), (double_float32, 1.5), (lambda x: x, 0.0)):
        verdict = verdict_of(impl)
        cell = new_code_cell(outputs=_outputs([verdict]))
        cell.metadata.nbgrader = {"grade": True, "solution": False, "points": 2.0, "grade_id": "t"}
        assert determine_grade(cell) == (earned, 2.0), impl


def test_two_checks_in_one_cell_add_their_points():
    cell = new_code_cell(outputs=_outputs([verdict_of(double), verdict_of(lambda x: x)]))
    cell.metadata.nbgrader = {"grade": True, "solution": False, "points": 4.0, "grade_id": "t"}
    assert determine_grade(cell) == (2.0, 4.0)


# ----------------------------------------------------------------------- how messages read


def _in_a_cell(source: str):
    """A function defined the way a notebook cell defines it: a file name starting with '<',
    whose lines IPython keeps in linecache."""
    filename = f"<ipython-input-{abs(hash(source))}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    names = {}
    exec(compile(source, filename, "exec"), names)
    return names["double"]


@pytest.mark.parametrize("stub", ["raise NotImplementedError()", "raise NotImplemented"])
def test_an_unfilled_stub_is_called_one(stub):
    verdict = verdict_of(_in_a_cell(f"def double(x):\n    {stub}\n"))
    assert verdict.points == 0
    assert "this is still the unfilled stub" in verdict.message
    assert "derive from BaseException" not in verdict.message


def test_an_error_quotes_the_students_line():
    verdict = verdict_of(_in_a_cell("def double(x):\n    return x @ x\n"))
    assert "(in your code: `return x @ x`)" in verdict.message


def test_messages_name_outputs_and_hide_tolerances():
    message = verdict_of(lambda x: 2 * x + 1).message
    assert "the doubled tensor at index (0, 0) is" in message
    assert "values off by more than rounding allows; the largest by 1" in message
    assert "rtol" not in message and "atol" not in message and "'y'" not in message


def test_nan_where_a_value_is_expected_is_named_not_measured():
    cases = [Case("x", {"x": torch.tensor([[1.0, float("nan")]])})]
    outputs = {"y": torch.tensor([[2.0, 3.0]]), "total": torch.tensor(5.0)}
    expected = expectations(TOY, lambda x: x, (), cases)
    expected[0] = Expectation(outputs, {})
    verdict = judge(TOY, cases, run_stage(TOY, double, cases), expected, ())
    assert "contains nan at index (0, 1), expected finite values" in verdict.message
    assert "inf" not in verdict.message.replace("finite", "")


def test_a_0_dim_output_reads_as_a_sentence():
    message = compare_tensors(TOY, "total", torch.tensor(0.0), torch.tensor(1.5))
    assert message == "the sum of the doubled tensor is 0, expected 1.5"
    flags = compare_tensors(TOY, "y", torch.tensor([True, False]), torch.tensor([True, True]))
    assert flags == "the doubled tensor at index 1 is False, expected True (1 of 2 values differ)"


def test_two_mistakes_at_once_are_each_named_for_what_they_explain():
    shifted = Mistake("shifted by one", "do not add 1.", lambda x: 2 * x + 1)
    wrong_total = Mistake("total of the input", "sum the doubled tensor.", None)

    class Both:  # outputs like `shifted` on y and like `wrong_total` on total
        def __call__(self, x):
            return 2 * x + 1

    def run_both(impl, case):
        y = impl(case.inputs["x"])
        return {"y": y, "total": case.inputs["x"].float().sum()}

    check = Check(**{**TOY.__dict__, "run": run_both})
    cases = toy_cases(torch.Generator().manual_seed(0), False)[:2]
    mistakes = [shifted, wrong_total]
    reference = run_stage(TOY, double, cases)
    wrong = {
        shifted.name: run_stage(TOY, shifted.impl, cases),
        wrong_total.name: [
            {"y": r["y"], "total": c.inputs["x"].sum()} for r, c in zip(reference, cases, strict=True)
        ],
    }
    expected = [Expectation(reference[i], {n: w[i] for n, w in wrong.items()}) for i in range(len(cases))]
    message = judge(check, cases, run_stage(check, Both(), cases), expected, mistakes).message
    assert "more than one thing may be wrong" in message
    assert "shifted by one (the doubled tensor as with that mistake)" in message
    assert "total of the input (the sum of the doubled tensor as with that mistake)" in message


def test_a_mistake_in_some_outputs_with_the_others_right_is_named_alone():
    """05.gelu: a tanh GELU with a right derivative is that one mistake, not 'more than one thing'."""
    shifted = Mistake("shifted by one", "do not add 1.", lambda x: 2 * x + 1)
    cases = toy_cases(torch.Generator().manual_seed(0), False)[:2]
    reference = run_stage(TOY, double, cases)
    wrong = run_stage(TOY, shifted.impl, cases)  # y and total off
    expected = [Expectation(reference[i], {shifted.name: wrong[i]}) for i in range(len(cases))]
    student = [{"y": w["y"], "total": r["total"]} for w, r in zip(wrong, reference, strict=True)]
    message = judge(TOY, cases, student, expected, [shifted]).message
    assert "Looks like: shifted by one, in the doubled tensor (the other outputs are right)" in message
    assert "more than one thing" not in message


def test_the_nearest_mistake_is_named_only_when_much_nearer():
    off = Mistake("added one", "do not add 1.", lambda x: 2 * x + 1)
    nearly = verdict_of(lambda x: 2 * x + 1.01, mistakes=[off]).message
    assert "closest to the known mistake 'added one'" in nearly
    far = verdict_of(lambda x: 2 * x + 0.6, mistakes=[off]).message
    assert "closest" not in far


# ------------------------------------------------------------------ every check of the course


# A check that measures how the code works: "calls" is counted, not compared with the reference,
# and judged by a property of the measured concern only.
COUNTED = "few torch calls"


def counted_run(double, case: Case) -> dict:
    with OperationCount() as count:
        y = double(case.inputs["x"])
    return {"y": y, "calls": torch.tensor(count.calls)}


def _few_calls(case: Case, out: dict) -> str | None:
    return None if int(out["calls"]) <= 2 else f"{int(out['calls'])} torch calls"


def counting_cases(g: torch.Generator) -> list[Case]:
    return [
        Case("x", {"x": torch.randn(3, generator=g)}),
        Case("x counted", {"x": torch.randn(3, generator=g)}, concern=COUNTED),
    ]


COUNTING = Check(
    name="toy.counted",
    target="double",
    run=counted_run,
    concerns=[Concern(CORE), Concern(COUNTED)],
    outputs={"y": "the doubled tensor", "calls": "the number of torch calls"},
    measured=("calls",),
    properties=[Property("at most two torch calls", _few_calls, concern=COUNTED)],
)


def double_in_steps(x):  # right values, in four torch calls
    return x.clone().mul(1).add(x).mul(1)


def counted_verdict(impl):
    cases = counting_cases(torch.Generator().manual_seed(0))
    expected = expectations(COUNTING, double, [], cases)
    return judge(COUNTING, cases, run_stage(COUNTING, impl, cases), expected, []).worth(2.0)


def test_a_measured_output_is_judged_by_its_property_not_compared():
    right, slow = counted_verdict(double), counted_verdict(double_in_steps)
    assert right.points == 2.0, right.message
    # The core's case counts calls too, with other numbers than the reference's: not compared, and
    # the property belongs to the counted concern alone.
    assert [p.passed for p in slow.parts] == [True, False], slow.message
    assert "property 'at most two torch calls' fails: 4 torch calls" in slow.message, slow.message


def test_a_property_of_an_unknown_concern_is_refused():
    cases = counting_cases(torch.Generator().manual_seed(0))
    typo = replace(COUNTING, properties=[Property("p", _few_calls, concern="few torch call")])
    with pytest.raises(ValueError, match="unknown concern"):
        judge(typo, cases, run_stage(typo, double, cases), expectations(typo, double, [], cases), [])


@pytest.mark.parametrize("name", sorted(CHECKS))
def test_every_output_has_a_description_and_every_case_a_known_concern(name):
    check = CHECKS[name]
    for hidden in (False, True):
        cases = make_cases(name, hidden=hidden, seed=VISIBLE_SEED + 1)
        assert {check.concern_of(c) for c in cases} <= {"", *check.concern_names}, name
        if check.concerns:  # the core is graded in every test cell
            assert any(check.concern_of(c) == check.concerns[0].name for c in cases), name
    if check.criterion is None:
        expected, _ = live_expectations(name, cases, with_mistakes=False)
        keys = set().union(*(e.reference for e in expected))
        assert keys <= set(check.outputs), f"{name}: no description for {sorted(keys - set(check.outputs))}"
    else:
        assert check.outputs, f"{name}: its outputs need descriptions"
