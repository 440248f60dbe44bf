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
    """The table as a plain attribute, as the original homework and Meta's Llama keep it."""

    def __init__(self, rotation_matrix):
        super().__init__()
        self.rotation_matrix = rotation_matrix

    def forward(self, queries, keys):
        return self._rotate(queries), self._rotate(keys)


class RoPEHomework(_RoPE):
    """The original homework's steps (Questions 7-10) on the input as it comes: float32 in, float32 out."""

    def forward(self, queries, keys):
        B, H, T, Dh = queries.shape
        queries_complex = torch.view_as_complex(queries.reshape(B, H, T, Dh // 2, 2))
        keys_complex = torch.view_as_complex(keys.reshape(B, H, T, Dh // 2, 2))
        queries_rotated = queries_complex * self.rotation_matrix[:T]
        keys_rotated = keys_complex * self.rotation_matrix[:T]
        return (
            torch.view_as_real(queries_rotated).reshape(B, H, T, Dh),
            torch.view_as_real(keys_rotated).reshape(B, H, T, Dh),
        )


class RoPEAssertsFloat32(RoPEHomework):
    """Refuses anything but float32, which is all the homework asks for."""

    def forward(self, queries, keys):
        assert queries.dtype == keys.dtype == torch.float32, "RoPE expects float32 queries and keys"
        return super().forward(queries, keys)


class RoPEFloat32Out(_RoPE):
    """Computes in float32 and returns float32, whatever the input's dtype."""

    def _rotate(self, x):
        z = torch.view_as_complex(x.float().unflatten(-1, (-1, 2)))  # (B, H, T, Dh/2)
        return torch.view_as_real(z * self.rotation_matrix[: x.shape[-2]]).flatten(-2)


class RoPELlama(_RoPE):
    """Meta's apply_rotary_emb: the table reshaped for broadcasting (with an assert), .type_as back."""

    def _rotate(self, x):
        z = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))  # (B, H, T, Dh/2)
        table = self.rotation_matrix[: x.shape[-2]]
        assert table.shape == z.shape[-2:]
        table = table.view(1, 1, *table.shape)  # (1, 1, T, Dh/2)
        return torch.view_as_real(z * table).flatten(3).type_as(x)


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


class RoPEOwnAttributeName(nn.Module):
    """The homework's RoPE with a name of its own for the table, `freqs`, and the 2x2 rotation done by
    torch.view_as_complex on x.float() then .type_as(x)."""

    def __init__(self, rotation_matrix):
        super().__init__()
        self.freqs = rotation_matrix

    def forward(self, queries, keys):
        T = queries.shape[-2]
        return tuple(
            torch.view_as_real(torch.view_as_complex(x.float().unflatten(-1, (-1, 2))) * self.freqs[:T])
            .flatten(-2)
            .type_as(x)
            for x in (queries, keys)
        )


# ------------------------------------------------------------------ interleaved_to_half


def interleaved_to_half_comprehension(dim):
    return torch.tensor([i for i in range(dim) if i % 2 == 0] + [i for i in range(dim) if i % 2 == 1])


def interleaved_to_half_transpose(dim):
    return torch.arange(dim).reshape(dim // 2, 2).T.reshape(-1)


ALTERNATIVES = {
    "04.rotation_matrix": [rotation_matrix_exp, rotation_matrix_complex],
    "04.rope_forward": [
        RoPEHomework,
        RoPEAssertsFloat32,
        RoPEFloat32Out,
        RoPELlama,
        RoPEReal,
        RoPEBlockDiagonal,
        RoPEOwnAttributeName,
    ],
    "04.half_split_permutation": [interleaved_to_half_comprehension, interleaved_to_half_transpose],
}
