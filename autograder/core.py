"""The three stages of a check: cases (trusted) -> run (untrusted) -> judge (trusted).

A Check holds the last two; its cases are drawn on the grader's side, by the generator that
solutions/<assignment>/cases.py gives the check's name (reference.case_generator), so that no
student's copy holds them.

A check never compares a student's object with the reference inside one function: `run`
is the only code that touches student objects, and what it returns is plain data (a dict
of tensors, or a sentence saying why there is none). `judge` sees that data, the cases,
and the expectations (the reference's outputs on the same cases, and the outputs of each
known mistake), and nothing else. That is what lets the grader run stage 2 in another
process and judge in its own.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import inspect
import io
import math
import re
import sys
import traceback
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import torch
import torch.utils._pytree as pytree
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

Tensor = torch.Tensor
Outputs = dict[str, Tensor]
# What stage 2 hands back per case: the outputs, or a sentence saying why there are none (the
# error the student's code raised, or the library call it made in place of an answer).
RunResult = Outputs | str

LOOKS_LIKE = "  Looks like: "  # the diagnosis line of a failed part: a known mistake and what to change
PROPERTY_FAILS = "  Property "  # a line naming a property that the failing case breaks too

# One table of tolerances, as tight as each dtype allows for a correct implementation that
# orders its operations differently (einsum vs matmul, rsqrt vs 1/sqrt, complex vs 2x2).
TOLERANCES: dict[torch.dtype, tuple[float, float]] = {  # dtype: (rtol, atol)
    torch.float64: (1e-10, 1e-10),
    torch.float32: (1e-5, 1e-5),
    torch.complex64: (1e-5, 1e-5),
    torch.float16: (1e-3, 1e-3),
    torch.bfloat16: (1.6e-2, 1e-2),
}
# What a property (the judge's own test of one output, e.g. "rows sum to 1") allows, by what the
# values went through in float32. Beside TOLERANCES, the one place a check's thresholds are set.
ROUNDING_GAP = 1e-6  # one operation, or an identity that holds to the last bits (RoPE's row 0)
FLOAT32_GAP = 1e-5  # a short computation: a softmax row's sum, a modulus, a symmetric product
ACCUMULATED_GAP = 1e-4  # long reductions, or another kernel computing the same (SDPA, layer_norm)
COARSE_GAP = 1e-3  # products of whole tables (PE @ PE.T), a step's size against its scale


@dataclass(frozen=True)
class Case:
    """One input to a check: a short human name and the arguments (tensors and numbers).

    `judge_only` holds what the judge needs and the code under test must never see, such as
    the labels of a held-out split: stage 2 gets a copy without it, and the grader never
    writes it where a grading kernel could read it. `concern` names the part of the question
    the case grades (one of its check's `concerns`; "" is the first, the core).
    """

    name: str
    inputs: dict[str, Any]
    judge_only: dict[str, Any] = field(default_factory=dict)
    concern: str = ""


@dataclass(frozen=True)
class Concern:
    """A part of a question graded on its own cases, for its own share of the points.

    The first concern of a check is its core (float32 numerics, the homework's own cases);
    the others are what a solution can get wrong while the core is right: dtype handling,
    edge shapes the original homework left open. A solution right on the core and wrong on
    an edge loses only that edge's share.
    """

    name: str  # as the verdict shows it, e.g. "bfloat16 input"
    # Share of the test cell's points, relative to the other concerns. 0: advice only, for
    # what the course recommends but the original homework did not ask (reported, never failed).
    weight: float = 1.0


@dataclass(frozen=True)
class Mistake:
    """A known wrong implementation, recognised when the student's outputs equal its outputs."""

    name: str  # what the student did, e.g. "eps added outside the square root"
    advice: str  # what to change
    impl: Any  # an object with the same interface as the student's (class or function)


@dataclass(frozen=True)
class ErrorHint:
    """Advice for an exception whose text contains `fragment` (e.g. a broadcast failure)."""

    fragment: str
    advice: str


@dataclass(frozen=True)
class Property:
    """A property of the student's outputs alone, e.g. 'rotations keep norms'.

    `test(case, outputs)` returns None when it holds (or does not apply to the case) and a
    sentence saying by how much it fails otherwise.
    """

    name: str
    test: Callable[[Case, Outputs], str | None]
    concern: str = ""  # judged on the cases of this concern only; "": on every case
    # A diagnosis (of another question's answer, run on its own): named beside a case whose values
    # are wrong, never failing one whose values are right.
    names_only: bool = False


@dataclass(frozen=True)
class Finding:
    """What a failed concern came to, as data: the message says it in words; the class report
    counts these across a class (OUT/report.html)."""

    case: str = ""  # the first case that failed ("" where no case was judged)
    properties: tuple[str, ...] = ()  # the check's properties that case breaks
    mistakes: tuple[str, ...] = ()  # the known mistakes the diagnosis names
    unjudged: str = ""  # why nothing could be judged (the test cell raised NameError, ...), if so


@dataclass(frozen=True)
class Part:
    """One concern's share of a verdict."""

    concern: str
    passed: bool
    message: str
    max_points: float
    finding: Finding | None = None  # None when it passed

    @property
    def points(self) -> float:
        return self.max_points if self.passed else 0.0

    @property
    def graded(self) -> bool:
        return self.max_points > 0

    def __str__(self) -> str:
        mark = "passed" if self.passed else "FAILED"
        message = self.message.replace("\n", "\n    ")
        worth = f"{_points(self.points)}/{_points(self.max_points)}" if self.graded else "advice, no points"
        return f"- {self.concern} ({worth}): {mark}: {message}"


@dataclass(frozen=True)
class Verdict:
    """What a check says of one test: passed or not, why, and the points earned.

    A check of one concern earns all its points or none; a check of several has one `Part`
    per concern, and earns the points of the parts that pass."""

    check: str
    passed: bool
    message: str
    max_points: float = 0.0
    parts: tuple[Part, ...] = ()
    finding: Finding | None = None  # what failed, for a check of one concern (its parts' otherwise)

    @property
    def points(self) -> float:
        if self.parts:  # rounded: shares such as 1/3 + 4 * 1/6 sum to 0.9999999999999999
            return round(sum(part.points for part in self.parts), 9)
        return self.max_points if self.passed else 0.0

    def worth(self, max_points: float) -> Verdict:
        """The same verdict for a test cell worth `max_points`, split over its parts by weight."""
        total = sum(part.max_points for part in self.parts) or 1.0
        parts = tuple(replace(p, max_points=max_points * p.max_points / total) for p in self.parts)
        message = "\n".join(map(str, parts)) if parts else self.message
        return Verdict(self.check, self.passed, message, max_points, parts, self.finding)

    def record(self, hidden: bool) -> dict:
        """The verdict as data: points and findings for the class report (a part passed where it
        has no finding), and the words of each part (or of the whole, without parts) for the
        grading platforms' tests (grader/platforms/); the record keeps no words (`without_words`)."""
        return {
            "check": self.check,
            "hidden": hidden,
            "passed": self.passed,
            "points": self.points,
            "max_points": self.max_points,
            "finding": _asdict(self.finding),
            "message": "" if self.parts else self.message,
            "parts": [
                {
                    "concern": p.concern,
                    "passed": p.passed,
                    "points": p.points,
                    "max_points": p.max_points,
                    "finding": _asdict(p.finding),
                    "message": p.message,
                }
                for p in self.parts
            ],
        }

    def __str__(self) -> str:
        mark = "passed" if self.passed else "FAILED"
        separator = "\n" if self.parts else " "
        head = f"[{self.check}] {mark} ({_points(self.points)}/{_points(self.max_points)}):"
        return f"{head}{separator}{self.message}"


def without_words(record: dict) -> dict:
    """A verdict's record (`Verdict.record`) as the output folder keeps it: its data, not its words
    (those are in the feedback page)."""
    parts = [{k: v for k, v in part.items() if k != "message"} for part in record.get("parts", [])]
    return {**{k: v for k, v in record.items() if k != "message"}, "parts": parts}


def _points(value: float) -> str:
    return f"{value:.3g}"


def _asdict(finding: Finding | None) -> dict | None:
    return None if finding is None else asdict(finding)


@dataclass(frozen=True)
class Check:
    """One graded question. See the module docstring for the three stages."""

    name: str  # "<notebook>.<question>", e.g. "07.rmsnorm"
    # The public name the student implements, e.g. "RMSNorm"; or several, e.g. ("MLP", "train"),
    # which the test cell passes as one tuple and `run` receives as one.
    target: str | tuple[str, ...]
    run: Callable[[Any, Case], Outputs]  # calls the object under test on one case
    properties: Sequence[Property] = ()
    error_hints: Sequence[ErrorHint] = ()
    hints: Sequence[str] = ()  # self-study hints, most general first
    answer: str = ""  # grade_id of the answer cell; default: the part of the name after the dot
    points: float = 1.0  # the visible test cell's points in the notebook
    hidden_points: float = 2.0  # the hidden test cell's points
    # A question added beyond the original homework: an instructor may leave it out
    # (docs/instructors.md, "Leave out the added questions").
    added: bool = False
    exact_dtype: bool = True
    extra_tolerance: dict[torch.dtype, tuple[float, float]] = field(default_factory=dict)
    # Judges a case by a criterion of its own instead of equality with the reference (e.g. an
    # accuracy on held-out labels): (case, outputs) -> None when it passes, else why not.
    criterion: Callable[[Case, Outputs], str | None] | None = None
    # Library functions that are the answer itself, with the name a message gives each
    # (`library_calls`). A case whose run calls one fails, even if the code catches what follows.
    forbidden: Sequence[tuple[Callable, str]] = ()
    # The same functions called on small inputs (`LibraryUse`): the ATen operations they reach, less
    # those of ordinary arithmetic, fail a case however its code reaches them (`forbidden_operations`).
    forbidden_uses: Sequence[LibraryUse] = ()
    # The parts of the question graded apart, each for its share of the points (`Concern`);
    # empty: one concern, all the points or none. A case names its own (`Case.concern`).
    concerns: Sequence[Concern] = ()
    # What each output is, in the words a message uses ("the mask's dtype"); a key without a
    # description is named as 'key'.
    outputs: dict[str, str] = field(default_factory=dict)
    # Outputs that measure how the code works (how many torch operations it issued), not what
    # it returns: never compared with the reference or a mistake's; the properties judge them.
    measured: tuple[str, ...] = ()
    # Names of `target` that `run` calls only to say what is wrong (03.rope_inside runs the
    # student's RoPE on its own, to name a bug of notebook 04 as one): they earn nothing.
    diagnostic: tuple[str, ...] = ()

    @property
    def concern_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.concerns)

    def concern_of(self, case: Case) -> str:
        """The concern a case grades: its own, or the check's first (the core)."""
        return case.concern or (self.concerns[0].name if self.concerns else "")

    def describe(self, key: str) -> str:
        return self.outputs.get(key, f"'{key}'")

    def answer_keys(self, outputs: Outputs) -> list[str]:
        """The keys of the outputs that are answers, compared with the reference (not `measured`)."""
        return [key for key in outputs if key not in self.measured]

    @property
    def answer_cell(self) -> str:
        return self.answer or self.name.split(".", 1)[1]

    @property
    def target_names(self) -> tuple[str, ...]:
        return (self.target,) if isinstance(self.target, str) else self.target

    @property
    def target_source(self) -> str:
        """How a test cell names the object under test: `RMSNorm`, or `(MLP, train)`."""
        return self.target if isinstance(self.target, str) else f"({', '.join(self.target)})"

    def tolerance(self, dtype: torch.dtype) -> tuple[float, float]:
        return self.extra_tolerance.get(dtype) or TOLERANCES.get(dtype, TOLERANCES[torch.float32])


def library_calls(*names: str) -> tuple[tuple[Callable, str], ...]:
    """(function, name) for torch functions given by their dotted names, e.g. "torch.Tensor.softmax",
    and for the ATen operator of the same name (torch.ops.aten.softmax), a way round the others.

    A `CallWatch` sees only the function a student's line calls, not the ones it calls in turn,
    so a question lists every public spelling of its answer (torch.X, torch.nn.functional.X,
    torch.Tensor.X) for messages to name; an nn.Module is seen through the function its forward
    calls. The operations they compute with, reached by any other route, are `LibraryUse`'s.
    """
    calls = {}
    for name in names:
        calls.setdefault(_resolve(name), name)  # two names of one function: the first, public, one
        operator = name.rsplit(".", 1)[-1]
        aten = getattr(torch.ops.aten, operator, None)
        if isinstance(aten, torch._ops.OpOverloadPacket):
            calls.setdefault(aten, f"torch.ops.aten.{operator}")
    return tuple(calls.items())


def _resolve(name: str) -> Callable:
    root, *attributes = name.split(".")
    return functools.reduce(getattr, attributes, importlib.import_module(root))


@dataclass(frozen=True)
class LibraryUse:
    """A library function that answers a question, called by trusted code on small inputs: what it
    computes with is the ATen operations the call reaches, with `derivative` its backward's too, and
    reaching one of those by any route (a Python spelling, torch.ops.aten, TorchScript) is calling
    the function (`forbidden_operations`).

    `inputs` makes the positional arguments afresh, from no random numbers (tracing runs in the
    student's kernel, and must leave its random state as it found it)."""

    name: str  # as Python code spells it and a message names it: "torch.nn.functional.gelu"
    inputs: Callable[[], tuple]
    keywords: tuple[tuple[str, Any], ...] = ()
    derivative: bool = False  # the question asks for the derivative too: trace the backward


class DispatchMode(TorchDispatchMode):
    """A torch dispatch mode whose handler runs as written. TorchDispatchMode wraps a subclass's
    handler to keep torch.compile out of it, and the wrapper imports the compiler at the first
    operation: seconds of every kernel that uses a mode. Nothing here is compiled, and compiled code is
    run as Python while a check runs (`_compiled_as_python`)."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        return False

    @staticmethod
    def run(func, args: tuple, kwargs: dict) -> Any:
        """The operation, run on. From Python, with no torch function mode to see it as a call: one sees
        the operations that code compiled by TorchScript runs when a dispatch mode runs them on
        (`SeenFromPython`), and would count them, or take them for calls made from Python."""
        with torch._C.DisableTorchFunction():
            return func(*args, **kwargs)


class _Reached(DispatchMode):
    """The ATen operations run while active, each as its packet (torch.ops.aten.gelu, any overload)."""

    def __init__(self):
        super().__init__()
        self.operations: set[torch._ops.OpOverloadPacket] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.operations.add(func.overloadpacket)
        return self.run(func, args, kwargs or {})


def _reached(function: Callable, *args, **kwargs) -> tuple[set, Any]:
    """The ATen operations a call reaches, and what it returns."""
    with _Reached() as reached:
        result = function(*args, **kwargs)
    return reached.operations, result


def _operations_of(use: LibraryUse) -> tuple[set, set]:
    """The operations a use reaches forwards, and those its backward reaches besides."""
    function, args, keywords = _resolve(use.name), use.inputs(), dict(use.keywords)
    if not use.derivative:
        with torch.no_grad():
            return _reached(function, *args, **keywords)[0], set()
    args = tuple(a.detach().requires_grad_() if _differentiable(a) else a for a in args)
    with torch.enable_grad():
        forwards, output = _reached(function, *args, **keywords)
        total = output.sum()  # a scalar: autograd.grad given a gradient imports sympy (most of a second)
    backwards, _ = _reached(torch.autograd.grad, total, [a for a in args if _differentiable(a)])
    return forwards, backwards - forwards


def _differentiable(value: Any) -> bool:
    return isinstance(value, Tensor) and value.is_floating_point()


def _ordinary_arithmetic() -> tuple:
    """Tensor arithmetic that answers no question: what answers are written in, and what a library
    function may reach besides operations of its own (softmin's neg, the where that turns a boolean
    mask into scores, a cast). Traced once (`ordinary_operations`)."""
    x = torch.linspace(-2.0, 2.0, 12).reshape(3, 4)
    y, mask, index = x.flip(0), x > 0, torch.arange(3)
    elementwise = (
        x + y, x - y, x * y, x / y, -x, x**2, x.pow(y), 2.0 * x, 1 - x, x.abs(), x.sign(), x.sqrt(),
        x.rsqrt(), x.reciprocal(), x.exp(), x.log(), x.log1p(), x.expm1(), x.erf(), x.tanh(),
        x.sin(), x.cos(), x.clamp(min=0.0), x.clamp(-1.0, 1.0), torch.maximum(x, y),
        torch.minimum(x, y), torch.where(mask, x, y), torch.where(mask, x, 0.0),
        torch.where(mask, 0.0, float("-inf")), x.masked_fill(mask, float("-inf")), x.lerp(y, 0.5),
        x == y, x != y, x < y, x <= y, x > 0.5, x >= y, mask & ~mask, mask | mask, mask ^ mask,
        x.isfinite(), x.isnan(), x.floor(), x.round(),
    )  # fmt: skip
    reductions = (
        x.sum(), x.sum(-1), x.mean(-1, keepdim=True), x.amax(-1), x.amin(-1), x.max(), x.max(-1),
        x.min(-1), x.argmax(-1), x.prod(-1), x.cumsum(-1), x.var(-1), x.std(-1), x.norm(dim=-1),
        torch.linalg.vector_norm(x, dim=-1), mask.any(), mask.all(), x.count_nonzero(),
    )  # fmt: skip
    products = (
        x @ y.T, x @ y[0], torch.bmm(x[None], y.T[None]), torch.matmul(x[None, None], y.T),
        torch.einsum("ij,kj->ik", x, y), torch.nn.functional.linear(x, y, y[:, 0]), torch.outer(x[0], y[0]),
    )  # fmt: skip
    shapes = (
        x.view(4, 3), x.reshape(12), x.T, x.t(), x.transpose(0, 1), x.permute(1, 0), x[None].expand(2, 3, 4),
        x.unsqueeze(0).squeeze(0), x.flatten(), torch.cat([x, y]), torch.stack([x, y]), x.split(2, -1),
        x.chunk(2), x.unbind(), x[1:, :2], x[0], x[index], x[mask], x[:, None], x.narrow(1, 0, 2),
        x.index_select(0, index), x.gather(1, index[:, None]), x.unfold(-1, 2, 1),
        torch.nn.functional.pad(x, (1, 1)), x.tril(), x.triu(1), x.roll(1, -1), x.repeat(2, 1),
        x.repeat_interleave(2, 0), x.clone(), x.contiguous(), x.detach(), x.to(torch.float64),
        x.float(), x.long(), x.bool(), x.type_as(y), x.as_strided((2, 2), (4, 1)),
        torch.broadcast_tensors(x, y),
    )  # fmt: skip
    made = (
        torch.zeros(2), torch.ones(2), torch.full((2,), 1.0), torch.empty(2), torch.arange(4),
        torch.linspace(0.0, 1.0, 3), torch.tensor([1.0]), torch.zeros_like(x), torch.ones_like(x),
        torch.full_like(x, 2.0), torch.empty_like(x), torch.eye(3), torch.scalar_tensor(1.0),
        x.new_zeros(2), x.new_full((2,), 1.0),
    )  # fmt: skip
    z = x.clone()
    for in_place in (z.add_, z.sub_, z.mul_, z.div_):
        in_place(1.0)
    z.copy_(y)
    z.clamp_(min=-1.0)
    z.masked_fill_(mask, 0.0)
    z.exp_()
    z[mask] = 0.0
    z[0] = y[0]
    z[:, 1:] += 1.0
    z.zero_()
    return elementwise, reductions, products, shapes, made, z


@functools.cache
def ordinary_operations() -> frozenset:
    return frozenset(_reached(_ordinary_arithmetic)[0])


def forbidden_operations(uses: Sequence[LibraryUse]) -> dict[torch._ops.OpOverloadPacket, str]:
    """The ATen operations that the library functions of `uses` compute with, each with what a message
    calls it ("torch.nn.functional.gelu", "the derivative of torch.nn.functional.gelu"): every
    operation a use reaches, less those ordinary arithmetic reaches. Traced once per process."""
    return _forbidden_operations(tuple(uses))


@functools.cache
def _forbidden_operations(uses: tuple[LibraryUse, ...]) -> dict[torch._ops.OpOverloadPacket, str]:
    ordinary, forbidden = ordinary_operations(), {}
    for use in uses:
        forwards, backwards = _operations_of(use)
        for operation in sorted(forwards - ordinary, key=str):
            forbidden.setdefault(operation, use.name)
        for operation in sorted(backwards - ordinary, key=str):
            forbidden.setdefault(operation, f"the derivative of {use.name}")
    return forbidden


class CheckFailed(AssertionError):
    """Raised in the notebook when a check fails; shows the verdict without a traceback."""

    def __init__(self, verdict: Verdict):
        super().__init__(verdict.message)
        self.verdict = verdict

    def _render_traceback_(self) -> list[str]:  # IPython shows this instead of a traceback
        return [f"CheckFailed: {self.verdict}"]


# ---------------------------------------------------------------- stage 2: run (untrusted)


class SeenFromPython(TorchFunctionMode):
    """A torch function mode that knows whether a torch function called from Python is running, with
    a dispatch mode beneath (`OperationWatch`) that sees every ATen operation run meanwhile.

    A torch function mode sees every torch function called from Python code, but not the functions a
    torch function calls in turn (see `library_calls`), nor the operations that code compiled by
    TorchScript (torch.jit.script, torch.jit.trace) runs, or autograd's engine called directly: those
    run while no torch function called from Python is running, and the mode beneath notes them
    (`OperationWatch.unseen`). It is a teaching aid run inside the student's kernel, not a security
    boundary: code can switch modes off.
    """

    def __init__(self, forbidden: dict | None = None, from_data: frozenset | None = None):
        super().__init__()
        self.running = 0  # torch functions called from Python that have not returned
        self.beneath = OperationWatch(self, forbidden or {}, from_data)

    def __enter__(self):
        self.beneath.__enter__()
        return super().__enter__()

    def __exit__(self, kind, error, trace):
        try:
            super().__exit__(kind, error, trace)
        finally:
            self.beneath.__exit__(kind, error, trace)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        return self.call(func, args, kwargs or {})

    def call(self, func, args, kwargs):
        self.running += 1
        try:
            return func(*args, **kwargs)
        finally:
            self.running -= 1


class OperationWatch(DispatchMode):
    """Beneath a `SeenFromPython` mode, in order: the forbidden ATen operations run while active
    (`forbidden_operations`), and the operations run while no torch function called from Python was
    running, but for those that only make a tensor from Python data (`_operations_from_data`)."""

    def __init__(self, above: SeenFromPython, forbidden: dict, from_data: frozenset | None = None):
        super().__init__()
        self.above, self.forbidden = above, forbidden
        self.from_data = _operations_from_data() if from_data is None else from_data
        self.reached: list[torch._ops.OpOverloadPacket] = []
        self.unseen: list[torch._ops.OpOverloadPacket] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        operation = func.overloadpacket
        if operation in self.forbidden:
            self.reached.append(operation)
        if not self.above.running and operation not in self.from_data:
            self.unseen.append(operation)
        return self.run(func, args, kwargs or {})


@functools.cache
def _operations_from_data() -> frozenset:
    """The ATen operations that making a tensor from Python data runs with no torch function called
    (torch.from_numpy, torch.Tensor(...), torch.load): they read no other tensor, so run out of a
    torch function mode's sight they hide no work."""
    import numpy  # here: this module is imported by every kernel, and needs NumPy only now

    saved = io.BytesIO()
    torch.save(torch.zeros(2), saved)
    saved.seek(0)
    with SeenFromPython(from_data=frozenset()) as watch:
        torch.from_numpy(numpy.zeros(2, dtype=numpy.float32))
        torch.Tensor([0.0])
        torch.Tensor(2)
        torch.load(saved, weights_only=True)
    return frozenset(watch.beneath.unseen)


class CallWatch(SeenFromPython):
    """Records the calls of chosen torch functions made while it is active, in order; beneath, the
    forbidden operations reached and the operations run out of Python's sight."""

    def __init__(self, functions: Iterable[Callable], forbidden: dict | None = None):
        super().__init__(forbidden)
        self.watched = frozenset(functions)
        self.calls: list[Callable] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        watched = getattr(func, "overloadpacket", func)  # torch.ops.aten.X.default is torch.ops.aten.X
        if watched in self.watched:
            self.calls.append(watched)
        return self.call(func, args, kwargs or {})


class OperationCount(SeenFromPython):
    """Counts the torch functions called from Python while active, the calls of chosen ones, and
    the largest tensor any of them took or returned (in elements): how a check sees a loop over
    positions, a T x T matrix, or how many times the code calls a given kernel.

    Like `CallWatch`, it sees the calls of the code under test, not the ones inside torch. The
    arguments are sized too: a tensor made without a torch function (by torch.from_numpy, which
    a mode does not see) is seen where it is passed to one. Code that runs torch operations out of
    its sight (compiled by TorchScript) is refused when the count ends (`OutOfSight`): what it
    counts would not be what the code does.
    """

    def __init__(self, chosen: Iterable[Callable] = ()):
        super().__init__()
        self.chosen = frozenset(chosen)
        self.calls = 0
        self.chosen_calls = 0
        self.largest = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        self.calls += 1
        self.chosen_calls += getattr(func, "overloadpacket", func) in self.chosen
        result = self.call(func, args, kwargs)
        for leaf in pytree.tree_leaves((args, kwargs, result)):
            if isinstance(leaf, Tensor):
                self.largest = max(self.largest, leaf.numel())
        return result

    def __exit__(self, kind, error, trace):
        super().__exit__(kind, error, trace)
        if kind is None and self.beneath.unseen:
            raise OutOfSight(self.beneath.unseen)


class OutOfSight(Exception):
    """Raised where code ran torch operations that no torch function called from Python issued, so that
    a measurement of its Python calls cannot see them; says so to the student (`out_of_sight`)."""

    def __init__(self, operations: Sequence[torch._ops.OpOverloadPacket]):
        super().__init__(out_of_sight(operations))


def out_of_sight(operations: Sequence[torch._ops.OpOverloadPacket]) -> str:
    named = ", ".join(f"torch.ops.{operation}" for operation in list(dict.fromkeys(operations))[:3])
    return (
        f"your code runs torch operations that no torch function called from Python issued ({named}): code "
        "compiled with torch.jit.script or torch.jit.trace runs them so, as does autograd's engine called "
        "directly. The checks see the torch functions your Python code calls, and cannot tell what such code "
        "computes or calls: remove the compilation, and call torch from Python"
    )


class NotAsAsked(Exception):
    """Raised by a check's run stage when what the student's code gave is not of the form the
    question asks (records without an entry, a layer without its cache): reported as what the
    answer lacks, not as an error the student's code raised."""


@contextlib.contextmanager
def names_replaced(function: Any, replacements: dict[str, Any]):
    """The global names of the notebook that `function` (or a class's __init__) was defined in,
    replaced meanwhile, defined or not (a cell that failed leaves its class undefined): how a
    check puts a stand-in in place of another question's answer, so that its bugs cost that
    question alone. Nothing is replaced for an object that has no such namespace."""
    function = getattr(function, "__init__", function) if isinstance(function, type) else function
    with contextlib.suppress(Exception):  # a decorator's wrapper (@torch.no_grad()) has torch's globals
        function = inspect.unwrap(function)
    namespace = getattr(function, "__globals__", None)
    if not isinstance(namespace, dict):
        yield
        return
    originals = {name: namespace[name] for name in replacements if name in namespace}
    namespace.update(replacements)
    try:
        yield
    finally:
        for name in replacements:
            namespace.pop(name, None)
        namespace.update(originals)


def run_stage(check: Check, obj: Any, cases: Sequence[Case]) -> list[RunResult]:
    """Call the object under test on every case; errors become text, never escape."""
    return [_run_case(check, obj, case) for case in cases]


# The trusted model notebook 10 inspects: an answer built on it answers nothing of its own
# (lent_model.py says how it is found; a teaching aid, as the forbidden calls are).
INSPECTING_THE_LENT_MODEL = "10."  # the checks whose subject the lent model is


def _built_on_lent_model(check: Check, obj: Any) -> str | None:
    """Why the answer is built on the lent model: a class of it derives from one of its parts, or
    borrows one of their methods; outside notebook 10, its code names the lent model or holds a
    part of it (a FeedForward holding a lent expert)."""
    from .lent_model import BUILT_ON_IT, derived_from_the_lent_model, lent_model_in  # built on this module

    for part in obj if isinstance(obj, tuple) else (obj,):
        name = getattr(part, "__qualname__", "your answer")
        if lent := derived_from_the_lent_model(part):
            found = f"derives from or borrows {lent}"
        elif not check.name.startswith(INSPECTING_THE_LENT_MODEL) and (reached := lent_model_in(part, name)):
            found = f"holds or names {reached}"
        else:
            continue
        return f"your answer: {name} {found}, {BUILT_ON_IT}: write your own"
    return None


def _run_case(check: Check, obj: Any, case: Case) -> RunResult:
    watch = None
    try:  # the answer's objects, searched, and a library a notebook patched, traced, may raise too
        if refused := _built_on_lent_model(check, obj):
            return refused
        if check.forbidden or check.forbidden_uses:  # modes slow every torch call: only where needed
            watch = CallWatch(
                (function for function, _ in check.forbidden), forbidden_operations(check.forbidden_uses)
            )
        with _compiled_as_python(), watch or contextlib.nullcontext():
            outputs = check.run(obj, _fresh_copy(case))
        # What the grader's exchange would refuse is refused here too, so that a notebook's verdict
        # is the grade's: a tuple (a forward returning its router logits too), a subclass.
        not_plain = [key for key, value in outputs.items() if not plain_tensor(value)]
        if not_plain:
            key = not_plain[0]
            kind = type(outputs[key]).__name__
            result = f"your code returned a {kind} as {check.describe(key)}, not a plain CPU tensor"
        else:
            result = {k: v.detach().clone() for k, v in outputs.items()}
    except (Exception, SystemExit, GeneratorExit) as error:  # a student's bug is a result, not a crash
        result = _describe_error(error)
    return _refused(check, watch) or result


def _refused(check: Check, watch: CallWatch | None) -> str | None:
    """What the watch saw that fails the case, named even when the student's code caught the error that
    followed: a forbidden function called, its operation reached another way, operations out of sight."""
    if watch is None:
        return None
    if watch.calls:
        name = dict(check.forbidden)[watch.calls[0]]
        return f"your code calls {name}, which is what this question asks you to write yourself"
    if watch.beneath.reached:
        operation = watch.beneath.reached[0]
        function = watch.beneath.forbidden[operation]
        return (
            f"your code reaches torch.ops.{operation}, the operation that {function} runs: that is what "
            "this question asks you to write yourself"
        )
    if watch.beneath.unseen:
        return out_of_sight(watch.beneath.unseen)
    return None


def _compiled_as_python():
    """torch.compile'd code run as the Python it was compiled from, which the checks' modes see.
    Only where torch.compile can have been used: importing its compiler takes seconds."""
    if "torch._dynamo" not in sys.modules:
        return contextlib.nullcontext()
    return torch.compiler.set_stance("force_eager")


def _fresh_copy(case: Case) -> Case:
    """A copy of the inputs, tensors inside lists and dicts too (a layer's weights), so that code
    editing them in place cannot change the next run.

    Without `judge_only`: what stage 2 sees in a notebook is what it sees when graded."""
    inputs = pytree.tree_map(lambda v: v.clone() if isinstance(v, Tensor) else v, case.inputs)
    return Case(case.name, inputs, concern=case.concern)


# How a result without outputs reads.
RUN_STAGE_SENTENCES = (
    "your code raised ", "your code calls ", "your code reaches ", "your code runs ", "your code returned ",
    "your answer: ",
)  # fmt: skip
MAX_ERROR_CHARS = 2000  # of an error's message: a student's exception can say anything
RESULT_DTYPES = {
    torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
    torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.complex64, torch.complex128,
}  # fmt: skip


def plain_tensor(value) -> bool:
    """A dense CPU tensor of an ordinary dtype: what every check returns. Meta, nested and
    quantized tensors pass as `torch.Tensor` too, but would break the judge's arithmetic."""
    return (
        type(value) is torch.Tensor
        and value.layout == torch.strided
        and value.device.type == "cpu"
        and not value.is_nested
        and value.dtype in RESULT_DTYPES
    )


STUB = "this is still the unfilled stub: replace the `raise` line with your answer"
# The imports a notebook's code usually leans on, by the name a NameError reports.
IMPORTS = {
    "torch": "import torch",
    "nn": "import torch.nn as nn",
    "F": "import torch.nn.functional as F",
    "Tensor": "from torch import Tensor",
    "math": "import math",
    "np": "import numpy as np",
    "Optional": "from typing import Optional",
}
UNDEFINED_NAME = re.compile(r"name '(\w+)' is not defined")


def missing_import(message: str) -> str:
    """Advice for a NameError naming a module or type a cell forgot to import ("" otherwise)."""
    found = UNDEFINED_NAME.search(message)
    if found and found.group(1) in IMPORTS:
        return f"; add `{IMPORTS[found.group(1)]}` at the top of the cell (an annotation needs it too)"
    return ""


def _describe_error(error: BaseException) -> str:
    """`your code raised Type: message`, plus the student's own line when the error came from a
    notebook cell. An unfilled stub is called one: the release's `raise NotImplementedError()`,
    and the original homework's `raise NotImplemented`, which Python reports as a TypeError."""
    if type(error) is NotAsAsked:
        return f"your answer: {str(error)[:MAX_ERROR_CHARS]}"
    if type(error) is OutOfSight:
        return str(error)[:MAX_ERROR_CHARS]
    line = ""
    for frame in reversed(traceback.extract_tb(error.__traceback__)):
        if "ipykernel" in frame.filename or frame.filename.startswith("<"):
            line = (frame.line or "").strip()
            break
    stub = isinstance(error, NotImplementedError | TypeError) and line.startswith("raise NotImplemented")
    if stub:
        return f"your code raised {type(error).__name__}: {STUB}"
    where = f" (in your code: `{line}`)" if line else ""
    try:
        text = str(error)[:MAX_ERROR_CHARS]
    except Exception:  # an exception whose __str__ raises
        text = "(its message could not be read)"
    advice = missing_import(text) if isinstance(error, NameError) else ""
    return f"your code raised {type(error).__name__}: {text}{where}{advice}"


# ---------------------------------------------------------------- stage 3: judge (trusted)


@dataclass(frozen=True)
class Expectation:
    """What the judge compares a case against: the reference's result and each mistake's."""

    reference: RunResult
    mistakes: dict[str, RunResult]


def expectations(check: Check, reference: Any, mistakes: Sequence[Mistake], cases: Sequence[Case]):
    """Run the reference and the known mistakes on the cases (trusted code only).

    A check judged by its own criterion never compares with the reference's outputs, so the
    reference is not run for it (the tests hold the reference to the criterion instead)."""
    ref = run_stage(check, reference, cases) if check.criterion is None else [{} for _ in cases]
    wrong = {m.name: run_stage(check, m.impl, cases) for m in mistakes}
    return [Expectation(ref[i], {name: outs[i] for name, outs in wrong.items()}) for i in range(len(cases))]


def judge(
    check: Check,
    cases: Sequence[Case],
    results: Sequence[RunResult],
    expected: Sequence[Expectation],
    mistakes: Sequence[Mistake],
) -> Verdict:
    """Judge each concern of the check on its own cases (see `judge_concern`).

    One concern: the verdict is its message. Several: one `Part` per concern present among
    the cases, weighted by the concern's weight (`Verdict.worth` turns weights into points)."""
    if len(results) != len(cases) or len(expected) != len(cases):
        return Verdict(check.name, False, f"expected {len(cases)} results, got {len(results)}")
    for case in cases:
        if case.concern and case.concern not in check.concern_names:
            raise ValueError(f"{check.name}: case {case.name!r} has unknown concern {case.concern!r}")
    for prop in check.properties:
        if prop.concern and prop.concern not in check.concern_names:
            raise ValueError(f"{check.name}: property {prop.name!r} has unknown concern {prop.concern!r}")
    if not check.concerns:
        finding, message = judge_concern(check, cases, results, expected, mistakes)
        return Verdict(check.name, finding is None, message, finding=finding)
    parts = []
    for concern in check.concerns:
        chosen = [i for i, case in enumerate(cases) if check.concern_of(case) == concern.name]
        if chosen:
            finding, message = judge_concern(
                check,
                [cases[i] for i in chosen],
                [results[i] for i in chosen],
                [expected[i] for i in chosen],
                mistakes,
            )
            parts.append(Part(concern.name, finding is None, message, concern.weight, finding))
    parts = _advice_once(parts)
    passed = all(p.passed or not p.graded for p in parts)
    return Verdict(check.name, passed, "\n".join(map(str, parts)), parts=tuple(parts))


def _advice_once(parts: list[Part]) -> list[Part]:
    """What several parts would say alike is said under the first alone: the same paragraph five
    times reads as five problems. A known mistake is still named under each part, and a property
    that fails alike under each; a note is given once."""
    given = set()
    shortened = []
    for part in parts:
        lines = part.message.split("\n")
        named = part.finding.mistakes if part.finding else ()
        kept = lines[:1]  # the case line: each part's own
        for line in lines[1:]:
            if line not in given:
                given.add(line)
                kept.append(line)
            elif len(named) == 1 and line.startswith(f"{LOOKS_LIKE}{named[0]}. "):
                kept.append(f"{LOOKS_LIKE}{named[0]} (what to change: above)")
            elif line.startswith(PROPERTY_FAILS):
                kept.append(f"{line.split(' fails too: ')[0]} fails too (as above)")
            elif line.startswith(LOOKS_LIKE):
                kept.append(f"{LOOKS_LIKE}the same as above")
        shortened.append(replace(part, message="\n".join(kept)))
    return shortened


def _is_measurement(check: Check, case: Case, result: RunResult) -> bool:
    """Whether the case measures how the code computes (operations counted, memory, ...): it brings
    measured outputs back, and a property of its own concern judges them."""
    concern = check.concern_of(case)
    return (
        isinstance(result, dict)
        and any(key in result for key in check.measured)
        and any(p.concern == concern and not p.names_only for p in check.properties)
    )


def judge_concern(
    check: Check,
    cases: Sequence[Case],
    results: Sequence[RunResult],
    expected: Sequence[Expectation],
    mistakes: Sequence[Mistake],
) -> tuple[Finding | None, str]:
    """Compare each case's result with the reference: shape -> dtype -> NaN/inf -> values.

    The first failing case is named; the failure is matched against the known mistakes and
    the properties of the check, so that the message says what probably went wrong. Returns
    what failed (None: the concern passed) and the message.
    """
    for case, result, expect in zip(cases, results, expected, strict=True):
        if isinstance(expect.reference, str):
            raise RuntimeError(f"the reference fails on {check.name} {case.name}: {expect.reference}")
        problem = _judge_case(check, case, result, expect.reference)
        if problem is None:
            continue
        broken = _property_failures(check, case, result)
        lines = [f"case {case.name}: {problem}"]
        if _is_measurement(check, case, result):
            lines.append(
                "  This part measures how your code computes and pays only right values: here the values "
                "are wrong, not the measurement"
            )
        lines += [f"{PROPERTY_FAILS}'{name}' fails too: {failure}" for name, failure in broken]
        diagnosis, named = _diagnose(check, result, expect, mistakes)
        if diagnosis:
            lines.append(f"{LOOKS_LIKE}{diagnosis}")
        return Finding(case.name, tuple(name for name, _ in broken), named), "\n".join(lines)
    for case, result, expect in zip(cases, results, expected, strict=True):
        for name, failure in _property_failures(check, case, result, judged=True):
            message = f"case {case.name}: property '{name}' fails: {failure}"
            mistake = _measured_alike(check, result, expect, mistakes)
            if mistake is None:
                return Finding(case.name, (name,)), message
            diagnosis = f"{LOOKS_LIKE}{mistake.name}. {as_sentence(mistake.advice)}"
            return Finding(case.name, (name,), (mistake.name,)), f"{message}\n{diagnosis}"
    # A property is named with its own concern; those of every case once, with the core (an
    # edge's cases may not exercise them all).
    concern = check.concern_of(cases[0])
    core = not check.concerns or concern == check.concerns[0].name
    names = ", ".join(p.name for p in check.properties if p.concern == concern or (core and not p.concern))
    extra = f"; properties hold: {names}" if names else ""
    one = len(cases) == 1
    if check.criterion:
        met = f"{'meets' if one else 'meet'} the check's criterion"
    elif not any(
        check.answer_keys(e.reference) for e in expected
    ):  # measurements only: properties judged them
        met = f"{'passes' if one else 'pass'} the measurement"
    else:
        met = f"{'matches' if one else 'match'} the reference"
    return None, f"{'1 case' if one else f'{len(cases)} cases'} {met}{extra}"


def _property_failures(
    check: Check, case: Case, result: RunResult, judged: bool = False
) -> list[tuple[str, str]]:
    """The check's properties that the result breaks (none can be judged on an error); `judged`:
    only those that fail a case on their own (not `names_only`)."""
    if not isinstance(result, dict):
        return []
    failures = []
    for prop in check.properties:
        if (prop.concern and prop.concern != check.concern_of(case)) or (judged and prop.names_only):
            continue
        try:
            failure = prop.test(case, result)
        except Exception:  # outputs too malformed to judge this property; the values say why
            continue
        if failure:
            failures.append((prop.name, failure))
    return failures


def _judge_case(check: Check, case: Case, result: RunResult, reference: Outputs) -> str | None:
    try:
        if check.criterion is None or isinstance(result, str):
            return _compare(check, result, reference)
        return check.criterion(case, result)
    except Exception as error:  # outputs of a form no check expects (what a kernel sends is untrusted)
        return f"the outputs are not of the expected form ({type(error).__name__}: {error})"


def _compare(check: Check, result: RunResult, reference: Outputs) -> str | None:
    if isinstance(result, str):  # the run stage's sentence; a kernel could send any text, so it stays framed
        return result if result.startswith(RUN_STAGE_SENTENCES) else f"your code sent: {result}"
    for key in check.answer_keys(reference):
        if key not in result:
            return f"no output '{key}'"
        problem = compare_tensors(check, key, result[key], reference[key])
        if problem:
            return problem
    return None


def compare_tensors(check: Check, key: str, got: Tensor, want: Tensor) -> str | None:
    """The first difference between two tensors, in the order shape, dtype, NaN/inf, values,
    in words a student can act on (the output's description, no internal names)."""
    what = check.describe(key)
    if not isinstance(got, Tensor):
        return f"{what} should be a tensor, got {type(got).__name__}"
    if got.shape != want.shape:
        return f"{what} has shape {tuple(got.shape)}, expected {tuple(want.shape)}"
    if check.exact_dtype and got.dtype != want.dtype:
        return f"{what} has dtype {got.dtype}, expected {want.dtype}"
    if got.is_complex() != want.is_complex():
        return f"{what} should {'' if want.is_complex() else 'not '}be complex"
    if got.is_floating_point() or got.is_complex():
        bad = ~torch.isfinite(got)
        if bad.any() and not (~torch.isfinite(want)).any():
            index = tuple(torch.nonzero(bad)[0].tolist())
            return f"{what} contains {got[index].item()}{_at(index)}, expected finite values"
    rtol, atol = check.tolerance(want.dtype)
    exact = not (want.is_floating_point() or want.is_complex())
    got_c, want_c = got.to(want.dtype), want
    if want.dtype == torch.bool:  # bool tensors cannot be subtracted for the report below
        got_c, want_c = got_c.long(), want_c.long()
    close = torch.isclose(got_c, want_c, rtol=rtol, atol=atol, equal_nan=True)
    if bool(close.all()):
        return None
    index = tuple(torch.nonzero(~close)[0].tolist())
    value = f"{what}{_at(index)} is {_fmt(got.to(want.dtype)[index])}, expected {_fmt(want[index])}"
    if want.dim() == 0:
        return value
    n_bad, n = int((~close).sum()), close.numel()
    if exact:
        return f"{value} ({n_bad} of {n} values differ)"
    off = (got_c - want_c).abs()[~close]
    size = (
        f"the largest by {_fmt(off.max())}"
        if bool(torch.isfinite(off).all())
        else "some are NaN or infinite where a finite value is expected"
    )
    return f"{value} ({n_bad} of {n} values off by more than rounding allows; {size})"


def _at(index: tuple[int, ...]) -> str:
    if not index:
        return ""
    return f" at index {index[0]}" if len(index) == 1 else f" at index {index}"


def _fmt(x: Tensor) -> str:
    value = x.item()
    if isinstance(value, complex):
        return f"{value.real:.6g}{value.imag:+.6g}j"
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return f"{value:.6g}" if isinstance(value, float) else str(value)


def _diagnose(
    check: Check, result: RunResult, expect: Expectation, mistakes: Sequence[Mistake]
) -> tuple[str, tuple[str, ...]]:
    """What the failure looks like, and the known mistakes that says it is. For an error: an error
    hint, else a known mistake that raised the same error. For outputs: a known mistake whose
    outputs equal the student's; else the known mistakes that explain some of the outputs (two
    mistakes at once); else the one mistake the outputs are much nearer to than to the right answer."""
    if isinstance(result, str):
        for hint in check.error_hints:
            if hint.fragment in result:  # a hint may say which known mistake raises it, by its name
                return hint.advice, tuple(m.name for m in mistakes if hint.advice.startswith(m.name))
        raised = result.split(" (in your code: ")[0]  # a known mistake that raises the same error
        for mistake in mistakes:
            wrong = expect.mistakes.get(mistake.name)
            if isinstance(wrong, str) and wrong.split(" (in your code: ")[0] == raised:
                return f"{mistake.name}. {as_sentence(mistake.advice)}", (mistake.name,)
        return "", ()
    known = [(m, w) for m in mistakes if isinstance(w := expect.mistakes.get(m.name), dict)]
    for mistake, wrong in known:
        if all(_same_output(check, result, wrong, key) for key in check.answer_keys(wrong)):
            return f"{mistake.name}. {as_sentence(mistake.advice)}", (mistake.name,)
    reference = expect.reference
    if isinstance(reference, dict) and len(check.answer_keys(reference)) > 1:
        wrong_keys = [
            k for k in check.answer_keys(reference) if not _same_output(check, result, reference, k)
        ]
        explained = {}
        for mistake, wrong in known:
            keys = [k for k in wrong_keys if _same_output(check, result, wrong, k)]
            if not keys:
                continue
            what, advice = ", ".join(check.describe(k) for k in keys), as_sentence(mistake.advice)
            if keys == wrong_keys:  # this mistake in some outputs, every other output right
                return f"{mistake.name}, in {what} (the other outputs are right). {advice}", (mistake.name,)
            explained[mistake.name] = f"{mistake.name} ({what} as with that mistake). {advice}"
        if explained:
            return "more than one thing may be wrong; in part: " + " | ".join(explained.values()), tuple(
                explained
            )
    nearest = _nearest_mistake(check, result, reference, known) if isinstance(reference, dict) else None
    if nearest:
        return (
            f"closest to the known mistake '{nearest.name}' (your values are much nearer to it than to "
            f"the right ones; something else may be wrong too). {as_sentence(nearest.advice)}"
        ), (nearest.name,)
    return "", ()


def _measured_alike(
    check: Check, result: RunResult, expect: Expectation, mistakes: Sequence[Mistake]
) -> Mistake | None:
    """The known mistake whose outputs, measurements included, all equal the student's: right values
    computed the wrong way (a loop over tokens) are told apart by what was measured."""
    if not isinstance(result, dict):
        return None
    for mistake in mistakes:
        wrong = expect.mistakes.get(mistake.name)
        if isinstance(wrong, dict) and any(k in wrong for k in check.measured):
            if all(_same_output(check, result, wrong, key) for key in wrong):
                return mistake
    return None


def as_sentence(advice: str) -> str:
    """Advice as a sentence: it follows the mistake's name and a full stop. One that starts with
    code (`x.repeat(...)`, `bytes_per_value`) keeps its case."""
    first = advice.split(" ", 1)[0].rstrip(",:;")
    return advice[:1].upper() + advice[1:] if first.isalpha() else advice


def _same_output(check: Check, result: Outputs, other: Outputs, key: str) -> bool:
    """Whether one output equals another's; outputs too malformed to compare do not."""
    try:
        return key in result and key in other and compare_tensors(check, key, result[key], other[key]) is None
    except Exception:
        return False


NEAREST_RATIO = 0.25  # a mistake is named as the nearest only when 4x nearer than the reference


def _nearest_mistake(check: Check, result: Outputs, reference: Outputs, known) -> Mistake | None:
    """The mistake whose outputs are far nearer to the result than the reference's are."""
    to_reference = _distance(check, result, reference, reference)
    if not math.isfinite(to_reference) or to_reference == 0:
        return None
    scored = [(_distance(check, result, wrong, reference), mistake) for mistake, wrong in known]
    scored = [(d, m) for d, m in scored if d < NEAREST_RATIO * to_reference]
    return min(scored, key=lambda pair: pair[0])[1] if scored else None


def _distance(check: Check, result: Outputs, other: Outputs, reference: Outputs) -> float:
    """Distance over the answers, each relative to the reference's size; infinite when they
    cannot be compared."""
    total = 0.0
    for key in check.answer_keys(other):
        got, want, scale = result.get(key), other[key], reference.get(key)
        tensors = (got, want, scale)
        if not all(isinstance(t, Tensor) and t.shape == want.shape for t in tensors):
            return math.inf
        if len({t.is_complex() for t in tensors}) > 1:  # a real result for a complex answer, say
            return math.inf
        g, w, s = (torch.view_as_real(t) if t.is_complex() else t for t in tensors)
        g, w, s = g.double(), w.double(), s.double()
        if not all(bool(torch.isfinite(t).all()) for t in (g, w, s)):
            return math.inf
        total += float((g - w).norm() / (s.norm() + 1e-12))
    return total
