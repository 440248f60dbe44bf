"""A generated class whose copies are known, for the similarity tests and benchmarks/similarity.py.

Three questions of a notebook (a short softmax, a function, a class). Honest students write each
answer their own way: every step of it picked among the ways students write it (the options
below), some habits of their own added (QUIRKS), their own names and layout. Copiers take
another student's answer (or a published solution) and disguise it: exactly, renamed and
reformatted, statements reordered, a line changed. Each answer carries its lineage: two answers
are a copy pair when one comes from the other or both from the same one.
"""

import random
import re
from dataclasses import dataclass

from grader.similarity.answers import Answer

NOTEBOOK = "01_attention"

GIVEN = {
    "softmax": 'def softmax(x, dim=-1):\n    """Numerically stable softmax along `dim`."""\n'
    "    # YOUR CODE HERE\n    raise NotImplementedError()",
    "attention": 'def attention(q, k, v, mask=None):\n    """softmax(q k^T / sqrt(d)) v, masked; returns'
    ' (output, weights)."""\n    # YOUR CODE HERE\n    raise NotImplementedError()',
    "heads": "class MultiHead(nn.Module):\n"
    '    """Multi-head attention: x (B, T, D) -> (B, T, D)."""\n\n'
    "    def __init__(self, hidden_size, num_heads):\n        super().__init__()\n"
    "        # YOUR CODE HERE\n        raise NotImplementedError()\n\n"
    "    def forward(self, x, mask=None):\n        # YOUR CODE HERE\n        raise NotImplementedError()",
}
GIVEN_CELL = "import math\nimport torch\nfrom torch import nn\nimport torch.nn.functional as F\n"

# Each step: the ways students write it ({names} are theirs). A list of statements, one string each.
SOFTMAX = [
    [
        "{s} = x - x.max(dim=dim, keepdim=True).values",
        "{s} = x - torch.amax(x, dim=dim, keepdim=True)",
        "{s} = x - x.max(dim, keepdim=True)[0]",
    ],
    ["{e} = torch.exp({s})", "{e} = {s}.exp()"],
    ["return {e} / {e}.sum(dim=dim, keepdim=True)", "return {e} / torch.sum({e}, dim=dim, keepdim=True)"],
]
ATTENTION = [
    [
        "{d} = q.shape[-1]",
        "{d} = q.size(-1)",
        "{d} = k.shape[-1]",
        "*_, {d} = q.shape",
        "{d} = int(q.shape[-1])",
        "{d} = q.size()[-1]",
        "{d} = v.shape[-1]",
    ],
    [
        "{s} = q @ k.transpose(-2, -1)",
        "{s} = torch.matmul(q, k.transpose(-2, -1))",
        "{s} = q @ k.mT",
        '{s} = torch.einsum("...qd,...kd->...qk", q, k)',
        "{s} = q @ k.swapaxes(-1, -2)",
        "{s} = torch.matmul(q, k.transpose(-1, -2))",
        "{s} = q.matmul(k.transpose(-2, -1))",
        '{s} = torch.einsum("bhqd,bhkd->bhqk", q, k)',
        "{kt} = k.transpose(-2, -1)\n{s} = q @ {kt}",
    ],
    [
        "{s} = {s} / math.sqrt({d})",
        "{s} = {s} / {d} ** 0.5",
        "{s} = {s} * {d} ** -0.5",
        "{s} = {s} / torch.sqrt(torch.tensor({d}, dtype=q.dtype))",
        "{s} /= math.sqrt({d})",
        "{s} = {s} / ({d} ** 0.5)",
        "{s} = torch.div({s}, math.sqrt({d}))",
        "{s} *= 1 / math.sqrt({d})",
        "{sc} = 1.0 / math.sqrt({d})\n{s} = {s} * {sc}",
    ],
    [
        'if mask is not None:\n    {s} = {s}.masked_fill(mask, float("-inf"))',
        "if mask is not None:\n    {s} = {s}.masked_fill(mask, -torch.inf)",
        'if mask is not None:\n    {s} = torch.where(mask, float("-inf"), {s})',
        "if mask is not None:\n    {s} = {s}.masked_fill(mask, torch.finfo({s}.dtype).min)",
        'if mask is not None:\n    {s} = {s}.masked_fill(mask.bool(), float("-inf"))',
        '{s} = {s}.masked_fill(mask, float("-inf")) if mask is not None else {s}',
        "if mask is not None:\n    {s} = {s} + torch.zeros_like({s}).masked_fill(mask, -1e9)",
        "if mask is not None:\n    {s} = {s}.masked_fill_(mask, -float('inf'))",
    ],
    [
        "{w} = torch.softmax({s}, dim=-1)",
        "{w} = {s}.softmax(dim=-1)",
        "{w} = F.softmax({s}, dim=-1)",
        "{w} = softmax({s}, dim=-1)",
        "{w} = torch.nn.functional.softmax({s}, -1)",
        "{w} = torch.exp({s} - {s}.amax(-1, keepdim=True))\n{w} = {w} / {w}.sum(-1, keepdim=True)",
        "{w} = softmax({s})",
    ],
    [
        "{o} = {w} @ v",
        "{o} = torch.matmul({w}, v)",
        '{o} = torch.einsum("...qk,...kd->...qd", {w}, v)',
        "{o} = {w}.matmul(v)",
        '{o} = torch.einsum("bhqk,bhkd->bhqd", {w}, v)',
    ],
    ["return {o}, {w}", "return ({o}, {w})", "return {o}, {w}.detach() if False else {w}"],
]
HEADS_INIT = [  # independent statements: a reordered copy shuffles them
    ["self.{h} = num_heads", "self.{h} = int(num_heads)"],
    ["self.{hd} = hidden_size // num_heads", "self.{hd} = hidden_size // self.{h}"],
    [
        "self.{qp} = nn.Linear(hidden_size, hidden_size)",
        "self.{qp} = nn.Linear(hidden_size, hidden_size, bias=True)",
        "self.{qp} = torch.nn.Linear(hidden_size, hidden_size)",
    ],
    [
        "self.{kp} = nn.Linear(hidden_size, hidden_size)",
        "self.{kp} = torch.nn.Linear(hidden_size, hidden_size)",
    ],
    [
        "self.{vp} = nn.Linear(hidden_size, hidden_size)",
        "self.{vp} = torch.nn.Linear(hidden_size, hidden_size)",
    ],
    [
        "self.{op} = nn.Linear(hidden_size, hidden_size)",
        "self.{op} = torch.nn.Linear(hidden_size, hidden_size)",
        "self.{op} = nn.Linear(self.{h} * self.{hd}, hidden_size)",
    ],
]
HEADS_FORWARD = [
    [
        "B, T, D = x.shape",
        "{b}, {t}, _ = x.shape",
        "{b}, {t} = x.shape[0], x.shape[1]",
        "{b}, {t}, {dd} = x.size()",
    ],
    [
        "{q} = self.{qp}(x).view({b}, {t}, self.{h}, self.{hd}).transpose(1, 2)",
        "{q} = self.{qp}(x).reshape({b}, {t}, self.{h}, -1).transpose(1, 2)",
        "{q} = self.{qp}(x).unflatten(-1, (self.{h}, self.{hd})).transpose(1, 2)",
        "{q} = self.{qp}(x).view({b}, {t}, self.{h}, self.{hd}).permute(0, 2, 1, 3)",
        "{q} = self.{qp}(x)\n{q} = {q}.view({b}, {t}, self.{h}, self.{hd}).transpose(1, 2)",
        "{q} = self.{qp}(x).view({b}, -1, self.{h}, self.{hd}).transpose(1, 2)",
    ],
    [
        "{k} = self.{kp}(x).view({b}, {t}, self.{h}, self.{hd}).transpose(1, 2)",
        "{k} = self.{kp}(x).reshape({b}, {t}, self.{h}, -1).transpose(1, 2)",
        "{k} = self.{kp}(x).unflatten(-1, (self.{h}, self.{hd})).transpose(1, 2)",
    ],
    [
        "{v} = self.{vp}(x).view({b}, {t}, self.{h}, self.{hd}).transpose(1, 2)",
        "{v} = self.{vp}(x).reshape({b}, {t}, self.{h}, -1).transpose(1, 2)",
        "{v} = self.{vp}(x).unflatten(-1, (self.{h}, self.{hd})).transpose(1, 2)",
    ],
    [
        "{o}, _ = attention({q}, {k}, {v}, mask)",
        "{o} = attention({q}, {k}, {v}, mask=mask)[0]",
        "{o}, {w} = attention({q}, {k}, {v}, mask)",
        "{o} = attention({q}, {k}, {v}, mask)[0]",
        "{res} = attention({q}, {k}, {v}, mask)\n{o} = {res}[0]",
    ],
    [
        "{o} = {o}.transpose(1, 2).reshape({b}, {t}, -1)",
        "{o} = {o}.transpose(1, 2).contiguous().view({b}, {t}, self.{h} * self.{hd})",
        "{o} = {o}.permute(0, 2, 1, 3).flatten(2)",
        "{o} = {o}.transpose(1, 2).flatten(-2)",
    ],
    ["return self.{op}({o})", "{o} = self.{op}({o})\nreturn {o}", "return self.{op}({o}).view({b}, {t}, -1)"],
]
QUIRKS = {  # habits of one student: each put somewhere in an answer, or not
    "softmax": ["assert x.is_floating_point()", "x = x.float()", "dim = dim % x.dim()"],
    "attention": [
        "assert q.shape[-1] == k.shape[-1]",
        "q, k = q.float(), k.float()",
        "{o} = {o}.to(v.dtype)",
        "{w} = torch.nan_to_num({w})",
        "if mask is not None and mask.dtype != torch.bool:\n    mask = mask.bool()",
        "{s} = {s}.contiguous()",
        "{tmp} = {s}.shape[-1]",
        "q = q.contiguous()",
        "{dt} = q.dtype",
        "if q.dim() == 3:\n    q = q.unsqueeze(1)",
        "{w} = {w}.masked_fill(torch.isnan({w}), 0.0)",
        "assert v.shape[-2] == k.shape[-2], 'keys and values'",
    ],
    "heads": [
        "assert hidden_size % num_heads == 0",
        "self.{sc} = 1.0 / math.sqrt(hidden_size // num_heads)",
        "self.{dr} = nn.Dropout(0.0)",
        "self.{hs} = hidden_size",
        "self.{sc} = (hidden_size // num_heads) ** -0.5",
        "self.{dr} = nn.Dropout(0.1)",
        "self.{cache} = None",
        "self.register_buffer('{cache}', torch.zeros(1))",
    ],
}
NAMES = {
    "s": ["scores", "logits", "att", "z", "shifted", "a", "sc", "attn_scores"],
    "e": ["e", "ex", "exps", "num", "exp_x", "numerator"],
    "d": ["d", "d_k", "dk", "dim_k", "head_dim", "size"],
    "w": ["weights", "probs", "p", "attn", "alpha", "w"],
    "o": ["out", "output", "result", "y", "context", "res"],
    "h": ["num_heads", "n_heads", "heads", "h", "nh"],
    "hd": ["head_dim", "d_head", "dh", "head_size", "hd"],
    "qp": ["q_proj", "w_q", "query", "wq", "to_q"],
    "kp": ["k_proj", "w_k", "key", "wk", "to_k"],
    "vp": ["v_proj", "w_v", "value", "wv", "to_v"],
    "op": ["o_proj", "w_o", "out_proj", "wo", "proj"],
    "b": ["B", "batch", "bs", "n", "b"],
    "t": ["T", "seq", "length", "t", "L"],
    "dd": ["D", "dim", "hidden", "c"],
    "q": ["q", "queries", "qh", "Q"],
    "k": ["k", "keys", "kh", "K"],
    "v": ["v", "values", "vh", "V"],
    "tmp": ["n_keys", "tk", "Tk"],
    "sc": ["scale", "inv_sqrt", "factor"],
    "dr": ["drop", "dropout", "attn_drop"],
    "hs": ["hidden_size", "d_model", "width"],
    "kt": ["kt", "k_t", "keys_t"],
    "res": ["res", "r", "ret"],
    "dt": ["dtype", "dt", "typ"],
    "cache": ["cache", "buf", "state"],
}
COMMENTS = ["# scores", "# scale", "# normalise", "# the heads", "# done", "# step 1", "# as in the paper"]


@dataclass(frozen=True)
class Written:
    """One answer and the lineage it comes from: a student's own id, or whose answer was copied."""

    answer: Answer
    lineage: str
    how: str  # honest | exact | disguised | reordered | edited | published


def student_names(rng: random.Random) -> dict[str, str]:
    return {key: rng.choice(options) for key, options in NAMES.items()}


def _steps(steps, rng: random.Random) -> list[str]:
    return [rng.choice(options) for options in steps]


def _with_quirks(
    statements: list[str], question: str, rng: random.Random, before_last: bool = True
) -> list[str]:
    statements = list(statements)
    for quirk in QUIRKS[question]:
        if rng.random() < 0.3:
            statements.insert(rng.randrange(len(statements) - before_last + 1), quirk)
    return statements


def _indent(lines: list[str], depth: int) -> list[str]:
    pad = " " * depth
    return [pad + line for statement in lines for line in statement.split("\n")]


def _header(question: str) -> list[str]:
    """The given lines a student keeps: the signature and docstring."""
    return [
        line
        for line in GIVEN[question].split("\n")
        if "YOUR CODE" not in line and "NotImplemented" not in line
    ]


def honest(question: str, rng: random.Random) -> tuple[list[str], list[str]]:
    """An honest answer's statements: (the body, and for a class, the forward's body)."""
    if question == "softmax":
        return _with_quirks(_steps(SOFTMAX, rng), question, rng), []
    if question == "attention":
        return _with_quirks(_steps(ATTENTION, rng), question, rng), []
    return _with_quirks(_steps(HEADS_INIT, rng), question, rng, False), _steps(HEADS_FORWARD, rng)


def render(
    question: str, body: list[str], forward: list[str], names: dict[str, str], rng: random.Random
) -> str:
    """The answer cell as a student writes it: the given header, the statements with the names
    and layout of this student (comments, blank lines)."""

    def dressed(statements: list[str]) -> list[str]:
        lines = []
        for statement in statements:
            if rng.random() < 0.15:
                lines.append(rng.choice(COMMENTS))
            lines.append(statement.format(**names))
            if rng.random() < 0.1:
                lines.append("")
        return lines

    header = _header(question)
    if question != "heads":
        return "\n".join(header + _indent(dressed(body), 4))
    init_at = header.index("        super().__init__()") + 1
    forward_at = next(i for i, line in enumerate(header) if "def forward" in line) + 1
    lines = (
        header[:init_at]
        + _indent(dressed(body), 8)
        + header[init_at:forward_at]
        + _indent(dressed(forward), 8)
    )
    return "\n".join(line for line in lines if line.strip() or rng.random() < 0.5)


def disguise(code: str, rng: random.Random) -> str:
    """A copy disguised cheaply: its own names for the answer's names, other spacing, quotes and
    comments, long lines broken."""
    renamed = code
    for options in NAMES.values():
        for name in options:
            if re.search(rf"(?<![\w.]){re.escape(name)}\b(?!\s*=\s*\w+\))", renamed) and rng.random() < 0.7:
                other = rng.choice(options) + rng.choice(["", "_", "2", "_t"])
                renamed = re.sub(rf"(?<![\w.\"]){re.escape(name)}\b", other, renamed)
    lines = []
    for line in renamed.split("\n"):
        if line.strip().startswith("#"):
            continue
        if '"""' not in line and rng.random() < 0.5:  # docstrings keep their quotes
            line = line.replace('"', "'")
        line = re.sub(r", (?=\S)", ",", line) if rng.random() < 0.3 else line
        if "(" in line and line.rstrip().endswith(")") and rng.random() < 0.3:
            head, _, rest = line.partition("(")
            pad = " " * (len(line) - len(line.lstrip()) + 4)
            line = f"{head}(\n{pad}{rest}"
        lines.append(line + ("  # mine" if rng.random() < 0.1 else ""))
    return "\n".join(lines)


def _shuffled_projections(body: list[str], rng: random.Random) -> list[str]:
    places = [i for i, statement in enumerate(body) if re.match(r"self\.\{(qp|kp|vp|op)\} = ", statement)]
    body = list(body)
    for place, statement in zip(places, rng.sample([body[i] for i in places], len(places)), strict=True):
        body[place] = statement
    return body


def generated_class(students: int, seed: int = 0, copiers: float = 0.15) -> tuple[list[Written], Answer]:
    """`students` students' answers to the three questions; about `copiers` of them copy one
    answer each, another student's or the published solution (returned too), in one of the ways."""
    rng = random.Random(seed)
    published_names = student_names(rng)
    published = {q: render(q, *honest(q, rng), published_names, rng) for q in GIVEN}
    source = Answer("published/solutions.py", "", "", GIVEN_CELL + "\n\n".join(published.values()), "known")
    written: dict[tuple[str, str], Written] = {}
    plans = {}
    for index in range(students):
        student = f"s{index:04d}"
        names = student_names(rng)
        for question in GIVEN:
            plans[student, question] = honest(question, rng)
            code = render(question, *plans[student, question], names, rng)
            written[student, question] = Written(Answer(student, NOTEBOOK, question, code), student, "honest")
    for _ in range(int(students * copiers)):
        original = rng.choice(list(written.values()))
        question, victim = original.answer.question, original.answer.owner
        copier = f"s{rng.randrange(students):04d}"
        if copier == victim or original.how != "honest" or written[copier, question].how != "honest":
            continue
        ways = ["exact", "disguised", "edited", "published"] + (["reordered"] if question == "heads" else [])
        how = rng.choice(ways)
        lineage, code = victim, original.answer.source
        if how == "published":
            lineage, code = source.owner, disguise(published[question], rng)
        elif how == "disguised":
            code = disguise(code, rng)
        elif how == "reordered":  # the four projections of __init__ shuffled in their places, disguised
            body, forward = plans[victim, question]
            code = disguise(
                render(question, _shuffled_projections(body, rng), forward, student_names(rng), rng), rng
            )
        elif how == "edited":
            lines = code.split("\n")
            at = rng.randrange(len(_header(question)), len(lines))
            lines.insert(at, lines[at][: len(lines[at]) - len(lines[at].lstrip())] + "pass  # checked")
            code = "\n".join(lines)
        written[copier, question] = Written(Answer(copier, NOTEBOOK, question, code), lineage, how)
    return list(written.values()), source


def copy_pairs(written: list[Written], source: Answer) -> set[tuple[str, str, str]]:
    """(question, student, other) of every pair that is a copy: one answer from the other, or both
    from the same; `other` is the source's owner where the answer comes from it."""
    pairs = set()
    by_lineage = {}
    for w in written:
        by_lineage.setdefault((w.answer.question, w.lineage), []).append(w.answer.owner)
    for (question, lineage), owners in by_lineage.items():
        if lineage == source.owner:
            pairs |= {(question, owner, source.owner) for owner in owners}
        owners = sorted(owners)
        pairs |= {(question, a, b) for i, a in enumerate(owners) for b in owners[i + 1 :]}
    return pairs


SHORT_RARE = (
    "    assert x.is_floating_point()\n    dim = dim % x.dim()\n    return torch.softmax(x.float(), dim)"
)


def planted_class(students: int = 60, seed: int = 0) -> tuple[list[Answer], Answer, set, set]:
    """An honest generated class with one copy of each kind planted, and two students who wrote
    the same short softmax that nobody else writes. Returns the answers, the published source,
    the copy pairs (question, student, other) and the pair that must not be flagged."""
    rng = random.Random(seed)
    written, source = generated_class(students, seed=seed, copiers=0)
    answers = {(w.answer.owner, w.answer.question): w.answer for w in written}

    def plant(copier: str, question: str, code: str) -> None:
        answers[copier, question] = Answer(copier, NOTEBOOK, question, code)

    plant("s0001", "attention", answers["s0002", "attention"].source)  # exact
    plant("s0003", "heads", disguise(answers["s0004", "heads"].source, rng))  # renamed, reformatted
    plant("s0005", "attention", disguise(answers["s0006", "attention"].source, rng))
    published_heads = source.source[source.source.index("class MultiHead") :]
    plant("s0007", "heads", disguise(published_heads, rng))  # from the published solutions
    reordered = _reordered_heads(answers["s0008", "heads"].source, rng)
    plant("s0009", "heads", reordered)
    header = "\n".join(_header("softmax"))
    plant("s0010", "softmax", f"{header}\n{SHORT_RARE}")
    plant("s0011", "softmax", disguise(f"{header}\n{SHORT_RARE}", rng))  # the same, by chance
    copies = {
        ("attention", "s0001", "s0002"),
        ("heads", "s0003", "s0004"),
        ("attention", "s0005", "s0006"),
        ("heads", "s0007", source.owner),
        ("heads", "s0008", "s0009"),
    }
    return list(answers.values()), source, copies, {("softmax", "s0010", "s0011")}


def _reordered_heads(code: str, rng: random.Random) -> str:
    """The answer's four projection lines shuffled among their places, then disguised."""
    lines = code.split("\n")
    places = [i for i, line in enumerate(lines) if re.match(r"\s+self\.\w+ = (torch\.)?nn\.Linear\(", line)]
    order = list(places)
    while order == places:
        order = rng.sample(places, len(places))
    moved = list(lines)
    for place, origin in zip(places, order, strict=True):
        moved[place] = lines[origin]
    return disguise("\n".join(moved), rng)
