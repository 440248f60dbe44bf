"""Correct answers to notebook 05 (gated feed-forward networks) written differently from the reference.

The original homework (seed 001, Question 16) asks for SiGLU "without the bias terms" with two
linear layers named W and Wg: its solutions name them so, in either order, or fuse them into
one nn.Linear(in, 2 * out). All must pass.
"""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.distributions import Normal

from grader.casework import Answer

# ------------------------------------------------------------------------------- GELU

STANDARD_NORMAL = Normal(0.0, 1.0)


def gelu_ndtr(z):
    """torch.special.ndtr is the standard normal CDF Phi."""
    return z * torch.special.ndtr(z)


def gelu_ndtr_derivative(z):
    """The density as exp of the normal's log_prob (float32 parameters; a float64 z stays float64)."""
    return torch.special.ndtr(z) + z * torch.exp(STANDARD_NORMAL.log_prob(z))


def gelu_normal_cdf(z):
    return z * STANDARD_NORMAL.cdf(z)


def gelu_erfc_derivative(z):
    """Phi(z) = erfc(-z / sqrt(2)) / 2; the density written with math.pi inside one sqrt."""
    cdf = 0.5 * torch.erfc(-z * math.sqrt(0.5))
    return cdf + z * torch.exp(-(z**2) / 2) * (2 * math.pi) ** -0.5


# ------------------------------------------------------------------------------ SiGLU


class SiGLUHomework(nn.Module):
    """The homework's names W and Wg, the gate registered first."""

    def __init__(self, in_features, out_features):
        super().__init__()
        self.Wg = nn.Linear(in_features, out_features, bias=False)
        self.W = nn.Linear(in_features, out_features, bias=False)

    def forward(self, x):
        return self.W(x) * torch.sigmoid(self.Wg(x))


class SiGLUFusedChunk(nn.Module):
    """One fused projection (W above W_g), split in two halves with chunk."""

    def __init__(self, in_features, out_features):
        super().__init__()
        self.proj = nn.Linear(in_features, 2 * out_features, bias=False)

    def forward(self, x):
        value, gate = self.proj(x).chunk(2, dim=-1)  # each (..., out_features)
        return value * torch.sigmoid(gate)


class SiGLUFusedGLU(nn.Module):
    """F.glu on the fused projection: the first half times the sigmoid of the second."""

    def __init__(self, in_features, out_features):
        super().__init__()
        self.fused = nn.Linear(in_features, 2 * out_features, bias=False)

    def forward(self, x):
        return F.glu(self.fused(x), dim=-1)


class SiGLUParameters(nn.Module):
    """Raw (out, in) matrices as nn.Parameter, applied with F.linear and einsum."""

    def __init__(self, in_features, out_features):
        super().__init__()
        self.gate_weight = nn.Parameter(torch.randn(out_features, in_features) * in_features**-0.5)
        self.weight = nn.Parameter(torch.randn(out_features, in_features) * in_features**-0.5)

    def forward(self, x):
        return torch.einsum("...i,oi->...o", x, self.weight) * torch.special.expit(
            F.linear(x, self.gate_weight)
        )


# ----------------------------------------------------------------------- GLU variants


def _gelu_erf(h):
    return 0.5 * h * (1 + torch.erf(h / math.sqrt(2)))


def glu_variant_if_elif(x, w, v, variant):
    """if/elif on the name, with its own exact GELU."""
    gate, value = x @ w, x @ v
    if variant == "glu":
        gate = torch.sigmoid(gate)
    elif variant == "bilinear":
        pass
    elif variant == "reglu":
        gate = F.relu(gate)
    elif variant == "geglu":
        gate = _gelu_erf(gate)
    elif variant == "swiglu":
        gate = gate * torch.sigmoid(gate)
    else:
        raise ValueError(f"unknown variant {variant!r}")
    return gate * value


def glu_variant_einsum_modules(x, w, v, variant):
    """einsum projections and nn activation modules."""
    modules = {
        "glu": nn.Sigmoid(),
        "bilinear": nn.Identity(),
        "reglu": nn.ReLU(),
        "geglu": nn.GELU(),
        "swiglu": nn.SiLU(),
    }
    return modules[variant](torch.einsum("...d,df->...f", x, w)) * torch.einsum("...d,df->...f", x, v)


# ------------------------------------------------------------------ parameter counts


def ffn_parameters_modules(hidden_size, d_ff, gated):
    """Builds the network's linears on the meta device (no memory) and sums their numel."""
    shapes = [(hidden_size, d_ff)] * (2 if gated else 1) + [(d_ff, hidden_size)]
    layers = nn.ModuleList(nn.Linear(a, b, bias=False, device="meta") for a, b in shapes)
    return sum(p.numel() for p in layers.parameters())


def llama_hidden_dim_ceil(hidden_size, multiple_of):
    hidden = int(2 * (4 * hidden_size) / 3)
    return multiple_of * math.ceil(hidden / multiple_of)


def ffn_parameters_float(hidden_size, d_ff, gated):
    """A float that is a whole number: 3.0 * D * d_ff."""
    return (3.0 if gated else 2.0) * hidden_size * d_ff


def llama_hidden_dim_negative_floor(hidden_size, multiple_of):
    """Integer arithmetic throughout: 8 D // 3, then the ceiling as -(-h // m)."""
    hidden = 8 * hidden_size // 3
    return -(-hidden // multiple_of) * multiple_of


ALTERNATIVES = {
    "05.gelu": [
        Answer("gelu_ndtr", gelu_ndtr, gelu_ndtr_derivative),
        Answer("gelu_normal_cdf", gelu_normal_cdf, gelu_erfc_derivative),
    ],
    "05.siglu": [SiGLUHomework, SiGLUFusedChunk, SiGLUFusedGLU, SiGLUParameters],
    "05.glu_variants": [glu_variant_if_elif, glu_variant_einsum_modules],
    "05.parameter_count": [
        Answer("modules_and_ceil", ffn_parameters_modules, llama_hidden_dim_ceil),
        Answer("float_and_negative_floor", ffn_parameters_float, llama_hidden_dim_negative_floor),
    ],
}
