"""Statements put in one order wherever their order makes no difference, so that a copy whose
independent lines were shuffled reads as the answer it came from.

In each block of an answer, a run of simple statements (assignments, asserts, imports, calls) is
put in one order: each after the statements whose names it reads or writes, and otherwise by the
statements' syntax trees with the names left out (the same order whatever the names). Lines move,
not text: the result keeps each line as written and says where each came from, for showing the
original lines. Code that does not parse is left as it is.
"""

import ast
import re

MAX_RUN = 100  # statements in one run put in order (placing them costs the square of their number)
SIMPLE = (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.Assert, ast.Import, ast.ImportFrom, ast.Expr)


def canonical_order(code: str) -> tuple[str, list[int]]:
    """`code` with each run of simple statements in its canonical order, and for each of its
    lines, the line (from 1) of `code` it is. Comments and blank lines inside a run are dropped
    (fingerprints never hold them)."""
    lines = code.split("\n")
    order = list(range(1, len(lines) + 1))
    try:
        for body in _bodies(ast.parse(code)):
            for run in _runs(body):
                if len(run) > MAX_RUN:
                    continue
                spans = [(s.lineno, s.end_lineno) for s in run]
                ranked = _canonical(run, [_key(statement) for statement in run])
                placed = [n for i in ranked for n in range(spans[i][0], spans[i][1] + 1)]
                first, last = spans[0][0], spans[-1][1]
                at = order.index(first)
                order[at : at + last - first + 1] = placed
    except (SyntaxError, ValueError, RecursionError):  # RecursionError: nesting deeper than Python's stack
        return code, list(range(1, len(lines) + 1))
    return "\n".join(lines[n - 1] for n in order), order


def _bodies(tree: ast.AST):
    for node in ast.walk(tree):
        for name in ("body", "orelse", "finalbody"):
            body = getattr(node, name, None)
            if isinstance(body, list) and body and isinstance(body[0], ast.stmt):
                yield body


def _runs(body: list[ast.stmt]) -> list[list[ast.stmt]]:
    """The runs of two or more consecutive simple statements, each on lines of its own."""
    runs, run = [], []
    for statement in body + [None]:
        shares_a_line = run and statement and statement.lineno <= run[-1].end_lineno  # a; b
        if _movable(statement) and not shares_a_line:
            run.append(statement)
            continue
        if shares_a_line:
            run.pop()
        if len(run) > 1:
            runs.append(run)
        run = []
    return runs


def _movable(statement: ast.stmt | None) -> bool:
    """A simple statement; a call on its own line too (it is taken to change whatever it names),
    but not super().__init__(), which stays first."""
    if isinstance(statement, ast.Expr):
        return "super" not in _chains(statement)
    return isinstance(statement, SIMPLE)


def _canonical(run: list[ast.stmt], keys: list[str]) -> list[int]:
    """The run's statements (as indices) in the one order that keeps every statement after those
    it depends on and otherwise puts the smallest key first: the same order for every
    order of the same statements that computes the same thing."""
    writes, reads = [_writes(s) for s in run], [_reads(s) for s in run]
    after = [
        {i for i in range(j) if _touch(reads[j], writes[i]) or _touch(writes[j], writes[i] | reads[i])}
        for j in range(len(run))
    ]
    # Two statements of the same text are told apart by the texts of those that must follow them
    followers = [sorted(keys[j] for j in range(len(run)) if i in after[j]) for i in range(len(run))]
    placed: list[int] = []
    while len(placed) < len(run):
        ready = [j for j in range(len(run)) if j not in placed and after[j] <= set(placed)]
        placed.append(min(ready, key=lambda j: (keys[j], followers[j], j)))
    return placed


def _touch(these: set[str], those: set[str]) -> bool:
    """Whether a name of one set is a name of the other, or an attribute of it (self.q, self.q.weight)."""
    return any(a == b or a.startswith(b + ".") or b.startswith(a + ".") for a in these for b in those)


def _targets(statement: ast.stmt) -> list[ast.expr]:
    if isinstance(statement, ast.Assign):
        return statement.targets
    if isinstance(statement, ast.AnnAssign | ast.AugAssign):
        return [statement.target]
    return []


def _writes(statement: ast.stmt) -> set[str]:
    if isinstance(statement, ast.Expr):
        return _chains(statement)
    if isinstance(statement, ast.Import | ast.ImportFrom):
        return {(a.asname or a.name).split(".")[0] for a in statement.names}
    return {name for target in _targets(statement) for name in _written(target)}


def _written(target: ast.expr) -> set[str]:
    if name := _dotted(target):
        return {name}
    if isinstance(target, ast.Subscript):
        return _chains(target.value)
    if isinstance(target, ast.Starred):
        return _written(target.value)
    if isinstance(target, ast.Tuple | ast.List):
        return {name for element in target.elts for name in _written(element)}
    return set()


def _reads(statement: ast.stmt) -> set[str]:
    """The names and attribute chains the statement reads (a call may read anything it names)."""
    plain = [t for t in _targets(statement) if _dotted(t) and not isinstance(statement, ast.AugAssign)]
    return {
        name for child in ast.iter_child_nodes(statement) if child not in plain for name in _chains(child)
    }


def _chains(node: ast.AST) -> set[str]:
    """The longest names and attribute chains in `node` (`self.q` of `self.q(x)`, not `self`)."""
    if name := _dotted(node):
        return {name}
    return {name for child in ast.iter_child_nodes(node) for name in _chains(child)}


def _dotted(node: ast.AST) -> str:
    """`a` or `self.a.b` for a name or a chain of attributes on one, else ""."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute) and (base := _dotted(node.value)):
        return f"{base}.{node.attr}"
    return ""


NAMED = re.compile(r"\b(id|attr|arg|name|asname)='[^']*'")


def _key(statement: ast.stmt) -> str:
    """The statement's syntax tree with every name left out: the same whatever the names."""
    return NAMED.sub(r"\1=''", ast.dump(statement))
