"""Correct answers to notebook 04 (RoPE) written differently from the reference."""

import math

import torch
import torch.nn as nn

# ----------------------------------------------------------------- get_rotation_matrix


def rotation_matrix_exp(dim, context_size, period):
    """e^(i theta) with torch.exp, frequencies as exp(-log(P) * 2k / dim)."""
    freqs = torch.exp(-math.log(period) * torch.arange(0, dim, 2, dtype=torch.float32) / dim)
    thetas = torch.arange(context_size, dtype=torch.float32)[:, None] * freqs[None, :]
    return torch.exp(1j * thetas)


def rotation_matrix_complex(dim, context_size, period):
    """torch.complex(cos, sin), frequencies from a Python loop."""
    freqs = torch.tensor([period ** (-2 * k / dim) for k in range(dim // 2)], dtype=torch.float32)
    thetas = torch.einsum("p,k->pk", torch.arange(context_size, dtype=torch.float32), freqs)
    return torch.complex(thetas.cos(), thetas.sin())


# ------------------------------------------------------------------------------- RoPE


class _RoPE(nn.Module):
    def __init__(self, rotation_matrix):
        super().__init__()
        self.register_buffer("rotation_matrix", rotation_matrix, persistent=False)

    def forward(self, queries, keys):
        return self._rotate(queries), self._rotate(keys)


class RoPEReal(_RoPE):
    """The 2x2 rotation written out on even/odd features: no complex arithmetic."""

    def _rotate(self, x):
        table = self.rotation_matrix[: x.shape[-2]]
        cos, sin = table.real, table.imag  # (T, Dh/2)
        even, odd = x.float()[..., 0::2], x.float()[..., 1::2]
        rotated = torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1)
        return rotated.flatten(-2).to(x.dtype)


class RoPEBlockDiagonal(_RoPE):
    """One (Dh, Dh) block-diagonal matrix of 2x2 rotations per position, applied with einsum."""

    def _rotate(self, x):
        angles = self.rotation_matrix[: x.shape[-2]].angle()  # (T, Dh/2)
        cos, sin = angles.cos(), angles.sin()
        blocks = torch.stack([cos, -sin, sin, cos], dim=-1).unflatten(-1, (2, 2))  # (T, Dh/2, 2, 2)
        matrices = torch.stack([torch.block_diag(*position) for position in blocks])  # (T, Dh, Dh)
        return torch.einsum("tij,bhtj->bhti", matrices, x.float()).to(x.dtype)


# ------------------------------------------------------------------ interleaved_to_half


def interleaved_to_half_comprehension(dim):
    return torch.tensor([i for i in range(dim) if i % 2 == 0] + [i for i in range(dim) if i % 2 == 1])


def interleaved_to_half_transpose(dim):
    return torch.arange(dim).reshape(dim // 2, 2).T.reshape(-1)


ALTERNATIVES = {
    "04.rotation_matrix": [rotation_matrix_exp, rotation_matrix_complex],
    "04.rope_forward": [RoPEReal, RoPEBlockDiagonal],
    "04.half_split_permutation": [interleaved_to_half_comprehension, interleaved_to_half_transpose],
}
