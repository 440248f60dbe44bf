"""Known wrong versions of notebook 11's answers: the judge names them, the tests use them as mutants.

Instructor-side only (next to the reference, not released). Each is a complete, self-contained
function with exactly one thing wrong. Mistakes that give the right values and fail only a memory
part (the whole row at once, a T x T matrix inside the loop) are not listed here: a diagnosis is
made from wrong values, and tests/test_tiled_attention.py holds those to their own messages.
"""

import math

import torch

from autograder.core import Mistake

# ------------------------------------------------------------------ Question 1: the bytes


def bytes_linear_in_t(batch, heads, seq_len, bytes_per_element=4):
    return batch * heads * seq_len * bytes_per_element


def bytes_without_heads(batch, heads, seq_len, bytes_per_element=4):
    return batch * seq_len * seq_len * bytes_per_element


def bytes_without_batch(batch, heads, seq_len, bytes_per_element=4):
    return heads * seq_len * seq_len * bytes_per_element


def bytes_counted_as_elements(batch, heads, seq_len, bytes_per_element=4):
    return batch * heads * seq_len * seq_len


def bytes_in_bits(batch, heads, seq_len, bytes_per_element=4):
    return 8 * batch * heads * seq_len * seq_len * bytes_per_element


def bytes_in_gib(batch, heads, seq_len, bytes_per_element=4):
    return batch * heads * seq_len * seq_len * bytes_per_element / 2**30


def bytes_of_scores_and_probabilities(batch, heads, seq_len, bytes_per_element=4):
    return 2 * batch * heads * seq_len * seq_len * bytes_per_element


def bytes_of_causal_half(batch, heads, seq_len, bytes_per_element=4):
    return batch * heads * seq_len * (seq_len + 1) // 2 * bytes_per_element


# ------------------------------------------------------------ Question 2: online softmax


def _softmax_blocks(scores, block_size, m, total):
    starts = range(0, scores.shape[-1], block_size)
    return torch.cat([torch.exp(scores[..., s : s + block_size] - m) / total for s in starts], dim=-1)


def _start(scores, m0=float("-inf")):
    m = scores.new_full((*scores.shape[:-1], 1), m0)
    return m, torch.zeros_like(m)


def softmax_sum_not_rescaled(scores, block_size):
    m, total = _start(scores)
    for start in range(0, scores.shape[-1], block_size):
        block = scores[..., start : start + block_size]
        m_new = torch.maximum(m, block.amax(dim=-1, keepdim=True))
        total = total + torch.exp(block - m_new).sum(dim=-1, keepdim=True)
        m = m_new
    return _softmax_blocks(scores, block_size, m, total)


def softmax_correction_inverted(scores, block_size):
    m, total = _start(scores)
    for start in range(0, scores.shape[-1], block_size):
        block = scores[..., start : start + block_size]
        m_new = torch.maximum(m, block.amax(dim=-1, keepdim=True))
        total = total * torch.exp(torch.nan_to_num(m_new - m, posinf=0.0)) + torch.exp(block - m_new).sum(
            -1, keepdim=True
        )
        m = m_new
    return _softmax_blocks(scores, block_size, m, total)


def softmax_correction_inverted_at_the_start(scores, block_size):
    """exp(m_new - m) with m = -inf at the first block: inf times a sum of 0 is NaN."""
    m, total = _start(scores)
    for start in range(0, scores.shape[-1], block_size):
        block = scores[..., start : start + block_size]
        m_new = torch.maximum(m, block.amax(dim=-1, keepdim=True))
        total = total * torch.exp(m_new - m) + torch.exp(block - m_new).sum(-1, keepdim=True)
        m = m_new
    return _softmax_blocks(scores, block_size, m, total)


def softmax_max_never_updated(scores, block_size):
    m, total = _start(scores)
    for start in range(0, scores.shape[-1], block_size):
        block = scores[..., start : start + block_size]
        m_new = torch.maximum(m, block.amax(dim=-1, keepdim=True))
        total = total * torch.exp(m - m_new) + torch.exp(block - m_new).sum(-1, keepdim=True)
    return _softmax_blocks(scores, block_size, m, total)


def softmax_max_not_subtracted(scores, block_size):
    total = scores.new_zeros((*scores.shape[:-1], 1))
    for start in range(0, scores.shape[-1], block_size):
        total = total + torch.exp(scores[..., start : start + block_size]).sum(dim=-1, keepdim=True)
    return _softmax_blocks(scores, block_size, torch.zeros_like(total), total)


def softmax_max_starts_at_zero(scores, block_size):
    m, total = _start(scores, 0.0)
    for start in range(0, scores.shape[-1], block_size):
        block = scores[..., start : start + block_size]
        m_new = torch.maximum(m, block.amax(dim=-1, keepdim=True))
        total = total * torch.exp(m - m_new) + torch.exp(block - m_new).sum(dim=-1, keepdim=True)
        m = m_new
    return _softmax_blocks(scores, block_size, m, total)


def softmax_per_block(scores, block_size):
    """Each block normalised on its own, as if it were the whole row."""
    blocks = []
    for start in range(0, scores.shape[-1], block_size):
        block = scores[..., start : start + block_size]
        e = torch.exp(block - block.amax(dim=-1, keepdim=True))
        blocks.append(e / e.sum(dim=-1, keepdim=True))
    return torch.cat(blocks, dim=-1)


def softmax_last_block_dropped(scores, block_size):
    """Only whole blocks: range(0, N - block_size + 1, block_size)."""
    n = scores.shape[-1]
    starts = range(0, n - block_size + 1, block_size)
    m, total = _start(scores)
    for start in starts:
        block = scores[..., start : start + block_size]
        m_new = torch.maximum(m, block.amax(dim=-1, keepdim=True))
        total = total * torch.exp(m - m_new) + torch.exp(block - m_new).sum(dim=-1, keepdim=True)
        m = m_new
    return torch.cat([torch.exp(scores[..., s : s + block_size] - m) / total for s in starts], dim=-1)


# ----------------------------------------------------------- Question 3: tiled attention


def _tiled(
    q,
    k,
    v,
    block_size,
    causal=False,
    *,
    scale=None,
    rescale_sum=True,
    rescale_acc=True,
    subtract_max=True,
    m0=float("-inf"),
    per_block_softmax=False,
    mask="right",
    whole_blocks_only=False,
    skip_diagonal=False,
):
    """Tiled attention with one step changed (the keywords), for the mistakes below."""
    B, H, T, Dh = q.shape
    scale = 1.0 / math.sqrt(Dh) if scale is None else scale
    last = T - block_size + 1 if whole_blocks_only else T
    out = torch.zeros_like(q)
    for start in range(0, last, block_size):
        q_blk = q[:, :, start : start + block_size] * scale
        rows = q_blk.shape[2]
        m = q.new_full((B, H, rows, 1), m0)
        total = q.new_zeros((B, H, rows, 1))
        acc = q.new_zeros((B, H, rows, Dh))
        blocks = 0
        stop = (start if skip_diagonal else start + rows) if causal else last
        for key_start in range(0, stop, block_size):
            k_blk = k[:, :, key_start : key_start + block_size]
            v_blk = v[:, :, key_start : key_start + block_size]
            cols = k_blk.shape[2]
            s = q_blk @ k_blk.transpose(-1, -2)
            if causal:
                rows_at = torch.arange(rows)[:, None] + (0 if mask == "local" else start)
                cols_at = torch.arange(cols)[None, :] + (key_start if mask in ("right", "diagonal") else 0)
                hidden = {"diagonal": cols_at >= rows_at, "reversed": cols_at < rows_at}.get(
                    mask, cols_at > rows_at
                )
                s = s.masked_fill(hidden, 0.0 if mask == "zero" else float("-inf"))
            if per_block_softmax:
                acc = acc + torch.softmax(s, dim=-1) @ v_blk
                blocks += 1
                continue
            m_new = torch.maximum(m, s.amax(dim=-1, keepdim=True)) if subtract_max else torch.zeros_like(m)
            p = torch.exp(s - m_new)
            correction = torch.exp(m - m_new) if subtract_max else torch.ones_like(m)
            total = (total * correction if rescale_sum else total) + p.sum(dim=-1, keepdim=True)
            acc = (acc * correction if rescale_acc else acc) + p @ v_blk
            m = m_new
        out[:, :, start : start + rows] = acc / blocks if per_block_softmax else acc / total
    return out


def attention_sum_not_rescaled(q, k, v, block_size, causal=False):
    return _tiled(q, k, v, block_size, causal, rescale_sum=False)


def attention_acc_not_rescaled(q, k, v, block_size, causal=False):
    return _tiled(q, k, v, block_size, causal, rescale_acc=False)


def attention_max_not_subtracted(q, k, v, block_size, causal=False):
    return _tiled(q, k, v, block_size, causal, subtract_max=False)


def attention_max_starts_at_zero(q, k, v, block_size, causal=False):
    return _tiled(q, k, v, block_size, causal, m0=0.0)


def attention_softmax_per_block(q, k, v, block_size, causal=False):
    return _tiled(q, k, v, block_size, causal, per_block_softmax=True)


def attention_diagonal_masked(q, k, v, block_size, causal=False):
    return _tiled(q, k, v, block_size, causal, mask="diagonal")


def attention_local_positions(q, k, v, block_size, causal=False):
    return _tiled(q, k, v, block_size, causal, mask="local")


def attention_global_query_local_key(q, k, v, block_size, causal=False):
    return _tiled(q, k, v, block_size, causal, mask="global query, local key")


def attention_scaled_by_dh(q, k, v, block_size, causal=False):
    return _tiled(q, k, v, block_size, causal, scale=1.0 / q.shape[-1])


def attention_scaled_by_sqrt_d(q, k, v, block_size, causal=False):
    return _tiled(q, k, v, block_size, causal, scale=1.0 / math.sqrt(q.shape[1] * q.shape[-1]))


def attention_not_scaled(q, k, v, block_size, causal=False):
    return _tiled(q, k, v, block_size, causal, scale=1.0)


def attention_masked_with_zero(q, k, v, block_size, causal=False):
    return _tiled(q, k, v, block_size, causal, mask="zero")


def attention_mask_reversed(q, k, v, block_size, causal=False):
    return _tiled(q, k, v, block_size, causal, mask="reversed")


def attention_diagonal_tile_skipped(q, k, v, block_size, causal=False):
    return _tiled(q, k, v, block_size, causal, skip_diagonal=True)


def attention_last_block_dropped(q, k, v, block_size, causal=False):
    return _tiled(q, k, v, block_size, causal, whole_blocks_only=True)


# ----------------------------------------------------- Question 4: merging softmax states


def _rescaled(a, b, m):
    (m_a, l_a, acc_a), (m_b, l_b, acc_b) = a, b
    c_a, c_b = torch.exp(m_a - m), torch.exp(m_b - m)
    return m, c_a * l_a + c_b * l_b, c_a * acc_a + c_b * acc_b


def merge_not_rescaled(a, b):
    return torch.maximum(a[0], b[0]), a[1] + b[1], a[2] + b[2]


def merge_correction_inverted(a, b):
    (m_a, l_a, acc_a), (m_b, l_b, acc_b) = a, b
    m = torch.maximum(m_a, m_b)
    c_a, c_b = torch.exp(m - m_a), torch.exp(m - m_b)
    return m, c_a * l_a + c_b * l_b, c_a * acc_a + c_b * acc_b


def merge_sum_not_rescaled(a, b):
    m, _, acc = _rescaled(a, b, torch.maximum(a[0], b[0]))
    return m, a[1] + b[1], acc


def merge_acc_not_rescaled(a, b):
    m, total, _ = _rescaled(a, b, torch.maximum(a[0], b[0]))
    return m, total, a[2] + b[2]


def merge_outputs_averaged(a, b):
    """Each part's attention output, averaged: as if both parts held the same weight."""
    out = (a[2] / a[1] + b[2] / b[1]) / 2
    return torch.maximum(a[0], b[0]), torch.ones_like(a[1]), out


def merge_normalised_acc(a, b):
    """acc divided by l in the merge, and l returned too: the output is divided twice."""
    m, total, acc = _rescaled(a, b, torch.maximum(a[0], b[0]))
    return m, total, acc / total


def merge_first_max_as_reference(a, b):
    return _rescaled(a, b, a[0])


def merge_smaller_max_as_reference(a, b):
    return _rescaled(a, b, torch.minimum(a[0], b[0]))


def merge_without_a_max(a, b):
    """Both parts rescaled to a maximum of 0: exp(m_a) and exp(m_b) themselves."""
    return _rescaled(a, b, torch.zeros_like(a[0]))


MERGE_RESCALE = (
    "each part's l and acc were summed against its own m: multiply both by exp(m_part - m), m the "
    "merged maximum, before adding them."
)


RESCALE = (
    "when the running max grows from m to m_new, everything summed so far was computed against m: "
    "multiply it by exp(m - m_new) before adding the new block's terms."
)
LAST_BLOCK = (
    "loop with range(0, N, block_size) and slice with [start:start + block_size]: the last slice is "
    "simply shorter when the length is no multiple of block_size."
)

MISTAKES = {
    "11.score_matrix_bytes": [
        Mistake(
            "seq_len counted once, not squared",
            "there is one score per (query, key) pair: seq_len * seq_len per head.",
            bytes_linear_in_t,
        ),
        Mistake(
            "the heads left out", "every head has its own matrix: multiply by heads.", bytes_without_heads
        ),
        Mistake(
            "the batch left out",
            "every sequence has its own matrices: multiply by batch.",
            bytes_without_batch,
        ),
        Mistake(
            "elements, not bytes",
            "multiply the number of elements by bytes_per_element.",
            bytes_counted_as_elements,
        ),
        Mistake("bits, not bytes", "count bytes: do not multiply by 8.", bytes_in_bits),
        Mistake(
            "GiB, not bytes (divided by 2**30)",
            "return the number of bytes itself; the notebook's cells divide by 2**30 to print GiB.",
            bytes_in_gib,
        ),
        Mistake(
            "the scores S and the probabilities P counted both",
            "the question asks for one (B, H, T, T) tensor, the scores: count it once.",
            bytes_of_scores_and_probabilities,
        ),
        Mistake(
            "only the causal half of the matrix counted",
            "the dense computation stores the whole (T, T) matrix even when a causal mask hides half of it.",
            bytes_of_causal_half,
        ),
    ],
    "11.online_softmax": [
        Mistake("the running sum is not rescaled when the max grows", RESCALE, softmax_sum_not_rescaled),
        Mistake(
            "the running sum is rescaled by exp(m_new - m), the wrong way round",
            "a larger max makes every earlier term smaller: multiply the sum by exp(m - m_new), which is at "
            "most 1.",
            softmax_correction_inverted,
        ),
        Mistake(
            "the running max starts at 0 instead of -inf",
            "start with m = -inf: a row whose logits are all far below 0 never raises a max that starts "
            "at 0, and exp(s - 0) underflows to 0, so l = 0 and the result is 0 / 0.",
            softmax_max_starts_at_zero,
        ),
        Mistake(
            "NaN from the first block: the sum rescaled by exp(m_new - m) (the wrong way round), where m = -inf "
            "and inf x 0 is NaN",
            "multiply the sum by exp(m - m_new), which is at most 1, and 0 at the first block (exp(-inf)).",
            softmax_correction_inverted_at_the_start,
        ),
        Mistake(
            "the running max is never updated (m = m_new left out)",
            "after each block, m = m_new: the next block's correction and the final exp(s - m) need the max "
            "of every block so far.",
            softmax_max_never_updated,
        ),
        Mistake(
            "the running max is not subtracted (exp of the raw logits)",
            "exp(1000) is inf in float32: compute exp(block - m_new) with the running max m_new, and "
            "normalise with exp(s - m) / l.",
            softmax_max_not_subtracted,
        ),
        Mistake(
            "each block normalised on its own (a softmax per block)",
            "a block's values are divided by the sum over the whole row: keep the running max and sum over "
            "all blocks first, then normalise every block with the row's final m and l.",
            softmax_per_block,
        ),
        Mistake("the last, shorter block is dropped", LAST_BLOCK, softmax_last_block_dropped),
    ],
    "11.tiled_attention": [
        Mistake("the running sum l is not rescaled when the max grows", RESCALE, attention_sum_not_rescaled),
        Mistake(
            "the accumulator is not rescaled when the max grows",
            "the accumulator of exp(s - m) * v was taken against the old max too: acc = acc * exp(m - m_new) "
            "+ p @ v_blk, with the same factor as l.",
            attention_acc_not_rescaled,
        ),
        Mistake(
            "the running max starts at 0 instead of -inf",
            "start with m = -inf: when every score of a row is far below 0, a max that starts at 0 never "
            "rises, exp(s - 0) underflows to 0, and acc / l is 0 / 0.",
            attention_max_starts_at_zero,
        ),
        Mistake(
            "the running max is not subtracted (exp of the raw scores)",
            "scores near 140 overflow exp in float32: use p = exp(s - m_new) with the running max, and "
            "rescale l and the accumulator by exp(m - m_new).",
            attention_max_not_subtracted,
        ),
        Mistake(
            "each key block's softmax taken on its own and averaged",
            "a tile's weights are not a softmax of their own: keep the running max, sum and accumulator over "
            "all key blocks and divide by l once, after the last.",
            attention_softmax_per_block,
        ),
        Mistake(
            "the causal mask hides the diagonal too (a query cannot see itself)",
            "hide the keys strictly after the query, key position > query position: each query sees itself.",
            attention_diagonal_masked,
        ),
        Mistake(
            "the causal mask compares positions within the tile, not in the sequence",
            "build the mask from global positions, start + row and key_start + column: a tile below the "
            "diagonal is entirely visible, only the diagonal tile needs a mask.",
            attention_local_positions,
        ),
        Mistake(
            "the causal mask compares a query's position in the sequence with a key's position in its tile",
            "offset both by their block's start: query start + row against key key_start + column.",
            attention_global_query_local_key,
        ),
        Mistake(
            "the scores are not scaled",
            "multiply the scores (or q) by 1 / math.sqrt(Dh), Dh = q.shape[-1], as attention does.",
            attention_not_scaled,
        ),
        Mistake(
            "masked scores set to 0 instead of -inf",
            "exp(0 - m) is not 0: a hidden key must get -inf, whose exp is 0.",
            attention_masked_with_zero,
        ),
        Mistake(
            "the causal mask hides the past, not the future (key < query)",
            "hide the keys after the query: key position > query position.",
            attention_mask_reversed,
        ),
        Mistake(
            "the diagonal tile is skipped: a query block never reads its own key block",
            "loop over the key blocks up to and including the query block's own (range(0, start + rows, "
            "block_size)); only the tiles after it are in the future.",
            attention_diagonal_tile_skipped,
        ),
        Mistake(
            "scores scaled by 1 / Dh instead of 1 / sqrt(Dh)",
            "scale by 1 / math.sqrt(Dh), Dh = q.shape[-1].",
            attention_scaled_by_dh,
        ),
        Mistake(
            "scores scaled by 1 / sqrt(H * Dh), the model's width, instead of 1 / sqrt(Dh)",
            "scale by the head's dimension: 1 / math.sqrt(q.shape[-1]).",
            attention_scaled_by_sqrt_d,
        ),
        Mistake(
            "the last, shorter block of queries and keys is dropped", LAST_BLOCK, attention_last_block_dropped
        ),
    ],
    "11.merge_softmax_states": [
        Mistake(
            "the parts are added without rescaling to the merged maximum", MERGE_RESCALE, merge_not_rescaled
        ),
        Mistake("acc is rescaled, l is not", MERGE_RESCALE, merge_sum_not_rescaled),
        Mistake("l is rescaled, acc is not", MERGE_RESCALE, merge_acc_not_rescaled),
        Mistake(
            "the two parts' outputs are averaged",
            "each part's output acc / l weighs as much as its share of exp(scores): keep the sums "
            "unnormalised, rescale them to the merged maximum and add them.",
            merge_outputs_averaged,
        ),
        Mistake(
            "acc is divided by l in the merge, and l returned as well",
            "return acc unnormalised: acc / l is taken once, when the output is needed.",
            merge_normalised_acc,
        ),
        Mistake(
            "the first part's maximum is the merged one",
            "take the larger of the two maxima: against the first alone, a part with no visible key "
            "(m = -inf) gives -inf - (-inf), and a second part far above it overflows exp.",
            merge_first_max_as_reference,
        ),
        Mistake(
            "the smaller maximum is the merged one",
            "take the larger: exp(m_part - m) then never exceeds 1, and never overflows.",
            merge_smaller_max_as_reference,
        ),
        Mistake(
            "no maximum: the parts rescaled by exp(m_a) and exp(m_b)",
            "exp(140) overflows float32: rescale against the larger of the two maxima.",
            merge_without_a_max,
        ),
        Mistake(
            "the factor is inverted: exp(m - m_part) instead of exp(m_part - m)",
            "a part summed against a smaller maximum must shrink: exp(m_part - m) is at most 1.",
            merge_correction_inverted,
        ),
    ],
}
