"""Checks of notebook 07, RMSNorm.

Key: B batch, T sequence length, D hidden size. Several cases use inputs whose mean square
is close to eps: only there does the place of eps (inside or outside the root) show.
"""

import torch
import torch.nn.functional as F

from ..core import Case, Check, Concern, ErrorHint, Outputs, Property, library_calls

# (shape, eps, scale of x): scale 1e-3 with eps 1e-6, and eps 0.5, make eps matter.
SHAPES = [((2, 5, 16), 1e-6, 1.0), ((3, 8), 0.5, 0.3), ((1, 4, 32), 1e-6, 1e-3), ((2, 3, 8), 1e-5, 1e3)]


def norm_cases(g: torch.Generator, hidden: bool) -> list[Case]:
    shapes = list(SHAPES)
    if hidden:
        for _ in range(3):
            b, t, d = (int(torch.randint(1, n, (), generator=g)) for n in (4, 30, 65))
            eps = float(10 ** torch.empty(()).uniform_(-6, 0, generator=g))
            shapes.append(((b, t, d), eps, float(10 ** torch.empty(()).uniform_(-3, 3, generator=g))))
    cases = []
    for shape, eps, scale in shapes:
        x = torch.randn(shape, generator=g) * scale
        x[..., 0, :] = 0.0  # an all-zero vector must come out as zeros, not NaN
        name = f"x of shape {shape} (|x| ~ {scale:g}, first row all zeros), eps={eps:g}"
        cases.append(Case(name, {"x": x, "eps": eps, "weight": torch.randn(shape[-1], generator=g)}))
    return cases


BFLOAT16 = "a bfloat16 model: bfloat16 in, bfloat16 out"


def module_cases(g: torch.Generator, hidden: bool) -> list[Case]:
    cases = norm_cases(g, hidden)
    x = torch.randn(2, 4, 16, generator=g)
    x[..., 0, :] = 0.0
    # A bfloat16 model has a bfloat16 weight: the given forward and Llama's
    # (`self._norm(x.float()).type_as(x) * self.weight`) then both return bfloat16.
    bf16 = {"x": x.bfloat16(), "eps": 1e-6, "weight": torch.randn(16, generator=g).bfloat16()}
    name = "bfloat16 x of shape (2, 4, 16) in a module cast to bfloat16 (first row all zeros), eps=1e-06"
    return [*cases, Case(name, bf16, concern=BFLOAT16)]


def run_norm(rmsnorm_class, case: Case) -> Outputs:
    x = case.inputs["x"]
    module = _with_weight(rmsnorm_class, case)  # a _norm that applies the weight too shows up here
    return {"normed": module._norm(x), "normed_10x": module._norm(10 * x)}


def run_module(rmsnorm_class, case: Case) -> Outputs:
    return {"y": _with_weight(rmsnorm_class, case)(case.inputs["x"])}


def _with_weight(rmsnorm_class, case: Case):
    module = rmsnorm_class(case.inputs["x"].shape[-1], eps=case.inputs["eps"])
    module = module.to(case.inputs["weight"].dtype)  # the model's dtype: float32 but in the bfloat16 case
    with torch.no_grad():
        module.weight.copy_(case.inputs["weight"])
    return module


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
    return f"_norm(10 * x) should equal _norm(x) up to {allowed:.3g} (eps); they differ by up to {gap:.3g}"


def _no_nan_on_zeros(case: Case, out: Outputs) -> str | None:
    y = next(iter(out.values()))
    if y.shape != case.inputs["x"].shape:
        return None
    zeros = y[..., 0, :].float()
    return (
        None if torch.isfinite(zeros).all() and (zeros == 0).all() else "an all-zero vector must give zeros"
    )


def _matches_torch(case: Case, out: Outputs) -> str | None:
    x, y = case.inputs["x"], out.get("y")
    if y is None or y.shape != x.shape:
        return None
    want = F.rms_norm(x.float(), (x.shape[-1],), case.inputs["weight"].float(), case.inputs["eps"]).to(
        x.dtype
    )
    gap = (y.float() - want.float()).abs().max().item()
    limit = 5e-2 if x.dtype == torch.bfloat16 else 1e-4 * max(1.0, want.abs().max().item())
    return None if gap <= limit else f"torch.nn.functional.rms_norm differs by up to {gap:.3g}"


# PyTorch's RMSNorm, the answer to both questions; nn.RMSNorm calls the first.
LIBRARY_RMS_NORM = library_calls("torch.nn.functional.rms_norm", "torch.rms_norm", "torch._fused_rms_norm")

NO_WEIGHT = ErrorHint(
    "has no attribute 'weight'", "RMSNorm needs a learnable nn.Parameter named `weight`, of shape (D,)."
)

NORM = Check(
    name="07.rmsnorm_norm",
    target="RMSNorm",
    answer="rmsnorm",
    error_hints=[NO_WEIGHT],
    cases=norm_cases,
    run=run_norm,
    outputs={"normed": "_norm(x)", "normed_10x": "_norm(10 * x)"},
    forbidden=LIBRARY_RMS_NORM,
    properties=[
        Property("scale invariance", _scale_invariant),
        Property("zero vector gives zeros", _no_nan_on_zeros),
    ],
    hints=[
        "Normalise along the last dimension only: each hidden vector by its own root mean square.",
        "rms(x) = sqrt(mean(x ** 2) + eps): the mean of the squares, with eps inside the root.",
        "torch.rsqrt(v) is 1 / sqrt(v); keep the mean's dimension (keepdim=True) so it broadcasts over D.",
        "_norm does not touch self.weight: forward multiplies by it.",
    ],
)

MODULE = Check(
    name="07.rmsnorm",
    target="RMSNorm",
    cases=module_cases,
    run=run_module,
    concerns=[Concern("float32 x", weight=3), Concern(BFLOAT16, weight=1)],
    outputs={"y": "the layer's output"},
    forbidden=LIBRARY_RMS_NORM,
    properties=[
        Property("matches torch.nn.functional.rms_norm", _matches_torch),
        Property("zero vector gives zeros", _no_nan_on_zeros),
    ],
    error_hints=[NO_WEIGHT],
    hints=[
        "forward is given: it calls your _norm in float32, multiplies by weight and casts back.",
        "If this fails while 07.rmsnorm_norm passes, look at what you changed in forward or __init__.",
    ],
)

CHECKS = [NORM, MODULE]
