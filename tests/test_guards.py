"""Answers that are not answers: the library function a question asks for, and a spirals model
or training loop that only looks trained. Each is written out as a student would, and must fail
with a message that says what it did."""

import math
from functools import cache

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from autograder import CHECKS, reference
from autograder.checks.attention import _LibraryAttention
from autograder.playground import spirals_split

from .helpers.submissions import verdict

_warmup = reference.instructor_module("00_warmup", "alternatives.py")  # solutions/00_warmup/
relu_heaviside_derivative, relu_where = _warmup.relu_heaviside_derivative, _warmup.relu_where
sigmoid_where, sigmoid_where_derivative = _warmup.sigmoid_where, _warmup.sigmoid_where_derivative
silu_expit, silu_expit_derivative = _warmup.silu_expit, _warmup.silu_expit_derivative
step_einsum = _warmup.step_einsum
attention_einsum = reference.instructor_module("01_attention", "alternatives.py").attention_einsum

HIDDEN_SEED = 7


def reference_of(name):
    return reference.reference_object(name, CHECKS[name].target)


# ------------------------------------------------------- library calls that are the answer


def step_autograd_grad(x, y, w, b, lr):
    """Switches grad back on inside the check's torch.no_grad()."""
    w, b = w.clone().requires_grad_(), b.clone().requires_grad_()
    with torch.enable_grad():
        grad_w, grad_b = torch.autograd.grad((torch.sigmoid(x @ w + b) - y).pow(2).mean(), (w, b))
    return (w - lr * grad_w).detach(), (b - lr * grad_b).detach()


def step_backward_or_by_hand(x, y, w, b, lr):
    """Tries .backward(), and falls back on the hand-derived step when it raises."""
    try:
        w_ = w.clone().requires_grad_()
        (torch.sigmoid(x @ w_ + b) - y).pow(2).mean().backward()
    except RuntimeError:
        pass
    return step_einsum(x, y, w, b, lr)


def gelu_erf(z):
    return z * 0.5 * (1 + torch.erf(z / math.sqrt(2)))


def gelu_erf_derivative(z):
    return 0.5 * (1 + torch.erf(z / math.sqrt(2))) + z * torch.exp(-0.5 * z * z) / math.sqrt(2 * math.pi)


def derivative_by_autograd(f):
    def derivative(z):
        with torch.enable_grad():
            z = z.detach().requires_grad_()
            (slope,) = torch.autograd.grad(f(z).sum(), z)
        return slope

    return derivative


def softmax_by_log(x, dim=-1):
    return F.log_softmax(x, dim=dim).exp()


def attention_with_torch(q, k, v, mask=None):
    """PyTorch's attention for the output, the weights written out."""
    output = F.scaled_dot_product_attention(q, k, v, attn_mask=None if mask is None else ~mask)
    return output, attention_einsum(q, k, v, mask)[1]


class MHAWithTorch(nn.Module):
    """The given __init__, and nn.MultiheadAttention's computation on its weights."""

    def __init__(self, hidden_size, num_heads):
        super().__init__()
        self.torch_attention = nn.MultiheadAttention(hidden_size, num_heads, batch_first=True)
        self.num_heads = num_heads
        self.q_proj, self.k_proj, self.v_proj, self.o_proj = (
            nn.Linear(hidden_size, hidden_size) for _ in "qkvo"
        )

    def forward(self, x, context=None, mask=None):
        source = x if context is None else context
        with torch.no_grad():
            weights = torch.cat([self.q_proj.weight, self.k_proj.weight, self.v_proj.weight])
            self.torch_attention.in_proj_weight.copy_(weights)
            self.torch_attention.in_proj_bias.copy_(
                torch.cat([self.q_proj.bias, self.k_proj.bias, self.v_proj.bias])
            )
            self.torch_attention.out_proj.load_state_dict(self.o_proj.state_dict())
        B, Tq, Tk = x.shape[0], x.shape[1], source.shape[1]
        if mask is not None:
            mask = mask.expand(B, self.num_heads, Tq, Tk).reshape(B * self.num_heads, Tq, Tk)
        return self.torch_attention(x, source, source, attn_mask=mask, need_weights=False)[0]


class RMSNormWithTorch(nn.Module):
    def __init__(self, hidden_size, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(hidden_size))

    def _norm(self, x):
        return F.rms_norm(x, (x.shape[-1],), eps=self.eps)

    def forward(self, x):
        return (self._norm(x.float()) * self.weight.float()).type_as(x)


class RMSNormWithATen(RMSNormWithTorch):
    """The same operation reached by its ATen name, past the Python spellings (a red team's)."""

    def _norm(self, x):
        return torch.ops.aten.rms_norm(x, [x.shape[-1]], None, self.eps)


FORBIDDEN_CALLS = [  # (check, answer, the call the message names)
    ("00.mse_loss", F.mse_loss, "torch.nn.functional.mse_loss"),
    (
        "00.mse_loss",
        lambda prediction, target: nn.MSELoss()(prediction, target),
        "torch.nn.functional.mse_loss",
    ),
    ("00.gradient_step", step_autograd_grad, "torch.autograd.grad"),
    ("00.gradient_step", step_backward_or_by_hand, "torch.Tensor.backward"),
    ("00.sigmoid", (torch.sigmoid, sigmoid_where_derivative), "torch.sigmoid"),
    ("00.sigmoid", (F.sigmoid, sigmoid_where_derivative), "torch.Tensor.sigmoid"),
    ("00.sigmoid", (torch.special.expit, sigmoid_where_derivative), "torch.special.expit"),
    ("00.sigmoid", (sigmoid_where, derivative_by_autograd(sigmoid_where)), "torch.autograd.grad"),
    ("00.relu", (F.relu, relu_heaviside_derivative), "torch.nn.functional.relu"),
    ("00.relu", (nn.ReLU(), relu_heaviside_derivative), "torch.nn.functional.relu"),
    ("00.relu", (torch.relu, relu_heaviside_derivative), "torch.relu"),
    ("00.relu", (relu_where, derivative_by_autograd(relu_where)), "torch.autograd.grad"),
    ("00.silu", (F.silu, silu_expit_derivative), "torch.nn.functional.silu"),
    ("00.silu", (nn.SiLU(), silu_expit_derivative), "torch.nn.functional.silu"),
    ("00.silu", (silu_expit, derivative_by_autograd(silu_expit)), "torch.autograd.grad"),
    ("05.gelu", (F.gelu, gelu_erf_derivative), "torch.nn.functional.gelu"),
    ("05.gelu", (nn.GELU(), gelu_erf_derivative), "torch.nn.functional.gelu"),
    ("05.gelu", (gelu_erf, derivative_by_autograd(gelu_erf)), "torch.autograd.grad"),
    ("01.softmax", torch.softmax, "torch.softmax"),
    ("01.softmax", lambda x, dim=-1: x.softmax(dim), "torch.Tensor.softmax"),
    ("01.softmax", lambda x, dim=-1: nn.Softmax(dim)(x), "torch.nn.functional.softmax"),
    ("01.softmax", softmax_by_log, "torch.nn.functional.log_softmax"),
    ("01.attention", attention_with_torch, "torch.nn.functional.scaled_dot_product_attention"),
    ("01.multi_head_attention", MHAWithTorch, "torch.nn.functional.multi_head_attention_forward"),
    ("01.multi_head_attention", _LibraryAttention, "torch.nn.functional.multi_head_attention_forward"),
    ("01.cross_attention", MHAWithTorch, "torch.nn.functional.multi_head_attention_forward"),
    ("01.layer_norm", nn.LayerNorm, "torch.nn.functional.layer_norm"),
    ("07.rmsnorm_norm", RMSNormWithTorch, "torch.nn.functional.rms_norm"),
    ("07.rmsnorm", RMSNormWithTorch, "torch.nn.functional.rms_norm"),
    ("07.rmsnorm", nn.RMSNorm, "torch.nn.functional.rms_norm"),
    ("07.rmsnorm", RMSNormWithATen, "torch.ops.aten.rms_norm"),
    ("01.softmax", lambda x, dim=-1: torch.ops.aten.softmax(x, dim), "torch.ops.aten.softmax"),
    ("11.online_softmax", lambda scores, block_size: torch.softmax(scores, -1), "torch.softmax"),
    (
        "11.online_softmax",
        lambda scores, block_size: torch.exp(
            -F.cross_entropy(
                scores.unsqueeze(-2)
                .expand(*scores.shape[:-1], scores.shape[-1], scores.shape[-1])
                .flatten(0, -2),
                torch.arange(scores.shape[-1]).repeat(scores.numel() // scores.shape[-1]),
                reduction="none",
            )
        ).reshape(scores.shape),
        "torch.nn.functional.cross_entropy",
    ),
    (
        "11.tiled_attention",
        lambda q, k, v, block_size, causal=False: F.scaled_dot_product_attention(q, k, v, is_causal=causal),
        "torch.nn.functional.scaled_dot_product_attention",
    ),
]


@pytest.mark.parametrize("seed", [None, HIDDEN_SEED], ids=["visible", "hidden"])
@pytest.mark.parametrize(
    ("name", "answer", "call"),
    [pytest.param(*row, id=f"{row[0]}: {row[2]} #{k}") for k, row in enumerate(FORBIDDEN_CALLS)],
)
def test_calling_the_library_answer_fails_naming_the_call(name, answer, call, seed):
    result = verdict(name, answer, seed)
    assert not result.passed
    assert f"your code calls {call}, which is what this question asks you to write yourself" in result.message


def test_every_check_that_forbids_calls_is_tried():
    assert {name for name, _, _ in FORBIDDEN_CALLS} == {name for name, c in CHECKS.items() if c.forbidden}


# --------------------------------------------------------- spirals that only look trained


class NearestNeighbourMLP(nn.Module):
    """The red team's model: nn.Linear layers of the right shapes that forward never uses; it
    returns the class of the nearest training point, which `train_by_memory` stores."""

    def __init__(self, width, depth, activation="relu"):
        super().__init__()
        sizes = [2] + [width] * depth + [2]
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(sizes[:-1], sizes[1:], strict=True))
        self.memory = None

    def forward(self, x):
        points, labels = self.memory
        return 10.0 * F.one_hot(labels[torch.cdist(x, points).argmin(dim=1)], 2).float()


def train_by_memory(model, x, y, steps, lr):
    """Takes no step: stores the training points and invents a falling loss curve."""
    model.memory = (x, y)
    return [0.7 * 0.97**k for k in range(steps)]


def train_without_step_honest_start(model, x, y, steps, lr):
    """Takes no step; the first loss is the model's, the others are invented."""
    first = F.cross_entropy(model(x), y).item()
    return [first * 0.97**k for k in range(steps)]


@cache
def pretrained_state(width, depth, activation):
    """An MLP trained on another draw of the spirals, longer than the check allows."""
    MLP, train = reference_of("00.spirals")
    x, y, _, _ = spirals_split(torch.Generator().manual_seed(12345), n_train=2000, n_test=1)
    torch.manual_seed(0)
    model = MLP(width, depth, activation)
    train(model, x, y, 600, 0.01)
    return model.state_dict()


def pretrained_mlp(width, depth, activation="relu"):
    """The reference's MLP, which starts from weights trained before the check runs."""
    model = reference_of("00.spirals")[0](width, depth, activation)
    model.load_state_dict(pretrained_state(width, depth, activation))
    return model


def train_without_step(model, x, y, steps, lr):
    """Takes no step, and returns the model's true (constant) loss."""
    with torch.no_grad():
        return [F.cross_entropy(model(x), y).item()] * steps


SPIRALS_CHEATS = [
    pytest.param(
        lambda mlp, train: (NearestNeighbourMLP, train_by_memory),
        "your model's outputs are not those of the MLP its parameters describe",
        id="nearest neighbour, invented losses",
    ),
    pytest.param(
        lambda mlp, train: (mlp, train_by_memory),
        "train's first loss is 0.7, but the cross-entropy of the model's initial weights",
        id="no step, invented losses",
    ),
    pytest.param(
        lambda mlp, train: (mlp, train_without_step_honest_start),
        "but the cross-entropy of the trained weights on the training points is",
        id="no step, honest first loss, invented others",
    ),
    pytest.param(
        lambda mlp, train: (pretrained_mlp, train_without_step),
        "your MLP classifies the held-out points before any training",
        id="pretrained weights, no step",
    ),
]


@pytest.mark.parametrize("seed", [None, HIDDEN_SEED], ids=["visible", "hidden"])
@pytest.mark.parametrize(("cheat", "message"), SPIRALS_CHEATS)
def test_spirals_that_only_look_trained_fail(cheat, message, seed):
    result = verdict("00.spirals", cheat(*reference_of("00.spirals")), seed)
    assert not result.passed
    assert message in result.message, result.message


def _moe_built_on_the_course_model():
    from autograder import language_model as lm

    class MoeLayer(lm.CourseMoe):  # notebook 10's trained model, lent for inspection, adapted
        def __init__(self, hidden_size, d_ff, num_experts, n_experts_per_token):
            config = {"hidden_size": hidden_size, "d_ff": d_ff, "num_experts": num_experts}
            super().__init__({**config, "n_experts_per_token": n_experts_per_token})

    return MoeLayer


@pytest.mark.parametrize("seed", [None, HIDDEN_SEED])
def test_a_class_built_on_the_lent_course_model_is_refused(seed):
    """Notebook 10 lends the course's trained model (language_model.CourseModel and its parts); a
    class of a notebook-06 or 08 answer that derives from one is named and earns nothing."""
    result = verdict("06.moe_routing", _moe_built_on_the_course_model(), seed)
    assert result.points == 0, result.message
    assert "derives from or borrows autograder.language_model.CourseMoe" in result.message, result.message


def _moe_borrowing_the_course_models_forward():
    from autograder import language_model as lm

    class MoeLayer(nn.Module):
        def __init__(self, hidden_size, d_ff, num_experts, n_experts_per_token):
            super().__init__()
            self.n_experts_per_token = n_experts_per_token
            self.gate = nn.Linear(hidden_size, num_experts, bias=False)
            config = {"hidden_size": hidden_size, "d_ff": d_ff}
            self.experts = nn.ModuleList(lm.CourseExpert(config) for _ in range(num_experts))

        forward = lm.CourseMoe.forward  # borrowed, not derived

    return MoeLayer


@pytest.mark.parametrize("seed", [None, HIDDEN_SEED])
def test_a_class_borrowing_a_method_of_the_lent_model_is_refused(seed):
    result = verdict("06.moe_routing", _moe_borrowing_the_course_models_forward(), seed)
    assert result.points == 0, result.message
    assert "derives from or borrows autograder.language_model.CourseMoe.forward" in result.message, (
        result.message
    )
