"""Notebook 06's case generators, CASES by check name: the grader's side only (autograder/reference.py)."""

import torch
from torch import Tensor

from autograder.checks.moe import (
    BIAS_UPDATE,
    BIASED_SELECTION,
    DIFFERENTIABLE,
    GRADIENT,
    KEPT,
    KEPT_ONLY,
    KEPT_OUTPUT,
    LARGE_LOGITS,
    NO_BIAS,
    ONE_CALL,
    PROBE_ROWS,
    REGISTERED,
    UNBIASED_WEIGHTS,
    capacity,
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


# N D E K c: in the first three c N K / E is not a whole number (a capacity floored shows), and the
# router leans towards the first experts, so that they overflow; then C = 1, and two with C = N,
# where nothing is dropped. Capacity factors are dyadic: c N K / E is then exact in float.
CAPACITY_SHAPES = [
    (12, 6, 4, 2, 1.25),
    (10, 6, 4, 1, 1.25),
    (9, 5, 3, 2, 0.75),
    (8, 4, 8, 2, 0.5),
    (6, 4, 3, 3, 1.0),
    (7, 5, 4, 2, 2.0),
]
CAPACITY_FACTORS = (0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 2.0)
PARTS = {KEPT: "kept", KEPT_OUTPUT: "output", KEPT_ONLY: "calls"}
NAMED = {KEPT: "", KEPT_OUTPUT: ": the output", KEPT_ONLY: ": calls per expert"}


def _capacity_inputs(g: torch.Generator, n: int, d: int, e: int, k: int, c: float) -> dict:
    lean = torch.linspace(1.5, 0.0, e)  # the first experts are favoured
    values, selected = torch.topk(torch.randn(n, e, generator=g) + lean, k)
    return {
        "x": torch.randn(n, d, generator=g),
        "selected_experts": selected,
        "weights": torch.softmax(values, dim=-1),
        "experts": [
            (torch.randn(d, d, generator=g) * d**-0.5, torch.randn(d, generator=g) * 0.5) for _ in range(e)
        ],
        "capacity_factor": c,
    }


def _capacity_name(inputs: dict) -> str:
    n, k = inputs["selected_experts"].shape
    e, c = len(inputs["experts"]), inputs["capacity_factor"]
    limit = capacity(c, n, k, e)
    dropped = int(
        (torch.bincount(inputs["selected_experts"].flatten(), minlength=e) - limit).clamp(min=0).sum()
    )
    return f"{n} tokens, E = {e}, K = {k}, capacity factor {c} (C = {limit}), {dropped} pair(s) over capacity"


def capacity_cases(g: torch.Generator, hidden: bool) -> list[Case]:
    shapes = {KEPT: list(CAPACITY_SHAPES), KEPT_OUTPUT: CAPACITY_SHAPES[:3] + CAPACITY_SHAPES[4:5]}
    shapes[KEPT_ONLY] = CAPACITY_SHAPES[:2]
    if hidden:
        shapes[KEPT].append((1, 6, 5, 2, 0.5))  # N = 1: C = 1 holds the token's two choices
        for _ in range(3):
            e = int(torch.randint(2, 10, (), generator=g))
            n, d = int(torch.randint(2, 40, (), generator=g)), int(torch.randint(2, 10, (), generator=g))
            c = CAPACITY_FACTORS[int(torch.randint(0, len(CAPACITY_FACTORS), (), generator=g))]
            shape = (n, d, e, int(torch.randint(1, e + 1, (), generator=g)), c)
            for concern in shapes:
                shapes[concern].append(shape)
    cases = []
    for concern, chosen in shapes.items():
        for shape in chosen:
            inputs = {**_capacity_inputs(g, *shape), "part": PARTS[concern]}
            cases.append(Case(_capacity_name(inputs) + NAMED[concern], inputs, concern=concern))
    return cases


Z_SHAPES = [(2, 6, 4), (1, 10, 8), (12, 3), (2, 3, 5, 6)]  # (..., E): any leading dimensions


def _z_case(g: torch.Generator, shape: tuple[int, ...], scale: float, offset: float, what: str = "") -> Case:
    logits = torch.randn(*shape, generator=g) * scale + offset
    name = f"router logits of shape {shape}, about {offset:g} +- {scale:g}{what}"
    return Case(name, {"router_logits": logits}, concern=LARGE_LOGITS if abs(offset) >= 100 else "")


def z_loss_cases(g: torch.Generator, hidden: bool) -> list[Case]:
    shapes = list(Z_SHAPES)
    if hidden:
        shapes.append((3, 1, 5))  # T = 1, always among the hidden cases
        for _ in range(2):
            e = int(torch.randint(2, 12, (), generator=g))
            shapes.append(
                (int(torch.randint(1, 4, (), generator=g)), int(torch.randint(1, 20, (), generator=g)), e)
            )
    # Offsets of either sign: a log-sum-exp far from 0 is what the square penalises.
    cases = [_z_case(g, shape, 2.0, (-1.0) ** i * 1.5) for i, shape in enumerate(shapes)]
    cases.append(_z_case(g, (2, 5, 8), 3.0, 100.0, ": exp overflows float32"))
    cases.append(_z_case(g, (12, 4), 3.0, -120.0, ": exp underflows to 0"))
    if hidden:
        cases.append(_z_case(g, (1, 7, 6), 20.0, 300.0, ": exp overflows float32"))
    gradient = _z_case(g, (2, 6, 4), 2.0, 1.0, ": the gradient")
    cases.append(Case(gradient.name, {**gradient.inputs, "gradient": True}, concern=DIFFERENTIABLE))
    return cases


ROUTING_BIAS_SHAPES = [(8, 6, 2), (10, 4, 1), (6, 8, 3)]  # N E K
ROUTING_PARTS = {BIASED_SELECTION: "selection", UNBIASED_WEIGHTS: "weights"}


def _affinities(g: torch.Generator, n: int, e: int) -> Tensor:
    """DeepSeek-V3's sigmoid affinities, leaning towards the first experts."""
    return torch.sigmoid(torch.randn(n, e, generator=g) * 1.5 + torch.linspace(1.0, -1.0, e))


def _routing_bias_case(
    g: torch.Generator, concern: str, n: int, e: int, k: int, bias: Tensor | None = None, what: str = ""
) -> Case:
    inputs = {
        "scores": _affinities(g, n, e),
        "bias": torch.randn(e, generator=g) * 0.3 if bias is None else bias,
        "k": k,
        "part": ROUTING_PARTS[concern],
    }
    return Case(f"{n} tokens, E = {e}, top K = {k}{what}", inputs, concern=concern)


def _update_case(g: torch.Generator, n: int, e: int, k: int, gamma: float) -> Case:
    inputs = {
        "bias": torch.randn(e, generator=g) * 0.1,
        "selected_experts": torch.topk(_affinities(g, n, e), k).indices,
        "gamma": gamma,
        "part": "update",
    }
    return Case(f"{n} tokens, E = {e}, K = {k}, gamma = {gamma:g}", inputs, concern=BIAS_UPDATE)


def routing_bias_cases(g: torch.Generator, hidden: bool) -> list[Case]:
    shapes = list(ROUTING_BIAS_SHAPES)
    if hidden:
        for _ in range(2):
            e = int(torch.randint(2, 12, (), generator=g))
            n = int(torch.randint(1, 30, (), generator=g))
            shapes.append((n, e, int(torch.randint(1, e + 1, (), generator=g))))
    cases = [_routing_bias_case(g, concern, *shape) for concern in ROUTING_PARTS for shape in shapes]
    # A bias of 1 on the last, least favoured expert puts it in every token's top K (scores lie in (0, 1)).
    edges = [
        (torch.tensor([0.0, 0.0, 0.0, 0.0, 0.0, 1.0]), ", the last expert's bias +1: chosen by every token")
    ]
    if hidden:
        edges.append((torch.zeros(5), ", no bias: plain top-K"))
    for bias, what in edges:
        cases += [_routing_bias_case(g, concern, 7, bias.numel(), 2, bias, what) for concern in ROUTING_PARTS]
    gammas = (1e-3, 1e-2)
    cases += [_update_case(g, n, e, k, gammas[i % 2]) for i, (n, e, k) in enumerate(shapes)]
    # Loads 4, 2, 2, 0 against a mean of 2: one expert over, two exactly at the mean, one never chosen.
    at_the_mean = {
        "bias": torch.tensor([0.05, -0.02, 0.0, 0.01]),
        "selected_experts": torch.tensor([[0, 1], [0, 1], [0, 2], [2, 0]]),
        "gamma": 1e-3,
        "part": "update",
    }
    cases.append(
        Case("loads 4, 2, 2, 0 against a mean of 2, gamma = 0.001", at_the_mean, concern=BIAS_UPDATE)
    )
    return cases


CASES = {
    "06.feed_forward": expert_cases,
    "06.moe_init": init_cases,
    "06.moe_routing": routing_cases,
    "06.load_balancing": balance_cases,
    "06.sorted_dispatch": dispatch_cases,
    "06.capacity_dispatch": capacity_cases,
    "06.router_z_loss": z_loss_cases,
    "06.biased_routing": routing_bias_cases,
}
