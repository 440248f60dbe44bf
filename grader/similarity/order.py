"""Statements put in one order wherever their order makes no difference, so that a copy whose
independent lines were shuffled reads as the answer it came from.

In each block of an answer, a run of simple statements (assignments, asserts, imports, calls) is
put in one order: each after the statements whose names it reads or writes, and otherwise by the
shape of its syntax tree, names and constants left out (the same order whatever the names).
Lines move, not text: the result keeps each line as written and says where each came from, for
showing the original lines. IPython's magics (`%time`, `!ls`) are left out, as comments are; code
that still does not parse is left as it is.

A call is taken to change what it names (`nn.init.zeros_(self.v.bias)` stays after `self.v = ...`)
but nothing else: two statements whose order matters only through hidden state (`torch.manual_seed`
then `torch.randn`) read the same in either order. That can make two answers look alike, never
hide a copy.
"""

import ast
import re

MAX_RUN = 100  # statements of one run put in order (placing them costs the square of their number)
SIMPLE = (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.Assert, ast.Import, ast.ImportFrom, ast.Expr)
MAGIC = re.compile(r"^[ \t]*[%!].*$", re.MULTILINE)
ROUNDS = 3  # of telling statements of one shape apart by their neighbours' shapes


def canonical_order(code: str) -> tuple[str, list[int]]:
    """`code` with each run of simple statements in its canonical order, and for each of its
    lines, the line (from 1) of `code` it is. Comments and blank lines inside a run, and magics,
    are dropped (fingerprints never hold them). Lines are split at "\\n" alone (answers.py makes every line
    break one)."""
    lines = code.split("\n")
    as_written = (code, list(range(1, len(lines) + 1)))
    if "\r" in code or "\f" in code:  # a line break or page break to Python, not to us
        return as_written
    try:
        tree, skipped = _parsed(code, lines)
        placed = {}
        for body in _bodies(tree):
            for run in _runs(body):
                ranked = _canonical(run)
                first, last = run[0].statement.lineno, run[-1].statement.end_lineno
                placed[first] = [n for s in ranked for n in range(s.lineno, s.end_lineno + 1)]
                skipped.update(range(first, last + 1))
        order = []
        for n in as_written[1]:
            order += placed.get(n, [] if n in skipped else [n])
        return "\n".join(lines[n - 1] for n in order), order
    except (SyntaxError, ValueError, RecursionError, IndexError):  # RecursionError: nesting past the stack
        return as_written


def _parsed(code: str, lines: list[str]) -> tuple[ast.AST, set[int]]:
    """The code's syntax tree, and the lines of IPython magics it holds, read as blank (only if it
    does not parse as it is: `% b` may continue an expression)."""
    try:
        return ast.parse(code), set()
    except SyntaxError:
        return ast.parse(MAGIC.sub("", code)), {n for n, line in enumerate(lines, 1) if MAGIC.fullmatch(line)}


def _bodies(tree: ast.AST):
    for node in ast.walk(tree):
        for name in ("body", "orelse", "finalbody"):
            body = getattr(node, name, None)
            if isinstance(body, list) and body and isinstance(body[0], ast.stmt):
                yield body


class _Facts:
    """What one statement writes, reads and looks like."""

    def __init__(self, statement: ast.stmt):
        self.statement = statement
        self.writes = _writes(statement)
        self.reads = _reads(statement)
        self.shape = _shape(statement)
        self.names = self.writes | self.reads
        self.names_held = {p for name in self.names for p in _prefixes(name)}
        self.writes_held = {p for name in self.writes for p in _prefixes(name)}

    def follows(self, other: "_Facts") -> bool:
        """Whether this statement, written after `other`, must stay after it: it reads or writes
        what `other` writes, or writes what `other` reads (a name, an attribute of it, or what holds it)."""
        return bool(
            self.names_held & other.writes
            or self.names & other.writes_held
            or self.writes_held & other.names
            or self.writes & other.names_held
        )


def _runs(body: list[ast.stmt]) -> list[list[_Facts]]:
    """The runs of two to MAX_RUN consecutive simple statements, each on lines of its own."""
    runs, run = [], []
    for statement in body + [None]:
        shares_a_line = run and statement and statement.lineno <= run[-1].statement.end_lineno  # a; b
        facts = _facts(statement) if _movable(statement) and not shares_a_line else None
        if facts:
            run.append(facts)
            continue
        if shares_a_line:
            run.pop()
        if 1 < len(run) <= MAX_RUN:
            runs.append(run)
        run = []
    return runs


def _facts(statement: ast.stmt) -> _Facts | None:
    try:
        return _Facts(statement)
    except RecursionError:  # nested too deeply to read: it stays where it is, and so do its neighbours
        return None


def _movable(statement: ast.stmt | None) -> bool:
    """A simple statement; a call on its own line too (it is taken to change whatever it names),
    but not super().__init__(), which stays first."""
    if isinstance(statement, ast.Expr):
        return "super" not in _chains(statement)
    return isinstance(statement, SIMPLE)


def _canonical(run: list[_Facts]) -> list[ast.stmt]:
    """The run's statements in the one order that keeps every statement after those it depends on
    and otherwise puts the smallest key first: the same order for every order of the same
    statements that computes the same thing. A key is the statement's shape, refined by the keys
    of the statements that must come before and after it (two statements of one shape are told
    apart by their neighbours)."""
    after = [{i for i in range(j) if mine.follows(run[i])} for j, mine in enumerate(run)]
    before = [{j for j in range(len(run)) if i in after[j]} for i in range(len(run))]
    keys = [facts.shape for facts in run]
    for _ in range(ROUNDS):
        keys = [
            repr((keys[i], sorted(keys[j] for j in after[i]), sorted(keys[j] for j in before[i])))
            for i in range(len(run))
        ]
    placed: list[int] = []
    while len(placed) < len(run):
        ready = [j for j in range(len(run)) if j not in placed and after[j] <= set(placed)]
        placed.append(min(ready, key=lambda j: (keys[j], j)))
    return [run[i].statement for i in placed]


def _prefixes(name: str) -> set[str]:
    """`self.q.weight` -> {self, self.q, self.q.weight}."""
    parts = name.split(".")
    return {".".join(parts[: i + 1]) for i in range(len(parts))}


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
    walrus = {n.target.id for n in ast.walk(statement) if isinstance(n, ast.NamedExpr)}
    return walrus | {name for target in _targets(statement) for name in _written(target)}


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
    """The longest names and attribute chains in `node` (`self.q` of `self.q(x)`, not `self`).
    Iterative, as are the two below: a student's statement may nest deeper than Python's stack."""
    found, stack = set(), [node]
    while stack:
        node = stack.pop()
        if name := _dotted(node):
            found.add(name)
        else:
            stack.extend(ast.iter_child_nodes(node))
    return found


def _dotted(node: ast.AST) -> str:
    """`a` or `self.a.b` for a name or a chain of attributes on one, else ""."""
    attributes = []
    while isinstance(node, ast.Attribute):
        attributes.append(node.attr)
        node = node.value
    return ".".join([node.id, *reversed(attributes)]) if isinstance(node, ast.Name) else ""


def _shape(node: ast.AST) -> str:
    """The node's syntax tree without its names and constants: its node types, with their depths."""
    shape, stack = [], [(node, 0)]
    while stack:
        node, depth = stack.pop()
        shape.append(f"{depth}{type(node).__name__}")
        stack.extend((child, depth + 1) for child in reversed(list(ast.iter_child_nodes(node))))
    return " ".join(shape)
