"""Checks of notebook 07, RMSNorm.

Key: B batch, T sequence length, D hidden size; a row is one hidden vector x[b, t, :].
Several cases use inputs whose mean square is close to eps: only there does the place of eps
(inside the root, outside it, or added to the inverse root) show.
"""

import torch
import torch.nn.functional as F

from ..core import (
    ACCUMULATED_GAP,
    FLOAT32_GAP,
    ROUNDING_GAP,
    Case,
    Check,
    Concern,
    ErrorHint,
    LibraryUse,
    Outputs,
    Property,
    library_calls,
)

BFLOAT16 = "a bfloat16 model: bfloat16 in, bfloat16 out"


def run_norm(rmsnorm_class, case: Case) -> Outputs:
    x = case.inputs["x"]
    module = _with_weight(rmsnorm_class, case)  # a _norm that applies the weight too shows up here
    return {
        "normed": module._norm(x),
        "normed_10x": module._norm(10 * x),
        "normed_last_row_changed": module._norm(case.inputs["x_last_row_changed"]),
    }


NOT_CALLED_ON_X = (
    "forward should call self._norm on x itself, as the given forward does with self._norm(x.float()): "
    "this check puts PyTorch's RMSNorm of x in place of your _norm, and your forward called it on "
    "another tensor"
)


class _PrecomputedNorm:
    """What 07.rmsnorm puts in place of the student's _norm: PyTorch's RMSNorm of the case's x,
    computed with the cases. It answers no question: it knows the answer for one tensor only."""

    def __init__(self, x: torch.Tensor, normed: torch.Tensor):
        self.x, self.normed = x, normed

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        same = (
            x.shape[-1:] == self.x.shape[-1:]
            and x.numel() == self.x.numel()
            and torch.equal(x.detach().reshape(self.x.shape).to(self.x.dtype), self.x)
        )
        if not same:
            raise ValueError(NOT_CALLED_ON_X)
        return self.normed.reshape(x.shape).to(x.dtype, copy=True)


def run_module(rmsnorm_class, case: Case) -> Outputs:
    """This question grades __init__ and forward alone: a known right _norm replaces the student's,
    whose bugs cost points in 07.rmsnorm_norm only, once it is more than the unfilled stub."""
    module = _with_weight(rmsnorm_class, case)
    x = case.inputs["x"]
    try:
        module._norm(x.clone().float())  # a copy: a _norm that works in place must not change x
    except (NotImplementedError, TypeError) as error:
        if isinstance(error, NotImplementedError) or "must derive from BaseException" in str(error):
            raise  # `raise NotImplementedError()`, or the original homework's `raise NotImplemented`
    except Exception:
        pass  # any other error of _norm is for 07.rmsnorm_norm to report
    module._norm = _PrecomputedNorm(x, case.inputs["normed"])
    return {"y": module(x)}


def _with_weight(rmsnorm_class, case: Case):
    module = rmsnorm_class(case.inputs["x"].shape[-1], eps=case.inputs["eps"])
    module = module.to(case.inputs["weight"].dtype)  # the model's dtype: float32 but in the bfloat16 case
    with torch.no_grad():
        module.weight.copy_(case.inputs["weight"])
    return module


def _index(row: tuple[int, ...]) -> str:
    return f"({', '.join(map(str, row))})"


def _rows_have_rms_one(case: Case, out: Outputs) -> str | None:
    """rms(_norm(x)) = sqrt(m / (m + eps)) for a row of mean square m: 1, less what eps takes."""
    x, y, eps = case.inputs["x"], out.get("normed"), case.inputs["eps"]
    if y is None or y.shape != x.shape:
        return None
    mean_square = x.double().pow(2).mean(-1)
    want = (mean_square / (mean_square + eps)).sqrt()
    got = y.double().pow(2).mean(-1).sqrt()
    gap = (got - want).abs().where(torch.isfinite(y).all(-1), 0.0)  # NaN rows are named by the comparison
    if gap.max().item() <= ACCUMULATED_GAP:
        return None
    row = tuple(int(i) for i in torch.unravel_index(gap.argmax(), gap.shape))
    return (
        "each row of _norm(x) should have RMS 1, or less where eps is not negligible next to the row's "
        f"mean square m (sqrt(m / (m + eps))); the row at index {_index(row)} has RMS "
        f"{got[row].item():.3g}, expected {want[row].item():.3g}"
    )


def _rows_are_independent(case: Case, out: Outputs) -> str | None:
    x, y, y_changed = case.inputs["x"], out.get("normed"), out.get("normed_last_row_changed")
    if y is None or y_changed is None or y.shape != x.shape or y_changed.shape != x.shape:
        return None
    rows, rows_changed = y.flatten(0, -2)[:-1], y_changed.flatten(0, -2)[:-1]  # all but the changed row
    moved = ~torch.isclose(rows_changed, rows, rtol=FLOAT32_GAP, atol=ROUNDING_GAP, equal_nan=True).all(-1)
    if not moved.any():
        return None
    row = tuple(int(i) for i in torch.unravel_index(moved.nonzero()[0, 0], x.shape[:-1]))
    return (
        f"changing the last row of x changed the row at index {_index(row)} of _norm(x) too: "
        "each row must be divided by its own RMS, computed from that row alone"
    )


def _scale_invariant(case: Case, out: Outputs) -> str | None:
    x, y, y10 = case.inputs["x"], out.get("normed"), out.get("normed_10x")
    if y is None or y10 is None or y.shape != x.shape or y10.shape != x.shape:
        return None
    if not (torch.isfinite(y).all() and torch.isfinite(y10).all()):
        return None  # already reported as non-finite values
    mean_square = x.pow(2).mean(-1)
    smallest = mean_square[mean_square > 0].min().item()
    # eps breaks the invariance by a relative eps / (2 mean(x^2)) at most: allow that, and no more.
    allowed = 1e-5 + y.abs().max().item() * case.inputs["eps"] / (2 * smallest) + 1e-5 * y.abs().max().item()
    gap = (y - y10).abs().max().item()
    if gap <= allowed:
        return None
    return f"_norm(10 * x) should equal _norm(x), but for what eps changes; they differ by up to {gap:.3g}"


def _no_nan_on_zeros(case: Case, out: Outputs) -> str | None:
    y = next(iter(out.values()))
    if y.shape != case.inputs["x"].shape:
        return None
    zeros = y[..., 0, :].float()
    bad = ~(torch.isfinite(zeros) & (zeros == 0))
    if not bad.any():
        return None
    return f"an all-zero row of x must give zeros, not {zeros[bad][0].item():.3g}"


def _matches_torch(case: Case, out: Outputs) -> str | None:
    x, y = case.inputs["x"], out.get("y")
    if y is None or y.shape != x.shape:
        return None
    want = F.rms_norm(x.float(), (x.shape[-1],), case.inputs["weight"].float(), case.inputs["eps"])
    if not torch.isfinite(y).all():
        return "the layer's output has NaN or infinite values where torch.nn.functional.rms_norm has none"
    off = (y.float() - want).abs()
    if x.dtype == torch.bfloat16:  # rounded to 8 significant bits, once or (Llama's forward) twice
        allowed = 1e-2 + 2e-2 * want.abs()
    else:
        allowed = torch.full_like(want, ACCUMULATED_GAP * max(1.0, want.abs().max().item()))
    if (off <= allowed).all():
        return None
    return f"the layer's output is off torch.nn.functional.rms_norm by up to {off.max().item():.3g}"


# PyTorch's RMSNorm, the answer to both questions; nn.RMSNorm calls the first.
LIBRARY_RMS_NORM = library_calls("torch.nn.functional.rms_norm", "torch.rms_norm", "torch._fused_rms_norm")


def _rms_norm_inputs() -> tuple:
    return torch.linspace(-2.0, 2.0, 12).reshape(3, 4), [4]


def _fused_rms_norm_inputs() -> tuple:  # weight and eps are the operator's own arguments
    return *_rms_norm_inputs(), None, 1e-6


# Traced: on a CPU they compute with ordinary arithmetic (pow, mean, rsqrt, mul), no operation of their
# own, so only their Python names are refused, and code compiled out of Python's sight. A kernel of
# their own in another PyTorch would be found here.
RMS_NORM_USES = (
    LibraryUse("torch.nn.functional.rms_norm", _rms_norm_inputs),
    LibraryUse("torch._fused_rms_norm", _fused_rms_norm_inputs),
)

NO_WEIGHT = ErrorHint(
    "has no attribute 'weight'", "RMSNorm needs a learnable nn.Parameter named `weight`, of shape (D,)."
)
SIGNATURE = ErrorHint(
    "unexpected keyword argument 'eps'", "keep the given signature: RMSNorm(hidden_size, eps=1e-6)."
)

# _norm is all a student writes in this notebook: its check carries all six points.
NORM = Check(
    name="07.rmsnorm_norm",
    target="RMSNorm",
    answer="rmsnorm",
    points=2.0,
    hidden_points=4.0,
    error_hints=[NO_WEIGHT, SIGNATURE],
    run=run_norm,
    outputs={
        "normed": "_norm(x)",
        "normed_10x": "_norm(10 * x)",
        "normed_last_row_changed": "_norm(x) after a change to the last row of x",
    },
    forbidden=LIBRARY_RMS_NORM,
    forbidden_uses=RMS_NORM_USES,
    properties=[
        Property("each row has RMS 1 up to eps", _rows_have_rms_one),
        Property("rows are independent", _rows_are_independent),
        Property("scale invariance", _scale_invariant),
        Property("zero vector gives zeros", _no_nan_on_zeros),
    ],
    hints=[
        "x has shape (..., D): how many numbers do you divide by, one per tensor, one per feature, or one "
        "per row of D features? Which dimension do you reduce over to get them?",
        "Test it in a new cell, with norm = RMSNorm(8) and x = torch.randn(2, 3, 8): "
        "norm._norm(x).pow(2).mean(-1) should be all ~1, norm._norm(10 * x) should equal norm._norm(x), "
        "norm._norm(torch.zeros(1, 8)) should be zeros (not NaN), and changing x[0, 0] should change "
        "no other row of the output.",
        "_norm(x) = x / sqrt(mean(x ** 2) + eps), the mean over the last dimension: square first, average "
        "over D (not a sum, not centred), eps inside the root.",
        "torch.rsqrt(v) is 1 / sqrt(v); x.pow(2).mean(dim=-1, keepdim=True) has shape (..., 1) and "
        "broadcasts against x. _norm leaves self.weight to forward.",
    ],
)

# __init__ and forward are given: this check says whether they still work around the student's _norm,
# as advice, and earns nothing (points go to what the student writes).
MODULE = Check(
    name="07.rmsnorm",
    target="RMSNorm",
    points=0.0,
    hidden_points=0.0,
    run=run_module,
    concerns=[Concern("float32 x", weight=3), Concern(BFLOAT16, weight=1)],
    outputs={"y": "the layer's output"},
    forbidden=LIBRARY_RMS_NORM,
    forbidden_uses=RMS_NORM_USES,
    properties=[
        Property("matches torch.nn.functional.rms_norm", _matches_torch),
        Property("zero vector gives zeros", _no_nan_on_zeros),
    ],
    error_hints=[
        NO_WEIGHT,
        SIGNATURE,
        ErrorHint(
            "doesn't match the broadcast shape",
            "`weight` must have one entry per feature: nn.Parameter(torch.ones(hidden_size)).",
        ),
    ],
    hints=[
        "This check puts a right _norm in place of yours, so it grades only __init__ and forward, "
        "which are given: what does forward do with the dtype of x, and where does self.weight come in?",
        "Test the layer in a new cell: RMSNorm(16).to(torch.bfloat16)(torch.randn(2, 16).bfloat16()) "
        "should be bfloat16; with norm.weight filled with 2, norm(x) should be 2 * norm._norm(x).",
        "y = weight * _norm(x computed in float32), cast back to the dtype of x.",
        "The given forward: (self._norm(x.float()) * self.weight.float()).type_as(x). "
        "Llama's self._norm(x.float()).type_as(x) * self.weight is right too.",
    ],
)

CHECKS = [NORM, MODULE]
