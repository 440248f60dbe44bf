"""Notebook 10's case generators, CASES by check name: the grader's side only (autograder/reference.py)."""

from collections.abc import Mapping

import torch
import torch.nn as nn
from torch import Tensor

from autograder import language_model as lm
from autograder.checks.inspection import (
    COURSE,
    LARGE,
    NO_HOOK_LEFT,
    ONE_CALL,
    OTHER_SIZE,
    ZERO_ROWS,
    ToyModel,
    recorded_model,
)
from autograder.core import Case
from autograder.language_model import CourseModel, course_model


def random_weights(g: torch.Generator, shapes: Mapping[str, tuple[int, ...]]) -> dict[str, Tensor]:
    """Weights of a model's shapes, by name: matrices of nn.Linear's scale (1.5 x), norms near 1,
    biases small; the embedding standard normal."""
    state = {}
    for name, shape in shapes.items():
        if name.endswith("embedding.weight") or name.endswith("embed.weight"):
            state[name] = torch.randn(shape, generator=g)
        elif len(shape) == 2:
            state[name] = torch.randn(shape, generator=g) * 1.5 * shape[1] ** -0.5
        elif "norm" in name:
            state[name] = 1 + 0.2 * torch.randn(shape, generator=g)
        else:
            state[name] = 0.1 * torch.randn(shape, generator=g)
    return state


def _shapes(model: nn.Module) -> dict[str, tuple[int, ...]]:
    return {name: tuple(value.shape) for name, value in model.state_dict().items()}


def _int(g: torch.Generator, low: int, high: int) -> int:
    """A random int in [low, high]."""
    return int(torch.randint(low, high + 1, (), generator=g))


def drawn_config(g: torch.Generator, *, max_seq_len: int | None = None) -> dict:
    """A CourseModel configuration of another size than the course's: H, Dh, W, E, K, N drawn."""
    h, dh = _int(g, 1, 4), 2 * _int(g, 1, 4)
    e = _int(g, 1, 4)
    return {
        "vocabulary_size": len(lm.ALPHABET),
        "hidden_size": h * dh,
        "num_heads": h,
        "window_size": _int(g, 2, 9),
        "d_ff": _int(g, 4, 24),
        "num_experts": e,
        "n_experts_per_token": _int(g, 1, e),
        "n_blocks": _int(g, 1, 3),
        "max_seq_len": max_seq_len or _int(g, 12, 40),
    }


def model_inputs(g: torch.Generator, config: dict | None) -> dict:
    """Case inputs naming a model: the course's checkpoint (config None), or one of `config`'s size with
    weights drawn here."""
    if config is None:
        return {"model": "course"}
    return {"model": "drawn", "config": config, "state": random_weights(g, _shapes(CourseModel(config)))}


def _text_tokens(g: torch.Generator, length: int) -> Tensor:
    """`length` characters of the course's text from a drawn seed and offset, as tokens (length,)."""
    text = lm.course_text(length + 200, _int(g, 100, 2**30))
    start = _int(g, 0, 199)
    return lm.encode(text[start : start + length])


def _toy_inputs(g: torch.Generator, sizes: dict, batch: int, length: int) -> dict:
    state = random_weights(g, _shapes(ToyModel({**sizes, "fails": False})))
    tokens = torch.randint(sizes["V"], (batch, length), generator=g)
    return {"model": "toy", "sizes": sizes, "state": state, "tokens": tokens}


def _ran(model: nn.Module, tokens: Tensor) -> list[str]:
    """The names of the modules that run in model(tokens), in named_modules' order."""
    seen = set()
    handles = [m.register_forward_hook(lambda m, a, o: seen.add(id(m))) for m in model.modules()]
    try:
        with torch.no_grad():
            model(tokens)
    finally:
        for handle in handles:
            handle.remove()
    return [name for name, m in model.named_modules() if id(m) in seen]


COURSE_SPLIT = ("embedding, out, the model itself and blocks.0", "blocks.1")


def record_cases(g: torch.Generator, hidden: bool) -> list[Case]:
    model = course_model()
    cases = []
    prompts = [lm.encode("the cats see a bird.")[None]]
    if hidden:
        prompts = [_text_tokens(g, _int(g, 1, 40)).expand(_int(g, 1, 2), -1).clone() for _ in range(2)]
    names = _ran(model, prompts[0])
    first = [n for n in names if not n.startswith("blocks.1")]
    for tokens in prompts:
        second = [n for n in names if n.startswith("blocks.1")]
        for part, chosen in zip(COURSE_SPLIT, (first, second), strict=True):
            shape = tuple(tokens.shape)
            cases.append(
                Case(
                    f"the course's model on tokens of shape {shape}: the records of {part}",
                    {"model": "course", "tokens": tokens, "names": chosen},
                )
            )
    toys = [({"V": 7, "D": 6, "F": 10, "twice": True}, 2, 5)]
    if hidden:
        toys += [
            (
                {"V": _int(g, 2, 12), "D": _int(g, 2, 10), "F": _int(g, 2, 12), "twice": twice},
                _int(g, 1, 3),
                t,
            )
            for twice, t in ((True, _int(g, 1, 8)), (bool(_int(g, 0, 1)), 1))
        ]
    for sizes, batch, length in toys:
        inputs = _toy_inputs(g, {**sizes, "fails": False}, batch, length)
        toy = recorded_model(inputs)
        called = "shared called twice" if sizes["twice"] else "shared called once"
        cases.append(
            Case(
                f"a small model ({called}; V={sizes['V']}, D={sizes['D']}, F={sizes['F']}) on tokens of "
                f"shape ({batch}, {length})",
                {**inputs, "names": _ran(toy, inputs["tokens"])},
            )
        )
    # The hooks' concern: a call that returns, then one whose forward raises halfway.
    tokens = prompts[0] if not hidden else _text_tokens(g, _int(g, 1, 30))[None]
    sizes, batch, length = toys[-1]
    cases.append(
        Case(
            f"the course's model on tokens of shape {tuple(tokens.shape)}, then a small model whose forward "
            "raises a RuntimeError halfway: the hooks after each call",
            {
                "model": "course",
                "tokens": tokens,
                "failing": _toy_inputs(g, {**sizes, "fails": True}, batch, length),
            },
            concern=NO_HOOK_LEFT,
        )
    )
    return cases


def probability_cases(g: torch.Generator, hidden: bool) -> list[Case]:
    shapes = [(2, 5, 30), (1, 1, 30), (7, 11), (3, 2, 4, 6)]
    if hidden:
        shapes += [tuple(_int(g, 1, 4) for _ in range(_int(g, 0, 2))) + (_int(g, 1, 9), _int(g, 2, 40))]
        shapes += [(_int(g, 1, 3), 1, _int(g, 2, 40))]
    cases = [
        Case(f"logits of shape {s} (scale 3)", {"logits": 3 * torch.randn(s, generator=g)}) for s in shapes
    ]
    with torch.no_grad():
        text = lm.encode("the old men feed the dogs")[None] if not hidden else _text_tokens(g, 20)[None]
        # In float64, then rounded: the same float32 logits on every CPU (float32 products round
        # differently from one CPU to another, and a batch's cases must not depend on the machine).
        logits = course_model().double()(text).float()
        cases.append(Case("the course's model's logits, shape (1, T, 30)", {"logits": logits}))
    large = [(2, 3, 10), (1, 4, 30)] + ([(_int(g, 1, 3), _int(g, 1, 5), _int(g, 2, 30))] if hidden else [])
    for s in large:
        logits = 1000 * torch.randn(s, generator=g).sign() + torch.randn(s, generator=g)
        cases.append(Case(f"logits of shape {s} near +-1000", {"logits": logits}, concern=LARGE))
    return cases


# float32's spacing between 1 and 2. A row of multiples of it sums exactly (each partial sum is such a
# multiple below 2, which float32 holds), so its sum is the same in any order, on any CPU: a float32
# softmax's own rows sum in another order per CPU (AVX2 against AVX-512), and the seed's exact test
# passed other rows on each.
GRID = 2.0**-23
ULPS_OFF = (0, 1, -1, 2, -2, 1)  # how far each drawn row's sum is from 1, in units of GRID


def _on_grid(p: Tensor, ulps_off: float) -> Tensor:
    """p (float64, one row) rounded to multiples of GRID, its largest entry moved so that the row
    sums to exactly 1 + ulps_off * GRID."""
    units = torch.round(p / GRID)
    units[units.argmax()] += round(1 / GRID + ulps_off) - units.sum()
    return (units * GRID).float()


def distribution_cases(g: torch.Generator, hidden: bool) -> list[Case]:
    def rows(v: int, atol: float) -> Tensor:
        # Softmax rows whose float32 sums miss 1 by a rounding or two, or not at all: the seed's
        # exact test fails some of them, and fails the same ones on every machine.
        soft = torch.softmax(4 * torch.randn(6, v, generator=g, dtype=torch.float64), dim=-1)
        drawn = torch.stack([_on_grid(row, off) for row, off in zip(soft, ULPS_OFF, strict=True)])
        one_hot = torch.zeros(v).index_fill(0, torch.tensor([v // 2]), 1.0)
        negative = drawn[0].clone()
        negative[0] += 0.5
        negative[1] -= 0.5  # sums to 1, one entry below 0
        near = _on_grid(soft[1], atol / 2 / GRID)  # within atol
        off = _on_grid(soft[2], 3 * atol / GRID)  # 3 atol off
        nan = drawn[3].clone()
        nan[0] = float("nan")
        return torch.stack([*drawn, one_hot, negative, near, off, nan, torch.zeros(v)])

    cases = [
        Case(f"12 rows of {v} entries, atol={atol:g}", {"p": rows(v, atol), "atol": atol})
        for v, atol in ((30, 1e-5), (5, 1e-3), (11, 1e-6))
    ]
    p = rows(8, 1e-4).view(3, 4, 8)
    cases.append(Case("a (3, 4, 8) tensor of distributions and others, atol=0.0001", {"p": p, "atol": 1e-4}))
    if hidden:
        for _ in range(2):
            v, atol = _int(g, 3, 40), float(10 ** -_int(g, 3, 6))
            x = rows(v, atol)
            x = x[torch.randperm(len(x), generator=g)]
            cases.append(
                Case(f"12 rows of {v} entries in a drawn order, atol={atol:g}", {"p": x, "atol": atol})
            )
    return cases


COURSE_CONTEXT = lm.COURSE_MODEL["max_seq_len"]


def next_cases(g: torch.Generator, hidden: bool) -> list[Case]:
    prompts = ["the cat see", "the cats see", "my brothers carr", "a", "\n" + lm.course_text(200, 3)[:90]]
    cases = [
        Case(f"the course's model, prompt {p!r}", {"model": "course", "text": p, "context": 64})
        for p in prompts
    ]
    config = drawn_config(torch.Generator().manual_seed(5), max_seq_len=12) if not hidden else None
    drawn = [(config, "the sun is", 12)] if not hidden else []
    if hidden:
        for _ in range(2):
            text = lm.decode(_text_tokens(g, _int(g, 1, 100)))
            cases.append(
                Case(f"the course's model, prompt {text!r}", {"model": "course", "text": text, "context": 64})
            )
        for _ in range(2):
            config = drawn_config(g)
            drawn.append((config, lm.decode(_text_tokens(g, _int(g, 1, 60))), config["max_seq_len"]))
    for config, text, context in drawn:
        name = f"a random model (context {context}), prompt {text!r}"
        cases.append(Case(name, {**model_inputs(g, config), "text": text, "context": context}))
    return cases


def similarity_cases(g: torch.Generator, hidden: bool) -> list[Case]:
    shapes = [(6, 4), (3, 16), (1, 5), (30, 64)]
    if hidden:
        shapes += [(_int(g, 1, 40), _int(g, 1, 40)) for _ in range(2)]
    cases = []
    for v, d in shapes:
        e = torch.randn(v, d, generator=g) * torch.rand(v, 1, generator=g).add(0.1) * 3
        cases.append(Case(f"embeddings of shape ({v}, {d})", {"embeddings": e}))
    cases.append(
        Case(
            "the course's embedding matrix, shape (30, 64)",
            {"embeddings": course_model().embedding.weight.detach()},
        )
    )
    zero_shapes = [(5, 3)] + ([(_int(g, 2, 30), _int(g, 1, 30))] if hidden else [])
    for v, d in zero_shapes:
        e = torch.randn(v, d, generator=g)
        rows = torch.randperm(v, generator=g)[: max(1, v // 3)]
        e[rows] = 0.0
        cases.append(
            Case(
                f"embeddings of shape ({v}, {d}), rows {sorted(rows.tolist())} all zeros",
                {"embeddings": e},
                concern=ZERO_ROWS,
            )
        )
    v, d = (12, 8) if not hidden else (_int(g, 12, 30), _int(g, 2, 30))
    e, more = torch.randn(v, d, generator=g), torch.randn(4 * v, d, generator=g)
    cases.append(
        Case(
            f"embeddings of {v} and of {4 * v} rows, D={d}: counted",
            {"embeddings": e, "more": more},
            concern=ONE_CALL,
        )
    )
    return cases


def attention_cases(g: torch.Generator, hidden: bool) -> list[Case]:
    course = [
        (lm.encode("the farmers carry an old book near the house."), 0, 1),
        (lm.encode("my sister finds the river at night."), 1, 3),
        (lm.encode("a"), 1, 0),
    ]
    if hidden:
        course = [
            (_text_tokens(g, _int(g, 17, COURSE_CONTEXT)), _int(g, 0, 1), _int(g, 0, 3)) for _ in range(2)
        ]
        course += [(_text_tokens(g, _int(g, 1, 15)), _int(g, 0, 1), _int(g, 0, 3))]
        course += [(_text_tokens(g, COURSE_CONTEXT), 1, _int(g, 0, 3))]
    cases = [
        Case(
            f"{COURSE}, {len(tokens)} tokens, block {block}, head {head}",
            {"model": "course", "tokens": tokens, "block": block, "head": head},
        )
        for tokens, block, head in course
    ]
    configs = (
        [drawn_config(torch.Generator().manual_seed(3))]
        if not hidden
        else [drawn_config(g) for _ in range(2)]
    )
    for config in configs:
        t = _int(g, 1, config["max_seq_len"]) if hidden else config["max_seq_len"]
        tokens = torch.randint(config["vocabulary_size"], (t,), generator=g)
        block, head = _int(g, 0, config["n_blocks"] - 1), _int(g, 0, config["num_heads"] - 1)
        h, w, d = config["num_heads"], config["window_size"], config["hidden_size"]
        cases.append(
            Case(
                f"a random model (D={d}, H={h}, W={w}, {config['n_blocks']} blocks), {t} tokens, "
                f"block {block}, head {head}",
                {**model_inputs(g, config), "tokens": tokens, "block": block, "head": head},
                concern=OTHER_SIZE,
            )
        )
    return cases


CASES = {
    "10.record_activations": record_cases,
    "10.next_token_probabilities": probability_cases,
    "10.is_distribution": distribution_cases,
    "10.most_likely_next": next_cases,
    "10.cosine_similarity_matrix": similarity_cases,
    "10.attention_weights": attention_cases,
}
