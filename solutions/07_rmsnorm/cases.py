"""Notebook 07's case generators, CASES by check name: the grader's side only (autograder/reference.py)."""

import torch
import torch.nn.functional as F

from autograder.checks.rmsnorm import (
    BFLOAT16,
)
from autograder.core import Case

# (shape, eps, scale of x). A diagnosis is read on the first failing case, so the first case
# tells every catalogued mistake apart: eps 0.1 next to a mean square of ~0.09 separates the
# places of eps, and B = 2, T = 4 separate the reductions over the wrong dimensions. Scale 1e-3
# with eps 1e-6, and eps 0.5, make eps matter too.
SHAPES = [
    ((2, 4, 8), 0.1, 0.3),
    ((2, 5, 16), 1e-6, 1.0),
    ((3, 8), 0.5, 0.3),
    ((1, 4, 32), 1e-6, 1e-3),
    ((2, 3, 8), 1e-5, 1e3),
]


def _random_inputs(g: torch.Generator, hidden: bool) -> list[tuple[str, dict, float]]:
    """(case name, inputs, scale of x) for the shapes above, and three random ones when hidden."""
    shapes = list(SHAPES)
    if hidden:
        for _ in range(3):
            b, t, d = (int(torch.randint(1, n, (), generator=g)) for n in (4, 30, 65))
            eps = float(10 ** torch.empty(()).uniform_(-6, 0, generator=g))
            shapes.append(((b, t, d), eps, float(10 ** torch.empty(()).uniform_(-3, 3, generator=g))))
    found = []
    for shape, eps, scale in shapes:
        x = torch.randn(shape, generator=g) * scale
        x[..., 0, :] = 0.0  # an all-zero vector must come out as zeros, not NaN
        name = f"x of shape {shape} (|x| ~ {scale:g}, first row all zeros), eps={eps:g}"
        found.append((name, {"x": x, "eps": eps, "weight": torch.randn(shape[-1], generator=g)}, scale))
    return found


def norm_cases(g: torch.Generator, hidden: bool) -> list[Case]:
    cases = []
    for name, inputs, scale in _random_inputs(g, hidden):
        x = inputs["x"]
        # A new last row, three times larger: a reduction that mixes rows moves the others.
        changed = x.clone()
        changed[(-1,) * (x.dim() - 1)] = 3 * scale * torch.randn(x.shape[-1], generator=g)
        cases.append(Case(name, {**inputs, "x_last_row_changed": changed}))
    return cases


def _pytorch_norm(x: torch.Tensor, eps: float) -> torch.Tensor:
    return F.rms_norm(x.float(), (x.shape[-1],), eps=eps)


def module_cases(g: torch.Generator, hidden: bool) -> list[Case]:
    # Each case carries PyTorch's normalised x, made here, outside the run and its watch for
    # library calls: run_module puts it in place of the student's _norm.
    cases = [
        Case(name, {**inputs, "normed": _pytorch_norm(inputs["x"], inputs["eps"])})
        for name, inputs, _ in _random_inputs(g, hidden)
    ]
    x = torch.randn(2, 4, 16, generator=g)
    x[..., 0, :] = 0.0
    # A bfloat16 model has a bfloat16 weight: the given forward and Llama's
    # (`self._norm(x.float()).type_as(x) * self.weight`) then both return bfloat16.
    x, weight = x.bfloat16(), torch.randn(16, generator=g).bfloat16()
    bf16 = {"x": x, "eps": 1e-6, "weight": weight, "normed": _pytorch_norm(x, 1e-6)}
    name = "bfloat16 x of shape (2, 4, 16) in a module cast to bfloat16 (first row all zeros), eps=1e-06"
    return [*cases, Case(name, bf16, concern=BFLOAT16)]


CASES = {
    "07.rmsnorm_norm": norm_cases,
    "07.rmsnorm": module_cases,
}
