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

from ..core import Case, Check, ErrorHint, Outputs, Property, library_calls


def _int(g: torch.Generator, low: int, high: int) -> int:
    """A random integer in [low, high]."""
    return int(torch.randint(low, high + 1, (), generator=g))


def _random_mask(g: torch.Generator, shape: tuple[int, ...]) -> torch.Tensor:
    """A random boolean mask (True = not allowed) in which every row keeps one allowed key."""
    mask = torch.rand(shape, generator=g) < 0.4
    keep = torch.randint(0, shape[-1], shape[:-1], generator=g)
    return mask.scatter(-1, keep.unsqueeze(-1), False)


def _gap(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a.float() - b.float()).abs().max().item() if a.numel() else 0.0


# --------------------------------------------------------------------------------- softmax


def softmax_cases(g: torch.Generator, hidden: bool) -> list[Case]:
    # Logits of +-1e3: exp overflows (naive) and a row ~2e3 below the top underflows (one global max).
    huge = torch.stack(
        [
            torch.tensor([1000.0, 999.0, 998.5, -1000.0]) + torch.rand(4, generator=g),
            torch.tensor([-1000.0, -1001.0, -999.5, -1002.0]) - torch.rand(4, generator=g),
            torch.randn(4, generator=g),
        ]
    )
    cases = [
        Case("x of shape (2, 5), |x| ~ 3, dim=-1", {"x": torch.randn(2, 5, generator=g) * 3, "dim": -1}),
        Case("logits of +1e3 and -1e3, shape (3, 4), dim=-1", {"x": huge, "dim": -1}),
        Case("x of shape (2, 3, 4), dim=1", {"x": torch.randn(2, 3, 4, generator=g), "dim": 1}),
        Case("x of shape (4, 3), dim=0, logits of +-1e3", {"x": huge.T.contiguous(), "dim": 0}),
    ]
    if hidden:
        for _ in range(3):
            shape = tuple(_int(g, 2, 6) for _ in range(_int(g, 1, 3)))
            dim = _int(g, -len(shape), len(shape) - 1)
            scale = float(10 ** torch.empty(()).uniform_(-1, 3, generator=g))
            x = torch.randn(shape, generator=g) * scale
            cases.append(Case(f"x of shape {shape}, |x| ~ {scale:.3g}, dim={dim}", {"x": x, "dim": dim}))
        x = torch.randn(3, 6, generator=g) * 1000
        cases.append(Case("x of shape (3, 6), |x| ~ 1e3, dim=-1", {"x": x, "dim": -1}))
    return cases


def run_softmax(softmax, case: Case) -> Outputs:
    return {"p": softmax(case.inputs["x"], dim=case.inputs["dim"])}


def _sums_to_one(case: Case, out: Outputs) -> str | None:
    p, x = out["p"], case.inputs["x"]
    if p.shape != x.shape:
        return None
    gap = (p.sum(dim=case.inputs["dim"]) - 1).abs().nan_to_num(nan=float("inf")).max().item()
    return None if gap <= 1e-5 else f"slices along dim={case.inputs['dim']} should sum to 1; off by {gap:.3g}"


def _matches_torch_softmax(case: Case, out: Outputs) -> str | None:
    p, x = out["p"], case.inputs["x"]
    if p.shape != x.shape:
        return None
    gap = (p - torch.softmax(x, dim=case.inputs["dim"])).abs().nan_to_num(nan=float("inf")).max().item()
    return None if gap <= 1e-5 else f"torch.softmax differs by up to {gap:.3g}"


SOFTMAX = Check(
    name="01.softmax",
    target="softmax",
    cases=softmax_cases,
    run=run_softmax,
    # nn.Softmax, nn.Softmin and nn.LogSoftmax call these; log_softmax(x).exp() is the softmax too.
    forbidden=library_calls(
        "torch.softmax",
        "torch.Tensor.softmax",
        "torch.nn.functional.softmax",
        "torch.special.softmax",
        "torch._softmax",
        "torch._safe_softmax",
        "torch.nn.functional.softmin",
        "torch.log_softmax",
        "torch.Tensor.log_softmax",
        "torch.nn.functional.log_softmax",
        "torch.special.log_softmax",
        "torch._log_softmax",
    ),
    properties=[
        Property("slices along dim sum to 1", _sums_to_one),
        Property("matches torch.softmax", _matches_torch_softmax),
    ],
    error_hints=[
        ErrorHint("unexpected keyword argument 'dim'", "the signature is softmax(x, dim=-1)."),
    ],
    hints=[
        "softmax(x - c) = softmax(x) for any constant c: pick a c that keeps exp from overflowing.",
        "c = the maximum of each slice along `dim`: then the largest exponent is e^0 = 1 "
        "and the sum is >= 1.",
        "x.amax(dim=dim, keepdim=True) keeps the reduced dimension (size 1) so the subtraction broadcasts.",
        "Sum the exponentials along the same `dim`, also with keepdim=True, and divide.",
    ],
)

# ------------------------------------------------------------------------------ attention

# (leading dims, Tq, Tk, d, dv, mask): mask None, "random" (Tq, Tk), "causal" (Tq, Tk) or "batched".
ATTENTION_SHAPES = [
    ((2, 3), 5, 5, 8, 8, None),
    ((1, 2), 4, 6, 4, 3, "random"),
    ((2, 2), 5, 5, 8, 8, "causal"),
    ((3,), 3, 7, 6, 5, "batched"),
]


def attention_cases(g: torch.Generator, hidden: bool) -> list[Case]:
    shapes = list(ATTENTION_SHAPES)
    if hidden:
        for kind in ("random", "batched", None):
            lead = tuple(_int(g, 1, 3) for _ in range(_int(g, 1, 2)))
            tq, tk, d, dv = _int(g, 2, 12), _int(g, 2, 12), _int(g, 2, 16), _int(g, 1, 16)
            shapes.append((lead, tq, tk, d, dv, kind))
    cases = []
    for lead, tq, tk, d, dv, kind in shapes:
        inputs = {
            "q": torch.randn(*lead, tq, d, generator=g),
            "k": torch.randn(*lead, tk, d, generator=g),
            "v": torch.randn(*lead, tk, dv, generator=g),
            "mask": None,
        }
        if kind == "random":
            inputs["mask"] = _random_mask(g, (tq, tk))
        elif kind == "causal":  # written out: a causal-mask helper here would answer 01.causal_mask
            inputs["mask"] = torch.ones(tq, tq, dtype=torch.bool).triu(1)
        elif kind == "batched":
            inputs["mask"] = _random_mask(g, (*lead, tq, tk))
        mask = "no mask" if kind is None else f"{kind} mask of shape {tuple(inputs['mask'].shape)}"
        cases.append(Case(f"q {(*lead, tq, d)}, k {(*lead, tk, d)}, v {(*lead, tk, dv)}, {mask}", inputs))
    return cases


def run_attention(attention, case: Case) -> Outputs:
    i = case.inputs
    output, weights = attention(i["q"], i["k"], i["v"], mask=i["mask"])
    return {"output": output, "weights": weights}


def _matches_torch_sdpa(case: Case, out: Outputs) -> str | None:
    i = case.inputs
    mask = None if i["mask"] is None else ~i["mask"]  # torch's attn_mask: True = allowed
    want = F.scaled_dot_product_attention(i["q"], i["k"], i["v"], attn_mask=mask)
    got = out["output"]
    if got.shape != want.shape:
        return None
    gap = _gap(got.nan_to_num(nan=float("inf")), want)
    return None if gap <= 1e-4 else f"F.scaled_dot_product_attention differs by up to {gap:.3g}"


def _weights_are_distributions(case: Case, out: Outputs) -> str | None:
    w = out["weights"]
    gap = (w.sum(-1) - 1).abs().nan_to_num(nan=float("inf")).max().item()
    return None if gap <= 1e-5 else f"each query's weights over the keys should sum to 1; off by {gap:.3g}"


def _masked_get_zero(case: Case, out: Outputs) -> str | None:
    mask, w = case.inputs["mask"], out["weights"]
    if mask is None:
        return None
    leak = w.masked_fill(~mask.expand_as(w), 0).abs().max().item()
    return None if leak == 0 else f"masked positions (mask True) get weight up to {leak:.3g}; they must get 0"


# PyTorch's multi-head attention, the answer to Questions 4 and 5; nn.MultiheadAttention calls these.
LIBRARY_MULTI_HEAD_ATTENTION = library_calls(
    "torch.nn.functional.multi_head_attention_forward", "torch._native_multi_head_attention"
)

ATTENTION = Check(
    name="01.attention",
    target="scaled_dot_product_attention",
    cases=attention_cases,
    run=run_attention,
    forbidden=(
        *library_calls(
            "torch.nn.functional.scaled_dot_product_attention",
            "torch._scaled_dot_product_attention_math",
            "torch._scaled_dot_product_flash_attention_for_cpu",
        ),
        *LIBRARY_MULTI_HEAD_ATTENTION,  # attention itself, with projections that can be the identity
    ),
    properties=[
        Property("matches F.scaled_dot_product_attention", _matches_torch_sdpa),
        Property("each query's weights sum to 1", _weights_are_distributions),
        Property("masked positions get zero weight", _masked_get_zero),
    ],
    error_hints=[
        ErrorHint("cannot unpack", "return a pair: (output, weights)."),
        ErrorHint(
            "expected a value of type bool", "apply the mask with scores.masked_fill(mask, float('-inf'))."
        ),
        ErrorHint(
            "must match the size of tensor",
            "k.transpose(-2, -1) swaps the last two dimensions: q (..., Tq, d) @ k^T (..., d, Tk).",
        ),
    ],
    hints=[
        "Three steps: scores from q and k, weights = softmax of the scores over the keys, "
        "output = weights @ v.",
        "scores = q @ k.transpose(-2, -1) / math.sqrt(d), with d = q.shape[-1]: shape (..., Tq, Tk).",
        "scores.masked_fill(mask, float('-inf')) before the softmax: True means NOT allowed.",
        "Softmax over the last dimension (the keys), then return (weights @ v, weights).",
    ],
)

# ---------------------------------------------------------------------------- causal mask


def causal_mask_cases(g: torch.Generator, hidden: bool) -> list[Case]:
    sizes = [(1, 0), (4, 1), (7, 3), (12, 10)]  # (T, last position kept unchanged)
    if hidden:
        sizes += [(T, _int(g, 0, T - 2)) for T in (_int(g, 2, 16) for _ in range(3))]
    cases = []
    for T, t in sizes:
        qkv = torch.randn(3, 1, 2, T, 4, generator=g)  # q, k, v: (B=1, H=2, T, Dh=4) each
        perturbed = qkv.clone()
        perturbed[..., t + 1 :, :] = torch.randn(3, 1, 2, T - t - 1, 4, generator=g)
        name = f"T={T}, tokens after position {t} changed" if t < T - 1 else f"T={T}"
        cases.append(Case(name, {"T": T, "t": t, "qkv": qkv, "qkv_perturbed": perturbed}))
    return cases


def run_causal_mask(causal_mask, case: Case) -> Outputs:
    mask = torch.as_tensor(causal_mask(case.inputs["T"]))
    allowed = mask.logical_not()  # attn_mask of torch: True = allowed
    return {
        # As integers: the judge subtracts tensors to report differences, which bool tensors refuse.
        "mask": mask.to(torch.int64),
        "mask_is_bool": torch.tensor(int(mask.dtype == torch.bool)),
        "output": F.scaled_dot_product_attention(*case.inputs["qkv"], attn_mask=allowed),
        "perturbed_output": F.scaled_dot_product_attention(*case.inputs["qkv_perturbed"], attn_mask=allowed),
    }


def _past_does_not_move(case: Case, out: Outputs) -> str | None:
    t, a, b = case.inputs["t"], out["output"], out["perturbed_output"]
    if a.shape != b.shape or a.shape[-2] != case.inputs["T"]:
        return None
    moved = ((a - b).abs().amax(dim=(0, 1, 3)) > 1e-6)[: t + 1].nonzero()
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
    cases=causal_mask_cases,
    run=run_causal_mask,
    properties=[Property("earlier outputs do not move when later tokens change", _past_does_not_move)],
    error_hints=[
        ErrorHint(
            "match the broadcast shape",
            "causal_mask(T) must have shape (T, T): one row per query, one column per key.",
        ),
        ErrorHint("Could not infer dtype of NoneType", "causal_mask must return the mask tensor."),
    ],
    hints=[
        "mask[i, j] is True when query i may NOT look at key j: when j is in the future of i.",
        "The future of i is j > i: the part of the matrix strictly above the diagonal. "
        "The diagonal stays False.",
        "torch.triu(matrix, diagonal=1) keeps what is strictly above the diagonal.",
        "Start from torch.ones(T, T, dtype=torch.bool) so the mask is boolean.",
    ],
)

# ------------------------------------------------------------------- multi-head attention


def _linear(g: torch.Generator, fan_out: int, fan_in: int) -> tuple[torch.Tensor, torch.Tensor]:
    bound = 1 / math.sqrt(fan_in)  # nn.Linear's own init range
    weight = (torch.rand(fan_out, fan_in, generator=g) * 2 - 1) * bound
    return weight, (torch.rand(fan_out, generator=g) * 2 - 1) * bound


def _projections(g: torch.Generator, D: int) -> dict[str, torch.Tensor]:
    params = {}
    for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
        params[f"{name}.weight"], params[f"{name}.bias"] = _linear(g, D, D)
    return params


def _mha_case(g, B, Tq, Tk, D, H, *, context: bool, mask: str | None) -> Case:
    x = torch.randn(B, Tq, D, generator=g)
    inputs = {"hidden_size": D, "num_heads": H, "x": x, "context": None, "mask": None}
    if context:
        inputs["context"] = torch.randn(B, Tk, D, generator=g)
    if mask == "causal":
        inputs["mask"] = torch.ones(Tq, Tq, dtype=torch.bool).triu(1)
        t = _int(g, 0, Tq - 2)
        perturbed = x.clone()
        perturbed[:, t + 1 :] = torch.randn(B, Tq - t - 1, D, generator=g)
        inputs["t"], inputs["x_perturbed"] = t, perturbed
    elif mask == "padding":
        inputs["mask"] = _random_mask(g, (B, 1, 1, Tk))  # hides some keys of each sequence
    elif mask == "per head":
        inputs["mask"] = _random_mask(g, (B, H, Tq, Tk))
    source = f"context (B={B}, Tk={Tk})" if context else "self-attention"
    name = f"x (B={B}, Tq={Tq}, D={D}), H={H}, {source}"
    if mask:
        name += f", {mask} mask {tuple(inputs['mask'].shape)}"
        if mask == "causal":
            name += f", tokens after position {inputs['t']} changed"
    return Case(name, {**inputs, **_projections(g, D)})


def mha_cases(g: torch.Generator, hidden: bool) -> list[Case]:
    cases = [
        _mha_case(g, 2, 5, 5, 16, 4, context=False, mask=None),
        _mha_case(g, 1, 8, 8, 12, 2, context=False, mask="causal"),
        _mha_case(g, 2, 6, 6, 24, 3, context=False, mask="per head"),
    ]
    if hidden:
        for mask in (None, "causal", "per head"):
            H = _int(g, 2, 4)
            D, T = H * _int(g, 2, 8), _int(g, 2, 16)
            cases.append(_mha_case(g, _int(g, 1, 3), T, T, D, H, context=False, mask=mask))
    return cases


def cross_cases(g: torch.Generator, hidden: bool) -> list[Case]:
    cases = [
        _mha_case(g, 2, 3, 7, 16, 4, context=True, mask=None),
        _mha_case(g, 3, 6, 4, 12, 2, context=True, mask=None),
        _mha_case(g, 2, 4, 9, 16, 2, context=True, mask="padding"),
    ]
    if hidden:
        for mask in (None, None, "padding"):
            H = _int(g, 2, 4)
            D, Tq = H * _int(g, 2, 8), _int(g, 1, 16)
            Tk = (Tq + _int(g, 1, 15) - 1) % 16 + 1  # 1..16, never Tq
            cases.append(_mha_case(g, _int(g, 2, 3), Tq, Tk, D, H, context=True, mask=mask))
    return cases


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
    moved = ((a - b).abs().amax(dim=(0, 2)) > 1e-5)[: t + 1].nonzero()
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
        "must match the size of tensor",
        "a shape does not line up: check the einsum letters, and that heads are split with "
        "view(B, T, H, Dh) and merged back to (B, T, D) before o_proj.",
    ),
    ErrorHint(
        "shape '[",
        "view/reshape sizes: (B, T, D) -> (B, T, H, Dh) with H = self.num_heads, "
        "Dh = self.head_dim; with a context, keys and values have its length Tk.",
    ),
    ErrorHint(
        "einsum()",
        "each einsum letter must name the same size in every operand: "
        "'bqhd,bkhd->bhqk' for the scores, 'bhqk,bkhd->bqhd' for the values.",
    ),
]

MULTI_HEAD_ATTENTION = Check(
    name="01.multi_head_attention",
    target="MultiHeadAttention",
    cases=mha_cases,
    run=run_mha,
    forbidden=LIBRARY_MULTI_HEAD_ATTENTION,
    properties=[
        Property(
            "earlier outputs do not move when later tokens change (causal mask)", _mha_past_does_not_move
        ),
        Property("one output vector per query", _output_has_query_length),
    ],
    error_hints=MHA_ERRORS,
    hints=[
        "Project x with q_proj, k_proj, v_proj; split each (B, T, D) into H heads; attend in every head; "
        "merge the heads; apply o_proj.",
        "Splitting: view(B, T, H, Dh) (head h owns features h*Dh to (h+1)*Dh). Scale the scores by "
        "math.sqrt(self.head_dim), not by sqrt(D).",
        "torch.einsum('bqhd,bkhd->bhqk', q, k) gives all heads' scores; masked_fill(mask, -inf) and softmax "
        "over the last dimension.",
        "torch.einsum('bhqk,bkhd->bqhd', weights, v) is (B, Tq, H, Dh): reshape it to (B, Tq, D) for o_proj.",
    ],
)

CROSS_ATTENTION = Check(
    name="01.cross_attention",
    target="MultiHeadAttention",
    answer="multi_head_attention",
    cases=cross_cases,
    run=run_mha,
    forbidden=LIBRARY_MULTI_HEAD_ATTENTION,
    properties=[Property("one output vector per query", _output_has_query_length)],
    error_hints=MHA_ERRORS,
    hints=[
        "Queries from x (the decoder), keys and values from context (the encoder output): Tq and Tk differ.",
        "k_proj and v_proj read `context` when it is given; q_proj always reads x.",
        "Use Tk = context.shape[1] when viewing keys and values; the scores are (B, H, Tq, Tk).",
    ],
)

# ------------------------------------------------------------------------------ LayerNorm

# (shape, eps, scale of x): inputs ~1e-3 with eps 1e-5 make (std + eps) differ from sqrt(var + eps).
LAYER_NORM_SHAPES = [((2, 5, 16), 1e-5, 1.0), ((1, 4, 32), 1e-5, 1e-3), ((3, 6, 8), 0.1, 2.0)]


def layer_norm_cases(g: torch.Generator, hidden: bool) -> list[Case]:
    shapes = list(LAYER_NORM_SHAPES)
    if hidden:
        for _ in range(3):
            shape = (_int(g, 1, 3), _int(g, 2, 16), _int(g, 4, 32))
            eps = float(10 ** torch.empty(()).uniform_(-6, -1, generator=g))
            shapes.append((shape, eps, float(10 ** torch.empty(()).uniform_(-3, 2, generator=g))))
    cases = []
    for shape, eps, scale in shapes:
        # A per-feature offset, so that subtracting the mean matters (not larger: float32 cancels).
        x = (torch.randn(shape, generator=g) + 0.5 * torch.randn(shape[-1], generator=g)) * scale
        inputs = {
            "x": x,
            "eps": eps,
            "weight": 1 + 0.5 * torch.randn(shape[-1], generator=g),
            "bias": torch.randn(shape[-1], generator=g),
        }
        cases.append(Case(f"x of shape {shape} (|x| ~ {scale:.3g}), eps={eps:.3g}", inputs))
    return cases


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
    gap = _gap(out["output"].nan_to_num(nan=float("inf")), want)
    return None if gap <= 1e-4 else f"torch.nn.functional.layer_norm differs by up to {gap:.3g}"


NO_PARAMETER = ErrorHint(
    "has no attribute 'weight'",
    "LayerNorm needs nn.Parameter attributes `weight` (ones, shape (D,)) and `bias` (zeros, shape (D,)).",
)

LAYER_NORM = Check(
    name="01.layer_norm",
    target="LayerNorm",
    cases=layer_norm_cases,
    run=run_layer_norm,
    forbidden=library_calls(  # nn.LayerNorm calls the first
        "torch.nn.functional.layer_norm", "torch.layer_norm", "torch.native_layer_norm"
    ),
    properties=[Property("matches torch.nn.functional.layer_norm", _matches_torch_layer_norm)],
    error_hints=[
        NO_PARAMETER,
        ErrorHint("has no attribute 'bias'", NO_PARAMETER.advice),
        ErrorHint("has no attribute 'eps'", "store eps in __init__: self.eps = eps."),
    ],
    hints=[
        "Per token: subtract the mean of its D features, divide by their standard deviation, then scale "
        "and shift feature by feature.",
        "mean and variance over dim=-1 with keepdim=True; the variance divides by D (biased), not D - 1: "
        "x.var(dim=-1, keepdim=True, unbiased=False), or correction=0, or the mean of (x - mean) ** 2.",
        "eps goes inside the root: (x - mean) / torch.sqrt(var + eps), not / (std + eps).",
        "weight = nn.Parameter(torch.ones(hidden_size)), bias = nn.Parameter(torch.zeros(hidden_size)): "
        "one per feature, not scalars.",
    ],
)

# -------------------------------------------------------------------------- encoder layer


def encoder_cases(g: torch.Generator, hidden: bool) -> list[Case]:
    shapes = [(2, 5, 16, 4, 32, False), (1, 7, 12, 2, 24, True), (2, 4, 8, 2, 16, False)]  # B, T, D, H, F
    if hidden:
        for causal in (False, True):
            H = _int(g, 2, 4)
            D = H * _int(g, 2, 8)
            shapes.append((_int(g, 1, 3), _int(g, 2, 16), D, H, _int(g, 1, 4) * D, causal))
    cases = []
    for B, T, D, H, Fs, causal in shapes:
        state = {f"attention.{k}": v for k, v in _projections(g, D).items()}
        for norm in ("norm1", "norm2"):
            state[f"{norm}.weight"] = 1 + 0.3 * torch.randn(D, generator=g)
            state[f"{norm}.bias"] = 0.3 * torch.randn(D, generator=g)
        state["ffn.0.weight"], state["ffn.0.bias"] = _linear(g, Fs, D)
        state["ffn.2.weight"], state["ffn.2.bias"] = _linear(g, D, Fs)
        inputs = {
            "hidden_size": D,
            "num_heads": H,
            "ffn_size": Fs,
            "x": torch.randn(B, T, D, generator=g),
            "mask": torch.ones(T, T, dtype=torch.bool).triu(1) if causal else None,
            "state_dict": state,
        }
        name = f"x (B={B}, T={T}, D={D}), H={H}, F={Fs}" + (", causal mask" if causal else "")
        cases.append(Case(name, inputs))
    return cases


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
    out = {}
    for key, pre_norm in (("post_ln", False), ("pre_ln", True)):
        layer = encoder_class(i["hidden_size"], i["num_heads"], i["ffn_size"], pre_norm=pre_norm)
        # This question grades forward's wiring alone: PyTorch's sublayers replace the student's
        # MultiHeadAttention and LayerNorm, whose bugs cost points in their own questions only.
        layer.attention = _LibraryAttention(i["hidden_size"], i["num_heads"])
        layer.norm1, layer.norm2 = nn.LayerNorm(i["hidden_size"]), nn.LayerNorm(i["hidden_size"])
        layer.load_state_dict(i["state_dict"])
        out[key] = layer(i["x"], mask=i["mask"])
    return out


def _post_ln_is_normalised(case: Case, out: Outputs) -> str | None:
    """post-LN ends with norm2: undoing its affine map must give zero mean per token."""
    y, state = out["post_ln"], case.inputs["state_dict"]
    if y.shape != case.inputs["x"].shape:
        return None
    normed = (y - state["norm2.bias"]) / state["norm2.weight"]
    gap = normed.mean(-1).abs().max().item()
    return (
        None if gap <= 1e-4 else f"post-LN must end with norm2, but the output's mean per token is {gap:.3g}"
    )


# Forbids no call: its run puts PyTorch's attention and LayerNorm in place of the student's, and
# PyTorch's nn.TransformerEncoderLayer cannot hold the sublayers the given __init__ creates.
ENCODER_LAYER = Check(
    name="01.encoder_layer",
    target="EncoderLayer",
    cases=encoder_cases,
    run=run_encoder,
    properties=[Property("the post-LN output is the output of norm2", _post_ln_is_normalised)],
    error_hints=[
        ErrorHint(
            "Error(s) in loading state_dict",
            "keep the given __init__ (attention, norm1, norm2, ffn with its two Linear layers).",
        ),
        ErrorHint(
            "got an unexpected keyword argument 'mask'", "pass the mask on as attention(..., mask=mask)."
        ),
    ],
    hints=[
        "Two sublayers, attention then ffn, each with a residual connection (x + sublayer(...)) "
        "and a LayerNorm.",
        "post-LN: the norm comes after the residual sum. pre-LN: the norm comes before the sublayer, "
        "and the sum "
        "adds the raw x.",
        "post-LN: x = norm1(x + attention(x, mask=mask)), then x = norm2(x + ffn(x)).",
        "pre-LN: x = x + attention(norm1(x), mask=mask), then x = x + ffn(norm2(x)). "
        "Branch on self.pre_norm.",
    ],
)

CHECKS = [SOFTMAX, ATTENTION, CAUSAL_MASK, MULTI_HEAD_ATTENTION, CROSS_ATTENTION, LAYER_NORM, ENCODER_LAYER]
