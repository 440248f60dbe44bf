"""Known wrong versions of notebook 02's answers: the judge names them, the tests use them as mutants.

Instructor-side only (next to the reference, not released). Each has exactly one thing wrong.
"""

import matplotlib.pyplot as plt
import torch
import torch.nn as nn

from autograder.checks.positions import EARLY_ERROR
from autograder.core import Mistake

# ------------------------------------------------------------------ sinusoidal encoding


def _freqs(hidden_size, base, *, invert=True, step=2):
    exponents = torch.arange(0, hidden_size, step, dtype=torch.float32) / hidden_size
    return 1.0 / base**exponents if invert else base**exponents


def _pe(seq_len, hidden_size, base=10000.0, *, invert=True, start=0, swapped=False, halves=False):
    positions = torch.arange(start, start + seq_len, dtype=torch.float32)
    angles = torch.outer(positions, _freqs(hidden_size, base, invert=invert))  # (T, D/2)
    first, second = (angles.cos(), angles.sin()) if swapped else (angles.sin(), angles.cos())
    if halves:
        return torch.cat([first, second], dim=-1)
    return torch.stack([first, second], dim=-1).flatten(-2)  # (T, D), interleaved


def sin_cos_swapped(seq_len, hidden_size, base=10000.0):
    return _pe(seq_len, hidden_size, base, swapped=True)


def freqs_not_inverted(seq_len, hidden_size, base=10000.0):
    return _pe(seq_len, hidden_size, base, invert=False)


def sin_and_cos_halves(seq_len, hidden_size, base=10000.0):
    return _pe(seq_len, hidden_size, base, halves=True)


def exponent_per_column(seq_len, hidden_size, base=10000.0):
    angles = torch.outer(torch.arange(seq_len, dtype=torch.float32), _freqs(hidden_size, base, step=1))
    pe = torch.empty(seq_len, hidden_size)
    pe[:, 0::2] = angles[:, 0::2].sin()
    pe[:, 1::2] = angles[:, 1::2].cos()
    return pe


def positions_from_one(seq_len, hidden_size, base=10000.0):
    return _pe(seq_len, hidden_size, base, start=1)


def base_ignored(seq_len, hidden_size, base=10000.0):
    return _pe(seq_len, hidden_size)


# ----------------------------------------------------------------------- the PE figure


def _figure(left, right, colorbars=True, labels=True):
    fig, axes = plt.subplots(1, 2)
    for ax, matrix, title in zip(axes, (left, right), ("PE", "PE @ PE.T"), strict=True):
        image = ax.imshow(matrix)
        if labels:
            ax.set(title=title, xlabel="x", ylabel="y")
        if colorbars:
            fig.colorbar(image, ax=ax)
    return fig


def pe_transposed(seq_len, hidden_size):
    pe = _pe(seq_len, hidden_size)
    return _figure(pe.T, pe @ pe.T)


def pe_in_both_panels(seq_len, hidden_size):
    pe = _pe(seq_len, hidden_size)
    return _figure(pe, pe)


def dims_dot_product(seq_len, hidden_size):
    pe = _pe(seq_len, hidden_size)
    return _figure(pe, pe.T @ pe)


def no_colorbars(seq_len, hidden_size):
    pe = _pe(seq_len, hidden_size)
    return _figure(pe, pe @ pe.T, colorbars=False)


def no_titles_or_labels(seq_len, hidden_size):
    pe = _pe(seq_len, hidden_size)
    return _figure(pe, pe @ pe.T, labels=False)


# ------------------------------------------------------------------- PE[p] . PE[p + k]


def _angles(offset, hidden_size, base, **kwargs):
    return offset.float()[..., None] * _freqs(hidden_size, base, **kwargs)  # offset.shape + (F,)


def dot_with_sin(offset, hidden_size, base=10000.0):
    return _angles(offset, hidden_size, base).sin().sum(-1)


def dot_pairs_counted_twice(offset, hidden_size, base=10000.0):
    return 2 * _angles(offset, hidden_size, base).cos().sum(-1)


def dot_frequency_per_column(offset, hidden_size, base=10000.0):
    return _angles(offset, hidden_size, base, step=1).cos().sum(-1)


def dot_freqs_not_inverted(offset, hidden_size, base=10000.0):
    return _angles(offset, hidden_size, base, invert=False).cos().sum(-1)


def dot_base_ignored(offset, hidden_size, base=10000.0):
    return _angles(offset, hidden_size, 10000.0).cos().sum(-1)


# ------------------------------------------------------------------------------- M_k


def _blocks(angles, transpose=False):
    cos, sin = angles.cos(), angles.sin()
    if transpose:
        sin = -sin
    return torch.block_diag(*torch.stack([cos, -sin, sin, cos], dim=-1).reshape(-1, 2, 2))


def shift_blocks_transposed(k, hidden_size, base=10000.0):
    return _blocks(k * _freqs(hidden_size, base), transpose=True)


def shift_one_angle(k, hidden_size, base=10000.0):
    return _blocks(torch.full((hidden_size // 2,), float(k)))


def shift_freqs_not_inverted(k, hidden_size, base=10000.0):
    return _blocks(k * _freqs(hidden_size, base, invert=False))


def shift_base_ignored(k, hidden_size, base=10000.0):
    return _blocks(k * _freqs(hidden_size, 10000.0))


def shift_half_split_pairs(k, hidden_size, base=10000.0):
    perm = torch.cat([torch.arange(0, hidden_size, 2), torch.arange(1, hidden_size, 2)])
    return _blocks(k * _freqs(hidden_size, base))[perm][:, perm]  # pair (i, i + D/2) turned by w_i k


# ------------------------------------------------------------- learned positional table


class _Learned(nn.Module):
    def __init__(self, max_seq_len, hidden_size):
        super().__init__()
        self.max_seq_len = max_seq_len
        self.position_embedding = nn.Embedding(max_seq_len, hidden_size)

    def forward(self, token_embeddings):
        T = token_embeddings.shape[1]
        if T > self.max_seq_len:
            raise ValueError(f"T={T} > max_seq_len={self.max_seq_len}")
        return token_embeddings + self.position_embedding(torch.arange(T))


class TableHiddenByHidden(_Learned):
    def __init__(self, max_seq_len, hidden_size):
        super().__init__(max_seq_len, hidden_size)
        self.position_embedding = nn.Embedding(hidden_size, hidden_size)


class NoLengthCheck(_Learned):
    def forward(self, token_embeddings):
        T = token_embeddings.shape[1]
        return token_embeddings + self.position_embedding(torch.arange(T))


class PositionsPerBatchRow(_Learned):
    def forward(self, token_embeddings):
        B, T = token_embeddings.shape[:2]
        if T > self.max_seq_len:
            raise ValueError(f"T={T} > max_seq_len={self.max_seq_len}")
        return token_embeddings + self.position_embedding(torch.arange(B))[:, None, :]  # (B, 1, D)


class ErrorAtMaxSeqLen(_Learned):
    def forward(self, token_embeddings):
        T = token_embeddings.shape[1]
        if T >= self.max_seq_len:
            raise ValueError(f"T={T} > max_seq_len={self.max_seq_len}")
        return token_embeddings + self.position_embedding(torch.arange(T))


class ClampedPositions(_Learned):
    def forward(self, token_embeddings):
        T = token_embeddings.shape[1]
        positions = torch.arange(T).clamp(max=self.max_seq_len - 1)
        return token_embeddings + self.position_embedding(positions)


class VagueError(_Learned):
    def forward(self, token_embeddings):
        if token_embeddings.shape[1] > self.max_seq_len:
            raise ValueError("sequence too long")
        return super().forward(token_embeddings)


# --------------------------------------------------------------- permutation equivariance


def _f(attention, positions):
    return lambda z: attention(z if positions is None else z + positions)


def gap_inverse_permutation(attention, x, perm, positions=None):
    f = _f(attention, positions)
    return (f(x[:, perm]) - f(x)[:, torch.argsort(perm)]).abs().max()


def gap_positions_follow_tokens(attention, x, perm, positions=None):
    shifted = x if positions is None else x + positions
    return (attention(shifted[:, perm]) - attention(shifted)[:, perm]).abs().max()


def gap_positions_added_after(attention, x, perm, positions=None):
    def f(z):
        return attention(z) if positions is None else attention(z) + positions

    return (f(x[:, perm]) - f(x)[:, perm]).abs().max()


MISTAKES = {
    "02.sinusoidal": [
        Mistake(
            "sin and cos swapped",
            "even columns (0, 2, ...) hold sin, odd columns cos: row 0 is [0, 1, 0, 1, ...].",
            sin_cos_swapped,
        ),
        Mistake(
            "frequencies base^(2i/d) instead of 1 / base^(2i/d)",
            "the frequencies must shrink with i: freqs = 1.0 / base ** (2i / hidden_size).",
            freqs_not_inverted,
        ),
        Mistake(
            "all sines in the first half, all cosines in the second",
            "interleave them: pe[:, 0::2] = sin, pe[:, 1::2] = cos.",
            sin_and_cos_halves,
        ),
        Mistake(
            "one frequency per column (exponent i/d) instead of one per pair (2i/d)",
            "columns 2i and 2i + 1 share the frequency 1 / base^(2i/d): torch.arange(0, hidden_size, 2).",
            exponent_per_column,
        ),
        Mistake(
            "positions start at 1",
            "positions are torch.arange(seq_len): 0, 1, ..., seq_len - 1.",
            positions_from_one,
        ),
        Mistake(
            "the base argument is ignored (10000 written in)",
            "use base in the frequencies: 1.0 / base ** (2i / hidden_size).",
            base_ignored,
        ),
    ],
    "02.pe_figure": [
        Mistake(
            "the PE matrix is transposed (positions on the x axis)",
            "imshow(pe) puts rows, the positions, on the y axis; do not transpose.",
            pe_transposed,
        ),
        Mistake(
            "the raw PE matrix in both panels",
            "the second panel shows pe @ pe.T, shape (seq_len, seq_len).",
            pe_in_both_panels,
        ),
        Mistake(
            "PE.T @ PE (dims x dims) instead of PE @ PE.T (positions x positions)",
            "entry [p, q] of the second panel is PE[p] . PE[q]: pe @ pe.T.",
            dims_dot_product,
        ),
        Mistake(
            "no colorbars",
            "add fig.colorbar(image, ax=ax) for each panel: a heat map needs its scale.",
            no_colorbars,
        ),
        Mistake(
            "panels without a title or axis labels",
            "give each panel ax.set_title, ax.set_xlabel and ax.set_ylabel ('position', 'hidden dimension').",
            no_titles_or_labels,
        ),
    ],
    "02.pe_dot_product": [
        Mistake(
            "sin instead of cos",
            "sin a sin b + cos a cos b = cos(a - b): the terms are cosines.",
            dot_with_sin,
        ),
        Mistake(
            "each pair counted twice",
            "sum over the hidden_size / 2 pairs, not over all hidden_size columns.",
            dot_pairs_counted_twice,
        ),
        Mistake(
            "one frequency per column",
            "the hidden_size / 2 frequencies are 1 / base^(2i/d) with 2i = 0, 2, ...",
            dot_frequency_per_column,
        ),
        Mistake(
            "frequencies base^(2i/d) instead of 1 / base^(2i/d)",
            "invert the frequencies.",
            dot_freqs_not_inverted,
        ),
        Mistake(
            "the base argument is ignored (10000 written in)",
            "use base in the frequencies: 1.0 / base ** (2i / hidden_size).",
            dot_base_ignored,
        ),
    ],
    "02.relative_shift": [
        Mistake(
            "each 2x2 block transposed: M_(-k), a shift backwards",
            "with row vectors [sin a, cos a] @ B, B = [[cos b, -sin b], [sin b, cos b]].",
            shift_blocks_transposed,
        ),
        Mistake(
            "the same angle k for every pair",
            "pair i turns by w_i * k with w_i = 1 / base^(2i/d).",
            shift_one_angle,
        ),
        Mistake(
            "frequencies base^(2i/d) instead of 1 / base^(2i/d)",
            "invert the frequencies.",
            shift_freqs_not_inverted,
        ),
        Mistake(
            "the base argument is ignored (10000 written in)",
            "use base in the frequencies: 1.0 / base ** (2i / hidden_size).",
            shift_base_ignored,
        ),
        Mistake(
            "pairs (i, i + d/2) instead of (2i, 2i + 1)",
            "the PE interleaves sin and cos: the blocks sit on the diagonal at [2i:2i+2, 2i:2i+2].",
            shift_half_split_pairs,
        ),
    ],
    "02.learned_positions": [
        Mistake(
            "a (hidden_size, hidden_size) table",
            "the table has one row per position: nn.Embedding(max_seq_len, hidden_size).",
            TableHiddenByHidden,
        ),
        Mistake(
            "no length check: nn.Embedding's IndexError past max_seq_len",
            "'index out of range in self' does not say what went wrong; check T > max_seq_len first and "
            "raise ValueError naming both numbers.",
            NoLengthCheck,
        ),
        Mistake(
            "positions indexed by batch row instead of by token",
            "the positions are torch.arange(T) along dim 1, the same for every sequence of the batch.",
            PositionsPerBatchRow,
        ),
        # Its run ends in the ValueError, which the check's error hint explains in these words.
        Mistake(EARLY_ERROR, "raise only when T > max_seq_len.", ErrorAtMaxSeqLen),
        Mistake(
            "positions past the table silently clamped",
            "a learned table has no row for positions >= max_seq_len: raise a ValueError.",
            ClampedPositions,
        ),
        Mistake(
            "the ValueError does not name T and max_seq_len",
            "say what happened, e.g. f'sequence length {T} exceeds max_seq_len={self.max_seq_len}'.",
            VagueError,
        ),
    ],
    "02.permutation_equivariance": [
        Mistake(
            "the output permuted with the inverse permutation",
            "permute the output the same way as the input: f(x)[:, perm], not f(x)[:, argsort(perm)].",
            gap_inverse_permutation,
        ),
        Mistake(
            "the positions travel with their tokens",
            "positions belong to slots: add them after permuting, f(z) = attention(z + positions) for "
            "z = x[:, perm].",
            gap_positions_follow_tokens,
        ),
        Mistake(
            "positions added to the attention output",
            "add the positions to the input of attention.",
            gap_positions_added_after,
        ),
    ],
}
