"""Known wrong answers of notebook 10: the judge names them, the tests use them as mutants.

Instructor-side only (next to the reference, not released). Each has exactly one thing wrong.
Key: B batch, T sequence length, D hidden size, H heads, Dh = D // H, W window, V vocabulary size.
"""

import math

import torch
import torch.nn.functional as F

from autograder.core import Mistake
from autograder.language_model import ALPHABET, encode

# --------------------------------------------------------------- 10.record_activations


def _detached(args):
    return tuple(a.detach() for a in args)


def _recorder(name, names_and_modules, *, keep="all", remove="finally", swallow=False, args_as_is=False):
    """record_activations with one thing changed, called `name`; `names_and_modules` picks the modules."""

    def record_activations(model, tokens):
        records = {}

        def make_hook(name):
            def hook(module, args, output):
                inputs = args[0].detach() if args_as_is else _detached(args)
                call = (inputs, output.detach())
                if keep == "last":
                    records[name] = [call]
                elif keep == "first":
                    records.setdefault(name, [call])
                else:
                    records.setdefault(name, []).append(call)

            return hook

        handles = [m.register_forward_hook(make_hook(n)) for n, m in names_and_modules(model)]
        if remove == "finally":
            try:
                with torch.no_grad():
                    model(tokens)
            except RuntimeError:
                if not swallow:
                    raise
            finally:
                for handle in handles:
                    handle.remove()
        elif remove == "after":
            with torch.no_grad():
                model(tokens)
            for handle in handles:
                handle.remove()
        elif remove == "clear":
            try:
                with torch.no_grad():
                    model(tokens)
            finally:
                for module in model.modules():
                    module._forward_hooks.clear()
        else:  # never
            with torch.no_grad():
                model(tokens)
        return records

    record_activations.__name__ = record_activations.__qualname__ = name
    return record_activations


def _all(model):
    return model.named_modules()


RootLeftOut = _recorder("RootLeftOut", lambda model: [(n, m) for n, m in model.named_modules() if n])
LeavesOnly = _recorder(
    "LeavesOnly", lambda model: [(n, m) for n, m in model.named_modules() if not list(m.children())]
)
TopLevelOnly = _recorder("TopLevelOnly", lambda model: [("", model), *model.named_children()])
LastCallOnly = _recorder("LastCallOnly", _all, keep="last")
FirstCallOnly = _recorder("FirstCallOnly", _all, keep="first")
FirstInputOnly = _recorder("FirstInputOnly", _all, args_as_is=True)
HooksNeverRemoved = _recorder("HooksNeverRemoved", _all, remove="never")
RemovedOnlyOnSuccess = _recorder("RemovedOnlyOnSuccess", _all, remove="after")
ClearsEveryHook = _recorder("ClearsEveryHook", _all, remove="clear")
SwallowsTheError = _recorder("SwallowsTheError", _all, swallow=True)


def KeyedByModule(model, tokens):  # noqa: N802 - named like the other mistakes
    records = {}
    handles = [
        m.register_forward_hook(lambda m, a, o: records.setdefault(m, []).append((_detached(a), o.detach())))
        for m in model.modules()
    ]
    try:
        with torch.no_grad():
            model(tokens)
    finally:
        for handle in handles:
            handle.remove()
    return records


def LateBoundName(model, tokens):  # noqa: N802
    records, handles = {}, []
    for name, module in model.named_modules():  # each lambda reads `name` when it runs: the last one
        handles.append(
            module.register_forward_hook(
                lambda m, a, o: records.setdefault(name, []).append((_detached(a), o.detach()))
            )
        )
    try:
        with torch.no_grad():
            model(tokens)
    finally:
        for handle in handles:
            handle.remove()
    return records


CONTAINERS = (
    "every module that runs needs an entry, containers included: loop over model.named_modules(), not only the "
    "modules without children or the model's direct children"
)
REMOVE = (
    "keep the handle that register_forward_hook returns and call handle.remove() on each, in the finally block "
    "of a try around the forward, so that the hooks come off when the forward raises too"
)

RECORD_MISTAKES = [
    Mistake(
        "the model itself is not recorded",
        "keep it: model.named_modules() yields the model first, under the name '', and its record holds the "
        "tokens and the logits.",
        RootLeftOut,
    ),
    Mistake("only the modules without children are recorded", CONTAINERS, LeavesOnly),
    Mistake("only the model's direct children are recorded", CONTAINERS, TopLevelOnly),
    Mistake(
        "the records are keyed by the module objects, not their names",
        "give each hook the module's name (make_hook(name), or functools.partial) and key the records by it.",
        KeyedByModule,
    ),
    Mistake(
        "every call recorded under one name: the hooks' lambda reads `name` when it runs, after the loop",
        "give each hook its own name when you make it: a function make_hook(name) that returns the hook, or "
        "functools.partial(hook, name); a lambda in a loop sees the loop variable's last value.",
        LateBoundName,
    ),
    Mistake(
        "each call of a module replaces its record, so only the last call is kept",
        "append each call to the module's list: records.setdefault(name, []).append((inputs, output)).",
        LastCallOnly,
    ),
    Mistake(
        "only the first call of a module is kept",
        "append every call to the module's list, not only the first: a module can run more than once.",
        FirstCallOnly,
    ),
    Mistake(
        "the first input tensor is recorded instead of the tuple of inputs",
        "record the whole tuple `args` the hook receives (a module such as mix(a, b) has two inputs).",
        FirstInputOnly,
    ),
    Mistake("the hooks are never removed", REMOVE, HooksNeverRemoved),
    Mistake(
        "the hooks are removed after a forward that returns, but stay when it raises",
        REMOVE,
        RemovedOnlyOnSuccess,
    ),
    Mistake(
        "every forward hook of every module is cleared, those of others too",
        "remove only your own hooks, through the handles register_forward_hook returned: module._forward_hooks "
        "holds other code's hooks as well.",
        ClearsEveryHook,
    ),
    Mistake(
        "the forward's error is caught and not passed on",
        "use try/finally without an except: the hooks come off and the error still reaches the caller, who "
        "should know the forward failed.",
        SwallowsTheError,
    ),
]

# --------------------------------------------------------------- 10.next_token_probabilities


def AllPositions(logits):  # noqa: N802
    return torch.softmax(logits, dim=-1)


def FirstPosition(logits):  # noqa: N802
    return torch.softmax(logits[..., 0, :], dim=-1)


def OverPositions(logits):  # noqa: N802
    return torch.softmax(logits, dim=-2)[..., -1, :]


def OverBatch(logits):  # noqa: N802
    return torch.softmax(logits[..., -1, :], dim=0)


def NoMaxSubtracted(logits):  # noqa: N802
    e = logits[..., -1, :].exp()
    return e / e.sum(dim=-1, keepdim=True)


def LogProbabilities(logits):  # noqa: N802
    return torch.log_softmax(logits[..., -1, :], dim=-1)


def Sigmoid(logits):  # noqa: N802
    return torch.sigmoid(logits[..., -1, :])


def NotNormalised(logits):  # noqa: N802
    last = logits[..., -1, :]
    return (last - last.max(dim=-1, keepdim=True).values).exp()


LAST = "the next token after the text is predicted at the last position: take logits[..., -1, :]."
PROBABILITY_MISTAKES = [
    Mistake("a softmax at every position, not only the last", LAST, AllPositions),
    Mistake("the first position's logits instead of the last", LAST, FirstPosition),
    Mistake(
        "the softmax runs over the positions, not the vocabulary",
        "softmax(..., dim=-1) over the V scores of one position.",
        OverPositions,
    ),
    Mistake(
        "the softmax runs over the batch, not the vocabulary",
        "softmax(..., dim=-1): dim=0 is the batch (or, for a single sequence, the vocabulary by chance only).",
        OverBatch,
    ),
    Mistake(
        "exp without subtracting the maximum (overflows at 1000)",
        "subtract each row's maximum before exp, or use torch.softmax, which does.",
        NoMaxSubtracted,
    ),
    Mistake(
        "log-probabilities (log_softmax) instead of probabilities",
        "use softmax, not log_softmax.",
        LogProbabilities,
    ),
    Mistake(
        "a sigmoid of each logit instead of a softmax",
        "a sigmoid treats each token on its own and does not sum to 1 over the vocabulary: use a softmax.",
        Sigmoid,
    ),
    Mistake(
        "exp of the logits without dividing by their sum",
        "divide by the sum over the vocabulary so that the probabilities sum to 1.",
        NotNormalised,
    ),
]

# ------------------------------------------------------------------------ 10.is_distribution


def ExactSum(p, atol=1e-5):  # noqa: N802
    return (p >= 0).all(dim=-1) & (p.sum(dim=-1) == 1)


def SumOnly(p, atol=1e-5):  # noqa: N802
    return (p.sum(dim=-1) - 1).abs() <= atol


def OneAnswer(p, atol=1e-5):  # noqa: N802
    return (p >= 0).all() & ((p.sum(dim=-1) - 1).abs() <= atol).all()


def NegatedComparisons(p, atol=1e-5):  # noqa: N802
    return ~(p < 0).any(dim=-1) & ~((p.sum(dim=-1) - 1).abs() > atol)


def IsCloseDefaultRtol(p, atol=1e-5):  # noqa: N802
    return (p >= 0).all(dim=-1) & torch.isclose(p.sum(dim=-1), torch.ones(()), atol=atol)


DISTRIBUTION_MISTAKES = [
    Mistake(
        "the sum is compared with 1 exactly (the seed's test)",
        "a correct float32 softmax sums to 1 only up to rounding: test |sum - 1| <= atol.",
        ExactSum,
    ),
    Mistake(
        "negative entries are not checked",
        "a distribution's entries are all >= 0: [1.5, -0.5] sums to 1 and is not one. Add (p >= 0).all(dim=-1).",
        SumOnly,
    ),
    Mistake(
        "one answer for the whole tensor instead of one per distribution",
        "reduce along the last dimension only: .all(dim=-1), and no .all() over the rest.",
        OneAnswer,
    ),
    Mistake(
        "the conditions are written as negations, so that a NaN passes",
        "every comparison with NaN is False, so ~(x < 0) and ~(gap > atol) are True for NaN: write what must "
        "hold, (p >= 0) and (gap <= atol).",
        NegatedComparisons,
    ),
    Mistake(
        "torch.isclose with its default rtol adds a tolerance of its own",
        "torch.isclose(a, b, atol=atol) also allows rtol * |b| = 1e-5: compare (sum - 1).abs() <= atol, or pass "
        "rtol=0.",
        IsCloseDefaultRtol,
    ),
]

# ------------------------------------------------------------------------ 10.most_likely_next


def _logits(model, text):
    with torch.no_grad():
        return model(encode(text)[None])  # (1, T, V)


def NextFromFirstPosition(model, text, context):  # noqa: N802
    return ALPHABET[int(_logits(model, text[-context:])[0, 0].argmax())]


def NoCrop(model, text, context):  # noqa: N802
    return ALPHABET[int(_logits(model, text)[0, -1].argmax())]


def CropFromStart(model, text, context):  # noqa: N802
    return ALPHABET[int(_logits(model, text[:context])[0, -1].argmax())]


def LeastLikely(model, text, context):  # noqa: N802
    return ALPHABET[int(_logits(model, text[-context:])[0, -1].argmin())]


NEXT_MISTAKES = [
    Mistake(
        "the first position's logits instead of the last",
        "the character after the text is predicted at the last position: logits[0, -1].",
        NextFromFirstPosition,
    ),
    Mistake(
        "a prompt longer than the context is given whole",
        "keep the last `context` characters: text[-context:].",
        NoCrop,
    ),
    Mistake(
        "a long prompt keeps its first `context` characters",
        "the next character follows the end of the text: keep text[-context:], not text[:context].",
        CropFromStart,
    ),
    Mistake(
        "argmin instead of argmax", "the most likely character has the largest logit: argmax.", LeastLikely
    ),
]

# ----------------------------------------------------------------- 10.cosine_similarity_matrix


def _unit(e, dim=-1):
    return e / e.norm(dim=dim, keepdim=True).clamp_min(1e-8)


def Squared(e):  # noqa: N802
    return (_unit(e) @ _unit(e).T) ** 2


def AbsoluteValue(e):  # noqa: N802
    return (_unit(e) @ _unit(e).T).abs()


def DotProducts(e):  # noqa: N802
    return e @ e.T


def ColumnsNormalised(e):  # noqa: N802
    u = _unit(e, dim=0)
    return u @ u.T


def DividedByNormsSquared(e):  # noqa: N802
    n = e.norm(dim=-1).clamp_min(1e-8)
    return e @ e.T / (n[:, None] * n[None, :]) ** 2


def RowWise(e):  # noqa: N802
    return F.cosine_similarity(e, e, dim=-1)


def FeaturePairs(e):  # noqa: N802
    u = _unit(e)
    return u.T @ u


def NoEps(e):  # noqa: N802
    u = e / e.norm(dim=-1, keepdim=True)
    return u @ u.T


def Distances(e):  # noqa: N802
    return torch.cdist(_unit(e), _unit(e))


SIMILARITY_MISTAKES = [
    Mistake(
        "the similarities are squared (the seed's test, sim ** 2 - ref.abs() < 1e-4, passes them)",
        "return the cosines themselves: a cosine can be negative.",
        Squared,
    ),
    Mistake(
        "the absolute values of the cosines",
        "keep the sign: opposite directions have cosine -1.",
        AbsoluteValue,
    ),
    Mistake(
        "dot products without normalising the rows",
        "divide each row by its norm first (or divide e_i . e_j by |e_i| |e_j|).",
        DotProducts,
    ),
    Mistake(
        "the columns are normalised instead of the rows",
        "each embedding is a row: its norm is over the last dimension, norm(dim=-1, keepdim=True).",
        ColumnsNormalised,
    ),
    Mistake(
        "divided by the product of the norms squared",
        "divide by |e_i| |e_j|, not by its square.",
        DividedByNormsSquared,
    ),
    Mistake(
        "each row with itself only (F.cosine_similarity of E with E)",
        "pair every row with every other: F.cosine_similarity(E[:, None, :], E[None, :, :], dim=-1), or unit @ unit.T.",
        RowWise,
    ),
    Mistake(
        "the similarities of the features (U.T @ U) instead of the rows (U @ U.T)",
        "the (V, V) matrix pairs rows: unit @ unit.T.",
        FeaturePairs,
    ),
    Mistake(
        "a row of zeros divided by its zero norm (NaN)",
        "clamp the norms below at a tiny positive number before dividing, as F.cosine_similarity does with "
        "its eps: a zero row then stays zero and its similarities are 0.",
        NoEps,
    ),
    Mistake(
        "distances between the unit rows instead of cosines",
        "the cosine is the dot product of the unit rows, not their distance.",
        Distances,
    ),
]

# ----------------------------------------------------------------------- 10.attention_weights


def _weights(
    model,
    tokens,
    block,
    head,
    *,
    rope="pairs",
    split="per head",
    scale="Dh",
    window="causal",
    source="attention",
    softmax_dim=-1,
    transpose=False,
):
    attention = model.blocks[block].attention
    caught = {}
    watched = model.blocks[block] if source == "block" else attention
    handle = watched.register_forward_pre_hook(lambda module, args: caught.update(x=args[0].detach()))
    try:
        with torch.no_grad():
            model(tokens[None])
    finally:
        handle.remove()
    x = caught["x"]
    B, T, D = x.shape
    H, W = attention.num_heads, attention.window_size
    Dh = D // H
    with torch.no_grad():
        projected = attention.qkv_linear(x)
    if split == "per head":
        q, k, _ = projected.view(B, T, H, 3 * Dh).transpose(1, 2).chunk(3, dim=-1)
    else:  # [q | k | v], each D wide
        q, k, _ = (t.view(B, T, H, Dh).transpose(1, 2) for t in projected.chunk(3, dim=-1))
    table = attention.rotation_matrix[:T]
    if rope == "pairs":
        q, k = (
            torch.view_as_real(torch.view_as_complex(t.reshape(B, H, T, Dh // 2, 2)) * table).reshape(
                B, H, T, Dh
            )
            for t in (q, k)
        )
    elif rope == "halves":
        q, k = (
            torch.cat(
                torch.view_as_real(torch.complex(t[..., : Dh // 2], t[..., Dh // 2 :]) * table).unbind(-1),
                dim=-1,
            )
            for t in (q, k)
        )
    q, k = q[0, head], k[0, head]
    scores = (k @ q.T if transpose else q @ k.T) / {"Dh": math.sqrt(Dh), "D": math.sqrt(D), "none": 1.0}[
        scale
    ]
    offset = torch.arange(T)[None, :] - torch.arange(T)[:, None]
    visible = {
        "causal": (offset <= 0) & (offset > -W),
        "full causal": offset <= 0,
        "one more": (offset <= 0) & (offset >= -W),
        "centred": (offset >= -(W // 2)) & (offset <= (W - 1) // 2),
    }[window]
    return scores.masked_fill(~visible, float("-inf")).softmax(dim=softmax_dim).nan_to_num(0.0)


def _variant(name, **change):
    def attention_weights(model, tokens, block, head):
        return _weights(model, tokens, block, head, **change)

    attention_weights.__name__ = attention_weights.__qualname__ = name
    return attention_weights


NoRope = _variant("NoRope", rope="none")
RopeOnHalves = _variant("RopeOnHalves", rope="halves")
SplitIntoThirds = _variant("SplitIntoThirds", split="thirds")
ScaledBySqrtD = _variant("ScaledBySqrtD", scale="D")
NotScaled = _variant("NotScaled", scale="none")
FullCausal = _variant("FullCausal", window="full causal")
WindowOneTooLong = _variant("WindowOneTooLong", window="one more")
CentredWindow = _variant("CentredWindow", window="centred")
BlockInput = _variant("BlockInput", source="block")
SoftmaxOverQueries = _variant("SoftmaxOverQueries", softmax_dim=0)
KeysByQueries = _variant("KeysByQueries", transpose=True)

ATTENTION_MISTAKES = [
    Mistake(
        "no RoPE on the queries and keys",
        "rotate q and k by attention.rotation_matrix[:T] before the scores, as the layer does.",
        NoRope,
    ),
    Mistake(
        "RoPE on the halves (i, i + Dh/2) instead of the interleaved pairs (2j, 2j + 1)",
        "pair features 2j and 2j + 1, as notebook 04 does: view_as_complex(q.reshape(..., Dh // 2, 2)).",
        RopeOnHalves,
    ),
    Mistake(
        "q, k and v split as [q | k | v] along D, not per head",
        "the course splits per head: view (B, T, H, 3 Dh), heads forward, then chunk(3, dim=-1).",
        SplitIntoThirds,
    ),
    Mistake(
        "the scores scaled by sqrt(D) instead of sqrt(Dh)",
        "divide by sqrt(D // H), the head's size.",
        ScaledBySqrtD,
    ),
    Mistake("the scores not scaled", "divide the scores by sqrt(Dh) before the softmax.", NotScaled),
    Mistake(
        "causal but without the window (every earlier key)",
        "query i sees only keys i - W + 1 .. i: mask the keys more than W - 1 positions back too.",
        FullCausal,
    ),
    Mistake(
        "a window of W + 1 keys (offsets 0 .. W)",
        "query i sees W keys, i - W + 1 .. i: the offset j - i lies in (-W, 0].",
        WindowOneTooLong,
    ),
    Mistake(
        "the centred window of notebook 03 instead of the causal one",
        "the course's model is causal: query i sees itself and the W - 1 keys before it, never a later one.",
        CentredWindow,
    ),
    Mistake(
        "the block's input (before norm1) instead of the attention's input",
        "hook model.blocks[block].attention itself: its input is norm1 of the block's input.",
        BlockInput,
    ),
    Mistake(
        "the softmax runs over the queries (dim=0), not the keys",
        "each query's weights over the keys sum to 1: softmax(dim=-1) on (query, key) scores.",
        SoftmaxOverQueries,
    ),
    Mistake(
        "rows are keys and columns queries (the matrix transposed)",
        "row i is query i: scores = q @ k.T, (T queries, T keys).",
        KeysByQueries,
    ),
]

MISTAKES = {
    "10.record_activations": RECORD_MISTAKES,
    "10.next_token_probabilities": PROBABILITY_MISTAKES,
    "10.is_distribution": DISTRIBUTION_MISTAKES,
    "10.most_likely_next": NEXT_MISTAKES,
    "10.cosine_similarity_matrix": SIMILARITY_MISTAKES,
    "10.attention_weights": ATTENTION_MISTAKES,
}
