"""Correct answers to notebook 09 (KV cache and generation) written differently from the reference.

Key: B batch, T tokens in one call, D hidden size, H query heads, Hkv key/value heads, Dh head_dim,
n_rep = H // Hkv, C max_seq_len, W window, V vocabulary size, P prompt length, N new tokens.

Each answer to 09.kv_cache pairs its layer with the RoPE and repeat_kv it uses, as a student's
notebook would (the check runs those two on their own only to name a bug of theirs); the answers
to 09.generate pair a loop with the sampling_distribution it draws from. No name here is one the
notebook binds (tests/test_kv_cache.py checks it).
"""

import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from grader.casework import Answer

# ------------------------------------------------------------------------ RoPE at start_pos


class _TableAttribute(nn.Module):
    """The given __init__: the table as a plain attribute, as notebook 04 keeps it."""

    def __init__(self, rotation_matrix):
        super().__init__()
        self.rotation_matrix = rotation_matrix


class RoPEOffsetReal(_TableAttribute):
    """The 2x2 rotation written out on even/odd features with the rows' real and imaginary parts."""

    def forward(self, queries, keys, start_pos=0):
        rows = self.rotation_matrix[start_pos : start_pos + queries.shape[-2]]  # (T, Dh/2)
        cos, sin = rows.real, rows.imag

        def turn(x):
            even, odd = x[..., 0::2], x[..., 1::2]  # (B, H, T, Dh/2) each
            return torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1).flatten(-2)

        return turn(queries), turn(keys)


class RoPEStartKeyword(_TableAttribute):
    """start_pos defaulting to None (meaning 0) and handed on by keyword to a helper."""

    def forward(self, queries, keys, start_pos=None):
        start_pos = 0 if start_pos is None else start_pos
        return self._apply(queries, start_pos=start_pos), self._apply(keys, start_pos=start_pos)

    def _apply(self, x, *, start_pos):
        z = torch.view_as_complex(x.float().unflatten(-1, (-1, 2)))  # (B, H, T, Dh/2)
        table = self.rotation_matrix.narrow(0, start_pos, x.shape[2])  # (T, Dh/2)
        return torch.view_as_real(z * table).flatten(-2).type_as(x)


class RoPEPositionsArange(_TableAttribute):
    """The rows gathered by a tensor of positions, torch.arange(start_pos, start_pos + T), and
    reshaped for broadcasting with an assert, as Meta's apply_rotary_emb does."""

    def forward(self, queries, keys, start_pos: int = 0):
        positions = torch.arange(start_pos, start_pos + queries.shape[2])  # (T,)
        table = self.rotation_matrix[positions]  # (T, Dh/2)
        return self._rotate(queries, table), self._rotate(keys, table)

    @staticmethod
    def _rotate(x, table):
        z = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))  # (B, H, T, Dh/2)
        assert table.shape == z.shape[-2:]
        return torch.view_as_real(z * table.view(1, 1, *table.shape)).flatten(3).type_as(x)


class RoPEBlockMatrices(nn.Module):
    """The table kept as float32 angles in a non-persistent buffer (it survives a bfloat16 cast);
    one 2x2 rotation matrix per position and pair, gathered with index_select and applied by einsum."""

    def __init__(self, rotation_matrix):
        super().__init__()
        self.register_buffer("angles", rotation_matrix.angle(), persistent=False)  # (C, Dh/2)

    def forward(self, queries, keys, start_pos=0):
        positions = start_pos + torch.arange(queries.shape[2])  # (T,)
        angles = self.angles.index_select(0, positions)  # (T, Dh/2)
        cos, sin = angles.cos(), angles.sin()
        blocks = torch.stack((cos, -sin, sin, cos), dim=-1).unflatten(-1, (2, 2))  # (T, Dh/2, 2, 2)

        def turn(x):
            pairs = x.float().unflatten(-1, (-1, 2))  # (B, H, T, Dh/2, 2)
            return torch.einsum("tkij,bhtkj->bhtki", blocks, pairs).flatten(-2).type_as(x)

        return turn(queries), turn(keys)


# ------------------------------------------------------------------------------ repeat_kv


def repeat_kv_interleave(x, n_rep):
    """torch.repeat_interleave along the heads (a copy)."""
    return torch.repeat_interleave(x, n_rep, dim=1)


def repeat_kv_expand_flatten(x, n_rep):
    """A size-1 axis after the heads expanded (a view), then merged with flatten."""
    return x.unsqueeze(2).expand(-1, -1, n_rep, -1, -1).flatten(1, 2)


def repeat_kv_stack(x, n_rep):
    """n_rep references to x stacked after the heads, (B, Hkv, n_rep, T, Dh), then merged."""
    return torch.stack([x] * n_rep, dim=2).flatten(1, 2)


def repeat_kv_index(x, n_rep):
    """Query head h reads key/value head h // n_rep, by an index tensor."""
    return x[:, torch.arange(x.shape[1] * n_rep) // n_rep]


def repeat_kv_llama(x, n_rep):
    """Meta's repeat_kv, which works on (B, T, Hkv, Dh), between two transposes; x itself for n_rep 1."""
    if n_rep == 1:
        return x
    x = x.transpose(1, 2)  # (B, T, Hkv, Dh)
    bs, slen, n_kv_heads, head_dim = x.shape
    x = x[:, :, :, None, :].expand(bs, slen, n_kv_heads, n_rep, head_dim)
    return x.reshape(bs, slen, n_kv_heads * n_rep, head_dim).transpose(1, 2)  # (B, H, T, Dh)


def repeat_kv_cat(x, n_rep):
    """Each key/value head repeated on its own, the groups concatenated in order."""
    return torch.cat([x[:, h : h + 1].repeat(1, n_rep, 1, 1) for h in range(x.shape[1])], dim=1)


# --------------------------------------------------------------------- the cached attention


class _GivenInit(nn.Module):
    """The given part of __init__ (projections without bias), with the RoPE class passed in."""

    rope_class: type = RoPEOffsetReal

    def __init__(
        self,
        hidden_size,
        num_heads,
        n_kv_heads,
        max_batch_size,
        max_seq_len,
        rotation_matrix,
        window_size=None,
    ):
        super().__init__()
        self.num_heads, self.n_kv_heads = num_heads, n_kv_heads
        self.head_dim = hidden_size // num_heads
        self.window_size = window_size
        self.wq = nn.Linear(hidden_size, num_heads * self.head_dim, bias=False)
        self.wk = nn.Linear(hidden_size, n_kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(hidden_size, n_kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(num_heads * self.head_dim, hidden_size, bias=False)
        self.rope = self.rope_class(rotation_matrix)
        self.allocate(max_batch_size, max_seq_len)

    def allocate(self, max_batch_size, max_seq_len):
        shape = (max_batch_size, self.n_kv_heads, max_seq_len, self.head_dim)
        self.cache_k = torch.zeros(shape)
        self.cache_v = torch.zeros(shape)

    def heads(self, x):
        """(B, T, D) -> q (B, H, T, Dh), k and v (B, Hkv, T, Dh), not yet rotated."""
        B, T, _ = x.shape
        q = self.wq(x).view(B, T, self.num_heads, self.head_dim).transpose(1, 2)
        k = self.wk(x).view(B, T, self.n_kv_heads, self.head_dim).transpose(1, 2)
        v = self.wv(x).view(B, T, self.n_kv_heads, self.head_dim).transpose(1, 2)
        return q, k, v


class LlamaLayoutLayer(_GivenInit):
    """Meta's Llama: the cache in the layout (max_batch_size, max_seq_len, Hkv, Dh), moved to the
    input in forward; an additive mask, torch.triu of -inf beside a block of zeros for the cached
    positions; repeat_kv in that layout."""

    rope_class = RoPEPositionsArange

    def allocate(self, max_batch_size, max_seq_len):
        shape = (max_batch_size, max_seq_len, self.n_kv_heads, self.head_dim)
        self.cache_k = torch.zeros(shape)
        self.cache_v = torch.zeros(shape)

    def forward(self, x, start_pos):
        bsz, seqlen, _ = x.shape
        xq = self.wq(x).view(bsz, seqlen, self.num_heads, self.head_dim)
        xk = self.wk(x).view(bsz, seqlen, self.n_kv_heads, self.head_dim)
        xv = self.wv(x).view(bsz, seqlen, self.n_kv_heads, self.head_dim)
        xq, xk = self.rope(xq.transpose(1, 2), xk.transpose(1, 2), start_pos)  # (B, H|Hkv, T, Dh)
        xk = xk.transpose(1, 2)  # (B, T, Hkv, Dh), the cache's layout
        self.cache_k = self.cache_k.to(xq)
        self.cache_v = self.cache_v.to(xq)
        self.cache_k[:bsz, start_pos : start_pos + seqlen] = xk
        self.cache_v[:bsz, start_pos : start_pos + seqlen] = xv
        n_rep = self.num_heads // self.n_kv_heads
        keys = repeat_kv_llama(self.cache_k[:bsz, : start_pos + seqlen].transpose(1, 2), n_rep)
        values = repeat_kv_llama(self.cache_v[:bsz, : start_pos + seqlen].transpose(1, 2), n_rep)
        scores = torch.matmul(xq, keys.transpose(2, 3)) / math.sqrt(self.head_dim)  # (B, H, T, end)
        mask = torch.triu(torch.full((seqlen, seqlen), float("-inf")), diagonal=1)
        mask = torch.hstack([torch.zeros((seqlen, start_pos)), mask])  # (T, end)
        if self.window_size is not None:
            too_old = torch.full((seqlen, start_pos + seqlen), float("-inf"))
            mask = mask + torch.tril(too_old, diagonal=start_pos - self.window_size)
        scores = F.softmax((scores + mask).float(), dim=-1).type_as(xq)
        output = torch.matmul(scores, values)  # (B, H, T, Dh)
        return self.wo(output.transpose(1, 2).contiguous().view(bsz, seqlen, -1))


class SdpaBooleanLayer(_GivenInit):
    """F.scaled_dot_product_attention: is_causal for a prefill without window, otherwise a boolean
    mask (True = attend) made of the keys torch.triu(..., diagonal=start_pos + 1) hides."""

    rope_class = RoPEStartKeyword

    def forward(self, x, start_pos):
        B, T, _ = x.shape
        q, k, v = self.heads(x)
        q, k = self.rope(q, k, start_pos=start_pos)
        end = start_pos + T
        self.cache_k[:B, :, start_pos:end] = k
        self.cache_v[:B, :, start_pos:end] = v
        n_rep = self.num_heads // self.n_kv_heads
        keys = repeat_kv_interleave(self.cache_k[:B, :, :end], n_rep)  # (B, H, end, Dh)
        values = repeat_kv_interleave(self.cache_v[:B, :, :end], n_rep)
        if start_pos == 0 and self.window_size is None:
            out = F.scaled_dot_product_attention(q, keys, values, is_causal=True)
        else:
            ones = torch.ones(T, end, dtype=torch.bool)
            hidden = torch.triu(ones, diagonal=start_pos + 1)  # later positions
            if self.window_size is not None:
                hidden |= torch.tril(ones, diagonal=start_pos - self.window_size)  # out of the window
            out = F.scaled_dot_product_attention(q, keys, values, attn_mask=~hidden)
        return self.wo(out.transpose(1, 2).flatten(2))


class SdpaGqaLayer(_GivenInit):
    """F.scaled_dot_product_attention(..., enable_gqa=True) on the Hkv cached heads, no repeat_kv;
    an additive float mask from the absolute positions; the cache written with index_copy_."""

    rope_class = RoPEBlockMatrices

    def forward(self, x, start_pos):
        B, T, _ = x.shape
        q, k, v = self.heads(x)
        q, k = self.rope(q, k, start_pos)
        positions = torch.arange(start_pos, start_pos + T)  # (T,)
        self.cache_k[:B].index_copy_(2, positions, k)
        self.cache_v[:B].index_copy_(2, positions, v)
        end = start_pos + T
        offset = torch.arange(end)[None, :] - positions[:, None]  # key position - query position
        visible = offset <= 0
        if self.window_size is not None:
            visible &= offset > -self.window_size
        bias = torch.zeros(T, end).masked_fill(~visible, float("-inf"))  # (T, end)
        out = F.scaled_dot_product_attention(
            q, self.cache_k[:B, :, :end], self.cache_v[:B, :, :end], attn_mask=bias, enable_gqa=True
        )
        return self.wo(out.transpose(1, 2).reshape(B, T, -1))


class EinsumBufferLayer(_GivenInit):
    """The caches as non-persistent buffers (so that .to() moves them and no state_dict holds them);
    scores and outputs by einsum, a softmax written out."""

    def allocate(self, max_batch_size, max_seq_len):
        shape = (max_batch_size, self.n_kv_heads, max_seq_len, self.head_dim)
        self.register_buffer("cache_k", torch.zeros(shape), persistent=False)
        self.register_buffer("cache_v", torch.zeros(shape), persistent=False)

    def forward(self, x, start_pos):
        B, T, _ = x.shape
        q, k, v = self.heads(x)
        q, k = self.rope(q, k, start_pos)
        end = start_pos + T
        self.cache_k[:B, :, start_pos:end] = k
        self.cache_v[:B, :, start_pos:end] = v
        n_rep = self.num_heads // self.n_kv_heads
        keys = repeat_kv_expand_flatten(self.cache_k[:B, :, :end], n_rep)
        values = repeat_kv_expand_flatten(self.cache_v[:B, :, :end], n_rep)
        scores = torch.einsum("bhqd,bhkd->bhqk", q, keys) * self.head_dim**-0.5  # (B, H, T, end)
        query = torch.arange(start_pos, end).unsqueeze(1)  # (T, 1)
        key = torch.arange(end).unsqueeze(0)  # (1, end)
        allowed = key <= query
        if self.window_size:
            allowed = allowed & (query - key < self.window_size)
        scores = scores.masked_fill(~allowed, float("-inf"))
        scores = (scores - scores.amax(dim=-1, keepdim=True)).exp()
        weights = scores / scores.sum(dim=-1, keepdim=True)
        out = torch.einsum("bhqk,bhkd->bqhd", weights, values)  # (B, T, H, Dh)
        return self.wo(out.reshape(B, T, self.num_heads * self.head_dim))


class GroupedEinsumLayer(_GivenInit):
    """No repeat_kv: the queries reshaped to (B, Hkv, n_rep, T, Dh), each group against its one
    cached key/value head."""

    def forward(self, x, start_pos):
        B, T, _ = x.shape
        q, k, v = self.heads(x)
        q, k = self.rope(q, k, start_pos)
        end = start_pos + T
        self.cache_k[:B, :, start_pos:end] = k
        self.cache_v[:B, :, start_pos:end] = v
        n_rep = self.num_heads // self.n_kv_heads
        q = q.view(B, self.n_kv_heads, n_rep, T, self.head_dim)  # query head h = g * n_rep + r
        keys, values = self.cache_k[:B, :, :end], self.cache_v[:B, :, :end]  # (B, Hkv, end, Dh)
        scores = torch.einsum("bgrtd,bgsd->bgrts", q, keys) / math.sqrt(self.head_dim)
        query = torch.arange(start_pos, end)[:, None]
        key = torch.arange(end)[None, :]
        blocked = key > query
        if self.window_size is not None:
            blocked = blocked | (key <= query - self.window_size)
        weights = scores.masked_fill(blocked, float("-inf")).softmax(dim=-1)
        out = torch.einsum("bgrts,bgsd->btgrd", weights, values)  # (B, T, Hkv, n_rep, Dh)
        return self.wo(out.reshape(B, T, -1))


class ScatterLayer(_GivenInit):
    """The seed blog's layer with its bugs fixed: a cache of torch.empty in the layout
    (max_batch_size, max_seq_len, Hkv, Dh) written by scatter_ with an index of the call's T
    positions, (B, T, Hkv, Dh); only the first start_pos + T positions read (the rest is
    uninitialised); the mask in absolute positions, not the training mask."""

    rope_class = RoPEPositionsArange

    def allocate(self, max_batch_size, max_seq_len):
        shape = (max_batch_size, max_seq_len, self.n_kv_heads, self.head_dim)
        self.cache_k = torch.empty(shape)
        self.cache_v = torch.empty(shape)

    def forward(self, x, start_pos):
        B, T, _ = x.shape
        q, k, v = self.heads(x)
        q, k = self.rope(q, k, start_pos)
        positions = torch.arange(start_pos, start_pos + T)[None, :, None, None]
        positions = positions.expand(B, T, self.n_kv_heads, self.head_dim)  # (B, T, Hkv, Dh)
        self.cache_k[:B].scatter_(dim=1, index=positions, src=k.transpose(1, 2))
        self.cache_v[:B].scatter_(dim=1, index=positions, src=v.transpose(1, 2))
        end = start_pos + T
        n_rep = self.num_heads // self.n_kv_heads
        keys = repeat_kv_index(self.cache_k[:B, :end].transpose(1, 2), n_rep)  # (B, H, end, Dh)
        values = repeat_kv_index(self.cache_v[:B, :end].transpose(1, 2), n_rep)
        scores = q @ keys.transpose(-2, -1) * self.head_dim**-0.5
        query = torch.arange(start_pos, end).view(T, 1)
        key = torch.arange(end).view(1, end)
        mask = key <= query
        if self.window_size is not None:
            mask = mask & (key > query - self.window_size)
        scores = scores.masked_fill(mask.view(1, 1, T, end) == 0, float("-inf"))
        context = F.softmax(scores, dim=-1) @ values  # (B, H, T, Dh)
        return self.wo(context.transpose(1, 2).reshape(B, T, -1))


class SlicedMaskBufferLayer(_GivenInit):
    """The training mask kept, rightly: a (C, C) buffer of the band each position sees, registered
    once, of which a call takes the rows of its own positions, [start_pos : start_pos + T, :end]."""

    rope_class = RoPEStartKeyword

    def allocate(self, max_batch_size, max_seq_len):
        super().allocate(max_batch_size, max_seq_len)
        band = torch.tril(torch.ones(max_seq_len, max_seq_len, dtype=torch.bool))
        if self.window_size is not None:
            band = band & ~torch.tril(band, diagonal=-self.window_size)
        self.register_buffer("mask", band.view(1, 1, max_seq_len, max_seq_len), persistent=False)

    def forward(self, x, start_pos):
        B, T, _ = x.shape
        q, k, v = self.heads(x)
        q, k = self.rope(q, k, start_pos)
        end = start_pos + T
        self.cache_k[:B, :, start_pos:end], self.cache_v[:B, :, start_pos:end] = k, v
        n_rep = self.num_heads // self.n_kv_heads
        keys = repeat_kv_stack(self.cache_k[:B, :, :end], n_rep)  # (B, H, end, Dh)
        values = repeat_kv_stack(self.cache_v[:B, :, :end], n_rep)
        scores = (q @ keys.transpose(-2, -1)) / math.sqrt(self.head_dim)  # (B, H, T, end)
        scores = scores.masked_fill(~self.mask[:, :, start_pos:end, :end], float("-inf"))
        return self.wo((scores.softmax(dim=-1) @ values).transpose(1, 2).reshape(B, T, -1))


# --------------------------------------------------------------------------- cache memory


def cache_bytes_numpy(n_layers, batch_size, seq_len, num_heads, n_kv_heads, head_dim, bytes_per_value):
    """A NumPy integer: np.prod of the factors."""
    return np.prod([2, n_layers, batch_size, seq_len, n_kv_heads, head_dim, bytes_per_value], dtype=np.int64)


def cache_bytes_torch(n_layers, batch_size, seq_len, num_heads, n_kv_heads, head_dim, bytes_per_value):
    """A 0-dim int64 tensor."""
    factors = torch.tensor([2, n_layers, batch_size, seq_len, n_kv_heads, head_dim, bytes_per_value])
    return factors.prod()


def cache_bytes_per_token(n_layers, batch_size, seq_len, num_heads, n_kv_heads, head_dim, bytes_per_value):
    """One token's keys and values in one layer, from the query heads and the group size."""
    group = num_heads // n_kv_heads
    per_token = 2 * (num_heads // group) * head_dim * bytes_per_value
    return math.prod((per_token, n_layers, batch_size, seq_len))


def cache_bytes_float(n_layers, batch_size, seq_len, num_heads, n_kv_heads, head_dim, bytes_per_value):
    """Bits, then divided by 8 with / (a float, whole)."""
    bits = 8 * bytes_per_value
    return 2.0 * n_layers * batch_size * seq_len * n_kv_heads * head_dim * bits / 8


# -------------------------------------------------------------------- sampling distribution


def sampling_sort(logits, temperature=1.0, top_k=None):
    """Top-k by sorting: the k-th largest is column k - 1 of the sorted logits; greedy by scatter."""
    if top_k is not None:
        ordered, _ = torch.sort(logits, dim=-1, descending=True)
        logits = logits.masked_fill(logits < ordered[:, top_k - 1 : top_k], float("-inf"))
    if temperature == 0:
        best = logits.argmax(dim=-1, keepdim=True)  # (B, 1)
        return torch.zeros_like(logits).scatter_(-1, best, 1.0)
    return F.softmax(logits / temperature, dim=-1)


def sampling_where(logits, temperature=1.0, top_k=None):
    """torch.where for top-k (top_k clamped to V); greedy as the maximum's row; not temperature: 0."""
    if top_k:
        kth = logits.topk(min(top_k, logits.size(-1))).values[:, -1:]
        logits = torch.where(logits >= kth, logits, torch.full_like(logits, -math.inf))
    if not temperature:
        return (logits == logits.max(dim=-1, keepdim=True).values).float()
    return logits.div(temperature).softmax(-1)


def sampling_scatter(logits, temperature=1.0, top_k=None):
    """The k largest scattered into a row of -inf; the softmax written out in float64 and cast back."""
    if top_k is not None:
        top = torch.topk(logits, top_k, dim=-1)
        logits = torch.full_like(logits, float("-inf")).scatter(-1, top.indices, top.values)
    if temperature == 0.0:
        return F.one_hot(torch.argmax(logits, dim=-1), num_classes=logits.shape[-1]).float()
    scaled = logits.double() / temperature
    e = torch.exp(scaled - scaled.max(dim=-1, keepdim=True).values)
    return (e / e.sum(dim=-1, keepdim=True)).to(logits.dtype)


# ------------------------------------------------------------------------------ generation


@torch.no_grad()
def generate_while(model, prompt, max_new_tokens, temperature=1.0, top_k=None, generator=None):
    """A while loop on the length; the model called once more after the last token (its logits
    unused), which the question allows."""
    tokens = prompt
    logits = model(prompt, start_pos=0)[:, -1, :]
    while tokens.shape[1] < prompt.shape[1] + max_new_tokens:
        p = sampling_sort(logits, temperature=temperature, top_k=top_k)
        new = torch.multinomial(p, num_samples=1, generator=generator)  # (B, 1)
        tokens = torch.cat((tokens, new), dim=1)
        logits = model(new, start_pos=tokens.shape[1] - 1)[:, -1, :]
    return tokens


@torch.no_grad()
def generate_preallocated(model, prompt, max_new_tokens, temperature=1.0, top_k=None, generator=None):
    """The output allocated once and filled column by column; greedy by argmax, no draw."""
    B, P = prompt.shape
    out = torch.empty(B, P + max_new_tokens, dtype=torch.long)
    out[:, :P] = prompt
    logits = model(prompt, 0)[:, -1]
    for position in range(P, P + max_new_tokens):
        p = sampling_where(logits, temperature, top_k)
        if temperature == 0:
            out[:, position] = p.argmax(dim=-1)
        else:
            out[:, position] = torch.multinomial(p, 1, generator=generator).squeeze(1)
        if position + 1 < P + max_new_tokens:
            logits = model(out[:, position : position + 1], position)[:, -1]
    return out


@torch.no_grad()
def generate_inverse_cdf(model, prompt, max_new_tokens, temperature=1.0, top_k=None, generator=None):
    """Each token drawn by inverting the cumulative distribution with one uniform per row, from the
    generator, and collected in a list."""
    new_tokens = []
    logits = model(prompt, 0)[:, -1]
    for step in range(max_new_tokens):
        cdf = sampling_scatter(logits, temperature, top_k).cumsum(dim=-1)  # (B, V)
        u = torch.rand(cdf.shape[0], 1, generator=generator)  # (B, 1)
        token = torch.searchsorted(cdf, u, right=True).clamp(max=cdf.shape[-1] - 1)  # (B, 1)
        new_tokens.append(token)
        if step < max_new_tokens - 1:
            logits = model(token, prompt.shape[1] + step)[:, -1]
    return torch.cat([prompt, *new_tokens], dim=1)


@torch.no_grad()
def generate_gumbel(model, prompt, max_new_tokens, temperature=1.0, top_k=None, generator=None):
    """The Gumbel-max trick: argmax(log p + Gumbel noise) is a draw from p."""
    tokens = prompt.clone()
    logits = model(tokens, 0)[:, -1]
    for i in range(max_new_tokens):
        log_p = sampling_distribution_log(logits, temperature, top_k)
        u = torch.rand(log_p.shape, generator=generator).clamp_min(1e-20)
        token = (log_p - torch.log(-torch.log(u))).argmax(dim=-1, keepdim=True)  # (B, 1)
        tokens = torch.cat([tokens, token], dim=-1)
        if i + 1 < max_new_tokens:
            logits = model(token, tokens.size(1) - 1)[:, -1]
    return tokens


def sampling_distribution_log(logits, temperature, top_k):
    """log of the sampling distribution (-inf where it is 0)."""
    return sampling_where(logits, temperature, top_k).log()


# ---------------------------------------------------------------------- nucleus sampling


def nucleus_pairwise(probabilities, top_p):
    """No sort: a token stays when the tokens strictly more likely than it hold less than top_p."""
    if top_p >= 1:
        return probabilities
    more_likely = probabilities.unsqueeze(-2) > probabilities.unsqueeze(-1)  # [.., i, j]: j above i
    above = (more_likely * probabilities.unsqueeze(-2)).sum(-1)
    kept = torch.where(above < top_p, probabilities, torch.zeros_like(probabilities))
    return kept / kept.sum(-1, keepdim=True)


def nucleus_ascending(probabilities, top_p):
    """As transformers writes it, from the least likely up: drop the tail that holds at most
    1 - top_p; then every token as likely as the least likely one kept."""
    ascending = probabilities.sort(dim=-1).values
    tail = ascending.cumsum(dim=-1) <= 1 - top_p
    edge = ascending.masked_fill(tail, float("inf")).amin(-1, keepdim=True)
    kept = probabilities * (probabilities >= edge)
    return kept / kept.sum(-1, keepdim=True)


def nucleus_scatter(probabilities, top_p):
    """The ranks' mask scattered back to the vocabulary's order, widened to the ties of its edge."""
    ranked, order = probabilities.sort(dim=-1, descending=True)
    kept_ranked = (ranked.cumsum(-1) - ranked) < top_p
    kept = torch.zeros_like(kept_ranked).scatter(-1, order, kept_ranked)
    edge = probabilities.masked_fill(~kept, 2.0).amin(-1, keepdim=True)
    kept = kept | (probabilities == edge)
    out = probabilities * kept
    return out / out.sum(-1, keepdim=True)


def _softmax_kept(logits, temperature, top_k):
    if top_k is not None:
        logits = logits.masked_fill(logits < torch.topk(logits, top_k).values[:, -1:], -math.inf)
    return F.softmax(logits / temperature, dim=-1)


def sample_inverse_cdf(logits, temperature=1.0, top_k=None, top_p=1.0, generator=None):
    """All written out, drawn by inverting each row's cumulative distribution with one uniform."""
    cdf = nucleus_pairwise(_softmax_kept(logits, temperature, top_k), top_p).cumsum(dim=-1)
    u = torch.rand(cdf.shape[0], 1, generator=generator) * cdf[:, -1:]
    return torch.searchsorted(cdf, u, right=True).clamp(max=cdf.shape[-1] - 1)[:, 0]


def sample_gumbel(logits, temperature=1.0, top_k=None, top_p=1.0, generator=None):
    """The Gumbel-max trick on the nucleus's log-probabilities."""
    log_p = nucleus_ascending(_softmax_kept(logits, temperature, top_k), top_p).log()
    u = torch.rand(log_p.shape, generator=generator).clamp_min(1e-20)
    return (log_p - torch.log(-torch.log(u))).argmax(dim=-1)


@torch.no_grad()
def sample_in_chunks(logits, temperature=1.0, top_k=None, top_p=1.0, generator=None):
    """Chunks of rows, one after the other, through the notebook's own two functions (the names the
    check stands in for; a decorator in between)."""
    drawn = []
    for chunk in logits.split(1000):
        probabilities = top_p_filter(sampling_distribution(chunk, temperature, top_k), top_p)  # noqa: F821
        drawn.append(torch.multinomial(probabilities, 1, generator=generator)[:, 0])
    return torch.cat(drawn)


def sample_column(logits, temperature=1.0, top_k=None, top_p=1.0, generator=None):
    """As torch.multinomial gives it: a (B, 1) column (the check takes it)."""
    probabilities = nucleus_scatter(_softmax_kept(logits, temperature, top_k), top_p)
    return torch.multinomial(probabilities, num_samples=1, generator=generator)


# ------------------------------------------------------------------------ the rolling buffer


class RollingTagged:
    """Each slot remembers the position it holds (-1: none), forgotten at start_pos = 0; update returns
    every slot held, one position too old for the step included (the mask hides it)."""

    def __init__(self, max_batch_size, n_kv_heads, head_dim, window_size, n_sinks=0):
        self.window_size, self.n_sinks = window_size, n_sinks
        self.cache_k = torch.zeros(max_batch_size, n_kv_heads, n_sinks + window_size, head_dim)
        self.cache_v = torch.zeros_like(self.cache_k)
        self.held = torch.full((n_sinks + window_size,), -1)

    def update(self, k, v, start_pos):
        if start_pos == 0:
            self.held.fill_(-1)
        B, T = k.shape[0], k.shape[2]
        filled = self.held >= 0
        keys = torch.cat([self.cache_k[:B][:, :, filled], k], dim=2)
        values = torch.cat([self.cache_v[:B][:, :, filled], v], dim=2)
        positions = torch.cat([self.held[filled], torch.arange(start_pos, start_pos + T)])
        for t in range(T):  # one position at a time: a chunk longer than W overwrites its own early ones
            p = start_pos + t
            slot = p if p < self.n_sinks else self.n_sinks + (p - self.n_sinks) % self.window_size
            self.cache_k[:B, :, slot], self.cache_v[:B, :, slot] = k[:, :, t], v[:, :, t]
            self.held[slot] = p
        return keys, values, positions


class RollingUnrolled:
    """Mistral's way: the window's slots rolled into the order of their positions before reading, then
    the sinks, the window and the step concatenated; positions as a Python list; Llama's layout
    (max_batch_size, slots, n_kv_heads, head_dim)."""

    def __init__(self, max_batch_size, n_kv_heads, head_dim, window_size, n_sinks=0):
        self.W, self.s = window_size, n_sinks
        self.cache_k = torch.zeros(max_batch_size, n_sinks + window_size, n_kv_heads, head_dim)
        self.cache_v = torch.zeros_like(self.cache_k)

    def update(self, k, v, start_pos):
        B, T, W, s = k.shape[0], k.shape[2], self.W, self.s
        k, v = k.transpose(1, 2), v.transpose(1, 2)  # (B, T, Hkv, Dh), as the buffer
        in_window = max(0, min(W - 1, start_pos - s))  # held window positions the first query sees
        shift = -((start_pos - s) % W) if start_pos > s else 0  # the oldest slot first
        window_k = torch.roll(self.cache_k[:B, s:], shift, dims=1)[:, W - in_window :]
        window_v = torch.roll(self.cache_v[:B, s:], shift, dims=1)[:, W - in_window :]
        sinks = min(s, start_pos)
        keys = torch.cat([self.cache_k[:B, :sinks], window_k, k], dim=1).transpose(1, 2)
        values = torch.cat([self.cache_v[:B, :sinks], window_v, v], dim=1).transpose(1, 2)
        positions = list(range(sinks)) + list(range(start_pos - in_window, start_pos + T))
        for t in range(T):
            p = start_pos + t
            if p < s or p >= start_pos + T - W:
                slot = p if p < s else s + (p - s) % W
                self.cache_k[:B, slot], self.cache_v[:B, slot] = k[:, t], v[:, t]
        return keys, values, positions


class RollingIndexCopy:
    """The held positions read with index_select, the step's kept ones written with index_copy_;
    positions as int32."""

    def __init__(self, max_batch_size, n_kv_heads, head_dim, window_size, n_sinks=0):
        self.window_size, self.n_sinks = window_size, n_sinks
        self.cache_k = torch.zeros(max_batch_size, n_kv_heads, n_sinks + window_size, head_dim)
        self.cache_v = torch.zeros(max_batch_size, n_kv_heads, n_sinks + window_size, head_dim)

    def _slots(self, p):
        return torch.where(p < self.n_sinks, p, self.n_sinks + (p - self.n_sinks).remainder(self.window_size))

    def update(self, k, v, start_pos):
        B, T = k.shape[0], k.shape[2]
        everything = torch.arange(start_pos + T)
        earlier = everything < start_pos
        seen = everything >= start_pos - self.window_size + 1
        held = everything[earlier & (seen | (everything < self.n_sinks))]
        keys = torch.cat([self.cache_k[:B].index_select(2, self._slots(held)), k], dim=2)
        values = torch.cat([self.cache_v[:B].index_select(2, self._slots(held)), v], dim=2)
        new = everything[~earlier]
        kept = (new < self.n_sinks) | (new > start_pos + T - 1 - self.window_size)
        self.cache_k[:B].index_copy_(2, self._slots(new[kept]), k[:, :, kept])
        self.cache_v[:B].index_copy_(2, self._slots(new[kept]), v[:, :, kept])
        return keys, values, torch.cat([held, new]).int()


ALTERNATIVES = {
    "09.rope_positions": [RoPEOffsetReal, RoPEStartKeyword, RoPEPositionsArange, RoPEBlockMatrices],
    "09.repeat_kv": [
        repeat_kv_interleave,
        repeat_kv_expand_flatten,
        repeat_kv_stack,
        repeat_kv_index,
        repeat_kv_llama,
        repeat_kv_cat,
    ],
    "09.kv_cache": [
        Answer("llama_layout", LlamaLayoutLayer, RoPEPositionsArange, repeat_kv_llama),
        Answer("sdpa_boolean_mask", SdpaBooleanLayer, RoPEStartKeyword, repeat_kv_interleave),
        Answer("sdpa_enable_gqa", SdpaGqaLayer, RoPEBlockMatrices, repeat_kv_stack),
        Answer("einsum_buffers", EinsumBufferLayer, RoPEOffsetReal, repeat_kv_expand_flatten),
        Answer("grouped_einsum", GroupedEinsumLayer, RoPEOffsetReal, repeat_kv_cat),
        Answer("blog_scatter", ScatterLayer, RoPEPositionsArange, repeat_kv_index),
        Answer("sliced_mask_buffer", SlicedMaskBufferLayer, RoPEStartKeyword, repeat_kv_stack),
    ],
    "09.cache_bytes": [cache_bytes_numpy, cache_bytes_torch, cache_bytes_per_token, cache_bytes_float],
    "09.sampling_distribution": [sampling_sort, sampling_where, sampling_scatter],
    "09.generate": [
        Answer("while_loop_extra_call", generate_while, sampling_sort),
        Answer("preallocated_argmax", generate_preallocated, sampling_where),
        Answer("inverse_cdf", generate_inverse_cdf, sampling_scatter),
        Answer("gumbel_max", generate_gumbel, sampling_where),
    ],
    "09.top_p": [
        Answer("pairwise_inverse_cdf", nucleus_pairwise, sample_inverse_cdf),
        Answer("ascending_gumbel", nucleus_ascending, sample_gumbel),
        Answer("scatter_column", nucleus_scatter, sample_column),
        Answer("pairwise_in_chunks", nucleus_pairwise, sample_in_chunks),
    ],
    "09.rolling_cache": [RollingTagged, RollingUnrolled, RollingIndexCopy],
}
