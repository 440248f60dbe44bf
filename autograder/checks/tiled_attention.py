"""Checks of notebook 11, attention without the T x T matrix (online softmax, tiled attention,
merging the softmax states of two parts of the keys).

Key: B batch, H heads, T sequence length, Dh head dimension, N the length of a softmax row,
b the block size (block_size).

Two checks measure how the code works as well as what it returns: the largest tensor it creates
while it runs (`LargestIntermediate`, a dispatch mode that sees every ATen operation, the ones
inside torch's own Python functions too). The result itself and views of the inputs do not count:
what counts is the working memory. Those measurements are made inside the student's kernel and
sent back like the outputs (`Check.measured`): a kernel that forges them can earn the memory
concern, and only that, with an answer that is right at every length measured (docs/security.md,
"What is not covered").
"""

import math
import numbers

import torch
import torch.nn.functional as F
import torch.utils._pytree as pytree

from ..core import (
    ACCUMULATED_GAP,
    Case,
    Check,
    Concern,
    DispatchMode,
    ErrorHint,
    LibraryUse,
    NotAsAsked,
    Outputs,
    Property,
    library_calls,
)
from . import _toolkit
from ._toolkit import MULTI_HEAD_ATTENTION_USES, SDPA_USES, sample_rows

Tensor = torch.Tensor


# ------------------------------------------------------------------------- the measurement


class LargestIntermediate(DispatchMode):
    """The largest tensor the operations run while active take or give, leaving out the given
    inputs (and their views) and, at the end, the result (and its views): the working memory of a
    call, in elements, with its shape.

    A dispatch mode sees each ATen operation, below autograd and inside torch's Python functions.
    The KEEP largest tensors seen are held until the end, so that their memory is not reused by the
    result (which would make them look like the result). It sees only what PyTorch computes: work
    done in NumPy and handed over with torch.from_numpy is invisible until a torch operation takes it.

        with LargestIntermediate([q, k, v]) as seen:
            out = attention(q, k, v)
        numel, shape = seen.largest(out)
    """

    KEEP = 8

    def __init__(self, inputs=()):
        super().__init__()
        self.inputs = {_storage(t) for t in inputs}
        self.kept: list[tuple[int, tuple[int, ...], Tensor]] = []  # (numel, shape, tensor), largest first
        # The most numbers one reduction (a max, a sum, a softmax, a matrix product's inner sum) took
        # at once: a row reduced whole, even in place or into a buffer, shows here.
        self.widest = 0
        self.copied_from: dict[int, int] = {}  # a copy's storage -> its source's

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.widest = max(self.widest, _reduced(func, args))
        result = self.run(func, args, kwargs or {})
        if func.overloadpacket.__name__ in COPIES and args and isinstance(args[0], Tensor):
            source, copy = _storage(args[0]), _storage(result) if isinstance(result, Tensor) else None
            if source is not None and copy is not None:
                if source in self.inputs:  # the input in another dtype or layout is the input still
                    self.inputs.add(copy)
                self.copied_from[copy] = source
        for leaf in pytree.tree_leaves((args, kwargs, result)):
            if isinstance(leaf, Tensor):
                self._see(leaf)
        return result

    def _see(self, tensor: Tensor) -> None:
        storage, numel = _storage(tensor), tensor.numel()
        if numel == 0 or (storage is not None and storage in self.inputs):
            return
        for i, (seen, _, held) in enumerate(self.kept):
            if storage is not None and _storage(held) == storage:  # a view of a tensor already held
                # the larger view; of two as large, the one of more dimensions: matmul's 4-D result
                # is a view of a 3-D bmm's, (B, H, n, m) says more than (B * H, n, m)
                if (numel, tensor.dim()) > (seen, len(self.kept[i][1])):
                    self.kept[i] = (numel, tuple(tensor.shape), held)
                    self.kept.sort(key=lambda entry: -entry[0])
                return
        if len(self.kept) < self.KEEP or numel > self.kept[-1][0]:
            self.kept.append((numel, tuple(tensor.shape), tensor))
            self.kept.sort(key=lambda entry: -entry[0])
            del self.kept[self.KEEP :]

    def largest(self, result: Tensor) -> tuple[int, tuple[int, ...]]:
        """The largest tensor seen that is not the result, a view of it, or what was copied into it
        (the result computed in float64 and cast back): (elements, shape)."""
        mine = {_storage(result)} - {None}
        for storage in list(mine):
            if storage in self.copied_from:
                mine.add(self.copied_from[storage])
        for numel, shape, held in self.kept:
            if _storage(held) not in mine:
                return numel, shape
        return 0, ()


COPIES = {"_to_copy", "clone", "contiguous", "_copy_from_and_resize", "to"}
REDUCTIONS = {
    "amax", "amin", "max", "min", "sum", "mean", "prod", "logsumexp", "_softmax", "_log_softmax",
    "_safe_softmax", "_masked_softmax", "argmax", "argmin", "var", "std", "cumsum", "norm",
}  # fmt: skip
INNER = {"mm": (0, -1), "bmm": (0, -1), "addmm": (1, -1), "baddbmm": (1, -1), "addbmm": (1, -1)}


def _reduced(func, args: tuple) -> int:
    """How many numbers an ATen operation combines into one: the size of the dimensions a reduction
    takes (all of them without a dim), or a matrix product's inner dimension; 0 for the others."""
    name = func.overloadpacket.__name__
    if name in INNER:
        at, axis = INNER[name]
        x = args[at] if len(args) > at else None
        return x.shape[axis] if isinstance(x, Tensor) and x.dim() >= 2 else 0
    if name not in REDUCTIONS or not args or not isinstance(args[0], Tensor):
        return 0
    x, dims = args[0], args[2 if name == "norm" else 1] if len(args) > (2 if name == "norm" else 1) else None
    if isinstance(dims, Tensor):  # max(a, b), min(a, b): elementwise, no reduction
        return 0
    if isinstance(dims, int) and x.dim() > 0:
        return x.shape[dims]
    if isinstance(dims, list | tuple) and dims and all(isinstance(d, int) for d in dims) and x.dim() > 0:
        return math.prod(x.shape[d] for d in dims)
    return x.numel()


def _storage(tensor: Tensor) -> int | None:
    """Where a tensor's memory starts (views share it); None for tensors without one."""
    try:
        return tensor.untyped_storage().data_ptr()
    except Exception:  # sparse, nested or meta tensors: never taken for an input or the result
        return None


def _plain_tensor(result, what: str) -> Tensor:
    """The result, judged while it is still measured: a subclass could defer its work until after."""
    if type(result) is not torch.Tensor:
        raise TypeError(
            f"{what} is a {type(result).__name__}, not a torch.Tensor: return a plain tensor (no subclass), "
            "so that the work that gives it is measured while your code runs"
        )
    return result


def measured_call(call, inputs: list[Tensor], what: str) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """The call's result, the number of elements of the largest intermediate, its shape, and the
    widest reduction."""
    with LargestIntermediate(inputs) as seen:
        result = _plain_tensor(call(), what)
    numel, shape = seen.largest(result)
    return result, torch.tensor(numel), torch.tensor(shape, dtype=torch.int64), torch.tensor(seen.widest)


MISSING = "the measurement did not come back with the results"


def _measurement(out: Outputs, numel_key: str, shape_key: str) -> tuple[int, tuple[int, ...]] | str:
    """(elements, shape) of a measured run, or why there is none: never an error, which would let a
    property pass."""
    numel, shape = out.get(numel_key), out.get(shape_key)
    if not (isinstance(numel, Tensor) and numel.numel() == 1 and isinstance(shape, Tensor)):
        return MISSING
    if numel.is_complex() or shape.is_complex() or not bool(torch.isfinite(numel.double()).all()):
        return "the measurement that came back is not a number"
    return int(numel), tuple(int(n) for n in shape.flatten()[:8])


# ------------------------------------------------------------------- Question 1: the bytes


def run_bytes(score_matrix_bytes, case: Case) -> Outputs:
    i = case.inputs
    value = score_matrix_bytes(i["batch"], i["heads"], i["seq_len"], i["bytes_per_element"])
    if isinstance(value, Tensor):
        if value.numel() != 1:
            raise NotAsAsked(
                f"score_matrix_bytes returned a tensor of shape {tuple(value.shape)}, not a number"
            )
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, numbers.Real):  # NumPy's numbers are Real too
        raise NotAsAsked(f"score_matrix_bytes returned a {type(value).__name__}, not a number of bytes")
    return {"bytes": torch.tensor(float(value), dtype=torch.float64)}


SCORE_MATRIX_BYTES = Check(
    name="11.score_matrix_bytes",
    target="score_matrix_bytes",
    run=run_bytes,
    points=1,
    hidden_points=1,
    outputs={"bytes": "the number of bytes"},
    hints=[
        "How many attention scores does one head compute for one sequence? One per pair of what?",
        "Test it: score_matrix_bytes(1, 1, 3, 4) is 36 (a 3 x 3 matrix of 4-byte floats), and doubling "
        "seq_len multiplies the result by 4.",
        "batch * heads matrices, each seq_len x seq_len, of bytes_per_element bytes each.",
        "Multiply the three counts: how many matrices (batch times heads), the entries of one (seq_len "
        "squared), the bytes of one entry. The result is a number of bytes, an int.",
    ],
)


# ----------------------------------------------------------------- Question 2: online softmax

SOFTMAX_CORE = "softmax over streamed blocks, ordinary logits"
SOFTMAX_STABLE = "logits as large as +-1000: no overflow, no 0 / 0"
ONE_BLOCK = "one block of the row at a time"
P_LARGEST, P_SHAPE = "largest intermediate", "largest intermediate's shape"
P_WIDEST = "widest reduction"


def run_online_softmax(online_softmax, case: Case) -> Outputs:
    scores, b = case.inputs["scores"], case.inputs["block_size"]
    if not case.inputs.get("measured"):
        return {"p": online_softmax(scores, b)}
    p, numel, shape, widest = measured_call(
        lambda: online_softmax(scores, b), [scores], "the result of online_softmax"
    )
    return {"p": p, P_LARGEST: numel, P_SHAPE: shape, P_WIDEST: widest}


# (rtol, atol) in float32. Logits near 1000 are stored to about 6e-5 (an ulp), and each weight
# exp(s - m) inherits that rounding: two correct orders of operations (scaling q or the scores, a
# log-sum-exp merge) then differ by up to about 3e-5, more than the central 1e-5. Every catalogued
# mistake is off by 1e-2 or more.
LARGE_LOGITS = (1e-4, 1e-4)


def _rows_sum_to_one(case: Case, out: Outputs) -> str | None:
    p = out.get("p")
    if p is None or p.shape != case.inputs["scores"].shape or not bool(torch.isfinite(p).all()):
        return None
    gap = (p.double().sum(-1) - 1).abs().max().item()
    return None if gap <= ACCUMULATED_GAP else f"a row of the result sums to 1 +- {gap:.3g}, not 1"


def _matches_torch_softmax(case: Case, out: Outputs) -> str | None:
    p, scores = out.get("p"), case.inputs["scores"]
    if p is None or p.shape != scores.shape:
        return None
    gap = (p.double() - torch.softmax(scores.double(), dim=-1)).abs().max().item()
    return (
        None
        if gap <= ACCUMULATED_GAP
        else f"the result is off torch.softmax(scores, dim=-1) by up to {gap:.3g}"
    )


def _one_block_at_a_time(case: Case, out: Outputs) -> str | None:
    if not case.inputs.get("measured"):
        return None
    if isinstance(seen := _measurement(out, P_LARGEST, P_SHAPE), str):
        return seen
    (numel, shape), scores, b = seen, case.inputs["scores"], case.inputs["block_size"]
    rows, n = scores.numel() // scores.shape[-1], scores.shape[-1]
    widest = out.get(P_WIDEST)
    if not (isinstance(widest, Tensor) and widest.numel() == 1 and not widest.is_floating_point()):
        return MISSING
    if int(widest) >= n:
        return (
            f"your code reduces {int(widest)} numbers at once (a max, a sum or a softmax over the whole row "
            f"of {n}), even if in place: the row was not streamed. Take each block's max and sum, and "
            "combine them with the running max and sum"
        )
    block = rows * min(b, n)
    if numel <= 2 * block:
        return None
    return (
        f"besides the result, your code creates a tensor of shape {shape} ({numel} elements), while one "
        f"block of every row is {rows} x {min(b, n)} = {block}: a tensor as wide as the row ({n} columns) "
        "means the row was not streamed (a plain softmax of the whole row, or exp(scores - m) / l computed "
        "on the whole row at the end). Hold one block at a time: the running max and sum per row, then "
        "each block's normalised values written into the result (or collected and joined with torch.cat)"
    )


# The library's softmax (notebook 01's list), and logsumexp (the normaliser in one call).
LIBRARY_SOFTMAX = (
    *_toolkit.LIBRARY_SOFTMAX,
    *library_calls("torch.logsumexp", "torch.Tensor.logsumexp", "torch.special.logsumexp"),
)

LIBRARY_ATTENTION = library_calls(
    "torch.nn.functional.scaled_dot_product_attention",
    "torch._scaled_dot_product_attention_math",
    "torch._scaled_dot_product_flash_attention_for_cpu",
    "torch.ops.aten._scaled_dot_product_flash_attention",
    "torch.ops.aten._scaled_dot_product_efficient_attention",
    "torch.ops.aten._scaled_dot_product_cudnn_attention",
    "torch.ops.aten._scaled_dot_product_fused_attention_overrideable",
    "torch.ops.aten._flash_attention_forward",
    "torch.ops.aten._efficient_attention_forward",
    "torch.nn.functional.multi_head_attention_forward",
    "torch._native_multi_head_attention",
)

# Traced (Check.forbidden_uses): PyTorch's attention kernels, and the operations of softmax's other
# spellings. Not gumbel_softmax, which draws random numbers: its softmax is the one traced already.
ATTENTION_USES = (*SDPA_USES, *MULTI_HEAD_ATTENTION_USES)


def _row_and_mask() -> tuple:
    scores = torch.linspace(-2.0, 2.0, 12).reshape(3, 4)
    return scores, scores > 1.0, -1


def _sparse_rows() -> tuple:
    return torch.linspace(-2.0, 2.0, 12).reshape(3, 4).to_sparse(), -1


def _logits_and_classes() -> tuple:
    return torch.linspace(-2.0, 2.0, 12).reshape(3, 4), torch.arange(3)


SOFTMAX_USES = (
    *_toolkit.SOFTMAX_USES,
    *(
        LibraryUse(name, sample_rows)
        for name in ("torch.logsumexp", "torch.Tensor.logsumexp", "torch.special.logsumexp")
    ),
    LibraryUse("torch._masked_softmax", _row_and_mask),
    LibraryUse("torch.sparse.softmax", _sparse_rows),
    LibraryUse("torch.sparse.log_softmax", _sparse_rows),
    LibraryUse("torch.nn.functional.cross_entropy", _logits_and_classes),
)

ONLINE_SOFTMAX = Check(
    name="11.online_softmax",
    extra_tolerance={torch.float32: LARGE_LOGITS},
    target="online_softmax",
    run=run_online_softmax,
    concerns=[
        Concern(SOFTMAX_CORE, weight=2),
        Concern(SOFTMAX_STABLE, weight=1),
        Concern(ONE_BLOCK, weight=1),
    ],
    outputs={
        "p": "the result of online_softmax(scores, block_size)",
        P_LARGEST: "the largest tensor your code created",
        P_SHAPE: "the shape of the largest tensor your code created",
        P_WIDEST: "the most numbers one reduction of your code took",
    },
    measured=(P_LARGEST, P_SHAPE, P_WIDEST),
    # a softmax reached another way counts as one: a masked or sparse softmax, exp(-cross_entropy),
    # an attention call with the scores as keys
    forbidden=(
        *LIBRARY_SOFTMAX,
        *library_calls(
            "torch._masked_softmax",
            "torch.sparse.softmax",
            "torch.sparse.log_softmax",
            "torch.nn.functional.cross_entropy",
            "torch.nn.functional.gumbel_softmax",
        ),
        *LIBRARY_ATTENTION,
    ),
    forbidden_uses=(*SOFTMAX_USES, *ATTENTION_USES),
    properties=[
        Property("rows sum to 1", _rows_sum_to_one),
        Property("matches torch.softmax", _matches_torch_softmax),
        Property("one block of the row at a time", _one_block_at_a_time, concern=ONE_BLOCK),
    ],
    error_hints=[
        ErrorHint(
            "Sizes of tensors must match except in dimension",
            "the normalised blocks do not fit together: join them along the last dimension, "
            "torch.cat(blocks, dim=-1), and make each row's running statistics (..., 1), with "
            "keepdim=True.",
        ),
    ],
    hints=[
        "Look at one row and two blocks. You know max and sum of exp(s - max) for the first block alone; a "
        "larger value arrives in the second. What has to happen to the sum you already have?",
        "Test it: for s = torch.randn(3, 10) * 3, online_softmax(s, 4) should equal torch.softmax(s, "
        "dim=-1) within 1e-6 (so should block_size 1 and block_size 16), and online_softmax(s + 1000, 4) "
        "should be the same, without NaN; so should online_softmax(s - 1000, 4).",
        "Per block: m_new = max(m, max of the block); l = l * exp(m - m_new) + sum(exp(block - m_new)); "
        "m = m_new. Start from m = -inf and l = 0. After the last block the row's softmax is "
        "exp(s - m) / l, computed block by block.",
        "m = torch.full((*scores.shape[:-1], 1), float('-inf')); for start in range(0, N, block_size): "
        "block = scores[..., start:start + block_size]; m_new = torch.maximum(m, block.amax(dim=-1, "
        "keepdim=True)); ...; then torch.cat([torch.exp(block - m) / l for each block], dim=-1).",
    ],
)


# ---------------------------------------------------------------- Question 3: tiled attention

NON_CAUSAL, CAUSAL = "non-causal attention", "causal attention"
MEMORY = "a tile of scores at a time: memory linear in T, never T x T"
LONG = "_long"
LARGEST_SHORT, LARGEST_LONG = (
    "largest intermediate at the short length",
    "largest intermediate at the long length",
)
SHAPE_SHORT, SHAPE_LONG = "its shape at the short length", "its shape at the long length"
WIDEST_LONG = "the widest reduction at the long length"
ATTENTION_MEASURED = {
    LARGEST_SHORT: "the largest tensor your code created at the shorter length",
    LARGEST_LONG: "the largest tensor your code created at the longer length",
    SHAPE_SHORT: "the shape of the largest tensor at the shorter length",
    SHAPE_LONG: "the shape of the largest tensor at the longer length",
    WIDEST_LONG: "the most numbers one reduction of your code took at the longer length",
}


def run_tiled_attention(tiled_attention, case: Case) -> Outputs:
    i = case.inputs
    bs, causal = i["block_size"], i["causal"]
    if "lengths" not in i:
        return {"output": tiled_attention(i["q"], i["k"], i["v"], bs, causal=causal)}
    outputs = {}
    for run, suffix, keys in (
        (i, "", (LARGEST_SHORT, SHAPE_SHORT)),
        (i["long"], LONG, (LARGEST_LONG, SHAPE_LONG)),
    ):
        q, k, v = run["q"], run["k"], run["v"]
        result = measured_call(
            lambda q=q, k=k, v=v: tiled_attention(q, k, v, bs, causal=causal),
            [q, k, v],
            "the attention output",
        )
        outputs["output" + suffix], outputs[keys[0]], outputs[keys[1]], widest = result
    outputs[WIDEST_LONG] = widest
    return outputs


def _attention(run: dict, causal: bool) -> Tensor:
    """F.scaled_dot_product_attention of a case's q, k and v, in float64."""
    q, k, v = (run[name].double() for name in "qkv")
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal)


def _gap_beyond(got: Tensor, want: Tensor) -> float | None:
    """How far `got` is off the float64 `want`, where that is past the accumulated rounding of
    float32 at want's scale; None within it (a NaN is past it)."""
    gap = (got.double() - want).abs().max().item()
    return None if gap <= ACCUMULATED_GAP * max(1.0, want.abs().max().item()) else gap


def _matches_sdpa(case: Case, out: Outputs) -> str | None:
    i = case.inputs
    for key, run in (("output", i), ("output" + LONG, i.get("long"))):
        got = out.get(key)
        if run is None or got is None or got.shape != run["q"].shape:
            continue
        if (gap := _gap_beyond(got, _attention(run, i["causal"]))) is not None:
            sdpa = f"F.scaled_dot_product_attention(q, k, v, is_causal={i['causal']})"
            return f"the output is off {sdpa} by up to {gap:.3g}"
    return None


def _describe(shape: tuple[int, ...], t: int, bs: int) -> str:
    """The shape with its sequence-long dimensions named."""
    long = [n for n in shape if t <= n < t + max(bs, 1)]
    if len(long) >= 2:
        return f"shape {shape}: T x T (T={t}), the whole matrix of scores or a full mask"
    if len(long) == 1:
        return f"shape {shape}: one side is the whole sequence (T={t})"
    return f"shape {shape}"


def _grows_like_t(case: Case, out: Outputs) -> str | None:
    short, long = (
        _measurement(out, *keys) for keys in ((LARGEST_SHORT, SHAPE_SHORT), (LARGEST_LONG, SHAPE_LONG))
    )
    for seen in (short, long):
        if isinstance(seen, str):
            return seen
    (n_short, _), (n_long, shape) = short, long
    (t_short, t_long), bs = case.inputs["lengths"], case.inputs["block_size"]
    growth = n_long / max(1, n_short)
    if growth <= 2 * t_long / t_short:
        return None
    return (
        f"the largest tensor your code creates besides the result holds {n_short} elements at "
        f"T={t_short} and {n_long} at T={t_long} ({_describe(shape, t_long, bs)}): {growth:.0f} times "
        f"more for {t_long / t_short:.0f} times the length, faster than T. Never build the (T, T) "
        "scores or mask: score one block of queries against one block of keys at a time, and mask "
        "the diagonal tiles with block-sized position ranges"
    )


def _online(case: Case, out: Outputs) -> str | None:
    """No reduction spans every key: a softmax (or max, or sum, or P V product) over all T keys of a
    row is an ordinary softmax of the whole row, whatever the tensors' sizes (in place, into a
    buffer, a few rows at a time). Scores of a key block against every query reduce over the
    block (FlashAttention-1's order): they pass."""
    widest, t_long = out.get(WIDEST_LONG), case.inputs["lengths"][1]
    if not (isinstance(widest, Tensor) and widest.numel() == 1 and not widest.is_floating_point()):
        return MISSING
    if int(widest) < t_long:
        return None
    return (
        f"at T={t_long} your code reduces {int(widest)} numbers at once: a max, a sum, a softmax or a "
        "product over every key of a row, an ordinary softmax of the whole row. Loop over the key "
        "blocks too, keeping the running max, sum and output"
    )


TILED_ATTENTION = Check(
    name="11.tiled_attention",
    extra_tolerance={torch.float32: LARGE_LOGITS},
    target="tiled_attention",
    run=run_tiled_attention,
    concerns=[Concern(NON_CAUSAL, weight=2), Concern(CAUSAL, weight=1), Concern(MEMORY, weight=2)],
    outputs={
        "output": "the attention output",
        "output" + LONG: "the attention output at the longer length",
        **ATTENTION_MEASURED,
    },
    measured=tuple(ATTENTION_MEASURED),
    forbidden=LIBRARY_ATTENTION,
    forbidden_uses=ATTENTION_USES,
    properties=[
        Property("matches F.scaled_dot_product_attention", _matches_sdpa),
        Property("the largest intermediate grows like T, not T squared", _grows_like_t, concern=MEMORY),
        Property("no reduction over every key (the softmax stays online)", _online, concern=MEMORY),
    ],
    error_hints=[
        ErrorHint(
            "must match the size of tensor",
            "two blocks of different lengths meet: the last block of queries or keys is shorter when T is no "
            "multiple of block_size. Slice with q[:, :, start:start + block_size] (a slice past the end is "
            "shorter, not an error) and size masks and running statistics from the slices you got.",
        ),
    ],
    hints=[
        "For one block of queries, the keys come in blocks: it is the online softmax of Question 2, with an "
        "accumulator of weighted values beside the running sum. When the running max grows, which of your "
        "running quantities were computed against the old max?",
        "Test it against F.scaled_dot_product_attention(q, k, v, is_causal=causal) for T = 10 with "
        "block_size 4, 1 and 16, causal or not, and with q multiplied by 100 (no NaN).",
        "Per tile: s = q_blk @ k_blk^T / sqrt(Dh) (b x b); m_new = max(m, rowmax(s)); p = exp(s - m_new); "
        "c = exp(m - m_new); l = c * l + rowsum(p); acc = c * acc + p @ v_blk; m = m_new. After the last key "
        "block, the block's output is acc / l. Causal: skip the key blocks that start after the block's last "
        "query, and on the diagonal tile set s to -inf where the key's position exceeds the query's.",
        "Two loops: the outer over query blocks starting at 0, block_size, 2 * block_size, ... (the last "
        "may be shorter), with m = -inf, l = 0 and acc = 0 made afresh for each; the inner over key blocks "
        "up to the last key the block may see. Keep each query block's acc / l in a list and torch.cat it "
        "along dim 2. Positions for the mask: torch.arange(start, start + rows)[:, None] and "
        "torch.arange(key_start, key_start + cols)[None, :].",
    ],
)


# ------------------------------------------------------ Question 4: merging softmax states

TWO_PARTS = "two parts of the keys, split anywhere, and a merged state merged again"
EMPTY_PART = "causal: queries that see no key of one part"
LARGE_SCORES = "scores near +-140: both maxima large, or far apart"
STATE_OUTPUTS = {
    "output": "the merged state's output acc / l",
    "log_sum_exp": "the merged state's m + log(l), each query's log-sum-exp over the keys",
}


def _state(value, like: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """What a merge returned, held to what the next merge takes: (m, l, acc) shaped like a part's."""
    if not (
        isinstance(value, tuple | list) and len(value) == 3 and all(isinstance(t, Tensor) for t in value)
    ):
        what = f"a {type(value).__name__}" + (f" of {len(value)}" if isinstance(value, tuple | list) else "")
        raise NotAsAsked(f"merge_softmax_states returned {what}, not a tuple (m, l, acc) of three tensors")
    rows, shapes = (*like.shape[:-1], 1), tuple(tuple(t.shape) for t in value)
    if shapes != (rows, rows, tuple(like.shape)):
        raise NotAsAsked(
            f"merge_softmax_states returned tensors of shapes {shapes}: a state is m and l of shape {rows} "
            f"and acc of shape {tuple(like.shape)}, in that order"
        )
    return value[0], value[1], value[2]


def run_merge(merge_softmax_states, case: Case) -> Outputs:
    """The parts merged from the first, each merge taking the state the last returned."""
    parts = case.inputs["parts"]
    state = parts[0]
    for part in parts[1:]:
        state = _state(merge_softmax_states(state, part), like=part[2])
    m, total, acc = state
    return {"output": acc / total, "log_sum_exp": m + torch.log(total)}


def _scores(case: Case) -> Tensor:
    """Every query's scores against every key, in float64, the future masked when causal."""
    q, k = (case.inputs[name].double() for name in "qk")
    s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if case.inputs["causal"]:
        t = s.shape[-1]
        s = s.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf"))
    return s


def _merged_is_attention(case: Case, out: Outputs) -> str | None:
    got = out.get("output")
    if got is None or got.shape != case.inputs["q"].shape:
        return None
    if (gap := _gap_beyond(got, _attention(case.inputs, case.inputs["causal"]))) is None:
        return None
    return f"acc / l of the merged state is off attention over all the keys by up to {gap:.3g}"


def _merges_again(case: Case, out: Outputs) -> str | None:
    got, want = out.get("log_sum_exp"), torch.logsumexp(_scores(case), dim=-1, keepdim=True)
    if got is None or got.shape != want.shape or (gap := _gap_beyond(got, want)) is None:
        return None
    return (
        "m + log(l) of the merged state is off each query's log-sum-exp over all the keys by up to "
        f"{gap:.3g}: l must be the sum of exp(score - m) over the keys of both parts, against the m "
        "you return"
    )


MERGE_SOFTMAX_STATES = Check(
    name="11.merge_softmax_states",
    added=True,
    target="merge_softmax_states",
    run=run_merge,
    extra_tolerance={torch.float32: LARGE_LOGITS},
    concerns=[Concern(TWO_PARTS, weight=2), Concern(EMPTY_PART, weight=1), Concern(LARGE_SCORES, weight=1)],
    outputs=STATE_OUTPUTS,
    properties=[
        Property("acc / l is attention over all the keys", _merged_is_attention),
        Property("m + log(l) is the log-sum-exp over all the keys: the state merges again", _merges_again),
    ],
    hints=[
        "Each part's l and acc were summed against its own maximum. Against which maximum must the merged "
        "ones be summed, and what factor turns a sum taken against m_a into one taken against it?",
        "Test it: split the keys of a small q, k, v at several points, merge the two attention_state(...) "
        "results and compare acc / l with F.scaled_dot_product_attention; then causal with the split at 3, "
        "where the first three queries see no key of the second part.",
        "The merged m is the larger of the two maxima; each part's l and acc take the factor "
        "exp(m_part - m); the merged l and acc are the sums of the rescaled parts. It is one step of "
        "Question 3's update, with a whole part in the place of a block.",
        "A part whose m is -inf (no key visible) has l = 0 and acc = 0, and exp(-inf - m) is 0 as long as "
        "the merged m is finite: take torch.maximum of the two m, never the first part's m alone, so that "
        "no -inf - (-inf) appears.",
    ],
)

CHECKS = [SCORE_MATRIX_BYTES, ONLINE_SOFTMAX, TILED_ATTENTION, MERGE_SOFTMAX_STATES]
