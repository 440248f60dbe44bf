"""Notebook 11's case generators, CASES by check name: the grader's side only (autograder/reference.py)."""

import math
from itertools import pairwise

import torch
from torch import Tensor

from autograder.checks.tiled_attention import (
    CAUSAL,
    EMPTY_PART,
    LARGE_SCORES,
    MEMORY,
    NON_CAUSAL,
    ONE_BLOCK,
    SOFTMAX_STABLE,
    TWO_PARTS,
)
from autograder.core import Case

BYTE_CASES = [(1, 32, 8192, 4), (2, 8, 1000, 2), (1, 1, 1, 4), (3, 12, 512, 4), (4, 16, 2048, 8)]


def bytes_cases(g: torch.Generator, hidden: bool) -> list[Case]:
    shapes = list(BYTE_CASES)
    if hidden:
        for _ in range(4):
            b, h = (int(torch.randint(1, n, (), generator=g)) for n in (9, 65))
            t = int(torch.randint(1, 200_000, (), generator=g))
            shapes.append((b, h, t, (1, 2, 4, 8)[int(torch.randint(0, 4, (), generator=g))]))
    return [
        Case(
            f"batch={b}, heads={h}, seq_len={t}, bytes_per_element={e}",
            {"batch": b, "heads": h, "seq_len": t, "bytes_per_element": e},
        )
        for b, h, t, e in shapes
    ]


# (shape of the scores, block size, scale). The first case tells the mistakes of the core apart:
# N = 10 is no multiple of b = 4, and a row's maximum changes from block to block.
SOFTMAX_SHAPES = [((3, 10), 4, 3.0), ((2, 4, 16), 4, 2.0), ((5, 7), 16, 3.0), ((4, 9), 1, 3.0)]


def _rising(g: torch.Generator, rows: int, n: int) -> Tensor:
    """Rows whose maximum grows in every block: each later logit larger than the ones before."""
    return torch.randn(rows, n, generator=g).abs().cumsum(dim=-1)


def softmax_cases(g: torch.Generator, hidden: bool) -> list[Case]:
    shapes = list(SOFTMAX_SHAPES)
    if hidden:
        for _ in range(3):
            rows = tuple(
                int(torch.randint(1, 5, (), generator=g))
                for _ in range(int(torch.randint(1, 4, (), generator=g)))
            )
            n, b = int(torch.randint(1, 40, (), generator=g)), int(torch.randint(1, 12, (), generator=g))
            shapes.append(((*rows, n), b, float(torch.empty(()).uniform_(0.5, 5, generator=g))))
    cases = [
        Case(
            f"scores of shape {shape} (|s| ~ {scale:.3g}), block_size={b}",
            {"scores": torch.randn(shape, generator=g) * scale, "block_size": b},
        )
        for shape, b, scale in shapes
    ]
    cases.append(
        Case(
            "scores of shape (3, 12) rising along each row, block_size=5",
            {"scores": _rising(g, 3, 12), "block_size": 5},
        )
    )
    # Every row holds a logit near +1000 (so a running max started at 0 is harmless there), then rows
    # all near -1000, where exp(s) underflows to 0 unless the maximum is subtracted.
    high = torch.randn(4, 11, generator=g) * 400
    high[torch.arange(4), torch.randint(0, 11, (4,), generator=g)] = 1000.0
    low = -1000 + torch.randn(3, 9, generator=g) * 5
    cases += [
        Case(
            "logits up to +1000 (one per row), shape (4, 11), block_size=3",
            {"scores": high, "block_size": 3},
            concern=SOFTMAX_STABLE,
        ),
        Case(
            "logits all near -1000, shape (3, 9), block_size=4",
            {"scores": low, "block_size": 4},
            concern=SOFTMAX_STABLE,
        ),
    ]
    return [*cases, _softmax_measured(g, hidden)]


def _softmax_measured(g: torch.Generator, hidden: bool) -> Case:
    """Rows at least 6 blocks long: a tensor as wide as a row is then 6 times a block's."""
    shape, b = (4, 6, 96), 8
    if hidden:
        b = int(torch.randint(3, 13, (), generator=g))
        rows = tuple(int(torch.randint(1, 6, (), generator=g)) for _ in range(2))
        shape = (
            *rows,
            b * int(torch.randint(6, 11, (), generator=g)) + int(torch.randint(0, b, (), generator=g)),
        )
    inputs = {"scores": torch.randn(shape, generator=g) * 3, "block_size": b, "measured": True}
    return Case(f"scores of shape {shape}, block_size={b}, measured", inputs, concern=ONE_BLOCK)


# (B, H, T, Dh, block_size). The first tells the mistakes apart: T = 10 is no multiple of 4, H = 2
# separates 1/sqrt(Dh) from 1/sqrt(H * Dh), and three key blocks let the running max change.
ATTENTION_SHAPES = [(1, 2, 10, 8, 4), (2, 3, 16, 4, 4), (1, 1, 5, 8, 8), (2, 1, 7, 4, 1)]


def _qkv(g: torch.Generator, b: int, h: int, t: int, dh: int) -> dict:
    q, k, v = torch.randn(3, b, h, t, dh, generator=g)
    return {"q": q, "k": k, "v": v}


def _extreme(g: torch.Generator, sign: float, b: int, h: int, t: int, dh: int) -> dict:
    """Keys near one direction and queries 50 times along it (or against it): every score near
    +-50 sqrt(Dh) (about +-140 at Dh = 8), far beyond exp's float32 range (about +-88)."""
    k = 1 + 0.1 * torch.randn(b, h, t, dh, generator=g)
    q = sign * 50 * (1 + 0.1 * torch.randn(b, h, t, dh, generator=g))
    return {"q": q, "k": k, "v": torch.randn(b, h, t, dh, generator=g)}


def attention_cases(g: torch.Generator, hidden: bool) -> list[Case]:
    shapes = list(ATTENTION_SHAPES)
    if hidden:
        for _ in range(3):
            b, h = (int(torch.randint(1, 4, (), generator=g)) for _ in range(2))
            bs = int(torch.randint(1, 17, (), generator=g))
            t = int(torch.randint(1, 5 * bs + 3, (), generator=g))
            shapes.append((b, h, t, 2 * int(torch.randint(1, 9, (), generator=g)), bs))
    cases = []
    for causal, concern in ((False, NON_CAUSAL), (True, CAUSAL)):
        tag = ", causal" if causal else ""
        for b, h, t, dh, bs in shapes:
            inputs = {**_qkv(g, b, h, t, dh), "block_size": bs, "causal": causal}
            cases.append(Case(f"B={b} H={h} T={t} Dh={dh} block_size={bs}{tag}", inputs, concern=concern))
        # Scores near +1000 then near -1000 (after the first, a running max started at 0 is harmless).
        for sign, what in (
            (1.0, "queries 50x along the keys: scores near +140"),
            (-1.0, "queries 50x against the keys: every score near -140"),
        ):
            inputs = {**_extreme(g, sign, 1, 2, 11, 8), "block_size": 4, "causal": causal}
            cases.append(Case(f"B=1 H=2 T=11 Dh=8 block_size=4{tag}, {what}", inputs, concern=concern))
    return [*cases, _attention_measured(g, hidden)]


def _attention_measured(g: torch.Generator, hidden: bool) -> Case:
    """The function at two lengths about 4 times apart, with Dh = 4 and blocks of 16 to 32: a (T, T)
    tensor grows 16 times, twice what the check allows, and a row of scores against every key,
    (block_size, T), is then at least 1.5 times twice a copy of q, the most the answer may hold besides
    twice one tile. The long run has (long / block_size)^2 = 64 to 100 tiles."""
    b, h, bs, causal, (short, long) = 1, 2, 32, False, (64, 256)
    if hidden:
        b, h = (int(torch.randint(1, 3, (), generator=g)) for _ in range(2))
        bs = (16, 24, 32)[int(torch.randint(0, 3, (), generator=g))]
        causal = bool(torch.randint(0, 2, (), generator=g))
        short = 2 * bs + int(torch.randint(0, bs // 2, (), generator=g))
        long = 4 * short + int(torch.randint(0, 4, (), generator=g))
    dh = 4
    inputs = {**_qkv(g, b, h, short, dh), "block_size": bs, "causal": causal, "lengths": (short, long)}
    inputs["long"] = _qkv(g, b, h, long, dh)
    name = f"B={b} H={h} Dh={dh} block_size={bs}{', causal' if causal else ''} run at T={short} and T={long}"
    return Case(name, inputs, concern=MEMORY)


def attention_state(q: Tensor, k: Tensor, v: Tensor, start: int, stop: int, causal: bool = False) -> tuple:
    """(m, l, acc) of every query over the keys start..stop-1, as the notebook's given function makes
    it: m = -inf, l = 0 and acc = 0 for a query that sees none of them."""
    s = q @ k[:, :, start:stop].transpose(-1, -2) / math.sqrt(q.shape[-1])
    if causal:
        future = torch.arange(start, stop)[None, :] > torch.arange(q.shape[2])[:, None]
        s = s.masked_fill(future, float("-inf"))
    m = s.amax(dim=-1, keepdim=True)
    p = torch.exp(s - torch.where(m.isinf(), 0.0, m))
    return m, p.sum(dim=-1, keepdim=True), p @ v[:, :, start:stop]


def _merge_case(name: str, inputs: dict, cuts: list[int], reverse: bool, concern: str) -> Case:
    """The keys cut at `cuts`, one state per part, handed over last part first when `reverse`.
    The states are made in float64, then rounded: in float32, scores near 140 carry the last bits of
    the CPU's matrix product (AVX2 and AVX-512 differ) into exp, 1.5e-5 apart, past what two
    machines' builds of a snapshot may differ by."""
    bounds = [0, *cuts, inputs["k"].shape[2]]
    wide = {**inputs, **{name: inputs[name].double() for name in ("q", "k", "v")}}
    parts = [
        tuple(x.to(inputs["q"].dtype) for x in attention_state(**wide, start=a, stop=b))
        for a, b in pairwise(bounds)
    ]
    order = " (the later keys first)" if reverse else ""
    name = f"{name}, keys cut at {', '.join(map(str, cuts))}{order}"
    return Case(name, {**inputs, "parts": parts[::-1] if reverse else parts}, concern=concern)


def _opposed(g: torch.Generator, t: int, cut: int) -> dict:
    """`_extreme`'s queries and keys (B=1, H=2, Dh=8), the keys from `cut` on turned against the
    queries: the two parts' maxima near +-50 sqrt(Dh), their difference far beyond exp's float32 range."""
    inputs = {**_extreme(g, 1.0, 1, 2, t, 8), "causal": False}
    inputs["k"][:, :, cut:] *= -1
    return inputs


def _randint(g: torch.Generator, low: int, high: int) -> int:
    return int(torch.randint(low, high, (), generator=g))


# (B, H, T, Dh, cuts, later part first). The first tells the mistakes apart (the parts' maxima differ
# on every row); the second merges a merged state again; the third hands the later keys over first.
MERGE_SHAPES = [(1, 2, 10, 8, [4], False), (2, 1, 12, 4, [3, 8], False), (1, 3, 7, 8, [5], True)]
CAUSAL_SHAPES = [(1, 2, 9, 8, 3), (2, 1, 6, 4, 1)]  # (B, H, T, Dh, cut): queries before it see no later key


def merge_cases(g: torch.Generator, hidden: bool) -> list[Case]:
    shapes, causal = list(MERGE_SHAPES), list(CAUSAL_SHAPES)
    if hidden:
        for _ in range(3):
            b, h, t, dh = _randint(g, 1, 4), _randint(g, 1, 4), _randint(g, 2, 40), 2 * _randint(g, 1, 9)
            cuts = sorted({_randint(g, 1, t) for _ in range(_randint(g, 1, 4))})
            shapes.append((b, h, t, dh, cuts, bool(_randint(g, 0, 2))))
        t = _randint(g, 3, 30)
        causal.append((1, 2, t, 8, _randint(g, 1, t)))
    cases = []
    for b, h, t, dh, cuts, reverse in shapes:
        inputs = {**_qkv(g, b, h, t, dh), "causal": False}
        cases.append(_merge_case(f"B={b} H={h} T={t} Dh={dh}", inputs, cuts, reverse, TWO_PARTS))
    if hidden:  # split-K decoding: one query against 64 cached keys, cut over four workers
        inputs = {**_qkv(g, 1, 2, 64, 16), "causal": False}
        inputs["q"] = inputs["q"][:, :, -1:]
        cases.append(
            _merge_case("B=1 H=2, one query, 64 keys, Dh=16", inputs, [16, 32, 48], False, TWO_PARTS)
        )
    for b, h, t, dh, cut in causal:
        inputs = {**_qkv(g, b, h, t, dh), "causal": True}
        for reverse in (False, True):
            cases.append(
                _merge_case(f"B={b} H={h} T={t} Dh={dh}, causal", inputs, [cut], reverse, EMPTY_PART)
            )
    # Both maxima near +140, where exp(m) itself overflows; then +140 and -140, either part first, where
    # the factor between them does.
    inputs = {**_extreme(g, 1.0, 1, 2, 10, 8), "causal": False}
    cases.append(
        _merge_case("B=1 H=2 T=10 Dh=8, queries 50x along the keys", inputs, [4], False, LARGE_SCORES)
    )
    for reverse in (False, True):
        name = "B=1 H=2 T=10 Dh=8, queries 50x along the keys before the cut and against those after"
        cases.append(_merge_case(name, _opposed(g, 10, 6), [6], reverse, LARGE_SCORES))
    return cases


CASES = {
    "11.score_matrix_bytes": bytes_cases,
    "11.online_softmax": softmax_cases,
    "11.tiled_attention": attention_cases,
    "11.merge_softmax_states": merge_cases,
}
