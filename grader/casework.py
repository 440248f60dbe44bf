"""What several notebooks' case generators share (solutions/*/cases.py): the activations' inputs
(00 and 05), random rotation tables and the reference rotation they are built from (03, 04, 08, 09);
and what their correct alternatives share (solutions/*/alternatives.py): `Answer`."""

from collections.abc import Callable

import torch

from autograder import reference
from autograder.checks._toolkit import AT_ZERO, LARGE, MODERATE
from autograder.core import Case

SLOPE_STEP = 1e-5  # h of the central difference (f(z + h) - f(z - h)) / 2h, in float64


LARGE_VALUES = [-1000.0, -100.0, -88.0, -20.0, 20.0, 88.0, 100.0, 1000.0]  # e^88.7 overflows float32


class Answer(tuple):
    """Several objects answering one check together, e.g. (MLP, train), with a name for test ids."""

    def __new__(cls, name, *objects):
        answer = super().__new__(cls, objects)
        answer.__name__ = name
        return answer


def _random_shape(g: torch.Generator) -> tuple[int, ...]:
    ndim = int(torch.randint(1, 4, (), generator=g))
    return tuple(int(d) for d in torch.randint(1, 8, (ndim,), generator=g))


def _activation_inputs(g: torch.Generator, hidden: bool) -> list[tuple[str, str, torch.Tensor]]:
    """(kind, name, z) of each case. No z of kind MODERATE or LARGE is exactly 0."""
    inputs = [
        (MODERATE, "24 values from -5.75 to 5.75 in steps of 0.5", torch.linspace(-5.75, 5.75, 24)),
        (MODERATE, "a (3, 4) matrix", torch.randn(3, 4, generator=g)),
        (AT_ZERO, "z = 0 among -2, -0.5, 0.5 and 2", torch.tensor([-2.0, -0.5, 0.0, 0.5, 2.0])),
        (LARGE, f"large |z|: {', '.join(f'{v:g}' for v in LARGE_VALUES)}", torch.tensor(LARGE_VALUES)),
    ]
    if hidden:
        for _ in range(3):
            shape, scale = _random_shape(g), float(10 ** torch.empty(()).uniform_(-1, 1, generator=g))
            z = torch.randn(shape, generator=g) * scale
            inputs.append((MODERATE, f"random z of shape {shape}, |z| ~ {scale:.3g}", z))
        shape = _random_shape(g)
        z = torch.randn(shape, generator=g)
        z[torch.rand(shape, generator=g) < 0.4] = 0.0
        z.view(-1)[0] = 0.0
        inputs.append((AT_ZERO, f"random z of shape {shape}, some entries 0", z))
        shape, scale = _random_shape(g), float(10 ** torch.empty(()).uniform_(2, 3, generator=g))
        z = torch.randn(shape, generator=g) * scale
        inputs.append((LARGE, f"random z of shape {shape}, |z| ~ {scale:.3g}", z))
    return inputs


def activation_cases(concerns: dict[str, str]) -> Callable[[torch.Generator, bool], list[Case]]:
    """The cases of one activation check; `concerns` maps a kind of input to the concern it grades."""

    def cases(g: torch.Generator, hidden: bool) -> list[Case]:
        result = []
        for kind, name, z in _activation_inputs(g, hidden):
            slope = torch.randn(16, generator=g, dtype=torch.float64) * 4
            slope = slope + slope.sign() * 0.01  # keep z +- h away from the kink at 0
            inputs = {"z": z}
            if kind != LARGE:  # slopes are at moderate z: the large-z part judges large z alone
                inputs |= {"z_slope": slope, "h": SLOPE_STEP}
            result.append(Case(f"{name}, float32", inputs, concern=concerns.get(kind, "")))
        return result

    return cases


def random_rotation_table(g: torch.Generator, context: int, half: int) -> torch.Tensor:
    """e^(i p f_k) for random frequencies f_k: a valid table that is not the reference's, so a
    forward that rebuilds its own table instead of using the one it is given fails."""
    freqs = torch.rand(half, generator=g) * 1.5 + 0.01
    angles = torch.outer(torch.arange(context, dtype=torch.float32), freqs)
    return torch.polar(torch.ones_like(angles), angles)


def reference_rotation(
    assignment: str, rotation_matrix: torch.Tensor, x: torch.Tensor, start_pos: int | None = None
) -> torch.Tensor:
    """x rotated by the reference's RoPE of `assignment`, in float32: what a property compares a
    student's rotation with, made with the cases and kept judge-only. The reference is on the
    judge's side only (a student's copy has none), so that no RoPE of the package's can be wrapped
    into an answer."""
    rope = reference.namespace(assignment)["RoPE"](rotation_matrix)
    return (rope(x, x) if start_pos is None else rope(x, x, start_pos))[0].float()
