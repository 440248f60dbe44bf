"""Notebook 09's case generators, CASES by check name: the grader's side only (autograder/reference.py)."""

import contextlib

import torch

from autograder.checks.kv_cache import (
    BUFFER,
    CACHE,
    DECODE,
    DRAWS,
    EDGES,
    GQA,
    GREEDY,
    GREEDY_RUN,
    NUCLEUS,
    PREFILL,
    ROLLING,
    ROPE_OMITTED,
    SAMPLED,
    SINKS,
    TEMPERATURE,
    TOP_K,
    WINDOW,
    start_position,
    tempered_distribution,
)
from autograder.core import Case
from grader.casework import random_rotation_table, reference_rotation

ASSIGNMENT = "09_kv_cache"


def _int(g: torch.Generator, low: int, high: int) -> int:
    """A random int in [low, high]."""
    return int(torch.randint(low, high + 1, (), generator=g))


# B H T Dh C start_pos: a start inside the table, the last rows, one token at the end, T = C.
ROPE_SHAPES = [(2, 2, 4, 8, 16, 5), (1, 3, 3, 4, 12, 9), (1, 1, 1, 6, 10, 9), (2, 1, 7, 4, 7, 0)]


def rope_cases(g: torch.Generator, hidden: bool) -> list[Case]:
    shapes = list(ROPE_SHAPES)
    if hidden:
        for _ in range(3):
            b, h, t, dh = _int(g, 1, 3), _int(g, 1, 4), _int(g, 1, 12), 2 * _int(g, 1, 8)
            c = t + _int(g, 1, 30)
            shapes.append((b, h, t, dh, c, _int(g, 1, c - t)))
    cases = []
    for b, h, t, dh, c, start in shapes:
        q, k = torch.randn(2, b, h, t, dh, generator=g)
        inputs = {"q": q, "k": k, "rotation_matrix": random_rotation_table(g, c, dh // 2), "start_pos": start}
        cases.append(_rope_case(f"B={b} H={h} T={t} Dh={dh} context={c} start_pos={start}", inputs))
    q, k = torch.randn(2, 2, 2, 5, 6, generator=g)
    inputs = {"q": q, "k": k, "rotation_matrix": random_rotation_table(g, 9, 3), "start_pos": None}
    cases.append(_rope_case("B=2 H=2 T=5 Dh=6 context=9, called as rope(q, k)", inputs, ROPE_OMITTED))
    return cases


def _rope_case(name: str, inputs: dict, concern: str = "") -> Case:
    """The judge keeps the reference's rotations, to say which token is turned by the wrong row."""
    rotated = {
        key: reference_rotation(ASSIGNMENT, inputs["rotation_matrix"], inputs[key], start_position(inputs))
        for key in ("q", "k")
    }
    return Case(name, inputs, judge_only=rotated, concern=concern)


# B Hkv T Dh n_rep
REPEAT_SHAPES = [(2, 2, 5, 4, 3), (1, 1, 3, 2, 4), (2, 3, 4, 2, 1), (1, 4, 2, 3, 2)]


def repeat_cases(g: torch.Generator, hidden: bool) -> list[Case]:
    shapes = list(REPEAT_SHAPES)
    if hidden:
        shapes += [
            (_int(g, 1, 3), _int(g, 1, 4), _int(g, 1, 9), _int(g, 1, 8), _int(g, 2, 4)) for _ in range(3)
        ]
    return [
        Case(
            f"x of shape (B={b}, Hkv={h}, T={t}, Dh={dh}), n_rep={n}",
            {"x": torch.randn(b, h, t, dh, generator=g), "n_rep": n},
        )
        for b, h, t, dh, n in shapes
    ]


# (concern, B, L, D, H, Hkv, max B, C, W, chunks, a longer sequence fed first)
LAYER_CASES = [
    (DECODE, 2, 9, 16, 4, 4, 2, 12, None, (4, 1, 2, 1, 1), False),
    (DECODE, 1, 6, 8, 2, 2, 3, 10, None, (3, 1, 1, 1), True),
    (PREFILL, 2, 7, 16, 4, 4, 2, 7, None, (7,), False),
    (PREFILL, 1, 5, 12, 3, 3, 2, 9, None, (5,), True),
    (GQA, 2, 8, 24, 6, 2, 2, 10, None, (8,), False),
    (GQA, 1, 7, 16, 4, 1, 1, 8, None, (7,), True),
    (GQA, 1, 7, 32, 8, 2, 1, 9, None, (3, 1, 1, 1, 1), False),  # in steps too: heads may go wrong there only
    (WINDOW, 1, 10, 16, 4, 4, 1, 12, 3, (6, 1, 2, 1), False),  # Hkv = H: repeat_kv plays no part
    (CACHE, 2, 8, 16, 4, 2, 3, 11, None, (5, 2, 1), False),
]


def _layer_inputs(g, b, length, d, h, h_kv, max_b, c, w, chunks, stale) -> dict:
    dh = d // h
    scale = d**-0.5
    inputs = {
        "config": [d, h, h_kv, max_b, c],
        "window_size": w,
        "rotation_matrix": random_rotation_table(g, c, dh // 2),
        "weights": {
            "wq": torch.randn(h * dh, d, generator=g) * scale * 2,
            "wk": torch.randn(h_kv * dh, d, generator=g) * scale * 2,
            "wv": torch.randn(h_kv * dh, d, generator=g) * scale,
            "wo": torch.randn(d, h * dh, generator=g) * scale,
        },
        "x": torch.randn(b, length, d, generator=g),
        "chunks": list(chunks),
        # the repeat_kv of the notebook, run on its own to name a bug of its
        "probe_kv": torch.randn(1, h_kv, 2, dh, generator=g),
    }
    if stale:  # a longer sequence first: the cache then holds its keys past the new one's end
        inputs["earlier"] = torch.randn(max_b, c, d, generator=g)
    return inputs


def _layer_name(concern, b, length, d, h, h_kv, max_b, c, w, chunks, stale) -> str:
    window = f" W={w}" if w else ""
    steps = " + ".join(map(str, chunks))
    before = f", after a sequence of {c} tokens in the same cache" if stale else ""
    sizes = f"B={b} D={d} H={h} Hkv={h_kv} max_batch_size={max_b} C={c}{window}"
    return f"{sizes}, L={length} fed as {steps}{before}"


def kv_cache_cases(g: torch.Generator, hidden: bool) -> list[Case]:
    shapes = list(LAYER_CASES)
    if hidden:
        for concern in (DECODE, GQA, DECODE):
            h_kv = _int(g, 1, 3)
            h = h_kv * (_int(g, 2, 3) if concern == GQA else 1)
            d, length = h * 2 * _int(g, 1, 4), _int(g, 3, 14)
            first = _int(g, 1, length - 1)
            chunks = [first] + [1] * (length - first)  # a prefill, then one token a call
            shapes.append(
                (
                    concern,
                    _int(g, 1, 3),
                    length,
                    d,
                    h,
                    h_kv,
                    3,
                    length + _int(g, 0, 6),
                    None,
                    tuple(chunks),
                    bool(_int(g, 0, 1)),
                )
            )
    return [
        Case(_layer_name(concern, *rest), _layer_inputs(g, *rest), concern=concern)
        for concern, *rest in shapes
    ]


# (name, layers, batch, seq_len, heads, kv heads, head_dim, bytes per value)
MODELS = [
    ("Llama 2 7B, fp16, batch 1, 4096 tokens", 32, 1, 4096, 32, 32, 128, 2),
    ("Mistral 7B (GQA), bf16, batch 1, 8192 tokens", 32, 1, 8192, 32, 8, 128, 2),
    ("Llama 3 70B (GQA), bf16, batch 8, 8192 tokens", 80, 8, 8192, 64, 8, 128, 2),
    ("the course's model, float32, batch 4, 64 tokens", 2, 4, 64, 4, 4, 16, 4),
    ("a multi-query model (one kv head), float32", 12, 2, 1024, 12, 1, 64, 4),
]


def memory_cases(g: torch.Generator, hidden: bool) -> list[Case]:
    models = list(MODELS)
    if hidden:
        for _ in range(3):
            kv = _int(g, 1, 8)
            models.append(
                (
                    "a random model",
                    _int(g, 1, 48),
                    _int(g, 1, 16),
                    _int(g, 1, 20000),
                    kv * _int(g, 1, 4),
                    kv,
                    16 * _int(g, 1, 16),
                    int(2 ** _int(g, 0, 3)),
                )
            )
    keys = ("n_layers", "batch_size", "seq_len", "num_heads", "n_kv_heads", "head_dim", "bytes_per_value")
    cases = []
    for name, *values in models:
        inputs = dict(zip(keys, values, strict=True))
        listed = ", ".join(f"{k}={v}" for k, v in inputs.items())
        cases.append(Case(f"{name} ({listed})", inputs))
    return cases


LOGIT_GRID_ABOVE = 100.0  # logits of a larger scale are drawn on a grid (sampling_cases)


def sampling_cases(g: torch.Generator, hidden: bool) -> list[Case]:
    # (concern, B, V, temperature, top_k, scale of the logits)
    settings = [
        (TEMPERATURE, 2, 7, 1.0, None, 2.0),
        (TEMPERATURE, 3, 5, 0.5, None, 1.0),
        (TEMPERATURE, 1, 9, 2.0, None, 3.0),
        (TEMPERATURE, 2, 6, 0.5, None, 1000.0),  # exp(logits) overflows: the max must come off first
        (TOP_K, 2, 8, 1.0, 3, 2.0),
        (TOP_K, 3, 5, 0.8, 1, 1.0),
        (TOP_K, 1, 6, 1.5, 6, 1.0),
        (GREEDY, 2, 7, 0.0, None, 1.0),
        (GREEDY, 2, 6, 0.0, 2, 3.0),
    ]
    if hidden:
        for concern in (TEMPERATURE, TOP_K, GREEDY):
            v = _int(g, 3, 40)
            t = 0.0 if concern == GREEDY else float(torch.empty(()).uniform_(0.3, 3.0, generator=g))
            settings.append((concern, _int(g, 1, 4), v, t, _int(g, 1, v) if concern == TOP_K else None, 2.0))
    cases = []
    for concern, b, v, t, k, scale in settings:
        logits = torch.randn(b, v, generator=g) * scale
        if scale > LOGIT_GRID_ABOVE:
            # At 1000, float32 rounds logits / 0.7 by up to 2.4e-4, so a float64 softmax (as correct)
            # differed from the reference by 1.7e-5. On a grid of 1/16 the logits, logits / 0.5 and
            # their differences are exact in float32: the softmaxes then agree to their last bits.
            logits = (logits * 16).round() / 16
        name = f"logits of shape ({b}, {v}) (|logits| ~ {scale:g}), temperature={t:g}, top_k={k}"
        cases.append(Case(name, {"logits": logits, "temperature": t, "top_k": k}, concern=concern))
    return cases


def generate_cases(g: torch.Generator, hidden: bool) -> list[Case]:
    # (concern, B, V, P, N, temperature, top_k)
    settings = [
        (GREEDY_RUN, 2, 6, 4, 7, 0.0, None),
        (GREEDY_RUN, 1, 9, 1, 5, 1.0, 1),
        (GREEDY_RUN, 3, 5, 6, 1, 0.0, None),
        (SAMPLED, 2000, 5, 1, 1, 1.5, None),
        (SAMPLED, 1500, 7, 2, 2, 0.6, 3),
    ]
    if hidden:
        settings.append((GREEDY_RUN, _int(g, 1, 3), _int(g, 3, 12), _int(g, 1, 6), _int(g, 2, 9), 0.0, None))
        settings.append(
            (SAMPLED, 2000, _int(g, 3, 8), 1, 2, float(torch.empty(()).uniform_(0.5, 2.0, generator=g)), None)
        )
    cases = []
    for concern, b, v, p, n, t, k in settings:
        inputs = {
            "table": torch.randn(v, v, generator=g) * 1.5,
            "position_bias": torch.randn(p + n + 1, v, generator=g) * 0.5,
            # one prompt for every row: their first new tokens are draws from one distribution
            "prompt": torch.randint(v, (1, p), generator=g).expand(b, p).clone(),
            "max_new_tokens": n,
            "temperature": t,
            "top_k": k,
            "seed": _int(g, 0, 2**31),
        }
        name = f"B={b} V={v} prompt of {p} token{'s' * (p > 1)}, {n} new, temperature={t:g}, top_k={k}"
        cases.append(Case(name, inputs, concern=concern))
    return cases


# ---------------------------------------------------------------------------- nucleus sampling

EDGE_GAP = 0.01  # top_p is this far from every running sum of a row: float32 cannot move the edge


def nucleus(probabilities: torch.Tensor, top_p: float) -> torch.Tensor:
    """The nucleus, renormalised: a token stays when the tokens more likely than it hold less than
    top_p (so tokens tied at the edge stay together, and the argmax always stays). Pairwise, in
    float64: no sort whose order among ties could matter."""
    p = probabilities.double()
    above = (p.unsqueeze(-2) * (p.unsqueeze(-2) > p.unsqueeze(-1))).sum(-1)  # (..., V)
    kept = p * (above < top_p) if top_p < 1 else p
    return (kept / kept.sum(-1, keepdim=True)).to(probabilities.dtype)


def _clear_of_the_edges(probabilities: torch.Tensor, top_p: float) -> bool:
    running = probabilities.double().sort(dim=-1, descending=True).values.cumsum(-1)
    return bool(((running - top_p).abs() > EDGE_GAP).all())


def _uniform(g: torch.Generator, low: float, high: float) -> float:
    return round(float(torch.empty(()).uniform_(low, high, generator=g)), 3)


def _filter_case(g: torch.Generator, b: int, v: int, top_p: float | None, scale: float) -> Case:
    """Rows whose running sums all stay EDGE_GAP away from top_p (None: drawn with each try, since a
    long tail of small tokens leaves no such gap near 1)."""
    for _ in range(1000):  # a few tries at most
        p = _uniform(g, 0.2, 0.95) if top_p is None else top_p
        probabilities = torch.softmax(torch.randn(b, v, generator=g) * scale, dim=-1)
        if _clear_of_the_edges(probabilities, p):
            name = f"probabilities of shape ({b}, {v}), top_p={p:g}"
            return Case(name, {"probabilities": probabilities, "top_p": p}, concern=NUCLEUS)
    raise RuntimeError(f"no rows of shape ({b}, {v}) found clear of top_p's edge")


def _tie_case(g: torch.Generator, v: int) -> Case:
    """Two tokens tie at the edge: the running sum crosses top_p at the first, and the second is as
    likely. Both stay, whichever order a sort puts them in."""
    logits = torch.randn(v, generator=g).sort(descending=True).values
    edge = _int(g, 1, v - 3)
    logits[edge + 1] = logits[edge]
    probabilities = torch.softmax(logits, dim=-1)[torch.randperm(v, generator=g)]
    ranked = probabilities.double().sort(descending=True).values
    before = float(ranked[:edge].sum())
    top_p = before + float(ranked[edge]) / 2  # inside the first tied token's share
    name = f"{v} tokens, two of them tied at the edge of the nucleus, top_p={top_p:.4g}"
    return Case(name, {"probabilities": probabilities.unsqueeze(0), "top_p": top_p}, concern=EDGES)


def _edge_cases(g: torch.Generator) -> list[Case]:
    even = torch.softmax(torch.randn(2, 6, generator=g) * 0.5, dim=-1)  # no token below 0.05
    top_tie = torch.softmax(torch.tensor([[1.0, 3.0, -1.0, 3.0, 0.5]]), dim=-1)
    return [
        _tie_case(g, _int(g, 5, 9)),
        Case(
            "probabilities of shape (2, 6), top_p=1: every token",
            {"probabilities": even, "top_p": 1.0},
            concern=EDGES,
        ),
        Case(
            "probabilities of shape (2, 6), top_p=1e-06: the argmax alone",
            {"probabilities": even, "top_p": 1e-6},
            concern=EDGES,
        ),
        Case(
            "5 tokens, the two most likely tied, top_p=1e-06: both",
            {"probabilities": top_tie, "top_p": 1e-6},
            concern=EDGES,
        ),
    ]


def _moved(p: torch.Tensor, q: torch.Tensor) -> float:
    """The largest total variation between two rows of distributions."""
    return float((p - q).abs().sum(-1).max() / 2)


class NoCase(RuntimeError):
    """Settings under which no case of the kind asked was found."""


def _draws_case(
    g: torch.Generator, repeats: int, temperature: float, top_k: int | None, top_p: float
) -> Case:
    """Three rows of logits, each drawn `repeats` times, each row's nucleus of two tokens or more. In
    one row at least, top-p taken before the temperature moves a tenth of the probability (total
    variation), and so does leaving top-k out: thousands of draws show either."""
    v = 8
    for _ in range(200):  # a few tries, for settings that allow it
        rows = torch.randn(3, v, generator=g) * 1.5
        tempered = tempered_distribution(rows.double(), temperature, top_k)  # float64: the edges exact
        plain = tempered_distribution(rows.double(), 1.0, top_k)
        top_p_first = tempered * (nucleus(plain, top_p) > 0)
        top_p_first /= top_p_first.sum(-1, keepdim=True)
        no_top_k = nucleus(tempered_distribution(rows.double(), temperature), top_p)
        several = bool(((nucleus(tempered, top_p) > 0).sum(-1) > 1).all())  # every row's draws vary
        if (
            several
            and _clear_of_the_edges(tempered, top_p)
            and _clear_of_the_edges(plain, top_p)
            and _moved(nucleus(tempered, top_p), top_p_first) > 0.1
            and (top_k is None or _moved(nucleus(tempered, top_p), no_top_k) > 0.1)
        ):
            break
    else:
        raise NoCase(
            f"no logits found whose nucleus changes with temperature {temperature} and top_k {top_k}"
        )
    inputs = {
        "rows": rows,
        "repeats": repeats,
        "temperature": temperature,
        "top_k": top_k,
        "top_p": top_p,
        "seed": _int(g, 0, 2**31),
        "tempered": tempered.float(),
        "nucleus": nucleus(tempered, top_p).float(),
        "top_p_first": top_p_first.float(),
    }
    settings = f"temperature={temperature:g}, top_k={top_k}, top_p={top_p:g}"
    name = f"3 rows of {v} logits, each drawn {repeats} times: {settings}"
    return Case(name, inputs, concern=DRAWS)


def _random_draws_case(g: torch.Generator, repeats: int) -> Case:
    for _ in range(100):  # settings drawn again where the temperature hardly moves the nucleus
        temperature = _uniform(g, 0.4, 0.7) if _int(g, 0, 1) else _uniform(g, 1.5, 2.5)
        with contextlib.suppress(NoCase):
            return _draws_case(g, repeats, temperature, _int(g, 3, 7), _uniform(g, 0.5, 0.9))
    raise NoCase("no settings found for a draws case")


def top_p_cases(g: torch.Generator, hidden: bool) -> list[Case]:
    cases = [
        _filter_case(g, 2, 7, 0.6, 1.5),
        _filter_case(g, 3, 12, 0.9, 1.0),
        _filter_case(g, 1, 5, 0.35, 2.5),
        *_edge_cases(g),
        _draws_case(g, 2000, 0.6, None, 0.8),
        _draws_case(g, 2000, 1.8, 5, 0.7),
    ]
    if hidden:
        cases.append(_filter_case(g, _int(g, 1, 4), _int(g, 3, 24), None, 2.0))
        cases.append(_tie_case(g, _int(g, 5, 30)))
        cases.append(_random_draws_case(g, 4000))
    return cases


# -------------------------------------------------------------------- the rolling buffer


def _rolling_case(
    g: torch.Generator,
    concern: str,
    b: int,
    max_b: int,
    h_kv: int,
    dh: int,
    w: int,
    s: int,
    chunks,
    stale: bool,
) -> Case:
    length = sum(chunks)
    q, k, v = torch.randn(3, b, h_kv, length, dh, generator=g).unbind(0)
    inputs = {
        "max_batch_size": max_b,
        "window_size": w,
        "n_sinks": s,
        "chunks": list(chunks),
        "q": q,
        "k": k,
        "v": v,
    }
    if stale:  # another sequence first, in the same buffer; long enough to fill it, short enough that
        # its last positions are reached by the next one's first step
        earlier = min(length, s + 2 * w + 1)
        inputs["earlier"] = {"k": torch.randn(b, h_kv, earlier, dh, generator=g), "chunks": [earlier]}
        inputs["earlier"]["v"] = torch.randn(b, h_kv, earlier, dh, generator=g)
    sizes = f"B={b} of {max_b}, Hkv={h_kv}, Dh={dh}, W={w}, n_sinks={s}"
    steps = ", ".join(str(c) for c in chunks[:6]) + (", ..." if len(chunks) > 6 else "")
    after = ", after another sequence" if stale else ""
    return Case(f"{length} positions in steps of {steps} ({sizes}){after}", inputs, concern=concern)


def _random_chunks(g: torch.Generator, w: int, length: int) -> list[int]:
    """A first step of 1 .. 2W + 2 tokens, then single tokens and chunks up to W + 2, to `length`."""
    chunks = [_int(g, 1, 2 * w + 2)]
    while sum(chunks) < length:
        chunks.append(1 if _int(g, 0, 2) else _int(g, 2, w + 2))
    return chunks


def _random_rolling_case(g: torch.Generator, concern: str) -> Case:
    w, b = _int(g, 2, 6), _int(g, 1, 2)
    s = _int(g, 1, 4) if concern == SINKS else 0
    h_kv = _int(g, 1, 3)
    if h_kv == s + w:  # the buffer's two layouts would look alike
        h_kv = 1
    chunks = _random_chunks(g, w, s + _int(g, 3, 6) * w)
    stale = bool(_int(g, 0, 1)) and concern != SINKS  # an earlier sequence is the window's cases' to charge
    return _rolling_case(g, concern, b, b + _int(g, 0, 1), h_kv, 2 * _int(g, 1, 4), w, s, chunks, stale)


def rolling_cases(g: torch.Generator, hidden: bool) -> list[Case]:
    cases = [
        _rolling_case(g, ROLLING, 1, 1, 2, 4, 4, 0, [9, 3] + [1] * 10, False),
        _rolling_case(g, ROLLING, 2, 3, 1, 8, 3, 0, [1] * 12 + [5, 2], False),
        _rolling_case(g, ROLLING, 1, 2, 2, 4, 5, 0, [13, 1, 1, 1, 1, 7, 1, 1], True),
        _rolling_case(g, SINKS, 1, 1, 2, 4, 3, 2, [7, 1, 1, 1, 4] + [1] * 5, False),
        _rolling_case(g, SINKS, 2, 2, 1, 4, 4, 1, [1] * 15, False),
        _rolling_case(g, SINKS, 1, 2, 2, 4, 2, 4, [2, 1, 1, 6, 1, 1, 1], False),
        _rolling_case(g, BUFFER, 1, 2, 2, 4, 4, 0, [6, 1, 1, 1, 1, 3], False),
        _rolling_case(g, BUFFER, 2, 2, 1, 4, 3, 2, [1] * 10 + [4], True),
    ]
    if hidden:
        cases += [_random_rolling_case(g, concern) for concern in (ROLLING, ROLLING, SINKS, SINKS, BUFFER)]
    return cases


CASES = {
    "09.rope_positions": rope_cases,
    "09.repeat_kv": repeat_cases,
    "09.kv_cache": kv_cache_cases,
    "09.cache_bytes": memory_cases,
    "09.sampling_distribution": sampling_cases,
    "09.generate": generate_cases,
    "09.top_p": top_p_cases,
    "09.rolling_cache": rolling_cases,
}
