"""Notebook 08 (the transformer): the pasted cells against notebooks 03-07, the parameter count
against the reference model, and how the checks grade what students hand in: a buggy or unfinished
part from an earlier notebook, blocks in a plain list, a RoPE table kept as a buffer, no rotations at
all, renamed parts, models that are random, too confident, blind to their input, frozen, that peek at
the next token, or that hold the course's lent model.

Key: B batch, T sequence length, D hidden size, H heads, F d_ff, E experts, K experts per token,
N blocks, C context (max_seq_len), V vocabulary size.
"""

import importlib
import warnings
from functools import cache

import nbformat
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from autograder import language_model as lm
from autograder import reference
from autograder.api import make_cases
from autograder.cells import grade_id
from autograder.checks.transformer import (
    BUILT,
    CAST,
    FEW_TOKENS,
    GQA_BLOCK,
    GQA_COSTS,
    GROUPED,
    GROUPED_EDGES,
    MANY_TOKENS,
    MODEL_WIRING,
    NAMED,
    REGISTERED,
    ROTATION,
    TRAINING,
    WHOLE,
    WIRING,
    _operations,
    made_causal,
)
from autograder.core import _fresh_copy
from autograder.exchange import write_cases
from autograder.lent_model import lent_model_in
from autograder.paths import source_notebook

from .helpers.homework_08 import BLOCKS, TRANSFORMER
from .helpers.submissions import (
    mistake,
    mutant,
    names_the_notebook_binds,
    namespace,
    parts,
    perfect,
    release,
    solution_sources,
    verdict,
    with_answer,
)

ASSIGNMENT = "08_transformer"
HIDDEN_SEED = 8
VISIBLE_AND_HIDDEN = pytest.mark.parametrize("seed", [None, HIDDEN_SEED], ids=["visible", "hidden"])
MODEL_CONCERNS = (MODEL_WIRING, REGISTERED, ROTATION, WHOLE, CAST)

CASES = reference.instructor_module("08_transformer", "cases.py")  # the hidden cases' generators


def ref(name: str):
    return reference.namespace(ASSIGNMENT)[name]


def part_message(result, concern: str) -> str:
    return next(part.message for part in result.parts if part.concern == concern)


def notebook_names(**sources: str) -> dict:
    """What a student's notebook defines: the reference's answers, the cells named here replaced."""
    notebook = perfect(ASSIGNMENT)
    for cell, source in sources.items():
        with_answer(notebook, cell, source)
    return namespace(notebook)


@cache
def answer(cell: str) -> str:
    return solution_sources(ASSIGNMENT)[cell]


@cache
def cells(assignment: str) -> dict[str, str]:
    """grade_id -> source of every tracked cell of a source notebook."""
    notebook = nbformat.read(source_notebook(assignment), as_version=4)
    return {grade_id(c): c.source for c in notebook.cells if grade_id(c)}


# ------------------------------------------------------------------ the notebook itself


@pytest.mark.parametrize(
    ("cell", "sources"),
    [
        ("from_03", [("03_sliding_window", "sliding_window")]),
        ("from_04", [("04_rope", "rotation_matrix"), ("04_rope", "rope_forward")]),
        ("from_06", [("06_moe", "feed_forward"), ("06_moe", "moe_layer")]),
        ("from_07", [("07_rmsnorm", "rmsnorm")]),
    ],
)
def test_the_pasted_parts_are_those_notebooks_cells(cell, sources):
    """One source of truth: after changing an answer cell of 03, 04, 06 or 07, paste it into 08's
    cell again (two blank lines between two cells), then `course build 08_transformer`."""
    assert cells(ASSIGNMENT)[cell] == "\n\n\n".join(cells(a)[name] for a, name in sources)


@pytest.mark.parametrize(
    "config",
    [
        (30, 16, 4, 5, 24, 4, 2, 2, 16),
        (9, 12, 3, 11, 24, 10, 2, 10, 100),  # the homework's smoke test
        (7, 8, 1, 3, 12, 1, 1, 1, 4),
        (5, 6, 3, 2, 7, 6, 6, 3, 8),
    ],
)
def test_the_reference_count_is_what_the_reference_model_holds(config):
    torch.manual_seed(0)
    model = ref("Transformer")(*config)
    total, active = ref("transformer_parameters")(*config)
    assert total == sum(p.numel() for p in model.parameters())
    d, f, e, k, n = config[1], config[4], config[5], config[6], config[7]
    assert total - active == n * (e - k) * 3 * d * f  # the experts a token skips
    assert all(isinstance(count, int) for count in (total, active))


def test_mistakes_file_redefines_none_of_the_notebooks_names():
    """mutant() pastes the file into an answer cell: a name it shares with the notebook must be the
    notebook's own object (its parts, taken from the reference when the file is loaded alone)."""
    module = reference.instructor_module(ASSIGNMENT, "mistakes.py")
    notebook = reference.namespace(ASSIGNMENT)
    shared = {name for name in vars(module) if name in names_the_notebook_binds(ASSIGNMENT)}
    assert {"RMSNorm", "MoeLayer", "TransformerBlock", "get_rotation_matrix"} <= shared
    assert all(name in notebook and vars(module)[name] is notebook[name] for name in shared), shared


def test_pasted_into_the_notebook_the_mistakes_use_its_parts():
    """There the file rebinds none of the parts the cells above define (it does not read the
    reference): its mistakes build the notebook's parts, in the notebook's namespace."""
    names = namespace(
        mutant(ASSIGNMENT, "transformer", "Transformer", mistake("08.transformer", "TablePerBlock"))
    )
    assert "_notebook" not in names
    assert names["Transformer"].__name__ == "TablePerBlock"
    assert names["Transformer"].__init__.__globals__ is names


# ------------------------------------------------------------ parts from notebooks 03-07


def with_06_moe_layer(forward_or_init: str) -> str:
    """The 06 cell with MoeLayer redefined as a subclass that changes one method."""
    return answer("from_06") + "\n\n\nclass MoeLayer(MoeLayer):\n" + forward_or_init


WEIGHTS_NOT_APPLIED = """    def forward(self, x):
        values, selected_experts = torch.topk(self.gate(x), self.n_experts_per_token)
        out = torch.zeros_like(x)
        for i, expert in enumerate(self.experts):
            batch_idx, token_idx, _ = torch.where(selected_experts == i)
            out[batch_idx, token_idx] += expert(x[batch_idx, token_idx])
        return out
"""
K_EXPERTS_BUILT = """    def __init__(self, hidden_size, d_ff, num_experts, n_experts_per_token):
        super().__init__(hidden_size, d_ff, num_experts, n_experts_per_token)
        self.experts = self.experts[:n_experts_per_token]
"""


@pytest.mark.parametrize("bug", [WEIGHTS_NOT_APPLIED, K_EXPERTS_BUILT], ids=["routing", "init"])
def test_a_buggy_part_costs_the_block_nothing_and_fails_the_whole_model(bug):
    """06.moe_routing and 06.moe_init charge these; 08's wiring and sizes are right."""
    names = notebook_names(from_06=with_06_moe_layer(bug))
    for seed in (None, HIDDEN_SEED):
        block = verdict("08.block", names["TransformerBlock"], seed)
        assert block.passed, block.message
    model = verdict("08.transformer", names["Transformer"])
    assert parts(model) == {**dict.fromkeys(MODEL_CONCERNS, True), WHOLE: False}, model.message
    whole = part_message(model, WHOLE)
    assert "the logits" in whole
    assert "your MoeLayer and its experts (graded in notebook 06)" in whole, whole
    assert "your RMSNorm" not in whole and "your EfficientSlidingWindowMultiheadAttention" not in whole


@pytest.mark.parametrize(
    "unfinished", [("from_06",), ("from_03", "from_04", "from_06", "from_07")], ids=["moe", "every part"]
)
def test_unfinished_parts_leave_the_wiring_concerns_their_points(unfinished):
    """Until the parts are pasted their cells hold the stubs: the concerns that bring their own
    parts still grade the block and the model."""
    stubs = {grade_id(c): c.source for c in release(ASSIGNMENT).cells}
    names = notebook_names(**{cell: stubs[cell] for cell in unfinished})
    block = verdict("08.block", names["TransformerBlock"])
    assert parts(block) == {WIRING: True, BUILT: True, NAMED: True}, block.message
    model = verdict("08.transformer", names["Transformer"])
    assert parts(model) == {**dict.fromkeys(MODEL_CONCERNS, True), WHOLE: False, CAST: False}, model.message
    assert "NotImplementedError" in part_message(model, WHOLE)


def test_a_fused_expert_loads_into_the_whole_model():
    """06 accepts an expert whose w1 and w3 are one Linear(D, 2 d_ff): the reference's w1 = w3 load
    into both halves."""
    fused = """

class FeedForward(nn.Module):
    def __init__(self, hidden_size, d_ff):
        super().__init__()
        self.w13 = nn.Linear(hidden_size, 2 * d_ff, bias=False)
        self.w2 = nn.Linear(d_ff, hidden_size, bias=False)

    def forward(self, x):
        gated, up = self.w13(x).chunk(2, dim=-1)
        return self.w2(F.silu(gated) * up)
"""
    result = verdict("08.transformer", notebook_names(from_06=answer("from_06") + fused)["Transformer"])
    assert result.passed, result.message


def test_a_rope_table_kept_as_a_buffer_fails_only_the_cast():
    buffer = """

class RoPE(RoPE):
    def __init__(self, rotation_matrix):
        nn.Module.__init__(self)
        self.register_buffer("rotation_matrix", rotation_matrix)
"""
    names = notebook_names(from_04=answer("from_04") + buffer)
    model = names["Transformer"](11, 16, 4, 5, 24, 4, 2, 2, 20)
    assert any(name.endswith("rope.rotation_matrix") for name, _ in model.named_buffers())
    with warnings.catch_warnings():  # torch warns of the lost imaginary part once per process only
        warnings.simplefilter("ignore")
        result = verdict("08.transformer", names["Transformer"])
    assert parts(result) == {**dict.fromkeys(MODEL_CONCERNS, True), CAST: False}, result.message
    assert "if the RoPE table is a buffer or a parameter" in part_message(result, CAST)
    assert verdict("08.block", names["TransformerBlock"]).passed


ROPE_THAT_TURNS_NOTHING = """

class RoPE(RoPE):
    def forward(self, queries, keys):
        return queries, keys
"""
ABSOLUTE_POSITIONS = """

class Transformer(Transformer):
    def forward(self, tokens):  # sinusoids added to the embedding (2017), no parameter of their own
        T, D = tokens.shape[1], self.embedding.embedding_dim
        angles = torch.arange(T)[:, None] * 10000.0 ** (-torch.arange(0, D, 2) / D)
        h = self.embedding(tokens) + torch.cat([angles.sin(), angles.cos()], dim=-1)
        for block in self.blocks:
            h = block(h)
        return self.out(h)
"""


NO_TABLE_PASSED_ON = {"block": answer("block").replace("window_size, rotation_matrix)", "window_size)")}


@pytest.mark.parametrize(
    ("cells", "failed", "words"),
    [
        (NO_TABLE_PASSED_ON, {WHOLE, CAST}, "applies no rotation to queries and keys"),
        (
            {"from_04": answer("from_04") + ROPE_THAT_TURNS_NOTHING},
            {WHOLE, CAST},
            "applies no rotation to queries and keys",
        ),
        (  # the sinusoids fail the stand-in blocks' wiring too
            {**NO_TABLE_PASSED_ON, "transformer": answer("transformer") + ABSOLUTE_POSITIONS},
            {MODEL_WIRING, WHOLE, CAST},
            "depends on absolute positions",
        ),
    ],
    ids=["table not passed on", "a RoPE that turns nothing", "absolute positions instead"],
)
def test_a_model_without_rotations_fails_the_cast(cells, failed, words):
    """The cast part is about keeping RoPE's rotations: a model that applies none has nothing to keep.
    Without rotations its logits for the tokens in reverse order are its logits reversed (the window
    is centred); RoPE's make them differ, and depend on relative positions only."""
    names = notebook_names(**cells)
    for seed in (None, HIDDEN_SEED):
        result = verdict("08.transformer", names["Transformer"], seed)
        assert parts(result) == {concern: concern not in failed for concern in MODEL_CONCERNS}, result.message
        assert words in part_message(result, CAST), result.message


# ---------------------------------------------------------------- the block and the model


@VISIBLE_AND_HIDDEN
def test_blocks_in_a_plain_list_lose_only_the_registration(seed):
    result = verdict("08.transformer", mistake("08.transformer", "BlocksInPlainList"), seed)
    assert parts(result) == {**dict.fromkeys(MODEL_CONCERNS, True), REGISTERED: False}, result.message
    message = part_message(result, REGISTERED)
    for words in ("not registered", "never trains them", "does not save them", "An nn.ModuleList registers"):
        assert words in message, (words, message)


def test_renamed_parts_get_every_point_and_a_line_of_advice():
    """The homework leaves the part names free: a block that calls its attention attn is graded in
    full (found by its class), and told the course's names in the advice part only."""
    renamed = answer("block").replace("self.attention", "self.attn")
    assert "self.attention" not in renamed
    names = notebook_names(block=renamed)
    for seed in (None, HIDDEN_SEED):
        block = verdict("08.block", names["TransformerBlock"], seed)
        assert block.passed and block.points == block.max_points, block.message
        assert parts(block) == {WIRING: True, BUILT: True, NAMED: False}, block.message
        assert "your block holds its attention under names of its own (advice, no points" in block.message
        model = verdict("08.transformer", names["Transformer"], seed)
        assert model.passed and model.points == model.max_points, model.message


@pytest.mark.parametrize("block", BLOCKS)
def test_code_written_from_the_homework_gets_full_marks(block):
    """Questions 23 and 24 as the homework's text leads (tests/helpers/homework_08.py): parts named as the
    student likes, the MoE under the feed-forward's name, an int period."""
    names = notebook_names(block=BLOCKS[block], transformer=TRANSFORMER)
    for check, answer_name, seeds in (
        ("08.block", "TransformerBlock", (None, HIDDEN_SEED)),
        ("08.transformer", "Transformer", (None, HIDDEN_SEED)),
        ("08.smoke_test", "Transformer", (None, HIDDEN_SEED)),
        ("08.training", "Transformer", (HIDDEN_SEED,)),
    ):
        for seed in seeds:
            result = verdict(check, names[answer_name], seed)
            assert result.passed and result.points == result.max_points, result.message


GARBLED_EXPERT = """


class FeedForward(nn.Module):
    def __init__(self, hidden_size, d_ff):
        super().__init__()
        self.w1 = nn.Linear(hidden_size, d_ff, bias=False)
        self.w2 = nn.Linear(hidden_size, d_ff, bias=False)
        self.w3 = nn.Linear(d_ff, hidden_size, bias=False)

    def forward(self, x):  # the homework's W3 . SiGLU(W1(x) . W2(x)), read as SiLU of the product
        return self.w3(F.silu(self.w1(x) * self.w2(x)))
"""
HOMEWORK_RMSNORM = """


class RMSNorm(RMSNorm):
    def _norm(self, x):  # the homework's formula: sqrt(mean(x)), no square, no eps
        return x * torch.rsqrt(x.mean(dim=-1, keepdim=True).abs())
"""


@pytest.mark.parametrize(
    ("cell", "bug", "named"),
    [
        ("from_06", GARBLED_EXPERT, "your MoeLayer and its experts (graded in notebook 06)"),
        ("from_07", HOMEWORK_RMSNORM, "your RMSNorm (graded in notebook 07)"),
    ],
    ids=["garbled expert", "homework's RMSNorm"],
)
def test_a_whole_model_mismatch_names_the_part_at_fault(cell, bug, named):
    """Each part is run on the inputs the course's model gives it: the one that differs is named, in
    a block whose parts have names of their own too."""
    names = notebook_names(**{cell: answer(cell) + bug}, block=BLOCKS["short names"], transformer=TRANSFORMER)
    result = verdict("08.transformer", names["Transformer"], HIDDEN_SEED)
    assert not parts(result)[WHOLE] and all(parts(result)[c] for c in (MODEL_WIRING, REGISTERED, ROTATION))
    whole = part_message(result, WHOLE)
    assert "Property 'your parts compute the course's' fails too" in whole, whole
    assert named in whole, whole
    others = {"your MoeLayer", "your RMSNorm", "your EfficientSlidingWindowMultiheadAttention", "your head"}
    assert not any(other in whole for other in others if not named.startswith(other)), whole


def test_a_wiring_mismatch_says_the_parts_agree():
    names = notebook_names(
        block=answer("block").replace("h + self.moe(self.norm2(h))", "h + self.moe(self.norm2(x))")
    )
    whole = part_message(verdict("08.transformer", names["Transformer"]), WHOLE)
    assert "gives the course's values on the inputs the course's model gives it" in whole, whole
    assert "how your block and model wire the parts together" in whole, whole


EVEN_WINDOW_CRASH = """


class EfficientSlidingWindowMultiheadAttention(EfficientSlidingWindowMultiheadAttention):
    def forward(self, x):
        assert self.window_size % 2 == 1, "an even window"  # notebook 03's bug, graded there
        return super().forward(x)
"""


def test_an_attention_that_fails_even_windows_costs_nothing_here():
    """An even window is notebook 03's concern: the whole model's shapes draw odd windows, training
    uses the course's causal window."""
    names = notebook_names(from_03=answer("from_03") + EVEN_WINDOW_CRASH)
    for check in ("08.block", "08.transformer", "08.smoke_test"):
        for seed in (None, *range(HIDDEN_SEED, HIDDEN_SEED + 4)):
            result = verdict(check, names["Transformer" if check != "08.block" else "TransformerBlock"], seed)
            assert result.passed and result.points == result.max_points, (check, seed, result.message)
    assert verdict("08.training", names["Transformer"], HIDDEN_SEED).passed


TOKEN_LOOP = """


class MoeLayer(MoeLayer):
    def forward(self, x):  # one expert call per token and slot
        values, selected = torch.topk(self.gate(x), self.n_experts_per_token)
        weights = F.softmax(values, dim=-1)
        out = torch.zeros_like(x)
        for b in range(x.shape[0]):
            for t in range(x.shape[1]):
                for k in range(self.n_experts_per_token):
                    expert = self.experts[int(selected[b, t, k])]
                    out[b, t] = out[b, t] + weights[b, t, k] * expert(x[b, t])
        return out
"""


def test_the_training_guard_counts_work_not_time():
    """The reference issues as many torch operations on many tokens as on few; a MoE that loops over
    tokens about 10 times as many, and 08.training refuses it before training, naming the loop."""
    counts = {}
    for name, cell in (("reference", answer("from_06")), ("loop", answer("from_06") + TOKEN_LOOP)):
        torch.manual_seed(0)
        model = made_causal(notebook_names(from_06=cell)["Transformer"](*TRAINING))
        counts[name] = (_operations(model, FEW_TOKENS), _operations(model, MANY_TOKENS))
    assert counts["reference"][1] == counts["reference"][0], counts
    assert counts["loop"][1] > 8 * counts["loop"][0], counts
    result = verdict("08.training", notebook_names(from_06=answer("from_06") + TOKEN_LOOP)["Transformer"])
    assert not result.passed
    assert "its work grows with the number of tokens" in result.message, result.message
    assert "Does your MoeLayer loop over tokens" in result.message, result.message


def test_a_final_norm_is_listed_by_name_in_the_whole_model():
    result = verdict("08.transformer", mistake("08.transformer", "FinalNormAdded"))
    whole = part_message(result, WHOLE)
    assert "your model has, they have not: norm.weight" in whole, whole
    assert "The homework's model has no final norm" in whole


def test_the_case_names_show_whole_calls():
    for case in make_cases("08.transformer", hidden=True, seed=HIDDEN_SEED):
        call = case.name.split(":")[0].split(", tokens")[0]
        assert call.startswith("Transformer(") and call.endswith(")") and call.count(",") == 8, case.name


IN_PLACE = """


class TransformerBlock(TransformerBlock):
    def forward(self, x):
        x += self.attention(self.norm1(x))
        x += self.moe(self.norm2(x))
        return x
"""


def test_a_residual_added_in_place_passes_the_block_and_fails_training_by_name():
    """x += ... gives the right values and overwrites the x that norm1 kept for the backward pass.
    The block check has no gradient to break (and hands each run a fresh copy of x): it grades the
    values. Training is where the in-place addition fails, and is named."""
    names = notebook_names(block=answer("block") + IN_PLACE)
    assert verdict("08.block", names["TransformerBlock"]).passed
    assert verdict("08.smoke_test", names["Transformer"]).passed  # under torch.no_grad()
    message = verdict("08.training", names["Transformer"]).message
    assert "modified by an inplace operation" in message
    assert "Looks like: a forward changed in place a tensor that autograd keeps" in message, message


# ---------------------------------------------------------------- smoke test and training


class RandomForward(nn.Module):
    """The reference model plus noise drawn in forward from torch's generator: the seed replays it."""

    def __init__(self, *config):
        super().__init__()
        self.model = ref("Transformer")(*config)

    def forward(self, tokens):
        logits = self.model(tokens)
        return logits + 0.01 * torch.randn(logits.shape)


class Overconfident(RandomForward):
    def forward(self, tokens):
        return 20 * self.model(tokens)


@pytest.mark.parametrize(
    ("model", "words"),
    [
        (RandomForward, "two models built under the same torch.manual_seed, the second called twice"),
        (Overconfident, "far from log V"),
    ],
)
def test_a_random_or_overconfident_model_fails_the_smoke_test(model, words):
    result = verdict("08.smoke_test", model)
    assert not result.passed and words in result.message, result.message


class Frozen(nn.Module):
    """The embedding and the blocks run under torch.no_grad(): only the head learns."""

    def __init__(self, *config):
        super().__init__()
        model = ref("Transformer")(*config)
        self.embedding, self.blocks, self.out = model.embedding, model.blocks, model.out

    def forward(self, tokens):
        with torch.no_grad():
            h = self.embedding(tokens)
            for block in self.blocks:
                h = block(h)
        return self.out(h)


class Blind(Frozen):
    """The logits do not depend on the input: the unigram frequencies at best."""

    def forward(self, tokens):
        return self.out(torch.zeros(*tokens.shape, self.out.in_features))


class Peeking(Frozen):
    """A right model that also reads the next token from its input and adds a large logit to it:
    near-zero loss in training, where every position but the last has its answer in the input."""

    def forward(self, tokens):
        h = self.embedding(tokens)
        for block in self.blocks:
            h = block(h)
        logits = self.out(h)  # (B, T, V)
        peek = 30.0 * F.one_hot(tokens[:, 1:], logits.shape[-1])  # (B, T - 1, V)
        return logits + F.pad(peek, (0, 0, 0, 1))  # the last position has no next token to read


@pytest.mark.parametrize(
    ("model", "words"),
    [
        (Frozen, "near the bigram loss"),
        (Blind, "not those the course's model computes with your trained weights"),
        (Peeking, "not below 1.5"),
    ],
)
def test_models_that_do_not_learn_the_text_fail_training(model, words):
    """A frozen model stays near the bigram loss. A blind one sends logits that the course's model does
    not compute from its weights. A peeking one learns to copy the next token and is scored fairly:
    only each prefix's last position is, with nothing to copy."""
    result = verdict("08.training", model)
    assert not result.passed
    assert words in result.message, result.message


def test_the_training_targets_never_reach_the_kernel(tmp_path):
    """The kernel gets the training text's seed and the prefixes; the character after each prefix
    stays with the judge (the held-out text has a seed of its own, not one the kernel could derive)."""
    (tmp_path / "cases").mkdir()
    for hidden in (False, True):
        (case,) = make_cases("08.training", hidden=hidden, seed=HIDDEN_SEED)
        assert set(case.inputs) == {"text_seed", "prefixes"} and set(case.judge_only) == {"next"}
        assert tuple(case.inputs["prefixes"].shape) == (CASES.PREFIXES, CASES.PREFIX_LENGTH)
        assert not _fresh_copy(case).judge_only
        write_cases(tmp_path, "08.training", hidden, [case])
    for path in (tmp_path / "cases").iterdir():
        (sent,) = torch.load(path, weights_only=True)
        assert set(sent) == {"name", "inputs", "concern"} and set(sent["inputs"]) == {"text_seed", "prefixes"}


def test_experts_with_biases_and_names_of_their_own_train_and_load():
    """Notebook 06 let an expert name its linears and keep their biases (advice only): the whole
    model loads the reference's weights into it (biases zeroed), and the grader rebuilds the trained
    model's logits with those biases."""
    biased = """

class FeedForward(nn.Module):
    def __init__(self, hidden_size, d_ff):
        super().__init__()
        self.up = nn.Linear(hidden_size, d_ff)
        self.gate_proj = nn.Linear(hidden_size, d_ff)
        self.down = nn.Linear(d_ff, hidden_size)

    def forward(self, x):
        return self.down(F.silu(self.gate_proj(x)) * self.up(x))
"""
    model = notebook_names(from_06=answer("from_06") + biased)["Transformer"]
    assert verdict("08.transformer", model).passed
    assert verdict("08.training", model, HIDDEN_SEED).passed


@pytest.mark.parametrize(
    ("how", "period", "passes"),
    [("partial", 10000.0, True), ("cached", 10000.0, True), ("partial", 500.0, False)],
)
def test_a_table_asked_for_under_another_name_is_read_from_the_blocks(how, period, passes):
    """get_rotation_matrix bound in functools.partial or called by a cached helper escapes the
    recorder: the check then reads the table the built blocks hold, and compares it with the
    student's own get_rotation_matrix(Dh, C, 10000)."""
    helper = {
        "partial": f"import functools\nrotation = functools.partial(get_rotation_matrix, period={period})\n",
        "cached": "import functools\n\n\n@functools.cache\ndef rotation(dim, context):\n"
        f"    return get_rotation_matrix(dim, context, {period})\n",
    }[how]
    call = "get_rotation_matrix(hidden_size // num_heads, max_seq_len, 10000.0)"
    assert call in answer("transformer")
    source = helper + answer("transformer").replace(call, "rotation(hidden_size // num_heads, max_seq_len)")
    result = verdict("08.transformer", notebook_names(transformer=source)["Transformer"])
    assert parts(result)[ROTATION] is passes, result.message


@pytest.mark.parametrize("block", BLOCKS)
def test_the_notebooks_own_cells_load_the_checkpoint_into_parts_of_any_name(block):
    """The training and checkpoint cells of notebook 08 run before its last test cells: make_causal and
    load_weights must find renamed parts as the checks do, or the notebook stops there. The homework's
    model, loaded with the course's checkpoint, gives the course model's logits."""
    names = notebook_names(block=BLOCKS[block], transformer=TRANSFORMER)
    saved = torch.load(lm.CHECKPOINT, weights_only=True)
    model = lm.make_causal(names["Transformer"](**saved["config"]))
    lm.load_weights(model, saved["state_dict"])
    tokens = lm.encode("\nthe cats see the river")[None]
    with torch.no_grad():
        torch.testing.assert_close(model.eval()(tokens), lm.course_model()(tokens), rtol=1e-4, atol=1e-4)


# -------------------------------------------------------------------- the course's lent model

CONFIG_NAMES = (
    "vocabulary_size",
    "hidden_size",
    "num_heads",
    "window_size",
    "d_ff",
    "num_experts",
    "n_experts_per_token",
    "n_blocks",
    "max_seq_len",
)


class _LentBlockParts(nn.Module):
    """A lent block's parts in a module of the answer's own: the checks find them, make the attention
    causal and train them, while the lent model, holding the same parts, computes the logits."""

    def __init__(self, block: nn.Module):
        super().__init__()
        self.norm1, self.attention = block.norm1, block.attention
        self.norm2, self.moe = block.norm2, block.moe


class _HoldsTheLentModel(nn.Module):
    """Notebook 10's lent CourseModel held, not derived from: its parts shown as the model's blocks, the
    lent model itself kept where nn.Module does not look."""

    def hide(self, inner: nn.Module) -> None:
        self.embedding, self.out = inner.embedding, inner.out
        self.blocks = nn.ModuleList(_LentBlockParts(block) for block in inner.blocks)
        self.hidden = [inner]

    def forward(self, tokens):
        return self.hidden[0](tokens)


class LentInAList(_HoldsTheLentModel):
    """The attack that scored 4.375 of 12 points with nothing of notebooks 03-08 written."""

    def __init__(self, *config):
        super().__init__()
        self.hide(lm.CourseModel(dict(zip(CONFIG_NAMES, config, strict=True))))


def _lent_class_by_a_computed_name():
    """The lent model's class with no name of it, nor of its module, in any code."""
    module = importlib.import_module(".".join(("autograder", "language" + "_model")))
    return getattr(module, "Course" + "Model")


class _LentByAComputedName(_HoldsTheLentModel):
    def __init__(self, *config):
        super().__init__()
        self.hide(_lent_class_by_a_computed_name()(dict(zip(CONFIG_NAMES, config, strict=True))))


class LentInADict(_LentByAComputedName):
    def hide(self, inner: nn.Module) -> None:
        super().hide(inner)
        self.hidden = {"model": inner}

    def forward(self, tokens):
        return self.hidden["model"](tokens)


class LentInAClosure(_LentByAComputedName):
    def hide(self, inner: nn.Module) -> None:
        super().hide(inner)
        del self.hidden
        self.run = lambda tokens: inner.forward(tokens)

    def forward(self, tokens):
        return self.run(tokens)


LENT_MODELS = [LentInAList, LentInADict, LentInAClosure]


@pytest.mark.parametrize("model", LENT_MODELS, ids=lambda model: model.__name__)
def test_a_model_holding_the_lent_course_model_earns_nothing(model):
    """Composition, not derivation (which core refuses): the lent model named in the answer's code, or
    held in a dict or a closure after being built from a name put together at run time, is refused by
    every check of the model, 08.training included, whose logits the grader recomputes from weights
    the lent model trained."""
    for check in ("08.transformer", "08.smoke_test", "08.training"):
        for seed in (None, HIDDEN_SEED):
            result = verdict(check, model, seed)
            assert result.points == 0, (check, seed, result.message)
            assert "built on the course's lent model" in result.message, result.message
            assert "autograder.language_model.Course" in result.message, result.message


@pytest.mark.parametrize(
    ("model", "where"),
    [(LentInADict, "(model.hidden['model'])"), (LentInAClosure, "(model.run: ")],
    ids=["dict", "closure"],
)
def test_the_lent_model_is_found_where_the_built_model_holds_it(model, where):
    """What the answer's code does not name is found in what it built, where nn.Module does not look."""
    assert lent_model_in(model, "Transformer") is None  # its code names nothing of the lent model
    built = model(*CASES.MODEL_SHAPES[0][:9])
    built.blocks = nn.ModuleList()  # the lent parts it registers gone: the hidden model is left
    found = lent_model_in(built, "model")
    assert found is not None and found.startswith("an instance of autograder.language_model.CourseModel")
    assert where in found, found


class BlockOfLentParts(nn.Module):
    """The block's forward written, its parts the lent model's."""

    def __init__(
        self, hidden_size, num_heads, window_size, d_ff, num_experts, n_experts_per_token, rotation_matrix
    ):
        super().__init__()
        config = {
            "hidden_size": hidden_size,
            "num_heads": num_heads,
            "window_size": window_size,
            "d_ff": d_ff,
            "num_experts": num_experts,
            "n_experts_per_token": n_experts_per_token,
            "max_seq_len": rotation_matrix.shape[0],
        }
        self.norm1, self.norm2 = nn.RMSNorm(hidden_size, eps=1e-6), nn.RMSNorm(hidden_size, eps=1e-6)
        self.attention, self.moe = lm.CourseAttention(config), lm.CourseMoe(config)

    def forward(self, x):
        h = x + self.attention(self.norm1(x))
        return h + self.moe(self.norm2(h))


def count_on_the_lent_model(*config):
    """The counts read off the lent model, built on the meta device, its name put together at run time."""
    with torch.device("meta"):
        model = _lent_class_by_a_computed_name()(dict(zip(CONFIG_NAMES, config, strict=True)))
    total = sum(p.numel() for p in model.parameters())
    expert = sum(p.numel() for p in model.blocks[0].moe.experts[0].parameters())
    num_experts, n_experts_per_token, n_blocks = config[5:8]
    return total, total - n_blocks * (num_experts - n_experts_per_token) * expert


@pytest.mark.parametrize(
    ("check", "answer", "found"),
    [
        ("08.block", BlockOfLentParts, "CourseAttention"),
        ("08.parameter_count", count_on_the_lent_model, "CourseModel"),
    ],
)
def test_parts_or_counts_of_the_lent_model_earn_nothing(check, answer, found):
    for seed in (None, HIDDEN_SEED):
        result = verdict(check, answer, seed)
        assert result.points == 0, (seed, result.message)
        assert "built on the course's lent model" in result.message, result.message
        assert f"autograder.language_model.{found}" in result.message, result.message


LOOKING_AT_THE_LENT_MODEL = """

from autograder.language_model import course_model

out = course_model()  # a cell of the student's own, looking at the lent model
blocks = out.blocks
"""


def test_a_look_at_the_lent_model_beside_ones_own_costs_nothing():
    """Globals are followed where the answer's code reads them as globals, not where an attribute shares
    their name (self.out, self.blocks); the lent model's code counts while the check runs, not before."""
    names = notebook_names(transformer=answer("transformer") + LOOKING_AT_THE_LENT_MODEL)
    assert isinstance(names["out"], lm.CourseModel)
    for check, seeds in (
        ("08.transformer", (None, HIDDEN_SEED)),
        ("08.smoke_test", (None,)),
        ("08.training", (None,)),
    ):
        for seed in seeds:
            result = verdict(check, names["Transformer"], seed)
            assert result.passed and result.points == result.max_points, (check, seed, result.message)


# ------------------------------------------------- Question 5 (added): grouped-query attention

GQA_CONCERNS = (GROUPED, GROUPED_EDGES, GQA_BLOCK, GQA_COSTS)
GQA_TARGETS = ("GroupedQueryWindowAttention", "GQATransformerBlock", "gqa_costs")


def gqa_answer(names: dict) -> tuple:
    return tuple(names[target] for target in GQA_TARGETS)


@pytest.mark.parametrize(
    ("b", "t", "d", "h", "w"),
    [(2, 9, 16, 4, 5), (1, 3, 12, 3, 7), (2, 8, 16, 2, 4), (1, 1, 8, 1, 3)],
    ids=["odd window", "T below the window", "even window", "one head, T = 1"],
)
def test_gqa_with_all_heads_computes_the_homeworks_attention(b, t, d, h, w):
    """n_kv_heads = num_heads, wq, wk, wv the per-head split of qkv_linear and wo its out: the same
    outputs as the block's multi-head layer, real RoPE included, even windows too (as the notebook's
    cell below the answer shows with the student's own layers)."""
    torch.manual_seed(0)
    table = ref("get_rotation_matrix")(d // h, 16, 10000.0)
    mha = ref("EfficientSlidingWindowMultiheadAttention")(d, h, w, table)
    gqa = ref("GroupedQueryWindowAttention")(d, h, h, w, table)
    with torch.no_grad():
        split = mha.qkv_linear.weight.view(h, 3, d // h, d)
        biases = mha.qkv_linear.bias.view(h, 3, d // h)
        for i, linear in enumerate((gqa.wq, gqa.wk, gqa.wv)):
            linear.weight.copy_(split[:, i].reshape(d, d))
            linear.bias.copy_(biases[:, i].reshape(d))
        gqa.wo.load_state_dict(mha.out.state_dict())
        x = torch.randn(b, t, d)
        torch.testing.assert_close(gqa(x), mha(x), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("config", [(64, 4, 2, 2, 4), (48, 6, 3, 3, 2), (8, 2, 1, 1, 1), (32, 8, 8, 4, 2)])
def test_gqa_costs_are_what_the_layers_hold_and_a_cache_allocates(config):
    d, h, h_kv, n, nbytes = config
    parameters, cache = ref("gqa_costs")(*config)
    layer = ref("GroupedQueryWindowAttention")(d, h, h_kv, 3)
    assert parameters == n * sum(p.numel() for p in layer.parameters())
    dtype = {1: torch.int8, 2: torch.bfloat16, 4: torch.float32}[nbytes]
    assert cache == torch.zeros(n, 2, h_kv, d // h, dtype=dtype).nbytes  # a key and a value, one token
    assert all(type(count) is int for count in (parameters, cache))


def test_the_gqa_block_holds_fewer_parameters_than_the_homeworks():
    table = ref("get_rotation_matrix")(4, 16, 10000.0)
    args = (16, 4, 5, 24, 4, 2)
    homework = sum(p.numel() for p in ref("TransformerBlock")(*args, table).parameters())
    for h_kv in (4, 2, 1):
        grouped = ref("GQATransformerBlock")(16, 4, h_kv, 5, 24, 4, 2, table)
        saved = ref("gqa_costs")(16, 4, 4, 1, 4)[0] - ref("gqa_costs")(16, 4, h_kv, 1, 4)[0]
        assert homework - sum(p.numel() for p in grouped.parameters()) == saved


@pytest.mark.parametrize(
    "unfinished",
    [("block",), ("from_03", "from_04", "from_06", "from_07"), ("block", "from_04")],
    ids=["question 1", "every pasted part", "question 1 and RoPE"],
)
def test_unfinished_earlier_answers_cost_the_gqa_question_nothing(unfinished):
    """The attention runs with a stand-in in place of its RoPE, the block with size-only stand-ins for
    its parts, and over a stand-in of TransformerBlock's __init__ where the student's raises."""
    stubs = {grade_id(c): c.source for c in release(ASSIGNMENT).cells}
    names = notebook_names(**{cell: stubs[cell] for cell in unfinished})
    for seed in (None, HIDDEN_SEED):
        result = verdict("08.gqa", gqa_answer(names), seed)
        assert result.passed, result.message


def test_a_rope_that_turns_nothing_costs_the_gqa_question_nothing():
    names = notebook_names(from_04=answer("from_04") + ROPE_THAT_TURNS_NOTHING)
    for seed in (None, HIDDEN_SEED):
        result = verdict("08.gqa", gqa_answer(names), seed)
        assert result.passed, result.message


OWN_NAMES_BLOCK = answer("block").replace("self.attention", "self.attn")


@pytest.mark.parametrize(
    ("name", "passes"), [("self.attn", True), ("self.attention", False)], ids=["its name", "another name"]
)
def test_the_grouped_attention_goes_under_the_name_the_students_block_gives_it(name, passes):
    """A TransformerBlock that keeps its attention as attn: the subclass must put the grouped one
    there; under another name both stay, and forward calls the multi-head one."""
    gqa = answer("gqa").replace(
        "        self.attention = GroupedQueryWindowAttention(",
        f"        {name} = GroupedQueryWindowAttention(",
    )
    names = notebook_names(block=OWN_NAMES_BLOCK, gqa=gqa)
    result = verdict("08.gqa", gqa_answer(names))
    assert parts(result) == {**dict.fromkeys(GQA_CONCERNS, True), GQA_BLOCK: passes}, result.message
    if not passes:
        assert "the number of attention layers the block holds is 2, expected 1" in result.message
        assert "Looks like: the grouped-query attention added beside the multi-head one" in result.message


def test_a_subclass_that_raises_is_charged_its_own_error():
    """Over a stand-in of TransformerBlock's __init__ the block raises too: its own error is reported,
    not one of the stand-in's."""
    gqa = answer("gqa").replace(
        "super().__init__(hidden_size, num_heads, window_size,",
        "super().__init__(hidden_size, num_heads, n_kv_heads, window_size,",
    )
    result = verdict("08.gqa", gqa_answer(notebook_names(gqa=gqa)))
    assert parts(result) == {**dict.fromkeys(GQA_CONCERNS, True), GQA_BLOCK: False}, result.message
    assert "takes 8 positional arguments but 9 were given" in part_message(result, GQA_BLOCK), result.message
