"""Notebook 06 (mixture of experts): the reference against Hugging Face's order (softmax, top K,
renormalise) and the dense computation, and how the checks grade answers that students write:
experts in a plain list or of the wrong size, the homework's garbled expert inside a right
router, a detached router.

Key: B batch, T sequence length, D hidden size, F d_ff, E experts, K experts per token.
"""

import json
import math
import re

import nbformat
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from autograder import language_model as lm
from autograder import reference
from autograder.api import make_cases
from autograder.checks.moe import (
    BALANCE,
    BIAS_UPDATE,
    BIASED_SELECTION,
    DIFFERENTIABLE,
    GRADIENT,
    INIT_CORE,
    KEPT,
    KEPT_ONLY,
    KEPT_OUTPUT,
    LARGE_LOGITS,
    LOAD_BALANCING,
    MOE_ROUTING,
    ONE_CALL,
    REGISTERED,
    ROUTING,
    UNBIASED_WEIGHTS,
    Z_LOSS,
    BlackBoxExpert,
)
from autograder.core import TOLERANCES
from autograder.paths import REPO, source_notebook

from .helpers.submissions import mistake, names_the_notebook_binds, parts, verdict

ASSIGNMENT = "06_moe"
RTOL, ATOL = TOLERANCES[torch.float32]
HIDDEN_SEED = 6
VISIBLE_AND_HIDDEN = pytest.mark.parametrize("seed", [None, HIDDEN_SEED], ids=["visible", "hidden"])


def ref(name: str):
    return reference.namespace(ASSIGNMENT)[name]


def mistake_name(name: str, impl_name: str) -> str:
    (found,) = [m.name for m in reference.mistakes(name) if m.impl.__name__ == impl_name]
    return found


def with_experts(make_expert):
    """The reference MoeLayer whose experts are make_expert(hidden_size, d_ff), in a ModuleList."""

    class Layer(ref("MoeLayer")):
        def __init__(self, hidden_size, d_ff, num_experts, n_experts_per_token):
            super().__init__(hidden_size, d_ff, num_experts, n_experts_per_token)
            self.experts = nn.ModuleList([make_expert(hidden_size, d_ff) for _ in range(num_experts)])

    Layer.__name__ = f"MoeLayerOf{getattr(make_expert, '__name__', 'Experts')}"
    return Layer


# ------------------------------------------------------------------ the reference itself


def mixtral_order(moe, x):
    """Every expert on every token, weighted by Hugging Face's softmax over all E, top K, renormalised."""
    probabilities = F.softmax(moe.gate(x), dim=-1)  # (B, T, E)
    top, selected = torch.topk(probabilities, moe.n_experts_per_token)  # (B, T, K)
    dense = torch.zeros_like(probabilities).scatter(-1, selected, top / top.sum(-1, keepdim=True))
    outputs = torch.stack([expert(x) for expert in moe.experts], dim=-2)  # (B, T, E, D)
    return (dense.unsqueeze(-1) * outputs).sum(-2)


@pytest.mark.parametrize(
    ("b", "t", "d", "f", "e", "k"),
    [(2, 5, 8, 12, 4, 2), (1, 1, 6, 10, 3, 3), (3, 7, 4, 8, 8, 1), (1, 4, 8, 12, 1, 1), (2, 3, 5, 7, 6, 4)],
)
def test_reference_layer_equals_mixtrals_order_computed_densely(b, t, d, f, e, k):
    torch.manual_seed(b * 100 + t * 10 + e)
    moe = ref("MoeLayer")(d, f, e, k)
    x = torch.randn(b, t, d)
    with torch.no_grad():
        torch.testing.assert_close(moe(x), mixtral_order(moe, x), rtol=RTOL, atol=ATOL)
        if e == k == 1:
            torch.testing.assert_close(moe(x), moe.experts[0](x), rtol=RTOL, atol=ATOL)


def test_reference_expert_is_swiglu_with_llamas_names():
    torch.manual_seed(0)
    expert = ref("FeedForward")(8, 12)
    x = torch.randn(2, 3, 8)
    gated = F.silu(x @ expert.w1.weight.T) * (x @ expert.w3.weight.T)  # (2, 3, F)
    torch.testing.assert_close(expert(x), gated @ expert.w2.weight.T, rtol=RTOL, atol=ATOL)
    assert all(module.bias is None for module in (expert.w1, expert.w2, expert.w3))


@VISIBLE_AND_HIDDEN
def test_one_expert_chosen_from_one_is_the_expert_itself(seed):
    """E = K = 1 is among the routing cases: the weight is softmax of one logit, 1, whatever the gate."""
    cases = make_cases("06.moe_routing", hidden=seed is not None, seed=0 if seed is None else seed)
    single = [case for case in cases if case.inputs["args"][2:] == (1, 1) and "probe" not in case.inputs]
    assert single, [case.name for case in cases]
    for case in single:
        out = MOE_ROUTING.run(ref("MoeLayer"), case)["output"]
        ((a, bias),) = case.inputs["experts"]
        torch.testing.assert_close(out, BlackBoxExpert(a, bias)(case.inputs["x"]), rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize(("shape", "k"), [((2, 4, 4), 2), ((1, 6, 8), 1), ((12, 3), 3), ((2, 3, 5, 6), 4)])
def test_the_balancing_loss_of_a_uniform_router_is_one(shape, k):
    """All logits equal give P_i = 1 / E, so E * sum_i f_i / E = 1 whatever the selection."""
    logits = torch.zeros(shape)
    selected = torch.randint(0, shape[-1], (*shape[:-1], k), generator=torch.Generator().manual_seed(k))
    loss = ref("load_balancing_loss")(logits, selected)
    assert loss.shape == ()
    torch.testing.assert_close(loss, torch.tensor(1.0), rtol=RTOL, atol=ATOL)


def test_a_loss_that_is_not_one_for_a_uniform_router_is_told_so():
    """Hugging Face's Mixtral loss (f per token, not per assignment) gives K = 2 on the check's
    uniform case."""
    (uniform,) = [c for c in make_cases("06.load_balancing", hidden=False, seed=0) if c.inputs.get("uniform")]
    is_one = next(p for p in LOAD_BALANCING.properties if p.name == "1 for a uniform router")
    assert is_one.test(uniform, LOAD_BALANCING.run(ref("load_balancing_loss"), uniform)) is None
    outputs = LOAD_BALANCING.run(mistake("06.load_balancing", "balance_per_token"), uniform)
    assert is_one.test(uniform, outputs) == "a uniform router should give exactly 1, got 2"


# ---------------------------------------------------------------- __init__ (06.moe_init)


@VISIBLE_AND_HIDDEN
def test_experts_in_a_plain_list_lose_only_the_registration(seed):
    plain_list = mistake("06.moe_init", "ExpertsInPlainList")
    result = verdict("06.moe_init", plain_list, seed)
    assert parts(result) == {INIT_CORE: True, REGISTERED: False}, result.message
    for words in ("not registered", "never trains them", "does not save them", "does not move them"):
        assert words in result.message, (words, result.message)
    assert "nn.ModuleList" in result.message
    assert verdict("06.moe_routing", plain_list, seed).passed  # routed right


class SiGLU(nn.Module):
    """Notebook 05's gated unit, (W x) * sigmoid(W_g x): the homework's 'SiGLU' used as an expert."""

    def __init__(self, in_features, out_features):
        super().__init__()
        self.W = nn.Linear(in_features, out_features, bias=False)
        self.W_g = nn.Linear(in_features, out_features, bias=False)

    def forward(self, x):
        return self.W(x) * torch.sigmoid(self.W_g(x))


def siglu_of_d_ff(hidden_size, d_ff):
    return SiGLU(d_ff, d_ff)


@VISIBLE_AND_HIDDEN
def test_experts_that_take_d_ff_features_are_told_the_shapes(seed):
    result = verdict("06.moe_init", with_experts(siglu_of_d_ff), seed)
    assert parts(result) == {INIT_CORE: False, REGISTERED: True}, result.message
    core = next(part.message for part in result.parts if part.concern == INIT_CORE)
    found = re.search(r"expert 0 fails on a \(3, (\d+)\) input, 3 tokens of hidden_size=(\d+) features", core)
    assert found and found[1] == found[2], core
    d, f = (int(n) for n in re.search(r"MoeLayer\((\d+), (\d+),", core).groups())
    assert f"shapes cannot be multiplied (3x{d} and {f}x{f})" in core, core
    assert "as FeedForward(hidden_size, d_ff) does" in core
    assert "not of the expected form" not in result.message  # the student's bug, not the grader's
    assert verdict("06.moe_routing", with_experts(siglu_of_d_ff), seed).passed


# -------------------------------------------------------- the expert inside the router


@VISIBLE_AND_HIDDEN
@pytest.mark.parametrize("expert", ["HomeworkFormulaExpert", "SigmoidGatedExpert"])
def test_a_wrong_expert_is_named_and_costs_the_router_nothing(expert, seed):
    """The routing check puts its own experts in place of the student's."""
    wrong = mistake("06.feed_forward", expert)
    result = verdict("06.feed_forward", wrong, seed)
    assert f"Looks like: {mistake_name('06.feed_forward', expert)}" in result.message, result.message
    assert result.points == 0
    for name in ("06.moe_init", "06.moe_routing"):
        layer = verdict(name, with_experts(wrong), seed)
        assert layer.passed, (name, layer.message)


# --------------------------------------------------------------------- gradients


@VISIBLE_AND_HIDDEN
@pytest.mark.parametrize(
    ("name", "impl", "right", "wrong"),
    [
        ("06.moe_routing", "WeightsDetached", ROUTING, GRADIENT),
        ("06.load_balancing", "balance_detached", BALANCE, DIFFERENTIABLE),
    ],
    ids=["router", "balancing loss"],
)
def test_a_detached_router_loses_only_the_gradient(name, impl, right, wrong, seed):
    result = verdict(name, mistake(name, impl), seed)
    assert parts(result) == {right: True, wrong: False}, result.message
    assert "detach" in next(part.message for part in result.parts if part.concern == wrong)


# ---------------------------------------------------------------------- the mistakes file


def test_mistakes_file_redefines_none_of_the_notebooks_names():
    """Only the imports may be shared (the same modules); a shared answer name (FeedForward,
    MoeLayer) would replace the notebook's, and a shared variable (x, moe, routing) would be
    rebound under the mistakes' feet by a later cell."""
    module = reference.instructor_module(ASSIGNMENT, "mistakes.py")
    notebook = reference.namespace(ASSIGNMENT)
    shared = {name for name in vars(module) if name in names_the_notebook_binds(ASSIGNMENT)}
    assert all(name in notebook and vars(module)[name] is notebook[name] for name in shared), shared


def test_the_notebooks_benchmark_figure_draws_the_committed_measurements():
    """The figure's numbers are copied into the notebook (a grading kernel reads no other file):
    they must be the benchmark's, rounded, as benchmarks/results/moe_routing_cpu.json holds them."""
    measured = json.loads((REPO / "benchmarks" / "results" / "moe_routing_cpu.json").read_text())
    notebook = nbformat.read(source_notebook(ASSIGNMENT), as_version=4)
    (numbers,) = [
        c.source
        for c in notebook.cells
        if c.metadata.get("nbgrader", {}).get("grade_id") == "benchmark_numbers"
    ]
    names: dict = {}
    exec(numbers, names)
    rows = measured["rows"]
    assert names["lengths"] == [row["T"] for row in rows]
    want = {method: [round(row["ms"][method], 2) for row in rows] for method in ("loop", "sorted", "dense")}
    assert names["milliseconds"] == want, "rerun the benchmark's numbers into the notebook"
    assert names["faster"] == [row["faster"] for row in rows]


# ------------------------------------------------------------------ after the review


class GarbledWithSiGLU(nn.Module):
    """The homework's text read literally: W3 . SiGLU(W1(x) . W2(x)), with notebook 05's SiGLU inside."""

    def __init__(self, hidden_size, d_ff):
        super().__init__()
        self.W1 = nn.Linear(hidden_size, d_ff, bias=False)
        self.W2 = nn.Linear(hidden_size, d_ff, bias=False)
        self.W3 = nn.Linear(d_ff, hidden_size, bias=False)
        self.act = SiGLU(d_ff, d_ff)

    def forward(self, x):
        return self.W3(self.act(self.W1(x) * self.W2(x)))


def test_the_garbled_expert_with_a_siglu_inside_is_told_what_the_course_expects():
    message = verdict("06.feed_forward", GarbledWithSiGLU).message
    assert "act.W.weight (12, 12)" in message, message
    assert "the homework's formula W3 . SiGLU(W1(x) . W2(x)) is garbled" in message, message


class UnfinishedFeedForward(nn.Module):
    def __init__(self, hidden_size, d_ff):
        raise NotImplementedError()


@VISIBLE_AND_HIDDEN
def test_an_unfinished_feed_forward_costs_the_routing_nothing(seed):
    """The routing check builds the layer with a stand-in for the FeedForward its code names."""
    layer = ref("MoeLayer")
    namespace = layer.__init__.__globals__
    original = namespace["FeedForward"]
    namespace["FeedForward"] = UnfinishedFeedForward
    try:
        result = verdict("06.moe_routing", layer, seed)
        assert result.passed, result.message
        assert namespace["FeedForward"] is UnfinishedFeedForward  # put back after each build
    finally:
        namespace["FeedForward"] = original


def test_a_layer_returning_a_tuple_is_told_to_return_the_output_alone():
    class ReturnsLogitsToo(ref("MoeLayer")):
        def forward(self, x):
            return super().forward(x), self.gate(x)

    message = verdict("06.moe_routing", ReturnsLogitsToo).message
    assert "forward returned a tuple: return the (B, T, D) output alone" in message, message


def test_a_layer_without_experts_earns_no_registration():
    class NoExperts(ref("MoeLayer")):
        def __init__(self, hidden_size, d_ff, num_experts, n_experts_per_token):
            super().__init__(hidden_size, d_ff, num_experts, n_experts_per_token)
            self.experts = nn.ModuleList()

    assert not parts(verdict("06.moe_init", NoExperts))[REGISTERED]


def stateful_dispatch():
    """A loop over tokens on the first sight of x, each expert called once on a repeat: the counted
    case must not be earned by a wrong answer."""
    seen = set()

    def dispatch(x, selected_experts, weights, experts):
        key = (tuple(x.shape), x.sum().item())
        if key in seen:
            for expert in experts:
                expert(x[:1])
            return torch.zeros_like(x)
        seen.add(key)
        return mistake("06.sorted_dispatch", "dispatch_per_token")(x, selected_experts, weights, experts)

    return dispatch


def dense_dispatch(x, selected_experts, weights, experts):
    """Right output, every expert on every token."""
    dense = torch.zeros(x.shape[0], len(experts)).scatter(-1, selected_experts, weights)
    return sum(dense[:, i, None] * expert(x) for i, expert in enumerate(experts))


@VISIBLE_AND_HIDDEN
@pytest.mark.parametrize("answer", [stateful_dispatch(), dense_dispatch], ids=["replaying", "dense"])
def test_the_call_count_is_earned_only_by_a_right_sparse_dispatch(answer, seed):
    result = verdict("06.sorted_dispatch", answer, seed)
    assert not parts(result)[ONE_CALL], result.message


# ---------------------------------------------------------------- after the red team


@VISIBLE_AND_HIDDEN
def test_an_init_that_reads_its_experts_weights_keeps_its_routing_points(seed):
    class InitialisesExperts(ref("MoeLayer")):
        def __init__(self, hidden_size, d_ff, num_experts, n_experts_per_token):
            super().__init__(hidden_size, d_ff, num_experts, n_experts_per_token)
            for expert in self.experts:
                nn.init.normal_(expert.w1.weight, std=0.02)

    result = verdict("06.moe_routing", InitialisesExperts, seed)
    assert result.passed, result.message


def test_copies_of_one_expert_are_told_they_share_their_weights():
    import copy

    class CopiedExperts(ref("MoeLayer")):
        def __init__(self, hidden_size, d_ff, num_experts, n_experts_per_token):
            super().__init__(hidden_size, d_ff, num_experts, n_experts_per_token)
            one = ref("FeedForward")(hidden_size, d_ff)
            self.experts = nn.ModuleList([copy.copy(one) for _ in range(num_experts)])

    result = verdict("06.moe_init", CopiedExperts)
    assert not parts(result)[INIT_CORE], result.message
    assert "have weights of their own" in result.message, result.message


def counts_reset(x, selected_experts, weights, experts):
    """A loop over tokens that then tries to reset the experts' counts."""
    out = mistake("06.sorted_dispatch", "dispatch_per_token")(x, selected_experts, weights, experts)
    for expert in experts:
        expert.calls, expert.rows = 1, 0
    return out


def test_the_experts_counts_cannot_be_reset_by_attributes():
    assert not parts(verdict("06.sorted_dispatch", counts_reset))[ONE_CALL]


def balance_in_float64(router_logits, selected_experts):
    return ref("load_balancing_loss")(router_logits.double(), selected_experts).double()


def test_a_balancing_loss_in_float64_passes():
    result = verdict("06.load_balancing", balance_in_float64)
    assert result.passed, result.message


MOE_ON_A_BROKEN_EXPERT = """
import torch
import torch.nn as nn

class FeedForward(nn.Module):  # Question 1 unfinished: forward fails, and w2 maps to d_ff
    def __init__(self, hidden_size, d_ff):
        super().__init__()
        self.w1 = nn.Linear(hidden_size, d_ff, bias=False)
        self.w2 = nn.Linear(hidden_size, d_ff, bias=False)

    def forward(self, x):
        raise NotImplementedError()

class MoeLayer(nn.Module):
    def __init__(self, hidden_size, d_ff, num_experts, n_experts_per_token):
        super().__init__()
        self.n_experts_per_token = n_experts_per_token
        self.gate = nn.Linear(hidden_size, num_experts, bias=False)
        self.experts = nn.ModuleList([FeedForward(hidden_size, d_ff) for _ in range(num_experts)])
"""


@VISIBLE_AND_HIDDEN
def test_a_feed_forward_bug_costs_06_moe_init_nothing(seed):
    """One mistake, one charge: 06.moe_init grades the gate and the experts' registration; the expert
    itself is 06.feed_forward's. Experts built with their sizes swapped still fail."""
    names = {}
    exec(MOE_ON_A_BROKEN_EXPERT, names)
    result = verdict("06.moe_init", names["MoeLayer"], seed)
    assert result.passed, result.message
    swapped = MOE_ON_A_BROKEN_EXPERT.replace(
        "FeedForward(hidden_size, d_ff) for", "FeedForward(d_ff, hidden_size) for"
    )
    exec(swapped, names)
    result = verdict("06.moe_init", names["MoeLayer"], seed)
    assert not parts(result)[INIT_CORE] and "Each expert must map hidden_size features" in result.message


class FeedForwardHoldingALentExpert(nn.Module):
    """06's expert handed in as the course's lent one, held in a plain list beside its weights."""

    def __init__(self, hidden_size: int, d_ff: int):
        super().__init__()
        self.lent = [lm.CourseExpert({"hidden_size": hidden_size, "d_ff": d_ff})]
        self.w1, self.w2, self.w3 = self.lent[0].w1, self.lent[0].w2, self.lent[0].w3

    def forward(self, x):
        return self.lent[0](x)


class MoeLayerHoldingALentLayer(nn.Module):
    """06's layer handed in as the course's lent one: its gate and experts registered as 06 asks."""

    def __init__(self, hidden_size: int, d_ff: int, num_experts: int, n_experts_per_token: int):
        super().__init__()
        config = {"hidden_size": hidden_size, "d_ff": d_ff, "num_experts": num_experts}
        self.lent = {"layer": lm.CourseMoe({**config, "n_experts_per_token": n_experts_per_token})}
        self.gate, self.experts = self.lent["layer"].gate, self.lent["layer"].experts
        self.num_experts, self.n_experts_per_token = num_experts, n_experts_per_token

    def forward(self, x):
        return self.lent["layer"](x)


@pytest.mark.parametrize(
    ("check", "answer"),
    [
        ("06.feed_forward", FeedForwardHoldingALentExpert),
        ("06.moe_init", MoeLayerHoldingALentLayer),
        ("06.moe_routing", MoeLayerHoldingALentLayer),
    ],
)
def test_an_answer_holding_the_lent_model_earns_nothing(check, answer):
    """Composition, not derivation: 7 points of 06 went to the course's lent parts held in a list or
    a dict; core now refuses an answer whose code names the lent model, outside notebook 10."""
    result = verdict(check, answer)
    assert result.points == 0, result.message
    assert "holds or names the class autograder.language_model.Course" in result.message, result.message


# ----------------------------------------------- added: expert capacity, token dropping


def test_capacity_keeps_first_choices_first_then_earlier_tokens_and_never_renormalises():
    """By hand: N = 4, K = 2, E = 2, c = 0.5 gives C = ceil(0.5 * 4 * 2 / 2) = 2. Expert 0's queue is
    (token 0, slot 0), (1, 0), (3, 0), then (2, 1): it keeps the first two. Expert 1's is (2, 0), then
    (0, 1), (1, 1), (3, 1): it keeps (2, 0) and (0, 1). Token 3 loses both pairs, token 1 keeps one,
    whose weight stays as given."""
    selected = torch.tensor([[0, 1], [0, 1], [1, 0], [0, 1]])
    weights = torch.tensor([[0.7, 0.3], [0.6, 0.4], [0.9, 0.1], [0.8, 0.2]])
    x = torch.randn(4, 3, generator=torch.Generator().manual_seed(0))
    experts = [nn.Identity(), nn.Identity()]
    out, kept = ref("capacity_dispatch")(x, selected, weights, experts, 0.5)
    assert kept.dtype == torch.bool
    assert kept.tolist() == [[True, True], [True, False], [True, False], [False, False]]
    torch.testing.assert_close(out, torch.stack([x[0], 0.6 * x[1], 0.9 * x[2], torch.zeros(3)]))


def test_a_token_that_loses_every_pair_passes_a_pre_norm_block_unchanged():
    torch.manual_seed(1)
    moe, norm = ref("MoeLayer")(8, 12, 4, 2), nn.RMSNorm(8)
    h = torch.randn(16, 8)
    with torch.no_grad():
        values, chosen = torch.topk(moe.gate(norm(h)), 2)
        out, kept = ref("capacity_dispatch")(norm(h), chosen, F.softmax(values, -1), moe.experts, 0.25)
    skipped = ~kept.any(-1)
    assert skipped.any() and not skipped.all()
    assert torch.equal((h + out)[skipped], h[skipped])


@VISIBLE_AND_HIDDEN
def test_the_capacity_cases_hold_drops_and_a_capacity_that_is_not_whole(seed):
    """Every concern has a case where an expert overflows; among the kept-pairs cases, c N K / E is not
    a whole number in one with K > 1 (a floor shows, and so does N / E)."""
    cases = make_cases("06.capacity_dispatch", hidden=seed is not None, seed=0 if seed is None else seed)
    for concern in (KEPT, KEPT_OUTPUT, KEPT_ONLY):
        mine = [c for c in cases if c.concern == concern or (concern == KEPT and not c.concern)]
        assert any(" 0 pair(s) over capacity" not in c.name for c in mine), concern
    fractional = [
        c
        for c in cases
        if c.inputs["part"] == "kept"
        and c.inputs["selected_experts"].shape[1] > 1
        and (c.inputs["capacity_factor"] * c.inputs["selected_experts"].numel() / len(c.inputs["experts"]))
        % 1
    ]
    assert fractional


def capacity_keeping(everything: bool):
    """kept all True with the full routed output (no capacity at all), or all False with zeros."""

    def answer(x, selected_experts, weights, experts, capacity_factor):
        if not everything:
            return torch.zeros_like(x), torch.zeros_like(selected_experts, dtype=torch.bool)
        return ref("sorted_dispatch")(x, selected_experts, weights, experts), torch.ones_like(
            selected_experts, dtype=torch.bool
        )

    return answer


@VISIBLE_AND_HIDDEN
@pytest.mark.parametrize("everything", [True, False], ids=["every pair kept", "nothing kept"])
def test_keeping_every_pair_or_none_earns_nothing(everything, seed):
    result = verdict("06.capacity_dispatch", capacity_keeping(everything), seed)
    assert result.points == 0, result.message
    assert "over-full experts drop, and every chosen expert keeps a pair" in result.message


@VISIBLE_AND_HIDDEN
@pytest.mark.parametrize(
    ("impl", "lost"),
    [
        ("capacity_by_weight", {KEPT}),
        ("capacity_token_by_token", {KEPT}),
        ("capacity_floored", {KEPT}),
        ("capacity_renormalised", {KEPT_OUTPUT, KEPT_ONLY}),  # the calls are earned by a right output
        ("capacity_every_pair_computed", {KEPT_ONLY}),
    ],
)
def test_a_capacity_mistake_costs_its_own_concern(impl, lost, seed):
    """The output is judged against the pairs the answer kept: a wrong queue costs the kept pairs only."""
    result = verdict("06.capacity_dispatch", mistake("06.capacity_dispatch", impl), seed)
    assert {concern for concern, passed in parts(result).items() if not passed} == lost, result.message


# ---------------------------------------------------------------- added: router z-loss


def test_the_z_loss_is_the_mean_squared_log_sum_exp_and_stays_finite():
    logits = torch.randn(3, 5, 6, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    by_hand = torch.log(torch.exp(logits).sum(-1)).square().mean()
    torch.testing.assert_close(ref("router_z_loss")(logits), by_hand)
    zeros = torch.zeros(4, 8)
    torch.testing.assert_close(ref("router_z_loss")(zeros), torch.tensor(math.log(8) ** 2))
    for offset in (1000.0, -1000.0):
        loss = ref("router_z_loss")(zeros + offset)
        torch.testing.assert_close(loss, torch.tensor((offset + math.log(8)) ** 2))


@VISIBLE_AND_HIDDEN
def test_a_naive_log_sum_exp_loses_only_the_large_logits(seed):
    result = verdict("06.router_z_loss", mistake("06.router_z_loss", "z_loss_naive_log_sum_exp"), seed)
    assert parts(result) == {Z_LOSS: True, LARGE_LOGITS: False, DIFFERENTIABLE: True}, result.message
    assert "contains inf" in result.message


@VISIBLE_AND_HIDDEN
def test_a_detached_z_loss_loses_only_the_gradient(seed):
    result = verdict("06.router_z_loss", mistake("06.router_z_loss", "z_loss_detached"), seed)
    assert parts(result) == {Z_LOSS: True, LARGE_LOGITS: True, DIFFERENTIABLE: False}, result.message


# ------------------------------------------- added: balancing without an auxiliary loss


def test_the_bias_chooses_and_never_weighs():
    """A bias of +1 on the least likely expert puts it in every top K, with its original score's share."""
    scores = torch.tensor([[0.9, 0.6, 0.1], [0.2, 0.8, 0.3]])
    selected, weights = ref("biased_routing")(scores, torch.tensor([0.0, 0.0, 1.0]), 2)
    assert [sorted(row) for row in selected.tolist()] == [[0, 2], [1, 2]]
    chosen = scores.gather(-1, selected)
    torch.testing.assert_close(weights, chosen / chosen.sum(-1, keepdim=True))
    plain_selected, plain_weights = ref("biased_routing")(scores, torch.zeros(3), 2)
    torch.testing.assert_close(
        plain_weights, torch.topk(scores, 2).values / torch.topk(scores, 2).values.sum(-1, keepdim=True)
    )
    assert torch.equal(plain_selected, torch.topk(scores, 2).indices)


def test_the_update_lowers_the_overloaded_raises_the_underloaded_and_keeps_the_mean():
    bias = torch.tensor([0.05, -0.02, 0.0, 0.01])
    selected = torch.tensor([[0, 1], [0, 1], [0, 2], [2, 0]])  # loads 4, 2, 2, 0; mean 2
    torch.testing.assert_close(
        ref("update_bias")(bias, selected, 0.01), torch.tensor([0.04, -0.02, 0.0, 0.02])
    )


@VISIBLE_AND_HIDDEN
@pytest.mark.parametrize(
    ("impl", "lost"),
    [
        ("_routing_without_bias", BIASED_SELECTION),
        ("_weights_from_biased_scores", UNBIASED_WEIGHTS),
        ("_update_at_the_mean_lowered", BIAS_UPDATE),
    ],
)
def test_a_biased_routing_mistake_costs_its_own_concern(impl, lost, seed):
    (wrong,) = [
        m.impl for m in reference.mistakes("06.biased_routing") if impl in {f.__name__ for f in m.impl}
    ]
    result = verdict("06.biased_routing", wrong, seed)
    assert {concern for concern, passed in parts(result).items() if not passed} == {lost}, result.message


CAPACITY_THROUGH_SORTED_DISPATCH = """
import math

import torch
import torch.nn.functional as F


def sorted_dispatch(x, selected_experts, weights, experts):  # Question 6 unfinished
    raise NotImplementedError()


def capacity_dispatch(x, selected_experts, weights, experts, capacity_factor):
    num_tokens, k = selected_experts.shape
    limit = math.ceil(capacity_factor * num_tokens * k / len(experts))
    queue = F.one_hot(selected_experts.T.reshape(-1), len(experts))
    kept = ((queue.cumsum(0) * queue).sum(-1) <= limit).reshape(k, num_tokens).T
    return sorted_dispatch(x, selected_experts, weights * kept, experts), kept
"""


@VISIBLE_AND_HIDDEN
def test_a_bug_of_question_6_costs_a_capacity_dispatch_that_calls_it_nothing(seed):
    """sorted_dispatch gets a stand-in: the answer loses only the calls, since it computes every pair."""
    names = {}
    exec(CAPACITY_THROUGH_SORTED_DISPATCH, names)
    result = verdict("06.capacity_dispatch", names["capacity_dispatch"], seed)
    assert parts(result) == {KEPT: True, KEPT_OUTPUT: True, KEPT_ONLY: False}, result.message
    assert names["sorted_dispatch"].__name__ == "sorted_dispatch"  # put back after the run
