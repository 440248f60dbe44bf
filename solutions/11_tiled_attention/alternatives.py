"""Correct answers of notebook 11 written differently from the reference.

Key: B batch, H heads, T sequence length, Dh head dimension, N the length of a softmax row.
The tiled attentions all hold one (block_size, block_size) tile of scores at a time, as the question
asks; they differ in loop order, masking, how the statistics are kept and where the output goes.
"""

import math

import numpy as np
import torch
import torch.nn.functional as F

# ---------------------------------------------------------------------- score_matrix_bytes


def bytes_with_pow(batch, heads, seq_len, bytes_per_element=4):
    return int(batch * heads * seq_len**2 * bytes_per_element)


def bytes_from_numel(batch, heads, seq_len, bytes_per_element=4):
    """As numel() of a meta tensor would count it, then the element size."""
    return math.prod((batch, heads, seq_len, seq_len)) * bytes_per_element


def bytes_as_float(batch, heads, seq_len, bytes_per_element=4):
    """A float: exact below 2**53."""
    return float(batch) * heads * seq_len * seq_len * bytes_per_element


# -------------------------------------------------------------------------- online_softmax


def softmax_into_preallocated(scores, block_size):
    """Statistics with split and .max(...).values; the result written block by block into empty_like."""
    m = torch.full_like(scores[..., :1], float("-inf"))
    total = torch.zeros_like(m)
    for block in scores.split(block_size, dim=-1):
        m_new = torch.maximum(m, block.max(dim=-1, keepdim=True).values)
        total = total * (m - m_new).exp() + (block - m_new).exp().sum(-1, keepdim=True)
        m = m_new
    out = torch.empty_like(scores)
    for start in range(0, scores.shape[-1], block_size):
        out[..., start : start + block_size] = (scores[..., start : start + block_size] - m).exp() / total
    return out


def softmax_log_sum_exp(scores, block_size):
    """The running statistic as one log-sum-exp, merged with logaddexp; exp(s - lse) at the end."""
    lse = torch.full_like(scores[..., :1], float("-inf"))
    for start in range(0, scores.shape[-1], block_size):
        block = scores[..., start : start + block_size]
        m = block.amax(dim=-1, keepdim=True)
        lse = torch.logaddexp(lse, m + torch.log(torch.exp(block - m).sum(dim=-1, keepdim=True)))
    return torch.cat([torch.exp(b - lse) for b in scores.split(block_size, dim=-1)], dim=-1)


def softmax_kept_blocks(scores, block_size):
    """One pass keeps each block's exp(s - its own max); the second rescales them to the row's."""
    kept, maxima = [], []
    m = torch.full_like(scores[..., :1], float("-inf"))
    total = torch.zeros_like(m)
    for block in torch.split(scores, block_size, dim=-1):
        block_max = block.amax(dim=-1, keepdim=True)
        e = torch.exp(block - block_max)
        m_new = torch.maximum(m, block_max)
        total = total * torch.exp(m - m_new) + e.sum(-1, keepdim=True) * torch.exp(block_max - m_new)
        m = m_new
        kept.append(e)
        maxima.append(block_max)
    return torch.cat([e * torch.exp(mx - m) / total for e, mx in zip(kept, maxima, strict=True)], dim=-1)


def softmax_flattened_rows(scores, block_size):
    """Rows flattened to (R, N), a while loop over the columns, reshaped back at the end."""
    rows = scores.reshape(-1, scores.shape[-1])  # (R, N)
    n = rows.shape[1]
    m = rows.new_full((rows.shape[0], 1), -math.inf)
    total = rows.new_zeros((rows.shape[0], 1))
    start = 0
    while start < n:
        block = rows[:, start : min(start + block_size, n)]
        m_new = torch.max(m, torch.amax(block, dim=1, keepdim=True))
        total = torch.exp(m - m_new) * total + torch.sum(torch.exp(block - m_new), dim=1, keepdim=True)
        m = m_new
        start += block_size
    pieces = [torch.exp(rows[:, s : s + block_size] - m) / total for s in range(0, n, block_size)]
    return torch.cat(pieces, dim=1).reshape(scores.shape)


# ------------------------------------------------------------------------- tiled_attention


def attention_prose(q, k, v, block_size, causal=False):
    """As a student following the notebook's text writes it: preallocated output, torch.where on the
    diagonal tile, the scale applied to the scores."""
    B, H, T, Dh = q.shape
    out = torch.empty_like(q)
    for i in range(0, T, block_size):
        qi = q[:, :, i : i + block_size]
        n = qi.shape[2]
        m = torch.full((B, H, n, 1), float("-inf"))
        total = torch.zeros(B, H, n, 1)
        acc = torch.zeros(B, H, n, Dh)
        for j in range(0, T, block_size):
            if causal and j > i + n - 1:
                break
            kj, vj = k[:, :, j : j + block_size], v[:, :, j : j + block_size]
            s = torch.einsum("bhqd,bhkd->bhqk", qi, kj) / math.sqrt(Dh)
            if causal:
                visible = torch.arange(j, j + kj.shape[2])[None, :] <= torch.arange(i, i + n)[:, None]
                s = torch.where(visible, s, torch.tensor(float("-inf")))
            m_new = torch.maximum(m, s.max(dim=-1, keepdim=True).values)
            p = torch.exp(s - m_new)
            c = torch.exp(m - m_new)
            total = c * total + p.sum(-1, keepdim=True)
            acc = c * acc + torch.einsum("bhqk,bhkd->bhqd", p, vj)
            m = m_new
        out[:, :, i : i + n] = acc / total
    return out


def attention_key_blocks_outer(q, k, v, block_size, causal=False):
    """FlashAttention-1's order: key blocks outside, query blocks inside, statistics for every query
    kept across the outer loop (T x 1 and T x Dh: linear in T)."""
    B, H, T, Dh = q.shape
    m = q.new_full((B, H, T, 1), -math.inf)
    total = q.new_zeros((B, H, T, 1))
    acc = q.new_zeros((B, H, T, Dh))
    scale = Dh**-0.5
    for j in range(0, T, block_size):
        kj, vj = k[:, :, j : j + block_size], v[:, :, j : j + block_size]
        first = j if causal else 0  # causal: query blocks before this key block see none of it
        first -= first % block_size
        for i in range(first, T, block_size):
            rows = slice(i, min(i + block_size, T))
            s = (q[:, :, rows] @ kj.transpose(2, 3)) * scale
            if causal:
                s = s.masked_fill(
                    torch.arange(j, j + kj.shape[2]) > torch.arange(rows.start, rows.stop)[:, None], -math.inf
                )
            m_old = m[:, :, rows]
            m_new = torch.maximum(m_old, s.amax(-1, keepdim=True))
            p = torch.exp(s - m_new)
            c = torch.exp(m_old - m_new)
            total[:, :, rows] = c * total[:, :, rows] + p.sum(-1, keepdim=True)
            acc[:, :, rows] = c * acc[:, :, rows] + p @ vj
            m[:, :, rows] = m_new
    return acc / total


def attention_all_queries_per_key_block(q, k, v, block_size, causal=False):
    """Key blocks outside and every query at once inside: (T, block_size) scores per step, which the
    online update carries (linear in T; no row of scores spans every key)."""
    B, H, T, Dh = q.shape
    m = q.new_full((B, H, T, 1), -math.inf)
    total, acc = q.new_zeros((B, H, T, 1)), q.new_zeros((B, H, T, Dh))
    queries = torch.arange(T)[:, None]
    for j in range(0, T, block_size):
        kj, vj = k[:, :, j : j + block_size], v[:, :, j : j + block_size]
        s = q @ kj.transpose(2, 3) / math.sqrt(Dh)  # (B, H, T, block)
        if causal:  # key block 0 comes first: every query has seen a key before a row is all hidden
            s = s.masked_fill(torch.arange(j, j + kj.shape[2])[None, :] > queries, -math.inf)
        m_new = torch.maximum(m, s.amax(-1, keepdim=True))
        p, c = torch.exp(s - m_new), torch.exp(m - m_new)
        total, acc, m = c * total + p.sum(-1, keepdim=True), c * acc + p @ vj, m_new
    return acc / total


def attention_normalised_accumulator(q, k, v, block_size, causal=False):
    """The output kept normalised after every tile (FlashAttention-1's update), every tile visited and
    masked (none skipped), the mask from tril."""
    B, H, T, Dh = q.shape
    outs = []
    for i in range(0, T, block_size):
        qi = q[:, :, i : i + block_size] / math.sqrt(Dh)
        n = qi.shape[2]
        o = torch.zeros_like(qi)
        m = torch.full_like(qi[..., :1], -math.inf)
        total = torch.zeros_like(m)
        for j in range(0, T, block_size):
            kj, vj = k[:, :, j : j + block_size], v[:, :, j : j + block_size]
            s = qi @ kj.mT
            if causal:
                visible = torch.ones(n, kj.shape[2], dtype=torch.bool).tril(diagonal=i - j)
                s = s.masked_fill(~visible, -math.inf)
            m_new = torch.maximum(m, s.amax(-1, keepdim=True))
            p = torch.exp(s - m_new)
            total_new = torch.exp(m - m_new) * total + p.sum(-1, keepdim=True)
            o = (o * total * torch.exp(m - m_new) + p @ vj) / total_new
            m, total = m_new, total_new
        outs.append(o)
    return torch.cat(outs, dim=-2)


def attention_tile_softmax_merged(q, k, v, block_size, causal=False):
    """Each tile's own softmax and log-sum-exp (torch.softmax and torch.logsumexp on a tile are
    allowed here), merged by their log-sum-exps: the merging rule of split-K decoding."""
    T = q.shape[2]
    outs = []
    for i in range(0, T, block_size):
        qi = q[:, :, i : i + block_size]
        n = qi.shape[2]
        lse = torch.full(qi.shape[:-1] + (1,), -math.inf)
        o = torch.zeros_like(qi)
        for j in range(0, i + n if causal else T, block_size):
            kj, vj = k[:, :, j : j + block_size], v[:, :, j : j + block_size]
            s = qi @ kj.transpose(-1, -2) / math.sqrt(q.shape[-1])
            if causal and j + kj.shape[2] > i:
                future = torch.arange(j, j + kj.shape[2])[None, :] > torch.arange(i, i + n)[:, None]
                s = s.masked_fill(future, -math.inf)
            tile_lse = torch.logsumexp(s, dim=-1, keepdim=True)
            new_lse = torch.logaddexp(lse, tile_lse)
            o = o * torch.exp(lse - new_lse) + torch.softmax(s, dim=-1) @ vj * torch.exp(tile_lse - new_lse)
            lse = new_lse
        outs.append(o)
    return torch.cat(outs, dim=2)


def attention_padded(q, k, v, block_size, causal=False):
    """q, k and v padded to a multiple of block_size (copies: linear in T), padded keys masked, padded
    query rows dropped at the end; query blocks unbound from a (B, H, n, b, Dh) view."""
    B, H, T, Dh = q.shape
    n = -(-T // block_size)
    pad = n * block_size - T
    qp, kp, vp = (F.pad(x, (0, 0, 0, pad)) for x in (q, k, v))
    q_blocks = qp.view(B, H, n, block_size, Dh).unbind(2)
    k_blocks = kp.view(B, H, n, block_size, Dh).unbind(2)
    v_blocks = vp.view(B, H, n, block_size, Dh).unbind(2)
    positions = torch.arange(n * block_size).view(n, block_size)
    outs = []
    for i, qi in enumerate(q_blocks):
        m = torch.full((B, H, block_size, 1), -math.inf)
        total = torch.zeros(B, H, block_size, 1)
        acc = torch.zeros(B, H, block_size, Dh)
        for j in range(i + 1 if causal else n):
            s = qi @ k_blocks[j].transpose(-1, -2) / math.sqrt(Dh)
            hidden = (positions[j] >= T)[None, :].expand(block_size, block_size)
            if causal:
                hidden = hidden | (positions[j][None, :] > positions[i][:, None])
            s = s.masked_fill(hidden, -math.inf)
            m_new = torch.maximum(m, s.amax(-1, keepdim=True))
            p = torch.exp(s - m_new)
            c = torch.exp(m - m_new)
            total, acc, m = c * total + p.sum(-1, keepdim=True), c * acc + p @ v_blocks[j], m_new
        outs.append(acc / total)
    return torch.stack(outs, dim=2).reshape(B, H, n * block_size, Dh)[:, :, :T]


def bytes_numpy(batch, heads, seq_len, bytes_per_element=4):
    """NumPy's integers are numbers too."""
    return np.prod([batch, heads, seq_len, seq_len], dtype=np.int64) * bytes_per_element


def softmax_in_float64(scores, block_size):
    """The streamed algorithm run in float64 for accuracy, the result cast back: the float64 copy of
    the input is the input, and what is cast into the result is the result."""
    s = scores.double()
    n = s.shape[-1]
    m = s.new_full((*s.shape[:-1], 1), -math.inf)
    total = s.new_zeros((*s.shape[:-1], 1))
    for start in range(0, n, block_size):
        block = s[..., start : start + block_size]
        m_new = torch.maximum(m, block.amax(-1, keepdim=True))
        total = total * torch.exp(m - m_new) + torch.exp(block - m_new).sum(-1, keepdim=True)
        m = m_new
    starts = range(0, n, block_size)
    return torch.cat([torch.exp(s[..., a : a + block_size] - m) / total for a in starts], -1).float()


def attention_keys_by_queries(q, k, v, block_size, causal=False):
    """FlashAttention-1's order with the tile computed as k_blk @ q^T, (block, T): the statistics are
    reduced over the key block (dim -2), never over every key."""
    B, H, T, Dh = q.shape
    m = q.new_full((B, H, 1, T), -math.inf)
    total, acc = q.new_zeros((B, H, 1, T)), q.new_zeros((B, H, Dh, T))
    q_t = q.mT / math.sqrt(Dh)  # (B, H, Dh, T), a view
    for j in range(0, T, block_size):
        kj, vj = k[:, :, j : j + block_size], v[:, :, j : j + block_size]
        s = kj @ q_t  # (B, H, block, T)
        if causal:
            s = s.masked_fill(torch.arange(j, j + kj.shape[2])[:, None] > torch.arange(T)[None, :], -math.inf)
        m_new = torch.maximum(m, s.amax(-2, keepdim=True))
        p, c = torch.exp(s - m_new), torch.exp(m - m_new)
        total, acc, m = c * total + p.sum(-2, keepdim=True), c * acc + vj.mT @ p, m_new
    return (acc / total).mT.contiguous()


def softmax_with_torch_max(scores, block_size):
    """torch.max(a, b) of two tensors for the running max: elementwise, not a reduction."""
    m = torch.full_like(scores[..., :1], -math.inf)
    total = torch.zeros_like(m)
    for start in range(0, scores.shape[-1], block_size):
        block = scores[..., start : start + block_size]
        m_new = torch.max(m, block.max(dim=-1, keepdim=True).values)
        total = total * torch.exp(m - m_new) + torch.exp(block - m_new).sum(-1, keepdim=True)
        m = m_new
    starts = range(0, scores.shape[-1], block_size)
    return torch.cat([torch.exp(scores[..., a : a + block_size] - m) / total for a in starts], -1)


# --------------------------------------------------------------------- merge_softmax_states


def merge_by_log_sum_exp(a, b):
    """The merged state against its log-sum-exp: m = log(l_a e^m_a + l_b e^m_b), l = 1."""
    lse = torch.logaddexp(a[0] + torch.log(a[1]), b[0] + torch.log(b[1]))
    return lse, torch.ones_like(lse), torch.exp(a[0] - lse) * a[2] + torch.exp(b[0] - lse) * b[2]


def merge_stacked(a, b):
    """Both states stacked on a new first dimension, reduced over it (n parts merge the same way)."""
    m, total, acc = (torch.stack(pair) for pair in zip(a, b, strict=True))
    top = m.amax(dim=0)
    scale = torch.exp(m - top)
    return top, (scale * total).sum(dim=0), (scale * acc).sum(dim=0)


def merge_with_where(a, b):
    """The empty parts handled by name: a part with no visible key contributes nothing."""
    m = torch.where(a[0] >= b[0], a[0], b[0])
    scales = [torch.where(torch.isinf(part[0]), 0.0, torch.exp(part[0] - m)) for part in (a, b)]
    return m, scales[0] * a[1] + scales[1] * b[1], scales[0] * a[2] + scales[1] * b[2]


def merge_in_place(a, b):
    """The first state's tensors updated in place, as a loop over key blocks would keep them."""
    m = torch.maximum(a[0], b[0])
    c_a, c_b = torch.exp(a[0] - m), torch.exp(b[0] - m)
    total, acc = a[1].clone(), a[2].clone()
    total.mul_(c_a).add_(c_b * b[1])
    acc.mul_(c_a).addcmul_(c_b, b[2])
    return m, total, acc


ALTERNATIVES = {
    "11.score_matrix_bytes": [bytes_with_pow, bytes_from_numel, bytes_as_float, bytes_numpy],
    "11.online_softmax": [
        softmax_into_preallocated,
        softmax_log_sum_exp,
        softmax_kept_blocks,
        softmax_flattened_rows,
        softmax_in_float64,
        softmax_with_torch_max,
    ],
    "11.tiled_attention": [
        attention_prose,
        attention_key_blocks_outer,
        attention_all_queries_per_key_block,
        attention_keys_by_queries,
        attention_normalised_accumulator,
        attention_tile_softmax_merged,
        attention_padded,
    ],
    "11.merge_softmax_states": [merge_by_log_sum_exp, merge_stacked, merge_with_where, merge_in_place],
}
