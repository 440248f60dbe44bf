"""Notebook 03's case generators, CASES by check name: the grader's side only (autograder/reference.py)."""

import torch

from autograder.checks.sliding_window import (
    CAUSAL,
    CENTRED,
    EVEN,
    LINEAR_MEMORY,
    ODD,
    ONE_SDPA_CALL,
    ROPE_CORE,
    ROPE_EVEN,
    TABLE_KEPT,
    VECTORISED,
)
from autograder.core import Case
from grader.casework import random_rotation_table, reference_rotation


def _measured_lengths(
    g: torch.Generator, hidden: bool, visible: tuple[int, int], ratio: int
) -> tuple[int, int]:
    """The visible case's two lengths, or a short one drawn from 12 .. 32 and a long one about
    `ratio` times it (a T x T tensor then grows `ratio` times faster than T)."""
    if not hidden:
        return visible
    short = int(torch.randint(12, 33, (), generator=g))
    return short, ratio * short + int(torch.randint(0, ratio, (), generator=g))


# B, T, D, H, W: odd windows with T below, equal to and above W. The first even shape has Dh == W,
# where einsum subscripts swapping the window and head_dim run (and give other values) instead of
# raising. Every Dh is even, so that a layer that always rotates can be given a table.
ODD_SHAPES = [(1, 10, 8, 2, 3), (2, 7, 12, 3, 5), (1, 3, 8, 2, 5), (2, 5, 8, 2, 5), (1, 9, 12, 2, 5)]


EVEN_SHAPES = [(2, 9, 8, 2, 4), (1, 3, 8, 2, 6), (1, 6, 12, 2, 6)]


def _layer_inputs(g: torch.Generator, b: int, t: int, d: int, h: int, w: int) -> dict:
    """The input and the weights a case loads into qkv_linear and out (nn.Linear's init scale)."""
    bound = d**-0.5
    weights = [
        torch.rand(shape, generator=g) * 2 * bound - bound for shape in ((3 * d, d), (3 * d,), (d, d), (d,))
    ]
    x = torch.randn(b, t, d, generator=g)
    return {"x": x, "hidden_size": d, "num_heads": h, "window_size": w, "weights": weights}


def layer_cases(g: torch.Generator, hidden: bool) -> list[Case]:
    odd, even = list(ODD_SHAPES), list(EVEN_SHAPES)
    if hidden:
        for shapes, parity in ((odd, 1), (even, 0)):
            for _ in range(2):
                h = int(torch.randint(1, 5, (), generator=g))
                d = h * 2 * int(torch.randint(1, 9, (), generator=g))
                w = 2 * int(torch.randint(1, 8, (), generator=g)) + parity
                t = int(torch.randint(1, 3 * w, (), generator=g))
                shapes.append((int(torch.randint(1, 4, (), generator=g)), t, d, h, w))
    cases = [
        Case(f"B={b} T={t} D={d} H={h} W={w}", _layer_inputs(g, b, t, d, h, w), concern=concern)
        for shapes, concern in ((odd, ODD), (even, EVEN))
        for b, t, d, h, w in shapes
    ]
    return [*cases, _layer_at_two_lengths(g, hidden)]


def _layer_at_two_lengths(g: torch.Generator, hidden: bool) -> Case:
    """The measured run. Its outputs must be right too, so its shapes show every mistake of the odd
    windows (the core): two heads or more (with one, Dh == D hides a scale by sqrt(D), a split per
    projection and heads merged in the wrong order) and an odd W of 3 or more (with W = 1 there is
    no padding to put on the wrong side). Never an even W: a layer that fails those loses their own
    share, not this one as well."""
    b, d, h, w = (1, 8, 2, 5)
    if hidden:
        b, h = int(torch.randint(1, 3, (), generator=g)), int(torch.randint(2, 4, (), generator=g))
        w = 2 * int(torch.randint(1, 5, (), generator=g)) + 1
        d = h * 2 * int(torch.randint(1, 5, (), generator=g))
    short, long = _measured_lengths(g, hidden, (16, 64), 8)
    inputs = {**_layer_inputs(g, b, short, d, h, w), "lengths": (short, long)}
    inputs["x_long"] = torch.randn(b, long, d, generator=g)
    return Case(f"B={b} D={d} H={h} W={w} run at T={short} and T={long}", inputs, concern=VECTORISED)


MASK_SHAPES = [(6, 3), (5, 5), (3, 7), (8, 4), (1, 1), (4, 1)]  # T, W


def mask_cases(g: torch.Generator, hidden: bool) -> list[Case]:
    shapes = list(MASK_SHAPES)
    if hidden:
        shapes += [
            (int(torch.randint(1, 40, (), generator=g)), int(torch.randint(1, 12, (), generator=g)))
            for _ in range(3)
        ]
    cases = [
        Case(
            f"T={t} W={w}{', causal' if causal else ''}",
            {"seq_length": t, "window_size": w, "causal": causal},
            concern=concern,
        )
        for causal, concern in ((False, CENTRED), (True, CAUSAL))
        for t, w in shapes
    ]
    # The measured run's masks must be right too: a centred window (the core; a wrong causal one
    # loses the causal share, not this one as well) of an even W, where the extra key can be put on
    # the wrong side.
    w = 4
    if hidden:
        w = 2 * int(torch.randint(1, 6, (), generator=g))
    short, long = _measured_lengths(g, hidden, (16, 64), 8)
    inputs = {"seq_length": short, "window_size": w, "causal": False, "lengths": (short, long)}
    name = f"W={w} built for T={short} and T={long}"
    return [*cases, Case(name, inputs, concern=VECTORISED)]


# B, H, T, Dh, W
ATTENTION_SHAPES = [(1, 1, 6, 4, 3), (2, 3, 9, 8, 5), (1, 2, 3, 4, 7), (2, 1, 8, 4, 4), (1, 2, 1, 4, 3)]


def _qkv(g: torch.Generator, b: int, h: int, t: int, dh: int) -> dict:
    q, k, v = torch.randn(3, b, h, t, dh, generator=g)
    return {"queries": q, "keys": k, "values": v}


def _random_attention_shape(g: torch.Generator, max_window: int) -> tuple[int, ...]:
    w = int(torch.randint(1, max_window + 1, (), generator=g))
    b, h, t = (int(torch.randint(1, n, (), generator=g)) for n in (3, 4, 5 * w + 9))
    return b, h, t, 2 * int(torch.randint(1, 9, (), generator=g)), w


def attention_cases(
    g: torch.Generator,
    hidden: bool,
    shapes: list,
    max_window: int,
    two_lengths: tuple[int, int, int],
    measured_concerns: tuple[str, ...],
) -> list[Case]:
    """Centred and causal cases of each (B, H, T, Dh, W), then a run at two lengths for each
    measured concern: visible, B=1 H=2 Dh=8 and `two_lengths` (W and the two lengths); hidden, all
    drawn. Each run has inputs of its own, so that no answer can replay one run's result in
    another (a T x T run counted for its operations, a copy of its result for its memory)."""
    shapes = list(shapes) + ([_random_attention_shape(g, max_window) for _ in range(3)] if hidden else [])
    cases = [
        Case(
            f"B={b} H={h} T={t} Dh={dh} W={w}{', causal' if causal else ''}",
            {**_qkv(g, b, h, t, dh), "window_size": w, "causal": causal},
            concern=concern,
        )
        for causal, concern in ((False, CENTRED), (True, CAUSAL))
        for b, h, t, dh, w in shapes
    ]
    return cases + [
        _attention_at_two_lengths(g, hidden, two_lengths, concern) for concern in measured_concerns
    ]


def _attention_at_two_lengths(
    g: torch.Generator, hidden: bool, two_lengths: tuple[int, int, int], concern: str
) -> Case:
    """A measured run. Its outputs must be right too, so it is a case of the core, the centred window
    (a wrong causal window loses the causal share, not this one as well), with W >= 2, where padded
    slots exist to be masked or not."""
    w, short, long = two_lengths
    b, h, dh = (1, 2, 8)
    # Hidden: B * H * Dh (32 at most) far below the long length (192 at least), where a (T, T)
    # tensor is then the largest.
    if hidden:
        b, h, w = (int(torch.randint(low, high, (), generator=g)) for low, high in ((1, 3), (1, 3), (2, 13)))
        dh = 4 * int(torch.randint(1, 3, (), generator=g))
    short, long = _measured_lengths(g, hidden, (short, long), 16)
    inputs = {**_qkv(g, b, h, short, dh), "window_size": w, "causal": False, "lengths": (short, long)}
    inputs["long"] = _qkv(g, b, h, long, dh)
    run = f"B={b} H={h} Dh={dh} W={w} run at T={short} and T={long}"
    return Case(f"{run}, {concern}", inputs, concern=concern)


def masked_window_cases(g: torch.Generator, hidden: bool) -> list[Case]:
    measured = (VECTORISED, LINEAR_MEMORY)
    return attention_cases(g, hidden, ATTENTION_SHAPES, 11, (5, 16, 256), measured)


# B, T, D, H, W, C: T above the window (a table for W rows fails there) and below it.
ROPE_SHAPES = [(1, 12, 8, 2, 5, 16), (2, 4, 8, 2, 5, 10), (2, 9, 12, 3, 3, 9), (1, 10, 8, 1, 4, 20)]


def _random_rope_shape(g: torch.Generator) -> tuple[int, ...]:
    h = int(torch.randint(1, 4, (), generator=g))
    d = h * 2 * int(torch.randint(1, 6, (), generator=g))
    w = int(torch.randint(2, 9, (), generator=g))
    t = int(torch.randint(w + 1, 4 * w, (), generator=g))
    b, extra = int(torch.randint(1, 3, (), generator=g)), int(torch.randint(0, 9, (), generator=g))
    return b, t, d, h, w, t + extra


def _rope_inputs(g: torch.Generator, b: int, t: int, d: int, h: int, w: int, c: int) -> dict:
    """A layer's case with a table of random frequencies, and a query and key for the RoPE alone."""
    inputs = {**_layer_inputs(g, b, t, d, h, w), "rotation_matrix": random_rotation_table(g, c, d // h // 2)}
    inputs["rope_q"], inputs["rope_k"] = torch.randn(2, 1, 1, min(t, c), d // h, generator=g)
    return inputs


def rope_cases(g: torch.Generator, hidden: bool) -> list[Case]:
    shapes = ROPE_SHAPES + ([_random_rope_shape(g) for _ in range(3)] if hidden else [])
    cases = [
        _rope_case(
            f"B={b} T={t} D={d} H={h} W={w} context={c}",
            _rope_inputs(g, b, t, d, h, w, c),
            ROPE_CORE if w % 2 else ROPE_EVEN,
        )
        for b, t, d, h, w, c in shapes
    ]
    inputs = {**_rope_inputs(g, 1, 12, 8, 2, 5, 16), "module_casts": ["bfloat16", "float32"]}
    name = "B=1 T=12 D=8 H=2 W=5 context=16, layer cast to bfloat16 and back"
    return [*cases, _rope_case(name, inputs, TABLE_KEPT)]


def _rope_case(name: str, inputs: dict, concern: str) -> Case:
    """The judge keeps the query the reference's RoPE rotates, to name a bug of the student's RoPE."""
    rotated = reference_rotation("03_sliding_window", inputs["rotation_matrix"], inputs["rope_q"])
    return Case(name, inputs, judge_only={"rope_rotated": rotated}, concern=concern)


BLOCKED_SHAPES = [(1, 2, 20, 8, 5), (2, 1, 7, 4, 9), (1, 1, 33, 4, 4), (1, 2, 1, 4, 3), (2, 2, 17, 8, 16)]


def blocked_cases(g: torch.Generator, hidden: bool) -> list[Case]:
    shapes = ATTENTION_SHAPES + BLOCKED_SHAPES
    measured = (VECTORISED, LINEAR_MEMORY, ONE_SDPA_CALL)
    return attention_cases(g, hidden, shapes, 40, (9, 32, 512), measured)


CASES = {
    "03.sliding_window": layer_cases,
    "03.window_mask": mask_cases,
    "03.masked_window": masked_window_cases,
    "03.rope_inside": rope_cases,
    "03.blocked_attention": blocked_cases,
}
