"""Checks of notebook 01, attention from first principles.

Key: B batch, H heads, T sequence length (Tq queries, Tk keys), D hidden size, Dh = D // H
head dim, F feed-forward size. Masks are boolean, True = not allowed. Every case keeps
T <= 16 and D <= 32; every head has Dh >= 2 and H >= 2, so that scaling by sqrt(D), by d or
not at all, and a wrong head split, all change the numbers.
"""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..core import (
    ACCUMULATED_GAP,
    FLOAT32_GAP,
    ROUNDING_GAP,
    Case,
    Check,
    Concern,
    ErrorHint,
    LibraryUse,
    Outputs,
    Property,
    library_calls,
)
from ._toolkit import LIBRARY_SOFTMAX, MULTI_HEAD_ATTENTION_USES, SDPA_USES, SOFTMAX_USES


def _gap(a: torch.Tensor, b: torch.Tensor) -> float:
    """The largest absolute difference: NaN or inf where `a` is not finite."""
    return (a.float() - b.float()).abs().max().item() if a.numel() else 0.0


def _differs(gap: float) -> str:
    if math.isfinite(gap):
        return f"differs by up to {gap:.3g}"
    return "differs, and some of your values are NaN or infinite"


def _sums_off(gap: float) -> str:
    return f"the sums are off by up to {gap:.3g}" if math.isfinite(gap) else "some sums are NaN or infinite"


# --------------------------------------------------------------------------------- softmax

# Seed 002's softmax has no `dim` (it always reduces the last axis): a stable softmax that ignores
# the argument loses only this part.
SOFTMAX_LAST_DIM = "softmax along the last dimension, logits up to 1e3 in size"
SOFTMAX_OTHER_DIM = "softmax along another dimension (the `dim` argument)"


def run_softmax(softmax, case: Case) -> Outputs:
    return {"p": softmax(case.inputs["x"], dim=case.inputs["dim"])}


def _sums_to_one(case: Case, out: Outputs) -> str | None:
    p, x, dim = out["p"], case.inputs["x"], case.inputs["dim"]
    if p.shape != x.shape:
        return None
    gap = _gap(p.sum(dim=dim), torch.ones(()))
    return None if gap <= FLOAT32_GAP else f"slices along dim={dim} should sum to 1, but {_sums_off(gap)}"


def _matches_torch_softmax(case: Case, out: Outputs) -> str | None:
    p, x = out["p"], case.inputs["x"]
    if p.shape != x.shape:
        return None
    gap = _gap(p, torch.softmax(x, dim=case.inputs["dim"]))
    return None if gap <= FLOAT32_GAP else f"torch.softmax {_differs(gap)}"


SOFTMAX = Check(
    name="01.softmax",
    target="softmax",
    run=run_softmax,
    concerns=[Concern(SOFTMAX_LAST_DIM, weight=3), Concern(SOFTMAX_OTHER_DIM, weight=1)],
    outputs={"p": "the result of softmax(x, dim)"},
    forbidden=LIBRARY_SOFTMAX,
    forbidden_uses=SOFTMAX_USES,
    properties=[
        Property("slices along dim sum to 1", _sums_to_one),
        Property("matches torch.softmax", _matches_torch_softmax),
    ],
    error_hints=[
        ErrorHint(
            "unexpected keyword argument 'dim'",
            "a softmax without the `dim` argument: the signature is softmax(x, dim=-1).",
        ),
    ],
    hints=[
        "What does torch.tensor(1000.0).exp() give in float32, and what is inf / inf? Which number can "
        "you subtract from every logit of a slice without changing its softmax?",
        "Test yourself: softmax(torch.tensor([[1000.0, 999.0, -1000.0]])) should be about "
        "[[0.731, 0.269, 0.0]], with no NaN; and for x = torch.randn(3, 4), softmax(x, dim=0) should "
        "equal torch.softmax(x, dim=0).",
        "softmax(x)_i = e^(x_i - m) / sum_j e^(x_j - m), with m the maximum of the slice along `dim` "
        "(one maximum per slice, not one for the whole tensor): the largest exponent is e^0 = 1, and "
        "the sum is at least 1.",
        "x.amax(dim=dim, keepdim=True) is the maximum of each slice, its reduced dimension kept with size 1 "
        "so that x minus it broadcasts; sum the exponentials along the same dim, with keepdim=True too.",
    ],
)

# ------------------------------------------------------------------------------ attention


def run_attention(attention, case: Case) -> Outputs:
    i = case.inputs
    output, weights = attention(i["q"], i["k"], i["v"], mask=i["mask"])
    return {"output": output, "weights": weights}


def _matches_torch_sdpa(case: Case, out: Outputs) -> str | None:
    i = case.inputs
    mask = None if i["mask"] is None else ~i["mask"]  # torch's bool attn_mask: True = allowed
    want = F.scaled_dot_product_attention(i["q"], i["k"], i["v"], attn_mask=mask)
    got = out["output"]
    if got.shape != want.shape:
        return None
    gap = _gap(got, want)
    return None if gap <= ACCUMULATED_GAP else f"F.scaled_dot_product_attention {_differs(gap)}"


def _weights_are_distributions(case: Case, out: Outputs) -> str | None:
    w = out["weights"]
    gap = _gap(w.sum(-1), torch.ones(()))
    return (
        None
        if gap <= FLOAT32_GAP
        else f"each query's weights over the keys should sum to 1, but {_sums_off(gap)}"
    )


def _masked_get_zero(case: Case, out: Outputs) -> str | None:
    mask, w = case.inputs["mask"], out["weights"]
    if mask is None:
        return None
    leak = w.masked_fill(~mask.expand_as(w), 0).abs().max().item()
    if leak == 0:
        return None
    weight = f"weight up to {leak:.3g}" if math.isfinite(leak) else "NaN or infinite weights"
    return f"masked positions (mask True) get {weight}; they must get 0"


# PyTorch's multi-head attention, the answer to Questions 4 and 5; nn.MultiheadAttention calls these.
LIBRARY_MULTI_HEAD_ATTENTION = library_calls(
    "torch.nn.functional.multi_head_attention_forward", "torch._native_multi_head_attention"
)


ATTENTION = Check(
    name="01.attention",
    target="scaled_dot_product_attention",
    run=run_attention,
    forbidden=(
        *library_calls(
            "torch.nn.functional.scaled_dot_product_attention",
            "torch._scaled_dot_product_attention_math",
            "torch._scaled_dot_product_flash_attention_for_cpu",
        ),
        *LIBRARY_MULTI_HEAD_ATTENTION,  # attention itself, with projections that can be the identity
    ),
    forbidden_uses=(*SDPA_USES, *MULTI_HEAD_ATTENTION_USES),
    properties=[
        Property("matches F.scaled_dot_product_attention", _matches_torch_sdpa),
        Property("each query's weights sum to 1", _weights_are_distributions),
        Property("masked positions get zero weight", _masked_get_zero),
    ],
    outputs={"output": "the attention output", "weights": "the tensor of attention weights"},
    error_hints=[
        ErrorHint(
            "cannot unpack non-iterable NoneType",
            "a function that returns nothing: end it with `return output, weights`.",
        ),
        ErrorHint(
            "values to unpack", "a result that is not a pair: return (output, weights), in that order."
        ),
        ErrorHint(
            "masked_fill() received an invalid combination",
            "masked_fill takes the mask, then a number: scores.masked_fill(mask, float('-inf')) "
            "(the string '-inf' is not a number).",
        ),
        ErrorHint(
            "must match the size of tensor",
            "dimensions that do not line up in q @ k^T: k.transpose(-2, -1) swaps the last two "
            "dimensions, (..., Tk, d) -> (..., d, Tk); k.T reverses all of them.",
        ),
    ],
    hints=[
        "For one query, which numbers say how much it reads from each key, and what must they add up "
        "to? In the (..., Tq, Tk) scores, which dimension runs over the keys?",
        "Test yourself against PyTorch: with q, k, v = torch.randn(3, 2, 5, 8) and "
        "m = torch.ones(5, 5, dtype=torch.bool).triu(1), your output should match "
        "F.scaled_dot_product_attention(q, k, v, attn_mask=~m) "
        "(torch.allclose(..., atol=1e-6)), and weights.sum(-1) should be all ones.",
        "weights = softmax(q k^T / sqrt(d)) over the keys, d = q.shape[-1]; a masked score (mask True) is "
        "-inf before the softmax, so its weight is e^-inf = 0; output = weights v.",
        "q @ k.transpose(-2, -1) is (..., Tq, Tk); scores.masked_fill(mask, float('-inf')) fills where the "
        "mask is True; softmax over dim=-1; return (weights @ v, weights).",
    ],
)

# ---------------------------------------------------------------------------- causal mask

# Seed 002 builds its causal mask as floats added to the scores (0, and -inf above the diagonal):
# a mask with the right positions in another dtype loses only this part.
BOOL_MASK = "a torch.bool tensor"


def run_causal_mask(causal_mask, case: Case) -> Outputs:
    mask = torch.as_tensor(causal_mask(case.inputs["T"]))
    if (
        "qkv" not in case.inputs
    ):  # the dtype case: judged on the whole mask, so that it pays a right mask only
        return {"mask_dtype": mask}
    masked = mask != 0  # the positions masked, whatever the dtype: a float mask is graded apart
    return {
        "mask": masked,
        "output": F.scaled_dot_product_attention(*case.inputs["qkv"], attn_mask=~masked),  # True = allowed
        "perturbed_output": F.scaled_dot_product_attention(*case.inputs["qkv_perturbed"], attn_mask=~masked),
    }


def _past_does_not_move(case: Case, out: Outputs) -> str | None:
    if "output" not in out:
        return None
    t, a, b = case.inputs["t"], out["output"], out["perturbed_output"]
    if a.shape != b.shape or a.shape[-2] != case.inputs["T"]:
        return None
    moved = ((a - b).abs().amax(dim=(0, 1, 3)) > ROUNDING_GAP)[: t + 1].nonzero()
    if not len(moved):
        return None
    first = int(moved[0])
    return (
        f"changing the tokens after position {t} moved the output at position {first} "
        f"(by {_gap(a[..., first, :], b[..., first, :]):.3g}): it sees the future"
    )


CAUSAL_MASK = Check(
    name="01.causal_mask",
    target="causal_mask",
    run=run_causal_mask,
    concerns=[Concern("the positions masked", weight=3), Concern(BOOL_MASK, weight=1)],
    outputs={
        "mask": "the mask",
        "mask_dtype": "the mask",
        "output": "the attention output under your mask",
        "perturbed_output": "the attention output under your mask once the later tokens changed",
    },
    properties=[Property("earlier outputs do not move when later tokens change", _past_does_not_move)],
    error_hints=[
        ErrorHint(
            "match the broadcast shape",
            "a mask of the wrong shape: causal_mask(T) is (T, T), one row per query, one column per key.",
        ),
        ErrorHint(
            "Could not infer dtype of NoneType", "a function that returns nothing: end it with `return mask`."
        ),
    ],
    hints=[
        "Query i may read keys 0 .. i. Which entries (i, j) of a T x T matrix are the future of i? "
        "Should the diagonal, a token reading itself, be masked?",
        "Test yourself: print(causal_mask(4)) should show the first row [False, True, True, True] and "
        "the last row all False, and causal_mask(4).dtype should be torch.bool.",
        "mask[i, j] = (j > i): True strictly above the diagonal, False on it and below.",
        "torch.triu(matrix, diagonal=1) keeps what lies strictly above the diagonal; give it a (T, T) "
        "matrix of ones created with dtype=torch.bool.",
    ],
)

# ------------------------------------------------------------------- multi-head attention


def _build_mha(mha_class, case: Case):
    i = case.inputs
    module = mha_class(i["hidden_size"], i["num_heads"])
    with torch.no_grad():
        for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
            getattr(module, name).weight.copy_(i[f"{name}.weight"])
            getattr(module, name).bias.copy_(i[f"{name}.bias"])
    return module


def run_mha(mha_class, case: Case) -> Outputs:
    i = case.inputs
    module = _build_mha(mha_class, case)
    out = {"output": module(i["x"], context=i["context"], mask=i["mask"])}
    if "x_perturbed" in i:
        out["perturbed_output"] = module(i["x_perturbed"], context=i["context"], mask=i["mask"])
    return out


def _mha_past_does_not_move(case: Case, out: Outputs) -> str | None:
    if "x_perturbed" not in case.inputs or "perturbed_output" not in out:
        return None
    t, a, b = case.inputs["t"], out["output"], out["perturbed_output"]
    if a.shape != case.inputs["x"].shape or b.shape != a.shape:
        return None
    moved = ((a - b).abs().amax(dim=(0, 2)) > FLOAT32_GAP)[: t + 1].nonzero()
    if not len(moved):
        return None
    first = int(moved[0])
    return (
        f"changing the tokens after position {t} moved the output at position {first} "
        f"(by {_gap(a[:, first], b[:, first]):.3g}) under the causal mask"
    )


def _output_has_query_length(case: Case, out: Outputs) -> str | None:
    got, x = out["output"], case.inputs["x"]
    if got.shape == x.shape:
        return None
    return f"the output should have one vector per query, shape {tuple(x.shape)}; got {tuple(got.shape)}"


MHA_ERRORS = [
    ErrorHint(
        "einsum()",
        "an einsum whose letters do not fit its operands: a letter names one dimension and must have the "
        "same size wherever it appears, e.g. 'bqhd,bkhd->bhqk' for the scores of (B, T, H, Dh) queries and "
        "keys, 'bhqk,bkhd->bqhd' for the values.",
    ),
    ErrorHint(
        "view size is not compatible",
        "view() on a tensor that transpose or permute left non-contiguous: use .reshape(...) instead.",
    ),
    ErrorHint(
        "mat1 and mat2 shapes cannot be multiplied",
        "o_proj applied to unmerged heads: it takes vectors of size D, so reshape the heads to (B, Tq, D) "
        "first.",
    ),
    ErrorHint(
        "must match the size of tensor",
        "dimensions that do not line up: the scores must be (B, H, Tq, Tk) so that the mask, broadcastable "
        "to (B, H, Tq, Tk), fits them, and the heads are merged back to (B, Tq, D) before o_proj.",
    ),
    ErrorHint(
        "shape '[",
        "a view or reshape whose sizes do not multiply to the tensor's size: (B, T, D) -> (B, T, H, Dh) "
        "with H = self.num_heads and Dh = self.head_dim.",
    ),
]

# Cross-attention's shape errors come first: with a context, x (length Tq) and the context (length
# Tk) differ, and a length that meets the other one is most often keys or values read from x.
FROM_CONTEXT = "k_proj and v_proj read `context` (length Tk), only q_proj reads x (length Tq)"
CROSS_ERRORS = [
    ErrorHint(
        "does not broadcast with previously seen size",
        f"keys and values of different lengths, or the lengths Tq and Tk under one einsum letter: "
        f"{FROM_CONTEXT}; give each length its own letter, 'bqhd,bkhd->bhqk', then 'bhqk,bkhd->bqhd'.",
    ),
    ErrorHint(
        "Expected size for first two dimensions of batch2 tensor",
        f"weights over Tk keys multiplied by values of another length: {FROM_CONTEXT}.",
    ),
    ErrorHint(
        "must match the size of tensor",
        f"a length Tq met a length Tk: the keys, the values and the padding mask (B, 1, 1, Tk) all have the "
        f"context's length; {FROM_CONTEXT}.",
    ),
    ErrorHint(
        "shape '[",
        f"a view with the wrong length: {FROM_CONTEXT}; view keys and values with Tk = context.shape[1], "
        f"queries with Tq = x.shape[1].",
    ),
    *MHA_ERRORS,
]

MHA_OUTPUTS = {
    "output": "the layer's output",
    "perturbed_output": "the layer's output once the later tokens changed",
}

MULTI_HEAD_ATTENTION = Check(
    name="01.multi_head_attention",
    target="MultiHeadAttention",
    run=run_mha,
    outputs=MHA_OUTPUTS,
    forbidden=LIBRARY_MULTI_HEAD_ATTENTION,
    forbidden_uses=MULTI_HEAD_ATTENTION_USES,
    properties=[
        Property(
            "earlier outputs do not move when later tokens change (causal mask)", _mha_past_does_not_move
        ),
        Property("one output vector per query", _output_has_query_length),
    ],
    error_hints=MHA_ERRORS,
    hints=[
        "Which features of q, k and v belong to head h? After the split, which dimension of the scores "
        "holds the keys (the softmax runs over it), and in which order must the heads sit when you "
        "concatenate them for o_proj?",
        "Test yourself against a loop over heads: for each h, take columns h*Dh:(h+1)*Dh of q_proj(x), "
        "k_proj(x) and v_proj(x) and keep the output of your scaled_dot_product_attention on them; "
        "torch.cat the H outputs along the last dimension and apply o_proj: the result must equal your "
        "forward (torch.allclose).",
        "head_h = softmax(q_h k_h^T / sqrt(Dh)) v_h with q_h = q[..., h*Dh:(h+1)*Dh] (and k_h, v_h alike); "
        "output = o_proj(concat(head_1, ..., head_H)), the heads side by side along the features of each "
        "token.",
        "q_proj(x).view(B, Tq, H, Dh) splits the heads; torch.einsum('bqhd,bkhd->bhqk', q, k) gives every "
        "head's scores; torch.einsum('bhqk,bkhd->bqhd', weights, v) is (B, Tq, H, Dh), which "
        "reshape(B, Tq, D) merges. A (B, H, Tq, Dh) result needs .transpose(1, 2) before that reshape.",
    ],
)

CROSS_ATTENTION = Check(
    name="01.cross_attention",
    target="MultiHeadAttention",
    answer="multi_head_attention",
    run=run_mha,
    outputs=MHA_OUTPUTS,
    forbidden=LIBRARY_MULTI_HEAD_ATTENTION,
    forbidden_uses=MULTI_HEAD_ATTENTION_USES,
    properties=[Property("one output vector per query", _output_has_query_length)],
    error_hints=CROSS_ERRORS,
    hints=[
        "In cross-attention, which sequence asks (its length is the output's length) and which one is read? "
        "Which of q_proj, k_proj and v_proj apply to x, and which to context?",
        "Test yourself: with x of shape (2, 3, 16) and c of shape (2, 7, 16), mha(x, context=c) must have "
        "shape (2, 3, 16); mha(x, context=x) must equal mha(x); and changing c must change the output.",
        "q = q_proj(x), shape (B, Tq, D); k = k_proj(context) and v = v_proj(context), shape (B, Tk, D); "
        "the scores are (B, H, Tq, Tk), the output (B, Tq, D).",
        "Keys and values come from context when it is given, else from x; their length Tk is that "
        "tensor's dimension 1, which may differ from Tq: view keys and values as (B, Tk, H, Dh) and "
        "queries as (B, Tq, H, Dh).",
    ],
)

# ------------------------------------------------------------------------------ LayerNorm


def run_layer_norm(layer_norm_class, case: Case) -> Outputs:
    i = case.inputs
    D = i["x"].shape[-1]
    module = layer_norm_class(D, eps=i["eps"])
    out = {"weight": module.weight.detach().clone(), "bias": module.bias.detach().clone()}
    with torch.no_grad():  # random per-feature parameters, where the shapes allow them
        if module.weight.shape == (D,):
            module.weight.copy_(i["weight"])
        if module.bias.shape == (D,):
            module.bias.copy_(i["bias"])
    out["output"] = module(i["x"])
    return out


def _matches_torch_layer_norm(case: Case, out: Outputs) -> str | None:
    i = case.inputs
    want = F.layer_norm(i["x"], (i["x"].shape[-1],), i["weight"], i["bias"], i["eps"])
    if out["output"].shape != want.shape:
        return None
    gap = _gap(out["output"], want)
    return None if gap <= ACCUMULATED_GAP else f"torch.nn.functional.layer_norm {_differs(gap)}"


def _layer_norm_inputs() -> tuple:
    return torch.linspace(-2.0, 2.0, 12).reshape(3, 4), (4,)


def _native_layer_norm_inputs() -> tuple:  # weight, bias and eps are the operator's own arguments
    return torch.linspace(-2.0, 2.0, 12).reshape(3, 4), [4], None, None, 1e-5


NO_PARAMETER = ErrorHint(
    "has no attribute 'weight'",
    "LayerNorm needs nn.Parameter attributes `weight` (ones, shape (D,)) and `bias` (zeros, shape (D,)).",
)

LAYER_NORM = Check(
    name="01.layer_norm",
    target="LayerNorm",
    run=run_layer_norm,
    forbidden=library_calls(  # nn.LayerNorm calls the first
        "torch.nn.functional.layer_norm", "torch.layer_norm", "torch.native_layer_norm"
    ),
    forbidden_uses=(
        LibraryUse("torch.nn.functional.layer_norm", _layer_norm_inputs),
        LibraryUse("torch.native_layer_norm", _native_layer_norm_inputs),
    ),
    outputs={
        "weight": "the weight (gamma) that __init__ creates",
        "bias": "the bias (beta) that __init__ creates",
        "output": "the layer's output",
    },
    properties=[Property("matches torch.nn.functional.layer_norm", _matches_torch_layer_norm)],
    error_hints=[
        NO_PARAMETER,
        ErrorHint("has no attribute 'bias'", NO_PARAMETER.advice),
        ErrorHint("has no attribute 'eps'", "eps is not stored: keep it in __init__, self.eps = eps."),
    ],
    hints=[
        "Over which dimension are the mean and the variance taken: the batch, the sequence, or the D "
        "features of one token? Where does eps go, and what shape do the learned scale and shift have?",
        "Test yourself where eps matters: x = torch.randn(2, 4, 32) * 1e-3 (variance ~1e-6, below "
        "eps = 1e-5); LayerNorm(32)(x) must equal nn.LayerNorm(32)(x) (torch.allclose(..., atol=1e-5)). "
        "Dividing by (std + eps) gives values about three times too large there.",
        "mu = mean(x), var = mean((x - mu)^2) over the last dimension (divided by D, not D - 1); "
        "y = weight * (x - mu) / sqrt(var + eps) + bias, with weight and bias vectors of size D.",
        "x.mean(dim=-1, keepdim=True) and x.var(dim=-1, keepdim=True, unbiased=False) keep the reduced "
        "dimension so they broadcast over D; in __init__, "
        "self.weight = nn.Parameter(torch.ones(hidden_size)) and "
        "self.bias = nn.Parameter(torch.zeros(hidden_size)).",
    ],
)

# -------------------------------------------------------------------------- encoder layer


# Seed 002's encoder layer is post-LN only; the pre-LN variant is the course's addition, graded apart.
POST_LN, PRE_LN = "post-LN (pre_norm=False)", "pre-LN (pre_norm=True)"


class _LibraryAttention(nn.Module):
    """PyTorch's multi-head attention behind the parameter names of the given
    MultiHeadAttention.__init__; the mask is the course's (True = not allowed, broadcastable to
    (B, H, Tq, Tk)). It answers no question: 01.multi_head_attention forbids the function it calls.
    """

    def __init__(self, hidden_size: int, num_heads: int):
        super().__init__()
        self.num_heads = num_heads
        self.q_proj, self.k_proj, self.v_proj, self.o_proj = (
            nn.Linear(hidden_size, hidden_size) for _ in "qkvo"
        )

    def forward(self, x, context=None, mask=None):
        source = (x if context is None else context).transpose(0, 1)  # (Tk, B, D): PyTorch's layout
        B, Tq, D = x.shape
        if mask is not None:  # one (Tq, Tk) mask per batch element and head, B * H of them
            mask = mask.expand(B, self.num_heads, Tq, len(source)).reshape(B * self.num_heads, Tq, -1)
        out, _ = F.multi_head_attention_forward(
            query=x.transpose(0, 1),
            key=source,
            value=source,
            embed_dim_to_check=D,
            num_heads=self.num_heads,
            in_proj_weight=None,
            in_proj_bias=torch.cat([self.q_proj.bias, self.k_proj.bias, self.v_proj.bias]),
            bias_k=None,
            bias_v=None,
            add_zero_attn=False,
            dropout_p=0.0,
            out_proj_weight=self.o_proj.weight,
            out_proj_bias=self.o_proj.bias,
            need_weights=False,
            attn_mask=mask,
            use_separate_proj_weight=True,
            q_proj_weight=self.q_proj.weight,
            k_proj_weight=self.k_proj.weight,
            v_proj_weight=self.v_proj.weight,
        )
        return out.transpose(0, 1)


def run_encoder(encoder_class, case: Case) -> Outputs:
    i = case.inputs
    layer = encoder_class(i["hidden_size"], i["num_heads"], i["ffn_size"], pre_norm=i["pre_norm"])
    # This question grades forward's wiring alone: PyTorch's sublayers replace the student's
    # MultiHeadAttention and LayerNorm, whose bugs cost points in their own questions only.
    layer.attention = _LibraryAttention(i["hidden_size"], i["num_heads"])
    layer.norm1, layer.norm2 = nn.LayerNorm(i["hidden_size"]), nn.LayerNorm(i["hidden_size"])
    layer.load_state_dict(i["state_dict"])
    return {"pre_ln" if i["pre_norm"] else "post_ln": layer(i["x"], mask=i["mask"])}


def _post_ln_is_normalised(case: Case, out: Outputs) -> str | None:
    """post-LN ends with norm2: undoing its affine map must give zero mean per token."""
    y, state = out.get("post_ln"), case.inputs["state_dict"]
    if y is None or y.shape != case.inputs["x"].shape:
        return None
    normed = (y - state["norm2.bias"]) / state["norm2.weight"]
    gap = normed.mean(-1).abs().max().item()
    if gap <= ACCUMULATED_GAP:
        return None
    mean = f"up to {gap:.3g}" if math.isfinite(gap) else "NaN or infinite"
    return f"post-LN must end with norm2, but the output's mean per token is {mean}"


# Forbids no call: its run puts PyTorch's attention and LayerNorm in place of the student's, and
# PyTorch's nn.TransformerEncoderLayer cannot hold the sublayers the given __init__ creates.
ENCODER_LAYER = Check(
    name="01.encoder_layer",
    target="EncoderLayer",
    run=run_encoder,
    concerns=[Concern(POST_LN), Concern(PRE_LN)],
    outputs={"post_ln": "the post-LN layer's output", "pre_ln": "the pre-LN layer's output"},
    properties=[Property("the post-LN output is the output of norm2", _post_ln_is_normalised)],
    error_hints=[
        ErrorHint(
            "Error(s) in loading state_dict",
            "an __init__ that is not the given one: keep it (attention, norm1, norm2, and ffn with its two "
            "Linear layers).",
        ),
        ErrorHint(
            "got an unexpected keyword argument 'mask'",
            "a sublayer called with a mask it does not take: pass the mask to the attention only, "
            "self.attention(..., mask=mask).",
        ),
    ],
    hints=[
        "In each variant, what does the residual connection add the sublayer's output to: the raw x, or a "
        "normalised copy of it? Does a LayerNorm come before the sublayer or after the sum?",
        "Test yourself: zero the weight and bias of layer.attention.o_proj and of layer.ffn[2] (under "
        "torch.no_grad()), so that both sublayers output 0. Then the pre-LN layer must return x unchanged, "
        "and the post-LN layer must return layer.norm2(layer.norm1(x)).",
        "post-LN: h = norm1(x + attention(x)), y = norm2(h + ffn(h)). "
        "pre-LN: h = x + attention(norm1(x)), y = h + ffn(norm2(h)).",
        "Branch on self.pre_norm and return from each branch; the mask goes to the attention only, "
        "self.attention(..., mask=mask), and self.ffn takes the tensor alone.",
    ],
)

CHECKS = [SOFTMAX, ATTENTION, CAUSAL_MASK, MULTI_HEAD_ATTENTION, CROSS_ATTENTION, LAYER_NORM, ENCODER_LAYER]
