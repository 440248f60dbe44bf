"""Notebook 00's case generators, CASES by check name: the grader's side only (autograder/reference.py)."""

import torch

from autograder.checks._toolkit import AT_ZERO, LARGE
from autograder.checks.warmup import (
    RELU,
    SIGMOID,
    SILU,
)
from autograder.core import Case
from autograder.playground import spirals_split
from grader.casework import activation_cases

NEURON_SHAPES = [(5, 3, 1.0), (1, 1, 1.0), (4, 6, 20.0), (8, 2, 0.1)]  # N, F, scale of w (20: saturated)


def neuron_data(g: torch.Generator, n: int, f: int, scale: float) -> dict:
    return {
        "x": torch.randn(n, f, generator=g),
        "w": torch.randn(f, generator=g) * scale,
        "b": torch.randn((), generator=g),
    }


def _random_shapes(g: torch.Generator, hidden: bool) -> list[tuple[int, int, float]]:
    if not hidden:
        return []
    shapes = []
    for _ in range(3):
        n, f = (int(torch.randint(2, m, (), generator=g)) for m in (40, 12))
        shapes.append((n, f, float(10 ** torch.empty(()).uniform_(-1, 1, generator=g))))
    return shapes


def neuron_cases(g: torch.Generator, hidden: bool) -> list[Case]:
    return [
        Case(f"x of shape ({n}, {f}), |w| ~ {s:g}", neuron_data(g, n, f, s))
        for n, f, s in NEURON_SHAPES + _random_shapes(g, hidden)
    ]


MSE_SIZES = [6, 1, 9, 3]


def mse_cases(g: torch.Generator, hidden: bool) -> list[Case]:
    sizes = MSE_SIZES + ([int(torch.randint(2, 200, (), generator=g)) for _ in range(3)] if hidden else [])
    cases = []
    for n in sizes:
        prediction = torch.rand(n, generator=g)
        target = (torch.rand(n, generator=g) > 0.5).float()
        inputs = {"prediction": prediction, "target": target}
        cases.append(Case(f"{n} predictions in [0, 1], 0/1 targets", inputs))
    return cases


STEP_SHAPES = [(6, 3, 1.0, 0.5), (1, 2, 1.0, 0.1), (10, 4, 3.0, 1.0), (5, 1, 0.5, 2.0)]  # N, F, |w|, lr


def step_cases(g: torch.Generator, hidden: bool) -> list[Case]:
    shapes = list(STEP_SHAPES)
    if hidden:
        for n, f, scale in _random_shapes(g, hidden):
            shapes.append((n, f, scale, float(10 ** torch.empty(()).uniform_(-2, 0.5, generator=g))))
    cases = []
    for n, f, scale, lr in shapes:
        data = neuron_data(g, n, f, scale)
        data["y"] = (torch.rand(n, generator=g) > 0.5).float()
        data["lr"] = lr
        name = f"x of shape ({n}, {f}), 0/1 targets y, |w| ~ {scale:g}, lr={lr:g}"
        cases.append(Case(name, data, judge_only={"autograd move": _autograd_move(data)}))
    return cases


def _autograd_move(data: dict) -> torch.Tensor:
    """How much autograd's step moves (w, b), as one (F + 1,) float64 vector.

    Computed with the case and carried in it, not computed when judging: the release leaves out
    what only the case generators use, and a correct step anywhere else would ship with it.
    """
    w, b = data["w"].clone().requires_grad_(), data["b"].clone().requires_grad_()
    with torch.enable_grad():
        loss = (torch.sigmoid(data["x"] @ w + b) - data["y"]).pow(2).mean()
        grad_w, grad_b = torch.autograd.grad(loss, (w, b))
    new_w, new_b = (w - data["lr"] * grad_w).detach(), (b - data["lr"] * grad_b).detach()
    return torch.cat([new_w - data["w"], (new_b - data["b"]).reshape(1)]).double()


SPIRALS = {"width": 48, "depth": 2, "activation": "relu", "steps": 200, "lr": 0.03}


def spirals_cases(g: torch.Generator, hidden: bool) -> list[Case]:
    cases = []
    for _ in range(2 if hidden else 1):
        seed = int(torch.randint(0, 2**31 - 1, (), generator=g))
        x_train, y_train, x_test, y_test = spirals_split(g)
        name = (
            f"two spirals, {len(x_train)} training and {len(x_test)} held-out points; "
            f"MLP({SPIRALS['width']}, {SPIRALS['depth']}, '{SPIRALS['activation']}') trained for "
            f"{SPIRALS['steps']} steps at lr={SPIRALS['lr']} after torch.manual_seed({seed})"
        )
        inputs = {**SPIRALS, "seed": seed, "x_train": x_train, "y_train": y_train, "x_test": x_test}
        cases.append(Case(name, inputs, judge_only={"y_test": y_test}))
    return cases


CASES = {
    "00.neuron": neuron_cases,
    "00.mse_loss": mse_cases,
    "00.gradient_step": step_cases,
    "00.spirals": spirals_cases,
    "00.sigmoid": activation_cases({LARGE: SIGMOID.concerns[1].name}),
    "00.relu": activation_cases({AT_ZERO: RELU.concerns[1].name}),
    "00.silu": activation_cases({LARGE: SILU.concerns[1].name}),
}
