"""Notebook 06's case generators, CASES by check name: the grader's side only (autograder/reference.py)."""

import torch
from torch import Tensor

from autograder.checks.moe import (
    DIFFERENTIABLE,
    GRADIENT,
    NO_BIAS,
    ONE_CALL,
    PROBE_ROWS,
    REGISTERED,
)
from autograder.core import Case

EXPERT_SHAPES = [((2, 3), 8, 12), ((5,), 6, 16), ((1, 4), 16, 24)]  # (batch dimensions, D, F)


def _expert_inputs(g: torch.Generator, batch: tuple[int, ...], d: int, f: int) -> dict:
    return {
        "x": torch.randn(*batch, d, generator=g),
        "w1": torch.randn(f, d, generator=g) * 2 * d**-0.5,
        "w3": torch.randn(f, d, generator=g) * d**-0.5,
        "w2": torch.randn(d, f, generator=g) * f**-0.5,
    }


def expert_cases(g: torch.Generator, hidden: bool) -> list[Case]:
    shapes = list(EXPERT_SHAPES)
    if hidden:
        for _ in range(2):
            d = int(torch.randint(2, 20, (), generator=g))
            shapes.append(
                (
                    (2, int(torch.randint(1, 6, (), generator=g))),
                    d,
                    d + int(torch.randint(1, 20, (), generator=g)),
                )
            )
    cases = [
        Case(f"x of shape {(*batch, d)}, FeedForward({d}, {f})", _expert_inputs(g, batch, d, f))
        for batch, d, f in shapes
    ]
    # The run stage sees the inputs, not the case's concern: "count_biases" tells it what to count,
    # in an expert of every size the other cases build.
    sizes = [(d, f) for _, d, f in shapes]
    name = f"the parameters of FeedForward{', FeedForward'.join(map(str, sizes))}"
    return [*cases, Case(name, {"count_biases": sizes}, concern=NO_BIAS)]


INIT_SHAPES = [(8, 12, 4, 2), (6, 10, 3, 1)]  # D, F, E, K


def init_cases(g: torch.Generator, hidden: bool) -> list[Case]:
    shapes = list(INIT_SHAPES)
    if hidden:
        d, e = int(torch.randint(2, 16, (), generator=g)), int(torch.randint(2, 9, (), generator=g))
        shapes.append((d, d + 4, e, int(torch.randint(1, e + 1, (), generator=g))))
    cases = []
    for d, f, e, k in shapes:
        inputs = {"args": (d, f, e, k), "x": torch.randn(PROBE_ROWS, d, generator=g)}
        name = f"MoeLayer({d}, {f}, {e}, {k})"
        cases.append(Case(name, {**inputs, "part": "shapes"}))
        cases.append(Case(f"{name}: its parameters", {**inputs, "part": "registration"}, concern=REGISTERED))
    return cases


ROUTING_SHAPES = [
    (2, 5, 8, 4, 2),
    (1, 7, 6, 8, 2),
    (2, 4, 8, 4, 1),
    (1, 6, 8, 3, 3),
    (1, 4, 8, 1, 1),
]  # B T D E K


def _routing_inputs(g: torch.Generator, b: int, t: int, d: int, e: int, k: int) -> dict:
    return {
        "args": (d, d + 4, e, k),  # d_ff is any size: the check's experts replace the student's
        "x": torch.randn(b, t, d, generator=g),
        "gate": torch.randn(e, d, generator=g) * 1.5 * d**-0.5,
        "experts": [
            (torch.randn(d, d, generator=g) * d**-0.5, torch.randn(d, generator=g) * 0.5) for _ in range(e)
        ],
    }


def _routing_name(b: int, t: int, d: int, e: int, k: int) -> str:
    one = ": one expert, weight 1" if e == k == 1 else (": every expert" if e == k else "")
    return f"x of shape ({b}, {t}, {d}), E = {e} experts, top K = {k}{one}"


def routing_cases(g: torch.Generator, hidden: bool) -> list[Case]:
    shapes = list(ROUTING_SHAPES)
    gradient_shapes = [(2, 5, 8, 4, 2)]
    if hidden:
        shapes.append((3, 1, 6, 5, 2))  # T = 1, one token per sequence, always among the hidden cases
        for _ in range(3):
            d, e = int(torch.randint(2, 12, (), generator=g)), int(torch.randint(2, 10, (), generator=g))
            b, t = int(torch.randint(1, 4, (), generator=g)), int(torch.randint(1, 12, (), generator=g))
            shapes.append((b, t, d, e, int(torch.randint(1, e + 1, (), generator=g))))
        gradient_shapes.append((1, 9, 6, 5, 2))
    cases = [Case(_routing_name(*shape), _routing_inputs(g, *shape)) for shape in shapes]
    for shape in gradient_shapes:
        inputs = _routing_inputs(g, *shape)
        inputs["probe"] = torch.randn(shape[:3], generator=g)  # d(sum(probe * out)) / d(gate weight)
        cases.append(Case(f"{_routing_name(*shape)}: the gate's gradient", inputs, concern=GRADIENT))
    return cases


BALANCE_SHAPES = [(2, 6, 4, 2), (1, 10, 8, 2), (3, 5, 3, 1)]  # B, T, E, K


def _balance_inputs(logits: Tensor, k: int) -> dict:
    return {"router_logits": logits, "selected_experts": torch.topk(logits, k).indices}


def balance_cases(g: torch.Generator, hidden: bool) -> list[Case]:
    shapes = list(BALANCE_SHAPES)
    if hidden:
        shapes.append((2, 1, 5, 2))  # T = 1, always among the hidden cases
        for _ in range(2):
            e = int(torch.randint(2, 12, (), generator=g))
            shapes.append(
                (
                    int(torch.randint(1, 4, (), generator=g)),
                    int(torch.randint(1, 20, (), generator=g)),
                    e,
                    int(torch.randint(1, e + 1, (), generator=g)),
                )
            )
    cases = [
        Case(
            f"router logits of shape ({b}, {t}, {e}), top {k}",
            _balance_inputs(torch.randn(b, t, e, generator=g) * 2, k),
        )
        for b, t, e, k in shapes
    ]
    uniform = torch.zeros(2, 4, 4)
    selected = torch.arange(16).reshape(2, 4, 2) % 4  # each expert picked equally often
    cases.append(
        Case(
            "a uniform router: all logits 0, (2, 4, 4), top 2",
            {"router_logits": uniform, "selected_experts": selected, "uniform": True},
        )
    )
    collapsed = torch.randn(12, 4, generator=g)
    collapsed[:, 0] += 8.0  # every token prefers expert 0
    cases.append(
        Case(
            "a collapsed router: every token prefers expert 0, (12, 4), top 1", _balance_inputs(collapsed, 1)
        )
    )
    for b, t, e, k in shapes[:1]:
        inputs = _balance_inputs(torch.randn(b, t, e, generator=g) * 2, k)
        cases.append(
            Case(
                f"router logits of shape ({b}, {t}, {e}), top {k}: the gradient",
                {**inputs, "gradient": True},
                concern=DIFFERENTIABLE,
            )
        )
    return cases


DISPATCH_SHAPES = [(10, 8, 4, 2), (7, 6, 8, 2), (5, 8, 3, 1), (6, 4, 3, 3), (3, 8, 8, 2)]  # N D E K


def dispatch_cases(g: torch.Generator, hidden: bool) -> list[Case]:
    shapes = list(DISPATCH_SHAPES)
    if hidden:
        shapes.append((1, 6, 5, 2))  # N = 1, always among the hidden cases
        for _ in range(3):
            e = int(torch.randint(2, 10, (), generator=g))
            n, d = int(torch.randint(1, 40, (), generator=g)), int(torch.randint(2, 12, (), generator=g))
            shapes.append((n, d, e, int(torch.randint(1, e + 1, (), generator=g))))
    cases = []
    for n, d, e, k in shapes:
        name, inputs = _dispatch_inputs(g, n, d, e, k)
        cases.append(Case(name, inputs))
        # Inputs of its own, and the output compared too: the counts are earned by a right answer.
        name, inputs = _dispatch_inputs(g, n, d, e, k)
        cases.append(Case(f"{name}: calls per expert", {**inputs, "count_calls": True}, concern=ONE_CALL))
    return cases


def _dispatch_inputs(g: torch.Generator, n: int, d: int, e: int, k: int) -> tuple[str, dict]:
    values, selected = torch.topk(torch.randn(n, e, generator=g), k)
    inputs = {
        "x": torch.randn(n, d, generator=g),
        "selected_experts": selected,
        "weights": torch.softmax(values, dim=-1),
        "experts": [
            (torch.randn(d, d, generator=g) * d**-0.5, torch.randn(d, generator=g) * 0.5) for _ in range(e)
        ],
    }
    idle = e - len(selected.unique())
    name = f"{n} tokens of {d} features, E = {e}, K = {k}" + (
        f", {idle} expert(s) with no token" if idle else ""
    )
    return name, inputs


CASES = {
    "06.feed_forward": expert_cases,
    "06.moe_init": init_cases,
    "06.moe_routing": routing_cases,
    "06.load_balancing": balance_cases,
    "06.sorted_dispatch": dispatch_cases,
}
