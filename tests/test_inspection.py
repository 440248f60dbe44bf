"""Notebook 10 (looking inside a model): the trusted course model against notebook 08's reference, the
seed's two broken tests, and what the generic tests of the checks do not cover: records that keep the
autograd graph, hooks left behind or cleared, a loop over rows, attention weights that leave their hook.

Key: B batch, T sequence length, D hidden size, H heads, Dh = D // H, W window, V vocabulary size.
"""

import math

import pytest
import torch
import torch.nn.functional as F

from autograder import language_model as lm
from autograder import reference
from autograder.api import make_cases
from autograder.checks import inspection
from autograder.checks.inspection import NO_HOOK_LEFT, ONE_CALL, RECORDS
from autograder.language_model import CourseModel, course_model

from .helpers.submissions import mistake, names_the_notebook_binds, parts, verdict

ASSIGNMENT = "10_inside_a_model"

CASES = reference.instructor_module("10_inside_a_model", "cases.py")  # the hidden cases' generators


def ref(name: str):
    return reference.namespace(ASSIGNMENT)[name]


def notebook_08_model(config: dict, state: dict) -> torch.nn.Module:
    transformer = reference.namespace("08_transformer")["Transformer"]
    model = lm.make_causal(transformer(**config))
    lm.load_weights(model, state)
    return model.eval()


# ------------------------------------------------------------------ the course's model


def test_course_model_computes_what_notebook_08s_model_computes():
    saved = torch.load(lm.CHECKPOINT, weights_only=True)
    tokens = lm.encode(lm.course_text(300, 4)[: lm.COURSE_MODEL["max_seq_len"]])[None]
    with torch.no_grad():
        ours, theirs = course_model()(tokens), notebook_08_model(saved["config"], saved["state_dict"])(tokens)
    torch.testing.assert_close(ours, theirs, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_drawn_model_computes_what_notebook_08s_model_computes(seed):
    g = torch.Generator().manual_seed(seed)
    config = CASES.drawn_config(g)
    state = CASES.random_weights(g, {k: tuple(v.shape) for k, v in CourseModel(config).state_dict().items()})
    tokens = torch.randint(config["vocabulary_size"], (2, config["max_seq_len"]), generator=g)
    with torch.no_grad():
        ours = lm.random_course_model(config, state)(tokens)
        theirs = notebook_08_model(config, state)(tokens)
    torch.testing.assert_close(ours, theirs, rtol=1e-4, atol=1e-4)


def test_course_models_rope_table_is_notebook_04s():
    table = reference.namespace("08_transformer")["get_rotation_matrix"](16, 64, 10000.0)
    torch.testing.assert_close(
        course_model().blocks[0].attention.rotation_matrix, table, rtol=1e-6, atol=1e-6
    )


def test_course_model_refuses_more_than_its_context():
    with pytest.raises(ValueError, match="more than the model's context"):
        course_model()(torch.zeros(1, 65, dtype=torch.long))


def test_the_notebooks_agreement_example_holds():
    """The notebook's figure says: 's' after 'the cat see', a space after 'the cats see'."""
    most_likely_next = ref("most_likely_next")
    model = course_model()
    assert most_likely_next(model, "the cat see", 64) == "s"
    assert most_likely_next(model, "the cats see", 64) == " "


def test_the_reference_weights_rebuild_the_layers_output():
    """Each head's weights times its values, merged and projected, give the attention layer's output."""
    model, tokens = course_model(), lm.encode("the old men paint the blue door in winter.")
    attention_weights = ref("attention_weights")
    records = ref("record_activations")(model, tokens[None])
    for block in range(2):
        attention = model.blocks[block].attention
        (x,), output = records[f"blocks.{block}.attention"][0]
        T, H = len(tokens), attention.num_heads
        Dh = x.shape[-1] // H
        with torch.no_grad():
            values = attention.qkv_linear(x).view(T, H, 3 * Dh)[:, :, 2 * Dh :]
            heads = [attention_weights(model, tokens, block, h) @ values[:, h] for h in range(H)]
            rebuilt = attention.out(torch.cat(heads, dim=-1))
        torch.testing.assert_close(rebuilt, output[0], rtol=1e-4, atol=1e-5)


# ---------------------------------------------------------------- the seed's broken tests


def test_the_seeds_similarity_test_passes_wrong_answers_that_the_check_fails():
    e = torch.randn(3, 16, generator=torch.Generator().manual_seed(0))
    right = F.cosine_similarity(e[:, None], e[None], dim=-1)
    squared = mistake("10.cosine_similarity_matrix", "Squared")
    for wrong in (squared(e), torch.zeros(3, 3)):
        assert bool((wrong**2 - right.abs() < 1e-4).all())  # the seed's test, as written
        assert not bool(((wrong - right).abs() < 1e-4).all())
    result = verdict("10.cosine_similarity_matrix", squared)
    assert not result.passed and "Looks like: the similarities are squared" in result.message
    assert not verdict("10.cosine_similarity_matrix", lambda e: torch.zeros(len(e), len(e))).passed


def test_the_exact_sum_test_fails_correct_rows_in_every_case():
    """Every case of 10.is_distribution holds softmax rows that do not sum to exactly 1 in float32."""
    for hidden, seed in ((False, 0), (True, 3), (True, 4)):
        for case in make_cases("10.is_distribution", hidden=hidden, seed=seed):
            p = case.inputs["p"].reshape(-1, case.inputs["p"].shape[-1])
            softmax_rows = p[torch.isfinite(p).all(-1) & (p >= 0).all(-1) & (p.max(-1).values < 1)]
            assert bool((softmax_rows.sum(-1) != 1).any()), case.name


# ------------------------------------------------------------------------- the records


def record_keeping_the_graph(model, tokens):
    records = {}
    handles = [
        m.register_forward_hook(lambda m, a, o, n=n: records.setdefault(n, []).append((a, o)))
        for n, m in model.named_modules()
    ]
    try:
        model(tokens)
    finally:
        for handle in handles:
            handle.remove()
    return records


def test_records_that_keep_the_graph_fail_the_records_only():
    result = verdict("10.record_activations", record_keeping_the_graph)
    assert parts(result) == {RECORDS: False, NO_HOOK_LEFT: True}
    assert "still require grad" in result.message and "detach" in result.message


def record_leaving_a_global_hook(model, tokens):
    records = ref("record_activations")(model, tokens)
    torch.nn.modules.module.register_module_forward_hook(lambda *args: None)
    return records


def test_a_global_hook_left_behind_is_counted():
    before = inspection.global_hooks()
    try:
        result = verdict("10.record_activations", record_leaving_a_global_hook)
    finally:
        hooks = torch.nn.modules.module._global_forward_hooks
        for key in list(hooks)[before:]:
            del hooks[key]
    assert parts(result) == {RECORDS: True, NO_HOOK_LEFT: False}
    assert "hooks left" in result.message


def test_one_pair_per_module_is_named():
    def one_pair(model, tokens):
        return {name: calls[-1] for name, calls in ref("record_activations")(model, tokens).items()}

    assert "make it a list with one pair per call" in verdict("10.record_activations", one_pair).message


def test_the_checks_leave_no_hook_on_the_course_model():
    model = course_model()
    inspection.run_record(
        ref("record_activations"), make_cases("10.record_activations", hidden=False, seed=0)[0]
    )
    assert inspection.hooks_on(model) == 0 and inspection.global_hooks() == 0


# --------------------------------------------------------------- similarity and attention


def similarity_row_by_row(embeddings):
    unit = embeddings / embeddings.norm(dim=-1, keepdim=True).clamp_min(1e-8)
    return torch.stack([unit @ row for row in unit])


def test_a_loop_over_rows_loses_only_the_loop_concern():
    result = verdict("10.cosine_similarity_matrix", similarity_row_by_row)
    assert not parts(result)[ONE_CALL] and sum(not ok for ok in parts(result).values()) == 1
    assert "a Python loop goes over the rows" in result.message


def test_wrong_values_fail_the_loop_concern_with_a_message_that_blames_the_values():
    """The loop concern pays only right values; a vectorised answer with wrong values must not read as
    if a loop was found."""

    def unnormalised(embeddings):
        return embeddings @ embeddings.T

    result = verdict("10.cosine_similarity_matrix", unnormalised)
    loop_part = next(part.message for part in result.parts if part.concern == ONE_CALL)
    assert "here the values are wrong, not the measurement" in loop_part
    assert "a Python loop goes over the rows" not in loop_part


def weights_leaving_the_hook(model, tokens, block, head):
    model.blocks[block].attention.register_forward_hook(lambda *args: None)
    return ref("attention_weights")(model, tokens, block, head)


def test_attention_weights_that_leave_their_hook_fail():
    result = verdict("10.attention_weights", weights_leaving_the_hook)
    assert not result.passed and "hooks are left on the model" in result.message


def test_attention_weights_are_zero_outside_the_window_and_rows_sum_to_one():
    model, tokens = course_model(), lm.encode(lm.course_text(100, 9)[:64])
    w = ref("attention_weights")(model, tokens, 1, 2)
    offset = torch.arange(64)[None] - torch.arange(64)[:, None]
    assert bool(w.masked_select(~((offset <= 0) & (offset > -16))).eq(0).all())
    torch.testing.assert_close(w.sum(-1), torch.ones(64))
    assert math.isclose(float(w.diagonal()[0]), 1.0)


def test_mistakes_file_redefines_none_of_the_notebooks_names():
    """mutant() pastes mistakes.py into an answer cell: only the imports may be shared (the same objects)."""
    module = reference.instructor_module(ASSIGNMENT, "mistakes.py")
    notebook = reference.namespace(ASSIGNMENT)
    shared = {name for name in vars(module) if name in names_the_notebook_binds(ASSIGNMENT)}
    assert all(name in notebook and vars(module)[name] is notebook[name] for name in shared), shared


def test_a_recorder_that_records_nothing_earns_nothing():
    """It leaves no hook behind, having made none: the call that returns must also record the model."""

    def record_activations(model, tokens):
        model(tokens)
        return {}

    for seed in (None, 7):
        result = verdict("10.record_activations", record_activations, seed)
        assert result.points == 0, result.message


def test_attention_weights_read_off_the_layers_own_forward_are_refused():
    """The layer's forward run again (on one-hot values, its output projection taken away, it returns
    the weights without a line of attention written): the check allows one run of the layer."""

    def attention_weights(model, tokens, block, head):
        model(tokens[None])
        attention = model.blocks[block].attention
        attention(torch.zeros(1, len(tokens), attention.out.in_features))  # the second run
        return torch.full((len(tokens), len(tokens)), 1.0 / len(tokens))

    result = verdict("10.attention_weights", attention_weights, None)
    assert result.points == 0, result.message
    assert "the attention layer ran 2 times" in result.message, result.message
