"""Known wrong answers of notebook 08 (the transformer): the judge names them, the tests use them
as mutants.

Instructor-side only (next to the reference, not released). Each is complete, with exactly one
thing wrong. The end-to-end tests paste this file into an answer cell of the notebook, below the
cells of notebooks 03-07 and the reference's own answer (tests/helpers/submissions.py::mutant): so the
mistakes build the notebook's parts by their names (RMSNorm, EfficientSlidingWindowMultiheadAttention,
MoeLayer, get_rotation_matrix, TransformerBlock, RoPE; and Question 5's GroupedQueryWindowAttention,
named only inside the blocks' __init__), which the checks replace with their stand-ins as they do a
student's, and define none of the notebook's names: their helpers start with an
underscore and their answers have names of their own. Loaded on its own (the build, the tests:
the trusted side), the file takes those parts from the reference.

08.smoke_test and 08.training are judged by criteria, not against the reference: no mistake is
catalogued for them (tests/test_transformer.py hands them wrong models instead).

Key: B batch, T sequence length, D hidden size, H heads, Dh = D // H, F d_ff, E experts, K experts
per token, N blocks, C context (max_seq_len), V vocabulary size.
"""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from autograder.core import Mistake

try:  # pasted into the notebook: the parts its cells above define
    RMSNorm, EfficientSlidingWindowMultiheadAttention, MoeLayer, get_rotation_matrix, TransformerBlock, RoPE
except NameError:  # loaded on its own: the same parts, the reference's
    from autograder.reference import namespace as _namespace

    _notebook = _namespace("08_transformer")
    RMSNorm = _notebook["RMSNorm"]
    EfficientSlidingWindowMultiheadAttention = _notebook["EfficientSlidingWindowMultiheadAttention"]
    MoeLayer = _notebook["MoeLayer"]
    get_rotation_matrix = _notebook["get_rotation_matrix"]
    TransformerBlock = _notebook["TransformerBlock"]
    RoPE = _notebook["RoPE"]

# ------------------------------------------------------------------------------ the block


class _Block(nn.Module):
    """The right block; each mistake below changes one thing in it."""

    def __init__(
        self, hidden_size, num_heads, window_size, d_ff, num_experts, n_experts_per_token, rotation_matrix
    ):
        super().__init__()
        self.norm1 = RMSNorm(hidden_size)
        self.attention = EfficientSlidingWindowMultiheadAttention(
            hidden_size, num_heads, window_size, rotation_matrix
        )
        self.norm2 = RMSNorm(hidden_size)
        self.moe = MoeLayer(hidden_size, d_ff, num_experts, n_experts_per_token)

    def forward(self, x):
        h = x + self.attention(self.norm1(x))  # (B, T, D)
        return h + self.moe(self.norm2(h))


class PostNormBlock(_Block):
    """The original transformer's order: each norm after its residual sum."""

    def forward(self, x):
        h = self.norm1(x + self.attention(x))
        return self.norm2(h + self.moe(h))


class NoAttentionResidual(_Block):
    def forward(self, x):
        h = self.attention(self.norm1(x))
        return h + self.moe(self.norm2(h))


class NoMoeResidual(_Block):
    def forward(self, x):
        h = x + self.attention(self.norm1(x))
        return self.moe(self.norm2(h))


class Norm1Twice(_Block):
    """norm2 is built and never used."""

    def forward(self, x):
        h = x + self.attention(self.norm1(x))
        return h + self.moe(self.norm1(h))


class ResidualFromNormalised(_Block):
    """x = self.norm1(x) first: the residual carries the normalised stream."""

    def forward(self, x):
        x = self.norm1(x)
        h = x + self.attention(x)
        h = self.norm2(h)
        return h + self.moe(h)


class ParallelBlock(_Block):
    """GPT-J's parallel block: both sublayers read x, their outputs are added together. The same
    function as h = x + attention(norm1(x)); h + moe(norm2(x)), the MoE reading x instead of h."""

    def forward(self, x):
        return x + self.attention(self.norm1(x)) + self.moe(self.norm2(x))


class MoeFirst(_Block):
    def forward(self, x):
        h = x + self.moe(self.norm2(x))
        return h + self.attention(self.norm1(h))


class HeadsAndWindowSwapped(_Block):
    def __init__(
        self, hidden_size, num_heads, window_size, d_ff, num_experts, n_experts_per_token, rotation_matrix
    ):
        nn.Module.__init__(self)
        self.norm1 = RMSNorm(hidden_size)
        self.attention = EfficientSlidingWindowMultiheadAttention(
            hidden_size, window_size, num_heads, rotation_matrix
        )
        self.norm2 = RMSNorm(hidden_size)
        self.moe = MoeLayer(hidden_size, d_ff, num_experts, n_experts_per_token)


class ExpertCountsSwapped(_Block):
    def __init__(
        self, hidden_size, num_heads, window_size, d_ff, num_experts, n_experts_per_token, rotation_matrix
    ):
        nn.Module.__init__(self)
        self.norm1 = RMSNorm(hidden_size)
        self.attention = EfficientSlidingWindowMultiheadAttention(
            hidden_size, num_heads, window_size, rotation_matrix
        )
        self.norm2 = RMSNorm(hidden_size)
        self.moe = MoeLayer(hidden_size, d_ff, n_experts_per_token, num_experts)


class TableNotPassed(_Block):
    """The attention built without the rotation table: no RoPE at all."""

    def __init__(
        self, hidden_size, num_heads, window_size, d_ff, num_experts, n_experts_per_token, rotation_matrix
    ):
        nn.Module.__init__(self)
        self.norm1 = RMSNorm(hidden_size)
        self.attention = EfficientSlidingWindowMultiheadAttention(hidden_size, num_heads, window_size)
        self.norm2 = RMSNorm(hidden_size)
        self.moe = MoeLayer(hidden_size, d_ff, num_experts, n_experts_per_token)


# ------------------------------------------------------------------------------ the model


class _Model(nn.Module):
    """The right model; each mistake below changes one thing in it."""

    def __init__(
        self,
        vocabulary_size,
        hidden_size,
        num_heads,
        window_size,
        d_ff,
        num_experts,
        n_experts_per_token,
        n_blocks,
        max_seq_len,
    ):
        super().__init__()
        table = get_rotation_matrix(hidden_size // num_heads, max_seq_len, 10000.0)  # (C, Dh // 2)
        self.embedding = nn.Embedding(vocabulary_size, hidden_size)
        self.blocks = nn.ModuleList(
            TransformerBlock(
                hidden_size, num_heads, window_size, d_ff, num_experts, n_experts_per_token, table
            )
            for _ in range(n_blocks)
        )
        self.out = nn.Linear(hidden_size, vocabulary_size)

    def forward(self, tokens):
        h = self.embedding(tokens)  # (B, T, D)
        for block in self.blocks:
            h = block(h)
        return self.out(h)  # (B, T, V)


class HeadTiedToEmbedding(_Model):
    """The logits from the embedding's matrix, h @ embedding.weight.T; self.out is left unused."""

    def forward(self, tokens):
        h = self.embedding(tokens)
        for block in self.blocks:
            h = block(h)
        return h @ self.embedding.weight.T


class EmbeddingScaled(_Model):
    """The embedding multiplied by sqrt(D), as the 2017 transformer does."""

    def forward(self, tokens):
        h = self.embedding(tokens) * math.sqrt(self.embedding.embedding_dim)
        for block in self.blocks:
            h = block(h)
        return self.out(h)


class FirstBlockRepeated(_Model):
    def forward(self, tokens):
        h = self.embedding(tokens)
        for _ in self.blocks:
            h = self.blocks[0](h)
        return self.out(h)


class LastBlockSkipped(_Model):
    def forward(self, tokens):
        h = self.embedding(tokens)
        for i in range(len(self.blocks) - 1):
            h = self.blocks[i](h)
        return self.out(h)


class BlocksReversed(_Model):
    def forward(self, tokens):
        h = self.embedding(tokens)
        for i in reversed(range(len(self.blocks))):
            h = self.blocks[i](h)
        return self.out(h)


class SoftmaxOnLogits(_Model):
    def forward(self, tokens):
        return F.softmax(super().forward(tokens), dim=-1)


class FinalNormAdded(_Model):
    """Llama's and Mistral's last RMSNorm before the head, which the homework's model has not."""

    def __init__(self, vocabulary_size, hidden_size, *args):
        super().__init__(vocabulary_size, hidden_size, *args)
        self.norm = RMSNorm(hidden_size)

    def forward(self, tokens):
        h = self.embedding(tokens)
        for block in self.blocks:
            h = block(h)
        return self.out(self.norm(h))


class TableOfHiddenSize(_Model):
    """get_rotation_matrix(hidden_size, ...): one column per pair of the whole vector, not of a head."""

    def __init__(
        self,
        vocabulary_size,
        hidden_size,
        num_heads,
        window_size,
        d_ff,
        num_experts,
        n_experts_per_token,
        n_blocks,
        max_seq_len,
    ):
        nn.Module.__init__(self)
        table = get_rotation_matrix(hidden_size, max_seq_len, 10000.0)
        self.embedding = nn.Embedding(vocabulary_size, hidden_size)
        self.blocks = nn.ModuleList(
            TransformerBlock(
                hidden_size, num_heads, window_size, d_ff, num_experts, n_experts_per_token, table
            )
            for _ in range(n_blocks)
        )
        self.out = nn.Linear(hidden_size, vocabulary_size)


class ContextOfHiddenSize(_Model):
    """get_rotation_matrix(head_dim, hidden_size, 10000.0): hidden_size rows, not max_seq_len."""

    def __init__(
        self,
        vocabulary_size,
        hidden_size,
        num_heads,
        window_size,
        d_ff,
        num_experts,
        n_experts_per_token,
        n_blocks,
        max_seq_len,
    ):
        nn.Module.__init__(self)
        table = get_rotation_matrix(hidden_size // num_heads, hidden_size, 10000.0)
        self.embedding = nn.Embedding(vocabulary_size, hidden_size)
        self.blocks = nn.ModuleList(
            TransformerBlock(
                hidden_size, num_heads, window_size, d_ff, num_experts, n_experts_per_token, table
            )
            for _ in range(n_blocks)
        )
        self.out = nn.Linear(hidden_size, vocabulary_size)


class TablePerBlock(_Model):
    """get_rotation_matrix called inside the comprehension: one table per block, all equal."""

    def __init__(
        self,
        vocabulary_size,
        hidden_size,
        num_heads,
        window_size,
        d_ff,
        num_experts,
        n_experts_per_token,
        n_blocks,
        max_seq_len,
    ):
        nn.Module.__init__(self)
        self.embedding = nn.Embedding(vocabulary_size, hidden_size)
        self.blocks = nn.ModuleList(
            TransformerBlock(
                hidden_size,
                num_heads,
                window_size,
                d_ff,
                num_experts,
                n_experts_per_token,
                get_rotation_matrix(hidden_size // num_heads, max_seq_len, 10000.0),
            )
            for _ in range(n_blocks)
        )
        self.out = nn.Linear(hidden_size, vocabulary_size)


class BlocksInPlainList(_Model):
    def __init__(
        self,
        vocabulary_size,
        hidden_size,
        num_heads,
        window_size,
        d_ff,
        num_experts,
        n_experts_per_token,
        n_blocks,
        max_seq_len,
    ):
        nn.Module.__init__(self)
        table = get_rotation_matrix(hidden_size // num_heads, max_seq_len, 10000.0)
        self.embedding = nn.Embedding(vocabulary_size, hidden_size)
        self.blocks = [
            TransformerBlock(
                hidden_size, num_heads, window_size, d_ff, num_experts, n_experts_per_token, table
            )
            for _ in range(n_blocks)
        ]
        self.out = nn.Linear(hidden_size, vocabulary_size)


class OneBlockRepeated(_Model):
    """[TransformerBlock(...)] * n_blocks: one module, n_blocks times."""

    def __init__(
        self,
        vocabulary_size,
        hidden_size,
        num_heads,
        window_size,
        d_ff,
        num_experts,
        n_experts_per_token,
        n_blocks,
        max_seq_len,
    ):
        nn.Module.__init__(self)
        table = get_rotation_matrix(hidden_size // num_heads, max_seq_len, 10000.0)
        self.embedding = nn.Embedding(vocabulary_size, hidden_size)
        self.blocks = nn.ModuleList(
            [
                TransformerBlock(
                    hidden_size, num_heads, window_size, d_ff, num_experts, n_experts_per_token, table
                )
            ]
            * n_blocks
        )
        self.out = nn.Linear(hidden_size, vocabulary_size)


# ------------------------------------------------------------------------ parameter count


def _parameters(
    config,
    *,
    attention_biases=True,
    head_bias=True,
    gate_bias=False,
    embedding=True,
    head=True,
    norms=True,
    table=False,
):
    """(total, active) of Transformer(*config), each layer counted or not as the flags say: right with
    the defaults."""
    V, D, H, _, d_ff, E, K, N, C = config  # the window holds no parameter
    expert = 3 * D * d_ff
    shared = 2 * D * norms + 4 * D * D + 4 * D * attention_biases + E * D + E * gate_bias
    ends = V * D * embedding + (D * V + V * head_bias) * head + C * (D // H // 2) * table
    return ends + N * (shared + E * expert), ends + N * (shared + K * expert)


def count_attention_without_biases(*config):
    return _parameters(config, attention_biases=False)


def count_head_without_bias(*config):
    return _parameters(config, head_bias=False)


def count_no_biases(*config):
    return _parameters(config, attention_biases=False, head_bias=False)


def count_gate_with_bias(*config):
    return _parameters(config, gate_bias=True)


def count_total_with_k_experts(*config):
    _, active = _parameters(config)
    return active, active


def count_active_with_all_experts(*config):
    total, _ = _parameters(config)
    return total, total


def count_without_embedding(*config):
    return _parameters(config, embedding=False)


def count_without_head(*config):
    return _parameters(config, head=False)


def count_without_norms(*config):
    return _parameters(config, norms=False)


def count_with_table(*config):
    return _parameters(config, table=True)


# What to change, in words and the notebook's formulas: the code is the hint ladder's to give.
_PRE_NORM = "the block computes h = x + attention(norm1(x)), then returns h + moe(norm2(h))"
_FORWARD = "the model is the embedding, then each block once, in order, then the head"
_TABLE = (
    "one table of head_dim = hidden_size // num_heads features and max_seq_len rows, period 10000, "
    "computed once in __init__ and given to every block"
)
_BLOCKS = (
    "n_blocks blocks, each built by its own call with the model's sizes and the shared table, kept in an "
    "nn.ModuleList"
)

# ------------------------------------------------- Question 5 (added): grouped-query attention


def _windows(x, window_size):
    """(B, H, T, Dh) -> (B, H, T, Dh, W): each position's centred window, zero-padded at the ends."""
    padding = window_size // 2
    return F.pad(x, (0, 0, padding, padding)).unfold(2, window_size, 1)[:, :, : x.shape[2]]


class _Grouped(nn.Module):
    """The right attention, in steps; each mistake below changes one of them."""

    def __init__(self, hidden_size, num_heads, n_kv_heads, window_size, rotation_matrix=None):
        super().__init__()
        self.num_heads, self.n_kv_heads = num_heads, n_kv_heads
        self.head_dim = hidden_size // num_heads
        self.window_size = window_size
        self.wq = nn.Linear(hidden_size, num_heads * self.head_dim)
        self.wk = nn.Linear(hidden_size, n_kv_heads * self.head_dim)
        self.wv = nn.Linear(hidden_size, n_kv_heads * self.head_dim)
        self.wo = nn.Linear(num_heads * self.head_dim, hidden_size)
        self.rope = None if rotation_matrix is None else RoPE(rotation_matrix)

    def _heads(self, x):
        B, T, _ = x.shape
        q = self.wq(x).view(B, T, self.num_heads, self.head_dim).transpose(1, 2)  # (B, H, T, Dh)
        k = self.wk(x).view(B, T, self.n_kv_heads, self.head_dim).transpose(1, 2)  # (B, Hkv, T, Dh)
        v = self.wv(x).view(B, T, self.n_kv_heads, self.head_dim).transpose(1, 2)
        return q, k, v

    def _rotated(self, q, k):
        return (q, k) if self.rope is None else self.rope(q, k)

    def _repeat(self, x):
        return x.repeat_interleave(self.num_heads // self.n_kv_heads, dim=1)  # (B, H, T, Dh)

    def _scale(self):
        return math.sqrt(self.head_dim)

    def _weights(self, scores, x):
        return scores.softmax(dim=-1)

    def forward(self, x):
        B, T, _ = x.shape
        q, k, v = self._heads(x)
        q, k = self._rotated(q, k)
        k, v = self._repeat(k), self._repeat(v)
        W = self.window_size
        scores = torch.einsum("bhtd,bhtdw->bhtw", q, _windows(k, W)) / self._scale()  # (B, H, T, W)
        context = torch.einsum("bhtw,bhtdw->bthd", self._weights(scores, x), _windows(v, W))  # (B, T, H, Dh)
        return self.wo(context.reshape(B, T, -1))


class _TiledHeads(_Grouped):
    """x.repeat(1, n_rep, 1, 1): [k0, k1, k0, k1], query head h reads key/value head h % Hkv."""

    def _repeat(self, x):
        return x.repeat(1, self.num_heads // self.n_kv_heads, 1, 1)


class _FullWidthKeys(_Grouped):
    """wk and wv of the full width, D -> D, as in multi-head attention: nothing is shared."""

    def __init__(self, hidden_size, num_heads, n_kv_heads, window_size, rotation_matrix=None):
        super().__init__(hidden_size, num_heads, n_kv_heads, window_size, rotation_matrix)
        self.wk = nn.Linear(hidden_size, hidden_size)
        self.wv = nn.Linear(hidden_size, hidden_size)
        self.n_kv_heads = num_heads


class _ScaledByKeyWidth(_Grouped):
    """Scores divided by sqrt(n_kv_heads * head_dim), the width of wk's output."""

    def _scale(self):
        return math.sqrt(self.n_kv_heads * self.head_dim)


class _PaddingMasked(_Grouped):
    """The padded keys masked with -inf (notebook 03's window_attention) instead of taking part with
    score 0 as the homework's layer lets them."""

    def _weights(self, scores, x):
        T, W = x.shape[1], self.window_size
        position = torch.arange(T)[:, None] - W // 2 + torch.arange(W)  # (T, W): the key of each slot
        return scores.masked_fill((position < 0) | (position >= T), float("-inf")).softmax(dim=-1)


class _RotatedAfterPadding(_Grouped):
    """Queries and keys rotated after the keys are padded: every key W // 2 positions off."""

    def forward(self, x):
        B, T, _ = x.shape
        q, k, v = self._heads(x)
        k, v = self._repeat(k), self._repeat(v)
        W, padding = self.window_size, self.window_size // 2
        k = F.pad(k, (0, 0, padding, padding))
        q, k = self._rotated(q, k)
        keys = k.unfold(2, W, 1)[:, :, :T]  # (B, H, T, Dh, W)
        scores = torch.einsum("bhtd,bhtdw->bhtw", q, keys) / self._scale()
        context = torch.einsum("bhtw,bhtdw->bthd", scores.softmax(dim=-1), _windows(v, W))
        return self.wo(context.reshape(B, T, -1))


# The blocks name GroupedQueryWindowAttention as a student's does: the check puts its stand-in under
# that name (pasted into Question 5's cell, the name is the notebook's).


class _RightBlock(TransformerBlock):
    def __init__(
        self, hidden_size, num_heads, n_kv_heads, window_size, d_ff, num_experts, n_experts_per_token, table
    ):
        super().__init__(hidden_size, num_heads, window_size, d_ff, num_experts, n_experts_per_token, table)
        self.attention = GroupedQueryWindowAttention(  # noqa: F821
            hidden_size, num_heads, n_kv_heads, window_size, table
        )


class _BesideTheMultiHead(TransformerBlock):
    """The grouped-query attention added under a name of its own: the multi-head one stays, and is the
    one forward calls."""

    def __init__(
        self, hidden_size, num_heads, n_kv_heads, window_size, d_ff, num_experts, n_experts_per_token, table
    ):
        super().__init__(hidden_size, num_heads, window_size, d_ff, num_experts, n_experts_per_token, table)
        self.grouped_attention = GroupedQueryWindowAttention(  # noqa: F821
            hidden_size, num_heads, n_kv_heads, window_size, table
        )


class _KvHeadsNotPassed(TransformerBlock):
    def __init__(
        self, hidden_size, num_heads, n_kv_heads, window_size, d_ff, num_experts, n_experts_per_token, table
    ):
        super().__init__(hidden_size, num_heads, window_size, d_ff, num_experts, n_experts_per_token, table)
        self.attention = GroupedQueryWindowAttention(  # noqa: F821
            hidden_size, num_heads, num_heads, window_size, table
        )


class _GroupedWithoutTable(TransformerBlock):
    def __init__(
        self, hidden_size, num_heads, n_kv_heads, window_size, d_ff, num_experts, n_experts_per_token, table
    ):
        super().__init__(hidden_size, num_heads, window_size, d_ff, num_experts, n_experts_per_token, table)
        self.attention = GroupedQueryWindowAttention(  # noqa: F821
            hidden_size, num_heads, n_kv_heads, window_size
        )


def _costs(D, H, H_kv, N, nbytes, kv_heads_cached=None, keys_and_values=2, kv_width=None, bias=1):
    """gqa_costs, right; or with one thing changed by the arguments after nbytes."""
    Dh = D // H
    kv = H_kv * Dh if kv_width is None else kv_width
    per_layer = (D + bias) * H * Dh + 2 * (D + bias) * kv + (H * Dh + bias) * D
    cached = H_kv if kv_heads_cached is None else kv_heads_cached
    return N * per_layer, keys_and_values * N * cached * Dh * nbytes


def _cache_of_every_head(D, H, H_kv, N, nbytes):
    return _costs(D, H, H_kv, N, nbytes, kv_heads_cached=H)


def _keys_only_cached(D, H, H_kv, N, nbytes):
    return _costs(D, H, H_kv, N, nbytes, keys_and_values=1)


def _kv_projections_full_width(D, H, H_kv, N, nbytes):
    return _costs(D, H, H_kv, N, nbytes, kv_width=D)


def _costs_without_biases(D, H, H_kv, N, nbytes):
    return _costs(D, H, H_kv, N, nbytes, bias=0)


def _cache_of_one_layer(D, H, H_kv, N, nbytes):
    parameters, per_token = _costs(D, H, H_kv, N, nbytes)
    return parameters, per_token // N


def _cache_in_values(D, H, H_kv, N, nbytes):
    parameters, per_token = _costs(D, H, H_kv, N, nbytes)
    return parameters, per_token // nbytes


def _attention_mistake(impl):
    return (impl, _RightBlock, _costs)


def _block_mistake(impl):
    return (_Grouped, impl, _costs)


def _costs_mistake(impl):
    return (_Grouped, _RightBlock, impl)


_REPEAT = "each key/value head serves num_heads // n_kv_heads consecutive query heads"
_GQA_MISTAKES = [
    Mistake(
        "the key/value heads repeated with Tensor.repeat ([k0, k1, k0, k1]): query head h reads key/value "
        "head h % n_kv_heads",
        f"{_REPEAT}: their copies sit next to each other, [k0, k0, k1, k1], so that query head h reads "
        "key/value head h // (num_heads // n_kv_heads), as the model was trained. torch.repeat_interleave "
        "does that; Tensor.repeat tiles the whole set.",
        _attention_mistake(_TiledHeads),
    ),
    Mistake(
        "wk and wv of the full width, hidden_size -> hidden_size",
        f"the point of grouped-query attention is fewer keys and values: wk and wv map hidden_size to "
        f"n_kv_heads * head_dim, and {_REPEAT}.",
        _attention_mistake(_FullWidthKeys),
    ),
    Mistake(
        "the scores divided by sqrt(n_kv_heads * head_dim), the width of wk",
        "each score is the dot product of one query head and one key head, head_dim features: divide by "
        "sqrt(head_dim).",
        _attention_mistake(_ScaledByKeyWidth),
    ),
    Mistake(
        "the padded keys masked out",
        "this layer computes what the homework's EfficientSlidingWindowMultiheadAttention computes: its "
        "windows are zero-padded at the ends, and the padded keys take part in the softmax with score 0.",
        _attention_mistake(_PaddingMasked),
    ),
    Mistake(
        "queries and keys rotated after the keys were padded",
        "padding shifts every key by window_size // 2 positions: rotate queries and keys right after the "
        "split into heads, where each still sits at its own position.",
        _attention_mistake(_RotatedAfterPadding),
    ),
    Mistake(
        "the grouped-query attention added beside the multi-head one",
        "the block's forward calls the attention under the name your TransformerBlock gave it: put the "
        "grouped-query attention under that name, in its place.",
        _block_mistake(_BesideTheMultiHead),
    ),
    Mistake(
        "the grouped-query attention built with num_heads key/value heads",
        "give it the block's n_kv_heads: with num_heads of them it is multi-head attention again.",
        _block_mistake(_KvHeadsNotPassed),
    ),
    Mistake(
        "the grouped-query attention built without the block's rotation_matrix",
        "pass the block's table on, as your TransformerBlock does for its attention: without it nothing "
        "rotates the queries and keys.",
        _block_mistake(_GroupedWithoutTable),
    ),
    Mistake(
        "the cache counted with num_heads heads",
        "the cache holds what wk and wv produce: n_kv_heads heads per layer, not num_heads.",
        _costs_mistake(_cache_of_every_head),
    ),
    Mistake(
        "the cache counted with keys only",
        "each key/value head caches a key and a value per token: twice the keys.",
        _costs_mistake(_keys_only_cached),
    ),
    Mistake(
        "wk and wv counted at the full width, hidden_size -> hidden_size",
        "wk and wv map hidden_size to n_kv_heads * head_dim, with as many biases.",
        _costs_mistake(_kv_projections_full_width),
    ),
    Mistake(
        "the projections' biases left out (Llama's have none; this course's have them)",
        "wq, wk, wv and wo are nn.Linear with their biases, one per output feature.",
        _costs_mistake(_costs_without_biases),
    ),
    Mistake(
        "the cache of one layer",
        "every layer caches its own keys and values: n_layers times one layer's.",
        _costs_mistake(_cache_of_one_layer),
    ),
    Mistake(
        "the cache counted in values, not bytes",
        "multiply by bytes_per_value (2 for bfloat16).",
        _costs_mistake(_cache_in_values),
    ),
]


MISTAKES = {
    "08.block": [
        Mistake(
            "post-norm: each norm applied after its residual sum, as in the 2017 transformer",
            "the homework's block is pre-norm: each sublayer reads a normalised copy and its output is added "
            f"to the stream itself, which is never normalised: {_PRE_NORM}.",
            PostNormBlock,
        ),
        Mistake(
            "no residual around the attention: h = attention(norm1(x))",
            f"add the attention's output to the block's input: {_PRE_NORM}.",
            NoAttentionResidual,
        ),
        Mistake(
            "no residual around the MoE: the block returns moe(norm2(h))",
            f"add the MoE's output to h: {_PRE_NORM}.",
            NoMoeResidual,
        ),
        Mistake(
            "norm1 used before both sublayers (norm2 never used)",
            f"each sublayer has its own norm, with its own weight: the MoE reads norm2 of h. {_PRE_NORM}.",
            Norm1Twice,
        ),
        Mistake(
            "the residual starts from the normalised stream: x = norm1(x), then x + attention(x) (the same "
            "for the MoE)",
            "keep the normalised copy apart and add each sublayer's output to the stream as it was: "
            f"{_PRE_NORM}.",
            ResidualFromNormalised,
        ),
        Mistake(
            "the MoE reads x, the block's input, instead of h: x + attention(norm1(x)) + moe(norm2(x)), "
            "GPT-J's parallel block",
            "the sublayers run one after the other: the MoE reads h, the stream after the attention's "
            f"residual step. {_PRE_NORM}.",
            ParallelBlock,
        ),
        Mistake(
            "the MoE applied before the attention",
            f"attention first, then the MoE: {_PRE_NORM}.",
            MoeFirst,
        ),
        Mistake(
            "num_heads and window_size swapped in the attention's call",
            "EfficientSlidingWindowMultiheadAttention takes (hidden_size, num_heads, window_size, "
            "rotation_matrix), in this order.",
            HeadsAndWindowSwapped,
        ),
        Mistake(
            "num_experts and n_experts_per_token swapped in MoeLayer's call",
            "MoeLayer takes (hidden_size, d_ff, num_experts, n_experts_per_token), in this order.",
            ExpertCountsSwapped,
        ),
        Mistake(
            "the rotation table is not given to the attention (no RoPE: rotation_matrix=None)",
            "pass the block's rotation_matrix on to the attention, which hands it to its RoPE.",
            TableNotPassed,
        ),
    ],
    "08.transformer": [
        Mistake(
            "the head tied to the embedding: the logits are h @ embedding.weight.T, self.out is unused",
            "the homework's model has a head of its own, a separate nn.Linear(hidden_size, vocabulary_size) "
            f"with a bias: {_FORWARD}.",
            HeadTiedToEmbedding,
        ),
        Mistake(
            "the embedding scaled by sqrt(hidden_size)",
            f"the 2017 transformer scales it; Llama, Mistral and the homework do not: {_FORWARD}.",
            EmbeddingScaled,
        ),
        Mistake(
            "the first block applied n_blocks times (self.blocks[0] in the loop)",
            f"each block once, in order, each reading the previous one's output: {_FORWARD}.",
            FirstBlockRepeated,
        ),
        Mistake(
            "the last block skipped",
            f"every block runs, the last one too: {_FORWARD}.",
            LastBlockSkipped,
        ),
        Mistake(
            "the blocks applied in reverse order",
            f"block 0 reads the embedding, the last block feeds the head: {_FORWARD}.",
            BlocksReversed,
        ),
        Mistake(
            "softmax applied to the logits",
            "forward returns the logits themselves: F.cross_entropy and generation apply the (log-)softmax "
            f"they need. {_FORWARD}.",
            SoftmaxOnLogits,
        ),
        Mistake(
            "a final RMSNorm before the head (Llama's and Mistral's, not the homework's)",
            f"the homework's model has none, and the reference's weights hold none: {_FORWARD}.",
            FinalNormAdded,
        ),
        Mistake(
            "get_rotation_matrix called with hidden_size instead of the head size",
            "RoPE rotates each head's queries and keys, pairs of head_dim = hidden_size // num_heads "
            f"features: {_TABLE}.",
            TableOfHiddenSize,
        ),
        Mistake(
            "get_rotation_matrix called with hidden_size rows instead of max_seq_len",
            f"the table has one row per position, up to the context max_seq_len: {_TABLE}.",
            ContextOfHiddenSize,
        ),
        Mistake(
            "get_rotation_matrix called once per block",
            f"the table depends on the configuration alone: compute it once and share it. {_TABLE}.",
            TablePerBlock,
        ),
        Mistake(
            "the blocks kept in a plain Python list",
            "a module registers the modules among its attributes, not those inside a list: "
            "model.parameters() misses the blocks (an optimizer never trains them), state_dict() does not "
            f"save them, .to() does not move them. {_BLOCKS}.",
            BlocksInPlainList,
        ),
        Mistake(
            "one block repeated n_blocks times ([TransformerBlock(...)] * n_blocks)",
            "multiplying a list repeats the same module, so every entry shares one set of weights: build "
            f"each block with its own call, in a list comprehension. {_BLOCKS}.",
            OneBlockRepeated,
        ),
    ],
    "08.parameter_count": [
        Mistake(
            "the attention's biases left out (Llama's attention has none; notebook 03's has them)",
            "qkv_linear and out keep nn.Linear's biases here, 3D and D per block.",
            count_attention_without_biases,
        ),
        Mistake(
            "the head's bias left out",
            "the head is nn.Linear(D, V) with its bias, V more.",
            count_head_without_bias,
        ),
        Mistake(
            "no bias counted anywhere (qkv_linear, out, head)",
            "only the gate and the experts are bias-free.",
            count_no_biases,
        ),
        Mistake(
            "the gate counted with a bias",
            "the gate is nn.Linear(D, E, bias=False), E D.",
            count_gate_with_bias,
        ),
        Mistake(
            "the total counts K experts per block, as the active count does",
            "the model holds all E experts of every block; a token uses K of them.",
            count_total_with_k_experts,
        ),
        Mistake(
            "the active count counts all E experts",
            "a token runs through K experts per block, not E.",
            count_active_with_all_experts,
        ),
        Mistake(
            "the embedding left out",
            "nn.Embedding(V, D) holds V D parameters, counted in both.",
            count_without_embedding,
        ),
        Mistake(
            "the head left out",
            "the head nn.Linear(D, V) holds D V + V parameters, counted in both.",
            count_without_head,
        ),
        Mistake(
            "the norms left out",
            "each block's two RMSNorm hold a weight of D each.",
            count_without_norms,
        ),
        Mistake(
            "the RoPE table counted as parameters",
            "the table is computed from the configuration, not learned: it is no parameter. ",
            count_with_table,
        ),
    ],
    "08.gqa": _GQA_MISTAKES,
}
