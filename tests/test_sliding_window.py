"""Notebook 03 (sliding-window attention): the reference against the homework's loop and dense
attention, the RoPE cell against notebook 04, and how the checks grade answers that are right in
one part and wrong in another (a loop, a T x T mask, a table cast away, odd windows only).

Key: B batch, T sequence length, D hidden size, H heads, Dh = D // H, W window size.
"""

import json
import re
from functools import cache

import nbformat
import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from autograder import CHECKS, evaluate, reference
from autograder.api import live_expectations, load_snapshot, make_cases
from autograder.cells import grade_id
from autograder.checks import rope
from autograder.checks.sliding_window import (
    EVEN,
    LINEAR_MEMORY,
    MEASURED_OUTPUTS,
    NO_TABLE,
    NO_TABLE_FOUND,
    NOT_A_NUMBER,
    ODD,
    ONE_SDPA_CALL,
    OPS_LONG,
    OPS_SHORT,
    REFERENCE_OPS,
    TABLE_KEPT,
    TABLE_OPTIONAL,
    TABLE_REQUIRED,
    VECTORISED,
    ops_cap,
    table_argument,
)
from autograder.core import TOLERANCES, Case, _fresh_copy, judge
from autograder.paths import REPO, source_notebook

from .helpers.alternatives import ALTERNATIVES
from .helpers.submissions import mistake, parts, verdict

ASSIGNMENT = "03_sliding_window"
RTOL, ATOL = TOLERANCES[torch.float32]
HIDDEN_SEED = 3

# Correct alternatives of this notebook and of 04 (solutions/<a>/alternatives.py).
_alternatives = reference.instructor_module(ASSIGNMENT, "alternatives.py")
ODD_ONLY = _alternatives.ODD_ONLY
CatZerosLayer = _alternatives.CatZerosLayer
HomeworkLayer = _alternatives.HomeworkLayer
HomeworkOwnTableAsAttribute = _alternatives.HomeworkOwnTableAsAttribute
HomeworkRequiresTable = _alternatives.HomeworkRequiresTable
HomeworkStubBuildsRoPE = _alternatives.HomeworkStubBuildsRoPE
HomeworkTableKeywordOnly = _alternatives.HomeworkTableKeywordOnly
_rope = reference.instructor_module("04_rope", "alternatives.py")
RoPEHomework, RoPEOwnAttributeName = _rope.RoPEHomework, _rope.RoPEOwnAttributeName
RoPEReal, rotation_matrix_complex = _rope.RoPEReal, _rope.rotation_matrix_complex


@cache
def cells(assignment: str) -> dict[str, str]:
    """grade_id -> source of every tracked cell of a source notebook."""
    notebook = nbformat.read(source_notebook(assignment), as_version=4)
    return {grade_id(c): c.source for c in notebook.cells if grade_id(c)}


@cache
def given_loop() -> type:
    """SlidingWindowMultiheadAttention, the homework's loop, run from the notebook's own cell."""
    names = {"__name__": "given_loop"}
    for cell in ("imports", "cell_loop"):
        exec(compile(cells(ASSIGNMENT)[cell], f"{ASSIGNMENT}:{cell}", "exec"), names)
    return names["SlidingWindowMultiheadAttention"]


def ref(name: str):
    return reference.namespace(ASSIGNMENT)[name]


# ------------------------------------------------------------------ the reference itself


# B, T, D, H, W: odd and even windows, one sequence and several, T below, equal to and above W.
LOOP_SHAPES = [
    (1, 5, 4, 2, 1),
    (1, 3, 8, 2, 5),
    (2, 5, 8, 2, 5),
    (3, 11, 12, 3, 3),
    (1, 1, 4, 1, 3),
    (2, 4, 8, 2, 6),
    (1, 6, 8, 4, 6),
    (2, 13, 16, 4, 4),
    (1, 7, 6, 3, 2),
]


@pytest.mark.parametrize(("b", "t", "d", "h", "w"), LOOP_SHAPES)
def test_reference_layer_equals_the_given_loop(b, t, d, h, w):
    torch.manual_seed(b * 1000 + t * 10 + w)
    loop = given_loop()(d, h, w)
    fast = ref("EfficientSlidingWindowMultiheadAttention")(d, h, w)
    fast.load_state_dict(loop.state_dict())  # the same weights in both
    x = torch.randn(b, t, d)
    with torch.no_grad():
        torch.testing.assert_close(fast(x), loop(x), rtol=RTOL, atol=ATOL)


# B, H, T, Dh, W: T = 1, T below W, T not a multiple of the block size, W = 1, even W, W above 8.
ATTENTION_SHAPES = [
    (1, 1, 1, 4, 3),
    (2, 3, 4, 8, 7),
    (1, 2, 37, 8, 5),
    (2, 1, 9, 4, 1),
    (1, 2, 20, 4, 6),
    (1, 1, 50, 8, 17),
]


@pytest.mark.parametrize("causal", [False, True], ids=["centred", "causal"])
@pytest.mark.parametrize(("b", "h", "t", "dh", "w"), ATTENTION_SHAPES)
def test_reference_attention_equals_band_masked_sdpa(b, h, t, dh, w, causal):
    q, k, v = torch.randn(3, b, h, t, dh, generator=torch.Generator().manual_seed(t * 100 + w))
    dense = F.scaled_dot_product_attention(q, k, v, attn_mask=~ref("sliding_window_mask")(t, w, causal))
    for function in ("window_attention", "blocked_window_attention"):
        got = ref(function)(q, k, v, w, causal=causal)
        torch.testing.assert_close(got, dense, rtol=RTOL, atol=ATOL, msg=function)


def test_rope_cell_is_notebook_04s():
    """One source of truth for RoPE: 03's `rope_from_04` cell is 04's `rotation_matrix` and
    `rope_forward` cells, joined by two blank lines. After changing either in 04, paste both into
    03's cell again (source and solution markers as they are), then `course build 03_sliding_window`."""
    rope_04 = cells("04_rope")
    expected = rope_04["rotation_matrix"] + "\n\n\n" + rope_04["rope_forward"]
    assert cells(ASSIGNMENT)["rope_from_04"] == expected


# ------------------------------------------------------------ a loop, a T x T mask


def window_attention_loop(queries, keys, values, window_size, causal=False):
    """Right values, one position at a time."""
    T, W = queries.shape[-2], window_size
    before = W - 1 if causal else W // 2
    out = torch.empty_like(queries)
    for t in range(T):
        lo, hi = max(0, t - before), min(T, t - before + W)
        out[:, :, t : t + 1] = F.scaled_dot_product_attention(
            queries[:, :, t : t + 1], keys[:, :, lo:hi], values[:, :, lo:hi]
        )
    return out


def blocked_by_dense_mask(queries, keys, values, window_size, causal=False):
    """Right values through a (T, T) band mask: O(T^2) memory."""
    T = queries.shape[-2]
    offset = torch.arange(T)[None, :] - torch.arange(T)[:, None]
    before = window_size - 1 if causal else window_size // 2
    visible = (offset >= -before) & (offset <= window_size - 1 - before)
    return F.scaled_dot_product_attention(queries, keys, values, attn_mask=visible)


def mask_row_by_row(seq_length, window_size, causal=False):
    """Right values, one query's row at a time."""
    before = window_size - 1 if causal else window_size // 2
    keys = torch.arange(seq_length)
    rows = [(keys < i - before) | (keys > i - before + window_size - 1) for i in range(seq_length)]
    return torch.stack(rows)


def all_but(verdict, failing: str) -> None:
    """Every part of the verdict passes but `failing`."""
    assert parts(verdict) == {concern: concern != failing for concern in parts(verdict)}, verdict.message


@pytest.mark.parametrize(
    ("name", "answer"),
    [
        ("03.sliding_window", "the given loop"),
        ("03.window_mask", mask_row_by_row),
        ("03.masked_window", window_attention_loop),
    ],
    ids=["layer", "window_mask", "masked_window"],
)
def test_a_loop_over_positions_fails_only_vectorisation(name, answer):
    verdict = evaluate(name, given_loop() if answer == "the given loop" else answer)
    all_but(verdict, VECTORISED)
    assert "a Python loop walks along the sequence" in verdict.message, verdict.message


def test_blocked_attention_through_a_dense_mask_fails_only_memory():
    verdict = evaluate("03.blocked_attention", blocked_by_dense_mask)
    all_but(verdict, LINEAR_MEMORY)
    assert "Something of size T x T" in verdict.message, verdict.message


def test_unfold_and_einsum_handed_in_as_blocked_fails_only_the_one_sdpa_call():
    verdict = evaluate("03.blocked_attention", ref("window_attention"))
    all_but(verdict, ONE_SDPA_CALL)
    assert "calls F.scaled_dot_product_attention 0 times" in verdict.message, verdict.message


@pytest.mark.parametrize("name", ["03.masked_window", "03.blocked_attention"])
def test_a_measured_concern_needs_the_right_answer_too(name):
    """Code that runs fast and returns the values unchanged earns nothing, measured parts included."""
    verdict = evaluate(name, lambda queries, keys, values, window_size, causal=False: values.clone())
    assert verdict.points == 0, verdict.message


# ------------------------------------------------- measured runs: ways past them, closed

MEASURED = {
    "03.sliding_window": [VECTORISED],
    "03.window_mask": [VECTORISED],
    "03.masked_window": [VECTORISED, LINEAR_MEMORY],
    "03.blocked_attention": [VECTORISED, LINEAR_MEMORY, ONE_SDPA_CALL],
}


def only_measured_fail(verdict, name: str) -> None:
    """Every part passes but the measured ones, which all fail."""
    want = {concern: concern not in MEASURED[name] for concern in parts(verdict)}
    assert parts(verdict) == want, verdict.message


class RightOnlyUpTo45(CatZerosLayer):
    """Right at the lengths of the answer cases and the short measured run, zeros above."""

    def forward(self, x):
        return torch.zeros_like(x) if x.shape[1] > 45 else super().forward(x)


def mask_right_only_up_to_45(seq_length, window_size, causal=False):
    if seq_length > 45:
        return torch.zeros(seq_length, seq_length, dtype=torch.bool)
    return ref("sliding_window_mask")(seq_length, window_size, causal)


def right_only_up_to_100(function: str):
    def attention(queries, keys, values, window_size, causal=False):
        if queries.shape[-2] > 100:
            return values.clone()
        return ref(function)(queries, keys, values, window_size, causal)

    return attention


@pytest.mark.parametrize(
    ("name", "answer"),
    [
        ("03.sliding_window", RightOnlyUpTo45),
        ("03.window_mask", mask_right_only_up_to_45),
        ("03.masked_window", right_only_up_to_100("window_attention")),
        ("03.blocked_attention", right_only_up_to_100("blocked_window_attention")),
    ],
    ids=["layer", "window_mask", "masked_window", "blocked_attention"],
)
def test_an_answer_wrong_at_the_long_length_earns_no_measured_concern(name, answer):
    """A cheap wrong answer at the long length, where only the counts used to be looked at."""
    verdict = evaluate(name, answer)
    only_measured_fail(verdict, name)
    assert "at the longer length" in verdict.message, verdict.message


def mask_as_numpy(seq_length, window_size, causal=False):
    return ref("sliding_window_mask")(seq_length, window_size, causal).numpy()


@pytest.mark.parametrize("seed", [None, HIDDEN_SEED], ids=["visible", "hidden"])
def test_a_mask_returned_as_an_array_is_judged_at_both_lengths(seed):
    verdict = evaluate("03.window_mask", mask_as_numpy, hidden=seed is not None, seed=seed)
    assert verdict.passed and verdict.points == verdict.max_points, verdict.message


@pytest.mark.parametrize("name", MEASURED)
def test_hidden_measured_runs_draw_their_lengths_and_shapes(name):
    """Code cannot special-case lengths or shapes it knows: each seed draws its own."""
    runs = [
        case
        for seed in range(8)
        for case in make_cases(name, hidden=True, seed=seed)
        if "lengths" in case.inputs
    ]
    assert len({case.inputs["lengths"] for case in runs}) >= 6, [case.name for case in runs]
    shapes = {case.name.split(" run at")[0].split(" built for")[0] for case in runs}  # "B=1 H=2 Dh=8 W=5"
    assert len(shapes) >= 4, shapes


def blocked_by_numpy_mask(queries, keys, values, window_size, causal=False):
    """The (T, T) band built in NumPy, where no torch function creates it."""
    T = queries.shape[-2]
    offset = np.arange(T)[None, :] - np.arange(T)[:, None]
    before = window_size - 1 if causal else window_size // 2
    visible = (offset >= -before) & (offset <= window_size - 1 - before)
    return F.scaled_dot_product_attention(queries, keys, values, attn_mask=torch.from_numpy(visible))


@pytest.mark.parametrize("seed", [None, HIDDEN_SEED], ids=["visible", "hidden"])
def test_a_dense_mask_made_outside_torch_functions_fails_memory(seed):
    verdict = evaluate("03.blocked_attention", blocked_by_numpy_mask, hidden=seed is not None, seed=seed)
    all_but(verdict, LINEAR_MEMORY)
    assert "Something of size T x T" in verdict.message, verdict.message


def loop_padded_to_a_constant_count(queries, keys, values, window_size, causal=False):
    """The loop (5 operations per position, and a few more), then operations that do nothing: the
    same count at every T up to 999."""
    out = window_attention_loop(queries, keys, values, window_size, causal)
    for _ in range(5000 - 1 - 5 * queries.shape[-2]):
        torch.zeros(())
    return out


@pytest.mark.parametrize("seed", [None, HIDDEN_SEED], ids=["visible", "hidden"])
def test_a_loop_padded_to_the_same_count_at_every_length_fails(seed):
    verdict = evaluate(
        "03.masked_window", loop_padded_to_a_constant_count, hidden=seed is not None, seed=seed
    )
    all_but(verdict, VECTORISED)
    cap = ops_cap(REFERENCE_OPS["03.masked_window"])
    counted = (
        rf"issues 50\d\d torch operations at T=\d+ and 50\d\d at T=\d+, more than {cap}: a vectorised answer"
    )
    assert re.search(counted, verdict.message), verdict.message


def test_a_blocked_version_that_pads_only_when_needed_is_not_called_a_loop():
    """One operation more at the length that is not a multiple of the block (its padding) is no loop."""
    blocked = reference.namespace(ASSIGNMENT)["blocked_window_attention"]

    def pads_when_needed(queries, keys, values, window_size, causal=False):
        if queries.shape[-2] % 32:
            queries = queries + 0  # stands for the pad a multiple of the block does not need
        return blocked(queries, keys, values, window_size, causal)

    def one_length_a_multiple(seed):
        (case, *_) = [
            c for c in make_cases("03.blocked_attention", hidden=True, seed=seed) if "lengths" in c.inputs
        ]
        short, long = case.inputs["lengths"]
        return (short % 32 == 0) != (long % 32 == 0)

    seed = next(seed for seed in range(1, 400) if one_length_a_multiple(seed))
    verdict = evaluate("03.blocked_attention", pads_when_needed, hidden=True, seed=seed)
    assert verdict.passed, verdict.message


@pytest.mark.parametrize("name", REFERENCE_OPS)
@pytest.mark.parametrize("seed", [None, HIDDEN_SEED], ids=["visible", "hidden"])
def test_the_reference_issues_the_operations_its_cap_is_built_on(name, seed):
    """The cap on operations is a multiple of the reference's count, kept in the check: measured
    again here, at both lengths of every measured run."""
    cases = [
        case for case in make_cases(name, hidden=seed is not None, seed=seed or 0) if "lengths" in case.inputs
    ]
    expected, _ = live_expectations(name, cases, with_mistakes=False)
    counts = {(int(e.reference[OPS_SHORT]), int(e.reference[OPS_LONG])) for e in expected}
    assert counts == {(REFERENCE_OPS[name], REFERENCE_OPS[name])}


def replaying_dense_attention():
    """Attention through a (T, T) mask, but inputs seen before get their result replayed: the run
    counted for memory replays the one counted for operations when both have the same inputs."""
    seen = {}

    def attention(queries, keys, values, window_size, causal=False):
        key = (tuple(queries.shape), queries.sum().item(), causal)
        if key not in seen:
            seen[key] = blocked_by_dense_mask(queries, keys, values, window_size, causal)
        return seen[key].clone()

    return attention


@pytest.mark.parametrize("seed", [None, HIDDEN_SEED], ids=["visible", "hidden"])
def test_a_result_replayed_from_another_measured_run_fails_memory(seed):
    verdict = evaluate("03.masked_window", replaying_dense_attention(), hidden=seed is not None, seed=seed)
    all_but(verdict, LINEAR_MEMORY)


class Deferred(torch.Tensor):
    """A tensor whose values are computed when the run stage copies it out (.detach()), after the
    count is over."""

    @staticmethod
    def __new__(cls, compute, like):
        deferred = torch.Tensor._make_subclass(cls, torch.empty_like(like))
        deferred.compute = compute
        return deferred

    def detach(self):
        return self.compute()


def deferred_loop(queries, keys, values, window_size, causal=False):
    return Deferred(lambda: window_attention_loop(queries, keys, values, window_size, causal), queries)


def test_a_tensor_subclass_that_defers_its_work_is_refused_by_the_measured_runs():
    """Refused by every run, as the grader's exchange refuses it; the measured ones say why."""
    verdict = evaluate("03.masked_window", deferred_loop)
    assert verdict.points == 0, verdict.message
    assert "your code returned a Deferred as the attention output, not a plain CPU tensor" in verdict.message
    assert "the output is a Deferred, not a torch.Tensor: return a plain tensor" in verdict.message


def vectorised_only_without_autograd(queries, keys, values, window_size, causal=False):
    """The loop, except where autograd is off, as the measured runs once had it."""
    if torch.is_grad_enabled():
        return window_attention_loop(queries, keys, values, window_size, causal)
    return ref("window_attention")(queries, keys, values, window_size, causal)


def test_measured_runs_keep_the_grad_mode_of_the_answer_runs():
    verdict = evaluate("03.masked_window", vectorised_only_without_autograd)
    all_but(verdict, VECTORISED)


@pytest.mark.parametrize("name", MEASURED)
def test_a_measurement_that_is_not_a_number_fails(name):
    cases = make_cases(name, hidden=True, seed=HIDDEN_SEED)
    expected, _ = live_expectations(name, cases, with_mistakes=False)
    results = [
        {k: torch.tensor(float("nan")) if k in MEASURED_OUTPUTS else v for k, v in e.reference.items()}
        for e in expected
    ]
    verdict = judge(CHECKS[name], cases, results, expected, [])
    only_measured_fail(verdict, name)
    assert NOT_A_NUMBER in verdict.message, verdict.message


def test_a_fresh_copy_holds_its_own_tensors_inside_lists_and_dicts():
    """Code editing a case's weights in place must not change what the next run (the reference's) gets."""
    case = Case("weights", {"weights": [torch.zeros(2)], "long": {"queries": torch.zeros(3)}})
    copy = _fresh_copy(case)
    copy.inputs["weights"][0].add_(1)
    copy.inputs["long"]["queries"].add_(1)
    assert case.inputs["weights"][0].sum() == 0 and case.inputs["long"]["queries"].sum() == 0


# ----------------------------------------------------------------- RoPE inside (Q10)


def test_a_table_for_the_window_gets_the_hint_not_a_grader_error():
    """The layer builds RoPE(get_rotation_matrix(Dh, W, ...)): a broadcast error once T > W."""
    verdict = evaluate("03.rope_inside", mistake("03.rope_inside", "TableForTheWindow"))
    assert not verdict.passed
    assert "your code raised RuntimeError: The size of tensor a" in verdict.message, verdict.message
    assert "a row for every position" in verdict.message, verdict.message


class BufferRoPE(RoPEReal):
    """A RoPE whose table is a buffer: module.to(torch.bfloat16) keeps its real part only."""

    def __init__(self, rotation_matrix):
        nn.Module.__init__(self)
        self.register_buffer("rotation_matrix", rotation_matrix, persistent=False)


class BufferRoPELayer(CatZerosLayer):
    def __init__(self, hidden_size, num_heads, window_size, rotation_matrix=None):
        super().__init__(hidden_size, num_heads, window_size)
        self.rope = None if rotation_matrix is None else BufferRoPE(rotation_matrix)


@pytest.mark.parametrize("seed", [None, HIDDEN_SEED], ids=["visible", "hidden"])
def test_a_table_the_layer_registers_as_a_buffer_fails_only_the_cast(seed):
    verdict = evaluate(
        "03.rope_inside", mistake("03.rope_inside", "TableAsBuffer"), hidden=seed is not None, seed=seed
    )
    all_but(verdict, TABLE_KEPT)


@pytest.mark.parametrize("seed", [None, HIDDEN_SEED], ids=["visible", "hidden"])
def test_a_table_kept_as_a_buffer_by_the_rope_of_04_is_charged_in_04_only(seed):
    """One mistake, one charge: notebook 04's question asks the RoPE to keep its table through a cast,
    and its check charges a buffer; the layer that wraps that RoPE is graded on its own code."""
    hidden = {"hidden": seed is not None, "seed": seed}
    assert evaluate("03.rope_inside", (BufferRoPELayer, BufferRoPE), **hidden).passed
    in_04 = parts(evaluate("04.rope_forward", BufferRoPE, **hidden))
    assert in_04[rope.CORE] and not in_04[rope.CAST], in_04


class NoRotation(RoPEReal):
    """A RoPE bug from notebook 04: nothing is rotated."""

    def _rotate(self, x):
        return x


class NoRotationLayer(CatZerosLayer):
    def __init__(self, hidden_size, num_heads, window_size, rotation_matrix=None):
        super().__init__(hidden_size, num_heads, window_size)
        self.rope = None if rotation_matrix is None else NoRotation(rotation_matrix)


def test_a_rope_bug_is_named_as_notebook_04s():
    verdict = evaluate("03.rope_inside", (NoRotationLayer, NoRotation))
    assert "your RoPE (notebook 04's question) rotates queries wrongly" in verdict.message, verdict.message
    assert verdict.points == 0


class InlineRotationLayer(CatZerosLayer):
    """Rotates inside the layer (a complex product with the table), without the RoPE class."""

    def __init__(self, hidden_size, num_heads, window_size, rotation_matrix=None):
        super().__init__(hidden_size, num_heads, window_size)
        self.table = rotation_matrix
        self.rope = None if rotation_matrix is None else self._rotate

    def _rotate(self, queries, keys):
        def turn(x):
            B, H, T, Dh = x.shape
            pairs = torch.view_as_complex(x.float().reshape(B, H, T, Dh // 2, 2)) * self.table[:T]
            return torch.view_as_real(pairs).reshape(B, H, T, Dh)

        return turn(queries), turn(keys)


class StubRoPE(nn.Module):
    """The release's cell left as it is: RoPE's forward still raises."""

    def __init__(self, rotation_matrix):
        super().__init__()

    def forward(self, queries, keys):
        raise NotImplementedError()


def test_a_layer_that_rotates_without_the_rope_class_is_graded_on_its_own():
    verdict = evaluate("03.rope_inside", (InlineRotationLayer, StubRoPE))
    assert verdict.passed, verdict.message


@pytest.mark.parametrize("seed", [None, HIDDEN_SEED], ids=["visible", "hidden"])
def test_a_wrong_rope_the_layer_does_not_call_costs_nothing(seed):
    verdict = evaluate(
        "03.rope_inside", (InlineRotationLayer, NoRotation), hidden=seed is not None, seed=seed
    )
    assert verdict.points == verdict.max_points, verdict.message


class PlainTensors(nn.Module):
    """Calls a RoPE and hands on what it gives as plain tensors."""

    def __init__(self, rope):
        super().__init__()
        self.rope = rope

    def forward(self, queries, keys):
        return tuple(torch.as_tensor(x).as_subclass(torch.Tensor) for x in self.rope(queries, keys))


def layer_calling(rope_class) -> type:
    """A right layer that calls `rope_class` and turns its results into plain tensors."""

    class Layer(CatZerosLayer):
        def __init__(self, hidden_size, num_heads, window_size, rotation_matrix=None):
            super().__init__(hidden_size, num_heads, window_size)
            self.rope = None if rotation_matrix is None else PlainTensors(rope_class(rotation_matrix))

    return Layer


class NumpyRoPE(RoPEReal):
    def forward(self, queries, keys):
        return tuple(x.detach().numpy() for x in super().forward(queries, keys))


class Sticky(torch.Tensor):
    """A tensor that cannot be copied out."""

    def detach(self):
        raise RuntimeError("no copy")


class StickyRoPE(RoPEReal):
    def forward(self, queries, keys):
        return tuple(x.as_subclass(Sticky) for x in super().forward(queries, keys))


class ExitsOnItsOwn(RoPEReal):
    """Right inside the layer, whose queries are views; exits on a contiguous query, as the
    diagnosis passes."""

    def forward(self, queries, keys):
        if queries.is_contiguous():
            raise SystemExit("RoPE called on its own")
        return super().forward(queries, keys)


@pytest.mark.parametrize("rope_class", [NumpyRoPE, StickyRoPE, ExitsOnItsOwn], ids=lambda c: c.__name__)
def test_a_rope_whose_diagnosis_gives_no_tensor_leaves_the_layer_graded_alone(rope_class):
    verdict = evaluate("03.rope_inside", (layer_calling(rope_class), rope_class))
    assert verdict.points == verdict.max_points, verdict.message


class NoBias(CatZerosLayer):
    def __init__(self, hidden_size, num_heads, window_size, rotation_matrix=None):
        super().__init__(hidden_size, num_heads, window_size, rotation_matrix)
        self.qkv_linear = nn.Linear(hidden_size, 3 * hidden_size, bias=False)


@pytest.mark.parametrize(
    ("name", "answer"), [("03.sliding_window", NoBias), ("03.rope_inside", (NoBias, RoPEReal))]
)
def test_a_projection_without_bias_gets_a_message(name, answer):
    verdict = evaluate(name, answer)
    assert verdict.points == 0
    assert "`qkv_linear` has no bias: keep the given nn.Linear layers as they are" in verdict.message


# ------------------------------------------------------- homework solutions for odd windows


@pytest.mark.parametrize("answer", ODD_ONLY["03.sliding_window"], ids=lambda a: a.__name__)
@pytest.mark.parametrize("seed", [None, HIDDEN_SEED, 4, 5, 6, 8])
def test_a_homework_solution_for_odd_windows_loses_only_the_even_windows(answer, seed):
    verdict = evaluate("03.sliding_window", answer, hidden=seed is not None, seed=seed)
    assert parts(verdict) == {ODD: True, EVEN: False, VECTORISED: True}, verdict.message
    assert verdict.points == pytest.approx(verdict.max_points * 4 / 5)


@pytest.mark.parametrize("answer", ODD_ONLY["03.rope_inside"], ids=lambda a: a.__name__)
@pytest.mark.parametrize("seed", [None, HIDDEN_SEED], ids=["visible", "hidden"])
def test_a_homework_solution_for_odd_windows_keeps_rope_inside(answer, seed):
    verdict = evaluate("03.rope_inside", answer, hidden=seed is not None, seed=seed)
    assert all(passed for concern, passed in parts(verdict).items() if "even" not in concern), verdict.message
    assert verdict.points == pytest.approx(verdict.max_points * 4 / 5)


def test_swapped_einsum_subscripts_get_the_hint_where_they_raise():
    swapped = mistake("03.sliding_window", "WindowAndHeadDimSwapped")
    odd = next(p for p in evaluate("03.sliding_window", swapped).parts if p.concern == ODD)
    assert "your code raised RuntimeError: einsum()" in odd.message
    assert "the window is the LAST dimension" in odd.message, odd.message


# ------------------------------------------- measured shares: earned with right values only


@pytest.mark.parametrize("name", MEASURED)
def test_a_measured_share_is_earned_with_right_values_only(name):
    """Each catalogued mistake loses a measured share exactly when it loses the core: a mistake of the
    core gives wrong values in the measured run too, and one of an edge (even or causal windows) is
    charged in that edge's share alone. Judged on what each mistake gave when the expectations were
    made (the visible snapshot's, and the hidden cases of four seeds)."""
    check, core = CHECKS[name], CHECKS[name].concerns[0].name
    for seed in (None, 0, 1, 2):
        if seed is None:
            cases, expected, known = load_snapshot(name)
        else:
            cases = make_cases(name, hidden=True, seed=seed)
            expected, known = live_expectations(name, cases)
        for mistake_ in known:
            results = [e.mistakes[mistake_.name] for e in expected]
            got = parts(judge(check, cases, results, expected, known))
            measured = {concern: got[concern] for concern in MEASURED[name]}
            assert measured == dict.fromkeys(MEASURED[name], got[core]), (mistake_.name, seed, got)


def measured_runs(name: str, seeds: range) -> list[dict]:
    return [
        case.inputs
        for seed in seeds
        for case in make_cases(name, hidden=True, seed=seed)
        if "lengths" in case.inputs
    ]


def test_the_layers_measured_run_shows_every_mistake_of_the_odd_windows():
    """Two heads or more (one hides a scale by sqrt(D), a split per projection, heads merged in the
    wrong order), an odd W of 3 or more (W = 1 has no padding; an even W is its own share)."""
    for inputs in measured_runs("03.sliding_window", range(60)):
        w = inputs["window_size"]
        assert inputs["num_heads"] >= 2 and w % 2 == 1 and w >= 3, (inputs["num_heads"], w)


@pytest.mark.parametrize("name", ["03.window_mask", "03.masked_window", "03.blocked_attention"])
def test_the_measured_runs_are_centred_windows_with_slots_to_mask(name):
    for inputs in measured_runs(name, range(60)):
        assert not inputs["causal"] and inputs["window_size"] >= 2, inputs["window_size"]
        if name == "03.window_mask":  # where the extra key of an even window can go on the wrong side
            assert inputs["window_size"] % 2 == 0, inputs["window_size"]


# ------------------------------------------------ the signatures the original homework leads to


def homework_answers(name: str) -> list:
    return [a for a in ALTERNATIVES[name] if a.__name__.lower().startswith("homework")]


HOMEWORK_ANSWERS = [
    pytest.param(name, answer, id=f"{name}: {answer.__name__}")
    for name in ("03.sliding_window", "03.rope_inside")
    for answer in homework_answers(name)
] + [
    pytest.param("04.rope_forward", RoPEHomework, id="04.rope_forward: RoPEHomework"),
    pytest.param("04.rope_forward", RoPEOwnAttributeName, id="04.rope_forward: RoPEOwnAttributeName"),
    pytest.param("04.rotation_matrix", rotation_matrix_complex, id="04.rotation_matrix: complex"),
]


@pytest.mark.parametrize(("name", "answer"), HOMEWORK_ANSWERS)
@pytest.mark.parametrize("seed", [None, 1, 2, 5, 11])
def test_code_written_as_the_homework_leads_earns_full_marks(name, answer, seed):
    """The homework's stub takes (hidden_size, num_heads, window_size) and creates RoPE inside; many
    of its solutions require the table as a fourth argument; RoPE's attributes are named freely."""
    result = verdict(name, answer, seed)
    assert result.passed and result.points == result.max_points, result.message


@pytest.mark.parametrize(
    ("layer", "takes"),
    [
        (HomeworkLayer, (TABLE_OPTIONAL, "rotation_matrix")),
        (HomeworkStubBuildsRoPE, (NO_TABLE, None)),
        (HomeworkRequiresTable, (TABLE_REQUIRED, "rotation_matrix")),
        (HomeworkOwnTableAsAttribute, (NO_TABLE, None)),
        (HomeworkTableKeywordOnly, (TABLE_REQUIRED, "rotation_matrix")),
    ],
    ids=lambda value: getattr(value, "__name__", ""),
)
def test_the_layers_signature_says_whether_it_takes_a_table(layer, takes):
    assert table_argument(layer) == takes


class ThreeArgumentsNoRoPE(CatZerosLayer):
    """Questions 1 to 6 done in the homework's three-argument stub; no RoPE."""

    def __init__(self, hidden_size, num_heads, window_size):
        super().__init__(hidden_size, num_heads, window_size)


def test_a_three_argument_layer_without_rope_is_told_what_question_10_needs():
    assert evaluate("03.sliding_window", ThreeArgumentsNoRoPE).passed
    verdict_10 = evaluate("03.rope_inside", (ThreeArgumentsNoRoPE, RoPEReal))
    assert verdict_10.points == 0
    assert NO_TABLE_FOUND in verdict_10.message, verdict_10.message


class ThreeArgumentsTableForTheWindow(HomeworkStubBuildsRoPE):
    """Builds its table for window_size positions: too short once T > W."""

    def __init__(self, hidden_size, num_heads, window_size):
        super().__init__(hidden_size, num_heads, window_size)
        self.rotary = RoPEHomework(rotation_matrix_complex(self.head_dim, window_size, 10_000.0))


def test_a_three_argument_layer_with_a_table_for_the_window_gets_the_hint():
    result = evaluate("03.rope_inside", (ThreeArgumentsTableForTheWindow, RoPEHomework))
    assert not result.passed
    assert "a row for every position" in result.message, result.message


class KeysLeftAlone(RoPEHomework):
    def forward(self, queries, keys):
        return super().forward(queries, keys)[0], keys


class ThreeArgumentsKeysLeftAlone(HomeworkStubBuildsRoPE):
    def __init__(self, hidden_size, num_heads, window_size):
        super().__init__(hidden_size, num_heads, window_size)
        self.rotary = KeysLeftAlone(rotation_matrix_complex(self.head_dim, 512, 10_000.0))


@pytest.mark.parametrize("seed", [None, HIDDEN_SEED], ids=["visible", "hidden"])
def test_a_three_argument_layer_is_graded_with_the_cases_table_in_place_of_its_own(seed):
    """Its rotation is judged as any layer's: a wrong one fails; Questions 1 to 6, with the rotation
    made neutral, pass."""
    assert evaluate(
        "03.sliding_window", ThreeArgumentsKeysLeftAlone, hidden=seed is not None, seed=seed
    ).passed
    wrong = evaluate(
        "03.rope_inside", (ThreeArgumentsKeysLeftAlone, KeysLeftAlone), hidden=seed is not None, seed=seed
    )
    assert wrong.points == 0, wrong.message


class ThreeArgumentsTableAsBuffer(HomeworkStubBuildsRoPE):
    """The layer's own table registered as a buffer of the layer: the cast makes it real."""

    def __init__(self, hidden_size, num_heads, window_size):
        super().__init__(hidden_size, num_heads, window_size)
        self.register_buffer("table", rotation_matrix_complex(self.head_dim, 512, 10_000.0), persistent=False)

    def forward(self, x):
        self.rotary = RoPEHomework(self.table)
        return super().forward(x)


def test_a_three_argument_layer_that_registers_its_table_as_a_buffer_fails_only_the_cast():
    all_but(evaluate("03.rope_inside", (ThreeArgumentsTableAsBuffer, RoPEHomework)), TABLE_KEPT)


# ---------------------------------------------------------------------- the mistakes file


def test_mistakes_file_redefines_none_of_the_notebooks_names():
    """A mutant submission pastes mistakes.py into an answer cell: a name it shares with the
    notebook (RoPE, window_attention, ...) would replace the notebook's there."""
    module = reference.instructor_module(ASSIGNMENT, "mistakes.py")
    notebook = reference.namespace(ASSIGNMENT)
    shared = {name for name in vars(module) if name in notebook and not name.startswith("__")}
    assert all(vars(module)[name] is notebook[name] for name in shared), shared


def test_the_notebooks_benchmark_figure_draws_the_committed_measurements():
    """The figure's numbers are copied into the notebook (a grading kernel reads no other file):
    they must be the benchmark's, rounded, as benchmarks/results/sliding_window_cpu.json holds them."""
    measured = json.loads((REPO / "benchmarks" / "results" / "sliding_window_cpu.json").read_text())
    names: dict = {}
    exec(cells(ASSIGNMENT)["benchmark_numbers"], names)
    assert names["lengths"] == [int(t) for t in measured["ms"]["blocked"]]
    for key, unit, digits in (("milliseconds", "ms", 2), ("mebibytes", "mib", 1)):
        want = {method: [round(v, digits) for v in by_t.values()] for method, by_t in measured[unit].items()}
        assert names[key] == want, f"rerun the benchmark's numbers into the notebook's {key}"
