"""Notebook 02's case generators, CASES by check name: the grader's side only (autograder/reference.py)."""

import math

import torch

from autograder import reference
from autograder.checks.positions import (
    BASE_CONCERNS,
    BEYOND,
    SHIFTED_FROM,
    SHIFTED_TO,
    TOEPLITZ_POSITIONS,
    WITHIN,
)
from autograder.core import Case


def _with_pe_table(name: str, inputs: dict, rows: int, concern: str) -> Case:
    """A case whose judge_only holds PE[0 .. rows - 1] for its hidden_size and base, from the
    reference's sinusoidal_positional_encoding. These cases are drawn only where solutions/ is:
    at build time (which stores the visible ones, table included) and at grading time."""
    encode = reference.reference_object("02.sinusoidal", "sinusoidal_positional_encoding")
    table = encode(rows, inputs["hidden_size"], inputs["base"])
    return Case(name, inputs, judge_only={"pe": table}, concern=concern)


def _base(g: torch.Generator) -> float:
    return float(torch.randint(10, 20_001, (), generator=g))


PAPER_BASE = 10000.0


def _base_concern(base: float) -> str:
    return "" if base == PAPER_BASE else BASE_CONCERNS[1].name


PE_SHAPES = [(6, 8, 10000.0), (1, 2, 10000.0), (50, 16, 10000.0), (9, 2, 100.0), (12, 10, 50.0)]


def sinusoidal_cases(g: torch.Generator, hidden: bool) -> list[Case]:
    shapes = list(PE_SHAPES)
    if hidden:
        for base in (PAPER_BASE, PAPER_BASE, PAPER_BASE, _base(g), _base(g)):
            seq_len = int(torch.randint(1, 101, (), generator=g))
            hidden_size = 2 * int(torch.randint(1, 33, (), generator=g))
            shapes.append((seq_len, hidden_size, base))
        shapes.append((1, 2 * int(torch.randint(1, 17, (), generator=g)), PAPER_BASE))
        shapes.append((int(torch.randint(2, 60, (), generator=g)), 2, PAPER_BASE))
    return [
        Case(
            f"seq_len={t}, hidden_size={d}, base={b:g}",
            {"seq_len": t, "hidden_size": d, "base": b},
            concern=_base_concern(b),
        )
        for t, d, b in shapes
    ]


FIGURE_SHAPES = [(128, 512)]


def figure_cases(g: torch.Generator, hidden: bool) -> list[Case]:
    shapes = list(FIGURE_SHAPES)
    if hidden:
        shapes = [(12, 12)]  # square: a transposed panel keeps its shape and shows in its values
        for _ in range(2):
            shapes.append(
                (int(torch.randint(2, 48, (), generator=g)), 2 * int(torch.randint(1, 40, (), generator=g)))
            )
    return [Case(f"seq_len={t}, hidden_size={d}", {"seq_len": t, "hidden_size": d}) for t, d in shapes]


OFFSETS_CASES = [
    ("offsets -5 .. 5", torch.arange(-5, 6), 8, 10000.0),
    ("a (2, 3) grid of offsets", torch.tensor([[0, 1, 2], [7, -7, 30]]), 16, 10000.0),
    ("a single offset (0-dim)", torch.tensor(3), 2, 10000.0),
    ("offsets 0 .. 40, base 100", torch.arange(41), 10, 100.0),
]


def dot_cases(g: torch.Generator, hidden: bool) -> list[Case]:
    shapes = list(OFFSETS_CASES)
    if hidden:
        for base in (PAPER_BASE, PAPER_BASE, PAPER_BASE, _base(g), _base(g)):
            shape = tuple(
                int(n) for n in torch.randint(1, 6, (int(torch.randint(0, 3, (), generator=g)),), generator=g)
            )
            offset = torch.randint(-60, 61, shape, generator=g)
            hidden_size = 2 * int(torch.randint(1, 33, (), generator=g))
            name = f"offsets of shape {shape}, hidden_size={hidden_size}, base={base:g}"
            shapes.append((name, offset, hidden_size, base))
    cases = []
    for name, offset, hidden_size, base in shapes:
        rows = max(TOEPLITZ_POSITIONS) + int(offset.abs().max()) + 1  # PE[p + offset] for each p
        inputs = {"offset": offset, "hidden_size": hidden_size, "base": base}
        cases.append(_with_pe_table(name, inputs, rows, concern=_base_concern(base)))
    return cases


SHIFT_CASES = [(3, 8, 10000.0), (0, 6, 10000.0), (-4, 8, 100.0), (1, 2, 10000.0), (17, 12, 1000.0)]


def shift_cases(g: torch.Generator, hidden: bool) -> list[Case]:
    shapes = list(SHIFT_CASES)
    if hidden:
        backwards = -int(torch.randint(1, 30, (), generator=g))
        ks = [int(k) for k in torch.randint(-40, 41, (4,), generator=g)] + [backwards]
        shapes += [(k, 2 * int(torch.randint(1, 17, (), generator=g)), PAPER_BASE) for k in ks]
        for _ in range(2):
            k = int(torch.randint(1, 41, (), generator=g))  # not 0: M_0 is the identity whatever the base
            sign = 1 if bool(torch.randint(0, 2, (), generator=g)) else -1
            shapes.append((sign * k, 2 * int(torch.randint(1, 17, (), generator=g)), _base(g)))
    cases = []
    for k, d, b in shapes:
        rows = max(-SHIFTED_FROM, SHIFTED_TO) + abs(k)  # PE[pos] and PE[pos + k] for every pos
        name, inputs = f"k={k}, hidden_size={d}, base={b:g}", {"k": k, "hidden_size": d, "base": b}
        cases.append(_with_pe_table(name, inputs, rows, concern=_base_concern(b)))
    return cases


# (B, T shorter, L, D): the table has L rows; B >= 2 so that batch rows and positions differ.
LEARNED_SHAPES = [(2, 5, 8, 6), (3, 2, 4, 10), (2, 1, 1, 4)]


def learned_cases(g: torch.Generator, hidden: bool) -> list[Case]:
    shapes = list(LEARNED_SHAPES)
    if hidden:
        for _ in range(3):
            max_len = int(torch.randint(2, 40, (), generator=g))
            d = int(torch.randint(max_len + 1, max_len + 20, (), generator=g))  # never D == L
            b = int(torch.randint(2, 5, (), generator=g))
            shapes.append((b, int(torch.randint(1, max_len, (), generator=g)), max_len, d))
    cases = []
    for b, shorter, max_len, d in shapes:
        table = torch.randn(max_len, d, generator=g)
        # One case per T, so that a message names the T: 1, one shorter than L, L itself, and L + 1.
        for t in sorted({1, shorter, max_len}) + [max_len + 1]:
            if t < max_len:
                note, concern = "", WITHIN
            elif t == max_len:
                note, concern = " (= max_seq_len: the table has a row for every position, no error)", WITHIN
            else:
                note, concern = " (> max_seq_len: forward should raise a ValueError)", BEYOND
            inputs = {
                "max_seq_len": max_len,
                "hidden_size": d,
                "table": table,
                "x": torch.randn(b, t, d, generator=g),
            }
            cases.append(
                Case(f"max_seq_len={max_len}, hidden_size={d}, B={b}, T={t}{note}", inputs, concern=concern)
            )
    return cases


# (B, T, D, perm): no perm below is its own inverse, so perm and argsort(perm) differ.
PERM_CASES = [(2, 6, 8, [2, 0, 5, 1, 3, 4]), (1, 3, 4, [1, 2, 0]), (3, 7, 6, [6, 0, 1, 2, 3, 4, 5])]


def perm_cases(g: torch.Generator, hidden: bool) -> list[Case]:
    shapes = [(b, t, d, torch.tensor(p)) for b, t, d, p in PERM_CASES]
    if hidden:
        for _ in range(3):
            t = int(torch.randint(4, 17, (), generator=g))
            b, d = int(torch.randint(1, 4, (), generator=g)), 2 * int(torch.randint(2, 9, (), generator=g))
            shapes.append((b, t, d, torch.randperm(t, generator=g)))
    cases = []
    for b, t, d, perm in shapes:
        inputs = {
            "x": torch.randn(b, t, d, generator=g),
            "perm": perm,
            "positions": torch.randn(t, d, generator=g),  # any table of one vector per slot
            "weights": torch.randn(3, d, d, generator=g) / math.sqrt(d),
        }
        cases.append(Case(f"B={b}, T={t}, D={d}, perm={perm.tolist()}", inputs))
    return cases


CASES = {
    "02.sinusoidal": sinusoidal_cases,
    "02.pe_figure": figure_cases,
    "02.pe_dot_product": dot_cases,
    "02.relative_shift": shift_cases,
    "02.learned_positions": learned_cases,
    "02.permutation_equivariance": perm_cases,
}
