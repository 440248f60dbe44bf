"""Known gaps: routes to what a question forbids or measures that the in-kernel guards
(core.SeenFromPython, OperationWatch, OperationCount, lent_model) do not see, found by a fresh
attacker on this round's code (docs/security.md, "What is not covered"). Each is written as a
student would; each is expected to fail while its gap is open, and fails the suite once it closes
(strict), so that the docs are corrected with it. A fork's child, which records what it runs in
its own copy of the watches, is the same class; it is not forked here."""

import importlib
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from autograder.checks.sliding_window import LINEAR_MEMORY, VECTORISED

from .helpers.submissions import parts, verdict
from .test_forbidden_routes import _window_attention_loop

VISIBLE_AND_HIDDEN = pytest.mark.parametrize("seed", [None, 7], ids=["visible", "hidden"])
pytestmark = pytest.mark.xfail(
    strict=True,
    reason="open: torch's modes are per thread and paused in a subclass's handler; a name built at run time",
)
_POOL = ThreadPoolExecutor(1)


def in_a_thread(function):
    """Torch function and dispatch modes are thread-local: a worker thread runs with neither."""

    def run(*args, **kwargs):
        return _POOL.submit(function, *args, **kwargs).result()

    return run


def _measured_parts_passed(result) -> bool:
    return any(passed for concern, passed in parts(result).items() if concern in (VECTORISED, LINEAR_MEMORY))


# ------------------------------------------------------------------------ a worker thread


@VISIBLE_AND_HIDDEN
def test_library_gelu_and_its_backward_in_a_thread_earn_nothing(seed):
    """F.gelu and aten.gelu_backward run in a pool thread: 1 of 1 point, visible and hidden (2 of 2)."""
    answer = (
        in_a_thread(lambda z: F.gelu(z)),
        in_a_thread(lambda z: torch.ops.aten.gelu_backward(torch.ones_like(z), z)),
    )
    result = verdict("05.gelu", answer, seed)
    assert result.points == 0, result.message


@VISIBLE_AND_HIDDEN
def test_library_softmax_in_a_thread_earns_nothing(seed):
    for name, answer in (
        ("01.softmax", in_a_thread(lambda x, dim=-1: torch.softmax(x, dim))),
        ("11.online_softmax", in_a_thread(lambda scores, block_size: torch.softmax(scores, -1))),
        (
            "11.tiled_attention",
            in_a_thread(
                lambda q, k, v, block_size, causal=False: F.scaled_dot_product_attention(
                    q, k, v, is_causal=causal
                )
            ),
        ),
    ):
        result = verdict(name, answer, seed)
        assert result.points == 0, (name, result.message)


@VISIBLE_AND_HIDDEN
def test_a_loop_with_a_full_mask_in_a_thread_earns_no_measured_part(seed):
    result = verdict("03.masked_window", in_a_thread(_window_attention_loop), seed)
    assert not _measured_parts_passed(result), result.message


def test_the_gradient_from_autograd_in_a_thread_earns_nothing():
    def step(x, y, w, b, lr):
        w_, b_ = w.clone().requires_grad_(), b.clone().requires_grad_()
        with torch.enable_grad():
            loss = (torch.sigmoid(x @ w_ + b_) - y).pow(2).mean()
            grad_w, grad_b = torch.autograd.grad(loss, (w_, b_))
        return (w - lr * grad_w).detach(), (b - lr * grad_b).detach()

    result = verdict("00.gradient_step", in_a_thread(step))
    assert result.points == 0, result.message


# -------------------------------------------------------------------------- a forked child


# ----------------------------------------------- a tensor subclass's __torch_function__


class _RunsItsJob(torch.Tensor):
    """A torch function mode is popped while its handler runs the call: whatever this subclass's handler
    does then is out of an OperationCount's sight, yet `running` says a Python call issued it."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if func is torch.neg:
            return args[0].job()
        with torch._C.DisableTorchFunctionSubclass():
            return func(*args, **(kwargs or {}))


def _loop_inside_a_subclass_call(queries, keys, values, window_size, causal=False):
    hider = torch.empty(0).as_subclass(_RunsItsJob)
    hider.job = lambda: _window_attention_loop(queries, keys, values, window_size, causal)
    return torch.neg(hider)


@VISIBLE_AND_HIDDEN
def test_a_loop_run_by_a_subclass_handler_earns_no_measured_part(seed):
    """Before: 0.6 of 1 visible, 1.2 of 2 hidden for the plain loop; 1.0 and 2.0 through the subclass."""
    result = verdict("03.masked_window", _loop_inside_a_subclass_call, seed)
    assert not _measured_parts_passed(result), result.message


# ------------------------------------------------- the lent model, found by a string at run time


class FeedForwardFromTheLentModule(nn.Module):
    def __init__(self, hidden_size, d_ff):
        super().__init__()
        lent = importlib.import_module("autograder." + "language_model")
        self.lent = [getattr(lent, "Course" + "Expert")({"hidden_size": hidden_size, "d_ff": d_ff})]
        self.w1, self.w2, self.w3 = self.lent[0].w1, self.lent[0].w2, self.lent[0].w3

    def forward(self, x):
        return self.lent[0](x)


class MoeLayerFromSysModules(nn.Module):
    def __init__(self, hidden_size, d_ff, num_experts, n_experts_per_token):
        super().__init__()
        lent = sys.modules["autograder." + "language_model"]
        config = dict(hidden_size=hidden_size, d_ff=d_ff, num_experts=num_experts)
        self.lent = {
            "layer": getattr(lent, "Course" + "Moe")({**config, "n_experts_per_token": n_experts_per_token})
        }
        self.gate, self.experts = self.lent["layer"].gate, self.lent["layer"].experts
        self.num_experts, self.n_experts_per_token = num_experts, n_experts_per_token

    def forward(self, x):
        return self.lent["layer"](x)


@VISIBLE_AND_HIDDEN
@pytest.mark.parametrize(
    ("check", "answer"),
    [("06.feed_forward", FeedForwardFromTheLentModule), ("06.moe_init", MoeLayerFromSysModules)],
)
def test_the_lent_model_reached_by_a_string_earns_nothing(check, answer, seed):
    """Names built at run time escape the static walk of the answer's class: 1 + 1 point each before."""
    result = verdict(check, answer, seed)
    assert result.points == 0, result.message
