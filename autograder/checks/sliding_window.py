"""Checks of notebook 03, sliding-window attention.

Key: B batch, T sequence length, D hidden size, H heads, Dh = D // H, W window size,
C context size (rows of a RoPE table).

The layer's checks load the case's weights into the student's `qkv_linear` and `out`, so the
reference and the student's layer compute with the same weights: equality with the reference
is equality with the homework's loop under the student's weights (the tests hold the
reference to the loop).
"""

import contextlib
import inspect

import torch

from ..core import (
    ACCUMULATED_GAP,
    Case,
    Check,
    Concern,
    ErrorHint,
    NotAsAsked,
    OperationCount,
    Outputs,
    Property,
)

# ------------------------------------------------------------------ shared by the checks

# A measured run calls the code at a short and a long length under an `OperationCount`. Both
# results are answers, compared with the reference's as usual, so only code right at both lengths
# earns a measured concern; the counts are judged by properties. In hidden cases the lengths and
# shapes are drawn with the rest, so that no code can know them in advance.
OPS_SHORT, OPS_LONG = "ops at the short length", "ops at the long length"
LARGEST_SHORT, LARGEST_LONG = "largest tensor at the short length", "largest tensor at the long length"
SDPA_SHORT, SDPA_LONG = "SDPA calls at the short length", "SDPA calls at the long length"
MEASURED_OUTPUTS = {
    OPS_SHORT: "the number of torch operations at the shorter length",
    OPS_LONG: "the number of torch operations at the longer length",
    LARGEST_SHORT: "the largest tensor created at the shorter length",
    LARGEST_LONG: "the largest tensor created at the longer length",
    SDPA_SHORT: "the calls of scaled_dot_product_attention at the shorter length",
    SDPA_LONG: "the calls of scaled_dot_product_attention at the longer length",
}
LONG = "_long"  # the suffix of the answer at the long length: "output_long"
SDPA = torch.nn.functional.scaled_dot_product_attention
VECTORISED = "no loop over positions"
LINEAR_MEMORY = "memory grows like T, not T squared"
ONE_SDPA_CALL = "all blocks in one scaled_dot_product_attention call"
MISSING = "the measurement did not come back with the results"
NOT_A_NUMBER = "the measurement that came back is not a number"
# The torch operations of the reference's measured runs, the same at every length and shape: the
# base of each check's cap (`no_position_loop`). A test measures them again.
REFERENCE_OPS = {
    "03.sliding_window": 17,
    "03.window_mask": 8,
    "03.masked_window": 21,
    "03.blocked_attention": 37,
}


def measured_run(short, long, answer: str) -> Outputs:
    """`answer` and `answer + LONG`: the two calls' results; and each call's torch operations,
    largest tensor and SDPA calls.

    The calls run in the grad mode of the answer calls, so that code cannot tell when it is
    measured by torch.is_grad_enabled()."""
    outputs = {}
    for call, suffix, keys in (
        (short, "", (OPS_SHORT, LARGEST_SHORT, SDPA_SHORT)),
        (long, LONG, (OPS_LONG, LARGEST_LONG, SDPA_LONG)),
    ):
        with OperationCount([SDPA]) as count:
            outputs[answer + suffix] = _plain_tensor(call(), answer)
        for key, value in zip(keys, (count.calls, count.largest, count.chosen_calls), strict=True):
            outputs[key] = torch.tensor(value)
    return outputs


def _plain_tensor(result, answer: str) -> torch.Tensor:
    """The result, judged while it is still counted: a subclass of torch.Tensor could put its work
    off until the run stage copies it, after the count."""
    if type(result) is not torch.Tensor:
        raise TypeError(
            f"the {answer} is a {type(result).__name__}, not a torch.Tensor: return a plain tensor (no "
            "subclass), so that the work that gives it is counted while your code runs"
        )
    return result


def _counts(out: Outputs, short: str, long: str) -> tuple[int, int] | str:
    """The two counts, or why there are none: never an error, which would let a property pass."""
    values = [out.get(key) for key in (short, long)]
    if not all(isinstance(v, torch.Tensor) and v.numel() == 1 for v in values):
        return MISSING
    if not all(not v.is_complex() and bool(torch.isfinite(v).all()) for v in values):
        return NOT_A_NUMBER
    return int(values[0]), int(values[1])


# Counts may differ this much between the lengths: a correct blocked version pads only when T is
# not a multiple of its block (one operation more at one length); a loop differs by tens.
OPS_SLACK = 4


def no_position_loop(reference_ops: int) -> Property:
    """As many torch operations at both lengths (up to OPS_SLACK), and at most
    `ops_cap(reference_ops)` of them.

    Equal counts catch a loop along the sequence; the cap catches one whose count is made equal
    with operations that do no work (more of them at the short length). The reference's count
    is kept in REFERENCE_OPS (a test measures it again): a property sees the student's outputs
    alone, not the reference's."""
    cap = ops_cap(reference_ops)

    def test(case: Case, out: Outputs) -> str | None:
        if isinstance(counts := _counts(out, OPS_SHORT, OPS_LONG), str):
            return counts
        (short, long), (t_short, t_long) = counts, case.inputs["lengths"]
        if abs(long - short) > OPS_SLACK:
            why = (
                "a Python loop walks along the sequence"
                if long > short
                else "your code takes another path at one of the lengths"
            )
            return (
                f"your code issues {short} torch operations at T={t_short} and {long} at T={t_long}: {why}. "
                "Handle every position in the same few tensor operations (pad, unfold, einsum), whatever T is"
            )
        if max(short, long) > cap:
            return (
                f"your code issues {short} torch operations at T={t_short} and {long} at T={t_long}, more "
                f"than {cap}: a vectorised answer needs about {reference_ops}. A loop, or operations that do "
                "nothing but count, issues the others. Handle every position in the same few tensor "
                "operations (pad, unfold, einsum)"
            )
        return None

    return Property("the same few torch operations at every T", test, concern=VECTORISED)


def ops_cap(reference_ops: int) -> int:
    """The most torch operations a measured run may issue: 4x the reference's, plus 16. The correct
    alternatives of the tests issue at most 1.6x the reference's; a loop of two operations per
    position along the long sequence (64 positions or more) issues more."""
    return 4 * reference_ops + 16


def _linear_memory(case: Case, out: Outputs) -> str | None:
    if isinstance(counts := _counts(out, LARGEST_SHORT, LARGEST_LONG), str):
        return counts
    (short, long), (t_short, t_long) = counts, case.inputs["lengths"]
    growth = long / max(1, short)
    if growth <= 2 * t_long / t_short:
        return None
    return (
        f"the largest tensor your code creates holds {short} elements at T={t_short} and {long} at "
        f"T={t_long}, {growth:.0f} times more for {t_long / t_short:.0f} times the length: it grows faster "
        "than T. Something of size T x T (a full mask or score matrix), or blocks whose size grows with T, "
        "are built: keep every tensor's size proportional to T, with a block size that depends on W only"
    )


def _one_sdpa_call(case: Case, out: Outputs) -> str | None:
    if isinstance(counts := _counts(out, SDPA_SHORT, SDPA_LONG), str):
        return counts
    if counts == (1, 1):
        return None
    (short, long), (t_short, t_long) = counts, case.inputs["lengths"]
    return (
        f"your code calls F.scaled_dot_product_attention {short} times at T={t_short} and {long} at "
        f"T={t_long}: the question asks for the blocks as one batch, attending in one call with a "
        "(n, Q, Q + W - 1) mask, so that the fused kernel does all the work"
    )


MEMORY_LINEAR_IN_T = Property("the largest tensor grows like T", _linear_memory, concern=LINEAR_MEMORY)
ONE_BATCHED_CALL = Property("one scaled_dot_product_attention call", _one_sdpa_call, concern=ONE_SDPA_CALL)


# ------------------------------------------------------- the layer (Questions 1 to 6)

ODD, EVEN = "odd windows", "even windows"


def _load(layer, weights: list[torch.Tensor]) -> None:
    """The case's weights into the student's qkv_linear and out, whose shapes must be nn.Linear's."""
    qkv_weight, qkv_bias, out_weight, out_bias = weights
    for name, weight, bias in (("qkv_linear", qkv_weight, qkv_bias), ("out", out_weight, out_bias)):
        linear = getattr(layer, name)
        if linear.bias is None:
            raise ValueError(f"`{name}` has no bias: keep the given nn.Linear layers as they are")
        with torch.no_grad():
            linear.weight.copy_(weight)
            linear.bias.copy_(bias)


# How a layer's __init__ takes a rotation table after (hidden_size, num_heads, window_size). The
# course's layer takes rotation_matrix=None; the original homework's stub takes the three arguments
# only, with a TODO to create RoPE inside (so such a layer builds its own table and always
# rotates), and many of its solutions add a required fourth argument for the table.
TABLE_REQUIRED, TABLE_OPTIONAL, NO_TABLE = "required", "optional", "none"


def table_argument(layer_class) -> tuple[str, str | None]:
    """Whether the layer's __init__ takes a table (TABLE_REQUIRED, TABLE_OPTIONAL or NO_TABLE), read
    from its signature, and the keyword to pass it by (None: positionally, after the three)."""
    try:
        parameters = list(inspect.signature(layer_class).parameters.values())
    except (TypeError, ValueError):  # no signature to read: called as the course's layer is
        return TABLE_OPTIONAL, None
    kinds = inspect.Parameter
    named = [p for p in parameters if p.name == "rotation_matrix"]
    positional = [p for p in parameters if p.kind in (kinds.POSITIONAL_ONLY, kinds.POSITIONAL_OR_KEYWORD)]
    if named or len(positional) >= 4:
        table = named[0] if named else positional[3]
        keyword = None if table.kind == kinds.POSITIONAL_ONLY else table.name
        if table.default is kinds.empty:
            return TABLE_REQUIRED, keyword
        # A fourth argument with another default (context_size=1024, period=1e4) is no table.
        return (TABLE_OPTIONAL, keyword) if named or table.default is None else (NO_TABLE, None)
    if any(p.kind == kinds.VAR_POSITIONAL for p in parameters):
        return TABLE_OPTIONAL, None
    return NO_TABLE, None


def _construct(layer_class, inputs: dict, table: torch.Tensor | None, keyword: str | None):
    args = [inputs["hidden_size"], inputs["num_heads"], inputs["window_size"]]
    if table is None:
        return layer_class(*args)
    return layer_class(*args, **{keyword: table}) if keyword else layer_class(*args, table)


def tables_held(layer, half: int) -> list[tuple[torch.nn.Module, str, torch.Tensor]]:
    """(module, name, table) for every complex tensor of shape (..., C, half) that the layer or one
    of its submodules (its RoPE) keeps, as a plain attribute or as a buffer: a table it built."""
    found = []
    for module in layer.modules():
        for name, value in [*vars(module).items(), *module._buffers.items()]:
            table = isinstance(value, torch.Tensor) and value.is_complex() and value.ndim >= 2
            if table and value.shape[-1] == half:
                found.append((module, name, value))
    return found


def replace_tables(held: list, make) -> None:
    """Each table of `held` replaced where it is kept by make(table), as a buffer where it was one;
    a table kept in two places (the layer and its RoPE) by one new tensor."""
    new = {}
    for module, name, table in held:
        replacement = new.setdefault(id(table), make(table))
        if name in module._buffers:
            module._buffers[name] = replacement
        else:
            module.__dict__[name] = replacement


def build_layer(layer_class, inputs: dict, longest: int):
    """The student's layer for Questions 1 to 6, with the case's weights and the rotation made
    neutral where the layer insists on one: these questions grade the windows, not RoPE (notebook
    04's check and 03.rope_inside grade that). A layer that requires a table gets the identity
    (ones, as complex numbers) with a row for each of the `longest` positions it is called at; one
    that builds its own (the homework's three-argument stub) has each table it keeps turned into
    ones, of its own layout (rows added where it has fewer than `longest`)."""
    half = inputs["hidden_size"] // inputs["num_heads"] // 2
    takes, keyword = table_argument(layer_class)
    identity = torch.ones(longest, half, dtype=torch.complex64) if takes == TABLE_REQUIRED else None
    layer = _construct(layer_class, inputs, identity, keyword)
    if takes == NO_TABLE:
        replace_tables(tables_held(layer, half), lambda table: _identity_like(table, longest))
    _load(layer, inputs["weights"])
    return layer


def _identity_like(table: torch.Tensor, longest: int) -> torch.Tensor:
    """Ones in the table's layout and dtype, with at least `longest` rows."""
    *lead, rows, half = table.shape
    return torch.ones(*lead, max(rows, longest), half, dtype=table.dtype)


def run_layer(layer_class, case: Case) -> Outputs:
    i = case.inputs
    longest = max(i["x"].shape[1], i["x_long"].shape[1] if "x_long" in i else 0)
    layer = build_layer(layer_class, i, longest)
    if "lengths" in i:
        return measured_run(lambda: layer(i["x"]), lambda: layer(i["x_long"]), "output")
    return {"output": layer(i["x"])}


EINSUM_SHAPES = ErrorHint(
    "does not broadcast with previously seen size",
    "an einsum's tensors do not fit its subscripts. After unfold the windows are (B, H, T, Dh, W): the "
    "window is the LAST dimension, after head_dim ('bhtdw'); and for an even W, unfold gives T + 1 "
    "windows: keep the first T.",
)
LAYER_ERRORS = [
    EINSUM_SHAPES,
    ErrorHint(
        "has no attribute 'qkv_linear'",
        "keep the given __init__: the layer's projections are self.qkv_linear and self.out.",
    ),
    ErrorHint(
        "shape '[",
        "a view or reshape does not fit: the heads are split as view(B, T, H, 3 * Dh), and merged "
        "back from (B, T, H, Dh) to (B, T, D).",
    ),
]

SLIDING_WINDOW = Check(
    name="03.sliding_window",
    target="EfficientSlidingWindowMultiheadAttention",
    run=run_layer,
    concerns=[Concern(ODD, weight=3), Concern(EVEN, weight=1), Concern(VECTORISED, weight=1)],
    outputs={
        "output": "the layer's output",
        "output" + LONG: "the layer's output at the longer length",
        **MEASURED_OUTPUTS,
    },
    measured=tuple(MEASURED_OUTPUTS),
    properties=[no_position_loop(REFERENCE_OPS["03.sliding_window"])],
    error_hints=LAYER_ERRORS,
    hints=[
        "Which keys does query t see, and where do they sit once the keys are padded with W // 2 "
        "zero vectors at each end? Every step of the loop does the same thing for one t: find the one "
        "tensor operation that does it for all t.",
        "Test it against the loop with the same weights: fast.load_state_dict(loop.state_dict()), then "
        "torch.allclose(fast(x), loop(x), atol=1e-6) for x of shape (2, 11, 16) with W = 5 and W = 4. "
        "Print the shapes after each step: (B, H, T, Dh), then (B, H, T, Dh, W), (B, H, T, W), "
        "(B, T, H, Dh), (B, T, D).",
        "unfold puts the window LAST, after Dh: keys_windows[b, h, t, :, w] is the padded key at position "
        "t + w (for an even W, unfold gives T + 1 windows: keep the first T); "
        "scores[b, h, t, w] = sum_d q[b, h, t, d] * keys_windows[b, h, t, d, w] / sqrt(Dh); softmax over w; "
        "context[b, t, h, d] = sum_w attention[b, h, t, w] * values_windows[b, h, t, d, w].",
        "qkv_linear(x).view(B, T, H, 3 * Dh).transpose(1, 2).chunk(3, dim=-1); F.pad(keys, (0, 0, p, p)); "
        "keys_padded.unfold(2, W, 1)[:, :, :T]; torch.einsum('bhtd,bhtdw->bhtw', ...); "
        "torch.einsum('bhtw,bhtdw->bthd', ...); .reshape(B, T, D); self.out(...).",
    ],
)

# ------------------------------------------------------------ the mask (Question 7)

CENTRED, CAUSAL = "centred window", "causal window"


def run_mask(sliding_window_mask, case: Case) -> Outputs:
    i = case.inputs
    if "lengths" in i:  # converted inside the count, as a student may return a list or an array
        short, long = i["lengths"]
        return measured_run(
            lambda: torch.as_tensor(sliding_window_mask(short, i["window_size"], causal=i["causal"])),
            lambda: torch.as_tensor(sliding_window_mask(long, i["window_size"], causal=i["causal"])),
            "mask",
        )
    return {
        "mask": torch.as_tensor(sliding_window_mask(i["seq_length"], i["window_size"], causal=i["causal"]))
    }


def _keys_seen(case: Case, out: Outputs) -> str | None:
    mask = out.get("mask")
    if mask is None:
        return None
    t, w = case.inputs["seq_length"], case.inputs["window_size"]
    if mask.shape != (t, t) or mask.dtype != torch.bool:
        return None
    seen = (~mask).sum(-1)  # keys each query sees
    inner = seen[w - 1 :] if case.inputs["causal"] else seen[w // 2 : t - (w - 1 - w // 2)]
    wrong = inner[inner != w]
    return (
        f"a query away from the edges should see {w} keys, one of yours sees {int(wrong[0])}"
        if len(wrong)
        else None
    )


WINDOW_MASK = Check(
    name="03.window_mask",
    target="sliding_window_mask",
    run=run_mask,
    concerns=[Concern(CENTRED, weight=2), Concern(CAUSAL, weight=1), Concern(VECTORISED, weight=1)],
    outputs={"mask": "the mask", "mask" + LONG: "the mask at the longer length", **MEASURED_OUTPUTS},
    measured=tuple(MEASURED_OUTPUTS),
    properties=[
        Property("a query away from the edges sees W keys", _keys_seen),
        no_position_loop(REFERENCE_OPS["03.window_mask"]),
    ],
    hints=[
        "Entry (i, j) depends only on the offset j - i between key and query. For which offsets may "
        "query i look, in a centred window of W and in a causal one?",
        "Test it: sliding_window_mask(5, 3) must leave exactly the main diagonal and its two neighbours "
        "False; sliding_window_mask(5, 3, causal=True) the diagonal and the two below it; with W = 4 "
        "(centred) two keys on the left of the diagonal and one on the right.",
        "Centred: visible when -(W // 2) <= j - i <= W - 1 - W // 2. Causal: visible when "
        "-(W - 1) <= j - i <= 0. The mask is True where the offset is outside.",
        "offset = torch.arange(T)[None, :] - torch.arange(T)[:, None] gives j - i as a (T, T) tensor; "
        "return (offset < first) | (offset > last).",
    ],
)

# ------------------------------------------------------- masked edges (Question 8)

ATTENTION_OUTPUTS = {
    "output": "the attention output",
    "output" + LONG: "the attention output at the longer length",
    **MEASURED_OUTPUTS,
}


def run_attention(attention, case: Case) -> Outputs:
    i = case.inputs
    w, causal = i["window_size"], i["causal"]
    if "lengths" in i:
        long = i["long"]
        return measured_run(
            lambda: attention(i["queries"], i["keys"], i["values"], w, causal=causal),
            lambda: attention(long["queries"], long["keys"], long["values"], w, causal=causal),
            "output",
        )
    return {"output": attention(i["queries"], i["keys"], i["values"], w, causal=causal)}


MASKED_WINDOW = Check(
    name="03.masked_window",
    target="window_attention",
    run=run_attention,
    concerns=[
        Concern(CENTRED, weight=2),
        Concern(CAUSAL, weight=1),
        Concern(VECTORISED, weight=1),
        Concern(LINEAR_MEMORY, weight=1),
    ],
    outputs=ATTENTION_OUTPUTS,
    measured=tuple(MEASURED_OUTPUTS),
    properties=[no_position_loop(REFERENCE_OPS["03.masked_window"]), MEMORY_LINEAR_IN_T],
    error_hints=[EINSUM_SHAPES],
    hints=[
        "Which slots of query t's window hold no token? Write the token position of each slot as a "
        "(T, W) table: it depends on t, on the slot and on how much padding comes before the query.",
        "Test it: torch.allclose(window_attention(q, k, v, 5, causal), "
        "F.scaled_dot_product_attention(q, k, v, attn_mask=~sliding_window_mask(T, 5, causal)), atol=1e-6) "
        "for both values of causal, with T = 12 and with T = 3 (shorter than the window).",
        "Slot w of query t holds token t - before + w, with before = W // 2 (centred) or W - 1 (causal); "
        "the slot is padding when that is < 0 or >= T. Pad `before` slots on the left and W - 1 - before "
        "on the right.",
        "key_position = torch.arange(T)[:, None] - before + torch.arange(W); outside = (key_position < 0) | "
        "(key_position >= T); scores.masked_fill(outside, float('-inf')).softmax(dim=-1).",
    ],
)

# ------------------------------------------------------------ RoPE inside (Question 10)

TABLE_KEPT = "a layer cast to bfloat16 and back keeps its table"
ROPE_CORE = "odd windows: queries and keys rotated before windowing"
ROPE_EVEN = "even windows"


def run_rope_inside(targets, case: Case) -> Outputs:
    """The layer's output; and, when the layer calls the student's RoPE, that RoPE's rotation of
    a query on its own, to name a bug of notebook 04 as one. A layer may rotate without it (the
    class then may still raise the release's stub, or be wrong): the layer alone is graded. One
    that calls a wrong RoPE gives a wrong output, beside which the diagnosis is named."""
    layer_class, rope_class = targets
    i = case.inputs
    layer = build_rope_layer(layer_class, rope_class, i)
    with _calls_of(rope_class) as calls:
        outputs = {"output": layer(i["x"])}
    if calls:
        rotated = _rope_alone(rope_class, i)
        if rotated is not None:
            outputs["rope_queries"] = rotated
    return outputs


NO_TABLE_FOUND = (
    "your layer's __init__ takes (hidden_size, num_heads, window_size) only, and the layer keeps no "
    "rotation table the check can find (a complex tensor of shape (C, Dh // 2), in the layer or in its "
    "RoPE): build the table in __init__ with get_rotation_matrix and keep it there, or take it as a "
    "fourth argument, rotation_matrix, as the notebook's layer does"
)


def build_rope_layer(layer_class, rope_class, inputs: dict):
    """The student's layer with the case's table, weights and casts.

    A layer that takes a table gets the case's, of random frequencies (so one that builds a table of
    its own fails). One that takes none, as the original homework's stub (its TODO creates RoPE
    inside, with a context and a period of the student's choice), has built its own: the case's
    table is put where the layer keeps it (a buffer where it was one), and the layer is graded
    against the reference with that same table. That grades what the question asks, where and how
    the layer rotates, and neither the table's frequencies (04.rotation_matrix grades those) nor a
    context or period the homework left open. Only a table with a row for every position of the
    case is replaced: a shorter one (built for W rows) stays, and fails as it would in a model."""
    table, length = inputs["rotation_matrix"], inputs["x"].shape[1]
    takes, keyword = table_argument(layer_class)
    layer = _construct(layer_class, inputs, None if takes == NO_TABLE else table, keyword)
    if takes == NO_TABLE:
        held = tables_held(layer, table.shape[-1])
        if not held:
            raise NotAsAsked(NO_TABLE_FOUND)
        long_enough = [entry for entry in held if entry[2].shape[-2] >= length]
        replace_tables(long_enough, lambda own: _in_layout(table, own))
    layer = _cast(layer, rope_class, inputs.get("module_casts", []))
    _load(layer, inputs["weights"])
    return layer


def _in_layout(table: torch.Tensor, own: torch.Tensor) -> torch.Tensor:
    """The (C, Dh / 2) table in the dtype and leading dimensions of the layer's own ((1, 1, C, Dh / 2))."""
    lead = own.shape[:-2]
    shaped = table.to(own.dtype).reshape(*(1 for _ in lead), *table.shape)
    return shaped.expand(*lead, *table.shape).contiguous()


def _cast(layer, rope_class, dtypes: list[str]):
    """The case's casts, module.to(dtype) in turn, after which the buffers of the student's RoPE
    (notebook 04's class) are put back as they were: a RoPE that keeps its table as a buffer is
    charged by 04.rope_forward, whose question asks for it to survive the cast; here the layer's own
    code is graded (a table the layer itself registers as a buffer still fails)."""
    ropes = [m for m in layer.modules() if isinstance(rope_class, type) and isinstance(m, rope_class)]
    kept = [(rope, dict(rope._buffers)) for rope in ropes]
    for dtype in dtypes:
        layer = layer.to(getattr(torch, dtype))
    for rope, buffers in kept:
        rope._buffers.update(buffers)
    return layer


@contextlib.contextmanager
def _calls_of(module_class):
    """The calls of modules of `module_class` while active (a list, one entry per call)."""
    calls = []

    def hook(module, args):
        if isinstance(module_class, type) and isinstance(module, module_class):
            calls.append(module)

    handle = torch.nn.modules.module.register_module_forward_pre_hook(hook)
    try:
        yield calls
    finally:
        handle.remove()


def _rope_alone(rope_class, inputs: dict) -> torch.Tensor | None:
    """The rotated query, or None when the RoPE gives no plain tensor: a diagnosis never fails a
    check, whatever the code does (SystemExit included; only an interrupt goes through)."""
    try:
        rotated, _ = rope_class(inputs["rotation_matrix"])(inputs["rope_q"], inputs["rope_k"])
        if type(rotated) is torch.Tensor:
            return rotated.detach().clone()
    except KeyboardInterrupt:
        raise
    except BaseException:
        pass
    return None


def _rope_from_04(case: Case, out: Outputs) -> str | None:
    got = out.get("rope_queries")
    if got is None or got.shape != case.inputs["rope_q"].shape:
        return None
    gap = (got - case.judge_only["rope_rotated"]).abs().max().item()
    if gap < ACCUMULATED_GAP:
        return None
    return (
        f"your RoPE (notebook 04's question) rotates queries wrongly, by up to {gap:.3g}: fix it in notebook "
        "04, where its check says what is wrong, and paste it here again"
    )


ROPE_FROM_04 = "your RoPE from notebook 04 rotates each pair by the table's angle"
TABLE_TOO_SHORT = "a table built for window_size rows"

ROPE_INSIDE = Check(
    name="03.rope_inside",
    target=("EfficientSlidingWindowMultiheadAttention", "RoPE"),
    answer="sliding_window",
    run=run_rope_inside,
    concerns=[Concern(ROPE_CORE, weight=3), Concern(ROPE_EVEN, weight=1), Concern(TABLE_KEPT, weight=1)],
    outputs={
        "output": "the layer's output",
        "rope_queries": "the queries your RoPE from notebook 04 rotates",
    },
    measured=("rope_queries",),
    diagnostic=("RoPE",),
    properties=[Property(ROPE_FROM_04, _rope_from_04)],
    error_hints=[
        ErrorHint(
            "must match the size of tensor",
            f"{TABLE_TOO_SHORT} (too short once T > W), or table rows that do not line up with the "
            "positions rotated (rotating after padding adds W // 2 positions at each end; a RoPE that does "
            "not slice rotation_matrix[:T] multiplies by all C rows). Rotate the (B, H, T, Dh) queries and "
            "keys right after the split into heads, with the table given to __init__: a row for every "
            "position of the sequence.",
        ),
        ErrorHint(
            "name 'RoPE' is not defined",
            "the cell above the layer must define RoPE: paste your get_rotation_matrix and RoPE from "
            "notebook 04.",
        ),
    ],
    hints=[
        "RoPE turns each query and key by the angle of its own position in the sequence. At which step of "
        "your forward does every key still sit at its own position, before padding shifts it and before "
        "the windows regroup it?",
        "Test it as the notebook's cell does: prepending three random tokens to x must not change the "
        "outputs of the inner tokens, and for a sequence of one token (T = 1) the layer with a table must "
        "give what it gives without one (position 0 does not turn).",
        "Call self.rope on the queries and keys as (B, H, T, Dh) tensors, right after the split into "
        "heads, and go on with the two tensors it returns; values are not rotated.",
        "A layer built without a table keeps self.rope as None: guard the call with a test on it, and "
        "make it between chunk(3, dim=-1) and F.pad, where each key is still at its own position.",
    ],
)

# ------------------------------------------------------ blocked attention (Question 9)

BLOCKED = Check(
    name="03.blocked_attention",
    target="blocked_window_attention",
    run=run_attention,
    concerns=[
        Concern(CENTRED, weight=2),
        Concern(CAUSAL, weight=1),
        Concern(VECTORISED, weight=1),
        Concern(LINEAR_MEMORY, weight=1),
        Concern(ONE_SDPA_CALL, weight=1),
    ],
    outputs=ATTENTION_OUTPUTS,
    measured=tuple(MEASURED_OUTPUTS),
    properties=[
        no_position_loop(REFERENCE_OPS["03.blocked_attention"]),
        MEMORY_LINEAR_IN_T,
        ONE_BATCHED_CALL,
    ],
    hints=[
        "Take the queries of one block, positions s to s + Q - 1. Which is the first key any of them can "
        "see, and which the last? Every block then needs the same number of keys.",
        "Test it against F.scaled_dot_product_attention(q, k, v, "
        "attn_mask=~sliding_window_mask(T, W, causal)) for T = 1, T = W, T = 100 (not a multiple of your "
        "block size) and both values of causal.",
        "With before = W // 2 (centred) or W - 1 (causal), block i's queries i*Q .. i*Q + Q - 1 see keys "
        "i*Q - before .. i*Q + Q - 1 + (W - 1 - before): a span of Q + W - 1. Slot s of block i holds key "
        "i*Q - before + s; it is visible to query i*Q + r when that key is in 0..T-1 and its offset to the "
        "query is in the window.",
        "F.pad(queries, (0, 0, 0, n*Q - T)).view(B * H, n, Q, Dh); F.pad(keys, (0, 0, before, "
        "n*Q + W - 1 - before - T)).flatten(0, 1).unfold(1, Q + W - 1, Q).transpose(-1, -2); a visible mask "
        "of shape (n, Q, Q + W - 1) from aranges; F.scaled_dot_product_attention(q, k, v, "
        "attn_mask=visible[None]); reshape to (B, H, n*Q, Dh) and keep the first T rows.",
    ],
)

CHECKS = [SLIDING_WINDOW, WINDOW_MASK, MASKED_WINDOW, ROPE_INSIDE, BLOCKED]
