"""Notebook 08's case generators, CASES by check name: the grader's side only (autograder/reference.py)."""

import math

import torch
import torch.nn as nn
from torch import Tensor

from autograder import language_model as lm
from autograder import reference
from autograder.checks.transformer import (
    ASSIGNMENT,
    BLOCK_PARTS,
    BUILT,
    CAST,
    GQA_BLOCK,
    GQA_COSTS,
    GROUPED,
    GROUPED_EDGES,
    NAMED,
    REGISTERED,
    ROTATION,
    SMOKE,
    TRAIN_RECIPE,
    WHOLE,
)
from autograder.core import Case


def _int(g: torch.Generator, low: int, high: int) -> int:
    """A random int in [low, high]."""
    return int(torch.randint(low, high + 1, (), generator=g))


def _stand_in(g: torch.Generator, d: int) -> tuple[Tensor, Tensor]:
    """The (A, b) of one stand-in, tanh(x A + b): a function of the right shape, no real layer."""
    return torch.randn(d, d, generator=g) * 1.5 * d**-0.5, torch.randn(d, generator=g) * 0.5


def _table(angles: Tensor) -> Tensor:
    """A RoPE-shaped table of unit complex numbers from angles (C, Dh // 2); not RoPE's angles.
    The cases carry the table, so that this last step of notebook 04's answer is not in the release."""
    return torch.polar(torch.ones_like(angles), angles)


BLOCK_SHAPES = [
    (2, 7, 16, 4, 5, 24, 4, 2),
    (1, 5, 12, 3, 4, 16, 3, 1),
    (1, 1, 8, 2, 3, 12, 2, 2),
]  # B T D H W F E K


def _block_inputs(g: torch.Generator, shape: tuple[int, ...]) -> dict:
    b, t, d, h, w, f, e, k = shape
    return {
        "args": (d, h, w, f, e, k),
        "table": _table(torch.rand(t + 3, d // h // 2, generator=g) * 2 * math.pi),  # any: (C, Dh // 2)
        "x": torch.randn(b, t, d, generator=g),
        "stand_ins": {name: _stand_in(g, d) for name in BLOCK_PARTS},
    }


def _block_name(shape: tuple[int, ...]) -> str:
    b, t, d, h, w, f, e, k = shape
    return f"TransformerBlock({d}, {h}, {w}, {f}, {e}, {k}, table), x of shape ({b}, {t}, {d})"


def block_cases(g: torch.Generator, hidden: bool) -> list[Case]:
    shapes = list(BLOCK_SHAPES)
    if hidden:
        for _ in range(2):
            h = _int(g, 1, 4)
            d = h * 2 * _int(g, 1, 4)
            e = _int(g, 1, 6)
            shapes.append(
                (_int(g, 1, 3), _int(g, 1, 12), d, h, _int(g, 1, 9), d + _int(g, 1, 8), e, _int(g, 1, e))
            )
    cases = [Case(_block_name(s), {**_block_inputs(g, s), "part": "wiring"}) for s in shapes]
    built = shapes[:2] + shapes[3:4]
    cases += [
        Case(f"{_block_name(s)}: its parts", {**_block_inputs(g, s), "part": "built"}, concern=BUILT)
        for s in built
    ]
    shape = shapes[0]
    names = Case(
        f"{_block_name(shape)}: its parts' names", {**_block_inputs(g, shape), "part": "names"}, concern=NAMED
    )
    return [*cases, names]


MODEL_SHAPES = [
    (11, 16, 4, 5, 24, 4, 2, 2, 20, 2, 9),
    (7, 8, 2, 3, 12, 3, 1, 3, 10, 1, 8),
]  # V D H W F E K N C B T; C differs from D, so that a table of hidden_size rows is told apart


def _model_shape(g: torch.Generator) -> tuple[int, ...]:
    h = _int(g, 1, 3)
    # hidden_size 4 at least: a 2-vector can fall near the origin, where RMSNorm magnifies float32
    # rounding without bound (with hidden_size 2 drawn, the 7 worst of 2000 seeds of correct parts of
    # other spellings were all hidden_size 2, up to 0.80 of the tolerance, and a drawn seed failed).
    d, e = max(h * 2 * _int(g, 1, 4), 4), _int(g, 1, 5)
    c = _int(g, 4, 24)
    return (
        _int(g, 2, 20),
        d,
        h,
        2 * _int(g, 0, 4) + 1,  # odd: a layer that fails an even window loses points in notebook 03 only
        d + _int(g, 1, 8),
        e,
        _int(g, 1, e),
        _int(g, 1, 3),
        c,
        _int(g, 1, 2),
        _int(g, 1, c),
    )


def reference_state(g: torch.Generator, shape: tuple[int, ...]) -> dict[str, Tensor]:
    """Random weights under the reference's parameter names. Each expert's w1 and w3 are equal, so
    that either may be the gated one whatever the student named them (06.feed_forward grades which)."""
    v, d, _, _, f, e, _, n, *_ = shape
    state = {"embedding.weight": torch.randn(v, d, generator=g)}
    for i in range(n):
        p = f"blocks.{i}."
        state[p + "norm1.weight"] = 1 + 0.2 * torch.randn(d, generator=g)
        state[p + "attention.qkv_linear.weight"] = torch.randn(3 * d, d, generator=g) * d**-0.5
        state[p + "attention.qkv_linear.bias"] = 0.1 * torch.randn(3 * d, generator=g)
        state[p + "attention.out.weight"] = torch.randn(d, d, generator=g) * d**-0.5
        state[p + "attention.out.bias"] = 0.1 * torch.randn(d, generator=g)
        state[p + "norm2.weight"] = 1 + 0.2 * torch.randn(d, generator=g)
        state[p + "moe.gate.weight"] = torch.randn(e, d, generator=g) * 1.5 * d**-0.5
        for j in range(e):
            w1 = torch.randn(f, d, generator=g) * 2 * d**-0.5
            state[p + f"moe.experts.{j}.w1.weight"] = w1
            state[p + f"moe.experts.{j}.w2.weight"] = torch.randn(d, f, generator=g) * f**-0.5
            state[p + f"moe.experts.{j}.w3.weight"] = w1.clone()
    state["out.weight"] = torch.randn(v, d, generator=g) * 0.25 * d**-0.5  # logits of a few units
    state["out.bias"] = torch.zeros(v)  # zero: a head without a bias (the student's choice) is the same
    return state


def _model_name(shape: tuple[int, ...]) -> str:
    """The constructor's call, and the tokens' shape where the shape has one."""
    call = f"Transformer{tuple(shape[:9])}"
    return call if len(shape) == 9 else f"{call}, tokens of shape {tuple(shape[9:])}"


def model_cases(g: torch.Generator, hidden: bool) -> list[Case]:
    shapes = list(MODEL_SHAPES)
    if hidden:
        shapes += [_model_shape(g) for _ in range(2)]
        shapes.append((*_model_shape(g)[:7], 1, 6, 2, 1))  # one block, T = 1
    cases = []
    for shape in shapes:
        v, d, *_, n, c, b, t = shape
        inputs = {"args": shape[:9], "tokens": torch.randint(v, (b, t), generator=g)}
        wiring = {
            "part": "wiring",
            "embedding": torch.randn(v, d, generator=g),
            "out": torch.randn(v, d, generator=g) * d**-0.5,
            "stand_ins": [_stand_in(g, d) for _ in range(n)],
        }
        cases.append(Case(_model_name(shape), {**inputs, **wiring}))
        state = reference_state(g, shape)
        given, returned = course_parts(shape[:9], state, inputs["tokens"])
        cases.append(
            Case(
                f"{_model_name(shape)}: your parts",
                {**inputs, "part": "whole", "state": state, "part inputs": given},
                judge_only={"part outputs": returned},
                concern=WHOLE,
            )
        )
    for shape in shapes[:2] + shapes[3:4]:
        inputs = {"args": shape[:9]}
        cases.append(
            Case(
                f"{_model_name(shape[:9])}: its blocks",
                {**inputs, "part": "registered"},
                concern=REGISTERED,
            )
        )
        cases.append(
            Case(f"{_model_name(shape[:9])}: its table", {**inputs, "part": "table"}, concern=ROTATION)
        )
    shape = shapes[0]
    state = reference_state(g, shape)
    tokens = torch.randint(shape[0], shape[-2:], generator=g)
    cases.append(
        Case(
            f"{_model_name(shape)}, cast",
            {"args": shape[:9], "tokens": tokens, "part": "cast", "state": state},
            concern=CAST,
        )
    )
    return cases


def course_parts(args: tuple, state: dict[str, Tensor], tokens: Tensor) -> tuple[dict, dict]:
    """What each part of the course's model, with the case's weights, is given on tokens and what it
    returns: norms (N, 2, B, T, D), attention and moe (N, B, T, D), the head's input (B, T, D).
    Trusted (the cases' side): the inputs go to the kernel, the outputs stay with the judge."""
    model = reference.namespace(ASSIGNMENT)["Transformer"](*args)
    lm.load_weights(model, state)
    modules = {"embedding": model.embedding, "head": model.out}
    modules |= {
        f"{i}.{name}": getattr(block, name) for i, block in enumerate(model.blocks) for name in BLOCK_PARTS
    }
    seen: dict[str, tuple[Tensor, Tensor]] = {}

    def recorder(name: str):
        def record(module: nn.Module, given: tuple, returned: Tensor) -> None:  # None: output unchanged
            seen.setdefault(name, (given[0], returned))

        return record

    hooks = [module.register_forward_hook(recorder(name)) for name, module in modules.items()]
    with torch.no_grad():
        model(tokens)
    for hook in hooks:
        hook.remove()

    def stacked(name: str, which: int) -> Tensor:  # over the blocks
        return torch.stack([seen[f"{i}.{name}"][which] for i in range(len(model.blocks))])

    given = {
        "norms": torch.stack([stacked("norm1", 0), stacked("norm2", 0)], dim=1),
        "attention": stacked("attention", 0),
        "moe": stacked("moe", 0),
        "head": seen["head"][0],
    }
    returned = {
        "norm outputs": torch.stack([stacked("norm1", 1), stacked("norm2", 1)], dim=1),
        "attention outputs": stacked("attention", 1),
        "moe outputs": stacked("moe", 1),
        "embedding output": seen["embedding"][1],
        "head output": seen["head"][1],
    }
    return given, returned


SENTENCES = [
    "the cat sat on the warm mat and the dog slept by the door",
    "every student reads the notebook before the check runs the hidden tests",
    "small models learn fast but large models learn more",
    "a window of eleven tokens slides over a sentence of many words",
]


def smoke_cases(g: torch.Generator, hidden: bool) -> list[Case]:
    chosen = [SENTENCES[_int(g, 1, len(SENTENCES) - 1)]] if hidden else [SENTENCES[0]]
    cases = []
    for text in chosen:
        words = text.split()
        vocabulary = sorted(set(words))
        tokens = torch.tensor([[vocabulary.index(w) for w in words]])
        seed = _int(g, 0, 2**20) if hidden else 0
        # The fewest parameters the model may hold, counted on the reference (on the judge's side; a
        # notebook reads the visible case's count from its snapshot).
        model = reference.namespace(ASSIGNMENT)["Transformer"](len(vocabulary), *SMOKE)
        cases.append(
            Case(
                f'"{text}", seed {seed}',
                {"tokens": tokens, "vocabulary_size": len(vocabulary), "seed": seed},
                judge_only={"parameters": sum(p.numel() for p in model.parameters())},
            )
        )
    return cases


COUNT_CONFIGS = [(30, 64, 4, 16, 128, 4, 2, 2, 64), (32000, 4096, 32, 4096, 14336, 8, 2, 32, 32768)]


def _count_config(g: torch.Generator) -> tuple[int, ...]:
    h, e = _int(g, 1, 16), _int(g, 1, 64)
    d = h * _int(g, 1, 256)
    return (
        _int(g, 2, 60000),
        d,
        h,
        _int(g, 1, 4096),
        _int(g, 1, 20000),
        e,
        _int(g, 1, e),
        _int(g, 1, 80),
        _int(g, 1, 10**5),
    )


def count_cases(g: torch.Generator, hidden: bool) -> list[Case]:
    # One drawn configuration among the visible cases too, so that no table of answers passes them.
    configs = [*COUNT_CONFIGS, *(_count_config(g) for _ in range(3 if hidden else 1))]
    if hidden:
        configs.append((2, 1, 1, 1, 1, 1, 1, 1, 1))
    return [Case(f"transformer_parameters{config}", {"config": config}) for config in configs]


PREFIXES, PREFIX_LENGTH = 256, 24


def training_cases(g: torch.Generator, hidden: bool) -> list[Case]:
    seed = _int(g, 0, 2**20) if hidden else 0
    # Its own seed, kept from the kernel: from the training text's seed it could be regenerated. One
    # prefix per stretch of 2 L characters, so that no prefix holds another's next character.
    held_out = lm.encode(lm.course_text(PREFIXES * 2 * PREFIX_LENGTH, _int(g, 2**20 + 1, 2**31 - 2)))
    starts = torch.arange(PREFIXES) * 2 * PREFIX_LENGTH + torch.randint(
        PREFIX_LENGTH, (PREFIXES,), generator=g
    )
    windows = torch.stack([held_out[s : s + PREFIX_LENGTH + 1] for s in starts.tolist()])  # (n, L + 1)
    return [
        Case(
            f"trained {TRAIN_RECIPE['steps']} steps on text of seed {seed}, {PREFIXES} held-out prefixes",
            {"text_seed": seed, "prefixes": windows[:, :-1]},
            judge_only={"next": windows[:, -1]},  # the character after each prefix: never in the kernel
        )
    ]


# ------------------------------------------------- Question 5 (added): grouped-query attention


def gqa_weights(g: torch.Generator, d: int, h: int, h_kv: int) -> dict[str, Tensor]:
    """Weights and biases of wq, wk, wv, wo for hidden size d, h query heads and h_kv key/value heads."""
    dh = d // h
    shapes = {"wq": (h * dh, d), "wk": (h_kv * dh, d), "wv": (h_kv * dh, d), "wo": (d, h * dh)}
    weights = {}
    for name, (rows, columns) in shapes.items():
        weights[f"{name}.weight"] = torch.randn(rows, columns, generator=g) * columns**-0.5
        weights[f"{name}.bias"] = 0.1 * torch.randn(rows, generator=g)
    return weights


def _attention_case(
    g: torch.Generator, shape: tuple[int, ...], table: bool, concern: str, note: str = ""
) -> Case:
    b, t, d, h, h_kv, w = shape
    angles = torch.rand(t + 2, d // h // 2, generator=g) * 2 * math.pi
    inputs = {
        "config": (d, h, h_kv, w),
        "table": _table(angles) if table else None,
        "x": torch.randn(b, t, d, generator=g),
        "weights": gqa_weights(g, d, h, h_kv),
    }
    table_name = "table" if table else "None"
    name = (
        f"GroupedQueryWindowAttention({d}, {h}, {h_kv}, {w}, {table_name}), x of shape ({b}, {t}, {d}){note}"
    )
    return Case(name, inputs, concern=concern)


def _grouped_shape(g: torch.Generator) -> tuple[int, ...]:
    """B T D H Hkv W with 1 < Hkv < H, Hkv dividing H."""
    h_kv = _int(g, 2, 4)
    h = h_kv * _int(g, 2, 3)
    return _int(g, 1, 3), _int(g, 2, 14), h * 2 * _int(g, 1, 3), h, h_kv, 2 * _int(g, 0, 4) + 1


GQA_BLOCK_ARGS = [(16, 4, 2, 5, 24, 4, 2), (24, 6, 3, 3, 32, 3, 1)]  # D H Hkv W F E K
# The first tells the cache's mistakes apart (keys only: / 2; one layer: / N; values: / bytes).
GQA_COST_CONFIGS = [
    (4096, 32, 8, 32, 4),  # Mistral 7B, float32
    (8192, 64, 8, 80, 2),  # Llama 2 70B, bfloat16
    (64, 4, 2, 2, 4),  # the course's model, float32
]  # D H Hkv N bytes


def _block_args(g: torch.Generator) -> tuple[int, ...]:
    h_kv = _int(g, 1, 3)
    h = h_kv * _int(g, 1, 3)
    d = h * 2 * _int(g, 1, 3)
    e = _int(g, 1, 4)
    return d, h, h_kv, 2 * _int(g, 0, 4) + 1, d + _int(g, 1, 8), e, _int(g, 1, e)


def _cost_config(g: torch.Generator) -> tuple[int, ...]:
    h_kv = _int(g, 1, 16)
    h = h_kv * _int(g, 1, 8)
    return h * _int(g, 1, 256), h, h_kv, _int(g, 1, 120), (1, 2, 4, 8)[_int(g, 0, 3)]


def gqa_cases(g: torch.Generator, hidden: bool) -> list[Case]:
    grouped = [(2, 9, 32, 8, 2, 5), (1, 7, 24, 6, 3, 3)]  # B T D H Hkv W
    if hidden:
        grouped += [_grouped_shape(g) for _ in range(2)]
    cases = [_attention_case(g, shape, True, GROUPED) for shape in grouped]
    # With one key/value head or num_heads of them, every order of the copies is right: the edges do
    # not charge the grouping again, which the core grades.
    edges = [
        ((2, 6, 16, 4, 1, 5), True, ": multi-query"),
        ((1, 6, 16, 4, 4, 3), True, ": multi-head"),
        ((2, 5, 16, 4, 1, 3), False, ": no table"),
        ((1, 2, 16, 4, 4, 7), True, ": T below the window"),
    ]
    if hidden:
        h = _int(g, 2, 6)
        edges += [
            ((1, 1, 4 * h, h, 1, 2 * _int(g, 1, 3) + 1), True, ": T = 1"),
            ((_int(g, 1, 2), _int(g, 2, 10), 4 * h, h, 1, 2 * _int(g, 0, 3) + 1), True, ": multi-query"),
            ((_int(g, 1, 2), _int(g, 2, 10), 4 * h, h, h, 2 * _int(g, 0, 3) + 1), True, ": multi-head"),
        ]
    cases += [_attention_case(g, shape, table, GROUPED_EDGES, note) for shape, table, note in edges]
    block_args = GQA_BLOCK_ARGS + ([_block_args(g)] if hidden else [])
    for args in block_args:
        table = _table(torch.rand(9, args[0] // args[1] // 2, generator=g) * 2 * math.pi)
        call = f"GQATransformerBlock{(*args, 'table')}".replace("'table'", "table")
        cases.append(Case(call, {"args": args, "table": table}, concern=GQA_BLOCK))
    configs = [*GQA_COST_CONFIGS, *(_cost_config(g) for _ in range(3 if hidden else 1))]
    if hidden:
        configs.append((1, 1, 1, 1, 1))
    cases += [Case(f"gqa_costs{config}", {"config": config}, concern=GQA_COSTS) for config in configs]
    # The cheapest first: judging stops at a failed case, so an answer that is wrong fails fast
    # (tests/test_package_answers.py tries every object of the package in each of the three slots).
    order = {GQA_COSTS: 0, GQA_BLOCK: 1}
    return sorted(cases, key=lambda case: order.get(case.concern, 2))


CASES = {
    "08.block": block_cases,
    "08.transformer": model_cases,
    "08.smoke_test": smoke_cases,
    "08.parameter_count": count_cases,
    "08.training": training_cases,
    "08.gqa": gqa_cases,
}
