"""Correct answers to notebook 01 written differently from the reference."""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

# ---------------------------------------------------------------------------- softmax


def softmax_logsumexp(x, dim=-1):
    """exp(s - logsumexp(s)) of the shifted logits s = x - max: the log-domain form."""
    shifted = x - x.amax(dim=dim, keepdim=True)
    return (shifted - torch.logsumexp(shifted, dim=dim, keepdim=True)).exp()


def softmax_movedim(x, dim=-1):
    """Moves `dim` last, uses max() and a reciprocal, and moves it back."""
    y = x.movedim(dim, -1)
    e = torch.exp(y - y.max(dim=-1, keepdim=True).values)
    return (e * (1.0 / e.sum(dim=-1, keepdim=True))).movedim(-1, dim)


# -------------------------------------------------------------------------- attention


def attention_einsum(q, k, v, mask=None):
    """Queries scaled before the product, einsum, where() for the mask."""
    scores = torch.einsum("...qd,...kd->...qk", q / math.sqrt(q.shape[-1]), k)
    if mask is not None:
        scores = torch.where(mask, torch.full_like(scores, float("-inf")), scores)
    weights = F.softmax(scores, dim=-1)
    return torch.einsum("...qk,...kd->...qd", weights, v), weights


def attention_baddbmm_style(q, k, v, mask=None):
    """An additive float mask (0 or -inf) and torch.matmul."""
    scores = torch.matmul(q, k.mT) * (1.0 / math.sqrt(q.shape[-1]))
    if mask is not None:
        scores = scores + torch.zeros(mask.shape).masked_fill(mask, float("-inf"))
    weights = scores.softmax(-1)
    return torch.matmul(weights, v), weights


# ------------------------------------------------------------------------ causal mask


def causal_mask_arange(T):
    positions = torch.arange(T)
    return positions[None, :] > positions[:, None]  # key j after query i


def causal_mask_tril(T):
    return ~torch.ones(T, T, dtype=torch.bool).tril()


def causal_mask_float_then_bool(T):
    """Seed 002's additive mask (-inf above the diagonal), read as a boolean one."""
    return torch.full((T, T), float("-inf")).triu(1).isinf()


# ----------------------------------------------------------------- multi-head attention


class _MHA(nn.Module):
    def __init__(self, hidden_size, num_heads):
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = hidden_size // num_heads
        self.q_proj = nn.Linear(hidden_size, hidden_size)
        self.k_proj = nn.Linear(hidden_size, hidden_size)
        self.v_proj = nn.Linear(hidden_size, hidden_size)
        self.o_proj = nn.Linear(hidden_size, hidden_size)


class MHAHeadLoop(_MHA):
    """One head at a time on feature slices, then concatenate and project."""

    def forward(self, x, context=None, mask=None):
        source = x if context is None else context
        q, k, v = self.q_proj(x), self.k_proj(source), self.v_proj(source)
        heads = []
        for h in range(self.num_heads):
            cols = slice(h * self.head_dim, (h + 1) * self.head_dim)
            scores = q[..., cols] @ k[..., cols].transpose(1, 2) / math.sqrt(self.head_dim)  # (B, Tq, Tk)
            if mask is not None:
                m = mask if mask.dim() == 2 else mask[:, h if mask.shape[1] > 1 else 0]
                scores = scores.masked_fill(m, float("-inf"))
            heads.append(scores.softmax(-1) @ v[..., cols])
        return self.o_proj(torch.cat(heads, dim=-1))


class MHATorchSDPA(_MHA):
    """(B, H, T, Dh) layout with transpose, and PyTorch's fused attention (attn_mask = allowed)."""

    def forward(self, x, context=None, mask=None):
        source = x if context is None else context
        B, Tq, D = x.shape

        def split(y):
            return y.view(B, -1, self.num_heads, self.head_dim).transpose(1, 2)  # (B, H, T, Dh)

        q, k, v = split(self.q_proj(x)), split(self.k_proj(source)), split(self.v_proj(source))
        heads = F.scaled_dot_product_attention(q, k, v, attn_mask=None if mask is None else ~mask)
        return self.o_proj(heads.transpose(1, 2).reshape(B, Tq, D))


class MHAPermuteHeadsFirst(_MHA):
    """Seed 002's layout, with a batch: heads moved forward with permute, einsum on (B, H, T, Dh),
    and moved back before the merge."""

    def forward(self, x, context=None, mask=None):
        source = x if context is None else context
        B, Tq, D = x.shape

        def split(y):
            return y.unflatten(-1, (self.num_heads, self.head_dim)).permute(0, 2, 1, 3)  # (B, H, T, Dh)

        q, k, v = split(self.q_proj(x)), split(self.k_proj(source)), split(self.v_proj(source))
        scores = torch.einsum("bhqd,bhkd->bhqk", q, k) / self.head_dim**0.5  # (B, H, Tq, Tk)
        if mask is not None:
            scores = scores.masked_fill(mask, float("-inf"))
        heads = torch.einsum("bhqk,bhkd->bhqd", scores.softmax(-1), v)  # (B, H, Tq, Dh)
        return self.o_proj(heads.permute(0, 2, 1, 3).reshape(B, Tq, D))


# -------------------------------------------------------------------------- LayerNorm


class _LayerNormParams(nn.Module):
    def __init__(self, hidden_size, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.bias = nn.Parameter(torch.zeros(hidden_size))


class LayerNormVarMean(_LayerNormParams):
    """torch.var_mean with correction=0, rsqrt, addcmul."""

    def forward(self, x):
        var, mean = torch.var_mean(x, dim=-1, correction=0, keepdim=True)
        return torch.addcmul(self.bias, (x - mean) * torch.rsqrt(var + self.eps), self.weight)


class LayerNormMoments(_LayerNormParams):
    """Variance from the first two moments, E[x^2] - E[x]^2, computed in float64."""

    def forward(self, x):
        x64 = x.double()
        mean = x64.mean(-1, keepdim=True)
        var = x64.pow(2).mean(-1, keepdim=True) - mean.pow(2)
        normed = ((x64 - mean) / (var + self.eps).sqrt()).to(x.dtype)
        return normed * self.weight + self.bias


# ---------------------------------------------------------------------- encoder layer


class _EncoderLayer(nn.Module):
    def __init__(self, hidden_size, num_heads, ffn_size, pre_norm=False):
        super().__init__()
        self.attention = MHATorchSDPA(hidden_size, num_heads)
        self.norm1 = LayerNormVarMean(hidden_size)
        self.norm2 = LayerNormVarMean(hidden_size)
        self.ffn = nn.Sequential(
            nn.Linear(hidden_size, ffn_size), nn.ReLU(), nn.Linear(ffn_size, hidden_size)
        )
        self.pre_norm = pre_norm


class EncoderLayerSublayers(_EncoderLayer):
    """A list of (norm, sublayer) pairs and one residual rule for both."""

    def forward(self, x, mask=None):
        pairs = [(self.norm1, lambda y: self.attention(y, mask=mask)), (self.norm2, self.ffn)]
        for norm, sublayer in pairs:
            x = x + sublayer(norm(x)) if self.pre_norm else norm(x + sublayer(x))
        return x


class EncoderLayerExplicit(_EncoderLayer):
    """Each variant spelled out with named intermediates."""

    def forward(self, x, mask=None):
        if not self.pre_norm:
            h = self.norm1(x + self.attention(x, mask=mask))
            return self.norm2(h + self.ffn(h))
        attended = self.attention(self.norm1(x), mask=mask)
        h = x + attended
        return h + self.ffn(self.norm2(h))


ALTERNATIVES = {
    "01.softmax": [softmax_logsumexp, softmax_movedim],
    "01.attention": [attention_einsum, attention_baddbmm_style],
    "01.causal_mask": [causal_mask_arange, causal_mask_tril, causal_mask_float_then_bool],
    "01.multi_head_attention": [MHAHeadLoop, MHATorchSDPA, MHAPermuteHeadsFirst],
    "01.cross_attention": [MHAHeadLoop, MHATorchSDPA, MHAPermuteHeadsFirst],
    "01.layer_norm": [LayerNormVarMean, LayerNormMoments],
    "01.encoder_layer": [EncoderLayerSublayers, EncoderLayerExplicit],
}
