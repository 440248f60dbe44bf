"""Notebook 04's case generators, CASES by check name: the grader's side only (autograder/reference.py)."""

import torch

from autograder.checks.rope import (
    BFLOAT16,
    CAST,
)
from autograder.core import Case
from grader.casework import random_rotation_table, reference_rotation

TABLE_SHAPES = [(8, 16, 10000.0), (2, 1, 10.0), (64, 100, 10000.0), (16, 40, 500.0)]


def rotation_matrix_cases(g: torch.Generator, hidden: bool) -> list[Case]:
    shapes = list(TABLE_SHAPES)
    if hidden:
        for _ in range(3):
            dim = 2 * int(torch.randint(1, 33, (), generator=g))
            context = int(torch.randint(1, 300, (), generator=g))
            period = float(torch.randint(2, 1_000_000, (), generator=g))
            shapes.append((dim, context, period))
    return [
        Case(f"dim={d}, context_size={c}, period={p:g}", {"dim": d, "context_size": c, "period": p})
        for d, c, p in shapes
    ]


ROPE_SHAPES = [(2, 3, 5, 8, 12), (1, 1, 1, 2, 4), (1, 2, 7, 16, 7), (3, 2, 6, 4, 10)]  # B, H, T, Dh, C


def rope_cases(g: torch.Generator, hidden: bool) -> list[Case]:
    shapes = list(ROPE_SHAPES)
    if hidden:
        for _ in range(3):
            b, h, t = (int(torch.randint(1, n, (), generator=g)) for n in (4, 5, 40))
            dh = 2 * int(torch.randint(1, 17, (), generator=g))
            shapes.append((b, h, t, dh, t + int(torch.randint(0, 20, (), generator=g))))
    cases = []
    for b, h, t, dh, c in shapes:
        table = random_rotation_table(g, c, dh // 2)
        q, k = torch.randn(2, b, h, t, dh, generator=g)
        cases.append(
            _rope_case(f"B={b} H={h} T={t} Dh={dh} context={c}", {"q": q, "k": k, "rotation_matrix": table})
        )
    # Same query and key at every position: the scores then depend on positions alone.
    table = random_rotation_table(g, 9, 4)
    q = torch.randn(1, 1, 1, 8, generator=g).expand(1, 1, 9, 8).contiguous()
    k = torch.randn(1, 1, 1, 8, generator=g).expand(1, 1, 9, 8).contiguous()
    cases.append(
        _rope_case("one q and one k repeated over T=9 positions", {"q": q, "k": k, "rotation_matrix": table})
    )
    # A model is cast with .to(dtype), which casts every buffer and parameter: a complex table kept
    # as a buffer becomes real (its cosines). Angles up to ~17 rad: bfloat16 would round them too.
    q, k = torch.randn(2, 1, 2, 12, 8, generator=g)
    cast_back = {"q": q, "k": k, "rotation_matrix": random_rotation_table(g, 16, 4)}
    cast_back["module_casts"] = ["bfloat16", "float32"]
    name = "float32 q and k in a module cast to bfloat16 and back to float32, B=1 H=2 T=12 Dh=8 context=16"
    cases.append(_rope_case(name, cast_back, concern=CAST))
    q, k = torch.randn(2, 2, 2, 4, 6, generator=g)
    bf16 = {"q": q.bfloat16(), "k": k.bfloat16(), "rotation_matrix": random_rotation_table(g, 8, 3)}
    bf16["module_casts"] = ["bfloat16"]
    cases.append(
        _rope_case("bfloat16 q and k in a module cast to bfloat16, B=2 H=2 T=4 Dh=6", bf16, concern=BFLOAT16)
    )
    return cases


def _rope_case(name: str, inputs: dict, concern: str = "") -> Case:
    rotated = reference_rotation("04_rope", inputs["rotation_matrix"], inputs["q"].float())
    return Case(name, inputs, judge_only={"rotated_q": rotated}, concern=concern)


def permutation_cases(g: torch.Generator, hidden: bool) -> list[Case]:
    dims = [2, 8, 64] + ([2 * int(torch.randint(1, 65, (), generator=g)) for _ in range(3)] if hidden else [])
    return [Case(f"dim={d}", {"dim": d}) for d in dims]


CASES = {
    "04.rotation_matrix": rotation_matrix_cases,
    "04.rope_forward": rope_cases,
    "04.half_split_permutation": permutation_cases,
}
