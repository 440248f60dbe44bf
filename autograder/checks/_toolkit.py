"""What the checks of several notebooks share, in one place: the activation checks, the parameters of
gated units, stand-ins for the parts a check does not grade, attention's library calls. A notebook's
checks import from here, never from another notebook's module. What several notebooks' case
generators share is on the grader's side, in grader/casework.py.
"""

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torch.nn as nn

from ..core import (
    ROUNDING_GAP,
    Case,
    Check,
    Concern,
    ErrorHint,
    LibraryUse,
    NotAsAsked,
    Outputs,
    Property,
    library_calls,
    names_replaced,
)

Tensor = torch.Tensor

# ----------------------- activations, checked as notebook 00 checks them (05's GELU and SiLU too)


# Autograd computes the derivatives that the gradient step and the activations ask for by hand
# (torch.func and torch.autograd.functional call torch.autograd.grad). It has no operation of its own
# to trace: its engine called another way runs out of Python's sight, and is refused as such.
AUTOGRAD = library_calls("torch.autograd.grad", "torch.autograd.backward", "torch.Tensor.backward")


def sample_z() -> tuple:
    return (torch.linspace(-3.0, 3.0, 7),)


def derivative_uses(*names: str) -> tuple[LibraryUse, ...]:
    """Activations that a question asks for with their derivatives, traced forwards and backwards."""
    return tuple(LibraryUse(name, sample_z, derivative=True) for name in names)


# The kinds of input the activation checks draw. Each check names the kinds that grade a concern of
# their own; the others grade its core. The seed's formulas, 1 / (1 + e^-z) and z / (1 + e^-z),
# cannot overflow, and it defines no derivative: overflow at large |z| (written another way) and
# ReLU's value at the kink z = 0 (any value in [0, 1] is a subgradient) are edges it left open.
MODERATE, AT_ZERO, LARGE = "moderate", "at zero", "large"


MODERATE_Z = "z between about -45 and 45"


LARGE_Z = "z as large as -1000 and 1000: no overflow into NaN"


def run_activation(functions, case: Case) -> Outputs:
    f, derivative = functions
    z = case.inputs["z"]
    outputs = {"f": f(z), "df": derivative(z)}
    if "z_slope" in case.inputs:
        zs, h = case.inputs["z_slope"], case.inputs["h"]
        outputs |= {"f(z+h) float64": f(zs + h), "f(z-h) float64": f(zs - h), "df float64": derivative(zs)}
    return outputs


def _slope_agrees(case: Case, out: Outputs) -> str | None:
    if "z_slope" not in case.inputs:
        return None
    zs, h = case.inputs["z_slope"], case.inputs["h"]
    numeric = (out["f(z+h) float64"].double() - out["f(z-h) float64"].double()) / (2 * h)
    yours = out["df float64"].double()
    if numeric.shape != yours.shape or not torch.isfinite(numeric).all():
        return None
    gap = (numeric - yours).abs()
    if bool((gap <= ROUNDING_GAP + ROUNDING_GAP * numeric.abs()).all()):
        return None
    k = int(gap.argmax())
    return (
        f"at z = {zs[k].item():.4g} the slope of your own function, (f(z+h) - f(z-h)) / 2h with h = {h:g}, "
        f"is {numeric[k].item():.6g}, but your derivative says {yours[k].item():.6g}: one of the two is wrong"
    )


SLOPE = Property("the derivative agrees with the slope of your own function", _slope_agrees)


NOT_A_TENSOR = ErrorHint(
    "must be Tensor",
    "work with torch functions (torch.exp, torch.clamp, torch.where), "
    "not math.exp or numpy: they take a tensor and return one.",
)


def activation_check(
    name: str,
    functions: tuple[str, str],
    library: Sequence[tuple[Callable, str]],
    uses: Sequence[LibraryUse],
    concerns: tuple[Concern, Concern],
    hints: list[str],
    notebook: str = "00",
    answer: str = "activations",
) -> Check:
    """The check of one activation and its derivative, which may call neither its library
    version (`library`, from library_calls; `uses`, its operations forwards and backwards, from
    derivative_uses) nor autograd. `concerns` are the core and one edge (its cases:
    grader/casework.py, activation_cases); `answer` is the grade_id of the cell defining both."""
    f, df = functions
    return Check(
        name=f"{notebook}.{name}",
        target=functions,
        answer=answer,
        run=run_activation,
        concerns=concerns,
        outputs={
            "f": f"{f}(z)",
            "df": f"{df}(z)",
            "f(z+h) float64": f"{f}(z + h) for a float64 z",
            "f(z-h) float64": f"{f}(z - h) for a float64 z",
            "df float64": f"{df}(z) for a float64 z",
        },
        forbidden=(*library, *AUTOGRAD),
        forbidden_uses=uses,
        properties=[SLOPE],
        error_hints=[NOT_A_TENSOR],
        hints=hints,
        hidden_points=1.0,  # three short formulas: together worth less than the spirals question
    )


# --------------------------------------------- the parameters of gated units (05's, 06's experts)


PARAMETERS_UNEXPECTED = (
    "your module's parameters"  # in every message of gated_parameters: an ErrorHint keys on it
)


@dataclass(frozen=True)
class GatedParameters:
    """A gated unit's matrices, found by their shapes: the two projections (or one fused), the
    down projection where there is one, and the biases (every other parameter, all vectors)."""

    projections: list[nn.Parameter]
    down: nn.Parameter | None
    biases: list[nn.Parameter]


def gated_parameters(module: nn.Module, d_in: int, d_hidden: int, down: bool = False) -> GatedParameters:
    """Two (d_hidden, d_in) matrices or one fused (2 d_hidden, d_in), and with `down` one (d_in,
    d_hidden); any other parameter must be a vector (a bias). Raises a message listing the
    module's parameters when they do not fit."""
    named = list(module.named_parameters())
    pair = [p for _, p in named if tuple(p.shape) == (d_hidden, d_in)]
    fused = [p for _, p in named if tuple(p.shape) == (2 * d_hidden, d_in)]
    downs = [p for _, p in named if tuple(p.shape) == (d_in, d_hidden)] if down else []
    projections = pair if len(pair) == 2 and not fused else fused if len(fused) == 1 and not pair else []
    found = [*projections, *downs]
    rest = [p for _, p in named if not any(p is q for q in found)]
    if not projections or len(downs) != int(down) or any(p.dim() != 1 for p in rest):
        wanted = (
            f"two weight matrices of shape ({d_hidden}, {d_in}), as two nn.Linear({d_in}, {d_hidden}, "
            f"bias=False) hold them (or one fused ({2 * d_hidden}, {d_in}))"
        )
        if down:
            wanted += f", and one of shape ({d_in}, {d_hidden}), as nn.Linear({d_hidden}, {d_in}, bias=False)"
        listing = ", ".join(f"{name} {tuple(p.shape)}" for name, p in named) or "none"
        raise ValueError(f"expected {wanted}, and no other matrix; {PARAMETERS_UNEXPECTED}: {listing}")
    return GatedParameters(projections, downs[0] if down else None, rest)


def load_pair(projections: list[nn.Parameter], first: Tensor, second: Tensor) -> None:
    """`first` into the first projection and `second` into the second (or both into a fused one)."""
    with torch.no_grad():
        if len(projections) == 1:
            projections[0].copy_(torch.cat([first, second]))
        else:
            projections[0].copy_(first)
            projections[1].copy_(second)


def both_orders(run: Callable[[], Tensor], projections, a: Tensor, b: Tensor) -> tuple[Tensor, Tensor]:
    """run() with (a, b) loaded and with (b, a) loaded, sorted by the sum of the output."""
    outputs = []
    for first, second in ((a, b), (b, a)):
        load_pair(projections, first, second)
        outputs.append(run())
    return tuple(sorted(outputs, key=_sum_or_inf))


def _sum_or_inf(output) -> float:
    try:
        total = float(output.detach().double().sum())
    except Exception:  # not a tensor: the comparison names it
        return float("inf")
    return total if total == total else float("inf")  # NaN last


def zero(parameters: list[nn.Parameter]) -> None:
    with torch.no_grad():
        for parameter in parameters:
            parameter.zero_()


def bias_free(concern: str, what: str, advice: str) -> Property:
    """The property of the cases that count bias vectors (output "bias vectors", the reference's 0)."""

    def test(case: Case, out: Outputs) -> str | None:
        biases = int(out["bias vectors"])
        return None if biases == 0 else f"{what} holds {biases} bias vector(s): {advice}"

    return Property("bias-free", test, concern=concern)


def count_biases(build, sizes: list[tuple[int, int]], with_down: bool = False) -> Outputs:
    """The bias vectors of build(*size) for each size, all together."""
    biases = sum(len(gated_parameters(build(a, b), a, b, down=with_down).biases) for a, b in sizes)
    return {"bias vectors": torch.tensor(biases)}


# ---------------------------------------- stand-ins for the parts a check does not grade (06, 08)


def modules_with_own_weights(modules: list) -> int:
    """How many modules share no parameter tensor with another ([FeedForward(...)] * E, or copies
    of one module made with copy.copy, share theirs)."""
    owners: dict[int, set[int]] = {}
    for i, module in enumerate(modules):
        for parameter in module.parameters():
            owners.setdefault(id(parameter), set()).add(i)
    shared = {i for holders in owners.values() if len(holders) > 1 for i in holders}
    return len(modules) - len(shared)


class BlackBoxExpert(nn.Module):
    """A trusted stand-in for a student's expert: tanh(x A + b), no parameters, any (..., D) input."""

    def __init__(self, a: Tensor, b: Tensor):
        super().__init__()
        self.a, self.b = a, b

    def forward(self, x: Tensor) -> Tensor:
        return torch.tanh(x @ self.a + self.b)


class StandIn(nn.Module):
    """What a student's class builds in place of one of its parts (an expert, a block's attention)
    when that part cannot be built: the check replaces the part anyway, so an unfinished part costs
    the question that only wires it nothing."""

    def __init__(self, *args, **kwargs):
        super().__init__()


def build_with_stand_ins(cls, args: tuple, parts: tuple[str, ...]):
    """cls(*args); if that raises, again with the classes and functions named in `parts`, as its
    __init__ finds them, replaced by StandIn meanwhile, defined or not (a cell that failed leaves
    its class undefined). Finished parts are kept when cls builds: an __init__ may read their weights."""
    try:
        return cls(*args)
    except Exception:
        pass
    with names_replaced(cls, dict.fromkeys(parts, StandIn)):
        return cls(*args)


# -------------------------------------------- attention's library calls and sampled rows (01, 11)


# The library's softmax in all its spellings: nn.Softmax, nn.Softmin and nn.LogSoftmax call these;
# log_softmax(x).exp() is the softmax too.
SOFTMAX_NAMES = (
    "torch.softmax",
    "torch.Tensor.softmax",
    "torch.nn.functional.softmax",
    "torch.special.softmax",
    "torch._softmax",
    "torch._safe_softmax",
    "torch.nn.functional.softmin",
    "torch.log_softmax",
    "torch.Tensor.log_softmax",
    "torch.nn.functional.log_softmax",
    "torch.special.log_softmax",
    "torch._log_softmax",
)


LIBRARY_SOFTMAX = library_calls(*SOFTMAX_NAMES)


HALF_TO_FLOAT = ("torch._softmax", "torch._log_softmax")  # the private spellings: a third argument


def sample_rows() -> tuple:
    return torch.linspace(-2.0, 2.0, 12).reshape(3, 4), -1


def _rows_in_float32() -> tuple:  # the private spellings' third argument: half_to_float
    return *sample_rows(), False


# Each spelling, traced: the operations they compute with (Check.forbidden_uses).
SOFTMAX_USES = tuple(
    LibraryUse(name, _rows_in_float32 if name in HALF_TO_FLOAT else sample_rows) for name in SOFTMAX_NAMES
)


def _native_attention_inputs() -> tuple:
    """x (B=1, T=3, D=4) as query, key and value, 2 heads, and the projections' weights and biases."""
    x = torch.linspace(-1.0, 1.0, 12).reshape(1, 3, 4)
    in_weight, out_weight = (
        torch.linspace(-1.0, 1.0, 48).reshape(12, 4),
        torch.linspace(-1.0, 1.0, 16).reshape(4, 4),
    )
    return x, x, x, 4, 2, in_weight, torch.zeros(12), out_weight, torch.zeros(4)


# The fused kernel alone: multi_head_attention_forward is Python over linear layers and
# scaled_dot_product_attention, no operation of its own, and those parts are not what Questions 4 and 5
# forbid. Its Python name is refused.
MULTI_HEAD_ATTENTION_USES = (LibraryUse("torch._native_multi_head_attention", _native_attention_inputs),)


def _qkv() -> tuple:
    q = torch.linspace(-1.0, 1.0, 24).reshape(1, 2, 3, 4)
    return q, q.flip(-1), q.flip(-2)


def _qkv_and_mask() -> tuple:
    return *_qkv(), torch.ones(3, 3, dtype=torch.bool).tril()


SDPA = "torch.nn.functional.scaled_dot_product_attention"


# The fused kernels that F.scaled_dot_product_attention picks, unmasked, causal and masked. Not its
# "math" fallback (torch._scaled_dot_product_attention_math), which is the matrix products and softmax
# an answer is written in: its Python name is refused.
SDPA_USES = (
    LibraryUse(SDPA, _qkv),
    LibraryUse(SDPA, _qkv, (("is_causal", True),)),
    LibraryUse(SDPA, _qkv_and_mask),
    LibraryUse("torch._scaled_dot_product_flash_attention_for_cpu", _qkv),
)


# ---------------------------------------------------------- a stand-in for an earlier question's RoPE


class PositionScaling(nn.Module):
    """What a check puts in place of a layer's RoPE, which its own question grades (notebook 04, 09's
    Question 1). Not a rotation, so it answers no question: it scales the query or key at absolute
    position p by 1 + p / 16. It still depends on the position, so a layer that passes the wrong
    start_pos, turns its cached keys again, or scales after padding, still shows."""

    def forward(self, queries: Tensor, keys: Tensor, start_pos: int = 0) -> tuple[Tensor, Tensor]:
        return self._scaled(queries, start_pos), self._scaled(keys, start_pos)

    @staticmethod
    def _scaled(x: Tensor, start_pos: int) -> Tensor:
        """x (..., T, Dh) at positions start_pos .. start_pos + T - 1 (its own T: keys padded too soon
        are longer than the queries, and scaled as they come)."""
        positions = torch.arange(start_pos, start_pos + x.shape[-2], dtype=torch.float32)
        return x * (1 + positions[:, None] / 16).to(x.dtype)


def rope_replaced(layer: nn.Module, rope_class, charged: str) -> nn.Module:
    """The layer with PositionScaling in place of its RoPE module: the one of the notebook's class
    `rope_class`, or else the given self.rope. `charged`: the question that grades the RoPE."""
    found = [
        name
        for name, part in layer.named_children()
        if isinstance(rope_class, type) and isinstance(part, rope_class)
    ]
    if not found and isinstance(getattr(layer, "rope", None), nn.Module):
        found = ["rope"]
    if not found:
        raise NotAsAsked(
            "the layer holds no RoPE module: keep the given self.rope = RoPE(rotation_matrix) and rotate the "
            f"queries and keys with it (the check puts a stand-in in its place, so that a bug of your RoPE "
            f"costs {charged} only)"
        )
    for name in found:
        setattr(layer, name, PositionScaling())
    return layer
