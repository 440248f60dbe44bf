"""Checks of notebook 05, gated feed-forward networks.

Key: D input features, F hidden features (d_ff). The two projections of a gated unit are the
student's to name (W and W_g, w1 and w3, one fused Linear): a check finds them by their
shapes, loads the case's matrices into them in both orders, and compares the pair of outputs
sorted by their sum, which no naming or registration order changes.
"""

import numbers

import torch
import torch.nn.functional as F

from ..core import (
    Case,
    Check,
    Concern,
    ErrorHint,
    LibraryUse,
    Outputs,
    Property,
    library_calls,
    names_replaced,
)
from ._toolkit import (
    LARGE_Z,
    MODERATE_Z,
    activation_check,
    bias_free,
    both_orders,
    count_biases,
    derivative_uses,
    gated_parameters,
    sample_z,
    zero,
)

Tensor = torch.Tensor

# ------------------------------------------------------------------------------ GELU

GELU = activation_check(
    "gelu",
    ("gelu", "gelu_derivative"),
    library_calls("torch.nn.functional.gelu", "torch._C._nn.gelu", "torch._C._nn.gelu_"),  # nn.GELU too
    (
        *derivative_uses("torch.nn.functional.gelu"),
        LibraryUse("torch.nn.functional.gelu", sample_z, (("approximate", "tanh"),), derivative=True),
    ),
    (Concern(MODERATE_Z, weight=3), Concern(LARGE_Z, weight=1)),
    [
        "GELU weighs z by the probability that a standard normal variable is below z. Which function "
        "gives that probability, and which torch function computes it from erf?",
        "Test yourself in a new cell: gelu(z) should equal torch.nn.functional.gelu(z) for "
        "z = torch.linspace(-6, 6, 25) (torch.testing.assert_close), gelu_derivative(torch.tensor(0.0)) "
        "should be 0.5, and both should be finite at z = -1000 and 1000.",
        "gelu(z) = z Phi(z) with Phi(z) = (1 + erf(z / sqrt(2))) / 2; by the product rule "
        "gelu'(z) = Phi(z) + z phi(z), where phi(z) = exp(-z^2 / 2) / sqrt(2 pi) is the normal density.",
        "Phi = 0.5 * (1 + torch.erf(z / math.sqrt(2))); "
        "phi = torch.exp(-0.5 * z * z) / math.sqrt(2 * math.pi); return z * Phi and Phi + z * phi. "
        "Not the tanh approximation: this question asks for the exact GELU.",
    ],
    notebook="05",
    answer="gelu",
)

# ----------------------------------------------------------------------------- SiGLU

SIGLU_CORE = "(W x) * sigmoid(W_g x)"
BIAS_FREE = "no bias terms, as the question asks"


def run_siglu(siglu_class, case: Case) -> Outputs:
    if "count_biases" in case.inputs:
        return count_biases(siglu_class, [(a, b) for a, b in case.inputs["count_biases"]])
    x, w, w_gate = (case.inputs[k] for k in ("x", "w", "w_gate"))
    layer = siglu_class(w.shape[1], w.shape[0])
    found = gated_parameters(layer, w.shape[1], w.shape[0])
    zero(found.biases)  # a bias costs the bias concern only
    y, y_swapped = both_orders(lambda: layer(x), found.projections, w, w_gate)
    return {"y": y, "y_swapped": y_swapped}


SHAPE_MISMATCH = ErrorHint(
    "shapes cannot be multiplied",
    "each linear maps in_features to out_features: nn.Linear(in_features, out_features, bias=False); "
    "its weight has shape (out_features, in_features), so call W(x), or x @ W.weight.T.",
)

SIGLU = Check(
    name="05.siglu",
    target="SiGLU",
    run=run_siglu,
    concerns=[Concern(SIGLU_CORE, weight=3), Concern(BIAS_FREE, weight=1)],
    outputs={
        # Which of the student's projections gates is theirs to name: both ways are run.
        "y": "SiGLU(x), the case's two matrices loaded into your two projections one way round "
        "(of the two ways, the output whose values sum lower)",
        "y_swapped": "SiGLU(x), the two matrices loaded the other way round "
        "(the output whose values sum higher)",
        "bias vectors": "the number of bias vectors",
    },
    properties=[
        bias_free(
            BIAS_FREE,
            "the layer",
            "the question asks for two nn.Linear(in_features, out_features, bias=False)",
        )
    ],
    error_hints=[SHAPE_MISMATCH],
    hints=[
        "Two projections of the same x, of the same shape: one is passed through a sigmoid and multiplies "
        "the other, element by element. Which one is the gate?",
        "Test it in a new cell: with layer = SiGLU(8, 6) and x = torch.randn(2, 8), layer(x) should have "
        "shape (2, 6) and equal W(x) * torch.sigmoid(W_g(x)) computed by hand with your two linears.",
        "The names are yours: the check finds the two matrices by their shape, (out_features, in_features), "
        "and accepts either as the gate. A bias costs a quarter of the points.",
        "In __init__, two nn.Linear(in_features, out_features, bias=False); in forward, "
        "self.W(x) * torch.sigmoid(self.W_g(x)).",
    ],
)

# ------------------------------------------------------------------------- GLU variants

VARIANT_CONCERNS = {
    "glu": "glu: sigmoid(x W) * (x V)",
    "bilinear": "bilinear: (x W) * (x V)",
    "reglu": "reglu: relu(x W) * (x V)",
    "geglu": "geglu: gelu(x W) * (x V), the exact GELU",
    "swiglu": "swiglu: silu(x W) * (x V)",
}


def run_variant(glu_variant, case: Case) -> Outputs:
    """A glu_variant that calls the notebook's gelu gets the exact GELU in its place: gelu is Question 1's,
    graded in 05.gelu, and its bugs cost that question alone."""
    inputs = case.inputs
    with names_replaced(glu_variant, {"gelu": F.gelu}):
        return {"y": glu_variant(inputs["x"], inputs["w"], inputs["v"], inputs["variant"])}


GLU_VARIANTS = Check(
    name="05.glu_variants",
    target="glu_variant",
    run=run_variant,
    concerns=[Concern(name) for name in VARIANT_CONCERNS.values()],
    outputs={"y": "glu_variant(x, W, V, variant)"},
    error_hints=[
        ErrorHint(
            "KeyError", "look the variant up by its name: 'glu', 'bilinear', 'reglu', 'geglu' or 'swiglu'."
        ),
        ErrorHint("shapes cannot be multiplied", "W and V are (D, F): x @ W, not W @ x nor x @ W.T."),
    ],
    hints=[
        "All five share one pattern: two projections of x, one of them passed through an activation, "
        "multiplied element by element. Only the activation changes; bilinear has none.",
        "Test it in a new cell: for variant 'glu', glu_variant(x, W, V, 'glu') should equal "
        "torch.sigmoid(x @ W) * (x @ V); write the other four from the table the same way and compare.",
        "A dict from name to activation: torch.sigmoid, the identity, torch.relu, the exact GELU "
        "(torch.nn.functional.gelu, or your gelu), torch.nn.functional.silu.",
        "return activations[variant](x @ w) * (x @ v): the activation goes on x W, as in the paper.",
    ],
    hidden_points=1.0,
)

# ---------------------------------------------------------------------- parameter counts

FFN_COUNT = "ffn_parameters(hidden_size, d_ff, gated)"
LLAMA_DIM = "llama_hidden_dim(hidden_size, multiple_of)"


def run_count(functions, case: Case) -> Outputs:
    ffn_parameters, llama_hidden_dim = functions
    function = ffn_parameters if case.inputs["function"] == "ffn" else llama_hidden_dim
    value = function(*case.inputs["args"])
    if isinstance(value, Tensor) and value.numel() == 1:
        value = value.item()
    if not isinstance(value, numbers.Real):  # a string would parse as a number: not a count
        raise TypeError(f"the function returned a {type(value).__name__}, not a number: return an int")
    if isinstance(value, numbers.Integral) or float(value).is_integer():  # 3.0 is a count, 3.5 is not
        value = int(value)
        if abs(value) < 2**63:
            return {"count": torch.tensor(value)}
    return {"count": torch.tensor(float(value), dtype=torch.float64)}  # compared, and named not whole


def _whole_number(case: Case, out: Outputs) -> str | None:
    count = out["count"]
    if not count.is_floating_point():
        return None
    return f"returned {count.item():.10g}, which is not a whole number: a count is an int (use // to divide)"


PARAMETER_COUNT = Check(
    name="05.parameter_count",
    target=("ffn_parameters", "llama_hidden_dim"),
    answer="parameter_count",
    run=run_count,
    concerns=[Concern(FFN_COUNT), Concern(LLAMA_DIM)],
    outputs={"count": "the number returned"},
    properties=[Property("a whole number", _whole_number)],
    hints=[
        "Count the entries of each weight matrix: a bias-free nn.Linear(a, b) holds a * b numbers. How many "
        "such matrices does a ReLU MLP have, and how many a gated one?",
        "Test yourself: sum(p.numel() for p in module.parameters()) of a module you build gives the count "
        "for any sizes. For Llama 7B, llama_hidden_dim(4096, 256) is 11008.",
        "ffn_parameters: 2 * D * d_ff without a gate, 3 * D * d_ff with one. llama_hidden_dim: start from "
        "4 D, take two thirds of it as an integer, then round UP to a multiple of multiple_of.",
        "hidden = int(2 * 4 * hidden_size / 3); "
        "return multiple_of * ((hidden + multiple_of - 1) // multiple_of).",
    ],
    hidden_points=1.0,
)

CHECKS = [GELU, SIGLU, GLU_VARIANTS, PARAMETER_COUNT]
