"""Checks of notebook 06, mixture of experts.

Key: B batch, T sequence length, D hidden size, F d_ff, E experts, K experts per token, N = B * T
tokens. The routing check treats experts as black boxes: it puts trusted, parameter-free experts
in place of the student's and loads the case's gate weights, so a bug in the expert costs
06.feed_forward's points only and the routing is judged on its own.
"""

import math

import torch
import torch.nn as nn

from ..core import (
    FLOAT32_GAP,
    Case,
    Check,
    Concern,
    ErrorHint,
    NotAsAsked,
    Outputs,
    Property,
    names_replaced,
)
from ._toolkit import (
    PARAMETERS_UNEXPECTED,
    BlackBoxExpert,
    bias_free,
    both_orders,
    build_with_stand_ins,
    count_biases,
    gated_parameters,
    modules_with_own_weights,
    zero,
)

Tensor = torch.Tensor

# ------------------------------------------------------------------------- FeedForward

EXPERT_CORE = "w2(silu(w1 x) * w3 x)"
NO_BIAS = "bias-free linears, as in Mistral and Llama"


def run_expert(feed_forward_class, case: Case) -> Outputs:
    """The student's FeedForward with the case's matrices: w2 found by its shape (D, F), w1 and w3
    loaded both ways round (either may be the gated one, whatever their names)."""
    if "count_biases" in case.inputs:
        return count_biases(
            feed_forward_class, [(d, f) for d, f in case.inputs["count_biases"]], with_down=True
        )
    x, w1, w3, w2 = (case.inputs[k] for k in ("x", "w1", "w3", "w2"))
    d, f = w1.shape[1], w1.shape[0]
    module = feed_forward_class(d, f)
    found = gated_parameters(module, d, f, down=True)
    with torch.no_grad():
        found.down.copy_(w2)
    zero(found.biases)  # a bias is advice only
    y, y_swapped = both_orders(lambda: module(x), found.projections, w1, w3)
    return {"y": y, "y_swapped": y_swapped}


EXPERT_PARAMETERS = ErrorHint(
    PARAMETERS_UNEXPECTED,
    "the course's expert is w2(silu(w1(x)) * w3(x)): three bias-free nn.Linear layers, w1 and w3 from "
    "hidden_size to d_ff and w2 from d_ff back to hidden_size, and nothing else inside (no SiGLU module: "
    "the homework's formula W3 . SiGLU(W1(x) . W2(x)) is garbled, see the notebook). The names are yours.",
)

FEED_FORWARD = Check(
    name="06.feed_forward",
    target="FeedForward",
    run=run_expert,
    concerns=[Concern(EXPERT_CORE), Concern(NO_BIAS, weight=0)],
    outputs={
        # Which of the student's projections is w1 and which w3 is theirs to name: both ways are run.
        "y": "FeedForward(x), the case's w1 and w3 loaded into your two projections one way round "
        "(of the two ways, the output whose values sum lower)",
        "y_swapped": "FeedForward(x), w1 and w3 loaded the other way round "
        "(the output whose values sum higher)",
        "bias vectors": "the number of bias vectors",
    },
    properties=[bias_free(NO_BIAS, "your expert", "Mistral's and Llama's experts have none (bias=False)")],
    error_hints=[
        EXPERT_PARAMETERS,
        ErrorHint(
            "shapes cannot be multiplied",
            "w1 and w3 map hidden_size to d_ff, w2 maps d_ff back to hidden_size.",
        ),
    ],
    hints=[
        "Three projections: two from D up to d_ff, one back down. Which of the two up-projections goes "
        "through the activation, and what happens to the other one?",
        "Test it in a new cell: with ff = FeedForward(8, 12) and x = torch.randn(2, 3, 8), ff(x) should have "
        "shape (2, 3, 8) and equal the notebook's formula computed by hand with your three layers.",
        "It is the SwiGLU network of notebook 05 with Llama's names: the activation is SiLU (not the "
        "sigmoid), applied to w1(x) alone, then multiplied by w3(x), then w2.",
        "w1 and w3 are nn.Linear layers from hidden_size to d_ff, w2 from d_ff back to hidden_size, all "
        "three with bias=False; forward applies F.silu to w1's output only, multiplies it by w3's output, "
        "and projects the product with w2.",
    ],
    hidden_points=1.0,
)

# ---------------------------------------------------------------------- MoeLayer.__init__

NO_GATE = ErrorHint(
    "has no attribute 'gate'", "name the router's linear layer self.gate, as the question asks."
)

INIT_CORE = "a gate Linear(hidden_size, num_experts) and num_experts experts from hidden_size to hidden_size"
REGISTERED = "experts registered with the layer (nn.ModuleList)"
PROBE_ROWS = 3


class SizedExpert(nn.Module):
    """What 06.moe_init builds in place of the student's FeedForward, which 06.feed_forward grades:
    a trusted map from its first size to itself, with a weight. A bug of FeedForward then costs this
    question nothing, while experts built with the wrong sizes, shared or not registered still show."""

    def __init__(self, hidden_size: int, *args, **kwargs):
        super().__init__()
        self.weight = nn.Parameter(torch.eye(hidden_size))

    def forward(self, x: Tensor) -> Tensor:
        return x @ self.weight


def run_init(moe_class, case: Case) -> Outputs:
    d, f, e, k = case.inputs["args"]
    with names_replaced(moe_class, {"FeedForward": SizedExpert}):
        moe = moe_class(d, f, e, k)
    if isinstance(moe.experts, dict | nn.ModuleDict):
        raise ValueError(
            "self.experts is a dict: keep the experts in an nn.ModuleList, numbered as the gate's scores are"
        )
    if case.inputs["part"] == "registration":
        experts = list(moe.experts)
        inside = {id(p) for expert in experts for p in expert.parameters()}
        registered = {id(p) for p in moe.parameters()}
        return {  # experts without parameters would register nothing and pass: they are counted too
            "experts holding parameters": torch.tensor(
                sum(any(True for _ in ex.parameters()) for ex in experts)
            ),
            "expert parameters not registered": torch.tensor(len(inside - registered)),
        }
    x = case.inputs["x"]
    try:
        scores = moe.gate(x)
    except Exception as error:
        raise ValueError(
            f"self.gate fails on a ({PROBE_ROWS}, {d}) input, {PROBE_ROWS} tokens of hidden_size={d} "
            f"features: {error}. The gate maps hidden_size features to num_experts scores: "
            "nn.Linear(hidden_size, num_experts)"
        ) from None
    for i, expert in enumerate(moe.experts):
        try:
            y = expert(x)
        except Exception as error:
            raise ValueError(
                f"expert {i} fails on a ({PROBE_ROWS}, {d}) input, {PROBE_ROWS} tokens of hidden_size={d} "
                f"features: {error}. Each expert must map hidden_size features to hidden_size, as "
                "FeedForward(hidden_size, d_ff) does"
            ) from None
        if not isinstance(y, Tensor) or tuple(y.shape) != (PROBE_ROWS, d):
            shape = tuple(y.shape) if isinstance(y, Tensor) else type(y).__name__
            raise ValueError(
                f"expert {i} maps a ({PROBE_ROWS}, {d}) input to {shape}: each expert must map "
                f"hidden_size={d} features to hidden_size, as FeedForward(hidden_size, d_ff) does"
            )
    return {
        "gate output shape": torch.tensor(tuple(scores.shape)),
        "number of experts": torch.tensor(len(moe.experts)),
        "distinct experts": torch.tensor(modules_with_own_weights(list(moe.experts))),
    }


def _distinct(case: Case, out: Outputs) -> str | None:
    if "distinct experts" not in out or int(out["distinct experts"]) == int(out["number of experts"]):
        return None
    return (
        f"of the {int(out['number of experts'])} experts only {int(out['distinct experts'])} have weights of "
        "their own: [FeedForward(...)] * num_experts (or copies of one expert) repeats ONE expert, whose "
        "weights the others share; build each expert with its own call, in a list comprehension"
    )


def _registered(case: Case, out: Outputs) -> str | None:
    missing = int(out["expert parameters not registered"])
    if missing == 0:
        return None
    return (
        f"{missing} parameter tensor(s) of the experts are not registered with the layer: the experts are "
        "kept in a plain Python list, which nn.Module does not look into. The forward pass works, but "
        "moe.parameters() misses them (an optimizer never trains them), moe.state_dict() does not save them "
        "and moe.to(device) does not move them. An nn.ModuleList registers what it holds"
    )


MOE_INIT = Check(
    name="06.moe_init",
    target="MoeLayer",
    answer="moe_layer",
    run=run_init,
    concerns=[Concern(INIT_CORE, weight=2), Concern(REGISTERED, weight=1)],
    outputs={
        "gate output shape": f"the shape of gate(x) for x of shape ({PROBE_ROWS}, hidden_size)",
        "number of experts": "len(self.experts)",
        "distinct experts": "the number of experts with weights of their own",
        "experts holding parameters": "the number of experts that hold parameters",
        "expert parameters not registered": "the number of the experts' parameters the layer does not hold",
    },
    properties=[
        Property("distinct experts", _distinct, concern=INIT_CORE),
        Property("experts registered", _registered, concern=REGISTERED),
    ],
    error_hints=[
        NO_GATE,
        ErrorHint("has no attribute 'experts'", "keep the experts in self.experts, as the question asks."),
    ],
    hints=[
        "The gate gives one score per expert for each token; each expert is a whole feed-forward network "
        "from hidden_size to hidden_size. What are the gate's input and output sizes?",
        "Test it in a new cell: moe = MoeLayer(8, 12, 4, 2); moe.gate(torch.randn(3, 8)) should have shape "
        "(3, 4), len(moe.experts) should be 4, and sum(p.numel() for p in moe.parameters()) should count the "
        "experts' weights too.",
        "A plain Python list of modules works in forward, but nn.Module registers only attributes that are "
        "modules: nn.ModuleList is a module that holds a list of them. And [module] * E repeats one module.",
        "The gate is one nn.Linear from hidden_size to num_experts (Mixtral's has no bias; a bias is your "
        "choice); the experts are num_experts separate FeedForward(hidden_size, d_ff) modules, made in a "
        "loop or a comprehension and held in an nn.ModuleList.",
    ],
    hidden_points=1.0,
)

# ------------------------------------------------------------------- MoeLayer.forward

ROUTING = "top-k of the gate's logits, softmax over the k, weighted sum of the experts"
GRADIENT = "gradients reach the gate"


def install_black_boxes(moe, inputs: dict) -> None:
    """The case's gate weights into moe.gate (a bias is zeroed) and black-box experts in place of
    moe.experts, kept in the student's kind of container."""
    d, _, e, _ = inputs["args"]
    gate = moe.gate
    weight = getattr(gate, "weight", None)
    if not isinstance(weight, Tensor) or tuple(weight.shape) != (e, d):
        shape = tuple(weight.shape) if isinstance(weight, Tensor) else "no weight"
        raise ValueError(
            f"self.gate should be nn.Linear(hidden_size, num_experts), whose weight has shape ({e}, {d}); "
            f"yours has {shape}"
        )
    with torch.no_grad():
        weight.copy_(inputs["gate"])
        if isinstance(getattr(gate, "bias", None), Tensor):
            gate.bias.zero_()
    experts = [BlackBoxExpert(a, b) for a, b in inputs["experts"]]
    moe.experts = nn.ModuleList(experts) if isinstance(moe.experts, nn.Module) else experts


def run_routing(moe_class, case: Case) -> Outputs:
    moe = build_with_stand_ins(moe_class, case.inputs["args"], ("FeedForward",))
    install_black_boxes(moe, case.inputs)
    out = moe(case.inputs["x"])
    if not isinstance(out, Tensor):
        raise ValueError(
            f"forward returned a {type(out).__name__}: return the (B, T, D) output alone (Hugging Face's "
            "Mixtral block also returns the router logits; this layer does not)"
        )
    if "probe" not in case.inputs:
        return {"output": out}
    # No gradient at all is a zero gradient: compared (and a known mistake named), then explained.
    if out.requires_grad:
        (out * case.inputs["probe"]).sum().backward()
    grad = moe.gate.weight.grad
    return {"gate gradient": torch.zeros_like(moe.gate.weight) if grad is None else grad}


def _gate_gets_gradient(case: Case, out: Outputs) -> str | None:
    if "gate gradient" not in out or bool(out["gate gradient"].any()):
        return None
    return (
        "no gradient reached the gate's weight: the output must depend on the gate through the routing "
        "weights, computed from the gate's logits with torch operations (no .detach(), .item(), .data or "
        "torch.no_grad()) and multiplied into the experts' outputs"
    )


MOE_ROUTING = Check(
    name="06.moe_routing",
    target="MoeLayer",
    answer="moe_layer",
    run=run_routing,
    concerns=[Concern(ROUTING, weight=3), Concern(GRADIENT, weight=1)],
    properties=[Property("the gate gets a gradient", _gate_gets_gradient, concern=GRADIENT)],
    outputs={
        "output": "the layer's output (the check's own experts in place of yours)",
        "gate gradient": "the gradient of the gate's weight",
    },
    error_hints=[
        NO_GATE,
        ErrorHint(
            "'BlackBoxExpert' object has no attribute",
            "the routing check replaces your experts with its own modules, which hold no weights: call each "
            "expert as expert(x) and do not read its weights in MoeLayer.forward.",
        ),
        ErrorHint(
            "must match the size of tensor b",
            "the weights of the n routed tokens, weights[batch_idx, token_idx, topk_idx], have shape (n,): "
            "add a dimension with [..., None] to scale the (n, D) rows of the experts' output.",
        ),
        ErrorHint(
            "shape mismatch",
            "weights[batch_idx, token_idx, topk_idx, None] has shape (n, 1) and multiplies the expert's "
            "output for those n tokens, (n, D).",
        ),
    ],
    hints=[
        "For each token: the gate's K largest logits pick the experts, a softmax over those K logits (not "
        "over all E) gives their weights, and the output is the weighted sum of the K experts' outputs.",
        "Test it in a new cell with every expert replaced by something you can compute by hand, e.g. "
        "moe.experts = nn.ModuleList([nn.Identity()] * E): the output must then equal x, since the weights "
        "of each token sum to 1. Then compare with a slow loop over tokens.",
        "torch.topk(self.gate(x), k) gives each token's K largest logits and the experts they belong to; "
        "the softmax runs over those K values (the last dimension); start from out = torch.zeros_like(x) "
        "and, per expert, ADD the weighted outputs of the tokens routed to it.",
        "Per expert i, torch.where(selected == i) returns three index tensors: the batch, the token and "
        "the slot among the K of every token routed to i. Run the expert once on x at those (batch, token) "
        "pairs, scale by the weights at (batch, token, slot), unsqueezed to broadcast over D, and add the "
        "result into out at the same pairs.",
    ],
    hidden_points=2.0,
)

# ------------------------------------------------------------------- load balancing

BALANCE = "E * sum_i f_i P_i"
DIFFERENTIABLE = "differentiable in the router's logits"


def run_balance(load_balancing_loss, case: Case) -> Outputs:
    logits = case.inputs["router_logits"].clone().requires_grad_(bool(case.inputs.get("gradient")))
    loss = torch.as_tensor(load_balancing_loss(logits, case.inputs["selected_experts"]))
    if not case.inputs.get("gradient"):
        return {"loss": loss}
    # No gradient at all is a zero gradient: compared (and a known mistake named), then explained.
    gradient = torch.autograd.grad(loss, logits, allow_unused=True)[0] if loss.requires_grad else None
    return {"gradient": torch.zeros_like(logits) if gradient is None else gradient}


def _logits_get_gradient(case: Case, out: Outputs) -> str | None:
    if "gradient" not in out or bool(out["gradient"].any()):
        return None
    return (
        "no gradient reaches router_logits: compute P with a softmax of the logits themselves, without "
        ".detach(), .item(), numpy or torch.no_grad(), so that the loss can train the router"
    )


def _uniform_is_one(case: Case, out: Outputs) -> str | None:
    if not case.inputs.get("uniform") or "loss" not in out:
        return None
    loss = float(out["loss"])
    return (
        None if abs(loss - 1.0) < FLOAT32_GAP else f"a uniform router should give exactly 1, got {loss:.6g}"
    )


LOAD_BALANCING = Check(
    name="06.load_balancing",
    target="load_balancing_loss",
    run=run_balance,
    concerns=[Concern(BALANCE, weight=3), Concern(DIFFERENTIABLE, weight=1)],
    exact_dtype=False,  # a loss computed in float64 is as right as the reference's float32
    outputs={"loss": "the loss", "gradient": "the gradient of the loss with respect to router_logits"},
    properties=[
        Property("1 for a uniform router", _uniform_is_one),
        Property("the logits get a gradient", _logits_get_gradient, concern=DIFFERENTIABLE),
    ],
    hints=[
        "Two vectors of E numbers: f, the share of the token-to-expert assignments each expert received "
        "(counted from selected_experts), and P, the mean router probability of each expert (a softmax over "
        "all E logits, averaged over tokens). The loss is E times their dot product.",
        "Test yourself: all logits equal must give 1 whatever the selection; every token on one expert with "
        "probability near 1 and K = 1 must give about E.",
        "f counts assignments, K per token, so it sums to 1 over the experts when divided by N * K; P is "
        "softmax(router_logits, dim=-1) averaged over every dimension but the last.",
        "E = router_logits.shape[-1]; counts = F.one_hot(selected_experts.flatten(), E).float().mean(0); "
        "probs = router_logits.softmax(-1).reshape(-1, E).mean(0); return E * (counts * probs).sum()",
    ],
    hidden_points=1.0,
)

# ------------------------------------------------------------ extension: sorted dispatch

DISPATCH = "the routed, weighted sum"
ONE_CALL = "each expert called at most once, on its own tokens only"


class CountedExpert(nn.Module):
    """A black-box expert, tanh(x A + b), whose weights and counts live in its forward's closure
    (`counted_expert`), not in attributes a student's code could reset. Like OperationCount, a
    teaching aid inside the student's kernel, not a guard."""


def counted_expert(a: Tensor, b: Tensor, tally: dict[str, int]) -> nn.Module:
    """An expert that adds its calls and the rows it is given to `tally`."""

    def forward(x: Tensor) -> Tensor:
        tally["calls"] += 1
        tally["rows"] += x.reshape(-1, x.shape[-1]).shape[0]
        return torch.tanh(x @ a + b)

    expert = CountedExpert()
    expert.forward = forward
    return expert


def run_dispatch(sorted_dispatch, case: Case) -> Outputs:
    inputs = case.inputs
    tallies = [{"calls": 0, "rows": 0} for _ in inputs["experts"]]
    experts = [counted_expert(a, b, tally) for (a, b), tally in zip(inputs["experts"], tallies, strict=True)]
    out = sorted_dispatch(inputs["x"], inputs["selected_experts"], inputs["weights"], experts)
    if not inputs.get("count_calls"):
        return {"output": out}
    return {
        "output": out,
        "most calls to one expert": torch.tensor(max(tally["calls"] for tally in tallies)),
        "rows the experts saw": torch.tensor(sum(tally["rows"] for tally in tallies)),
    }


def _one_call(case: Case, out: Outputs) -> str | None:
    calls, rows = int(out["most calls to one expert"]), int(out["rows the experts saw"])
    n, k = case.inputs["selected_experts"].shape
    if calls > 1:
        return (
            f"one expert was called {calls} times: run each expert once, on all of its tokens together "
            "(a contiguous slice of the sorted rows), not once per token or per slot"
        )
    if rows != n * k:
        return (
            f"the experts saw {rows} rows in all, not the N * K = {n * k} (token, slot) pairs: each expert "
            "runs on its own tokens only, not on every token"
        )
    return None


SORTED_DISPATCH = Check(
    name="06.sorted_dispatch",
    target="sorted_dispatch",
    run=run_dispatch,
    concerns=[Concern(DISPATCH, weight=2), Concern(ONE_CALL, weight=1)],
    measured=("most calls to one expert", "rows the experts saw"),  # judged by _one_call
    outputs={
        "output": "sorted_dispatch(x, selected_experts, weights, experts)",
        "most calls to one expert": "the most calls any one expert received",
        "rows the experts saw": "the number of rows the experts were given, all together",
    },
    properties=[Property("one call per expert, on its own tokens", _one_call, concern=ONE_CALL)],
    error_hints=[
        ErrorHint(
            "split_with_sizes expects split_sizes to sum exactly",
            "the counts must add up to N * K: one count per expert, an expert that got no token included "
            "(with a count of 0).",
        ),
        ErrorHint(
            "index_add_(): ",
            "index_add_(0, index, source) needs one token index per row of source, both in the sorted order.",
        ),
    ],
    hints=[
        "List the N * K (token, slot) pairs with their expert ids; after sorting them by expert, which rows "
        "of x does each expert need, and where in the sorted list do they sit?",
        "Test it in a new cell against your MoeLayer, as the cell below the question does; then make one "
        "expert a module that prints x.shape in forward: it should print once per expert.",
        "order = argsort of the flat expert ids; token_of_pair = arange(N).repeat_interleave(K)[order]; "
        "counts = bincount(flat ids, minlength=E); rows = x[token_of_pair].split(counts.tolist()).",
        "Run expert i on the i-th slice, concatenate, multiply by weights.reshape(-1)[order, None], and add "
        "into zeros_like(x) with index_add_(0, token_of_pair, ...): a token gets its K rows added.",
    ],
    hidden_points=1.0,
)

# ------------------------------------------------------ added: expert capacity, token dropping

KEPT = "the pairs kept: C = ceil(c N K / E) per expert, first choices before second, earlier tokens first"
KEPT_OUTPUT = "the output: the kept pairs weighted as given, nothing from the dropped ones"
KEPT_ONLY = "each expert called at most once, on its kept pairs only"
RESIDUAL = "output less what your kept pairs give"
KEPT_COUNTS = ("pairs kept", "chosen experts keeping no pair")
CALL_COUNTS = ("most calls to one expert", "rows the experts saw")
DROPS_AND_KEEPS = "over-full experts drop, and every chosen expert keeps a pair"


def capacity(capacity_factor: float, num_tokens: int, k: int, num_experts: int) -> int:
    """C = ceil(c N K / E): the (token, slot) pairs one expert may take."""
    return math.ceil(capacity_factor * num_tokens * k / num_experts)


def _kept_rows(inputs: dict, kept: Tensor) -> Tensor:
    """What the pairs marked in `kept` give, with the case's experts: sum of weight * expert(x)."""
    x, selected, weights = inputs["x"], inputs["selected_experts"], inputs["weights"]
    out = torch.zeros_like(x)
    for i, (a, b) in enumerate(inputs["experts"]):
        token_idx, slot_idx = torch.where((selected == i) & kept)
        out.index_add_(0, token_idx, weights[token_idx, slot_idx, None] * torch.tanh(x[token_idx] @ a + b))
    return out


def _dispatch_stand_in(experts: list):
    """Question 6's sorted_dispatch for a capacity_dispatch that calls it, so that a bug of Question 6
    costs this question nothing: the homework's loop over experts, which the notebook shows. Bound to
    the case's own experts, it answers no other call (06.sorted_dispatch's included)."""

    def sorted_dispatch(x: Tensor, selected_experts: Tensor, weights: Tensor, given) -> Tensor:
        if not all(any(e is mine for mine in experts) for e in given):
            raise NotAsAsked(
                "capacity_dispatch called sorted_dispatch with experts other than those it was given"
            )
        out = torch.zeros_like(x)
        for number, expert in enumerate(given):
            token_idx, slot_idx = torch.where(selected_experts == number)
            if len(token_idx):
                rows = weights[token_idx, slot_idx].unsqueeze(-1) * expert(x[token_idx])
                out.index_put_((token_idx,), rows, accumulate=True)
        return out

    return sorted_dispatch


def run_capacity(capacity_dispatch, case: Case) -> Outputs:
    inputs = case.inputs
    tallies = [{"calls": 0, "rows": 0} for _ in inputs["experts"]]
    experts = [counted_expert(a, b, tally) for (a, b), tally in zip(inputs["experts"], tallies, strict=True)]
    with names_replaced(capacity_dispatch, {"sorted_dispatch": _dispatch_stand_in(experts)}):
        returned = capacity_dispatch(
            inputs["x"], inputs["selected_experts"], inputs["weights"], experts, inputs["capacity_factor"]
        )
    if not isinstance(returned, tuple) or len(returned) != 2:
        raise NotAsAsked(
            f"capacity_dispatch returned a {type(returned).__name__}, not the pair (out, kept): the (N, D) "
            "output and the (N, K) boolean mask of the pairs kept"
        )
    out, kept = returned
    if not isinstance(out, Tensor) or out.shape != inputs["x"].shape:
        what = tuple(out.shape) if isinstance(out, Tensor) else type(out).__name__
        raise NotAsAsked(f"out should be a tensor of the shape of x, {tuple(inputs['x'].shape)}; got {what}")
    shape = tuple(inputs["selected_experts"].shape)
    if not isinstance(kept, Tensor) or kept.dtype != torch.bool or tuple(kept.shape) != shape:
        what = f"{kept.dtype} {tuple(kept.shape)}" if isinstance(kept, Tensor) else type(kept).__name__
        raise NotAsAsked(
            f"kept should be a torch.bool tensor of shape {shape}, one flag per (token, slot); got {what}"
        )
    if inputs["part"] == "kept":
        return {"kept": kept}
    # The output is judged against the pairs the student kept: which pairs those are is KEPT's to grade.
    selected, num_experts = inputs["selected_experts"], len(experts)
    chosen = torch.bincount(selected.flatten(), minlength=num_experts) > 0
    keeping = torch.bincount(selected[kept], minlength=num_experts) > 0
    return {
        RESIDUAL: out - _kept_rows(inputs, kept),
        "pairs kept": kept.sum(),
        "chosen experts keeping no pair": (chosen & ~keeping).sum(),
        "most calls to one expert": torch.tensor(max(tally["calls"] for tally in tallies)),
        "rows the experts saw": torch.tensor(sum(tally["rows"] for tally in tallies)),
    }


def _drops_and_keeps(case: Case, out: Outputs) -> str | None:
    """An answer that keeps every pair, or none, would pass the output alone: it must drop as an
    over-full expert does, and keep at least one pair of every expert chosen (C >= 1)."""
    selected = case.inputs["selected_experts"]
    n, k = selected.shape
    load = torch.bincount(selected.flatten(), minlength=len(case.inputs["experts"]))
    limit = capacity(case.inputs["capacity_factor"], n, k, load.numel())
    if int(load.max()) > limit and int(out["pairs kept"]) == n * k:
        return (
            f"every one of the {n * k} pairs was kept, while an expert was chosen {int(load.max())} times "
            f"with a capacity of C = {limit}: the pairs beyond an expert's capacity are dropped"
        )
    if int(out["chosen experts keeping no pair"]):
        return (
            f"{int(out['chosen experts keeping no pair'])} expert(s) chosen by some token kept no pair: with "
            "a capacity factor above 0, C is at least 1, and each expert keeps its first pairs up to C"
        )
    return None


def _kept_only(case: Case, out: Outputs) -> str | None:
    calls, rows, kept = (
        int(out[key]) for key in ("most calls to one expert", "rows the experts saw", "pairs kept")
    )
    if calls > 1:
        return f"one expert was called {calls} times: run each expert once, on all of its kept pairs together"
    if rows != kept:
        return (
            f"the experts saw {rows} rows in all, for the {kept} pairs you kept: an expert runs on its kept "
            "pairs only; a dropped pair is never computed (that is the work a capacity saves)"
        )
    return None


CAPACITY_DISPATCH = Check(
    name="06.capacity_dispatch",
    target="capacity_dispatch",
    run=run_capacity,
    added=True,
    concerns=[Concern(KEPT, weight=2), Concern(KEPT_OUTPUT, weight=2), Concern(KEPT_ONLY, weight=1)],
    measured=(*KEPT_COUNTS, *CALL_COUNTS),  # judged by the properties
    outputs={
        "kept": "kept, the mask of the (token, slot) pairs kept",
        RESIDUAL: "your output less the weighted outputs of the pairs your kept marks (the check's experts)",
        "pairs kept": "the number of pairs kept",
        "chosen experts keeping no pair": "the number of experts chosen by some token that kept no pair",
        "most calls to one expert": "the most calls any one expert received",
        "rows the experts saw": "the number of rows the experts were given, all together",
    },
    properties=[
        # Judged with the output and with the calls, which an answer keeping all or nothing would pass.
        Property(DROPS_AND_KEEPS, _drops_and_keeps, concern=KEPT_OUTPUT),
        Property(DROPS_AND_KEEPS, _drops_and_keeps, concern=KEPT_ONLY),
        Property("one call per expert, on its kept pairs only", _kept_only, concern=KEPT_ONLY),
    ],
    hints=[
        "Give every (token, slot) pair a place in its expert's queue: 0 for the first pair to reach it, 1 "
        "for the next, and so on, in the order the question fixes. A pair is kept when its place is below C.",
        "Test it by hand: N = 4 tokens, K = 1, all on expert 0 of E = 2, capacity factor 1: C = 2, so "
        "tokens 0 and 1 are kept and 2 and 3 dropped. With K = 2, every token's first choice queues before "
        "any second choice.",
        "Read the pairs slot by slot: selected_experts.T.reshape(-1) lists all first choices (token 0 to "
        "N - 1), then all second choices. A cumulative count per expert along that list (one_hot, cumsum) "
        "gives each pair's place in its expert's queue.",
        "C = math.ceil(capacity_factor * N * K / E); kept = (place < C), reshaped to (K, N) and transposed. "
        "Then route as sorted_dispatch or the homework's loop does, over the pairs with "
        "(selected_experts == i) & kept, multiplying by the weights as they are.",
    ],
)

# --------------------------------------------------------------------- added: router z-loss

Z_LOSS = "mean over tokens of logsumexp(logits over the experts) squared"
LARGE_LOGITS = "finite and exact for logits of 100 and more (a stable log-sum-exp)"


def run_z_loss(router_z_loss, case: Case) -> Outputs:
    logits = case.inputs["router_logits"].clone().requires_grad_(bool(case.inputs.get("gradient")))
    loss = torch.as_tensor(router_z_loss(logits))
    if not case.inputs.get("gradient"):
        return {"loss": loss}
    # No gradient at all is a zero gradient: compared (and a known mistake named), then explained.
    gradient = torch.autograd.grad(loss, logits, allow_unused=True)[0] if loss.requires_grad else None
    return {"gradient": torch.zeros_like(logits) if gradient is None else gradient}


def _z_logits_get_gradient(case: Case, out: Outputs) -> str | None:
    if "gradient" not in out or bool(out["gradient"].any()):
        return None
    return (
        "no gradient reaches router_logits: the z-loss trains the router, so compute it from the logits with "
        "torch operations (no .detach(), .item(), numpy or torch.no_grad())"
    )


ROUTER_Z_LOSS = Check(
    name="06.router_z_loss",
    target="router_z_loss",
    run=run_z_loss,
    added=True,
    concerns=[Concern(Z_LOSS, weight=2), Concern(LARGE_LOGITS, weight=1), Concern(DIFFERENTIABLE, weight=1)],
    exact_dtype=False,  # a loss computed in float64 is as right as the reference's float32
    outputs={"loss": "the z-loss", "gradient": "the gradient of the z-loss with respect to router_logits"},
    properties=[Property("the logits get a gradient", _z_logits_get_gradient, concern=DIFFERENTIABLE)],
    hints=[
        "Per token, one number from its E logits: the log of the sum of their exponentials. Square it, then "
        "average over the tokens (every dimension but the last).",
        "Test yourself: for logits of shape (N, E) all 0, each token's log-sum-exp is log E, so the loss is "
        "(log E)^2; adding 1000 to every logit adds 1000 to each log-sum-exp, and the loss must stay finite.",
        "exp(100) is more than float32 can hold (about 3.4e38, e^88.7): a log of a sum of exponentials "
        "overflows there. torch.logsumexp subtracts each row's largest logit first, which changes nothing in "
        "exact arithmetic: log sum exp(l) = m + log sum exp(l - m).",
        "torch.logsumexp(router_logits, dim=-1) is (...,), one value per token; return its square's mean "
        "over every element, a 0-dimensional tensor.",
    ],
    hidden_points=1.0,
)

# ------------------------------------------- added: balancing without an auxiliary loss

BIASED_SELECTION = "the top K of scores + bias"
UNBIASED_WEIGHTS = "the weights: the selected experts' original scores, normalised (the bias never weighs)"
BIAS_UPDATE = "the update: bias - gamma * sign(load - mean load)"
WEIGHTS_RESIDUAL = "weights less your selection's normalised original scores"


def run_biased_routing(answers, case: Case) -> Outputs:
    biased_routing, update_bias = answers
    inputs = case.inputs
    if inputs["part"] == "update":
        return {
            "bias": torch.as_tensor(update_bias(inputs["bias"], inputs["selected_experts"], inputs["gamma"]))
        }
    returned = biased_routing(inputs["scores"], inputs["bias"], inputs["k"])
    if not isinstance(returned, tuple) or len(returned) != 2:
        raise NotAsAsked(
            f"biased_routing returned a {type(returned).__name__}, not the pair (selected_experts, weights)"
        )
    selected, weights = returned
    shape = (inputs["scores"].shape[0], inputs["k"])
    for what, value in (("selected_experts", selected), ("weights", weights)):
        if not isinstance(value, Tensor) or tuple(value.shape) != shape:
            found = tuple(value.shape) if isinstance(value, Tensor) else type(value).__name__
            raise NotAsAsked(f"{what} should have shape {shape}, (N, K); got {found}")
    if selected.dtype != torch.long:
        raise NotAsAsked(f"selected_experts should hold expert indices, torch.long; got {selected.dtype}")
    if inputs["part"] == "selection":  # a set per token: the order of the K is free
        return {"selected experts, sorted per token": selected.sort(dim=-1).values}
    # The weights are judged against the experts the student selected: which those are is the selection's.
    chosen = inputs["scores"].gather(-1, selected)
    return {WEIGHTS_RESIDUAL: weights - chosen / chosen.sum(-1, keepdim=True)}


BIASED_ROUTING = Check(
    name="06.biased_routing",
    target=("biased_routing", "update_bias"),
    run=run_biased_routing,
    added=True,
    concerns=[
        Concern(BIASED_SELECTION, weight=2),
        Concern(UNBIASED_WEIGHTS, weight=1),
        Concern(BIAS_UPDATE, weight=1),
    ],
    outputs={
        "selected experts, sorted per token": "biased_routing's selected experts, sorted within each token",
        WEIGHTS_RESIDUAL: "biased_routing's weights less the original scores of the experts it selected, "
        "each token's divided by their sum",
        "bias": "update_bias's new bias",
    },
    hints=[
        "Two numbers per expert and token: the score s, which weighs, and s + b, which only chooses. The "
        "update compares each expert's load in the batch with the mean load.",
        "Test it: with bias = 0 the selection is torch.topk(scores, k); a bias of +1 on one expert puts it "
        "in every token's top K (scores lie in (0, 1)) without changing its weight's formula. For the "
        "update, count the assignments per expert: N K of them, N K / E on average.",
        "selected = topk(scores + bias, k).indices; weights = scores.gather(-1, selected), divided by their "
        "sum per token. The load is torch.bincount(selected_experts.flatten(), minlength=E).",
        "update_bias returns bias - gamma * torch.sign(load - load.mean()), the load in floating point: an "
        "expert above the mean loses gamma, one below gains gamma, one exactly at the mean keeps its bias.",
    ],
    hidden_points=1.0,
)

CHECKS = [
    FEED_FORWARD,
    MOE_INIT,
    MOE_ROUTING,
    LOAD_BALANCING,
    SORTED_DISPATCH,
    CAPACITY_DISPATCH,
    ROUTER_Z_LOSS,
    BIASED_ROUTING,
]
