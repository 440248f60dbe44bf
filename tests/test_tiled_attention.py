"""Notebook 11 (attention without the T x T matrix): the reference against PyTorch, the measurement
of the largest intermediate, and how the checks grade answers that are right in values and wrong in
memory (a plain softmax of the whole row, a T x T matrix, a block of queries against every key).

Key: B batch, H heads, T sequence length, Dh head dimension, N the length of a softmax row.
"""

import math

import nbformat
import pytest
import torch
import torch.nn.functional as F

from autograder import CHECKS, evaluate, reference
from autograder.api import live_expectations, make_cases
from autograder.cells import grade_id
from autograder.checks.tiled_attention import (
    CAUSAL,
    EMPTY_PART,
    LARGE_SCORES,
    MEMORY,
    MISSING,
    NON_CAUSAL,
    ONE_BLOCK,
    SOFTMAX_CORE,
    SOFTMAX_STABLE,
    TWO_PARTS,
    LargestIntermediate,
)
from autograder.core import judge
from autograder.paths import source_notebook

from .helpers.submissions import parts

ASSIGNMENT = "11_tiled_attention"
attention_prose = reference.instructor_module(ASSIGNMENT, "alternatives.py").attention_prose
HIDDEN_SEED = 5
VISIBLE_AND_HIDDEN = pytest.mark.parametrize("seed", [None, HIDDEN_SEED], ids=["visible", "hidden"])


def ref(name: str):
    return reference.namespace(ASSIGNMENT)[name]


def all_but(verdict, failing: str) -> None:
    """Every concern passes but `failing`."""
    assert parts(verdict) == {concern: concern != failing for concern in parts(verdict)}, verdict.message


def judged(name: str, answer, seed):
    return evaluate(name, answer, hidden=seed is not None, seed=seed)


# ------------------------------------------------------------------------ the reference


@pytest.mark.parametrize("shape", [(3, 10), (2, 4, 16), (5, 7), (1, 1)])
@pytest.mark.parametrize("block_size", [1, 3, 4, 64])
def test_reference_online_softmax_equals_torch_softmax(shape, block_size):
    scores = torch.randn(shape) * 5
    for shift in (0.0, 1000.0, -1000.0):
        got = ref("online_softmax")(scores + shift, block_size)
        torch.testing.assert_close(got, torch.softmax(scores + shift, dim=-1), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    ("b", "h", "t", "dh", "block_size"),
    [(1, 2, 10, 8, 4), (2, 3, 33, 16, 8), (1, 1, 5, 4, 16), (2, 1, 7, 4, 1)],
)
@pytest.mark.parametrize("causal", [False, True])
def test_reference_tiled_attention_equals_sdpa(b, h, t, dh, block_size, causal):
    q, k, v = torch.randn(3, b, h, t, dh)
    got = ref("tiled_attention")(q, k, v, block_size, causal)
    torch.testing.assert_close(
        got, F.scaled_dot_product_attention(q, k, v, is_causal=causal), rtol=1e-5, atol=1e-5
    )


def test_score_matrix_bytes_of_the_notebook():
    assert ref("score_matrix_bytes")(1, 32, 8192) == 8 * 2**30


# ---------------------------------------------------------------------- the measurement


def test_the_measurement_leaves_out_inputs_and_result_and_sees_what_lies_between():
    x = torch.randn(4, 100)
    with LargestIntermediate([x]) as seen:
        _ = x[:, :10].clone()  # (4, 10): a view of the input, then an intermediate
        wide = torch.exp(x - x.amax(-1, keepdim=True))  # (4, 100)
        result = (wide / wide.sum(-1, keepdim=True)).reshape(2, 2, 100)
    assert seen.largest(result) == (400, (4, 100))
    with LargestIntermediate([x]) as seen:
        result = torch.empty_like(x)
        for start in range(0, 100, 10):
            result[:, start : start + 10] = x[:, start : start + 10] * 2
    assert seen.largest(result) == (40, (4, 10))


def test_a_freed_intermediate_is_not_taken_for_the_result():
    """The allocator reuses freed memory: a temporary freed before the result is made could share its
    address. The mode holds the largest ones until the end, so they keep theirs."""
    x = torch.randn(64, 64)

    def freed_first():
        temporary = torch.exp(x - 1)  # (64, 64), freed on return from this line's scope below
        del temporary
        return x.sin()

    with LargestIntermediate([x]) as seen:
        result = freed_first()
    assert seen.largest(result) == (4096, (64, 64))


def test_a_matmul_is_named_by_its_four_dimensional_shape():
    q, k = torch.randn(2, 1, 2, 16, 4)
    with LargestIntermediate([q, k]) as seen:
        s = q @ k.transpose(-1, -2)
        result = s.sum(-1)
    assert seen.largest(result) == (512, (1, 2, 16, 16))


# ----------------------------------------------------- online softmax: memory and library


def softmax_whole_row(scores, block_size):
    """The stable softmax written by hand, the whole row at once."""
    e = torch.exp(scores - scores.amax(dim=-1, keepdim=True))
    return e / e.sum(dim=-1, keepdim=True)


def softmax_normalised_on_the_whole_row(scores, block_size):
    """Streamed statistics, then exp(scores - m) / l on the whole row."""
    m = torch.full_like(scores[..., :1], -math.inf)
    total = torch.zeros_like(m)
    for block in scores.split(block_size, dim=-1):
        m_new = torch.maximum(m, block.amax(-1, keepdim=True))
        total = total * torch.exp(m - m_new) + torch.exp(block - m_new).sum(-1, keepdim=True)
        m = m_new
    return torch.exp(scores - m) / total


def softmax_max_of_the_whole_row_first(scores, block_size):
    """The row's maximum in one amax before the loop (the notebook says this fails), then blocks."""
    m = scores.amax(dim=-1, keepdim=True)
    total = sum(torch.exp(block - m).sum(-1, keepdim=True) for block in scores.split(block_size, dim=-1))
    return torch.cat([torch.exp(block - m) / total for block in scores.split(block_size, dim=-1)], dim=-1)


@VISIBLE_AND_HIDDEN
@pytest.mark.parametrize(
    "answer", [softmax_whole_row, softmax_normalised_on_the_whole_row, softmax_max_of_the_whole_row_first]
)
def test_a_softmax_of_the_whole_row_fails_only_one_block_at_a_time(answer, seed):
    verdict = judged("11.online_softmax", answer, seed)
    all_but(verdict, ONE_BLOCK)
    assert "the row was not streamed" in verdict.message, verdict.message


@pytest.mark.parametrize(
    "answer",
    [
        lambda scores, block_size: torch.softmax(scores, dim=-1),
        lambda scores, block_size: scores.softmax(-1),
        lambda scores, block_size: torch.exp(scores - torch.logsumexp(scores, -1, keepdim=True)),
    ],
)
def test_the_library_softmax_fails_and_is_named(answer):
    verdict = judged("11.online_softmax", answer, None)
    assert verdict.points == 0, verdict.message
    assert "which is what this question asks you to write yourself" in verdict.message


# ---------------------------------------------------------- tiled attention: memory


def dense(q, k, v, block_size, causal=False):
    s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if causal:
        s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool).triu(1), -math.inf)
    return torch.softmax(s, dim=-1) @ v


def dense_inside_the_loop(q, k, v, block_size, causal=False):
    """Per block of queries, the whole (T, T) matrix, of which the block's rows are kept."""
    T = q.shape[2]
    return torch.cat(
        [dense(q, k, v, block_size, causal)[:, :, i : i + block_size] for i in range(0, T, block_size)], 2
    )


def query_block_against_every_key(q, k, v, block_size, causal=False):
    """Chunked queries, an ordinary softmax over all T keys: (block_size, T) scores at once."""
    T = q.shape[2]
    outs = []
    for i in range(0, T, block_size):
        s = q[:, :, i : i + block_size] @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
        if causal:
            s = s.masked_fill(torch.arange(T)[None, :] > torch.arange(i, i + s.shape[2])[:, None], -math.inf)
        outs.append(torch.softmax(s, dim=-1) @ v)
    return torch.cat(outs, dim=2)


def tiled_with_a_full_causal_mask(q, k, v, block_size, causal=False):
    """Tiles, but the causal mask made once as a (T, T) tensor and sliced per tile."""
    T = q.shape[2]
    future = torch.ones(T, T, dtype=torch.bool).triu(1) if causal else None
    outs = []
    for i in range(0, T, block_size):
        qi = q[:, :, i : i + block_size] / math.sqrt(q.shape[-1])
        m = torch.full_like(qi[..., :1], -math.inf)
        total, acc = torch.zeros_like(m), torch.zeros_like(qi)
        for j in range(0, T, block_size):
            s = qi @ k[:, :, j : j + block_size].transpose(-1, -2)
            if causal:
                s = s.masked_fill(future[i : i + block_size, j : j + block_size], -math.inf)
            m_new = torch.maximum(m, s.amax(-1, keepdim=True))
            p, c = torch.exp(s - m_new), torch.exp(m - m_new)
            total, acc, m = (
                c * total + p.sum(-1, keepdim=True),
                c * acc + p @ v[:, :, j : j + block_size],
                m_new,
            )
        outs.append(acc / total)
    return torch.cat(outs, dim=2)


@VISIBLE_AND_HIDDEN
@pytest.mark.parametrize("answer", [dense, dense_inside_the_loop])
def test_a_t_by_t_matrix_fails_only_memory_and_is_named(answer, seed):
    verdict = judged("11.tiled_attention", answer, seed)
    all_but(verdict, MEMORY)
    assert "T x T" in verdict.message, verdict.message
    assert "faster than T" in verdict.message, verdict.message


@VISIBLE_AND_HIDDEN
def test_a_block_of_queries_against_every_key_fails_only_memory(seed):
    verdict = judged("11.tiled_attention", query_block_against_every_key, seed)
    all_but(verdict, MEMORY)
    assert "an ordinary softmax of the whole row" in verdict.message, verdict.message
    assert "Loop over the key blocks too" in verdict.message, verdict.message


def test_a_full_causal_mask_fails_only_memory_where_the_run_is_causal():
    causal_seed = next(s for s in range(1, 100) if _measured_case(s).inputs["causal"])
    verdict = judged("11.tiled_attention", tiled_with_a_full_causal_mask, causal_seed)
    all_but(verdict, MEMORY)
    assert "T x T" in verdict.message, verdict.message


def _measured_case(seed: int):
    (case,) = [c for c in make_cases("11.tiled_attention", hidden=True, seed=seed) if c.concern == MEMORY]
    return case


@pytest.mark.parametrize("seed", range(40))
def test_hidden_measured_runs_tell_a_row_of_scores_from_a_copy_of_q(seed):
    """Drawn shapes and lengths: a (T, T) tensor grows more than twice as fast as T allows, and a
    (block_size, T) row of scores at the long length is more than twice what the check lets pass."""
    case = _measured_case(seed)
    b, h, _, dh = case.inputs["q"].shape
    (short, long), bs = case.inputs["lengths"], case.inputs["block_size"]
    assert (long / short) ** 2 > 1.5 * (2 * long / short)
    allowed = 2 * b * h * max((long + bs) * dh, bs * bs)
    assert b * h * bs * long > 1.5 * allowed
    assert case.inputs["long"]["q"].shape == (b, h, long, dh)


def test_hidden_measured_runs_draw_lengths_block_sizes_and_causality():
    cases = [_measured_case(seed) for seed in range(30)]
    assert len({c.inputs["lengths"] for c in cases}) > 10
    assert {c.inputs["block_size"] for c in cases} == {16, 24, 32}
    assert {c.inputs["causal"] for c in cases} == {False, True}


def zeros_at_the_long_length(q, k, v, block_size, causal=False):
    if q.shape[2] > 120:
        return torch.zeros_like(q)
    return ref("tiled_attention")(q, k, v, block_size, causal)


@VISIBLE_AND_HIDDEN
def test_the_memory_concern_needs_the_right_answer_at_both_lengths(seed):
    verdict = judged("11.tiled_attention", zeros_at_the_long_length, seed)
    all_but(verdict, MEMORY)
    assert "at the longer length" in verdict.message, verdict.message


@pytest.mark.parametrize("name", ["11.online_softmax", "11.tiled_attention"])
def test_a_measurement_that_does_not_come_back_fails_its_concern(name):
    cases = make_cases(name, hidden=True, seed=HIDDEN_SEED)
    expected, _ = live_expectations(name, cases, with_mistakes=False)
    measured = CHECKS[name].measured
    results = [{k: v for k, v in e.reference.items() if k not in measured} for e in expected]
    verdict = judge(CHECKS[name], cases, results, expected, [])
    failing = ONE_BLOCK if name == "11.online_softmax" else MEMORY
    all_but(verdict, failing)
    assert MISSING in verdict.message


def test_sdpa_is_refused():
    verdict = judged(
        "11.tiled_attention",
        lambda q, k, v, block_size, causal=False: F.scaled_dot_product_attention(q, k, v, is_causal=causal),
        None,
    )
    assert verdict.points == 0, verdict.message
    assert (
        "scaled_dot_product_attention, which is what this question asks you to write yourself"
        in verdict.message
    )


class Deferred(torch.Tensor):
    """A result whose values are computed when the run stage copies it out, after the measurement."""

    @staticmethod
    def __new__(cls, compute, like):
        deferred = torch.Tensor._make_subclass(cls, torch.empty_like(like))
        deferred.compute = compute
        return deferred

    def detach(self):
        return self.compute()


def test_a_tensor_subclass_that_defers_its_work_is_refused_by_the_measured_runs():
    verdict = judged(
        "11.tiled_attention",
        lambda q, k, v, b, causal=False: Deferred(lambda: dense(q, k, v, b, causal), q),
        None,
    )
    assert verdict.points == 0, verdict.message
    assert "the attention output is a Deferred, not a torch.Tensor" in verdict.message


@VISIBLE_AND_HIDDEN
def test_the_way_the_prose_writes_it_passes_every_part(seed):
    verdict = judged("11.tiled_attention", attention_prose, seed)
    assert verdict.passed and set(parts(verdict)) == {NON_CAUSAL, CAUSAL, MEMORY}, verdict.message


def test_online_softmax_concerns_are_the_three_of_the_notebook():
    verdict = judged("11.online_softmax", ref("online_softmax"), None)
    assert set(parts(verdict)) == {SOFTMAX_CORE, SOFTMAX_STABLE, ONE_BLOCK}


@pytest.mark.parametrize("value", ["8 GiB", None, torch.ones(2), True])
def test_score_matrix_bytes_that_is_not_a_number_gets_a_message(value):
    verdict = judged("11.score_matrix_bytes", lambda *args: value, None)
    assert not verdict.passed
    assert "not a number" in verdict.message or "of shape (2,)" in verdict.message, verdict.message


# ------------------------------------------------- what only looks streamed or tiled (red team)


def softmax_in_place(scores, block_size):
    """A whole-row softmax written into the input: it creates no tensor as wide as the row."""
    scores.sub_(scores.amax(dim=-1, keepdim=True)).exp_()
    return scores.div_(scores.sum(dim=-1, keepdim=True))


def softmax_in_a_work_buffer(scores, block_size):
    """The whole row's exp in the same storage as the result, which the size measurement leaves out."""
    n = scores.shape[-1]
    work = torch.empty(*scores.shape[:-1], 2 * n)
    out, e = work[..., :n], work[..., n:]
    torch.sub(scores, scores.amax(-1, keepdim=True), out=e)
    e.exp_()
    torch.div(e, e.sum(-1, keepdim=True), out=out)
    return out


@VISIBLE_AND_HIDDEN
@pytest.mark.parametrize("answer", [softmax_in_place, softmax_in_a_work_buffer])
def test_a_whole_row_reduced_in_place_or_in_a_buffer_fails_one_block_at_a_time(answer, seed):
    verdict = judged("11.online_softmax", answer, seed)
    all_but(verdict, ONE_BLOCK)
    assert "the row was not streamed" in verdict.message, verdict.message


def four_queries_against_every_key(q, k, v, block_size, causal=False):
    """Chunks of 4 queries, each a plain softmax over all T keys: small tensors, not online."""
    T, outs = q.shape[2], []
    for i in range(0, T, 4):
        s = q[:, :, i : i + 4] @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
        if causal:
            s = s.masked_fill(torch.arange(T)[None, :] > torch.arange(i, i + s.shape[2])[:, None], -math.inf)
        outs.append(torch.softmax(s, dim=-1) @ v)
    return torch.cat(outs, dim=2)


@VISIBLE_AND_HIDDEN
def test_a_few_queries_against_every_key_fail_only_memory(seed):
    verdict = judged("11.tiled_attention", four_queries_against_every_key, seed)
    all_but(verdict, MEMORY)
    assert "an ordinary softmax of the whole row" in verdict.message, verdict.message


# --------------------------------------------------------------------- merging softmax states

MERGE_MISTAKES = reference.instructor_module(ASSIGNMENT, "mistakes.py")


@VISIBLE_AND_HIDDEN
@pytest.mark.parametrize(
    ("answer", "failing"),
    [
        ("merge_without_a_max", {LARGE_SCORES}),
        ("merge_first_max_as_reference", {EMPTY_PART, LARGE_SCORES}),
        ("merge_smaller_max_as_reference", {EMPTY_PART, LARGE_SCORES}),
    ],
)
def test_a_merge_exact_on_paper_loses_only_the_parts_where_float32_breaks_it(answer, failing, seed):
    """Any reference maximum gives the same state in exact arithmetic; only the larger of the two keeps
    every factor at most 1 and never computes -inf - (-inf)."""
    answer = getattr(MERGE_MISTAKES, answer)
    verdict = judged("11.merge_softmax_states", answer, seed)
    assert {concern for concern, ok in parts(verdict).items() if not ok} == failing, verdict.message
    assert TWO_PARTS in parts(verdict)
    # Named as itself in every part it fails, not as another mistake whose NaN looks the same there.
    own = next(m.name for m in reference.mistakes("11.merge_softmax_states") if m.impl is answer)
    named = {name for part in verdict.parts if not part.passed for name in part.finding.mistakes}
    assert named == {own}, verdict.message


@pytest.mark.parametrize(
    ("answer", "said"),
    [
        (lambda a, b: ref("merge_softmax_states")(a, b)[2], "returned a Tensor, not a tuple (m, l, acc)"),
        (lambda a, b: ref("merge_softmax_states")(a, b)[::-1], "in that order"),
    ],
    ids=["the-output-alone", "acc-l-m"],
)
def test_a_merge_that_returns_something_else_than_a_state_is_told_what_a_state_is(answer, said):
    verdict = judged("11.merge_softmax_states", answer, None)
    assert not any(parts(verdict).values()) and said in verdict.message, verdict.message


def test_the_cases_make_a_parts_state_as_the_notebooks_given_function_does():
    """cases.attention_state is the grader's copy of the notebook's given `attention_state` (the
    package lends students no attention): the two agree, on parts that some queries do not see too."""
    notebook = nbformat.read(source_notebook(ASSIGNMENT), as_version=4)
    names = dict(reference.namespace(ASSIGNMENT))  # the notebook's imports
    exec(next(c.source for c in notebook.cells if grade_id(c) == "code_state"), names)
    copy = reference.instructor_module(ASSIGNMENT, "cases.py").attention_state
    q, k, v = torch.randn(3, 2, 2, 9, 4)
    for start, stop, causal in ((0, 4, False), (4, 9, True), (0, 9, True)):
        given = names["attention_state"](q, k, v, start, stop, causal)
        for ours, theirs in zip(copy(q, k, v, start, stop, causal), given, strict=True):
            torch.testing.assert_close(ours, theirs, rtol=0, atol=0)
