"""Known wrong versions of RMSNorm: the judge names them, the tests use them as mutants.

Instructor-side only (next to the reference, not released). Each is a complete,
self-contained RMSNorm with exactly one thing wrong.
"""

import torch
import torch.nn as nn

from autograder.core import Mistake


class _RMSNorm(nn.Module):
    def __init__(self, hidden_size: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(hidden_size))

    def forward(self, x):
        return (self._norm(x.float()) * self.weight.float()).type_as(x)


# ------------------------------------------------------------------ _norm (07.rmsnorm_norm)


class EpsOutsideRoot(_RMSNorm):
    def _norm(self, x):
        return x / (x.pow(2).mean(-1, keepdim=True).sqrt() + self.eps)


class EpsAddedToInverseRoot(_RMSNorm):
    def _norm(self, x):
        return x * (torch.rsqrt(x.pow(2).mean(-1, keepdim=True)) + self.eps)


class MeanOfX(_RMSNorm):
    def _norm(self, x):
        return x * torch.rsqrt(x.mean(-1, keepdim=True) + self.eps)


class SumOfSquares(_RMSNorm):
    def _norm(self, x):
        return x * torch.rsqrt(x.pow(2).sum(-1, keepdim=True) + self.eps)


class NoEps(_RMSNorm):
    def _norm(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True))


class Centred(_RMSNorm):
    def _norm(self, x):
        x = x - x.mean(-1, keepdim=True)
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)


class OverDim1(_RMSNorm):
    def _norm(self, x):
        return x * torch.rsqrt(x.pow(2).mean(1, keepdim=True) + self.eps)


class OverAllDims(_RMSNorm):
    def _norm(self, x):
        return x * torch.rsqrt(x.pow(2).mean() + self.eps)


class OverBatchAndFeatures(_RMSNorm):
    def _norm(self, x):
        return x * torch.rsqrt(x.pow(2).mean((0, -1), keepdim=True) + self.eps)


class WeightInNorm(_RMSNorm):
    def _norm(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


# ------------------------------------------------------- __init__ and forward (07.rmsnorm)


class _Correct(_RMSNorm):
    def _norm(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)


class MissingWeight(_Correct):
    def forward(self, x):
        return self._norm(x.float()).type_as(x)


class DtypeNotPreserved(_Correct):
    def forward(self, x):
        return self._norm(x.float()) * self.weight


class NormNotCalled(_Correct):
    def forward(self, x):
        return (x.float() * self.weight.float()).type_as(x)


ROWS = "each row must be divided by its own RMS: reduce over the last dimension only, dim=-1."

NORM_MISTAKES = [
    Mistake(
        "eps added outside the square root",
        "use rsqrt(mean(x ** 2) + eps): eps goes inside the root.",
        EpsOutsideRoot,
    ),
    Mistake(
        "eps added after the rsqrt, to 1 / rms instead of inside the root",
        "add eps to the mean of the squares, inside the call: torch.rsqrt(mean(x ** 2) + eps). Added "
        "after it, eps barely changes the result and an all-zero row still gives NaN.",
        EpsAddedToInverseRoot,
    ),
    Mistake("mean of x instead of the mean of x squared", "square before averaging: mean(x ** 2).", MeanOfX),
    Mistake(
        "sum of squares instead of their mean", "divide the sum by D, i.e. use .mean(dim=-1).", SumOfSquares
    ),
    Mistake("eps left out", "add eps inside the root; without it a zero vector gives NaN.", NoEps),
    Mistake(
        "the mean subtracted first, as LayerNorm does",
        "RMSNorm does not centre: divide x itself, not x - mean(x), by sqrt(mean(x ** 2) + eps).",
        Centred,
    ),
    Mistake(
        "the RMS taken over dim 1 (the sequence for (B, T, D) inputs) instead of the last dimension",
        ROWS,
        OverDim1,
    ),
    Mistake("one RMS for the whole tensor (a mean over all dimensions)", ROWS, OverAllDims),
    Mistake("the RMS taken over the batch and the features together", ROWS, OverBatchAndFeatures),
    Mistake(
        "the weight is applied inside _norm (so forward applies it twice)",
        "_norm only normalises; forward multiplies by self.weight.",
        WeightInNorm,
    ),
]

MISTAKES = {
    "07.rmsnorm_norm": NORM_MISTAKES,
    # 07.rmsnorm puts a right _norm in place of the student's: only forward and __init__ count there.
    "07.rmsnorm": [
        Mistake(
            "the learned weight is not applied", "multiply the normalised x by self.weight.", MissingWeight
        ),
        Mistake(
            "the output dtype is not the input's",
            "cast the result back with .type_as(x): bfloat16 in, bfloat16 out.",
            DtypeNotPreserved,
        ),
        Mistake(
            "forward does not call _norm",
            "normalise first: self._norm(x.float()), then the weight.",
            NormNotCalled,
        ),
    ],
}
