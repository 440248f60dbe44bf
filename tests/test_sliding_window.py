"""Notebook 03 (sliding-window attention): the reference against the homework's loop and dense
attention, the RoPE cell against notebook 04, and how the checks grade answers that are right in
one part and wrong in another (a loop, a T x T mask, a table cast away, odd windows only).

Key: B batch, T sequence length, D hidden size, H heads, Dh = D // H, W window size.
"""

import json
from functools import cache

import nbformat
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from autograder import evaluate, reference
from autograder.cells import grade_id
from autograder.checks.sliding_window import EVEN, LINEAR_MEMORY, ODD, ONE_SDPA_CALL, TABLE_KEPT, VECTORISED
from autograder.core import TOLERANCES
from autograder.paths import REPO, source_notebook

from .alternatives_03 import ODD_ONLY, CatZerosLayer
from .alternatives_04 import RoPEReal

ASSIGNMENT = "03_sliding_window"
RTOL, ATOL = TOLERANCES[torch.float32]
HIDDEN_SEED = 3


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


def parts(verdict) -> dict[str, bool]:
    return {part.concern: part.passed for part in verdict.parts}


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


# ----------------------------------------------------------------- RoPE inside (Q10)


def mistake(name: str, impl_name: str):
    """The known mistake of check `name` whose implementation (or layer) is called `impl_name`."""
    impls = [m.impl for m in reference.mistakes(name)]
    (impl,) = [i for i in impls if (i[0] if isinstance(i, tuple) else i).__name__ == impl_name]
    return impl


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


@pytest.mark.parametrize(
    "answer",
    [(BufferRoPELayer, BufferRoPE), "TableAsBuffer"],
    ids=["in RoPE", "in the layer"],
)
def test_a_table_registered_as_a_buffer_fails_only_the_cast(answer):
    answer = mistake("03.rope_inside", answer) if isinstance(answer, str) else answer
    for verdict in (
        evaluate("03.rope_inside", answer),
        evaluate("03.rope_inside", answer, hidden=True, seed=HIDDEN_SEED),
    ):
        all_but(verdict, TABLE_KEPT)


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
@pytest.mark.parametrize("seed", [None, HIDDEN_SEED], ids=["visible", "hidden"])
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


# ---------------------------------------------------------------------- the mistakes file


def test_mistakes_file_redefines_none_of_the_notebooks_names():
    """A mutant submission pastes mistakes.py into an answer cell: a name it shares with the
    notebook (RoPE, window_attention, ...) would replace the notebook's there."""
    module = reference._mistakes_module(ASSIGNMENT)
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
