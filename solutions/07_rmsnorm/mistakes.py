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


class EpsOutsideRoot(_RMSNorm):
    def _norm(self, x):
        return x / (x.pow(2).mean(-1, keepdim=True).sqrt() + self.eps)


class MeanOfX(_RMSNorm):
    def _norm(self, x):
        return x * torch.rsqrt(x.mean(-1, keepdim=True) + self.eps)


class SumOfSquares(_RMSNorm):
    def _norm(self, x):
        return x * torch.rsqrt(x.pow(2).sum(-1, keepdim=True) + self.eps)


class NoEps(_RMSNorm):
    def _norm(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True))


class WrongAxis(_RMSNorm):
    def _norm(self, x):
        return x * torch.rsqrt(x.pow(2).mean(0, keepdim=True) + self.eps)


class WeightInNorm(_RMSNorm):
    def _norm(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class _Correct(_RMSNorm):
    def _norm(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)


class MissingWeight(_Correct):
    def forward(self, x):
        return self._norm(x.float()).type_as(x)


class DtypeNotPreserved(_Correct):
    def forward(self, x):
        return self._norm(x.float()) * self.weight


NORM_MISTAKES = [
    Mistake("eps added outside the square root", "use rsqrt(mean(x ** 2) + eps): eps goes inside the root.",
            EpsOutsideRoot),
    Mistake("mean of x instead of the mean of x squared", "square before averaging: mean(x ** 2).", MeanOfX),
    Mistake("sum of squares instead of their mean", "divide the sum by D, i.e. use .mean(dim=-1).", SumOfSquares),
    Mistake("eps left out", "add eps inside the root; without it a zero vector gives NaN.", NoEps),
    Mistake("normalised over the wrong dimension", "reduce over the last dimension: dim=-1.", WrongAxis),
    Mistake("the weight is applied inside _norm (so forward applies it twice)",
            "_norm only normalises; forward multiplies by self.weight.", WeightInNorm),
]

MISTAKES = {
    "07.rmsnorm_norm": NORM_MISTAKES,
    "07.rmsnorm": [
        *NORM_MISTAKES,
        Mistake("the learned weight is not applied", "multiply the normalised x by self.weight.", MissingWeight),
        Mistake("the output dtype is not the input's",
                "cast the result back with .type_as(x): bfloat16 in, bfloat16 out.", DtypeNotPreserved),
    ],
}
