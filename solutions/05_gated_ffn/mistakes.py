"""Known wrong answers of notebook 05 (gated feed-forward networks): the judge names them, the
tests use them as mutants.

Instructor-side only (next to the reference, not released). Each is complete and
self-contained, with exactly one thing wrong. The end-to-end tests paste this file into an
answer cell of the notebook, so it defines none of the notebook's names (gelu, SiGLU,
glu_variant, ...) nor of the variables its later cells set (x, w, v, D, relu, swiglu, ...):
its helpers start with an underscore and its answers have names of their own.
"""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from autograder.core import Mistake

# ------------------------------------------------------------------------------- GELU

_SQRT_2 = math.sqrt(2.0)
_SQRT_2_PI = math.sqrt(2.0 * math.pi)
_TANH_C = math.sqrt(2.0 / math.pi)  # GPT-2's approximation: tanh(sqrt(2 / pi) (z + 0.044715 z^3))


def _cdf(z):
    return 0.5 * (1.0 + torch.erf(z / _SQRT_2))


def _density(z):
    return torch.exp(-0.5 * z * z) / _SQRT_2_PI


def gelu_exact(z):
    return z * _cdf(z)


def gelu_exact_derivative(z):
    return _cdf(z) + z * _density(z)


def gelu_tanh(z):
    return 0.5 * z * (1.0 + torch.tanh(_TANH_C * (z + 0.044715 * z**3)))


def gelu_tanh_derivative(z):
    t = torch.tanh(_TANH_C * (z + 0.044715 * z**3))
    return 0.5 * (1.0 + t) + 0.5 * z * (1.0 - t * t) * _TANH_C * (1.0 + 3 * 0.044715 * z * z)


def gelu_sigmoid_1702(z):
    return z * torch.sigmoid(1.702 * z)


def gelu_sigmoid_1702_derivative(z):
    s = torch.sigmoid(1.702 * z)
    return s + 1.702 * z * s * (1.0 - s)


def gelu_as_silu(z):
    return z * torch.sigmoid(z)


def gelu_as_silu_derivative(z):
    s = torch.sigmoid(z)
    return s * (1.0 + z * (1.0 - s))


def _cdf_without_sqrt2(z):
    return 0.5 * (1.0 + torch.erf(z))


def gelu_erf_of_z(z):
    return z * _cdf_without_sqrt2(z)


def gelu_erf_of_z_derivative(z):
    return _cdf_without_sqrt2(z) + z * _density(z)


def gelu_derivative_cdf_only(z):
    return _cdf(z)


def gelu_derivative_density_unnormalised(z):
    return _cdf(z) + z * torch.exp(-0.5 * z * z)


# ------------------------------------------------------------------------------ SiGLU


class _TwoLinears(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.W = nn.Linear(in_features, out_features, bias=False)
        self.W_g = nn.Linear(in_features, out_features, bias=False)


class SiLUGate(_TwoLinears):
    """SwiGLU's gate in place of the sigmoid."""

    def forward(self, x):
        return self.W(x) * F.silu(self.W_g(x))


class SigmoidOfProduct(_TwoLinears):
    def forward(self, x):
        return torch.sigmoid(self.W(x) * self.W_g(x))


class NoGate(_TwoLinears):
    """The gate layer is created and never used."""

    def forward(self, x):
        return self.W(x)


class ProductWithoutSigmoid(_TwoLinears):
    def forward(self, x):
        return self.W(x) * self.W_g(x)


class BothThroughSigmoid(_TwoLinears):
    def forward(self, x):
        return torch.sigmoid(self.W(x)) * torch.sigmoid(self.W_g(x))


class WithBiases(nn.Module):
    """The homework's formula, (W x + b) * sigmoid(W_g x + b_g): nn.Linear's default bias=True."""

    def __init__(self, in_features, out_features):
        super().__init__()
        self.W = nn.Linear(in_features, out_features)
        self.W_g = nn.Linear(in_features, out_features)

    def forward(self, x):
        return self.W(x) * torch.sigmoid(self.W_g(x))


class WithOutputProjection(_TwoLinears):
    """The homework's expert, W_3 applied after the unit, mapping back to in_features."""

    def __init__(self, in_features, out_features):
        super().__init__(in_features, out_features)
        self.W_3 = nn.Linear(out_features, in_features, bias=False)

    def forward(self, x):
        return self.W_3(self.W(x) * torch.sigmoid(self.W_g(x)))


# ---------------------------------------------------------------------- GLU variants

_ACTIVATIONS = {
    "glu": torch.sigmoid,
    "bilinear": lambda h: h,
    "reglu": torch.relu,
    "geglu": F.gelu,
    "swiglu": F.silu,
}


def variant_activation_on_xv(x, w, v, variant):
    return (x @ w) * _ACTIVATIONS[variant](x @ v)


def variant_geglu_tanh(x, w, v, variant):
    activations = {**_ACTIVATIONS, "geglu": lambda h: F.gelu(h, approximate="tanh")}
    return activations[variant](x @ w) * (x @ v)


def variant_swiglu_sigmoid(x, w, v, variant):
    activations = {**_ACTIVATIONS, "swiglu": torch.sigmoid}
    return activations[variant](x @ w) * (x @ v)


def variant_activation_after_product(x, w, v, variant):
    return _ACTIVATIONS[variant]((x @ w) * (x @ v))


def variant_activation_on_both(x, w, v, variant):
    activation = _ACTIVATIONS[variant]
    return activation(x @ w) * activation(x @ v)


# ------------------------------------------------------------------ parameter counts


def ffn_count(hidden_size, d_ff, gated):
    return (3 if gated else 2) * hidden_size * d_ff


def llama_dim(hidden_size, multiple_of):
    hidden = int(2 * 4 * hidden_size / 3)
    return multiple_of * ((hidden + multiple_of - 1) // multiple_of)


def ffn_count_two_matrices(hidden_size, d_ff, gated):
    return 2 * hidden_size * d_ff


def ffn_count_with_biases(hidden_size, d_ff, gated):
    up = (2 if gated else 1) * (hidden_size * d_ff + d_ff)
    return up + d_ff * hidden_size + hidden_size


def llama_dim_rounded_down(hidden_size, multiple_of):
    hidden = int(2 * 4 * hidden_size / 3)
    return multiple_of * (hidden // multiple_of)


def llama_dim_round(hidden_size, multiple_of):
    hidden = round(2 * 4 * hidden_size / 3)
    return multiple_of * ((hidden + multiple_of - 1) // multiple_of)


def llama_dim_ceil_of_float(hidden_size, multiple_of):
    """int() skipped: the float 8 D / 3 rounded up, so 13.33 becomes 14 where Llama gives 13."""
    return multiple_of * math.ceil(2 * 4 * hidden_size / 3 / multiple_of)


def llama_dim_two_thirds_of_d(hidden_size, multiple_of):
    hidden = int(2 * hidden_size / 3)
    return multiple_of * ((hidden + multiple_of - 1) // multiple_of)


def llama_dim_not_rounded(hidden_size, multiple_of):
    return int(2 * 4 * hidden_size / 3)


EXACT_GELU = "GELU(z) = z * Phi(z) with Phi(z) = (1 + erf(z / sqrt(2))) / 2"
DERIVATIVE = "GELU'(z) = Phi(z) + z * phi(z), with phi(z) = exp(-z^2 / 2) / sqrt(2 pi)"
# What to change, in words and the notebook's formulas: the code is the hint ladder's to give.
GATE = (
    "the output is W x times sigmoid(W_g x), element by element: one projection, through the sigmoid, "
    "scales the other"
)
ROUND_UP = "two thirds of 4 D, truncated to an integer, then rounded up to the next multiple of multiple_of"

MISTAKES = {
    "05.gelu": [
        Mistake(
            "the tanh approximation of GELU (GPT-2's), not the exact GELU",
            f"the approximation is off by up to 5e-4, far beyond float32 rounding: {EXACT_GELU}, and "
            f"{DERIVATIVE}.",
            (gelu_tanh, gelu_tanh_derivative),
        ),
        Mistake(
            "the sigmoid approximation z * sigmoid(1.702 z), not the exact GELU",
            f"it is off by up to 0.02: {EXACT_GELU}, and {DERIVATIVE}.",
            (gelu_sigmoid_1702, gelu_sigmoid_1702_derivative),
        ),
        Mistake(
            "SiLU, z * sigmoid(z), instead of GELU",
            f"GELU gates z with the normal CDF, not the sigmoid: {EXACT_GELU}.",
            (gelu_as_silu, gelu_as_silu_derivative),
        ),
        Mistake(
            "Phi(z) written with erf(z) instead of erf(z / sqrt(2))",
            "The standard normal CDF is Phi(z) = (1 + erf(z / sqrt 2)) / 2, as the notebook writes it; erf(z) "
            "alone belongs to a normal variable of variance 1/2.",
            (gelu_erf_of_z, gelu_erf_of_z_derivative),
        ),
        Mistake(
            "GELU'(z) = Phi(z): the product rule's second term z * phi(z) is missing",
            f"By the product rule, d/dz [z * Phi(z)] = Phi(z) + z * Phi'(z), and Phi' is the normal density: "
            f"{DERIVATIVE}.",
            (gelu_exact, gelu_derivative_cdf_only),
        ),
        Mistake(
            "the normal density phi(z) without its factor 1 / sqrt(2 pi)",
            "The normal density phi(z) = exp(-z^2 / 2) / sqrt(2 pi) has that factor so that it integrates "
            "to 1.",
            (gelu_exact, gelu_derivative_density_unnormalised),
        ),
    ],
    "05.siglu": [
        Mistake(
            "the gate is SiLU (that is SwiGLU), not the sigmoid",
            f"this question's unit is the GLU, gated by torch.sigmoid: {GATE}.",
            SiLUGate,
        ),
        Mistake(
            "the sigmoid of the product, sigmoid(W x * W_g x)",
            f"only the gate goes through the sigmoid, and the product comes after it: {GATE}.",
            SigmoidOfProduct,
        ),
        Mistake(
            "no gate: forward returns W(x) alone (the gate layer is never used)",
            f"multiply W(x) by the gate: {GATE}.",
            NoGate,
        ),
        Mistake(
            "no sigmoid: the two projections are multiplied as they are (the bilinear unit)",
            f"pass the gate's projection through torch.sigmoid: {GATE}.",
            ProductWithoutSigmoid,
        ),
        Mistake(
            "both projections go through the sigmoid",
            f"only the gate does; the other projection passes as it is: {GATE}.",
            BothThroughSigmoid,
        ),
        Mistake(
            "the linears keep their biases (nn.Linear's default bias=True)",
            "the question asks for the unit without bias terms: nn.Linear(in_features, out_features, "
            "bias=False) for both.",
            WithBiases,
        ),
        Mistake(
            "an output projection back to in_features after the gate (the homework's whole expert, not "
            "the unit)",
            f"SiGLU is the gated unit alone, of size out_features: {GATE}, with no third linear.",
            WithOutputProjection,
        ),
    ],
    "05.glu_variants": [
        Mistake(
            "the activation on x V instead of x W",
            "in the paper's notation the activation goes on x @ w: activation(x @ w) * (x @ v).",
            variant_activation_on_xv,
        ),
        Mistake(
            "geglu with the tanh approximation of GELU",
            "the question asks for the exact GELU: torch.nn.functional.gelu(h) (approximate='none', "
            "its default), or your gelu from Question 1.",
            variant_geglu_tanh,
        ),
        Mistake(
            "swiglu gated with the sigmoid (that is the GLU)",
            "SwiGLU's activation is SiLU (Swish), h * sigmoid(h): torch.nn.functional.silu.",
            variant_swiglu_sigmoid,
        ),
        Mistake(
            "the activation applied after the product, activation((x W) * (x V))",
            "the activation goes on x @ w alone, before the product: activation(x @ w) * (x @ v).",
            variant_activation_after_product,
        ),
        Mistake(
            "the activation applied to both projections",
            "only x @ w goes through the activation; x @ v is multiplied as it is.",
            variant_activation_on_both,
        ),
    ],
    "05.parameter_count": [
        Mistake(
            "the gated network counted with two matrices, like the ReLU one",
            "a gated network has three weight matrices (W, V and W_2): 3 * hidden_size * d_ff.",
            (ffn_count_two_matrices, llama_dim),
        ),
        Mistake(
            "the biases counted",
            "the networks are bias-free: count only the weight matrices, hidden_size * d_ff each.",
            (ffn_count_with_biases, llama_dim),
        ),
        Mistake(
            # Rounding to the nearest multiple fails where it rounds down, and gives these values there.
            "rounded down (or to the nearest multiple) to a multiple of multiple_of instead of up",
            f"Llama rounds up, so that d_ff is never below 2/3 of 4 D: {ROUND_UP}.",
            (ffn_count, llama_dim_rounded_down),
        ),
        Mistake(
            "two thirds of 4 D rounded to the nearest integer (round) instead of truncated (int)",
            f"Llama truncates with int() before rounding up: {ROUND_UP}.",
            (ffn_count, llama_dim_round),
        ),
        Mistake(
            "two thirds of D instead of two thirds of 4 D",
            f"start from the ReLU network's hidden size 4 D: {ROUND_UP}.",
            (ffn_count, llama_dim_two_thirds_of_d),
        ),
        Mistake(
            "the float 2 * 4 * hidden_size / 3 rounded up to a multiple without int() first",
            f"Llama truncates two thirds of 4 D to an integer before rounding up: {ROUND_UP}.",
            (ffn_count, llama_dim_ceil_of_float),
        ),
        Mistake(
            "int(2 * 4 * hidden_size / 3) returned without rounding up to a multiple of multiple_of",
            f"round it up to the next multiple of multiple_of: {ROUND_UP}.",
            (ffn_count, llama_dim_not_rounded),
        ),
    ],
}
