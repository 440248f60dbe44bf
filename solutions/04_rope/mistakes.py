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


def _angles(dim, context_size, period, *, invert=True):
    """The real (C, dim // 2) angles p * w_k, before torch.polar."""
    exponents = torch.arange(0, dim, 2, dtype=torch.float32) / dim
    freqs = 1.0 / period**exponents if invert else period**exponents
    return torch.outer(torch.arange(context_size, dtype=torch.float32), freqs)


def angles_not_exponentiated(dim, context_size, period):
    return _angles(dim, context_size, period)


def angles_of_uninverted_frequencies(dim, context_size, period):
    return _angles(dim, context_size, period, invert=False)


def angles_frequencies_first(dim, context_size, period):
    """torch.outer(freqs, positions): (dim // 2, C), real."""
    return _angles(dim, context_size, period).T.contiguous()


def cos_sin_pairs(dim, context_size, period):
    """(C, dim // 2, 2): the real and imaginary parts, as torch.view_as_real would give them."""
    thetas = _angles(dim, context_size, period)
    return torch.stack([thetas.cos(), thetas.sin()], dim=-1)


def cos_sin_concatenated(dim, context_size, period):
    """(C, dim): the cosines, then the sines."""
    thetas = _angles(dim, context_size, period)
    return torch.cat([thetas.cos(), thetas.sin()], dim=-1)


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


class TableAsBuffer(_RoPE):
    """What the course itself did first: .to(torch.bfloat16) turns the buffer into its real part."""

    def __init__(self, rotation_matrix):
        nn.Module.__init__(self)
        self.register_buffer("rotation_matrix", rotation_matrix, persistent=False)


class AnglesAsBuffer(_RoPE):
    """The angles as a float buffer, made complex in forward: .to(torch.bfloat16) rounds them."""

    def __init__(self, rotation_matrix):
        nn.Module.__init__(self)
        self.register_buffer("angles", rotation_matrix.angle(), persistent=False)

    def _table(self, T):
        angles = self.angles[:T].float()
        return torch.polar(torch.ones_like(angles), angles)


class CosSinAsBuffers(_RoPE):
    """cos and sin as float buffers: .to(torch.bfloat16) rounds them."""

    def __init__(self, rotation_matrix):
        nn.Module.__init__(self)
        self.register_buffer("cos", rotation_matrix.real.contiguous(), persistent=False)
        self.register_buffer("sin", rotation_matrix.imag.contiguous(), persistent=False)

    def _table(self, T):
        return torch.complex(self.cos[:T].float(), self.sin[:T].float())


class RebuildsTable(_RoPE):
    """Llama's default table (period 10 000) built from the input's shape; the given one is ignored."""

    def _rotate(self, x):
        self._dim = x.shape[-1]
        return super()._rotate(x)

    def _table(self, T):
        freqs = 1.0 / 10_000.0 ** (torch.arange(0, self._dim, 2, dtype=torch.float32) / self._dim)
        thetas = torch.outer(torch.arange(T, dtype=torch.float32), freqs)
        return torch.polar(torch.ones_like(thetas), thetas)


class PairsReadSwapped(_RoPE):
    """Each pair read as x[2k+1] + i x[2k] and written back in the same swapped order."""

    def _rotate(self, x):
        B, H, T, Dh = x.shape
        z = torch.view_as_complex(x.float().reshape(B, H, T, Dh // 2, 2).flip(-1).contiguous())
        return torch.view_as_real(z * self._table(T)).flip(-1).reshape(B, H, T, Dh).type_as(x)


class PairsReadSwappedOnly(_RoPE):
    """Each pair read as x[2k+1] + i x[2k], but written back as (real, imaginary)."""

    def _rotate(self, x):
        B, H, T, Dh = x.shape
        z = torch.view_as_complex(x.float().reshape(B, H, T, Dh // 2, 2).flip(-1).contiguous())
        return torch.view_as_real(z * self._table(T)).reshape(B, H, T, Dh).type_as(x)


class TableFromTheEnd(_RoPE):
    def _table(self, T):
        return self.rotation_matrix[-T:]


class KeysNotRotated(_RoPE):
    def forward(self, queries, keys):
        return self._rotate(queries), keys


def half_split_order_reversed(dim):
    return torch.cat([torch.arange(1, dim, 2), torch.arange(0, dim, 2)])


def half_split_inverse(dim):
    """Where each interleaved feature goes (a scatter index), not which feature each position takes."""
    return torch.stack([torch.arange(dim // 2), torch.arange(dim // 2) + dim // 2], dim=-1).flatten()


def identity_permutation(dim):
    return torch.arange(dim)


MISTAKES = {
    "04.rotation_matrix": [
        Mistake(
            "frequencies period^(2k/dim) instead of 1 / period^(2k/dim)",
            "the frequencies must shrink with k: freqs = 1.0 / period ** (2k / dim).",
            freqs_not_inverted,
        ),
        Mistake(
            "token positions start at 1",
            "positions are torch.arange(context_size): 0, 1, ..., C - 1.",
            positions_from_one,
        ),
        Mistake(
            "one frequency per feature instead of per pair",
            "use torch.arange(0, dim, 2): dim // 2 frequencies, one per pair.",
            every_feature_a_frequency,
        ),
        Mistake(
            "torch.polar's arguments swapped",
            "torch.polar(abs, angle): the moduli (ones) come first.",
            polar_arguments_swapped,
        ),
        Mistake(
            "the angles are returned, not e^(i angle)",
            "finish with torch.polar(torch.ones_like(t), t).",
            angles_not_exponentiated,
        ),
        Mistake(
            "the angles are returned, not e^(i angle), and their frequencies are period^(2k/dim) instead of "
            "1 / period^(2k/dim)",
            "two things: the frequencies must shrink with k, freqs = 1.0 / period ** (2k / dim); and the "
            "table holds e^(i angle), so finish with torch.polar(torch.ones_like(t), t).",
            angles_of_uninverted_frequencies,
        ),
        Mistake(
            "the angles are returned as a real (dim // 2, context_size) tensor: torch.outer(freqs, "
            "positions), not e^(i angle)",
            "row p is position p: torch.outer(positions, freqs) gives the (context_size, dim // 2) angles; "
            "then finish with torch.polar(torch.ones_like(t), t), which makes them complex.",
            angles_frequencies_first,
        ),
        Mistake(
            "cos and sin returned as a real (context_size, dim // 2, 2) tensor, not as complex numbers",
            "RoPE multiplies complex pairs by the table, so it must be complex: "
            "torch.polar(torch.ones_like(t), t) (or torch.complex(cos, sin)) gives the (context_size, "
            "dim // 2) table of e^(i t).",
            cos_sin_pairs,
        ),
        Mistake(
            "cos and sin concatenated into a real (context_size, dim) tensor, not complex numbers",
            "the table is (context_size, dim // 2) complex: torch.polar(torch.ones_like(t), t) (or "
            "torch.complex(cos, sin)) puts each cosine and sine into one complex entry.",
            cos_sin_concatenated,
        ),
    ],
    "04.rope_forward": [
        Mistake(
            "pairs (i, i + Dh/2) (rotate-half layout) instead of interleaved pairs (2k, 2k + 1)",
            "reshape the last dimension to (Dh // 2, 2) so that neighbours form a pair.",
            HalfSplitPairs,
        ),
        Mistake(
            "forward rebuilds its own table instead of using the one passed to __init__",
            "the checks pass tables of other frequencies, as a model with another period or Llama 3.1's "
            "rescaled table would: multiply by self.rotation_matrix[:T].",
            RebuildsTable,
        ),
        Mistake(
            "every pair rotated by -theta, the wrong way round",
            "reading each pair as x[2k+1] + i x[2k] and writing it back the same way does this, and so do "
            "multiplying by the table's conjugate and the 2x2 form (a cos + b sin, -a sin + b cos). x[2k] "
            "is the real part: view_as_complex on the (Dh // 2, 2) reshape as it is, with no flip or swap, "
            "times self.rotation_matrix[:T].",
            PairsReadSwapped,
        ),
        Mistake(
            "each pair read as x[2k+1] + i x[2k]: real and imaginary parts swapped",
            "x[2k] is the real part and x[2k+1] the imaginary part: view_as_complex on the (Dh // 2, 2) "
            "reshape as it is, with no flip or swap; view_as_real gives them back in the same order.",
            PairsReadSwappedOnly,
        ),
        Mistake(
            "the wrong rows of the rotation table",
            "position t uses row t: truncate with rotation_matrix[:T].",
            TableFromTheEnd,
        ),
        Mistake(
            "the keys are not rotated",
            "rotate both queries and keys (values are the ones left alone).",
            KeysNotRotated,
        ),
        Mistake(
            "the table is kept as a buffer, which module.to(torch.bfloat16) turns into real numbers",
            "keep the given __init__: a plain attribute (self.rotation_matrix = rotation_matrix) is left "
            "alone by .to(), and forward moves it to the input's device.",
            TableAsBuffer,
        ),
        Mistake(
            "the angles are kept as a buffer, which module.to(torch.bfloat16) rounds to bfloat16",
            "bfloat16 rounds an angle between 8 and 16 radians to a multiple of 1/16, even after a cast back "
            "to float32. Keep the given __init__: the complex table as a plain attribute, which .to() leaves "
            "alone.",
            AnglesAsBuffer,
        ),
        Mistake(
            "cos and sin are kept as buffers, which module.to(torch.bfloat16) rounds to bfloat16",
            "bfloat16 keeps 8 significant bits (errors up to 0.002 on a cosine), even after a cast back to "
            "float32. Keep the given __init__: the complex table as a plain attribute, which .to() leaves "
            "alone.",
            CosSinAsBuffers,
        ),
        Mistake(
            "the output dtype is not the input's",
            "return the result .type_as(x): bfloat16 in, bfloat16 out.",
            DtypeNotPreserved,
        ),
    ],
    "04.half_split_permutation": [
        Mistake(
            "odd features first",
            "even features (first of each pair) go to the first half.",
            half_split_order_reversed,
        ),
        Mistake(
            "the inverse permutation: where each interleaved feature goes, not which feature each "
            "position takes",
            "perm is used to gather, x_half = x[..., perm]: perm[j] is the interleaved feature that "
            "position j of the half-split vector holds, so for k < dim/2, perm[k] is the first feature of "
            "pair k.",
            half_split_inverse,
        ),
        Mistake(
            "the identity permutation",
            "interleaved and half-split layouts differ: move feature 2k to k.",
            identity_permutation,
        ),
    ],
}
