"""Answers that do nothing: the student notebook's answer regions replaced by code that computes
no answer. Each kind stands for what a student who has not done the work might hand in:

- "stub": the release as it stands, `raise NotImplementedError()`;
- "pass": the region left empty (a function then returns None, an __init__ registers nothing);
- "identity": a region that returns gives back its function's first argument (x in, x out);
- "zeros", "ones", "random": the region runs as the reference does, then every tensor and number
  it returns or binds is replaced by zeros, ones or noise of the same shape and dtype: right
  shapes, no answer. A region that writes into an object (self.x = ..., cache[i] = ...) would do
  graded work by running: it returns its first argument so replaced instead, or nothing.

Regions of an `__init__` (or any region that neither returns nor binds a local name) are left
empty in every kind: a do-nothing answer registers nothing either.
"""

import ast
import re
from collections.abc import Callable

import nbformat
import torch
import torch.utils._pytree as pytree

from autograder.cells import nbgrader_meta
from autograder.paths import source_notebook

KINDS = ("stub", "pass", "identity", "zeros", "ones", "random")
REGION = re.compile(r"^( *)### BEGIN SOLUTION\n(.*?)^ *### END SOLUTION\n?", re.M | re.S)


def like(kind: str) -> Callable:
    """What `kind` puts in place of a value the answer computed."""
    generator = torch.Generator().manual_seed(0)

    def tensor(value: torch.Tensor) -> torch.Tensor:
        if kind == "zeros":
            return torch.zeros_like(value)
        if kind == "ones":
            return torch.ones_like(value)
        if value.is_floating_point() or value.is_complex():
            noise = torch.randn(value.shape, generator=generator, dtype=torch.float32)
            return noise.to(value.dtype)
        return torch.randint_like(value, 0, 2) if value.dtype != torch.bool else torch.zeros_like(value)

    def leaf(value):
        if isinstance(value, torch.Tensor):
            return tensor(value.detach())
        if isinstance(value, bool):
            return False
        if isinstance(value, int | float):
            return {"zeros": 0, "ones": 1}.get(kind, 7) * type(value)(1)
        if isinstance(value, str):  # a character or a word the answer did not look for
            return ({"zeros": " ", "ones": "e"}.get(kind, "t") * len(value))[: max(1, len(value))]
        return value

    return lambda value: pytree.tree_map(leaf, value)


# Scopes of their own: what a def, lambda, class or comprehension inside the function binds or
# returns is not the function's.
SCOPES = (
    ast.FunctionDef,
    ast.AsyncFunctionDef,
    ast.Lambda,
    ast.ClassDef,
    ast.ListComp,
    ast.SetComp,
    ast.DictComp,
    ast.GeneratorExp,
)


def _own_returns(function: ast.FunctionDef, lines: range) -> list[ast.Return]:
    """The return statements of `function` itself (not of a def or lambda inside it) in `lines`."""
    found, stack = [], list(function.body)
    while stack:
        node = stack.pop()
        if isinstance(node, SCOPES):
            continue
        if isinstance(node, ast.Return) and node.lineno in lines and node.value is not None:
            found.append(node)
        stack.extend(ast.iter_child_nodes(node))
    return found


def _own_names(function: ast.FunctionDef, lines: range) -> list[str]:
    """Local names that statements of `function` in `lines` bind (tensors the given code reads)."""
    names, stack = [], list(function.body)
    while stack:
        node = stack.pop()
        if isinstance(node, SCOPES):
            continue
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store) and node.lineno in lines:
            names.append(node.id)
        stack.extend(ast.iter_child_nodes(node))
    return sorted(set(names))


def _writes_state(function: ast.FunctionDef, lines: range) -> bool:
    """Whether statements of `function` in `lines` write into an object (self.x = ..., cache[i] = ...):
    work that the rest of the class reads and a check may grade on its own."""
    stack = list(function.body)
    while stack:
        node = stack.pop()
        if isinstance(node, SCOPES):
            continue
        if isinstance(node, ast.Attribute | ast.Subscript) and isinstance(node.ctx, ast.Store):
            if node.lineno in lines:
                return True
        stack.extend(ast.iter_child_nodes(node))
    return False


def _enclosing_function(tree: ast.Module, line: int) -> ast.FunctionDef:
    innermost = None
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.lineno <= line <= node.end_lineno:
            if innermost is None or node.lineno > innermost.lineno:
                innermost = node
    if innermost is None:
        raise ValueError(f"an answer region at line {line} is outside any function")
    return innermost


def _first_argument(function: ast.FunctionDef) -> str:
    arguments = [
        a.arg for a in function.args.posonlyargs + function.args.args if a.arg not in ("self", "cls")
    ]
    return arguments[0] if arguments else "None"


def do_nothing_source(source: str, kind: str) -> str:
    """`source`, an answer cell of the source notebook, with every answer region doing nothing."""
    if kind == "stub":
        return REGION.sub(lambda m: f"{m.group(1)}raise NotImplementedError()\n", source)
    tree = ast.parse(source)
    pieces, last = [], 0
    for match in REGION.finditer(source):
        indent, body = match.group(1), match.group(2)
        first = source.count("\n", 0, match.start(2)) + 1  # 1-based line of the region's first line
        lines = range(first, first + body.count("\n") + 1)
        function = _enclosing_function(tree, first - 1)  # the BEGIN line: a def in the region is not it
        returns = _own_returns(function, lines)
        names = _own_names(function, lines)
        if kind == "pass" or not (returns or names):
            replacement = f"{indent}pass\n"
        elif kind == "identity":
            replacement = f"{indent}return {_first_argument(function)}\n" if returns else f"{indent}pass\n"
        elif _writes_state(function, lines):  # running it would do the work: its input, made no answer
            value = f"__do_nothing__({_first_argument(function)})"
            replacement = f"{indent}return {value}\n" if returns else f"{indent}pass\n"
        else:
            replacement = _wrapped(body, first, returns, indent) + "".join(
                f"{indent}{name} = __do_nothing__({name})\n" for name in names if not returns
            )
        pieces += [source[last : match.start()], replacement]
        last = match.end()
    return "".join([*pieces, source[last:]])


def _wrapped(body: str, first: int, returns: list[ast.Return], indent: str) -> str:
    """The region's text with the value of each of its own returns passed through __do_nothing__."""
    lines = body.splitlines(keepends=True)
    for node in sorted(returns, key=lambda n: (n.lineno, n.col_offset), reverse=True):
        value = node.value
        if value.lineno != value.end_lineno:  # a value over several lines: wrap its first and last
            start, end = value.lineno - first, value.end_lineno - first
            lines[end] = lines[end][: value.end_col_offset] + ")" + lines[end][value.end_col_offset :]
            lines[start] = (
                lines[start][: value.col_offset] + "__do_nothing__(" + lines[start][value.col_offset :]
            )
        else:
            row = value.lineno - first
            text = lines[row]
            lines[row] = (
                text[: value.col_offset]
                + f"__do_nothing__({text[value.col_offset : value.end_col_offset]})"
                + text[value.end_col_offset :]
            )
    return "".join(lines) or f"{indent}pass\n"


def do_nothing_notebook(assignment: str, kind: str) -> nbformat.NotebookNode:
    """The source notebook with its answers doing nothing of `kind`: a submission that must score 0."""
    notebook = nbformat.read(source_notebook(assignment), as_version=4)
    for cell in notebook.cells:
        if cell.cell_type == "code" and nbgrader_meta(cell).get("solution"):
            module = "tests.helpers.do_nothing"
            prelude = f'__do_nothing__ = __import__("{module}", fromlist=["like"]).like("{kind}")\n'
            cell.source = prelude + do_nothing_source(cell.source, kind)
    return notebook
