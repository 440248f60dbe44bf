"""Other routes to what a question forbids or measures: the library's operation reached without its
Python name (torch.ops.aten, a low-level overload, TorchScript), and code compiled out of the
measurements' sight. Each is written as a student would, and must earn no more than the plain
answer it stands for."""

import inspect
import linecache
import math

import nbformat
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.autograd import Variable

from autograder import CHECKS
from autograder.cells import grade_id
from autograder.checks.sliding_window import LINEAR_MEMORY, VECTORISED
from autograder.core import forbidden_operations
from grader.grading import grade

from .helpers.alternatives import RMSNormOneOverSqrt
from .helpers.machine import needs_sandbox
from .helpers.submissions import parts, perfect, score_when_graded, solution_sources, verdict, with_answer
from .test_guards import gelu_erf, gelu_erf_derivative

pytestmark = pytest.mark.batches  # make test runs it beside another file of batches

HIDDEN_SEED = 7
VISIBLE_AND_HIDDEN = pytest.mark.parametrize("seed", [None, HIDDEN_SEED], ids=["visible", "hidden"])
WRITE_IT_YOURSELF = "what this question asks you to write yourself"
OUT_OF_SIGHT = "your code runs torch operations that no torch function called from Python issued"


# ------------------------------------------------------------ the library's operation, by its ATen name


def gelu_derivative_by_the_backward_kernel(z):
    """PyTorch's own derivative of GELU: the kernel that autograd runs for F.gelu."""
    return torch.ops.aten.gelu_backward(torch.ones_like(z), z)


@VISIBLE_AND_HIDDEN
def test_gelu_derivative_from_the_library_backward_kernel_earns_nothing(seed):
    result = verdict("05.gelu", (gelu_erf, gelu_derivative_by_the_backward_kernel), seed)
    assert result.points == 0, result.message
    assert "torch.ops.aten.gelu_backward" in result.message, result.message
    assert WRITE_IT_YOURSELF in result.message, result.message


def online_softmax_by_the_special_overload(scores, block_size):
    """One call of the ATen operator that torch.special.softmax is, under a name no list spells."""
    return torch.ops.aten.special_softmax(scores, -1)


@VISIBLE_AND_HIDDEN
def test_online_softmax_as_a_low_level_softmax_operator_earns_nothing(seed):
    result = verdict("11.online_softmax", online_softmax_by_the_special_overload, seed)
    assert result.points == 0, result.message
    assert "torch.ops.aten._softmax" in result.message, result.message
    assert WRITE_IT_YOURSELF in result.message, result.message


# ------------------------------------------------------------------------------- TorchScript


def _tiled_attention_by_the_library(q, k, v, block_size: int, causal: bool = False):
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal)


@VISIBLE_AND_HIDDEN
def test_scripted_library_attention_earns_nothing(seed):
    """TorchScript calls F.scaled_dot_product_attention without Python: its kernel is seen all the same."""
    result = verdict("11.tiled_attention", torch.jit.script(_tiled_attention_by_the_library), seed)
    assert result.points == 0, result.message
    assert "torch.ops.aten._scaled_dot_product_flash_attention_for_cpu" in result.message, result.message


def _window_attention_loop(queries, keys, values, window_size: int, causal: bool = False):
    """Right values, one query at a time, each masked by its row of a (T, T) mask."""
    t = queries.shape[-2]
    before = window_size - 1 if causal else window_size // 2
    offset = torch.arange(t)[None, :] - torch.arange(t)[:, None]
    outside = (offset < -before) | (offset > window_size - 1 - before)
    rows = []
    for i in range(t):
        scores = queries[:, :, i : i + 1] @ keys.transpose(-1, -2) / math.sqrt(queries.shape[-1])
        rows.append(torch.softmax(scores.masked_fill(outside[i], float("-inf")), dim=-1) @ values)
    return torch.cat(rows, dim=-2)


@VISIBLE_AND_HIDDEN
def test_a_scripted_loop_with_a_full_mask_earns_no_measured_part(seed):
    """The loop and the (T, T) mask, compiled by TorchScript, run out of a torch function mode's sight:
    the measured parts are refused, and the answer earns no more than the same code uncompiled."""
    plain = verdict("03.masked_window", _window_attention_loop, seed)
    scripted = verdict("03.masked_window", torch.jit.script(_window_attention_loop), seed)
    assert not any(
        passed for concern, passed in parts(plain).items() if concern in (VECTORISED, LINEAR_MEMORY)
    )
    assert not any(
        passed for concern, passed in parts(scripted).items() if concern in (VECTORISED, LINEAR_MEMORY)
    ), scripted.message
    assert scripted.points <= plain.points, scripted.message
    assert OUT_OF_SIGHT in scripted.message and "torch.jit.script" in scripted.message, scripted.message


def _gelu_by_the_library(z):
    return F.gelu(z)


def test_scripted_library_gelu_earns_nothing():
    result = verdict("05.gelu", (torch.jit.script(_gelu_by_the_library), gelu_erf_derivative))
    assert result.points == 0, result.message
    assert "torch.ops.aten.gelu" in result.message, result.message


def _rms_norm_by_the_library(x, eps: float):
    return F.rms_norm(x, [x.shape[-1]], eps=eps)


_rms_norm_scripted = torch.jit.script(_rms_norm_by_the_library)


class RMSNormScripted(RMSNormOneOverSqrt):
    """The library's RMSNorm in a scripted helper: on a CPU it runs ordinary operations, none of them the
    library's own, so it is the compilation that is refused."""

    def _norm(self, x):
        return _rms_norm_scripted(x, self.eps)


def test_the_library_rmsnorm_in_scripted_code_earns_nothing():
    result = verdict("07.rmsnorm", RMSNormScripted)
    assert result.points == 0, result.message
    assert OUT_OF_SIGHT in result.message, result.message


# ------------------------------------------------------------------ autograd run without Python


def step_by_the_autograd_engine(x, y, w, b, lr):
    """Autograd's engine called directly, past torch.autograd.grad and .backward()."""
    w_, b_ = w.clone().requires_grad_(), b.clone().requires_grad_()
    with torch.enable_grad():
        loss = (torch.sigmoid(x @ w_ + b_) - y).pow(2).mean()
    grad_w, grad_b = Variable._execution_engine.run_backward(
        (loss,), (torch.ones_like(loss),), False, False, (w_, b_), False
    )
    return (w - lr * grad_w).detach(), (b - lr * grad_b).detach()


def test_gradient_from_the_autograd_engine_earns_nothing():
    result = verdict("00.gradient_step", step_by_the_autograd_engine)
    assert result.points == 0, result.message
    assert OUT_OF_SIGHT in result.message, result.message


# ------------------------------------------------------------------------------ torch.compile


@VISIBLE_AND_HIDDEN
def test_a_loop_compiled_with_torch_compile_is_measured_as_python(seed):
    """A torch.compile'd function is run as the Python it was compiled from (compiled once before the
    check here, as a notebook's cell would): the loop is counted."""
    compiled = torch.compile(_window_attention_loop, backend="eager")
    q = torch.randn(1, 1, 4, 2)
    compiled(q, q, q, 3)
    result = verdict("03.masked_window", compiled, seed)
    assert parts(result) == parts(verdict("03.masked_window", _window_attention_loop, seed)), result.message
    assert "a Python loop walks along the sequence" in result.message, result.message


# ------------------------------------------------------------ what the forbidden operations are


ORDINARY = {"mul", "add", "sub", "div", "exp", "neg", "where", "bmm", "mm", "sum", "amax", "masked_fill"}


@pytest.mark.parametrize("name", [name for name, check in CHECKS.items() if check.forbidden_uses])
def test_no_operation_of_ordinary_arithmetic_is_forbidden(name):
    """The operations a forbidden function reaches that ordinary arithmetic reaches too (softmin's neg, the
    mask's where of scaled_dot_product_attention, all of rms_norm's on a CPU) stay allowed."""
    names = {operation.__name__ for operation in forbidden_operations(CHECKS[name].forbidden_uses)}
    assert not names & ORDINARY, names


def test_what_a_question_allows_stays_allowed():
    """01.attention forbids scaled_dot_product_attention, not the softmax of notebook 01's Question 1, and
    the multi-head questions and 11.tiled_attention forbid attention, not a softmax."""
    for name in ("01.attention", "01.multi_head_attention", "11.tiled_attention"):
        names = {operation.__name__ for operation in forbidden_operations(CHECKS[name].forbidden_uses)}
        assert "_softmax" not in names, (name, names)
    assert "_softmax" in {op.__name__ for op in forbidden_operations(CHECKS["01.softmax"].forbidden_uses)}


def test_a_library_function_of_ordinary_operations_is_refused_by_its_names_alone():
    """On a CPU, rms_norm computes with pow, mean, rsqrt and mul: nothing of its own to refuse at the
    operations' level (docs/security.md, "What is not covered"), while its names are
    (tests/test_guards.py)."""
    assert not forbidden_operations(CHECKS["07.rmsnorm"].forbidden_uses)


class LayerNormByTheKernel(nn.Module):
    """nn.LayerNorm's kernel called by its ATen name, which no list of Python names holds."""

    def __init__(self, hidden_size, eps=1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.bias = nn.Parameter(torch.zeros(hidden_size))
        self.eps = eps

    def forward(self, x):
        return torch.ops.aten.native_layer_norm(x, [x.shape[-1]], self.weight, self.bias, self.eps)[0]


def test_layer_norm_by_its_kernel_earns_nothing():
    result = verdict("01.layer_norm", LayerNormByTheKernel)
    assert result.points == 0, result.message
    assert "torch.ops.aten.native_layer_norm" in result.message, result.message


# --------------------------------------------------------- graded in the sandbox as in the notebook

BATCH_SEED = 20261127
# Each appended to the reference's answer cell, as a student would redefine the answer.
ROUTES = {
    ("scripted-loop", "03_sliding_window", "masked_window"): "import math\n\n\n"
    + inspect.getsource(_window_attention_loop)
    + "\n\nwindow_attention = torch.jit.script(_window_attention_loop)\n",
    ("backward-kernel", "05_gated_ffn", "gelu"): """
def gelu_derivative(z):
    return torch.ops.aten.gelu_backward(torch.ones_like(z), z)
""",
}


@needs_sandbox
def test_the_sandboxed_grader_scores_each_route_as_the_notebooks_own_kernel_does(tmp_path):
    """The routes, handed in as notebooks: the grading kernel (sandboxed, started by kernel_launcher)
    refuses them as this process does, so a notebook's own check and its grade agree."""
    notebooks = {}
    for (student, assignment, answer_id), route in ROUTES.items():
        answer = solution_sources(assignment)[answer_id]
        notebooks[student, assignment] = with_answer(perfect(assignment), answer_id, answer + route)
        (tmp_path / "in" / student).mkdir(parents=True)
        nbformat.write(notebooks[student, assignment], tmp_path / "in" / student / f"{assignment}.ipynb")
    (tmp_path / "out" / "work").mkdir(parents=True)
    (tmp_path / "out" / "work" / "case_seed").write_text(str(BATCH_SEED))  # the grader's cases
    for row in grade(tmp_path / "in", tmp_path / "out", jobs=1):
        notebook = notebooks[row.student, row.notebook]
        for cell in notebook.cells:  # TorchScript reads source through linecache, as IPython fills it
            linecache.cache[grade_id(cell)] = (len(cell.source), None, cell.source.splitlines(True), "")
        assert row.status == "graded", row
        assert row.score == pytest.approx(score_when_graded(row.notebook, notebook, BATCH_SEED)), row
        assert row.score < row.max_score, row
