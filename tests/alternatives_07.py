"""Correct answers to notebook 07 (RMSNorm) written differently from the reference."""

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


ALTERNATIVES = {
    "07.rmsnorm_norm": [RMSNormOneOverSqrt, RMSNormVectorNorm],
    "07.rmsnorm": [RMSNormOneOverSqrt, RMSNormVectorNorm],
}
