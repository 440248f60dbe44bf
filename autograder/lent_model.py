"""The course's lent model, refused where an answer is built on it.

Notebook 10 lends the course's trained model (language_model.CourseModel and its parts). An answer
that derives from it, borrows a method, or holds it (in a plain list, a closure) and calls it hands in
the course's work: 08.training trains whatever the answer builds and recomputes the logits from its
weights, which are then the lent model's; a block of lent parts is built to the block's arguments; a
FeedForward holding a lent expert answers 06. So an answer from which the lent model is reachable is
refused: among what its code names (its methods, and the closures, defaults and globals they use, in
turn; core, for every check but notebook 10's, whose subject it is), among what the model an 08
check builds holds, registered or not, and among the code that runs while an 08 check runs the
answer. A teaching aid: the kernel is the student's (docs/security.md).
"""

import contextlib
import dis
import functools
import itertools
import sys
import threading
import types
from collections.abc import Iterator
from pathlib import Path

import torch
import torch.nn as nn
from torch import Tensor

from . import language_model as lm
from .core import Case, NotAsAsked, Outputs

LENT_MODULE = lm.__name__
GLOBAL_LOADS = ("LOAD_GLOBAL", "LOAD_NAME", "IMPORT_NAME")  # the instructions that read a global or a module
WALK_LIMIT = 100_000  # objects a search visits at most (a notebook's classes and a model: a few thousand)
MAX_REFERENTS = 10_000  # of one object: a list of numbers an answer names is not searched through
# Held by nothing but themselves: no lent model inside.
ATOMS = (
    type(None),
    bool,
    int,
    float,
    complex,
    str,
    bytes,
    range,
    Tensor,
    torch.dtype,
    torch.device,
    types.ModuleType,
    types.CodeType,
    types.BuiltinFunctionType,
)


# Cached: a search reads the same methods' code once per object that holds them (dis is slow), and
# what a code object names depends on nothing but itself.
@functools.lru_cache(maxsize=4096)
def _code_names(code: types.CodeType, loads: tuple[str, ...] = ()) -> tuple[str, ...]:
    """The names a code object uses, those of the functions it defines too, in order: all of them
    (globals, attributes, modules), or those of the instructions named in loads."""
    if loads:
        names = [i.argval for i in dis.get_instructions(code) if i.opname in loads]
    else:
        names = list(code.co_names)
    for constant in code.co_consts:
        if isinstance(constant, types.CodeType):
            names += _code_names(constant, loads)
    return tuple(dict.fromkeys(names))


@functools.cache
def _lent() -> tuple[tuple[type, ...], frozenset]:
    """The lent module's classes, and its functions that build them (course_model...)."""
    classes = tuple(v for v in vars(lm).values() if isinstance(v, type) and v.__module__ == LENT_MODULE)
    names = {cls.__name__ for cls in classes}
    factories = frozenset(
        v
        for v in vars(lm).values()
        if isinstance(v, types.FunctionType)
        and v.__module__ == LENT_MODULE
        and names.intersection(_code_names(v.__code__, GLOBAL_LOADS))
    )
    return classes, factories


@functools.cache
def _lent_code() -> frozenset[types.CodeType]:
    """The code of the lent model: its classes' methods and the functions that build it. Not that of
    CausalWindowAttention, which 08.training itself puts into the student's model (over the student's
    projections and RoPE): one the answer's own model holds is refused where the model is searched."""
    classes, factories = _lent()
    methods = [
        value
        for cls in classes
        if cls is not lm.CausalWindowAttention
        for value in vars(cls).values()
        if isinstance(value, types.FunctionType)
    ]
    return frozenset(function.__code__ for function in [*methods, *factories])


def _lent_name(obj) -> str | None:
    """What obj is of the lent model, in words; None if nothing."""
    classes, factories = _lent()
    if isinstance(obj, type) and issubclass(obj, classes):
        return f"the class {_lent_class(obj)}"
    if isinstance(obj, classes):
        return f"an instance of {_lent_class(type(obj))}"
    if not isinstance(obj, types.FunctionType):
        return None
    of_a_class = obj.__qualname__.partition(".")[0] in {cls.__name__ for cls in classes}
    if obj in factories or (obj.__module__ == LENT_MODULE and of_a_class):  # a method: CourseMoe.forward
        return f"{LENT_MODULE}.{obj.__qualname__}"
    return None


def _lent_class(cls: type) -> str:
    lent = next(c for c in cls.__mro__ if c.__module__ == LENT_MODULE)
    return f"{LENT_MODULE}.{lent.__qualname__}"


def _library(module: str | None) -> bool:
    """Whether code of this module is the course's package's, Python's or an installed library's: what
    its functions name is not searched (an answer's own code is: a notebook's, a test's)."""
    if not isinstance(module, str):
        return False
    root = module.partition(".")[0]
    if root in (__package__.partition(".")[0], "builtins") or root in sys.stdlib_module_names:
        return True
    file = getattr(sys.modules.get(module), "__file__", None)
    return isinstance(file, str) and not {"site-packages", "dist-packages"}.isdisjoint(Path(file).parts)


def _referents(obj, path: str) -> Iterator[tuple[object, str]]:
    """What obj holds, or names in its code, each with where it is."""
    if isinstance(obj, dict):
        for key, value in list(obj.items()):
            yield key, path
            yield value, f"{path}[{key!r}]" if isinstance(key, str | int) else path
    elif isinstance(obj, list | tuple | set | frozenset):
        for i, value in enumerate(list(obj)):
            yield value, f"{path}[{i}]"
    elif isinstance(obj, types.FunctionType):
        if not _library(obj.__module__):
            yield from _function_referents(obj, path)
    elif isinstance(obj, types.MethodType):
        yield obj.__self__, path
        yield obj.__func__, path
    elif isinstance(obj, functools.partial):
        yield from ((part, path) for part in (obj.func, obj.args, obj.keywords))
    elif isinstance(obj, staticmethod | classmethod):
        yield obj.__func__, path
    elif isinstance(obj, property):
        yield from ((function, path) for function in (obj.fget, obj.fset, obj.fdel))
    elif isinstance(obj, type):
        for cls in obj.__mro__:
            if not _library(cls.__module__):
                yield from ((value, f"{cls.__qualname__}.{name}") for name, value in list(vars(cls).items()))
    else:
        yield type(obj), path
        try:
            attributes = dict(vars(obj))
        except TypeError:  # no __dict__
            return
        if isinstance(obj, nn.Module):  # children under their names; parameters and buffers are tensors
            yield from ((child, f"{path}.{name}") for name, child in attributes.pop("_modules", {}).items())
            attributes.pop("_parameters", None)
            attributes.pop("_buffers", None)
        yield from ((value, f"{path}.{name}") for name, value in attributes.items())


def _function_referents(function: types.FunctionType, path: str) -> Iterator[tuple[object, str]]:
    """What a function closes over, its defaults, and the globals its code names; of a module it names,
    the lent model's parts among the attributes the code names (lm.CourseModel)."""
    for variable, cell in zip(function.__code__.co_freevars, function.__closure__ or (), strict=False):
        try:
            yield cell.cell_contents, f"{path}: {function.__qualname__} closes over {variable}"
        except ValueError:  # a cell not yet filled
            continue
    yield function.__defaults__, path
    yield function.__kwdefaults__, path
    yield vars(function), path
    names, reads = _code_names(function.__code__), f"{function.__qualname__} reads "
    for name in _code_names(function.__code__, GLOBAL_LOADS):
        # a global (not an attribute that happens to share its name), or a module imported in the code
        value = function.__globals__[name] if name in function.__globals__ else sys.modules.get(name)
        if isinstance(value, types.ModuleType):
            yield from ((part, reads + where) for part, where in _lent_attributes(value, names, name))
        elif value is not None:
            yield value, reads + name


def _lent_attributes(module: types.ModuleType, names: list[str], path: str, depth: int = 3):
    """The lent model's parts among a module's attributes of these names, in its submodules of these names
    too; read from the module's __dict__ (a module's __getattr__ may import)."""
    for name in names:
        value = vars(module).get(name)
        if isinstance(value, types.ModuleType) and value is not module and depth:
            yield from _lent_attributes(value, names, f"{path}.{name}", depth - 1)
        elif value is not None and _lent_name(value):
            yield value, f"{path}.{name}"


def lent_model_in(obj, root: str) -> str | None:
    """Where the lent model is reachable from obj (an answer's class or function, a model it built), in
    words: what was found and where; None where it is not."""
    seen: set[int] = set()
    stack = [(obj, root)]
    while stack and len(seen) < WALK_LIMIT:
        item, path = stack.pop()
        if id(item) in seen or isinstance(item, ATOMS):
            continue
        seen.add(id(item))
        found = _lent_name(item)
        if found:
            return found if path == root else f"{found} ({path})"
        stack.extend(reversed(list(itertools.islice(_referents(item, path), MAX_REFERENTS))))
        del stack[WALK_LIMIT:]  # what a walk may still visit: a huge list costs no more than the limit
    return None


BUILT_ON_IT = (
    "so it is built on the course's lent model (autograder.language_model), the trained model that "
    "notebook 10 lends for inspection"
)


def derived_from_the_lent_model(obj) -> str | None:
    """What of the lent model a class of the answer derives from, or borrows a method of
    (`forward = CourseMoe.forward`), in words; None for anything else."""
    if not isinstance(obj, type):
        return None
    lent = next((c for c in obj.__mro__[1:] if c.__module__ == LENT_MODULE), None)
    borrowed = (
        value
        for c in obj.__mro__
        for value in vars(c).values()
        if callable(value) and getattr(value, "__module__", None) == LENT_MODULE
    )
    lent = lent or next(borrowed, None)
    return None if lent is None else f"{LENT_MODULE}.{lent.__qualname__}"


def _built_on_the_lent_model(what: str) -> NotAsAsked:
    return NotAsAsked(
        f"it {what}, {BUILT_ON_IT}. These checks grade your own block, model and parts (notebooks "
        "03-07): build yours from them"
    )


def refuse_the_lent_model(obj, root: str) -> None:
    found = lent_model_in(obj, root)
    if found:
        raise _built_on_the_lent_model(f"holds or names {found}")


@contextlib.contextmanager
def _lent_code_watched() -> Iterator[list[str]]:
    """Records the lent model's code that starts running meanwhile, in this thread and those started."""
    watched, ran = _lent_code(), []

    def profile(frame, event: str, arg) -> None:
        if event == "call" and frame.f_code in watched and not ran:
            ran.append(f"{LENT_MODULE}.{frame.f_code.co_qualname}")

    before = sys.getprofile(), threading.getprofile()
    sys.setprofile(profile)
    threading.setprofile(profile)
    try:
        yield ran
    finally:
        sys.setprofile(before[0])
        threading.setprofile(before[1])


def refusing_the_lent_model(run):
    """A check's run stage that refuses an answer whose run starts the lent model's code (what its
    code names is refused before, by core, for every check)."""

    @functools.wraps(run)
    def refusing(answer, case: Case) -> Outputs:
        with _lent_code_watched() as ran:
            try:
                return run(answer, case)
            finally:
                if ran:
                    raise _built_on_the_lent_model(f"runs {ran[0]} while the check runs it")

    return refusing
