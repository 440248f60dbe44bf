"""Known wrong versions of notebook 03's answers: the judge names them, the tests use them as mutants.

Instructor-side only (next to the reference, not released). Each is a complete implementation
with one thing wrong. Key: B batch, T sequence length, D hidden size, H heads, Dh = D // H,
W window size, C context size (rows of a RoPE table).

Every name defined here is private or a mistake's own: a test hands a mistake in by pasting
this file into a notebook's answer cell, where a public name (RoPE, window_attention, ...)
would replace the notebook's. For the same reason nothing here reads the reference (a grading
sandbox cannot read solutions/): `_RoPE` is notebook 04's RoPE, written again.
"""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from autograder.checks.sliding_window import ROPE_INSIDE, TABLE_TOO_SHORT
from autograder.core import Mistake

# ------------------------------------------------------------------ RoPE (notebook 04)


def _rotation_table(dim, context_size, period=10_000.0):
    """The standard table, (C, dim // 2) complex64: what a layer that ignores the given one builds."""
    freqs = 1.0 / period ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim)
    thetas = torch.outer(torch.arange(context_size, dtype=torch.float32), freqs)
    return torch.polar(torch.ones_like(thetas), thetas)


class _RoPE(nn.Module):
    """Notebook 04's RoPE, right: interleaved pairs times rotation_matrix[:T], a plain attribute."""

    def __init__(self, rotation_matrix):
        super().__init__()
        self.rotation_matrix = rotation_matrix

    def forward(self, queries, keys):
        self.rotation_matrix = self.rotation_matrix.to(queries.device)
        return self._rotate(queries), self._rotate(keys)

    def _rotate(self, x):
        B, H, T, Dh = x.shape
        z = torch.view_as_complex(x.float().reshape(B, H, T, Dh // 2, 2))  # (B, H, T, Dh/2)
        return torch.view_as_real(z * self.rotation_matrix[:T]).reshape(B, H, T, Dh).type_as(x)


# ------------------------------------------------------ the layer (Questions 1 to 6, 10)


class _Layer(nn.Module):
    """The reference layer cut into its steps; each mistake overrides one."""

    def __init__(self, hidden_size, num_heads, window_size, rotation_matrix=None):
        super().__init__()
        self.hidden_size = hidden_size
        self.num_heads = num_heads
        self.head_dim = hidden_size // num_heads
        self.window_size = window_size
        self.qkv_linear = nn.Linear(hidden_size, 3 * hidden_size)
        self.out = nn.Linear(hidden_size, hidden_size)
        self.rope = None if rotation_matrix is None else _RoPE(rotation_matrix)

    def forward(self, x):
        B, T, D = x.shape
        queries, keys, values = self._rotate(*self._split(x))  # (B, H, T, Dh) each
        keys_windows = self._windows(keys, T)  # (B, H, T, Dh, W)
        values_windows = self._windows(values, T)
        attention = self._softmax(self._scores(queries, keys_windows))  # (B, H, T, W)
        context = self._context(attention, values_windows)  # (B, T, H, Dh)
        return self.out(context.reshape(B, T, D))  # (B, T, D)

    def _split(self, x):
        B, T, _ = x.shape
        qkv = self.qkv_linear(x).view(B, T, self.num_heads, 3 * self.head_dim).transpose(1, 2)
        return qkv.chunk(3, dim=-1)  # (B, H, T, Dh) each

    def _rotate(self, queries, keys, values):
        if self.rope is not None:
            queries, keys = self.rope(queries, keys)
        return queries, keys, values

    def _pad(self, x):
        p = self.window_size // 2
        return F.pad(x, (0, 0, p, p))  # (B, H, T + 2p, Dh)

    def _windows(self, x, T):
        return self._pad(x).unfold(2, self.window_size, 1)[:, :, :T]  # (B, H, T, Dh, W)

    def _scores(self, queries, keys_windows):
        return torch.einsum("bhtd,bhtdw->bhtw", queries, keys_windows) / math.sqrt(self.head_dim)

    def _softmax(self, scores):
        return scores.softmax(dim=-1)

    def _context(self, attention, values_windows):
        return torch.einsum("bhtw,bhtdw->bthd", attention, values_windows)  # (B, T, H, Dh)


class PerProjectionSplit(_Layer):
    """[q | k | v] along the last dimension, each D wide, then heads: another layout of the weights."""

    def _split(self, x):
        B, T, _ = x.shape
        return tuple(
            part.reshape(B, T, self.num_heads, self.head_dim).transpose(1, 2)  # (B, H, T, Dh)
            for part in self.qkv_linear(x).chunk(3, dim=-1)
        )


class WindowAndHeadDimSwapped(_Layer):
    """Both einsums read the windows as (B, H, T, W, Dh): they run only when Dh == W."""

    def _scores(self, queries, keys_windows):
        return torch.einsum("bhtd,bhtwd->bhtw", queries, keys_windows) / math.sqrt(self.head_dim)

    def _context(self, attention, values_windows):
        return torch.einsum("bhtw,bhtwd->bthd", attention, values_windows)


class ScaledBySqrtD(_Layer):
    def _scores(self, queries, keys_windows):
        return torch.einsum("bhtd,bhtdw->bhtw", queries, keys_windows) / math.sqrt(self.hidden_size)


class NotScaled(_Layer):
    def _scores(self, queries, keys_windows):
        return torch.einsum("bhtd,bhtdw->bhtw", queries, keys_windows)


class SoftmaxOverPositions(_Layer):
    """Softmax along T (dim 2 of (B, H, T, W)), not along the window."""

    def _softmax(self, scores):
        return scores.softmax(dim=2)


class PaddedOnOneSide(_Layer):
    """2 * (W // 2) zero vectors on the left only: the same shapes, but query t sees t - 2 (W // 2) .. ."""

    def _pad(self, x):
        return F.pad(x, (0, 0, 2 * (self.window_size // 2), 0))


class WindowOfWPlusOne(_Layer):
    """unfold(2, W + 1, 1): every window holds one key too many (mistral-src once had this bug)."""

    def _windows(self, x, T):
        p = self.window_size // 2
        return F.pad(x, (0, 0, p, p + 1)).unfold(2, self.window_size + 1, 1)[:, :, :T]


class HeadsMergedBeforeTime(_Layer):
    """The context kept as (B, H, T, Dh) and reshaped to (B, T, D) without moving the heads after T."""

    def _context(self, attention, values_windows):
        return torch.einsum("bhtw,bhtdw->bhtd", attention, values_windows)  # (B, H, T, Dh)


# ----------------------------------------------------------- RoPE inside (Question 10)


class TableForTheWindow(_Layer):
    """Builds its own table of W rows: a broadcast error once T > W, other angles below."""

    def __init__(self, hidden_size, num_heads, window_size, rotation_matrix=None):
        super().__init__(hidden_size, num_heads, window_size, rotation_matrix)
        if rotation_matrix is not None:
            self.rope = _RoPE(_rotation_table(self.head_dim, window_size))


class OwnTable(_Layer):
    """Builds a standard table (period 10 000) of C rows; the frequencies given are ignored."""

    def __init__(self, hidden_size, num_heads, window_size, rotation_matrix=None):
        super().__init__(hidden_size, num_heads, window_size, rotation_matrix)
        if rotation_matrix is not None:
            self.rope = _RoPE(_rotation_table(self.head_dim, rotation_matrix.shape[0]))


class ValuesRotated(_Layer):
    def _rotate(self, queries, keys, values):
        if self.rope is not None:
            queries, keys = self.rope(queries, keys)
            values, _ = self.rope(values, values)
        return queries, keys, values


class TableAsBuffer(_Layer):
    """The table registered as a buffer of the layer: module.to(torch.bfloat16) makes it real."""

    def __init__(self, hidden_size, num_heads, window_size, rotation_matrix=None):
        super().__init__(hidden_size, num_heads, window_size)
        self.register_buffer("rotation_matrix", rotation_matrix, persistent=False)

    def _rotate(self, queries, keys, values):
        if self.rotation_matrix is not None:
            queries, keys = _RoPE(self.rotation_matrix)(queries, keys)
        return queries, keys, values


class KeysRotatedAfterPadding(_Layer):
    """The padded keys rotated: key j takes row j + W // 2 of the table."""

    def forward(self, x):
        B, T, D = x.shape
        W = self.window_size
        queries, keys, values = self._split(x)  # (B, H, T, Dh) each
        keys_padded, values_padded = self._pad(keys), self._pad(values)  # (B, H, T + 2p, Dh)
        if self.rope is not None:
            queries, keys_padded = self.rope(queries, keys_padded)
        keys_windows = keys_padded.unfold(2, W, 1)[:, :, :T]  # (B, H, T, Dh, W)
        values_windows = values_padded.unfold(2, W, 1)[:, :, :T]
        attention = self._softmax(self._scores(queries, keys_windows))
        return self.out(self._context(attention, values_windows).reshape(B, T, D))


class RotatedAfterWindowing(_Layer):
    """RoPE on the key windows: slot w of every window takes row w, whatever token it holds."""

    def forward(self, x):
        B, T, D = x.shape
        H, Dh, W = self.num_heads, self.head_dim, self.window_size
        queries, keys, values = self._split(x)  # (B, H, T, Dh) each
        keys_windows = self._windows(keys, T)  # (B, H, T, Dh, W)
        if self.rope is not None:
            slots = keys_windows.transpose(-1, -2).reshape(B, H * T, W, Dh)  # a "sequence" of W per window
            queries, slots = self.rope(queries, slots)
            keys_windows = slots.reshape(B, H, T, W, Dh).transpose(-1, -2)  # (B, H, T, Dh, W)
        attention = self._softmax(self._scores(queries, keys_windows))
        return self.out(self._context(attention, self._windows(values, T)).reshape(B, T, D))


# The mutant's run ends in a broadcast error on every case with T > W, where the check's error
# hint names it with these words.
assert any(TABLE_TOO_SHORT in hint.advice for hint in ROPE_INSIDE.error_hints)

# --------------------------------------------------------------- the mask (Question 7)


def _band(seq_length, first, last):
    """(T, T) bool, True where the offset j - i lies outside [first, last]."""
    positions = torch.arange(seq_length)
    offset = positions[None, :] - positions[:, None]  # (T, T): j - i
    return (offset < first) | (offset > last)


def _centred(window_size):
    return -(window_size // 2), window_size - 1 - window_size // 2


def mask_inverted(seq_length, window_size, causal=False):
    first, last = (-(window_size - 1), 0) if causal else _centred(window_size)
    return ~_band(seq_length, first, last)


def mask_causal_w_plus_one(seq_length, window_size, causal=False):
    first, last = (-window_size, 0) if causal else _centred(window_size)
    return _band(seq_length, first, last)


def mask_causal_without_query(seq_length, window_size, causal=False):
    first, last = (-window_size, -1) if causal else _centred(window_size)
    return _band(seq_length, first, last)


def mask_even_extra_key_right(seq_length, window_size, causal=False):
    first, last = (-(window_size - 1), 0) if causal else (-((window_size - 1) // 2), window_size // 2)
    return _band(seq_length, first, last)


# ------------------------------------------------------ masked edges (Question 8)


def _window_attention(queries, keys, values, window_size, before, *, mask=True, mask_before=None, invert=False):
    """Windows of W keys starting `before` tokens ahead of the query; padded slots masked or not.
    mask_before: the padding the mask is built for, if not the keys' (the edges cell's centred one);
    invert: the real slots masked instead of the padded ones."""
    T, Dh, W = queries.shape[-2], queries.shape[-1], window_size
    pad = (0, 0, before, W - 1 - before)
    keys_windows = F.pad(keys, pad).unfold(-2, W, 1)  # (B, H, T, Dh, W)
    values_windows = F.pad(values, pad).unfold(-2, W, 1)
    scores = torch.einsum("bhtd,bhtdw->bhtw", queries, keys_windows) / math.sqrt(Dh)  # (B, H, T, W)
    key_position = torch.arange(T)[:, None] - (before if mask_before is None else mask_before) + torch.arange(W)
    outside = (key_position < 0) | (key_position >= T)  # (T, W)
    if invert:
        outside = ~outside
    attention = (scores.masked_fill(outside, float("-inf")) if mask else scores).softmax(dim=-1)
    return torch.einsum("bhtw,bhtdw->bhtd", attention, values_windows)  # (B, H, T, Dh)


def padding_not_masked(queries, keys, values, window_size, causal=False):
    before = window_size - 1 if causal else window_size // 2
    return _window_attention(queries, keys, values, window_size, before, mask=False)


def causal_w_plus_one(queries, keys, values, window_size, causal=False):
    """Causal: the query and the W tokens before it, W + 1 keys."""
    if causal:
        return _window_attention(queries, keys, values, window_size + 1, window_size)
    return _window_attention(queries, keys, values, window_size, window_size // 2)


def causal_mask_of_centred_padding(queries, keys, values, window_size, causal=False):
    """Causal keys padded W - 1 on the left, and the mask of the edges cell's `real` table, padded
    W // 2 on each side."""
    before = window_size - 1 if causal else window_size // 2
    return _window_attention(queries, keys, values, window_size, before, mask_before=window_size // 2)


def real_slots_masked(queries, keys, values, window_size, causal=False):
    """The mask inverted: True on the slots that hold tokens."""
    before = window_size - 1 if causal else window_size // 2
    return _window_attention(queries, keys, values, window_size, before, invert=True)


def causal_with_centred_padding(queries, keys, values, window_size, causal=False):
    """W // 2 on each side whatever `causal` says: the causal window still reaches ahead."""
    return _window_attention(queries, keys, values, window_size, window_size // 2)


# ------------------------------------------------------- blocked attention (Question 9)


def _blocked(queries, keys, values, window_size, causal, *, ends=True, edges=True, follow_causal=True):
    B, H, T, Dh = queries.shape
    W = window_size
    before = W - 1 if causal and follow_causal else W // 2
    Q = 8 * math.ceil(W / 8)
    n = math.ceil(T / Q)
    span = Q + W - 1
    q_blocks = F.pad(queries, (0, 0, 0, n * Q - T)).view(B, H, n, Q, Dh)
    pad = (0, 0, before, n * Q + W - 1 - before - T)
    k_spans = F.pad(keys, pad).unfold(2, span, Q).transpose(-1, -2)  # (B, H, n, span, Dh)
    v_spans = F.pad(values, pad).unfold(2, span, Q).transpose(-1, -2)
    query = torch.arange(n * Q).view(n, Q, 1)  # (n, Q, 1)
    key = (torch.arange(n) * Q - before).view(n, 1, 1) + torch.arange(span)  # (n, 1, span)
    offset = key - query  # (n, Q, span)
    visible = torch.ones_like(offset, dtype=torch.bool)
    if edges:
        visible &= (offset >= -before) & (offset <= W - 1 - before)
    if ends:
        visible &= (key >= 0) & (key < T)
    out = F.scaled_dot_product_attention(q_blocks, k_spans, v_spans, attn_mask=visible)  # (B, H, n, Q, Dh)
    return out.reshape(B, H, n * Q, Dh)[:, :, :T]


def blocked_ends_not_masked(queries, keys, values, window_size, causal=False):
    return _blocked(queries, keys, values, window_size, causal, ends=False)


def blocked_span_visible(queries, keys, values, window_size, causal=False):
    return _blocked(queries, keys, values, window_size, causal, edges=False)


def blocked_causal_ignored(queries, keys, values, window_size, causal=False):
    return _blocked(queries, keys, values, window_size, causal, follow_causal=False)


MISTAKES = {
    "03.sliding_window": [
        Mistake(
            "q, k and v split per projection ([q | k | v] along the last dimension, each D wide), "
            "not per head",
            "split as the loop does: view the qkv_linear output as (B, T, H, 3 * Dh), move the heads forward "
            "with .transpose(1, 2), then .chunk(3, dim=-1): each head's q, k and v sit side by side.",
            PerProjectionSplit,
        ),
        Mistake(
            "einsum subscripts that swap the window and head_dim of the windows",
            "after unfold the windows are (B, H, T, Dh, W), the window LAST: write 'bhtd,bhtdw->bhtw' for "
            "the scores and 'bhtw,bhtdw->bthd' for the values.",
            WindowAndHeadDimSwapped,
        ),
        Mistake(
            "scores scaled by sqrt(D), the hidden size, instead of sqrt(Dh)",
            "each score is a dot product of two head vectors: divide by math.sqrt(self.head_dim).",
            ScaledBySqrtD,
        ),
        Mistake(
            "the scores are not scaled",
            "divide the scores by math.sqrt(self.head_dim) before the softmax.",
            NotScaled,
        ),
        Mistake(
            "softmax over the sequence positions instead of over the window",
            "the scores are (B, H, T, W): each query's weights sum to 1 over its window, so softmax(dim=-1).",
            SoftmaxOverPositions,
        ),
        Mistake(
            "keys and values padded on one side only (2 * (W // 2) zeros on the left)",
            "pad W // 2 zero vectors at each end of the time axis, F.pad(keys, (0, 0, p, p)): then window t "
            "is centred on token t.",
            PaddedOnOneSide,
        ),
        Mistake(
            "windows of W + 1 keys (off by one)",
            "each window holds exactly W keys: unfold(2, W, 1) on keys padded with W // 2 at each end, "
            "keeping the first T windows.",
            WindowOfWPlusOne,
        ),
        Mistake(
            "heads merged in the wrong order: (B, H, T, Dh) reshaped to (B, T, D) without moving the heads "
            "after time",
            "the einsum can give (B, T, H, Dh) directly ('bhtw,bhtdw->bthd'); or .transpose(1, 2) before "
            ".reshape(B, T, D).",
            HeadsMergedBeforeTime,
        ),
    ],
    "03.window_mask": [
        Mistake(
            "the mask is True where the query may look (inverted)",
            "this course's masks are True where a query may NOT look: return (offset < first) | "
            "(offset > last), or invert yours with ~.",
            mask_inverted,
        ),
        Mistake(
            "a causal window of W + 1 keys (the query and the W before it), as the Mistral paper's text "
            "words it; the course counts W, as the paper's figure and Hugging Face do",
            "a causal window of W keys is the query and the W - 1 before it: visible when "
            "-(W - 1) <= j - i <= 0.",
            mask_causal_w_plus_one,
        ),
        Mistake(
            "a causal window without the query itself",
            "the query sees itself: visible when -(W - 1) <= j - i <= 0, the diagonal included.",
            mask_causal_without_query,
        ),
        Mistake(
            "a centred even window with its extra key on the right",
            "for an even W the layer's window has one more key on the LEFT: visible when "
            "-(W // 2) <= j - i <= W - 1 - W // 2.",
            mask_even_extra_key_right,
        ),
    ],
    "03.masked_window": [
        Mistake(
            "the padded slots are not masked (the homework's design): zero keys still take weight",
            "set the scores of the slots outside the sequence to -inf before the softmax, "
            "scores.masked_fill(outside, float('-inf')) with a (T, W) mask of those slots, so that the "
            "weights of the real keys sum to 1. Zeroing the padded slots' weights after the softmax "
            "changes nothing: their values are zero vectors anyway.",
            padding_not_masked,
        ),
        Mistake(
            "a causal window of W + 1 keys (the query and the W before it), as the Mistral paper's text "
            "words it; the course counts W, as the paper's figure and Hugging Face do",
            "causal: the query and the W - 1 tokens before it, so pad W - 1 on the left (none on the right) "
            "and unfold windows of W.",
            causal_w_plus_one,
        ),
        Mistake(
            "the centred padding (W // 2 on each side) used for the causal window too",
            "causal: pad W - 1 zero vectors on the left and none on the right, so that window t holds tokens "
            "t - W + 1 .. t; the padded slots are then the ones before token 0.",
            causal_with_centred_padding,
        ),
        Mistake(
            "causal keys padded W - 1 on the left, but the mask of padded slots built for the centred "
            "padding (the edges cell's real table, W // 2 on each side)",
            "the mask must mark the slots that the keys' own padding filled: with the causal padding they "
            "are the first W - 1 - t slots of window t, before token 0, and none on the right. Build it "
            "from the same padding as the keys.",
            causal_mask_of_centred_padding,
        ),
        Mistake(
            "the mask inverted: the slots that hold tokens are set to -inf, and the padded ones kept",
            "masked_fill fills where the mask is True: True must mark the padded slots, outside the "
            "sequence. A window with no padded slot then has every score at -inf, and its softmax is NaN.",
            real_slots_masked,
        ),
    ],
    "03.rope_inside": [
        Mistake(
            TABLE_TOO_SHORT,
            "the layer must not build a table for window_size positions: wrap the table given to __init__ "
            "(one row per position, C >= T) in RoPE and rotate before the windows are cut.",
            (TableForTheWindow, _RoPE),
        ),
        Mistake(
            "RoPE applied to the key windows: each key takes the angle of its slot in the window "
            "(rows 0 .. W - 1)",
            "rotate queries and keys on the (B, H, T, Dh) tensors, right after the split into heads and "
            "before padding and unfold, so that every key keeps the angle of its own position.",
            (RotatedAfterWindowing, _RoPE),
        ),
        Mistake(
            "the keys rotated after padding: every key takes the angle of its position + W // 2",
            "rotate queries and keys before F.pad: padding shifts the keys by W // 2 positions, and the "
            "rotation must use each token's own position.",
            (KeysRotatedAfterPadding, _RoPE),
        ),
        Mistake(
            "the values are rotated too",
            "RoPE rotates queries and keys only, to make their scores depend on the offset between "
            "positions; values carry content, and stay as they are.",
            (ValuesRotated, _RoPE),
        ),
        Mistake(
            "the layer builds its own table (the standard frequencies) instead of using the one given",
            "the checks pass tables of other frequencies, as a model with another period would: wrap the "
            "rotation_matrix given to __init__ in RoPE.",
            (OwnTable, _RoPE),
        ),
        Mistake(
            "the table is registered as a buffer of the layer, which module.to(torch.bfloat16) turns into "
            "real numbers",
            "keep the table as a plain attribute (or inside your RoPE, as notebook 04 does): .to() leaves it "
            "alone, and RoPE's forward moves it to the input's device.",
            (TableAsBuffer, _RoPE),
        ),
    ],
    "03.blocked_attention": [
        Mistake(
            "the sequence ends are not masked: padded keys take weight",
            "a slot is visible only when its key is inside the sequence: (key >= 0) & (key < T), on top of "
            "the window test.",
            blocked_ends_not_masked,
        ),
        Mistake(
            "the window edges of each block are not masked: every key of the block's span is visible",
            "each query sees only its own window: visible when -before <= key - query <= W - 1 - before, "
            "with before = W // 2 (centred) or W - 1 (causal).",
            blocked_span_visible,
        ),
        Mistake(
            "causal=True is ignored: the window stays centred",
            "causal: before = W - 1 (the query and the W - 1 keys before it, none after), for the padding "
            "and for the mask.",
            blocked_causal_ignored,
        ),
    ],
}
