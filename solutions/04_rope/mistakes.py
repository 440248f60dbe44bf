"""Known wrong versions of notebook 04's answers: the judge names them, the tests use them as mutants.

Instructor-side only (next to the reference, not released).
"""

import torch
import torch.nn as nn

from autograder.core import Mistake


def _table(dim, context_size, period, *, invert=True, start=0, step=2, polar_swapped=False):
    exponents = torch.arange(0, dim, step, dtype=torch.float32) / dim
    freqs = 1.0 / period**exponents if invert else period**exponents
    positions = torch.arange(start, start + context_size, dtype=torch.float32)
    thetas = torch.outer(positions, freqs)
    ones = torch.ones_like(thetas)
    return torch.polar(thetas, ones) if polar_swapped else torch.polar(ones, thetas)


def freqs_not_inverted(dim, context_size, period):
    return _table(dim, context_size, period, invert=False)


def positions_from_one(dim, context_size, period):
    return _table(dim, context_size, period, start=1)


def every_feature_a_frequency(dim, context_size, period):
    return _table(dim, context_size, period, step=1)


def polar_arguments_swapped(dim, context_size, period):
    return _table(dim, context_size, period, polar_swapped=True)


def angles_not_exponentiated(dim, context_size, period):
    freqs = 1.0 / period ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim)
    return torch.outer(torch.arange(context_size, dtype=torch.float32), freqs)


class _RoPE(nn.Module):
    def __init__(self, rotation_matrix):
        super().__init__()
        self.rotation_matrix = rotation_matrix

    def forward(self, queries, keys):
        return self._rotate(queries), self._rotate(keys)

    def _rotate(self, x):
        B, H, T, Dh = x.shape
        z = torch.view_as_complex(x.float().reshape(B, H, T, Dh // 2, 2))
        return torch.view_as_real(z * self._table(T)).reshape(B, H, T, Dh).type_as(x)

    def _table(self, T):
        return self.rotation_matrix[:T]


class HalfSplitPairs(_RoPE):
    def _rotate(self, x):
        B, H, T, Dh = x.shape
        half = x.float().reshape(B, H, T, 2, Dh // 2).transpose(-1, -2)  # pairs (i, i + Dh/2)
        z = torch.view_as_complex(half.contiguous())
        out = torch.view_as_real(z * self._table(T)).transpose(-1, -2).reshape(B, H, T, Dh)
        return out.type_as(x)


class DtypeNotPreserved(_RoPE):
    def _rotate(self, x):
        B, H, T, Dh = x.shape
        z = torch.view_as_complex(x.float().reshape(B, H, T, Dh // 2, 2))
        return torch.view_as_real(z * self._table(T)).reshape(B, H, T, Dh)


class RotatesBackwards(_RoPE):
    def _table(self, T):
        return self.rotation_matrix[:T].conj()


class TableFromTheEnd(_RoPE):
    def _table(self, T):
        return self.rotation_matrix[-T:]


class KeysNotRotated(_RoPE):
    def forward(self, queries, keys):
        return self._rotate(queries), keys


def half_split_order_reversed(dim):
    return torch.cat([torch.arange(1, dim, 2), torch.arange(0, dim, 2)])


def identity_permutation(dim):
    return torch.arange(dim)


MISTAKES = {
    "04.rotation_matrix": [
        Mistake("frequencies period^(2k/dim) instead of 1 / period^(2k/dim)",
                "the frequencies must shrink with k: freqs = 1.0 / period ** (2k / dim).", freqs_not_inverted),
        Mistake("token positions start at 1", "positions are torch.arange(context_size): 0, 1, ..., C - 1.",
                positions_from_one),
        Mistake("one frequency per feature instead of per pair",
                "use torch.arange(0, dim, 2): dim // 2 frequencies, one per pair.", every_feature_a_frequency),
        Mistake("torch.polar's arguments swapped", "torch.polar(abs, angle): the moduli (ones) come first.",
                polar_arguments_swapped),
        Mistake("the angles are returned, not e^(i angle)", "finish with torch.polar(torch.ones_like(t), t).",
                angles_not_exponentiated),
    ],
    "04.rope_forward": [
        Mistake("pairs (i, i + Dh/2) (rotate-half layout) instead of interleaved pairs (2k, 2k + 1)",
                "reshape the last dimension to (Dh // 2, 2) so that neighbours form a pair.", HalfSplitPairs),
        Mistake("the output dtype is not the input's", "return the result .type_as(x): bfloat16 in, bfloat16 out.",
                DtypeNotPreserved),
        Mistake("rotation in the wrong direction", "multiply by the table itself, not its conjugate.",
                RotatesBackwards),
        Mistake("the wrong rows of the rotation table",
                "position t uses row t: truncate with rotation_matrix[:T].", TableFromTheEnd),
        Mistake("the keys are not rotated", "rotate both queries and keys (values are the ones left alone).",
                KeysNotRotated),
    ],
    "04.half_split_permutation": [
        Mistake("odd features first", "even features (first of each pair) go to the first half.",
                half_split_order_reversed),
        Mistake("the identity permutation", "interleaved and half-split layouts differ: move feature 2k to k.",
                identity_permutation),
    ],
}
