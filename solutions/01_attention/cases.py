"""Notebook 01's case generators, CASES by check name: the grader's side only (autograder/reference.py)."""

import math

import torch

from autograder.checks.attention import (
    BOOL_MASK,
    PRE_LN,
    SOFTMAX_OTHER_DIM,
)
from autograder.core import Case


def _int(g: torch.Generator, low: int, high: int) -> int:
    """A random integer in [low, high]."""
    return int(torch.randint(low, high + 1, (), generator=g))


def _random_mask(g: torch.Generator, shape: tuple[int, ...]) -> torch.Tensor:
    """A random boolean mask (True = not allowed) in which every row keeps one allowed key."""
    mask = torch.rand(shape, generator=g) < 0.4
    keep = torch.randint(0, shape[-1], shape[:-1], generator=g)
    return mask.scatter(-1, keep.unsqueeze(-1), False)


def _softmax_case(name: str, x: torch.Tensor, dim: int) -> Case:
    last = dim % x.dim() == x.dim() - 1
    return Case(name, {"x": x, "dim": dim}, concern="" if last else SOFTMAX_OTHER_DIM)


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
        _softmax_case("x of shape (2, 5), |x| ~ 3, dim=-1", torch.randn(2, 5, generator=g) * 3, -1),
        _softmax_case("logits of +1e3 and -1e3, shape (3, 4), dim=-1", huge, -1),
        _softmax_case("x of shape (2, 3, 4), dim=1", torch.randn(2, 3, 4, generator=g), 1),
        _softmax_case("x of shape (4, 3), dim=0, logits of +-1e3", huge.T.contiguous(), 0),
    ]
    if hidden:
        for last in (True, True, False, False):
            ndim = _int(g, 1 if last else 2, 3)
            shape = tuple(_int(g, 2, 6) for _ in range(ndim))
            # Another dimension, written as a positive or a negative index.
            dim = -1 if last else _int(g, 0, ndim - 2) - ndim * _int(g, 0, 1)
            scale = float(10 ** torch.empty(()).uniform_(-1, 3, generator=g))
            x = torch.randn(shape, generator=g) * scale
            cases.append(_softmax_case(f"x of shape {shape}, |x| ~ {scale:.3g}, dim={dim}", x, dim))
        x = torch.randn(3, 6, generator=g) * 1000
        cases.append(_softmax_case("x of shape (3, 6), |x| ~ 1e3, dim=-1", x, -1))
    return cases


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


def causal_mask_cases(g: torch.Generator, hidden: bool) -> list[Case]:
    # (T, last position kept unchanged); T = 1 last, where several wrong masks coincide.
    sizes = [(4, 1), (7, 3), (12, 10), (1, 0)]
    if hidden:
        sizes += [(T, _int(g, 0, T - 2)) for T in (_int(g, 2, 16) for _ in range(3))]
    cases = []
    for T, t in sizes:
        qkv = torch.randn(3, 1, 2, T, 4, generator=g)  # q, k, v: (B=1, H=2, T, Dh=4) each
        perturbed = qkv.clone()
        perturbed[..., t + 1 :, :] = torch.randn(3, 1, 2, T - t - 1, 4, generator=g)
        name = f"T={T}, tokens after position {t} changed" if t < T - 1 else f"T={T}"
        cases.append(Case(name, {"T": T, "t": t, "qkv": qkv, "qkv_perturbed": perturbed}))
    return [*cases, Case("T=5, the dtype of the mask", {"T": 5}, concern=BOOL_MASK)]


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
        # First, a context as long as x: keys or values read from x give wrong values there (named
        # by the mistakes), where lengths that differ would only give a shape error.
        _mha_case(g, 2, 5, 5, 16, 4, context=True, mask=None),
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
        cases.append(Case(f"post-LN, {name}", {**inputs, "pre_norm": False}))
        cases.append(Case(f"pre-LN, {name}", {**inputs, "pre_norm": True}, concern=PRE_LN))
    return cases


CASES = {
    "01.softmax": softmax_cases,
    "01.attention": attention_cases,
    "01.causal_mask": causal_mask_cases,
    "01.multi_head_attention": mha_cases,
    "01.cross_attention": cross_cases,
    "01.layer_norm": layer_norm_cases,
    "01.encoder_layer": encoder_cases,
}
