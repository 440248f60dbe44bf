"""Notebook 05's case generators, CASES by check name: the grader's side only (autograder/reference.py)."""

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from autograder.checks._toolkit import LARGE
from autograder.checks.gated_ffn import (
    BIAS_FREE,
    GELU,
    LLAMA_DIM,
    VARIANT_CONCERNS,
)
from autograder.core import Case
from grader.casework import activation_cases

SIGLU_SHAPES = [((2, 3), 8, 6), ((5,), 4, 7), ((1, 4), 16, 12)]  # (batch dimensions, in, out)


def _siglu_inputs(g: torch.Generator, batch: tuple[int, ...], d_in: int, d_out: int) -> dict:
    scale = d_in**-0.5  # pre-activations of size ~1: the sigmoid neither saturates nor stays linear
    return {
        "x": torch.randn(*batch, d_in, generator=g),
        "w": torch.randn(d_out, d_in, generator=g) * 2 * scale,
        "w_gate": torch.randn(d_out, d_in, generator=g) * 2 * scale,
    }


def siglu_cases(g: torch.Generator, hidden: bool) -> list[Case]:
    shapes = list(SIGLU_SHAPES)
    if hidden:
        for _ in range(2):
            d_in = int(torch.randint(2, 24, (), generator=g))
            d_out = d_in + int(torch.randint(1, 12, (), generator=g))  # never square: in and out stay apart
            shapes.append(((int(torch.randint(1, 4, (), generator=g)), 3), d_in, d_out))
    cases = [
        Case(f"x of shape {(*batch, d_in)}, SiGLU({d_in}, {d_out})", _siglu_inputs(g, batch, d_in, d_out))
        for batch, d_in, d_out in shapes
    ]
    # The run stage sees the inputs, not the case's concern: "count_biases" tells it what to count,
    # in a layer of every size the other cases build, so that no size can hide a bias.
    sizes = [(d_in, d_out) for _, d_in, d_out in shapes]
    name = f"the parameters of SiGLU{', SiGLU'.join(map(str, sizes))}"
    return [*cases, Case(name, {"count_biases": sizes}, concern=BIAS_FREE)]


# Shazeer (2020), "GLU Variants Improve Transformer", in the paper's notation: x W and x V with
# W, V of shape (D, F), the activation on x W.
VARIANTS: dict[str, Callable[[Tensor], Tensor]] = {
    "glu": torch.sigmoid,
    "bilinear": lambda z: z,
    "reglu": torch.relu,
    "geglu": F.gelu,
    "swiglu": F.silu,
}


def variant_cases(g: torch.Generator, hidden: bool) -> list[Case]:
    cases = []
    for round_ in range(2 if hidden else 1):
        for variant in VARIANTS:
            d, f = (6, 10) if round_ == 0 else (int(torch.randint(2, 16, (), generator=g)), 7)
            inputs = {
                "x": torch.randn(2, 3, d, generator=g),
                "w": torch.randn(d, f, generator=g) * 1.5 * d**-0.5,
                "v": torch.randn(d, f, generator=g) * d**-0.5,
                "variant": variant,
            }
            name = f"variant '{variant}', x of shape (2, 3, {d}), W and V of shape ({d}, {f})"
            cases.append(Case(name, inputs, concern=VARIANT_CONCERNS[variant]))
    return cases


COUNT_CASES = [(512, 2048, False), (512, 2048, True), (12, 32, True), (4096, 11008, True), (768, 3072, False)]


# 5: 8 * 5 / 3 = 13.33, which ceil() rounds up and round() down; 7: 18.67, which int() rounds down and
# round() up. A diagnosis reads the first failing case: 5 comes first, so ceil() is not called round().
LLAMA_CASES = [(4096, 256), (5120, 256), (512, 64), (12, 1), (5, 1), (7, 1)]


def count_cases(g: torch.Generator, hidden: bool) -> list[Case]:
    counts, dims = list(COUNT_CASES), list(LLAMA_CASES)
    if hidden:
        for _ in range(3):
            d = int(torch.randint(8, 9000, (), generator=g))
            counts.append(
                (d, int(torch.randint(8, 30000, (), generator=g)), bool(torch.rand((), generator=g) < 0.5))
            )
            dims.append((d, int(2 ** torch.randint(0, 9, (), generator=g))))
    cases = [
        Case(f"ffn_parameters({d}, {f}, gated={gated})", {"function": "ffn", "args": (d, f, gated)})
        for d, f, gated in counts
    ]
    cases += [
        Case(
            f"llama_hidden_dim({d}, multiple_of={m})",
            {"function": "llama", "args": (d, m)},
            concern=LLAMA_DIM,
        )
        for d, m in dims
    ]
    return cases


CASES = {
    "05.siglu": siglu_cases,
    "05.glu_variants": variant_cases,
    "05.parameter_count": count_cases,
    "05.gelu": activation_cases({LARGE: GELU.concerns[1].name}),
}
