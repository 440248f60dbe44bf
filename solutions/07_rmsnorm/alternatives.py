"""Correct answers to notebook 07 (RMSNorm) written differently from the reference.

The original homework (seed 001, Question 22) asks for `_norm` with torch.rsqrt, and gives
Llama's forward, which casts back to the input's dtype before the weight; the given forward
of this course applies the weight in float32 and casts once. Both forwards must pass.
"""

import math

import torch
import torch.nn as nn

# ----------------------------------------------------------------------------- RMSNorm


class _RMSNorm(nn.Module):
    def __init__(self, hidden_size: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(hidden_size))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (self._norm(x.float()) * self.weight.float()).type_as(x)


class RMSNormOneOverSqrt(_RMSNorm):
    """1 / sqrt(...) instead of rsqrt."""

    def _norm(self, x):
        return x / torch.sqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps)


class RMSNormVectorNorm(_RMSNorm):
    """rms = ||x|| / sqrt(D), with eps added to its square; forward written with to(dtype)."""

    def _norm(self, x):
        rms = torch.linalg.vector_norm(x, dim=-1, keepdim=True) / math.sqrt(x.shape[-1])
        return x / (rms.square() + self.eps).sqrt()

    def forward(self, x):
        return self.weight.float().mul(self._norm(x.to(torch.float32))).to(x.dtype)


class RMSNormLlama(nn.Module):
    """The original homework's class: Llama's _norm and its given forward, which casts back
    before the weight (a bfloat16 model then returns bfloat16)."""

    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def _norm(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)

    def forward(self, x):
        output = self._norm(x.float()).type_as(x)
        return output * self.weight


class RMSNormLlamaOneLine(RMSNormLlama):
    """The same forward in one line, the weight on the left; mean of x * x, rsqrt on the left."""

    def _norm(self, x):
        return torch.rsqrt(torch.mean(x * x, dim=-1, keepdim=True) + self.eps) * x

    def forward(self, x):
        return self.weight * self._norm(x.float()).type_as(x)


class RMSNormSquareSumOverD(RMSNormLlama):
    """The mean of the squares as (1/n) sum, unsqueezed by hand; the float32 forward of this course."""

    def _norm(self, x):
        mean_square = x.square().sum(dim=-1) / x.shape[-1]
        return x * torch.rsqrt(mean_square + self.eps).unsqueeze(-1)

    def forward(self, x):
        return (self._norm(x.float()) * self.weight.float()).type_as(x)


class RMSNormPowTwo(RMSNormLlama):
    """torch.pow(x, 2) and the mean over dim=x.dim() - 1."""

    def _norm(self, x):
        return x * torch.rsqrt(torch.pow(x, 2).mean(dim=x.dim() - 1, keepdim=True) + self.eps)


RMSNORMS = [
    RMSNormOneOverSqrt,
    RMSNormVectorNorm,
    RMSNormLlama,
    RMSNormLlamaOneLine,
    RMSNormSquareSumOverD,
    RMSNormPowTwo,
]

ALTERNATIVES = {"07.rmsnorm_norm": RMSNORMS, "07.rmsnorm": RMSNORMS}
