"""Notebook 09 (KV cache and generation): the pasted table against notebook 04, the partial credit of
09.kv_cache (the training mask, a wrong repeat_kv, a cache grown by torch.cat), the seed blog's KV
cache judged step by step as its bugs are fixed, generations that ignore the generator, the stand-in
model's refusals, and how often the sampling property fails a correct generation by chance.

Key: B batch, T tokens in one call, D hidden size, H query heads, Hkv key/value heads, Dh head_dim,
C max_seq_len, W window, V vocabulary size, P prompt length, N new tokens.
"""

import dataclasses
import json
import math
from functools import cache

import nbformat
import pytest
import torch

from autograder import reference
from autograder.api import make_cases
from autograder.cells import grade_id
from autograder.checks import CHECKS
from autograder.checks import kv_cache as kc
from autograder.paths import REPO, source_notebook

from .helpers.submissions import (
    mistake,
    names_the_notebook_binds,
    namespace,
    parts,
    perfect,
    solution_sources,
    verdict,
    with_answer,
)

ASSIGNMENT = "09_kv_cache"
alternatives_09 = reference.instructor_module(ASSIGNMENT, "alternatives.py")  # solutions/09_kv_cache/
HIDDEN_SEED = 9
SEEDS = (None, HIDDEN_SEED)  # the visible cases, then hidden ones
LAYER_CONCERNS = (kc.DECODE, kc.PREFILL, kc.GQA, kc.WINDOW, kc.CACHE)


@cache
def cells(assignment: str) -> dict[str, str]:
    """grade_id -> source of every tracked cell of a source notebook."""
    notebook = nbformat.read(source_notebook(assignment), as_version=4)
    return {grade_id(c): c.source for c in notebook.cells if grade_id(c)}


def notebook_names(**sources: str) -> dict:
    """What a student's notebook defines: the reference's answers, the cells named here replaced."""
    notebook = perfect(ASSIGNMENT)
    for cell, source in sources.items():
        with_answer(notebook, cell, source)
    return namespace(notebook)


def layer_answer(names: dict):
    """What the notebook's 09.kv_cache test cell passes."""
    return names["CachedAttention"], names["RoPE"], names["repeat_kv"]


def only_failing(*failing: str) -> dict[str, bool]:
    return {concern: concern not in failing for concern in LAYER_CONCERNS}


def part_message(result, concern: str) -> str:
    return next(part.message for part in result.parts if part.concern == concern)


def replaced(source: str, old: str, new: str) -> str:
    assert old in source, old
    return source.replace(old, new)


# ------------------------------------------------------------------ the notebook itself


def test_the_pasted_table_is_notebook_04s_cell():
    """One source of truth: after changing 04's rotation_matrix answer, paste it into 09's from_04
    cell again, then `course build 09_kv_cache`."""
    assert cells(ASSIGNMENT)["from_04"] == cells("04_rope")["rotation_matrix"]


def test_without_start_pos_the_rope_is_notebook_04s():
    """Question 1 keeps the homework's forward(queries, keys): at start_pos 0, or omitted, 09's RoPE
    gives exactly what 04's gives."""
    rope_04 = reference.namespace("04_rope")["RoPE"]
    notebook = reference.namespace(ASSIGNMENT)
    table = notebook["get_rotation_matrix"](8, 12, 10_000.0)
    q, k = torch.randn(2, 2, 3, 7, 8, generator=torch.Generator().manual_seed(0))
    want = rope_04(table)(q, k)
    for got in (notebook["RoPE"](table)(q, k), notebook["RoPE"](table)(q, k, 0)):
        assert all(torch.equal(g, w) for g, w in zip(got, want, strict=True))


def test_no_alternative_rebinds_a_name_of_the_notebook():
    """An alternative pasted into a notebook must not replace one of its names (a helper called
    `rope` or `keys` would)."""
    own = {
        name
        for name, value in vars(alternatives_09).items()
        if getattr(value, "__module__", None) == alternatives_09.__name__ or name == "ALTERNATIVES"
    }
    assert own, "no alternatives found"
    assert not own & names_the_notebook_binds(ASSIGNMENT)


# ------------------------------------------------------------- 09.kv_cache: partial credit


@pytest.mark.parametrize("seed", SEEDS, ids=["visible", "hidden"])
def test_sdpa_is_causal_is_named_as_the_triangle_it_is(seed):
    """scaled_dot_product_attention(is_causal=True) aligns its triangle at the top left: in a call at
    start_pos > 0 it hides the cached keys, as the training mask does, and the message says so."""
    source = replaced(
        solution_sources(ASSIGNMENT)["kv_cache"],
        '        weights = torch.softmax(scores.masked_fill(~visible, float("-inf")), dim=-1)\n'
        "        context = weights @ values  # (B, H, T, Dh)",
        "        context = F.scaled_dot_product_attention(q, keys, values, is_causal=True)",
    )
    result = verdict("09.kv_cache", layer_answer(notebook_names(kv_cache=source)), seed)
    assert not parts(result)[kc.DECODE], result.message
    assert "is_causal=True, which puts its triangle at the top left" in part_message(result, kc.DECODE)


@pytest.mark.parametrize("seed", SEEDS, ids=["visible", "hidden"])
def test_the_training_mask_loses_the_steps_and_keeps_the_prefill_and_cache(seed):
    """torch.tril with its diagonal at key 0: one prefill and the cache's contents are right; every
    call at start_pos > 0 (the chunked cases, the window's and the grouped heads' among them) is wrong,
    and named."""
    result = verdict("09.kv_cache", mistake("09.kv_cache", "_TrainingMask"), seed)
    assert parts(result) == only_failing(kc.DECODE, kc.WINDOW, kc.GQA), result.message
    assert "Looks like: a causal triangle that starts at key 0" in part_message(result, kc.DECODE)
    assert "differs from one prefill of the whole sequence" in part_message(result, kc.DECODE)
    assert "This part measures" not in result.message  # the repeat_kv probe it carries is no measurement


@pytest.mark.parametrize("seed", SEEDS, ids=["visible", "hidden"])
def test_a_cache_grown_by_cat_loses_only_the_cache(seed):
    """Its outputs are right at every step; its cache is not the preallocated one."""
    result = verdict("09.kv_cache", mistake("09.kv_cache", "_GrownCache"), seed)
    assert parts(result) == only_failing(kc.CACHE), result.message
    assert "Looks like: the cache grown with torch.cat" in part_message(result, kc.CACHE)


TILED_REPEAT = "def repeat_kv(x, n_rep):\n    return x.repeat(1, n_rep, 1, 1)  # [k0, k1, k0, k1]\n"


@pytest.mark.parametrize("seed", SEEDS, ids=["visible", "hidden"])
def test_a_wrong_repeat_kv_costs_nothing_here(seed):
    """The notebook's layer calls its repeat_kv, which tiles the heads: 09.repeat_kv charges that, and
    here the layer runs with a right one in its place, so every part passes."""
    result = verdict("09.kv_cache", layer_answer(notebook_names(repeat_kv=TILED_REPEAT)), seed)
    assert parts(result) == only_failing(), result.message


@pytest.mark.parametrize("seed", SEEDS, ids=["visible", "hidden"])
def test_heads_grouped_wrongly_in_decode_steps_only_lose_the_grouped_cases(seed):
    """A layer that tiles the key/value heads ([k0, k1, k0, k1]) in single-token calls only: every prefill
    is right, so only the grouped cases fed step by step (n_kv_heads 2 of 8 query heads) can tell."""
    source = solution_sources(ASSIGNMENT)["kv_cache"]
    for name in ("keys", "values"):
        cached = "cache_k" if name == "keys" else "cache_v"
        source = replaced(
            source,
            f"{name} = repeat_kv(self.{cached}[:B, :, :end], H // H_kv)",
            f"{name} = self.{cached}[:B, :, :end].repeat(1, H // H_kv, 1, 1) if T == 1 else "
            f"repeat_kv(self.{cached}[:B, :, :end], H // H_kv)",
        )
    result = verdict("09.kv_cache", layer_answer(notebook_names(kv_cache=source)), seed)
    assert parts(result) == only_failing(kc.GQA), result.message
    assert "differs from one prefill of the whole sequence" in part_message(result, kc.GQA)


# A bug of Question 1 or 2 is Question 1's or 2's to charge (and theirs charge it): the layer's RoPE is
# replaced by a stand-in, and so is a repeat_kv that fails Question 2's probe.
EARLIER_BUGS = [
    pytest.param(
        {"repeat_kv": TILED_REPEAT},
        None,
        (),
        id="tiled repeat_kv: a right one in its place",
    ),
    pytest.param(
        {"repeat_kv": "def repeat_kv(x, n_rep):\n    raise NotImplementedError\n"},
        None,
        (),
        id="repeat_kv left as the stub: a right one in its place",
    ),
    pytest.param(
        {"repeat_kv": TILED_REPEAT},
        alternatives_09.GroupedEinsumLayer,
        (),
        id="tiled repeat_kv beside a layer that does not call it",
    ),
    pytest.param(
        {"rope_positions": "start_pos ignored"},
        None,
        (),
        id="RoPE ignoring start_pos: Question 1's to charge, a stand-in takes its place",
    ),
]


@pytest.mark.parametrize(("cells_changed", "layer", "failing"), EARLIER_BUGS)
def test_a_bug_of_an_earlier_question_costs_only_the_parts_it_changes(cells_changed, layer, failing):
    sources = dict(cells_changed)
    if sources.get("rope_positions") == "start_pos ignored":
        sources["rope_positions"] = replaced(
            solution_sources(ASSIGNMENT)["rope_positions"],
            "self.rotation_matrix[start_pos : start_pos + T]",
            "self.rotation_matrix[:T]",
        )
    names = notebook_names(**sources)
    answer = layer_answer(names) if layer is None else (layer, names["RoPE"], names["repeat_kv"])
    for seed in SEEDS:
        result = verdict("09.kv_cache", answer, seed)
        assert parts(result) == only_failing(*failing), result.message


# ------------------------------------------------------------------ the seed blog's cache

# Seed 000's CausalAttentionKVCache in the notebook's given __init__ (wq, wk, wv, wo, the RoPE, and
# the output projection the blog forgets): a torch.empty cache in the layout (B, C, Hkv, Dh), written
# with scatter_, and its causal mask registered as a (C, C) buffer. The fills below fix its bugs one
# at a time, the way a student meets them.
BLOG = """class CachedAttention(nn.Module):
    def __init__(
        self,
        hidden_size: int,
        num_heads: int,
        n_kv_heads: int,
        max_batch_size: int,
        max_seq_len: int,
        rotation_matrix: torch.Tensor,
        window_size: int | None = None,
    ):
        super().__init__()
        self.num_heads, self.n_kv_heads = num_heads, n_kv_heads
        self.head_dim = hidden_size // num_heads
        self.window_size = window_size
        self.wq = nn.Linear(hidden_size, num_heads * self.head_dim, bias=False)
        self.wk = nn.Linear(hidden_size, n_kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(hidden_size, n_kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(num_heads * self.head_dim, hidden_size, bias=False)
        self.rope = RoPE(rotation_matrix)
        self.max_seq_len = max_seq_len
        self.cache_k = torch.empty(max_batch_size, max_seq_len, n_kv_heads, self.head_dim)
        self.cache_v = torch.empty(max_batch_size, max_seq_len, n_kv_heads, self.head_dim)
        mask = torch.tril(torch.ones(max_seq_len, max_seq_len))
        {window}self.register_buffer("mask", mask.view(1, 1, max_seq_len, max_seq_len))

    def forward(self, x: torch.Tensor, start_pos: int) -> torch.Tensor:
        B, T, _ = x.shape
        H, H_kv, Dh = self.num_heads, self.n_kv_heads, self.head_dim
        q = self.wq(x).view(B, T, H, Dh).transpose(1, 2)
        k = self.wk(x).view(B, T, H_kv, Dh).transpose(1, 2)
        v = self.wv(x).view(B, T, H_kv, Dh).transpose(1, 2)
        q, k = self.rope(q, k, start_pos)
        positions = {positions}
        self.cache_k[:B].scatter_(dim=1, index=positions, src={k})
        self.cache_v[:B].scatter_(dim=1, index=positions, src={v})
        k, v = {read}
        k, v = repeat_kv(k, H // H_kv), repeat_kv(v, H // H_kv)
        scores = torch.matmul(q, k.transpose(-2, -1)) * Dh**-0.5
        scores = scores.masked_fill({mask} == 0, float("-inf"))
        context = F.softmax(scores, dim=-1) @ v
        return self.wo(context.transpose(1, 2).reshape(B, T, H * Dh))
"""
AS_WRITTEN = {
    "window": "",
    "positions": "torch.arange(0, self.max_seq_len)[None, :, None, None].repeat(B, 1, H_kv, Dh)",
    "k": "k",
    "v": "v",
    "read": "self.cache_k.transpose(1, 2), self.cache_v.transpose(1, 2)",
    "mask": "self.mask[:, :, :T, :T]",
}
SCATTER_FIXED = {
    "positions": "torch.arange(start_pos, start_pos + T)[None, :, None, None].expand(B, T, H_kv, Dh)",
    "k": "k.transpose(1, 2)",
    "v": "v.transpose(1, 2)",
}
READ_FIXED = {  # the first start_pos + T positions, and the training mask cut to their width
    "read": "self.cache_k[:B, : start_pos + T].transpose(1, 2), "
    "self.cache_v[:B, : start_pos + T].transpose(1, 2)",
    "mask": "self.mask[:, :, :T, : start_pos + T]",
}
MASK_FIXED = {"mask": "self.mask[:, :, start_pos : start_pos + T, : start_pos + T]"}  # the call's rows
WINDOW_ADDED = {
    "window": "if window_size is not None:\n"
    "            mask = mask - torch.tril(mask, diagonal=-window_size)\n        "
}


def blog(*fixes: dict) -> str:
    fills = dict(AS_WRITTEN)
    for fix in fixes:
        fills.update(fix)
    return BLOG.format(**fills)


def blog_verdicts(*fixes: dict, hidden: bool = True):
    """On the visible cases, and on hidden ones unless the step fails the same way on every case
    (a failing hidden verdict runs every catalogued mistake too: seconds)."""
    answer = layer_answer(notebook_names(kv_cache=blog(*fixes)))
    return [verdict("09.kv_cache", answer, seed) for seed in (SEEDS if hidden else SEEDS[:1])]


def test_the_blog_as_written_raises_in_its_scatter():
    """scatter_ with an index of all C positions, (B, C, Hkv, Dh), and a source of T: every case
    raises, and the verdict shows torch's error."""
    for result in blog_verdicts(hidden=False):
        assert parts(result) == only_failing(*LAYER_CONCERNS), result.message
        for concern in LAYER_CONCERNS:
            assert "your code raised RuntimeError: Expected index [" in part_message(result, concern)


def test_the_blog_with_its_scatter_fixed_fails_on_the_mask_shape_with_the_hint():
    """Reading the whole cache against a (T, T) training mask: torch's broadcast error, and the
    hint that the mask has one column per cached key."""
    for result in blog_verdicts(SCATTER_FIXED, hidden=False):
        assert result.points == 0, result.message
        assert "must match the size of tensor" in result.message
        assert "Looks like: shapes in forward" in result.message
        assert "the mask (T, start_pos + T)" in result.message


def test_the_blog_reading_its_positions_reuses_the_training_mask_by_name():
    for result in blog_verdicts(SCATTER_FIXED, READ_FIXED):
        assert parts(result) == only_failing(kc.DECODE, kc.WINDOW, kc.GQA), result.message
        assert "Looks like: a causal triangle that starts at key 0" in part_message(result, kc.DECODE)


def test_the_blog_with_the_calls_rows_of_its_mask_lacks_only_the_window():
    """The registered tril sliced at the call's rows is the mask in absolute positions: right, and
    the window the blog never had is the one part lost, and named."""
    for result in blog_verdicts(SCATTER_FIXED, READ_FIXED, MASK_FIXED, hidden=False):
        assert parts(result) == only_failing(kc.WINDOW), result.message
        assert "Looks like: the window ignored" in part_message(result, kc.WINDOW)


def test_the_blog_fixed_passes():
    for result in blog_verdicts(SCATTER_FIXED, READ_FIXED, MASK_FIXED, WINDOW_ADDED):
        assert result.passed and result.points == result.max_points, result.message


# -------------------------------------------------------------------------- 09.generate


def _draw_globally(probabilities, generator):
    return torch.multinomial(probabilities, 1)  # the global RNG


def _draw_categorical(probabilities, generator):
    return torch.distributions.Categorical(probs=probabilities).sample().unsqueeze(1)


def _draw_after_seeding_globally(probabilities, generator):
    torch.manual_seed(0)  # "for reproducibility": the same draws whatever the seed given
    return torch.multinomial(probabilities, 1)


def generation_drawn_by(draw):
    """The reference's loop, each token drawn by `draw(probabilities, generator)` (B, 1)."""
    sampling = alternatives_09.sampling_sort

    @torch.no_grad()
    def generate(model, prompt, max_new_tokens, temperature=1.0, top_k=None, generator=None):
        tokens = prompt
        logits = model(prompt, 0)[:, -1]
        for step in range(max_new_tokens):
            next_token = draw(sampling(logits, temperature, top_k), generator)
            tokens = torch.cat([tokens, next_token], dim=1)
            if step + 1 < max_new_tokens:
                logits = model(next_token, tokens.shape[1] - 1)[:, -1]
        return tokens

    return generate, sampling


@pytest.mark.parametrize("draw", [_draw_globally, _draw_categorical], ids=["global RNG", "Categorical"])
def test_a_generation_that_ignores_the_generator_loses_the_sampled_part(draw):
    """torch.multinomial without generator=, or torch.distributions.Categorical (which takes none):
    greedy decoding is right, and keeps its 2/3 of the points; the sampled part fails, named."""
    with torch.random.fork_rng():
        results = [verdict("09.generate", generation_drawn_by(draw), seed) for seed in SEEDS]
    for result in results:
        assert parts(result) == {kc.GREEDY_RUN: True, kc.SAMPLED: False}, result.message
        assert math.isclose(result.points, result.max_points * 2 / 3)
        assert "two runs with generators seeded alike gave different tokens" in part_message(
            result, kc.SAMPLED
        )


def test_a_generation_seeded_inside_fails_the_sampled_part():
    with torch.random.fork_rng():
        results = [
            verdict("09.generate", generation_drawn_by(_draw_after_seeding_globally), seed) for seed in SEEDS
        ]
    for result in results:
        assert parts(result) == {kc.GREEDY_RUN: True, kc.SAMPLED: False}, result.message


def stand_in(p: int, n: int, v: int = 5) -> kc.StandInModel:
    g = torch.Generator().manual_seed(0)
    return kc.StandInModel(torch.randn(v, v, generator=g), torch.randn(p + n + 1, v, generator=g))


def test_the_stand_in_model_refuses_positions_past_its_end_and_bad_tokens():
    model = stand_in(p=3, n=2)  # 6 positions
    assert model(torch.zeros(2, 3, dtype=torch.long), 3).shape == (2, 3, 5)  # positions 3 .. 5
    for tokens, start_pos in [
        (torch.zeros(2, 4, dtype=torch.long), 3),
        (torch.zeros(2, 1, dtype=torch.long), -1),
    ]:
        with pytest.raises(IndexError, match="runs past the model's 6 positions"):
            model(tokens, start_pos)
    for tokens in (torch.zeros(2, 3), torch.zeros(3, dtype=torch.long), [[0, 1]]):
        with pytest.raises(TypeError, match="LongTensor of shape"):
            model(tokens, 0)
    assert model.calls == [(3, 3)]  # only the call it answered


def test_feeding_the_whole_sequence_at_the_last_position_runs_past_the_model_with_the_hint():
    @torch.no_grad()
    def generate(model, prompt, max_new_tokens, temperature=1.0, top_k=None, generator=None):
        tokens = prompt
        logits = model(prompt, 0)[:, -1]
        for _ in range(max_new_tokens):
            probabilities = alternatives_09.sampling_sort(logits, temperature, top_k)
            tokens = torch.cat([tokens, torch.multinomial(probabilities, 1, generator=generator)], dim=1)
            logits = model(tokens, tokens.shape[1] - 1)[:, -1]  # the whole sequence again
        return tokens

    result = verdict("09.generate", (generate, alternatives_09.sampling_sort))
    assert result.points == 0, result.message
    assert "your code raised IndexError: start_pos=" in result.message
    assert "Looks like: the model holds max_new_tokens + prompt positions" in result.message


# ------------------------------------------------- the sampling property: false failures


def sampled_cases(seed: int):
    return [c for c in make_cases("09.generate", hidden=True, seed=seed) if c.concern == kc.SAMPLED]


def test_the_reference_draws_pass_the_distribution_property_on_many_seeds():
    """The property bounds each new token's count within 5 standard errors (and 5 draws) of its
    expected count given the token before it: a correct generation passes it on the hidden cases of
    200 seeds. Not a bound on the rate: worked out exactly (binomial tails) for the first token, a
    correct generation fails about 2e-6 of the hidden gradings (2e-4 without the 5 draws)."""
    generate = reference.reference_object("09.generate", CHECKS["09.generate"].target)[0]
    failures = []
    for seed in range(200):
        for case in sampled_cases(seed):
            tokens, _, _ = kc._generated(generate, case)
            if failure := kc._every_step(case, {key: tokens for key in kc.SAMPLED_KEYS}):
                failures.append((seed, case.name, failure))
    assert not failures, failures


def test_one_draw_of_a_rare_token_is_no_evidence_of_a_wrong_distribution():
    """A token of probability p with 2000 p < 0.037 is drawn at least once in 1 - (1 - p)^2000 of the
    runs of a correct generation (up to 3.6%); 5 standard errors, 5 sqrt(2000 p) draws, are then less
    than one draw, so that one draw fails the property. Here p = 1.5e-5: drawn in 3% of runs."""
    case = sampled_cases(0)[0]
    i = case.inputs
    b, v = i["prompt"].shape[0], len(i["table"])
    logits = torch.zeros(v)
    logits[1] = math.log(1.5e-5 * (v - 1) / (1 - 1.5e-5))  # p = 1.5e-5 at temperature 1
    table = torch.zeros(v, v)
    table[i["prompt"][0, -1]] = logits
    case = dataclasses.replace(
        case,
        inputs={
            **i,
            "table": table,
            "position_bias": torch.zeros_like(i["position_bias"]),
            "temperature": 1.0,
        },
    )
    want = torch.softmax(kc._first_token_logits(case).double(), dim=-1)
    assert math.isclose(want[1].item(), 1.5e-5, rel_tol=1e-3)
    assert 0.025 < 1 - (1 - want[1].item()) ** b < 0.035
    # The rarest plausible outcome of the others (an even split), and token 1 drawn once.
    counts = torch.full((v,), (b - 1) // (v - 1))
    counts[1] = 1
    counts[0] += b - counts.sum()
    first = torch.repeat_interleave(torch.arange(v), counts)
    sampled = torch.cat([i["prompt"], first[:, None].expand(b, i["max_new_tokens"])], dim=1)
    assert kc._every_step(case, {key: sampled for key in kc.SAMPLED_KEYS}) is None


# ------------------------------------------------------- sampling that only looks right (red team)


def _sampling_loop(draw):
    """The reference's loop, each token drawn by `draw(step, probabilities, generator, logits)`."""
    sampling_distribution = reference.namespace(ASSIGNMENT)["sampling_distribution"]

    @torch.no_grad()
    def generate(model, prompt, max_new_tokens, temperature=1.0, top_k=None, generator=None):
        tokens, logits = prompt, model(prompt, 0)[:, -1]
        for step in range(max_new_tokens):
            next_token = draw(step, sampling_distribution(logits, temperature, top_k), generator, logits)
            tokens = torch.cat([tokens, next_token], 1)
            if step + 1 < max_new_tokens:
                logits = model(next_token, tokens.shape[1] - 1)[:, -1]
        return tokens

    return (generate, sampling_distribution)


def _global_rng_seeded_from_the_generator(step, probabilities, generator, logits):
    if step == 0:
        torch.manual_seed(generator.initial_seed())  # reproducible, but not with the generator
    return torch.multinomial(probabilities, 1)


def _first_sampled_then_argmax(step, probabilities, generator, logits):
    if step == 0:
        return torch.multinomial(probabilities, 1, generator=generator)
    return logits.argmax(-1, keepdim=True)


def _no_sampling(model, prompt, max_new_tokens, temperature=1.0, top_k=None, generator=None):
    if temperature != 0 and top_k != 1:
        return torch.rand(1, generator=generator)  # sampling not written: another shape
    return reference.namespace(ASSIGNMENT)["generate"](model, prompt, max_new_tokens, 0.0, None, generator)


@pytest.mark.parametrize(
    ("answer", "named"),
    [
        (_sampling_loop(_global_rng_seeded_from_the_generator), "the generator given is drawn from"),
        (_sampling_loop(_first_sampled_then_argmax), "every new token follows softmax"),
        ((_no_sampling, None), "generate returns (B, P + N) tokens"),
    ],
    ids=["global RNG seeded from the generator", "first token sampled, then argmax", "no sampling"],
)
def test_sampling_that_only_looks_right_loses_the_sampled_part(answer, named):
    if answer[1] is None:
        answer = (answer[0], reference.namespace(ASSIGNMENT)["sampling_distribution"])
    for seed in SEEDS:
        with torch.random.fork_rng():
            result = verdict("09.generate", answer, seed)
        assert parts(result) == {kc.GREEDY_RUN: True, kc.SAMPLED: False}, result.message
        assert named in result.message, result.message


def test_the_notebooks_benchmark_figure_draws_the_committed_measurements():
    """The figure's numbers are copied into the notebook (a grading kernel reads no other file): they
    must be benchmarks/results/kv_cache_cpu.json's, rounded."""
    measured = json.loads((REPO / "benchmarks" / "results" / "kv_cache_cpu.json").read_text())
    notebook = nbformat.read(source_notebook(ASSIGNMENT), as_version=4)
    (numbers,) = [c.source for c in notebook.cells if grade_id(c) == "benchmark_numbers"]
    names: dict = {}
    exec(numbers, names)
    rows = measured["per_token"]
    assert names["lengths"] == [row["t"] for row in rows]
    assert names["ms_per_token"] == {
        "with cache": [round(row["ms_cached"], 2) for row in rows],
        "without cache": [round(row["ms_uncached"], 2) for row in rows],
    }, "copy the benchmark's numbers into the notebook again"


# ---------------------------------------------------------------------------- nucleus sampling

cases_09 = reference.instructor_module(ASSIGNMENT, "cases.py")


@cache
def reference_09() -> dict:
    """The reference's answers to notebook 09 (running its cells takes seconds: once)."""
    return reference.namespace(ASSIGNMENT)


def draws_cases(seed: int):
    return [c for c in make_cases("09.top_p", hidden=True, seed=seed) if c.concern == kc.DRAWS]


def test_the_cases_nucleus_is_the_notebooks():
    """The draws are judged against the nucleus cases.py works out (pairwise, in float64, no sort):
    it must be the notebook's top_p_filter, ties and edges included, on every case of many seeds."""
    top_p_filter = reference_09()["top_p_filter"]
    for seed in range(40):
        for case in make_cases("09.top_p", hidden=True, seed=seed):
            i = case.inputs
            probabilities, top_p = (
                (i["tempered"], i["top_p"])
                if case.concern == kc.DRAWS
                else (
                    i["probabilities"],
                    i["top_p"],
                )
            )
            want = cases_09.nucleus(probabilities, top_p)
            assert torch.equal(top_p_filter(probabilities, top_p) > 0, want > 0), (seed, case.name)
            assert torch.allclose(top_p_filter(probabilities, top_p), want, atol=1e-6), (seed, case.name)


def _nucleus_of(logits, temperature, top_k, top_p):
    names = reference_09()
    return names["top_p_filter"](names["sampling_distribution"](logits, temperature, top_k), top_p)


def _top_p_before_the_temperature(logits, temperature=1.0, top_k=None, top_p=1.0, generator=None):
    kept = _nucleus_of(logits, 1.0, top_k, top_p) > 0
    probabilities = reference_09()["sampling_distribution"](logits, temperature, top_k) * kept
    return torch.multinomial(probabilities, 1, generator=generator)[:, 0]


def test_the_reference_draws_pass_and_top_p_before_the_temperature_fails_on_many_seeds():
    """The draws property (5 standard errors and 5 draws, as 09.generate's) passes the reference's
    draws on the hidden cases of 200 seeds, and fails the same sampler with top-p taken before the
    temperature on each seed, and with top-k ignored on each case that has one: each moves a tenth of
    a row's probability there (cases.py)."""
    sample_next = reference_09()["sample_next"]
    false_failures, missed = [], []
    for seed in range(200):
        cases = draws_cases(seed)
        for case in cases:
            draws, _ = kc._drawn(sample_next, case, case.inputs["seed"])
            if failure := kc._follow_the_nucleus(case, dict.fromkeys(kc.DRAWN_KEYS, draws)):
                false_failures.append((seed, case.name, failure))
        caught = [
            kc._follow_the_nucleus(case, dict.fromkeys(kc.DRAWN_KEYS, draws))
            for case in cases
            for draws, _ in [kc._drawn(_top_p_before_the_temperature, case, case.inputs["seed"])]
        ]
        if not any(caught):
            missed.append(seed)
        top_k_left_out = [
            kc._follow_the_nucleus(case, dict.fromkeys(kc.DRAWN_KEYS, draws))
            for case in cases
            if case.inputs["top_k"] is not None
            for draws, _ in [kc._drawn(_top_k_ignored, case, case.inputs["seed"])]
        ]
        if not all(top_k_left_out):
            missed.append((seed, "top_k ignored"))
    assert not false_failures, false_failures[:3]
    assert not missed, missed


def _filter_then_temperature(logits, temperature=1.0, top_k=None, top_p=1.0, generator=None):
    probabilities = top_p_filter(sampling_distribution(logits, 1.0, top_k), top_p)  # noqa: F821
    return torch.multinomial(probabilities ** (1 / temperature), 1, generator=generator)[:, 0]


def _unseeded(logits, temperature=1.0, top_k=None, top_p=1.0, generator=None):
    return torch.multinomial(_nucleus_of(logits, temperature, top_k, top_p), 1)[:, 0]


def _top_k_ignored(logits, temperature=1.0, top_k=None, top_p=1.0, generator=None):
    return torch.multinomial(_nucleus_of(logits, temperature, None, top_p), 1, generator=generator)[:, 0]


def _probabilities_returned(logits, temperature=1.0, top_k=None, top_p=1.0, generator=None):
    return _nucleus_of(logits, temperature, top_k, top_p)


@pytest.mark.parametrize(
    ("sample_next", "named"),
    [
        (_top_p_before_the_temperature, "the draws follow top-p taken on softmax(top-k(logits)) before"),
        (_filter_then_temperature, "sample_next called top_p_filter on other probabilities"),
        (_unseeded, "draw with generator=generator"),
        (_top_k_ignored, "(outside the nucleus) was drawn"),
        (_probabilities_returned, "expected one token id per row"),
    ],
    ids=[
        "top-p before the temperature",
        "the filter before the temperature",
        "unseeded",
        "top-k ignored",
        "probabilities",
    ],
)
def test_a_wrong_sample_next_loses_only_the_draws_and_is_told_why(sample_next, named):
    top_p_filter = reference_09()["top_p_filter"]
    for seed in SEEDS:
        with torch.random.fork_rng():
            result = verdict("09.top_p", (top_p_filter, sample_next), seed)
        assert parts(result) == {kc.NUCLEUS: True, kc.EDGES: True, kc.DRAWS: False}, result.message
        assert named in result.message, result.message


def test_a_bug_of_question_5_or_of_top_p_filter_costs_the_draws_nothing():
    """sample_next calls both: stand-ins take their place for its draws, so that each bug is charged
    once, in its own question or concern."""
    wrong_sampling = mistake("09.sampling_distribution", "_temperature_ignored")
    wrong_filter = mistake("09.top_p", "_least_likely_kept")[0]
    names = notebook_names()
    names["sampling_distribution"] = wrong_sampling
    names["top_p_filter"] = wrong_filter
    for seed in SEEDS:
        result = verdict("09.top_p", (names["top_p_filter"], names["sample_next"]), seed)
        assert parts(result) == {kc.NUCLEUS: False, kc.EDGES: False, kc.DRAWS: True}, result.message


# ------------------------------------------------------------------------ the rolling buffer

ROLLING_PARTS = (kc.ROLLING, kc.SINKS, kc.BUFFER)


@pytest.mark.parametrize(
    ("impl", "failing", "named"),
    [
        ("_ReadAfterWriting", (kc.ROLLING,), "which a query of the step may see, is not among"),
        ("_LongStepCut", (kc.ROLLING,), "which a query of the step may see, is not among"),
        ("_OneRing", (kc.SINKS,), "is not the one written at position 0"),
        ("_SinksForgotten", (kc.SINKS,), "position 0, which a query of the step may see, is not among"),
        ("_OneShort", (kc.ROLLING,), "which a query of the step may see, is not among"),
        ("_SlotsReturned", (kc.ROLLING,), "which a query of the step may see, is not among"),
        ("_EarlierSequenceKept", (kc.ROLLING,), "left from the earlier sequence"),
        ("_Grown", (kc.BUFFER,), "whatever the length of the text"),
    ],
)
def test_a_rolling_mistake_loses_only_the_concern_it_breaks_and_is_told_where(impl, failing, named):
    """One mistake is charged once: the sinks' cases attend over the sinks update returned and the
    case's own window (a window bug costs them nothing), and the buffer's slots are read without
    sinks (where the sinks sit is the student's)."""
    for seed in SEEDS:
        result = verdict("09.rolling_cache", mistake("09.rolling_cache", impl), seed)
        assert parts(result) == {c: c not in failing for c in ROLLING_PARTS}, (seed, result.message)
        assert named in result.message, result.message


class _TwoThingsReturned:
    def __init__(self, max_batch_size, n_kv_heads, head_dim, window_size, n_sinks=0):
        self.inner = alternatives_09.RollingIndexCopy(
            max_batch_size, n_kv_heads, head_dim, window_size, n_sinks
        )
        self.cache_k, self.cache_v = self.inner.cache_k, self.inner.cache_v

    def update(self, k, v, start_pos):
        return self.inner.update(k, v, start_pos)[:2]


def test_an_update_that_returns_no_positions_is_told_what_to_return_and_keeps_the_buffer():
    result = verdict("09.rolling_cache", _TwoThingsReturned, HIDDEN_SEED)
    assert parts(result) == {kc.ROLLING: False, kc.SINKS: False, kc.BUFFER: True}, result.message
    assert "return (keys, values, positions)" in result.message, result.message


def test_streaming_inside_the_window_is_the_models_own_forward():
    """streamed_losses (notebook 09's figure) with the reference's cache and the model's own window:
    the losses of one forward of the model over the first 64 characters, which it was trained on."""
    from autograder.language_model import course_model, course_text, encode, streamed_losses

    model, text = course_model(), encode(course_text(500, seed=1))[:64]
    rolling = reference_09()["RollingKVCache"]
    window = model.config["window_size"]
    streamed = streamed_losses(model, text, lambda: rolling(1, 4, 16, window))
    in_cache = streamed_losses(model, text, lambda: rolling(1, 4, 16, window), in_cache=True)
    with torch.no_grad():
        logits = model(text[None])[0, :-1]
    whole = torch.nn.functional.cross_entropy(logits, text[1:], reduction="none")
    torch.testing.assert_close(streamed, whole, atol=1e-4, rtol=0)
    torch.testing.assert_close(in_cache, whole, atol=1e-4, rtol=0)  # no sinks: ranks shift all alike
