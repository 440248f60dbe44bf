"""Known wrong versions of notebook 01's answers: the judge names them, the tests use them as mutants.

Instructor-side only (next to the reference, not released). Each object has exactly one thing
wrong; the classes the encoder layer needs are private copies (underscored names), so that
pasting this file into a notebook never replaces a student's own classes.
"""

import math

import torch
import torch.nn as nn

from autograder.core import Mistake

# ---------------------------------------------------------------------------- softmax


def naive_exp_over_sum(x, dim=-1):
    e = x.exp()
    return e / e.sum(dim=dim, keepdim=True)


def softmax_dim_ignored(x, dim=-1):
    e = (x - x.amax(dim=-1, keepdim=True)).exp()
    return e / e.sum(dim=-1, keepdim=True)


def max_of_whole_tensor(x, dim=-1):
    e = (x - x.max()).exp()
    return e / e.sum(dim=dim, keepdim=True)


# -------------------------------------------------------------------------- attention


def _attention(q, k, v, mask=None, *, scale=None, softmax_dim=-1, masked_value=float("-inf"), invert=False):
    d = q.shape[-1]
    scores = q @ k.transpose(-2, -1) / (math.sqrt(d) if scale is None else scale)
    if mask is not None:
        scores = scores.masked_fill(~mask if invert else mask, masked_value)
    weights = scores.softmax(dim=softmax_dim)
    return weights @ v, weights


def attention_not_scaled(q, k, v, mask=None):
    return _attention(q, k, v, mask, scale=1.0)


def attention_scaled_by_d(q, k, v, mask=None):
    return _attention(q, k, v, mask, scale=float(q.shape[-1]))


def attention_softmax_over_queries(q, k, v, mask=None):
    return _attention(q, k, v, mask, softmax_dim=-2)


def attention_mask_inverted(q, k, v, mask=None):
    return _attention(q, k, v, mask, invert=True)


def attention_masked_to_zero(q, k, v, mask=None):
    return _attention(q, k, v, mask, masked_value=0.0)


# ------------------------------------------------------------------------ causal mask


def mask_with_diagonal(T):
    return torch.triu(torch.ones(T, T, dtype=torch.bool))


def mask_anti_causal(T):
    return torch.tril(torch.ones(T, T, dtype=torch.bool), diagonal=-1)


def mask_of_floats(T):
    return torch.triu(torch.ones(T, T), diagonal=1)


def mask_true_where_allowed(T):
    return torch.tril(torch.ones(T, T, dtype=torch.bool))


# ----------------------------------------------------------------- multi-head attention


class _MHA(nn.Module):
    """The given __init__, and a forward whose one wrong step a subclass chooses."""

    scale_by_hidden_size = False
    softmax_dim = -1
    split = "correct"  # or "head_dim_first", "no_transpose"
    heads_moved_back = True  # (B, H, Tq, Dh) -> (B, Tq, H, Dh) before merging
    project_output = True
    keys_from_x = False
    values_from_x = False
    queries_from_context = False

    def __init__(self, hidden_size, num_heads):
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = hidden_size // num_heads
        self.q_proj = nn.Linear(hidden_size, hidden_size)
        self.k_proj = nn.Linear(hidden_size, hidden_size)
        self.v_proj = nn.Linear(hidden_size, hidden_size)
        self.o_proj = nn.Linear(hidden_size, hidden_size)

    def _heads(self, y):  # (B, T, D) -> (B, H, T, Dh)
        B, T, _ = y.shape
        H, Dh = self.num_heads, self.head_dim
        if self.split == "head_dim_first":
            return y.view(B, T, Dh, H).permute(0, 3, 1, 2)
        if self.split == "no_transpose":
            return y.view(B, H, T, Dh)
        return y.view(B, T, H, Dh).transpose(1, 2)

    def forward(self, x, context=None, mask=None):
        source = x if context is None else context
        query_source = context if self.queries_from_context and context is not None else x
        q = self._heads(self.q_proj(query_source))
        k = self._heads(self.k_proj(x if self.keys_from_x else source))
        v = self._heads(self.v_proj(x if self.values_from_x else source))
        D = self.num_heads * self.head_dim
        scores = q @ k.transpose(-2, -1) / math.sqrt(D if self.scale_by_hidden_size else self.head_dim)
        if mask is not None:
            scores = scores.masked_fill(mask, float("-inf"))
        heads = scores.softmax(dim=self.softmax_dim) @ v  # (B, H, Tq, Dh)
        if self.heads_moved_back:
            heads = heads.transpose(1, 2)  # (B, Tq, H, Dh)
        merged = heads.reshape(q.shape[0], q.shape[2], D)
        return self.o_proj(merged) if self.project_output else merged


class MHAScaledByHiddenSize(_MHA):
    scale_by_hidden_size = True


class MHASoftmaxOverQueries(_MHA):
    softmax_dim = -2


class MHAHeadDimFirst(_MHA):
    split = "head_dim_first"


class MHAViewWithoutTranspose(_MHA):
    split = "no_transpose"


class MHAHeadsNotMovedBack(_MHA):
    heads_moved_back = False


class MHANoOutputProjection(_MHA):
    project_output = False


class MHAKeysValuesFromX(_MHA):
    keys_from_x = True
    values_from_x = True


class MHAKeysFromX(_MHA):
    keys_from_x = True


class MHAValuesFromX(_MHA):
    values_from_x = True


class MHAQueriesFromContext(_MHA):
    queries_from_context = True


# -------------------------------------------------------------------------- LayerNorm


class _LayerNorm(nn.Module):
    def __init__(self, hidden_size, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.bias = nn.Parameter(torch.zeros(hidden_size))

    def _normalise(self, x):
        mean = x.mean(dim=-1, keepdim=True)
        return (x - mean) / torch.sqrt(x.var(dim=-1, unbiased=False, keepdim=True) + self.eps)

    def forward(self, x):
        return self.weight * self._normalise(x) + self.bias


class LNStdPlusEps(_LayerNorm):
    def _normalise(self, x):
        return (x - x.mean(dim=-1, keepdim=True)) / (x.std(dim=-1, unbiased=False, keepdim=True) + self.eps)


class LNUnbiasedVariance(_LayerNorm):
    def _normalise(self, x):
        return (x - x.mean(dim=-1, keepdim=True)) / torch.sqrt(x.var(dim=-1, keepdim=True) + self.eps)


class LNScalarParameters(_LayerNorm):
    def __init__(self, hidden_size, eps=1e-5):
        super().__init__(hidden_size, eps)
        self.weight = nn.Parameter(torch.ones(()))
        self.bias = nn.Parameter(torch.zeros(()))


class LNOverSequence(_LayerNorm):
    def _normalise(self, x):
        mean = x.mean(dim=-2, keepdim=True)
        return (x - mean) / torch.sqrt(x.var(dim=-2, unbiased=False, keepdim=True) + self.eps)


# ---------------------------------------------------------------------- encoder layer


class _EncoderLayer(nn.Module):
    def __init__(self, hidden_size, num_heads, ffn_size, pre_norm=False):
        super().__init__()
        self.attention = _MHA(hidden_size, num_heads)
        self.norm1 = _LayerNorm(hidden_size)
        self.norm2 = _LayerNorm(hidden_size)
        self.ffn = nn.Sequential(
            nn.Linear(hidden_size, ffn_size), nn.ReLU(), nn.Linear(ffn_size, hidden_size)
        )
        self.pre_norm = pre_norm

    def forward(self, x, mask=None):
        if self.pre_norm:
            x = x + self.attention(self.norm1(x), mask=mask)
            return x + self.ffn(self.norm2(x))
        x = self.norm1(x + self.attention(x, mask=mask))
        return self.norm2(x + self.ffn(x))


class EncoderReluAfterSecondLinear(_EncoderLayer):
    def __init__(self, hidden_size, num_heads, ffn_size, pre_norm=False):
        super().__init__(hidden_size, num_heads, ffn_size, pre_norm)
        self.ffn.append(nn.ReLU())


class EncoderAlwaysPostLN(_EncoderLayer):
    def forward(self, x, mask=None):
        x = self.norm1(x + self.attention(x, mask=mask))
        return self.norm2(x + self.ffn(x))


class EncoderNoAttentionResidual(_EncoderLayer):
    def forward(self, x, mask=None):
        if self.pre_norm:
            x = self.attention(self.norm1(x), mask=mask)
            return x + self.ffn(self.norm2(x))
        x = self.norm1(self.attention(x, mask=mask))
        return self.norm2(x + self.ffn(x))


class EncoderPreLNResidualFromNormed(_EncoderLayer):
    """Pre-LN written as `x = norm(x); x = x + sublayer(x)`: the residual carries the normed x."""

    def forward(self, x, mask=None):
        if not self.pre_norm:
            return super().forward(x, mask)
        x = self.norm1(x)
        x = x + self.attention(x, mask=mask)
        x = self.norm2(x)
        return x + self.ffn(x)


MHA_MISTAKES = [
    Mistake(
        "scores divided by sqrt(D) instead of sqrt(Dh)",
        "each head's dot product has Dh = D // H terms: scale by math.sqrt(self.head_dim).",
        MHAScaledByHiddenSize,
    ),
    Mistake(
        "softmax over the queries (dim=-2) instead of over the keys",
        "softmax over the last dimension of the (B, H, Tq, Tk) scores.",
        MHASoftmaxOverQueries,
    ),
    Mistake(
        "heads split as (B, T, Dh, H)",
        "the D features are H consecutive blocks of Dh: view(B, T, H, Dh), then move H forward.",
        MHAHeadDimFirst,
    ),
    Mistake(
        "view(B, H, T, Dh) straight from (B, T, D), without a transpose",
        "that view mixes tokens into heads; view(B, T, H, Dh) first, then .transpose(1, 2).",
        MHAViewWithoutTranspose,
    ),
    Mistake(
        "the heads merged from (B, H, Tq, Dh) without moving H back next to Dh",
        "reshape(B, Tq, D) reads a (B, H, Tq, Dh) tensor in memory order, so each output token gets "
        "rows of other tokens. Move the heads back first, heads.transpose(1, 2) to (B, Tq, H, Dh), or "
        "let the values einsum write 'bhqk,bkhd->bqhd'; then reshape(B, Tq, D).",
        MHAHeadsNotMovedBack,
    ),
    Mistake(
        "the output projection o_proj is missing",
        "merge the heads back to (B, T, D), then apply self.o_proj.",
        MHANoOutputProjection,
    ),
]

MISTAKES = {
    "01.softmax": [
        Mistake(
            "exp(x) / sum(exp(x)) without subtracting the maximum",
            "exp(1000) overflows to inf and inf / inf is NaN. Subtract x.amax(dim, keepdim=True) first: "
            "softmax(x - c) = softmax(x) for any c.",
            naive_exp_over_sum,
        ),
        Mistake(
            "the `dim` argument is ignored (always the last dimension)",
            "reduce (max and sum) over the `dim` you are given, not over -1.",
            softmax_dim_ignored,
        ),
        Mistake(
            "one maximum for the whole tensor instead of one per row",
            "a row whose logits are ~2000 below the global maximum underflows to 0 / 0. Take the max "
            "along `dim` with keepdim=True.",
            max_of_whole_tensor,
        ),
    ],
    "01.attention": [
        Mistake("scores not scaled", "divide q @ k^T by sqrt(d_k), d_k = q.shape[-1].", attention_not_scaled),
        Mistake(
            "scores divided by d_k instead of sqrt(d_k)",
            "the variance of q.k grows like d_k, so its standard deviation like sqrt(d_k): divide by "
            "math.sqrt(d_k).",
            attention_scaled_by_d,
        ),
        Mistake(
            "softmax over the queries (dim=-2) instead of over the keys",
            "each query's weights over the keys sum to 1: softmax(scores, dim=-1).",
            attention_softmax_over_queries,
        ),
        Mistake(
            "the mask convention is inverted",
            "True in the mask means NOT allowed, and masked_fill fills where the mask is True: "
            "masked_fill(mask, float('-inf')). ~mask is what F.scaled_dot_product_attention's attn_mask "
            "takes (it keeps where True), not masked_fill.",
            attention_mask_inverted,
        ),
        Mistake(
            "masked scores set to 0 instead of -inf",
            "a score of 0 still gets weight exp(0) > 0 after the softmax; use float('-inf').",
            attention_masked_to_zero,
        ),
    ],
    "01.causal_mask": [
        Mistake(
            "the diagonal is masked too",
            "a token may attend to itself: torch.triu(..., diagonal=1) masks only j > i.",
            mask_with_diagonal,
        ),
        Mistake(
            "the lower triangle is masked (anti-causal)",
            "mask the future, j > i: that is the part strictly ABOVE the diagonal (triu).",
            mask_anti_causal,
        ),
        Mistake(
            "True marks the allowed positions (the lower triangle and the diagonal)",
            "that is the convention of F.scaled_dot_product_attention's attn_mask; this course's mask is "
            "True where attention is NOT allowed, the future j > i: torch.triu(..., diagonal=1).",
            mask_true_where_allowed,
        ),
        Mistake(
            "a float mask instead of a boolean one",
            "build it with dtype=torch.bool. masked_fill(mask, value) fills where a bool mask is True and "
            "refuses a float one, and F.scaled_dot_product_attention adds a float attn_mask to the scores "
            "instead of masking them (0 and -inf is such an additive mask, not a boolean one).",
            mask_of_floats,
        ),
    ],
    "01.multi_head_attention": MHA_MISTAKES,
    "01.cross_attention": [
        Mistake(
            "keys and values taken from x instead of from the context",
            "with a context, k_proj and v_proj read `context`; only q_proj reads x.",
            MHAKeysValuesFromX,
        ),
        Mistake(
            "keys taken from x instead of from the context",
            "k_proj reads `context`, as v_proj does: the keys must belong to the tokens whose values "
            "are mixed. Only q_proj reads x.",
            MHAKeysFromX,
        ),
        Mistake(
            "values taken from x instead of from the context",
            "v_proj reads `context`, as k_proj does: the weights are over the context's tokens, so the "
            "values mixed must be theirs. Only q_proj reads x.",
            MHAValuesFromX,
        ),
        Mistake(
            "queries taken from the context",
            "queries come from x (the decoder side); the output has x's length Tq.",
            MHAQueriesFromContext,
        ),
        # The answer cell is shared with 01.multi_head_attention: its mistakes break this check too.
        *MHA_MISTAKES,
    ],
    "01.layer_norm": [
        Mistake(
            "scalar gamma and beta instead of one per feature",
            "weight = nn.Parameter(torch.ones(hidden_size)) and "
            "bias = nn.Parameter(torch.zeros(hidden_size)).",
            LNScalarParameters,
        ),
        Mistake(
            "divided by (std + eps) instead of sqrt(var + eps)",
            "eps goes inside the root: (x - mean) / torch.sqrt(var + eps). The two differ a lot when the "
            "variance is close to eps.",
            LNStdPlusEps,
        ),
        Mistake(
            "unbiased variance (divides by D - 1)",
            "LayerNorm uses the biased variance: mean((x - mean) ** 2), or x.var(dim=-1, unbiased=False).",
            LNUnbiasedVariance,
        ),
        Mistake(
            "normalised over the sequence dimension instead of the features",
            "every token is normalised on its own: mean and variance over dim=-1.",
            LNOverSequence,
        ),
    ],
    "01.encoder_layer": [
        Mistake(
            "ReLU after the second linear layer of the feed-forward too",
            "the FFN is Linear -> ReLU -> Linear: no activation on its output, which joins the residual "
            "stream (keep the given self.ffn).",
            EncoderReluAfterSecondLinear,
        ),
        Mistake(
            "pre_norm is ignored (always post-LN)",
            "with pre_norm=True: x = x + attention(norm1(x)); x = x + ffn(norm2(x)).",
            EncoderAlwaysPostLN,
        ),
        Mistake(
            "no residual connection around the attention",
            "add the sublayer's output to its input: x + attention(...).",
            EncoderNoAttentionResidual,
        ),
        Mistake(
            "pre-LN residual adds the normalised x instead of x",
            "in pre-LN the residual path is untouched: x = x + attention(norm1(x)), not "
            "x = norm1(x) followed by x = x + attention(x).",
            EncoderPreLNResidualFromNormed,
        ),
    ],
}
