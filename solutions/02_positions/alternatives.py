"""Correct answers to notebook 02 written differently from the reference."""

import math

import matplotlib.pyplot as plt
import torch
import torch.nn as nn
import torch.nn.functional as F

# ------------------------------------------------------------------ sinusoidal encoding


def sinusoidal_exp_log(seq_len, hidden_size, base=10000.0):
    """Frequencies as exp(-log(base) 2i / D) (seed 000's div_term); sin/cos stacked then flattened."""
    freqs = torch.exp(-math.log(base) * torch.arange(0, hidden_size, 2, dtype=torch.float32) / hidden_size)
    angles = torch.arange(seq_len, dtype=torch.float32)[:, None] * freqs[None, :]  # (T, D/2)
    return torch.stack([angles.sin(), angles.cos()], dim=-1).reshape(seq_len, hidden_size)


def sinusoidal_loop(seq_len, hidden_size, base=10000.0):
    """One pair at a time, with the frequency computed as a Python float."""
    positions = torch.arange(seq_len, dtype=torch.float32)
    pe = torch.zeros(seq_len, hidden_size)
    for i in range(hidden_size // 2):
        angle = positions / base ** (2 * i / hidden_size)
        pe[:, 2 * i], pe[:, 2 * i + 1] = torch.sin(angle), torch.cos(angle)
    return pe


# ----------------------------------------------------------------------- the PE figure


def plot_with_matshow(seq_len, hidden_size):
    """matshow panels, numpy arrays, einsum for the dot products."""
    pe = sinusoidal_exp_log(seq_len, hidden_size)
    dots = torch.einsum("id,jd->ij", pe, pe)
    fig = plt.figure(figsize=(10, 4))
    for index, (matrix, title, labels) in enumerate(
        [(pe, "PE", ("dim", "pos")), (dots, "PE PE^T", ("pos q", "pos p"))], start=1
    ):
        ax = fig.add_subplot(1, 2, index)
        shown = ax.matshow(matrix.numpy())
        ax.set_title(title)
        ax.set_xlabel(labels[0])
        ax.set_ylabel(labels[1])
        plt.colorbar(shown, ax=ax)
    return fig


def plot_with_pcolormesh(seq_len, hidden_size):
    """pcolormesh panels (QuadMesh artists) instead of images."""
    pe = sinusoidal_loop(seq_len, hidden_size)
    fig, axes = plt.subplots(1, 2)
    for ax, matrix, title in zip(axes, (pe, pe @ pe.mT), ("encoding", "dot products"), strict=True):
        mesh = ax.pcolormesh(matrix)
        ax.invert_yaxis()
        ax.set(title=title, xlabel="column", ylabel="row")
        fig.colorbar(mesh, ax=ax)
    return fig


# ------------------------------------------------------------------- PE[p] . PE[p + k]


def dot_einsum(offset, hidden_size, base=10000.0):
    freqs = torch.exp(-math.log(base) * torch.arange(0, hidden_size, 2, dtype=torch.float32) / hidden_size)
    return torch.cos(torch.einsum("...,i->...i", offset.to(torch.float32), freqs)).sum(-1)


def dot_complex(offset, hidden_size, base=10000.0):
    """Real part of sum over pairs i of exp(1j * w_i * offset)."""
    freqs = base ** (-torch.arange(0, hidden_size, 2, dtype=torch.float32) / hidden_size)
    angles = offset.float().unsqueeze(-1) * freqs
    return torch.polar(torch.ones_like(angles), angles).sum(-1).real


# ------------------------------------------------------------------------------- M_k


def shift_loop(k, hidden_size, base=10000.0):
    """Blocks written one by one with Python floats."""
    m = torch.zeros(hidden_size, hidden_size)
    for i in range(hidden_size // 2):
        b = k / base ** (2 * i / hidden_size)
        m[2 * i : 2 * i + 2, 2 * i : 2 * i + 2] = torch.tensor(
            [[math.cos(b), -math.sin(b)], [math.sin(b), math.cos(b)]]
        )
    return m


def shift_matrix_exp(k, hidden_size, base=10000.0):
    """exp(k G) for the generator G = block_diag([[0, -w_i], [w_i, 0]]), in float64."""
    freqs = base ** (-torch.arange(0, hidden_size, 2, dtype=torch.float64) / hidden_size)
    zeros = torch.zeros_like(freqs)
    generator = torch.block_diag(*torch.stack([zeros, -freqs, freqs, zeros], -1).reshape(-1, 2, 2))
    return torch.linalg.matrix_exp(k * generator).float()


# ------------------------------------------------------------- learned positional table


class LearnedSliced(nn.Module):
    """Slices the weight instead of looking positions up; checks the table's own size."""

    def __init__(self, max_seq_len, hidden_size):
        super().__init__()
        self.position_embedding = nn.Embedding(num_embeddings=max_seq_len, embedding_dim=hidden_size)

    def forward(self, token_embeddings):
        length, rows = token_embeddings.size(1), self.position_embedding.num_embeddings
        if length > rows:
            raise ValueError(f"got {length} tokens but max_seq_len is {rows}")
        return token_embeddings + self.position_embedding.weight[:length].unsqueeze(0)


class LearnedFunctional(nn.Module):
    """F.embedding on a (B, T) grid of positions."""

    def __init__(self, max_seq_len, hidden_size):
        super().__init__()
        self.max_seq_len = max_seq_len
        self.position_embedding = nn.Embedding(max_seq_len, hidden_size)

    def forward(self, token_embeddings):
        B, T, _ = token_embeddings.shape
        if T > self.max_seq_len:
            raise ValueError(f"T={T} > max_seq_len={self.max_seq_len}")
        positions = torch.arange(T).expand(B, T)  # (B, T)
        return token_embeddings + F.embedding(positions, self.position_embedding.weight)


# --------------------------------------------------------------- permutation equivariance


def gap_index_select(attention, x, perm, positions=None):
    extra = 0 if positions is None else positions
    permuted = attention(torch.index_select(x, 1, perm) + extra)
    expected = torch.index_select(attention(x + extra), 1, perm)
    return torch.amax(torch.abs(permuted - expected))


def gap_unpermuted(attention, x, perm, positions=None):
    """Undo the permutation on the output instead: the same differences, so the same maximum."""
    f = attention if positions is None else (lambda z: attention(z + positions))
    inverse = torch.empty_like(perm)
    inverse[perm] = torch.arange(len(perm))
    return (f(x[:, perm])[:, inverse] - f(x)).abs().max()


ALTERNATIVES = {
    "02.sinusoidal": [sinusoidal_exp_log, sinusoidal_loop],
    "02.pe_figure": [plot_with_matshow, plot_with_pcolormesh],
    "02.pe_dot_product": [dot_einsum, dot_complex],
    "02.relative_shift": [shift_loop, shift_matrix_exp],
    "02.learned_positions": [LearnedSliced, LearnedFunctional],
    "02.permutation_equivariance": [gap_index_select, gap_unpermuted],
}
