"""Correct answers to notebook 03 (sliding-window attention) written differently from the reference.

The layers come first as the original homework's text and given code lead students to write
them (its Questions 1 to 6 and 15, here 1 to 6 and 10), then in other spellings, then with the
signatures the homework leads to (its stub's three arguments, RoPE built inside; or a required
table), which rotate always. Each layer
uses one of notebook 04's correct RoPE alternatives where a student's would use their own
`RoPE`; the answers to 03.rope_inside pair the layer with that class. ODD_ONLY holds homework
solutions that handle odd windows only: the checks must grade them as right on every part but
the even windows'.
"""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from autograder import reference
from grader.casework import Answer

_rope = reference.instructor_module("04_rope", "alternatives.py")  # notebook 04's correct alternatives
RoPEBlockDiagonal = _rope.RoPEBlockDiagonal
RoPEHomework = _rope.RoPEHomework
RoPELlama = _rope.RoPELlama
RoPEOwnAttributeName = _rope.RoPEOwnAttributeName
RoPEReal = _rope.RoPEReal
rotation_matrix_complex = _rope.rotation_matrix_complex
rotation_matrix_exp = _rope.rotation_matrix_exp

# ------------------------------------------------------------------ the layer (Q1-6, Q10)


class _Projections(nn.Module):
    """The given __init__ of the homework: qkv_linear and out, with their biases."""

    def __init__(self, hidden_size, num_heads, window_size):
        super().__init__()
        assert hidden_size % num_heads == 0
        self.hidden_size = hidden_size
        self.num_heads = num_heads
        self.head_dim = hidden_size // num_heads
        self.window_size = window_size
        self.qkv_linear = nn.Linear(hidden_size, hidden_size * 3)
        self.out = nn.Linear(hidden_size, hidden_size)


class HomeworkLayer(_Projections):
    """As the homework's questions read: RoPE built in __init__ from the given table, reshape and
    permute, F.pad with "constant", unfold sliced to seq_length, F.softmax(scores / head_dim ** 0.5)."""

    def __init__(self, hidden_size, num_heads, window_size, rotation_matrix=None):
        super().__init__(hidden_size, num_heads, window_size)
        self.position_emb = RoPEHomework(rotation_matrix) if rotation_matrix is not None else None

    def forward(self, x):
        batch_size, seq_length, hidden_size = x.size()
        padding = self.window_size // 2
        qkv = self.qkv_linear(x)
        qkv = qkv.reshape(batch_size, seq_length, self.num_heads, 3 * self.head_dim)
        qkv = qkv.permute(0, 2, 1, 3)  # (B, H, T, 3 * Dh)
        queries, keys, values = qkv.chunk(3, dim=-1)
        if self.position_emb is not None:
            queries, keys = self.position_emb(queries, keys)
        keys_padded = F.pad(keys, (0, 0, padding, padding), "constant", 0)
        values_padded = F.pad(values, (0, 0, padding, padding), "constant", 0)
        keys_windows = keys_padded.unfold(2, self.window_size, 1)[:, :, :seq_length]  # (B, H, T, Dh, W)
        values_windows = values_padded.unfold(2, self.window_size, 1)[:, :, :seq_length]
        scores = torch.einsum("bhsd,bhsdw->bhsw", queries, keys_windows)
        attentions = F.softmax(scores / self.head_dim**0.5, dim=-1)
        context = torch.einsum("bhsw,bhsdw->bshd", attentions, values_windows)  # (B, T, H, Dh)
        context = context.reshape(batch_size, seq_length, hidden_size)
        return self.out(context)


class TableInForwardLayer(_Projections):
    """The table kept as a plain attribute and RoPE applied in forward; the windows permuted to
    (B, H, T, W, Dh), cut with [..., :T, :, :], einsum subscripts to match; view after contiguous."""

    def __init__(self, hidden_size, num_heads, window_size, rotation_matrix=None):
        super().__init__(hidden_size, num_heads, window_size)
        self.rotation_matrix = rotation_matrix

    def forward(self, x):
        B, T, D = x.shape
        H, Dh, W = self.num_heads, self.head_dim, self.window_size
        qkv = self.qkv_linear(x).view(B, T, H, 3 * Dh).transpose(1, 2)  # (B, H, T, 3 * Dh)
        q, k, v = qkv.split(Dh, dim=-1)
        if self.rotation_matrix is not None:
            q, k = RoPELlama(self.rotation_matrix)(q, k)
        p = W // 2
        # (B, H, T + 2p - W + 1, Dh, W) -> (B, H, T, W, Dh)
        k_windows = F.pad(k, (0, 0, p, p)).unfold(2, W, 1).permute(0, 1, 2, 4, 3)[..., :T, :, :]
        v_windows = F.pad(v, (0, 0, p, p)).unfold(2, W, 1).permute(0, 1, 2, 4, 3)[..., :T, :, :]
        weights = torch.softmax(torch.einsum("bhtd,bhtwd->bhtw", q, k_windows) * Dh**-0.5, dim=3)
        context = torch.einsum("bhtw,bhtwd->bhtd", weights, v_windows)  # (B, H, T, Dh)
        return self.out(context.transpose(1, 2).contiguous().view(B, T, D))


class CatZerosLayer(_Projections):
    """Heads transposed after the chunk, torch.cat with zeros instead of F.pad, scores and context
    as batched matrix products instead of einsum."""

    def __init__(self, hidden_size, num_heads, window_size, rotation_matrix=None):
        super().__init__(hidden_size, num_heads, window_size)
        self.rope = None if rotation_matrix is None else RoPEReal(rotation_matrix)

    def forward(self, x):
        B, T, D = x.shape
        H, Dh, W = self.num_heads, self.head_dim, self.window_size
        q, k, v = self.qkv_linear(x).view(B, T, H, 3 * Dh).chunk(3, dim=-1)  # (B, T, H, Dh) each
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # (B, H, T, Dh)
        if self.rope is not None:
            q, k = self.rope(q, k)
        zeros = k.new_zeros(B, H, W // 2, Dh)
        k_windows = torch.cat([zeros, k, zeros], dim=2).unfold(2, W, 1)[:, :, :T]  # (B, H, T, Dh, W)
        v_windows = torch.cat([zeros, v, zeros], dim=2).unfold(2, W, 1)[:, :, :T]
        scores = (q.unsqueeze(-2) @ k_windows).squeeze(-2) / math.sqrt(Dh)  # (B, H, T, W)
        context = (v_windows @ scores.softmax(-1).unsqueeze(-1)).squeeze(-1)  # (B, H, T, Dh)
        return self.out(context.transpose(1, 2).reshape(B, T, D))


class GatherLayer(_Projections):
    """Windows gathered by an index table (T, W) instead of unfold."""

    def __init__(self, hidden_size, num_heads, window_size, rotation_matrix=None):
        super().__init__(hidden_size, num_heads, window_size)
        self.rope = None if rotation_matrix is None else RoPEBlockDiagonal(rotation_matrix)

    def forward(self, x):
        B, T, D = x.shape
        H, Dh, W = self.num_heads, self.head_dim, self.window_size
        qkv = self.qkv_linear(x).unflatten(-1, (H, 3 * Dh)).movedim(2, 1)  # (B, H, T, 3 * Dh)
        q, k, v = qkv[..., :Dh], qkv[..., Dh : 2 * Dh], qkv[..., 2 * Dh :]
        if self.rope is not None:
            q, k = self.rope(q, k)
        index = torch.arange(T)[:, None] + torch.arange(W)  # (T, W): padded position of each slot
        k_windows = F.pad(k, (0, 0, W // 2, W // 2))[:, :, index]  # (B, H, T, W, Dh)
        v_windows = F.pad(v, (0, 0, W // 2, W // 2))[:, :, index]
        weights = ((k_windows @ q.unsqueeze(-1)).squeeze(-1) / Dh**0.5).softmax(-1)  # (B, H, T, W)
        context = (weights.unsqueeze(-2) @ v_windows).squeeze(-2)  # (B, H, T, Dh)
        return self.out(context.permute(0, 2, 1, 3).flatten(2))


class AsStridedLayer(_Projections):
    """Windows as an as_strided view of the padded keys: (B, H, T, W, Dh), no copy."""

    def __init__(self, hidden_size, num_heads, window_size, rotation_matrix=None):
        super().__init__(hidden_size, num_heads, window_size)
        self.rope = None if rotation_matrix is None else RoPELlama(rotation_matrix)

    def forward(self, x):
        B, T, D = x.shape
        H, Dh, W = self.num_heads, self.head_dim, self.window_size
        q, k, v = self.qkv_linear(x).view(B, T, H, 3 * Dh).transpose(1, 2).chunk(3, dim=-1)
        if self.rope is not None:
            q, k = self.rope(q, k)

        def windows(t):
            padded = F.pad(t, (0, 0, W // 2, W // 2)).contiguous()  # (B, H, T + 2p, Dh)
            s = padded.stride()
            return padded.as_strided((B, H, T, W, Dh), (s[0], s[1], s[2], s[2], s[3]))

        scores = torch.einsum("bhtd,bhtwd->bhtw", q, windows(k)) / math.sqrt(Dh)
        context = torch.einsum("bhtw,bhtwd->bthd", scores.softmax(-1), windows(v))  # (B, T, H, Dh)
        return self.out(context.flatten(2))


class HomeworkOddOnly(_Projections):
    """The homework as often handed in: the unfolded windows are not cut to seq_length, which is
    right for odd windows only (an even one gives T + 1 windows and the einsum fails)."""

    def __init__(self, hidden_size, num_heads, window_size, rotation_matrix=None):
        super().__init__(hidden_size, num_heads, window_size)
        self.position_emb = RoPEHomework(rotation_matrix) if rotation_matrix is not None else None

    def forward(self, x):
        batch_size, seq_length, hidden_size = x.size()
        padding = self.window_size // 2
        qkv = self.qkv_linear(x).reshape(batch_size, seq_length, self.num_heads, 3 * self.head_dim)
        queries, keys, values = qkv.permute(0, 2, 1, 3).chunk(3, dim=-1)
        if self.position_emb is not None:
            queries, keys = self.position_emb(queries, keys)
        keys_windows = F.pad(keys, (0, 0, padding, padding)).unfold(2, self.window_size, 1)
        values_windows = F.pad(values, (0, 0, padding, padding)).unfold(2, self.window_size, 1)
        attentions = F.softmax(
            torch.einsum("bhsd,bhsdw->bhsw", queries, keys_windows) / self.head_dim**0.5, -1
        )
        context = torch.einsum("bhsw,bhsdw->bshd", attentions, values_windows)
        return self.out(context.reshape(batch_size, seq_length, hidden_size))


class HomeworkOddOnlyShrunkPadding(HomeworkOddOnly):
    """Padding (W - 1) // 2 on each side, so that there are always T windows: the right window for
    an odd W, but for an even one the extra key falls on the right."""

    def forward(self, x):
        batch_size, seq_length, hidden_size = x.size()
        padding = (self.window_size - 1) // 2
        right = self.window_size - 1 - padding
        qkv = self.qkv_linear(x).reshape(batch_size, seq_length, self.num_heads, 3 * self.head_dim)
        queries, keys, values = qkv.transpose(1, 2).chunk(3, dim=-1)
        if self.position_emb is not None:
            queries, keys = self.position_emb(queries, keys)
        keys_windows = F.pad(keys, (0, 0, padding, right)).unfold(2, self.window_size, 1)
        values_windows = F.pad(values, (0, 0, padding, right)).unfold(2, self.window_size, 1)
        attentions = F.softmax(
            torch.einsum("bhsd,bhsdw->bhsw", queries, keys_windows) / self.head_dim**0.5, -1
        )
        context = torch.einsum("bhsw,bhsdw->bshd", attentions, values_windows)
        return self.out(context.reshape(batch_size, seq_length, hidden_size))


class _HomeworkForward(_Projections):
    """The homework's forward (Questions 1 to 6) with its Question 15: queries and keys always
    rotated, by the RoPE the subclass keeps in `self.rotary`."""

    def forward(self, x):
        batch_size, seq_length, hidden_size = x.size()
        padding = self.window_size // 2
        qkv = self.qkv_linear(x).reshape(batch_size, seq_length, self.num_heads, 3 * self.head_dim)
        queries, keys, values = qkv.permute(0, 2, 1, 3).chunk(3, dim=-1)  # (B, H, T, Dh) each
        queries, keys = self.rotary(queries, keys)
        keys_padded = F.pad(keys, (0, 0, padding, padding))
        values_padded = F.pad(values, (0, 0, padding, padding))
        keys_windows = keys_padded.unfold(2, self.window_size, 1)[:, :, :seq_length]  # (B, H, T, Dh, W)
        values_windows = values_padded.unfold(2, self.window_size, 1)[:, :, :seq_length]
        scores = torch.einsum("bhsd,bhsdw->bhsw", queries, keys_windows)
        attentions = F.softmax(scores / self.head_dim**0.5, dim=-1)
        context = torch.einsum("bhsw,bhsdw->bshd", attentions, values_windows)  # (B, T, H, Dh)
        return self.out(context.reshape(batch_size, seq_length, hidden_size))


class HomeworkStubBuildsRoPE(_HomeworkForward):
    """The homework's stub as it is given, three arguments, its TODO done: RoPE created in __init__
    from a table of the layer's own (period 10 000, a context of 512 positions)."""

    def __init__(self, hidden_size, num_heads, window_size):
        super().__init__(hidden_size, num_heads, window_size)
        self.rotary = RoPEHomework(rotation_matrix_complex(self.head_dim, 512, 10_000.0))


class HomeworkRequiresTable(_HomeworkForward):
    """The signature most homework solutions gave the layer: a required fourth argument."""

    def __init__(self, hidden_size, num_heads, window_size, rotation_matrix):
        super().__init__(hidden_size, num_heads, window_size)
        self.rotary = RoPELlama(rotation_matrix)


class HomeworkOwnTableAsAttribute(_HomeworkForward):
    """Three arguments and a context size of its own choice; the table kept on the layer under a name
    of its own, and a RoPE made from it at each call."""

    def __init__(self, hidden_size, num_heads, window_size, context_size=128):
        super().__init__(hidden_size, num_heads, window_size)
        self.freqs_cis = rotation_matrix_exp(self.head_dim, context_size, 10_000.0)

    def rotary(self, queries, keys):
        return RoPEReal(self.freqs_cis)(queries, keys)


class HomeworkTableKeywordOnly(_HomeworkForward):
    """The table as a required keyword-only argument, wrapped in a RoPE that keeps it as `freqs`."""

    def __init__(self, hidden_size, num_heads, window_size, *, rotation_matrix):
        super().__init__(hidden_size, num_heads, window_size)
        self.rotary = RoPEOwnAttributeName(rotation_matrix)


# ----------------------------------------------------------------------- the mask (Q7)


def mask_triu_tril(seq_length, window_size, causal=False):
    """The visible band cut out of a matrix of ones with triu and tril, then inverted."""
    before = window_size - 1 if causal else window_size // 2
    ones = torch.ones(seq_length, seq_length, dtype=torch.bool)
    return ~ones.triu(-before).tril(window_size - 1 - before)


def mask_logical(seq_length, window_size, causal=False):
    """torch.ge and torch.le on broadcast positions, joined and negated with torch.logical_*."""
    before = window_size - 1 if causal else window_size // 2
    query = torch.arange(seq_length).view(-1, 1)  # (T, 1)
    key = torch.arange(seq_length).view(1, -1)  # (1, T)
    inside = torch.logical_and(torch.ge(key, query - before), torch.le(key, query - before + window_size - 1))
    return torch.logical_not(inside)


def mask_distance(seq_length, window_size, causal=False):
    """From the distance i - j behind the query, compared with the keys before and after it."""
    i = torch.arange(seq_length).unsqueeze(1)
    j = torch.arange(seq_length).unsqueeze(0)
    behind = i - j
    if causal:
        return (behind < 0) | (behind >= window_size)
    return (behind > window_size // 2) | (-behind > (window_size - 1) // 2)


# --------------------------------------------------------------- masked window (Q8)


def _before(window_size, causal):
    return window_size - 1 if causal else window_size // 2


def window_attention_as_strided(queries, keys, values, window_size, causal=False):
    """Windows as an as_strided view (B, H, T, W, Dh); the (T, W) mask from the slots' positions."""
    B, H, T, Dh = queries.shape
    W, before = window_size, _before(window_size, causal)

    def windows(t):
        padded = F.pad(t, (0, 0, before, W - 1 - before)).contiguous()
        s = padded.stride()
        return padded.as_strided((B, H, T, W, Dh), (s[0], s[1], s[2], s[2], s[3]))

    scores = torch.einsum("bhtd,bhtwd->bhtw", queries, windows(keys)) / math.sqrt(Dh)
    slot = torch.arange(T).unsqueeze(1) + torch.arange(W) - before  # (T, W): token in each slot
    scores = scores.masked_fill((slot < 0) | (slot > T - 1), -math.inf)
    return torch.einsum("bhtw,bhtwd->bhtd", torch.softmax(scores, dim=-1), windows(values))


def window_attention_gather(queries, keys, values, window_size, causal=False):
    """Slots gathered by index, clamped into the sequence; the clamped ones masked."""
    T, Dh = queries.shape[-2:]
    slot = torch.arange(T)[:, None] - _before(window_size, causal) + torch.arange(window_size)  # (T, W)
    inside = (slot >= 0) & (slot < T)
    index = slot.clamp(0, T - 1)
    k_windows, v_windows = keys[..., index, :], values[..., index, :]  # (B, H, T, W, Dh)
    scores = (k_windows @ queries.unsqueeze(-1)).squeeze(-1) / Dh**0.5  # (B, H, T, W)
    weights = torch.where(inside, scores, float("-inf")).softmax(-1)
    return (weights.unsqueeze(-2) @ v_windows).squeeze(-2)


def window_attention_valid_unfolded(queries, keys, values, window_size, causal=False):
    """A padded "valid" vector unfolded like the keys gives the mask; the softmax written out."""
    T, Dh, W = queries.shape[-2], queries.shape[-1], window_size
    before = _before(W, causal)
    pad = (before, W - 1 - before)
    keys_windows = F.pad(keys, (0, 0, *pad)).unfold(2, W, 1)  # (B, H, T, Dh, W)
    values_windows = F.pad(values, (0, 0, *pad)).unfold(2, W, 1)
    valid = F.pad(torch.ones(T), pad).unfold(0, W, 1)  # (T, W): 1 for a token, 0 for padding
    scores = torch.einsum("bhtd,bhtdw->bhtw", queries, keys_windows) / math.sqrt(Dh)
    scores = scores.masked_fill(valid == 0, float("-inf"))
    weights = torch.exp(scores - scores.amax(-1, keepdim=True))
    weights = weights / weights.sum(-1, keepdim=True)
    return torch.einsum("bhtw,bhtdw->bhtd", weights, values_windows)


def window_attention_sdpa_on_windows(queries, keys, values, window_size, causal=False):
    """Each query as a batch of one row, attending to its window with F.scaled_dot_product_attention."""
    T, W = queries.shape[-2], window_size
    before = _before(W, causal)
    pad = (0, 0, before, W - 1 - before)
    k_windows = F.pad(keys, pad).unfold(2, W, 1).transpose(-1, -2)  # (B, H, T, W, Dh)
    v_windows = F.pad(values, pad).unfold(2, W, 1).transpose(-1, -2)
    slot = torch.arange(T)[:, None] - before + torch.arange(W)
    visible = ((slot >= 0) & (slot < T)).unsqueeze(1)  # (T, 1, W)
    out = F.scaled_dot_product_attention(queries.unsqueeze(-2), k_windows, v_windows, attn_mask=visible)
    return out.squeeze(-2)  # (B, H, T, Dh)


# ---------------------------------------------------------------- blocked attention (Q9)


def blocked_block_of_w(queries, keys, values, window_size, causal=False):
    """Blocks of exactly W queries."""
    B, H, T, Dh = queries.shape
    W = Q = window_size
    before = _before(W, causal)
    n = -(-T // Q)
    span = Q + W - 1
    q_blocks = F.pad(queries, (0, 0, 0, n * Q - T)).reshape(B, H, n, Q, Dh)
    pad = (0, 0, before, n * Q + W - 1 - before - T)
    k_spans = F.pad(keys, pad).unfold(2, span, Q).transpose(-1, -2)  # (B, H, n, span, Dh)
    v_spans = F.pad(values, pad).unfold(2, span, Q).transpose(-1, -2)
    start = torch.arange(n).view(n, 1, 1) * Q
    query = start + torch.arange(Q).view(1, Q, 1)  # (n, Q, 1)
    key = start - before + torch.arange(span).view(1, 1, span)  # (n, 1, span)
    visible = (key - query >= -before) & (key - query <= W - 1 - before) & (key >= 0) & (key < T)
    out = F.scaled_dot_product_attention(q_blocks, k_spans, v_spans, attn_mask=visible)
    return out.flatten(2, 3)[:, :, :T]


def blocked_gather(queries, keys, values, window_size, causal=False):
    """Blocks of 16 queries; each block's span of keys gathered by a clamped index, no padding or
    unfold; an additive float mask."""
    B, H, T, Dh = queries.shape
    W, Q = window_size, 16
    before = _before(W, causal)
    n = math.ceil(T / Q)
    key = (torch.arange(n) * Q - before)[:, None] + torch.arange(Q + W - 1)  # (n, span)
    query = (torch.arange(n) * Q)[:, None] + torch.arange(Q)  # (n, Q)
    offset = key[:, None, :] - query[:, :, None]  # (n, Q, span)
    visible = (offset >= -before) & (offset < W - before) & (key[:, None, :] >= 0) & (key[:, None, :] < T)
    bias = torch.zeros(visible.shape).masked_fill(~visible, float("-inf"))
    index = key.clamp(0, T - 1)
    q_blocks = F.pad(queries, (0, 0, 0, n * Q - T)).unflatten(2, (n, Q))  # (B, H, n, Q, Dh)
    out = F.scaled_dot_product_attention(q_blocks, keys[:, :, index], values[:, :, index], attn_mask=bias)
    return out.reshape(B, H, n * Q, Dh)[:, :, :T]


ALTERNATIVES = {
    "03.sliding_window": [
        HomeworkLayer,
        TableInForwardLayer,
        CatZerosLayer,
        GatherLayer,
        AsStridedLayer,
        HomeworkStubBuildsRoPE,
        HomeworkRequiresTable,
        HomeworkOwnTableAsAttribute,
        HomeworkTableKeywordOnly,
    ],
    "03.window_mask": [mask_triu_tril, mask_logical, mask_distance],
    "03.masked_window": [
        window_attention_as_strided,
        window_attention_gather,
        window_attention_valid_unfolded,
        window_attention_sdpa_on_windows,
    ],
    "03.rope_inside": [
        Answer("homework_rope_in_init", HomeworkLayer, RoPEHomework),
        Answer("table_in_forward_llama_rope", TableInForwardLayer, RoPELlama),
        Answer("cat_zeros_real_rope", CatZerosLayer, RoPEReal),
        Answer("gather_block_diagonal_rope", GatherLayer, RoPEBlockDiagonal),
        Answer("as_strided_llama_rope", AsStridedLayer, RoPELlama),
        Answer("homework_stub_builds_rope", HomeworkStubBuildsRoPE, RoPEHomework),
        Answer("homework_requires_table", HomeworkRequiresTable, RoPELlama),
        Answer("homework_own_table_as_attribute", HomeworkOwnTableAsAttribute, RoPEReal),
        Answer("homework_table_keyword_only", HomeworkTableKeywordOnly, RoPEOwnAttributeName),
    ],
    "03.blocked_attention": [blocked_block_of_w, blocked_gather],
}

# Right for odd windows, wrong for even ones: graded right on every part but the even windows'.
ODD_ONLY = {
    "03.sliding_window": [HomeworkOddOnly, HomeworkOddOnlyShrunkPadding],
    "03.rope_inside": [
        Answer("homework_odd_only", HomeworkOddOnly, RoPEHomework),
        Answer("homework_odd_only_shrunk_padding", HomeworkOddOnlyShrunkPadding, RoPEHomework),
    ],
}
