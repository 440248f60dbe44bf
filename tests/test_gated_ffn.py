"""Notebook 05 (gated feed-forward networks): the reference against PyTorch's own functions, and
how the checks grade answers that students write: SiGLU with the homework's biases or with
linears of the wrong shape, GPT-2's tanh GELU, a parameter count returned as a float.

Key: D input features (hidden_size), F hidden features (d_ff).
"""

import math

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from autograder import reference
from autograder.checks.gated_ffn import BIAS_FREE, FFN_COUNT, LLAMA_DIM, SIGLU_CORE, VARIANT_CONCERNS
from autograder.checks.warmup import LARGE_Z, MODERATE_Z
from autograder.core import TOLERANCES

from .helpers.submissions import names_the_notebook_binds, parts, verdict

ASSIGNMENT = "05_gated_ffn"
RTOL, ATOL = TOLERANCES[torch.float32]
HIDDEN_SEED = 5
VISIBLE_AND_HIDDEN = pytest.mark.parametrize("seed", [None, HIDDEN_SEED], ids=["visible", "hidden"])


def ref(name: str):
    return reference.namespace(ASSIGNMENT)[name]


# ------------------------------------------------------------------ the reference itself


def test_reference_gelu_is_pytorchs_exact_gelu_and_its_autograd_slope():
    z = torch.linspace(-8, 8, 161, dtype=torch.float64, requires_grad=True)
    (slope,) = torch.autograd.grad(F.gelu(z).sum(), z)
    torch.testing.assert_close(ref("gelu")(z), F.gelu(z))
    torch.testing.assert_close(ref("gelu_derivative")(z.detach()), slope)


def test_reference_glu_variants_are_the_library_functions():
    g = torch.Generator().manual_seed(0)
    x, w, v = (
        torch.randn(2, 3, 6, generator=g),
        torch.randn(6, 10, generator=g),
        torch.randn(6, 10, generator=g),
    )
    glu_variant = ref("glu_variant")
    # F.glu(h) is h's first half times the sigmoid of its second: the gate x W goes second.
    torch.testing.assert_close(glu_variant(x, w, v, "glu"), F.glu(torch.cat([x @ v, x @ w], dim=-1), dim=-1))
    torch.testing.assert_close(glu_variant(x, w, v, "swiglu"), F.silu(x @ w) * (x @ v), rtol=RTOL, atol=ATOL)
    torch.testing.assert_close(
        glu_variant(x, w, v, "geglu"), nn.GELU()(x @ w) * (x @ v), rtol=RTOL, atol=ATOL
    )


@pytest.mark.parametrize(("hidden_size", "d_ff"), [(4096, 11008), (5120, 13824), (8192, 22016)])
def test_reference_llama_hidden_dims_are_llamas(hidden_size, d_ff):
    """Llama 7B, 13B and 65B (multiple_of 256)."""
    assert ref("llama_hidden_dim")(hidden_size, 256) == d_ff


@pytest.mark.parametrize("gated", [False, True], ids=["relu", "gated"])
def test_reference_parameter_count_is_what_modules_hold(gated):
    d, f = 48, 128
    shapes = [(d, f)] * (2 if gated else 1) + [(f, d)]
    layers = nn.ModuleList(nn.Linear(a, b, bias=False) for a, b in shapes)
    assert ref("ffn_parameters")(d, f, gated) == sum(p.numel() for p in layers.parameters())


# ------------------------------------------------------------------------------ SiGLU


class SiGLUWithBiases(nn.Module):
    """The homework's formula, (W x + b) * sigmoid(W_g x + b_g), with its names W and Wg."""

    def __init__(self, in_features, out_features):
        super().__init__()
        self.W = nn.Linear(in_features, out_features)
        self.Wg = nn.Linear(in_features, out_features)

    def forward(self, x):
        return self.W(x) * torch.sigmoid(self.Wg(x))


@VISIBLE_AND_HIDDEN
def test_a_siglu_with_biases_loses_only_the_bias_concern(seed):
    result = verdict("05.siglu", SiGLUWithBiases, seed)
    assert parts(result) == {SIGLU_CORE: True, BIAS_FREE: False}, result.message
    assert result.points == pytest.approx(result.max_points * 3 / 4)
    assert "bias=False" in result.message, result.message


class SiGLUSwappedLinears(nn.Module):
    """nn.Linear(out_features, in_features): the arguments in the wrong order."""

    def __init__(self, in_features, out_features):
        super().__init__()
        self.W = nn.Linear(out_features, in_features, bias=False)
        self.W_g = nn.Linear(out_features, in_features, bias=False)

    def forward(self, x):
        return self.W(x) * torch.sigmoid(self.W_g(x))


@VISIBLE_AND_HIDDEN
def test_a_siglu_with_linears_of_the_wrong_shape_is_told_the_shapes(seed):
    result = verdict("05.siglu", SiGLUSwappedLinears, seed)
    assert result.points == 0
    core = next(part for part in result.parts if part.concern == SIGLU_CORE)
    # The first visible case is SiGLU(8, 6); hidden cases draw their own sizes.
    sizes = "(6, 8)" if seed is None else ""
    assert f"expected two weight matrices of shape {sizes}" in core.message, core.message
    assert "your module's parameters: W.weight (" in core.message, core.message
    assert "nn.Linear(" in core.message and "bias=False" in core.message, core.message
    assert "not of the expected form" not in result.message, result.message


def test_the_wrong_shapes_are_named_exactly():
    result = verdict("05.siglu", SiGLUSwappedLinears)
    assert "your module's parameters: W.weight (8, 6), W_g.weight (8, 6)" in result.message, result.message


# ------------------------------------------------------------------------------- GELU

TANH_NAME = "the tanh approximation of GELU (GPT-2's)"


def gelu_tanh_as_sigmoid(z):
    """GPT-2's GELU, written with the identity (1 + tanh(u)) / 2 = sigmoid(2 u)."""
    return z * torch.sigmoid(2 * math.sqrt(2 / math.pi) * (z + 0.044715 * z.pow(3)))


def gelu_tanh_as_sigmoid_derivative(z):
    u = math.sqrt(2 / math.pi) * (z + 0.044715 * z.pow(3))
    s = torch.sigmoid(2 * u)
    return s + z * 2 * s * (1 - s) * math.sqrt(2 / math.pi) * (1 + 3 * 0.044715 * z * z)


def gelu_exact_derivative(z):
    cdf = 0.5 * (1 + torch.erf(z / math.sqrt(2)))
    return cdf + z * torch.exp(-z * z / 2) / math.sqrt(2 * math.pi)


def test_the_tanh_approximation_is_named_and_charged_where_it_is_off():
    """Off by up to 5e-4 at moderate z, and exact at large |z|, where it neither overflows nor errs:
    the large-z part, which judges large z alone, pays it."""
    result = verdict("05.gelu", (gelu_tanh_as_sigmoid, gelu_tanh_as_sigmoid_derivative))
    graded = {part.concern: part.passed for part in result.parts}
    assert graded == {MODERATE_Z: False, LARGE_Z: True}, result.message
    assert f"Looks like: {TANH_NAME}" in result.message, result.message


def test_the_tanh_approximation_with_the_exact_derivative_is_named_in_part():
    result = verdict("05.gelu", (gelu_tanh_as_sigmoid, gelu_exact_derivative))
    assert not result.passed
    assert TANH_NAME in result.message, result.message


def test_the_library_tanh_gelu_is_refused_as_a_library_call():
    """F.gelu is torch._C._nn.gelu itself in torch 2.13: the message names the public spelling."""
    result = verdict("05.gelu", (lambda z: F.gelu(z, approximate="tanh"), gelu_exact_derivative))
    assert result.points == 0
    assert (
        "your code calls torch.nn.functional.gelu, which is what this question asks you to write yourself"
        in (result.message)
    ), result.message


def glu_variant_tanh_geglu(x, w, v, variant):
    activations = {
        "glu": torch.sigmoid,
        "bilinear": lambda h: h,
        "reglu": F.relu,
        "geglu": lambda h: F.gelu(h, approximate="tanh"),
        "swiglu": F.silu,
    }
    return activations[variant](x @ w) * (x @ v)


@VISIBLE_AND_HIDDEN
def test_geglu_with_the_tanh_gelu_loses_only_geglu(seed):
    result = verdict("05.glu_variants", glu_variant_tanh_geglu, seed)
    geglu = VARIANT_CONCERNS["geglu"]
    assert parts(result) == {concern: concern != geglu for concern in VARIANT_CONCERNS.values()}, (
        result.message
    )
    assert "Looks like: geglu with the tanh approximation of GELU" in result.message, result.message


# ------------------------------------------------------------------ parameter counts


def ffn_parameters_float(hidden_size, d_ff, gated):
    return (3.0 if gated else 2.0) * hidden_size * d_ff


def ffn_parameters_half_off(hidden_size, d_ff, gated):
    """A count that is not a whole number: 3.5 for D = d_ff = 1, gated."""
    return (3 if gated else 2) * hidden_size * d_ff + 0.5


def llama_hidden_dim_float(hidden_size, multiple_of):
    """Two thirds of 4 D left a float, never truncated nor rounded up: 10922.67 for Llama 7B."""
    return 2 * 4 * hidden_size / 3


@VISIBLE_AND_HIDDEN
def test_a_whole_float_count_passes(seed):
    result = verdict("05.parameter_count", (ffn_parameters_float, ref("llama_hidden_dim")), seed)
    assert result.passed, result.message


def test_a_count_with_a_fraction_fails_on_its_own_part():
    result = verdict("05.parameter_count", (ffn_parameters_half_off, ref("llama_hidden_dim")))
    assert parts(result) == {FFN_COUNT: False, LLAMA_DIM: True}, result.message
    assert "case ffn_parameters(512, 2048, gated=False): the number returned" in result.message, (
        result.message
    )
    assert "float64" in result.message, result.message


def test_a_hidden_dim_left_a_float_fails():
    result = verdict("05.parameter_count", (ref("ffn_parameters"), llama_hidden_dim_float))
    assert parts(result) == {FFN_COUNT: True, LLAMA_DIM: False}, result.message
    assert "case llama_hidden_dim(4096, multiple_of=256): the number returned" in result.message, (
        result.message
    )


# ---------------------------------------------------------------------- the mistakes file


def test_mistakes_file_redefines_none_of_the_notebooks_names():
    """Only the imports may be shared (the same modules); a shared answer name (gelu, SiGLU) would
    replace the notebook's, and a shared variable (x, relu, swiglu) would be rebound under the
    mistakes' feet by a later cell."""
    module = reference.instructor_module(ASSIGNMENT, "mistakes.py")
    notebook = reference.namespace(ASSIGNMENT)
    shared = {name for name in vars(module) if name in names_the_notebook_binds(ASSIGNMENT)}
    assert all(name in notebook and vars(module)[name] is notebook[name] for name in shared), shared


def ffn_parameters_numpy(hidden_size, d_ff, gated):
    return np.int64((3 if gated else 2) * hidden_size * d_ff)


def test_a_count_returned_as_a_numpy_integer_passes():
    result = verdict("05.parameter_count", (ffn_parameters_numpy, ref("llama_hidden_dim")))
    assert result.passed, result.message


class SiGLUBiasedOffTheCountedShape(nn.Module):
    """Biases everywhere but at the size of the first case (the red team's, once the only size counted)."""

    def __init__(self, in_features, out_features):
        super().__init__()
        bias = (in_features, out_features) != (8, 6)
        self.W = nn.Linear(in_features, out_features, bias=bias)
        self.W_g = nn.Linear(in_features, out_features, bias=bias)

    def forward(self, x):
        return self.W(x) * torch.sigmoid(self.W_g(x))


def test_biases_cannot_hide_from_the_case_that_counts_them():
    assert not parts(verdict("05.siglu", SiGLUBiasedOffTheCountedShape))[BIAS_FREE]


def test_a_count_returned_as_text_is_refused():
    result = verdict("05.parameter_count", (lambda d, f, gated: str(3 * d * f), ref("llama_hidden_dim")))
    assert "the function returned a str, not a number" in result.message, result.message


GLU_VARIANT_ON_OWN_GELU = """
import math
import torch

def gelu(z):  # GPT-2's tanh approximation: Question 1's mistake
    return 0.5 * z * (1 + torch.tanh(math.sqrt(2 / math.pi) * (z + 0.044715 * z**3)))

def glu_variant(x, w, v, variant):
    gates = {"glu": torch.sigmoid, "bilinear": lambda h: h, "reglu": torch.relu, "geglu": gelu}
    gates["swiglu"] = torch.nn.functional.silu
    return gates[variant](x @ w) * (x @ v)
"""


@VISIBLE_AND_HIDDEN
def test_a_glu_variant_on_a_wrong_gelu_of_question_1_is_charged_there_only(seed):
    """One bug, one charge: the tanh gelu of Question 1 costs 05.gelu, not 05.glu_variants' geglu share."""
    names = {}
    exec(GLU_VARIANT_ON_OWN_GELU, names)
    assert not verdict("05.gelu", (names["gelu"], ref("gelu_derivative")), seed).passed
    result = verdict("05.glu_variants", names["glu_variant"], seed)
    assert result.passed, result.message
    assert names["gelu"].__name__ == "gelu"  # the notebook's own gelu is back in place


def llama_hidden_dim_nearest_multiple(hidden_size, multiple_of):
    return multiple_of * round(int(2 * 4 * hidden_size / 3) / multiple_of)


@VISIBLE_AND_HIDDEN
def test_rounding_to_the_nearest_multiple_is_named(seed):
    """It fails where it rounds down, with the rounded-down values there: the one mistake names both
    (a newcomer's nearest multiple was named 'rounded down' alone)."""
    result = verdict("05.parameter_count", (ref("ffn_parameters"), llama_hidden_dim_nearest_multiple), seed)
    assert parts(result) == {FFN_COUNT: True, LLAMA_DIM: False}, result.message
    assert "Looks like: rounded down (or to the nearest multiple)" in result.message, result.message
