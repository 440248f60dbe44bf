"""Checks of notebook 10, looking inside a model.

Key: B batch, T sequence length, D hidden size, H heads, Dh = D // H, W window, F d_ff, E experts,
K experts per token, N blocks, C context (max_seq_len), V vocabulary size (the 30 characters of
language_model.ALPHABET).

The model inspected is language_model.CourseModel: the course's checkpoint (`course_model()`), or
one of another size with weights drawn here, so that no check depends on the student's notebook 08.
"""

from collections.abc import Mapping

import torch
import torch.nn as nn

from .. import language_model as lm
from ..core import (
    FLOAT32_GAP,
    ROUNDING_GAP,
    Case,
    Check,
    Concern,
    ErrorHint,
    NotAsAsked,
    OperationCount,
    Outputs,
    Property,
)
from ..language_model import CourseModel, course_model, random_course_model
from ..playground import one_thread

Tensor = torch.Tensor


def build_model(inputs: dict) -> CourseModel:
    if inputs["model"] == "course":
        return course_model()
    return random_course_model(inputs["config"], inputs["state"])


def hooks_on(model: nn.Module) -> int:
    """Every forward, pre-forward and backward hook registered on the model's modules."""
    return sum(
        len(module._forward_hooks)
        + len(module._forward_pre_hooks)
        + len(module._backward_hooks)
        + len(module._backward_pre_hooks)
        for module in model.modules()
    )


def global_hooks() -> int:
    """Hooks registered for every module (torch.nn.modules.module.register_module_forward_hook...)."""
    module = torch.nn.modules.module
    return sum(
        len(getattr(module, name, {}))
        for name in ("_global_forward_hooks", "_global_forward_pre_hooks", "_global_backward_hooks")
    )


# ----------------------------------------------------------------- 10.record_activations

FAILURE = "this model's forward raises on purpose (10.record_activations)"


class Mix(nn.Module):
    """A module of two inputs: a * sigmoid(b)."""

    def forward(self, a: Tensor, b: Tensor) -> Tensor:
        return a * torch.sigmoid(b)


class Fails(nn.Module):
    """A module whose forward raises: a model that stops halfway through its forward."""

    def forward(self, x: Tensor) -> Tensor:
        raise RuntimeError(FAILURE)


class ToyModel(nn.Module):
    """A small model for the hooks: a Sequential, a layer called twice (when `twice`), a module of two
    inputs, a layer that never runs, and (when `fails`) a module that raises.

    forward: tokens (B, T) -> logits (B, T, V)."""

    def __init__(self, sizes: dict):
        super().__init__()
        v, d, f = sizes["V"], sizes["D"], sizes["F"]
        self.twice = sizes["twice"]
        self.embed = nn.Embedding(v, d)
        self.stack = nn.Sequential(nn.Linear(d, f), nn.Tanh(), nn.Linear(f, d))
        self.shared = nn.Linear(d, d)
        self.mix = Mix()
        self.unused = nn.Linear(d, d)
        self.check = Fails() if sizes["fails"] else nn.Identity()
        self.head = nn.Linear(d, v)

    def forward(self, tokens: Tensor) -> Tensor:
        h = self.embed(tokens)  # (B, T, D)
        h = h + self.stack(h)
        a = self.shared(h)
        b = self.shared(a) if self.twice else h
        return self.head(self.check(self.mix(a, b)))  # (B, T, V)


def recorded_model(inputs: dict) -> nn.Module:
    """The model a case records: a toy with its state, or a drawn course model."""
    if inputs["model"] == "toy":
        model = ToyModel(inputs["sizes"])
        model.load_state_dict(inputs["state"])
        return model.eval()
    return build_model(inputs)


RECORDS = "the records (the course's model and small models)"
NO_HOOK_LEFT = "no hook left behind, also when the forward raises"


def _noop_hook(module, args, output):
    return None


def run_record(record_activations, case: Case) -> Outputs:
    i = case.inputs
    model = recorded_model(i)
    with one_thread():  # tiny tensors: on a busy machine, threads only wait for each other
        if "failing" not in i:
            return _record_outputs(record_activations(model, i["tokens"]), i["names"])
        returns = _hooks_after(record_activations, model, i["tokens"])
        raises = _hooks_after(record_activations, recorded_model(i["failing"]), i["failing"]["tokens"])
    return {
        # what the call that returns recorded of the model itself: a function that records nothing
        # (and so leaves no hook) earns nothing here either
        **_record_outputs(returns["records"], [""]),
        "hooks left, forward returns": returns["hooks left"],
        "hooks left, forward raises": raises["hooks left"],
        "caller's hook kept": returns["caller's hook kept"] & raises["caller's hook kept"],
        "error passed on": raises["error passed on"],
    }


def _hooks_after(record_activations, model: nn.Module, tokens: Tensor) -> dict:
    """Call the function with a hook of the caller's own on the first module, then count the hooks;
    and the records, when the forward returns."""
    first = next(iter(model.children()))
    own = first.register_forward_hook(_noop_hook)
    before = global_hooks()
    records = None
    try:
        records = record_activations(model, tokens)
    except RuntimeError as error:
        if FAILURE not in str(error):
            raise
        raised = 1
    else:
        raised = 0
    kept = own.id in first._forward_hooks
    own.remove()
    return {
        "hooks left": torch.tensor(hooks_on(model) + global_hooks() - before),
        "caller's hook kept": torch.tensor(int(kept)),
        "error passed on": torch.tensor(raised),
        "records": records,
    }


def _label(name: str) -> str:
    return name or "the model itself"


def _record_outputs(records, names: list[str]) -> Outputs:
    """The student's records of the named modules as tensors: per module, its output and each
    positional input, the calls stacked along a new first dimension (one row per call)."""
    if not isinstance(records, Mapping):
        raise NotAsAsked(
            f"record_activations returned a {type(records).__name__}: return a dict that maps each module's "
            "name to the list of its calls, (inputs, output) for each"
        )
    if not any(isinstance(key, str) for key in records):
        raise NotAsAsked(
            "the records have no key that is a module's name: key them by the names model.named_modules() "
            "gives ('', 'embedding', 'blocks.0', ...), not by the modules themselves"
        )
    missing = [name for name in names if not records.get(name)]
    if missing:
        shown = ", ".join(repr(n) for n in missing[:4]) + (
            f" and {len(missing) - 4} more" if len(missing) > 4 else ""
        )
        note = (
            " ('' is the model itself, the first name model.named_modules() gives)" if "" in missing else ""
        )
        raise NotAsAsked(
            f"the records have no entry for {shown}{note}: every module that runs during the forward needs "
            "one, containers (a block, the whole model) as well as the layers inside them"
        )
    outputs, holding_graph = {}, 0
    for name in names:
        calls = records[name]
        if isinstance(calls, tuple) and len(calls) == 2 and isinstance(calls[1], Tensor):
            raise NotAsAsked(
                f"records[{name!r}] is one (inputs, output) pair: make it a list with one pair per call "
                "(a module can run more than once in a forward)"
            )
        if not isinstance(calls, list | tuple):
            raise NotAsAsked(
                f"records[{name!r}] is a {type(calls).__name__}, not a list of (inputs, output) pairs"
            )
        inputs_of_calls, outputs_of_calls = [], []
        for call in calls:
            if not (isinstance(call, list | tuple) and len(call) == 2):
                raise NotAsAsked(f"each call in records[{name!r}] should be a pair (inputs, output)")
            inputs, output = call
            if not isinstance(inputs, list | tuple) or not all(isinstance(x, Tensor) for x in inputs):
                kind = type(inputs).__name__
                raise NotAsAsked(
                    f"the inputs recorded for {_label(name)!r} are a {kind}: record the tuple of positional "
                    "inputs the hook receives (its `args`), each tensor detached"
                )
            if not isinstance(output, Tensor):
                raise NotAsAsked(
                    f"the output recorded for {_label(name)!r} is a {type(output).__name__}, not a tensor"
                )
            holding_graph += sum(bool(x.requires_grad) for x in (*inputs, output))
            inputs_of_calls.append(tuple(inputs))
            outputs_of_calls.append(output)
        counts = {len(inputs) for inputs in inputs_of_calls}
        if len(counts) != 1:
            raise NotAsAsked(f"the calls recorded for {_label(name)!r} have different numbers of inputs")
        try:
            outputs[f"{_label(name)}: output"] = torch.stack(outputs_of_calls)
            for j in range(counts.pop()):
                outputs[f"{_label(name)}: input {j}"] = torch.stack([inputs[j] for inputs in inputs_of_calls])
        except RuntimeError as error:
            raise NotAsAsked(
                f"the calls recorded for {_label(name)!r} have tensors of different shapes"
            ) from error
    outputs["tensors holding a graph"] = torch.tensor(holding_graph)
    return outputs


def _detached(case: Case, out: Outputs) -> str | None:
    holding = out.get("tensors holding a graph")
    if holding is None or int(holding) == 0:
        return None
    return (
        f"{int(holding)} recorded tensors still require grad: each holds the autograd graph of the forward, "
        "and with it every intermediate tensor the backward pass would need. Record t.detach() (or run the "
        "model under torch.no_grad())"
    )


def _record_descriptions() -> dict[str, str]:
    """What each record output is, for every module of the course's model and of ToyModel."""
    names = [n for n, _ in CourseModel(lm.COURSE_MODEL).named_modules()]
    names += [n for n, _ in ToyModel({"V": 2, "D": 2, "F": 2, "twice": True, "fails": False}).named_modules()]
    found = {}
    for name in dict.fromkeys(names):
        module = "the model itself" if not name else f"module {name!r}"
        found[f"{_label(name)}: output"] = f"the output recorded for {module} (its calls stacked)"
        for j in range(2):
            found[f"{_label(name)}: input {j}"] = f"input {j} recorded for {module} (its calls stacked)"
    return found


RECORD = Check(
    name="10.record_activations",
    target="record_activations",
    run=run_record,
    concerns=[Concern(RECORDS, weight=3), Concern(NO_HOOK_LEFT, weight=1)],
    measured=("tensors holding a graph",),
    outputs={
        **_record_descriptions(),
        "tensors holding a graph": "the number of recorded tensors that require grad",
        "hooks left, forward returns": "the number of hooks left on the model after your function returned",
        "hooks left, forward raises": "the number of hooks left on the model after its forward raised",
        "caller's hook kept": "whether a hook registered before your function was called is still there "
        "(1: yes)",
        "error passed on": "whether the error raised inside the model's forward reached the caller (1: yes)",
    },
    properties=[Property("recorded tensors are detached", _detached, concern=RECORDS)],
    error_hints=[
        ErrorHint(
            "forward raises on purpose",
            "this case's model raises a RuntimeError in its forward on purpose: let that error reach the "
            "caller unchanged (try/finally does) and remove your hooks on the way out.",
        ),
    ],
    hints=[
        "module.register_forward_hook(hook) calls hook(module, args, output) each time the module's forward "
        "finishes; it returns a handle whose .remove() takes the hook off again.",
        "Loop over model.named_modules() (the model itself comes first, named ''), register one hook per "
        "module that knows the module's name (a function that makes the hook, or functools.partial), run "
        "the model once, then remove every hook.",
        "Put the forward in try: ... finally: with the removals in the finally block: they then run when "
        "the forward raises too, and the error still reaches the caller.",
        "The hook receives (module, args, output): append (the args, each detached, as a tuple; the "
        "output detached) to a list kept per name (dict.setdefault makes it on first use). "
        "register_forward_hook returns a handle: keep one per module of model.named_modules(), to remove "
        "them all.",
    ],
    points=1.0,
    hidden_points=2.0,
)

# --------------------------------------------------------------- 10.next_token_probabilities

LARGE = "logits of size 1000 (a stable softmax)"


def run_probabilities(next_token_probabilities, case: Case) -> Outputs:
    return {"p": next_token_probabilities(case.inputs["logits"])}


def _sums_to_one(case: Case, out: Outputs) -> str | None:
    p, logits = out.get("p"), case.inputs["logits"]
    if p is None or p.shape != logits.shape[:-2] + logits.shape[-1:]:
        return None
    gap = (p.double().sum(-1) - 1).abs().max().item()
    if gap <= FLOAT32_GAP and bool((p >= 0).all()):
        return None
    return (
        "each distribution should sum to 1 (within 1e-5) with no negative entry; the sums are off by up to "
        f"{gap:.3g}"
    )


def _argmax_kept(case: Case, out: Outputs) -> str | None:
    p, logits = out.get("p"), case.inputs["logits"][..., -1, :]
    if p is None or p.shape != logits.shape or not bool(torch.isfinite(p).all()):
        return None
    at_largest_logit = p.gather(-1, logits.argmax(-1, keepdim=True))
    if bool((at_largest_logit >= p.max(-1, keepdim=True).values * (1 - ROUNDING_GAP)).all()):
        return None
    return "the most likely token should be the one with the largest logit at the last position"


PROBABILITIES = Check(
    name="10.next_token_probabilities",
    target="next_token_probabilities",
    run=run_probabilities,
    concerns=[Concern("logits of moderate size", weight=3), Concern(LARGE, weight=1)],
    outputs={"p": "the probabilities of the next token"},
    properties=[
        Property("each distribution sums to 1, within 1e-5", _sums_to_one),
        Property("the argmax is the largest logit's", _argmax_kept),
    ],
    hints=[
        "logits has shape (..., T, V): one row of V scores per position. Which position predicts the token "
        "after the text, and along which dimension do the probabilities sum to 1?",
        "Test it in a new cell: for logits = torch.randn(2, 5, 30), the result should have shape (2, 30), "
        "rows summing to 1 (within 1e-6, not exactly), and its argmax should be logits[:, -1].argmax(-1).",
        "Logits near 1000: exp(1000) overflows float32 to inf. Subtracting the row's maximum first changes "
        "nothing mathematically and keeps every exponent <= 0; torch.softmax does that for you.",
        "logits[..., -1, :] is the row of the last position, of shape (..., V); a softmax over its last "
        "dimension turns it into probabilities.",
    ],
    points=1.0,
    hidden_points=1.0,
)

# ------------------------------------------------------------------------ 10.is_distribution


def run_distribution(is_distribution, case: Case) -> Outputs:
    return {"is distribution": is_distribution(case.inputs["p"], atol=case.inputs["atol"])}


IS_DISTRIBUTION = Check(
    name="10.is_distribution",
    target="is_distribution",
    run=run_distribution,
    outputs={"is distribution": "the answer for each distribution (a bool tensor of shape p.shape[:-1])"},
    hints=[
        "Two conditions, checked along the last dimension, one answer per distribution: what must hold of "
        "every entry, and of their sum?",
        "Print torch.softmax(torch.randn(4, 30), -1).sum(-1) - 1 in a new cell: a correct softmax in float32 "
        "does not sum to exactly 1, so compare the sum with a tolerance, never with ==.",
        "A row with a NaN is not a distribution: (p >= 0) and a comparison |sum - 1| <= atol are both False "
        "on NaN, so write the conditions as what must hold (not as the negation of what must not).",
        "Two conditions, each a bool per row: every entry non-negative (all over the last dimension), "
        "and the row's sum within atol of 1 (the absolute difference at most atol); combine them with &.",
    ],
    points=1.0,
    hidden_points=1.0,
)

# ------------------------------------------------------------------------ 10.most_likely_next


def run_next(most_likely_next, case: Case) -> Outputs:
    i = case.inputs
    model = build_model(i)
    with one_thread():
        char = most_likely_next(model, i["text"], i["context"])
    if not isinstance(char, str) or len(char) != 1 or char not in lm.ALPHABET:
        raise NotAsAsked(
            f"most_likely_next returned {char!r}: return one character of ALPHABET (decode the token id)"
        )
    return {"next": torch.tensor(lm.ALPHABET.index(char))}


MOST_LIKELY_NEXT = Check(
    name="10.most_likely_next",
    target="most_likely_next",
    run=run_next,
    outputs={"next": "the index in ALPHABET of the character you returned"},
    error_hints=[
        ErrorHint("the model takes tokens of shape (B, T)", "the model takes a batch: encode(text)[None]."),
    ],
    hints=[
        "Three steps: characters to token ids, the model's logits, the largest logit at the last position "
        "back to a character.",
        "Test it in a new cell on a prompt longer than 64 characters: the model refuses more than its "
        "context, so which characters of the prompt matter for the next one?",
        "tokens = encode(text[-context:])[None] has shape (1, T); model(tokens) has shape (1, T, V).",
        "Under torch.no_grad(), run the model on those tokens; the logits of the last position, "
        "logits[0, -1], score each next character: the index of the largest is a position in ALPHABET.",
    ],
    points=1.0,
    hidden_points=1.0,
)

# ----------------------------------------------------------------- 10.cosine_similarity_matrix

ZERO_ROWS = "rows of zeros give similarity 0, not NaN"
ONE_CALL = "all rows at once (no Python loop over rows)"
OPS_SMALL, OPS_LARGE = "ops at V rows", "ops at 4V rows"
OPS_SLACK, OPS_CAP = 4, 40  # the reference issues 4 operations; a loop over V >= 12 rows issues more


def run_similarity(cosine_similarity_matrix, case: Case) -> Outputs:
    i = case.inputs
    if "more" not in i:
        return {"similarity": cosine_similarity_matrix(i["embeddings"])}
    outputs = {}
    for key, count_key, x in (
        ("similarity", OPS_SMALL, i["embeddings"]),
        ("similarity, 4V rows", OPS_LARGE, i["more"]),
    ):
        with OperationCount() as count:
            result = cosine_similarity_matrix(x)
            if type(result) is not Tensor:  # judged while counted: a subclass could do its work later
                raise NotAsAsked(
                    f"cosine_similarity_matrix returned a {type(result).__name__}: return a plain tensor"
                )
        outputs[key], outputs[count_key] = result, torch.tensor(count.calls)
    return outputs


def _no_row_loop(case: Case, out: Outputs) -> str | None:
    small, large = out.get(OPS_SMALL), out.get(OPS_LARGE)
    if not all(
        isinstance(t, Tensor) and t.numel() == 1 and bool(torch.isfinite(t.float()).all())
        for t in (small, large)
    ):
        return "the measurement did not come back with the results"
    small, large = int(small), int(large)
    v = case.inputs["embeddings"].shape[0]
    if abs(large - small) <= OPS_SLACK and max(small, large) <= OPS_CAP:
        return None
    return (
        f"your code issues {small} torch operations for {v} rows and {large} for {4 * v}: a Python loop goes "
        "over the rows (or pairs). Compute every pair at once: normalise the rows, then one matrix product "
        "(or one broadcast call of F.cosine_similarity)"
    )


def _symmetric_with_unit_diagonal(case: Case, out: Outputs) -> str | None:
    s, e = out.get("similarity"), case.inputs["embeddings"]
    v = e.shape[0]
    if s is None or s.shape != (v, v) or not bool(torch.isfinite(s).all()):
        return None
    if (s - s.T).abs().max().item() > FLOAT32_GAP:
        return "the matrix should be symmetric: similarity[i, j] = similarity[j, i]"
    nonzero = e.norm(dim=-1) > 0
    diagonal = s.diagonal()[nonzero]
    if diagonal.numel() and (diagonal - 1).abs().max().item() > FLOAT32_GAP:
        return (
            f"each row's similarity with itself should be 1; the diagonal holds {diagonal.min().item():.4g}"
        )
    if s.abs().max().item() > 1 + FLOAT32_GAP:
        return f"a cosine lies in [-1, 1]; the matrix holds {s.abs().max().item():.4g}"
    return None


SIMILARITY = Check(
    name="10.cosine_similarity_matrix",
    target="cosine_similarity_matrix",
    run=run_similarity,
    concerns=[
        Concern("rows of any size", weight=3),
        Concern(ZERO_ROWS, weight=1),
        Concern(ONE_CALL, weight=1),
    ],
    measured=(OPS_SMALL, OPS_LARGE),
    outputs={
        "similarity": "the similarity matrix",
        "similarity, 4V rows": "the similarity matrix of the longer embeddings",
        OPS_SMALL: "the number of torch operations for V rows",
        OPS_LARGE: "the number of torch operations for 4V rows",
    },
    properties=[
        Property("symmetric, 1 on the diagonal, within [-1, 1]", _symmetric_with_unit_diagonal),
        Property("the same few operations for any number of rows", _no_row_loop, concern=ONE_CALL),
    ],
    hints=[
        "similarity[i, j] = e_i . e_j / (|e_i| |e_j|): the dot products of every pair of rows are one matrix "
        "product; what do you divide each row by first?",
        "Test it in a new cell: the diagonal should be 1, the matrix symmetric, and a row of zeros should "
        "give 0, not NaN. torch.nn.functional.cosine_similarity(E[0], E[1], dim=0) gives one entry to "
        "compare.",
        "Unit rows: E / E.norm(dim=-1, keepdim=True).clamp_min(1e-8); then unit @ unit.T. Or broadcast "
        "F.cosine_similarity(E[:, None, :], E[None, :, :], dim=-1), one call for every pair.",
        "unit = embeddings / embeddings.norm(dim=-1, keepdim=True).clamp_min(1e-8); return unit @ unit.T",
    ],
    points=1.0,
    hidden_points=2.0,
)

# ----------------------------------------------------------------------- 10.attention_weights

COURSE = "the course's model"
OTHER_SIZE = "a model of another size (H, W and the table read from the model)"


def run_attention(attention_weights, case: Case) -> Outputs:
    i = case.inputs
    model = build_model(i)
    calls = []  # the layer's own forward, run again on inputs of the answer's, computes no weights
    counter = model.blocks[i["block"]].attention.register_forward_pre_hook(
        lambda module, args: calls.append(1)
    )
    try:
        with one_thread():
            weights = attention_weights(model, i["tokens"], i["block"], i["head"])
    finally:
        counter.remove()
    if len(calls) > 1:
        raise NotAsAsked(
            f"the attention layer ran {len(calls)} times: run the model once, catch the layer's input with a "
            "hook, and compute the weights from it yourself (the layer's forward never returns them)"
        )
    return {"weights": weights, "hooks left": torch.tensor(hooks_on(model))}


def _rows_sum_to_one(case: Case, out: Outputs) -> str | None:
    w, t = out.get("weights"), len(case.inputs["tokens"])
    if w is None or w.shape != (t, t) or not bool(torch.isfinite(w).all()):
        return None
    gap = (w.double().sum(-1) - 1).abs()
    if gap.max().item() <= FLOAT32_GAP:
        return None
    worst = int(gap.argmax())
    return (
        f"each query's weights should sum to 1; the row of query {worst} sums to {1 + gap[worst].item():.4g}"
    )


def _zero_outside_window(case: Case, out: Outputs) -> str | None:
    w, t = out.get("weights"), len(case.inputs["tokens"])
    if w is None or w.shape != (t, t):
        return None
    window = (
        case.inputs["config"]["window_size"] if "config" in case.inputs else lm.COURSE_MODEL["window_size"]
    )
    offset = torch.arange(t)[None, :] - torch.arange(t)[:, None]
    outside = ~((offset <= 0) & (offset > -window))
    leak = w.abs().where(outside, torch.zeros(()))
    if not bool(torch.isfinite(leak).all()) or leak.max().item() > ROUNDING_GAP:
        i, j = divmod(int(leak.nan_to_num(1.0).argmax()), t)
        return (
            f"query {i} gives weight {w[i, j].item():.3g} to key {j}, outside its causal window of {window} "
            f"keys ({max(0, i - window + 1)} .. {i}): a future key, or one too far back"
        )
    return None


def _no_hook_left(case: Case, out: Outputs) -> str | None:
    left = out.get("hooks left")
    if left is None or int(left) == 0:
        return None
    return (
        f"{int(left)} hooks are left on the model after your function returned: remove each one "
        "(handle.remove()), in a finally block"
    )


ATTENTION_WEIGHTS = Check(
    name="10.attention_weights",
    target="attention_weights",
    run=run_attention,
    concerns=[Concern(COURSE, weight=3), Concern(OTHER_SIZE, weight=1)],
    measured=("hooks left",),
    outputs={
        "weights": "the attention weights (T, T)",
        "hooks left": "the number of hooks left on the model",
    },
    properties=[
        Property("each query's weights sum to 1", _rows_sum_to_one),
        Property("zero outside the causal window", _zero_outside_window),
        Property("no hook left on the model", _no_hook_left),
    ],
    error_hints=[
        ErrorHint(
            "more than the model's context",
            "the check's token sequences fit the context: run model(tokens[None]).",
        ),
        ErrorHint(
            "has no attribute 'rope'",
            "this model's attention keeps its RoPE table as attention.rotation_matrix, (C, Dh // 2) complex.",
        ),
    ],
    hints=[
        "The attention layer returns its output, not its weights: catch its input with a hook, then compute "
        "the weights again from that input with the layer's own qkv_linear.",
        "Follow the course's attention step by step: the per-head split of notebook 03, RoPE on the queries "
        "and keys (notebook 04, with attention.rotation_matrix[:T]), scores / sqrt(Dh), then the causal "
        "window of W keys, then a softmax over the keys.",
        "Check yourself: each row should sum to 1, and row i should be zero outside keys i - W + 1 .. i. "
        "Remove the hook in a finally block.",
        "qkv = attention.qkv_linear(x).view(1, T, H, 3 * Dh).transpose(1, 2); "
        "q, k, _ = qkv.chunk(3, dim=-1); rotate with "
        "torch.view_as_complex(q.reshape(1, H, T, Dh // 2, 2)) * table[:T]; "
        "scores = q[0, head] @ k[0, head].T / math.sqrt(Dh), masked_fill(~visible, -inf).softmax(-1).",
    ],
    points=1.0,
    hidden_points=2.0,
)

CHECKS = [RECORD, PROBABILITIES, IS_DISTRIBUTION, MOST_LIKELY_NEXT, SIMILARITY, ATTENTION_WEIGHTS]
