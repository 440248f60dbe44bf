"""Checks of notebook 09, KV cache and generation.

Key: B batch, T tokens in one call, L tokens of a whole sequence, D hidden size, H query heads,
Hkv key/value heads (n_kv_heads), Dh head_dim = D // H, C max_seq_len (the cache's length),
W window_size, V vocabulary size, P prompt length, N new tokens.

A call of the cached layer takes x (B, T, D) at absolute positions start_pos .. start_pos + T - 1,
writes its keys and values into the cache there, and attends over the cache's first
start_pos + T positions. The checks feed a sequence to it in chunks (a prefill, then chunks and
single tokens, as generation does) and compare every step with the reference and with one
prefill of the whole sequence.
"""

import contextlib
import math
import operator

import torch
import torch.nn as nn

from ..core import (
    ACCUMULATED_GAP,
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
from ._toolkit import rope_replaced

Tensor = torch.Tensor


def _plain(value, what: str) -> Tensor:
    """A plain tensor (no subclass, which could put its work off until it is read), detached."""
    if type(value) is not torch.Tensor:
        raise NotAsAsked(f"{what} is a {type(value).__name__}, not a torch.Tensor")
    return value.detach().clone()


# ------------------------------------------------------------------------- RoPE at positions

ROPE_CORE = "rotations at the absolute positions start_pos .. start_pos + T - 1"
ROPE_OMITTED = "forward(queries, keys) without start_pos is notebook 04's RoPE"


def run_rope(rope_class, case: Case) -> Outputs:
    i = case.inputs
    rope = rope_class(i["rotation_matrix"])
    if i["start_pos"] is None:
        q, k = rope(i["q"], i["k"])
    else:
        q, k = rope(i["q"], i["k"], i["start_pos"])
    return {"queries": q, "keys": k}


def start_position(inputs: dict) -> int:
    """The position of a case's first token (start_pos None: 0)."""
    return inputs["start_pos"] or 0


def _at_absolute_positions(case: Case, out: Outputs) -> str | None:
    for name, key in (("queries", "q"), ("keys", "k")):
        x, got = case.inputs[key], out[name]
        if got.shape != x.shape:
            return None
        want = case.judge_only[key]
        gap = (got.float() - want).abs().amax(dim=(0, 1, 3))  # (T,): per token
        if gap.max().item() > ACCUMULATED_GAP:
            t = int(gap.argmax())
            position = start_position(case.inputs) + t
            return (
                f"the {name} token at index {t} (position {position}) is not turned by row "
                f"{position} of the table: off by {gap.max().item():.3g}"
            )
    return None


ROPE_POSITIONS = Check(
    name="09.rope_positions",
    target="RoPE",
    answer="rope_positions",
    run=run_rope,
    concerns=[Concern(ROPE_CORE, weight=3), Concern(ROPE_OMITTED, weight=1)],
    outputs={"queries": "the tensor of rotated queries", "keys": "the tensor of rotated keys"},
    properties=[Property("token t turned by row start_pos + t of the table", _at_absolute_positions)],
    error_hints=[
        ErrorHint(
            "must match the size of tensor",
            "the rows taken from the table do not fit the call's T tokens: each token needs the one row "
            "of its own position, T rows of Dh // 2 in all.",
        ),
        ErrorHint(
            "takes 3 positional arguments but 4 were given",
            "keep the given signature: forward(self, queries, keys, start_pos=0).",
        ),
    ],
    hints=[
        "In generation a call holds the tokens at positions start_pos .. start_pos + T - 1 of the "
        "sequence, not 0 .. T - 1: which rows of the table do they need?",
        "Test it: rotating a whole sequence at once and rotating its last 3 tokens alone with "
        "start_pos = T - 3 must give the same last 3 rows: rope(q, k)[0][:, :, -3:] equals "
        "rope(q[:, :, -3:], k[:, :, -3:], T - 3)[0].",
        "Notebook 04's forward with rotation_matrix[start_pos : start_pos + T] in place of "
        "rotation_matrix[:T]; start_pos = 0 gives notebook 04's RoPE back.",
    ],
)

# ------------------------------------------------------------------------------ repeat_kv


def run_repeat(repeat_kv, case: Case) -> Outputs:
    return {"repeated": repeat_kv(case.inputs["x"], case.inputs["n_rep"])}


def _grouped(case: Case, out: Outputs) -> str | None:
    x, n, got = case.inputs["x"], case.inputs["n_rep"], out["repeated"]
    if got.shape != (x.shape[0], x.shape[1] * n, *x.shape[2:]):
        return None
    for head in range(got.shape[1]):
        if not torch.equal(got[:, head], x[:, head // n]):
            return f"query head {head} should read key/value head {head} // {n} = {head // n}, and does not"
    return None


REPEAT_KV = Check(
    name="09.repeat_kv",
    target="repeat_kv",
    run=run_repeat,
    hidden_points=1,
    outputs={"repeated": "the repeated tensor"},
    properties=[Property("query head h reads key/value head h // n_rep", _grouped)],
    hints=[
        "The output has H = Hkv * n_rep heads; query head h shares the keys of head h // n_rep, so the "
        "n_rep copies of each key/value head sit next to each other: [k0, k0, k1, k1] for n_rep = 2.",
        "Test it: repeat_kv(torch.arange(2.).view(1, 2, 1, 1), 2).flatten() must be [0, 0, 1, 1], not "
        "[0, 1, 0, 1].",
        "x[:, :, None] has shape (B, Hkv, 1, T, Dh); expand it to (B, Hkv, n_rep, T, Dh) and reshape to "
        "(B, Hkv * n_rep, T, Dh). torch.repeat_interleave(x, n_rep, dim=1) gives the same, with a copy.",
    ],
)

# -------------------------------------------------------------------- the cached attention

DECODE = "a prefill, then chunks and single tokens at start_pos > 0"
PREFILL = "one prefill from position 0 (the causal forward)"
GQA = "grouped-query attention (n_kv_heads < num_heads), in a prefill and step by step"
WINDOW = "a sliding window (window_size=W)"
CACHE = "the cache: (max_batch_size, n_kv_heads, max_seq_len, head_dim), keys rotated, written at start_pos"


def build_cached_layer(layer_class, inputs: dict):
    """The student's layer at the case's sizes, with the case's weights (any bias set to zero)."""
    layer = layer_class(*inputs["config"], inputs["rotation_matrix"], window_size=inputs["window_size"])
    for name, weight in inputs["weights"].items():
        linear = getattr(layer, name, None)
        if not isinstance(linear, nn.Linear):
            raise NotAsAsked(
                f"the layer has no nn.Linear `{name}`: keep the given projections wq, wk, wv, wo"
            )
        with torch.no_grad():
            linear.weight.copy_(weight)
            if linear.bias is not None:
                linear.bias.zero_()
    return layer


def _fed_in_chunks(layer, x: Tensor, chunks: list[int]) -> Tensor:
    steps, start = [], 0
    for size in chunks:
        steps.append(_plain(layer(x[:, start : start + size], start), "the layer's output"))
        start += size
    return torch.cat(steps, dim=1)


def run_kv_cache(targets, case: Case) -> Outputs:
    layer_class, rope_class, repeat_kv = targets
    i = case.inputs
    probe = _repeat_probe(repeat_kv, i)
    # A repeat_kv that fails Question 2's probe is charged there (09.repeat_kv): the layer runs with one
    # that is right, so that the same bug costs no points here.
    stand_in = {} if _repeats_as_asked(case, probe) else {"repeat_kv": _repeat_stand_in(i["config"][2])}
    with torch.no_grad(), names_replaced(layer_class, stand_in):
        layer = rope_replaced(build_cached_layer(layer_class, i), rope_class, "Question 1")
        if "earlier" in i:
            layer(i["earlier"], 0)
        output = _fed_in_chunks(layer, i["x"], i["chunks"])
        if case.concern == CACHE:  # the cache alone: a bug of the mask costs nothing here
            outputs = _cache_contents(layer, *i["x"].shape[:2], h_kv=i["config"][2])
        else:
            outputs = {"output": output}
        if len(i["chunks"]) > 1 and case.concern != CACHE:  # the same sequence in one prefill, fresh layer
            whole = i["x"].shape[1]
            fresh = rope_replaced(build_cached_layer(layer_class, i), rope_class, "Question 1")
            outputs["one_prefill"] = _fed_in_chunks(fresh, i["x"], [whole])
    return outputs | probe


def _cache_contents(layer, b: int, end: int, h_kv: int) -> Outputs:
    """The cache's shape and its first `end` positions, in the layout (max_batch_size, n_kv_heads,
    max_seq_len, head_dim); Llama's layout (max_batch_size, max_seq_len, n_kv_heads, head_dim), which
    the question does not ask for but is as right, is read transposed."""
    outputs = {}
    for name in ("cache_k", "cache_v"):
        cache = getattr(layer, name, None)
        if type(cache) is not torch.Tensor:
            raise NotAsAsked(f"the layer has no tensor `self.{name}`: allocate it in __init__")
        if cache.dim() == 4 and cache.shape[2] == h_kv and cache.shape[1] != h_kv:
            cache = cache.transpose(1, 2)  # Llama's layout
        outputs[f"{name}_shape"] = torch.tensor(cache.shape)
        outputs[name] = cache[:b, :, :end].detach().clone()
    return outputs


def _repeat_probe(repeat_kv, inputs: dict) -> Outputs:
    """The notebook's repeat_kv on its own: a bug of it is then named as one. A diagnosis never fails
    a check, whatever the code does."""
    found = {}
    with contextlib.suppress(Exception):
        h, h_kv = inputs["config"][1:3]
        found["repeat_probe"] = _plain(repeat_kv(inputs["probe_kv"], h // h_kv), "")
    return found


def _steps_equal_one_prefill(case: Case, out: Outputs) -> str | None:
    got, whole = out.get("output"), out.get("one_prefill")
    if got is None or whole is None or got.shape != whole.shape or got.dim() != 3:
        return None
    start = 0
    for step, size in enumerate(case.inputs["chunks"]):
        gap = (got[:, start : start + size] - whole[:, start : start + size]).abs().max().item()
        if not gap <= ACCUMULATED_GAP:
            return (
                f"step {step + 1} (start_pos={start}, T={size}) differs from one prefill of the whole "
                f"sequence by {gap:.3g}: each step must give the rows the full causal forward gives"
            )
        start += size
    return None


def _repeat_stand_in(n_kv_heads: int):
    """A right repeat_kv, for a layer whose own is wrong: it repeats the heads' dimension of (B, Hkv, T,
    Dh), or of Llama's (B, T, Hkv, Dh) that a layer may have been written for."""

    def repeat_kv(x: Tensor, n_rep: int) -> Tensor:
        return x.repeat_interleave(n_rep, dim=1 if x.shape[1] == n_kv_heads else 2)

    return repeat_kv


def _repeats_as_asked(case: Case, out: Outputs) -> bool:
    """Whether the notebook's repeat_kv gave query head h the key/value head h // n_rep on the probe
    (False when it raised)."""
    got, x = out.get("repeat_probe"), case.inputs["probe_kv"]
    h, h_kv = case.inputs["config"][1:3]
    if got is None:
        return False
    want = x.repeat_interleave(h // h_kv, dim=1)
    return got.shape == want.shape and torch.allclose(got, want)


def _repeat_kv_from_question_2(case: Case, out: Outputs) -> str | None:
    if out.get("repeat_probe") is None or _repeats_as_asked(case, out):
        return None
    return (
        "your repeat_kv (Question 2) does not give query head h the key/value head h // n_rep: fix it first"
    )


KV_CACHE = Check(
    name="09.kv_cache",
    target=("CachedAttention", "RoPE", "repeat_kv"),
    answer="kv_cache",
    run=run_kv_cache,
    points=1,
    hidden_points=3,
    concerns=[
        Concern(DECODE, weight=2),
        Concern(PREFILL, weight=1),
        Concern(GQA, weight=1),
        Concern(WINDOW, weight=1),
        Concern(CACHE, weight=1),
    ],
    outputs={
        "output": "the layer's outputs, step after step",
        "one_prefill": "the output of one prefill of the whole sequence",
        "cache_k": "the cached keys cache_k[:B, :, :L]",
        "cache_v": "the cached values cache_v[:B, :, :L]",
        "cache_k_shape": "the shape of cache_k",
        "cache_v_shape": "the shape of cache_v",
        "repeat_probe": "what your repeat_kv returns",
    },
    measured=("one_prefill", "repeat_probe"),
    diagnostic=("RoPE", "repeat_kv"),  # RoPE: to find the layer's own, which a stand-in replaces
    properties=[
        Property("every step equals one prefill of the whole sequence", _steps_equal_one_prefill),
        Property("your repeat_kv from Question 2 is right", _repeat_kv_from_question_2, names_only=True),
    ],
    error_hints=[
        ErrorHint(
            "has no attribute 'cache_k'",
            "the layer holds no cache: __init__ should store self.cache_k and self.cache_v, zeros of "
            "shape (max_batch_size, n_kv_heads, max_seq_len, head_dim), as the question says.",
        ),
        ErrorHint(
            "must match the size of tensor",
            "shapes in forward: q (B, H, T, Dh), the cached keys (B, Hkv, start_pos + T, Dh) before "
            "repeat_kv and (B, H, start_pos + T, Dh) after; the mask (T, start_pos + T) has one row per new "
            "query and one column per cached key.",
        ),
        ErrorHint(
            "The expanded size of the tensor",
            "what is written into the cache, or read from it, does not fit the slice it goes to: "
            "compare the sizes in the error. A call's batch B may be smaller than max_batch_size (it "
            "uses the cache's first B rows), and its T tokens take positions start_pos to "
            "start_pos + T - 1.",
        ),
        ErrorHint(
            "to be no larger than self",
            "scatter_'s index has the shape of what it writes: one position, start_pos to "
            "start_pos + T - 1, for each of k's entries; slicing the cache at those positions writes the "
            "same without an index.",
        ),
        ErrorHint(
            "The size of tensor a",
            "shapes in forward: q (B, H, T, Dh), the cached keys (B, Hkv, start_pos + T, Dh) before "
            "repeat_kv and (B, H, start_pos + T, Dh) after; the mask (T, start_pos + T) has one row per new "
            "query and one column per cached key.",
        ),
    ],
    hints=[
        "A call sees only its T new tokens. Where in the cache do their keys and values go, which cached "
        "positions may query i (at position start_pos + i) look at, and which must it not (later ones, "
        "ones past the current end, ones left from an earlier sequence)?",
        "Test it in a new cell: layer(x, 0) on a whole sequence, then, in a fresh layer, layer(x[:, :4], 0) "
        "followed by layer(x[:, t:t+1], t) for t = 4, 5, ...: every step must give the matching row of "
        "the whole-sequence output (torch.allclose with atol=1e-5).",
        "Rotate q and k with self.rope(q, k, start_pos) before caching k; write "
        "self.cache_k[:B, :, start_pos:start_pos + T] = k; read keys = self.cache_k[:B, :, :start_pos + T]. "
        "Query i sits at position start_pos + i and sees key j when j <= start_pos + i (and, with a window, "
        "j > start_pos + i - W).",
        "scores (B, H, T, start_pos + T) = q @ repeat_kv(keys, H // Hkv).transpose(-2, -1) / sqrt(Dh); "
        "fill the hidden ones with -inf, softmax over the last dimension, times the repeated values, "
        "merge the heads back to (B, T, H * Dh) and apply wo.",
    ],
)

# ---------------------------------------------------------------------------- cache memory


def run_memory(kv_cache_bytes, case: Case) -> Outputs:
    value = kv_cache_bytes(**case.inputs)
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        value = value.item()
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    try:
        value = operator.index(value)  # an int, or a NumPy integer
    except TypeError:
        raise NotAsAsked(f"kv_cache_bytes returned {value!r}, not a whole number of bytes") from None
    return {"bytes": torch.tensor(value, dtype=torch.float64)}  # float64: exact below 2**53


CACHE_BYTES = Check(
    name="09.cache_bytes",
    target="kv_cache_bytes",
    run=run_memory,
    hidden_points=1,
    outputs={"bytes": "the number of bytes"},
    hints=[
        "What does the cache hold, per layer, per sequence of the batch and per position: how many "
        "vectors, of how many numbers? Which of num_heads and n_kv_heads sets that?",
        "Check your formula against the layer you built: CachedAttention(...).cache_k.nbytes + "
        ".cache_v.nbytes is one layer's cache in float32 (bytes_per_value = 4).",
        "Keys and values (2) x layers x batch x positions x key/value heads x head_dim x bytes per value. "
        "num_heads is not in it: that is the saving of grouped-query attention.",
    ],
)

# ------------------------------------------------------------------ sampling distribution

TEMPERATURE = "softmax(logits / temperature)"
TOP_K = "top_k keeps the k largest logits"
GREEDY = "temperature 0 is greedy: all the probability on the argmax, no division by zero"


def run_sampling(sampling_distribution, case: Case) -> Outputs:
    i = case.inputs
    return {"probabilities": sampling_distribution(i["logits"].clone(), i["temperature"], i["top_k"])}


def _sums_to_one(probabilities: Tensor | None, shape: torch.Size) -> str | None:
    """Why rows of `probabilities` do not sum to 1 (the furthest one), if they have `shape`."""
    if probabilities is None or probabilities.shape != shape:
        return None
    gaps = probabilities.double().sum(-1) - 1
    gap = gaps.flatten()[gaps.abs().argmax()].item()
    return None if abs(gap) <= FLOAT32_GAP else f"a row of probabilities sums to {1 + gap:.6g}, not 1"


def _rows_sum_to_one(case: Case, out: Outputs) -> str | None:
    return _sums_to_one(out["probabilities"], case.inputs["logits"].shape)


def _zero_outside_top_k(case: Case, out: Outputs) -> str | None:
    p, logits, k = out["probabilities"], case.inputs["logits"], case.inputs["top_k"]
    if k is None or p.shape != logits.shape:
        return None
    kept = torch.zeros_like(logits, dtype=torch.bool).scatter_(-1, logits.topk(k, dim=-1).indices, True)
    leaked = p.masked_fill(kept, 0).abs().max().item()
    return None if leaked == 0 else f"a token outside the top {k} has probability {leaked:.3g}"


SAMPLING = Check(
    name="09.sampling_distribution",
    target="sampling_distribution",
    run=run_sampling,
    concerns=[Concern(TEMPERATURE, weight=2), Concern(TOP_K, weight=1), Concern(GREEDY, weight=1)],
    outputs={"probabilities": "the tensor of probabilities"},
    properties=[
        Property("each row sums to 1", _rows_sum_to_one),
        Property("tokens outside the top k get probability 0", _zero_outside_top_k),
    ],
    hints=[
        "Temperature divides the logits before the softmax: below 1 it sharpens the distribution, above "
        "1 it flattens it. What does it tend to as the temperature goes to 0, and why can't the code "
        "divide by 0 to get there?",
        "Test it: sampling_distribution(torch.tensor([[2., 1., 0.]]), 0.0) must be [[1, 0, 0]]; with "
        "top_k=2 the last token gets exactly 0; every row sums to 1 (torch.allclose, not ==).",
        "Top-k first: logits below the k-th largest (torch.topk(logits, k).values[..., -1:]) become "
        "-inf. Then temperature 0: one-hot at the argmax; otherwise softmax(logits / temperature, dim=-1).",
    ],
)

# --------------------------------------------------------------------------- generation


class StandInModel(nn.Module):
    """What 09.generate hands to generate(): model(tokens (B, T), start_pos) -> logits (B, T, V),
    the logits of a token being table[token] + bias[position]. It records each call's (T, start_pos):
    a generation that uses the cache feeds the prompt once, then one token at a time."""

    def __init__(self, table: Tensor, position_bias: Tensor):
        super().__init__()
        self.register_buffer("table", table)  # (V, V)
        self.register_buffer("position_bias", position_bias)  # (C, V)
        self.calls: list[tuple[int, int]] = []

    def forward(self, tokens: Tensor, start_pos: int) -> Tensor:
        if type(tokens) is not torch.Tensor or tokens.dim() != 2 or tokens.dtype != torch.long:
            raise TypeError("the model takes token ids as a LongTensor of shape (B, T)")
        start_pos = int(start_pos)
        T = tokens.shape[1]
        if start_pos < 0 or start_pos + T > len(self.position_bias):
            positions = len(self.position_bias)
            raise IndexError(
                f"start_pos={start_pos} with T={T} tokens runs past the model's {positions} positions"
            )
        self.calls.append((T, start_pos))
        return self.table[tokens] + self.position_bias[start_pos : start_pos + T]


GREEDY_RUN = "greedy (temperature 0) and top_k=1: the tokens and the model's calls"
SAMPLED = "sampling: seeded, reproducible, from the right distribution"


def _generated(generate, case: Case) -> tuple[Tensor, list[tuple[int, int]], bool]:
    """The tokens, the model's calls, and whether generate drew from the generator it was given."""
    i = case.inputs
    model = StandInModel(i["table"], i["position_bias"])
    generator = torch.Generator().manual_seed(i["seed"])
    before = generator.get_state()
    tokens = generate(
        model, i["prompt"].clone(), i["max_new_tokens"], i["temperature"], i["top_k"], generator
    )
    drew = not torch.equal(before, generator.get_state())
    return _plain(tokens, "what generate returned"), model.calls, drew


def run_generate(targets, case: Case) -> Outputs:
    generate, _ = targets
    tokens, calls, drew = _generated(generate, case)
    if case.concern == SAMPLED:
        again, _, _ = _generated(generate, case)
        other_seed = Case(case.name, {**case.inputs, "seed": case.inputs["seed"] + 1}, concern=case.concern)
        other, _, _ = _generated(generate, other_seed)
        return {
            "sampled": tokens,
            "sampled_again": again,
            "sampled_other_seed": other,
            "generator_used": torch.tensor(int(drew)),
            "sampled_calls": _calls(calls, case),
        }
    # A call after the last token (its logits unused) is allowed: only the first N calls count.
    # The calls first: a wrong position is named there before it shows in the tokens.
    return {"calls": _calls(calls, case), "tokens": tokens}


def _calls(calls: list[tuple[int, int]], case: Case) -> Tensor:
    return torch.tensor(calls[: case.inputs["max_new_tokens"]], dtype=torch.long).reshape(-1, 2)


def _first_token_logits(case: Case) -> Tensor:
    """The logits that give the first new token: every row of a sampled case's prompt is the same."""
    i = case.inputs
    return i["table"][i["prompt"][0, -1]] + i["position_bias"][i["prompt"].shape[1] - 1]


def _kept(logits: Tensor, top_k: int | None) -> Tensor:
    """The logits (..., V) sampling keeps: top_k's, the others -inf."""
    if top_k is None:
        return logits
    return logits.masked_fill(logits < logits.topk(top_k, dim=-1).values[..., -1:], float("-inf"))


SAMPLED_KEYS = ("sampled", "sampled_again", "sampled_other_seed")


def _sampled_form(case: Case, out: Outputs) -> str | None:
    i = case.inputs
    b, p = i["prompt"].shape
    want = (b, p + i["max_new_tokens"])
    for key in SAMPLED_KEYS:
        got = out.get(key)
        if got is None:
            return f"{GENERATE.describe(key)} did not come back"
        if tuple(got.shape) != want or got.dtype != torch.long:
            return (
                f"{GENERATE.describe(key)} has shape {tuple(got.shape)} and dtype {got.dtype}: expected "
                f"(B, P + N) = {want}, torch.long"
            )
        if not torch.equal(got[:, :p], i["prompt"]):
            return f"{GENERATE.describe(key)} should start with the prompt"
    return None


def step_margins(case: Case, tokens: Tensor, calls: Tensor | None = None) -> Tensor | None:
    """(N, V): for each new token and each token id, how far its count over the B rows is from the
    sum of its probabilities given the token before it (softmax(top-k(logits) / temperature) of the
    stand-in model), over 5 standard errors plus 5 draws: above 1 fails. Below 1 / B a token's draws
    are Poisson, not normal: the 5 draws keep one draw of a rare token from failing a correct run.
    Of 1000 seeds of the reference and four correct alternatives, the largest margin was 0.857 (seed
    158, `benchmarks/hardest_seeds.py 09.generate --seeds 1000`): worked out exactly for the first
    token, a correct generation fails about 2e-6 of the hidden gradings (tests/test_kv_cache.py).
    None for tokens that are not (B, P + N) token ids (the form property says why).

    The logits are those at the last position of each of the first N calls, `calls` ((T, start_pos)
    rows): a token fed at a wrong position is the greedy part's to charge, so the draws are judged
    against what the model gave the student's own calls. Without calls, or with calls of another
    form, the right positions."""
    i = case.inputs
    b, p = i["prompt"].shape
    n, v = i["max_new_tokens"], len(i["table"])
    if tokens.shape != (b, p + n) or tokens.dtype != torch.long or bool(((tokens < 0) | (tokens >= v)).any()):
        return None
    before = tokens[:, p - 1 : -1]  # (B, N): the token before each new one
    positions = torch.arange(p - 1, p + n - 1)
    if calls is not None and calls.shape == (n, 2) and calls.dtype == torch.long:
        last = calls[:, 1] + calls[:, 0] - 1  # the last position of each call
        if bool(((last >= 0) & (last < len(i["position_bias"]))).all()):
            positions = last
    logits = i["table"][before] + i["position_bias"][positions]  # (B, N, V)
    probabilities = torch.softmax(_kept(logits, i["top_k"]).double() / i["temperature"], dim=-1)  # (B, N, V)
    drawn = nn.functional.one_hot(tokens[:, p:], v).double()  # (B, N, V)
    off = (drawn - probabilities).sum(0).abs()  # (N, V)
    return off / (5 * (probabilities * (1 - probabilities)).sum(0).sqrt() + 5)


def _every_step(case: Case, out: Outputs) -> str | None:
    got, i = out.get("sampled"), case.inputs
    if got is None or _sampled_form(case, out):
        return None  # the form property says why
    margins = step_margins(case, got, out.get("sampled_calls"))
    if margins is None:
        return f"a new token is not a token id: it must lie in 0 .. {len(i['table']) - 1}"
    if bool((margins <= 1).all()):
        return None
    step, token = divmod(int(margins.argmax()), margins.shape[1])
    count = int((got[:, i["prompt"].shape[1] + step] == token).sum())
    top_k = f" (the top {i['top_k']} kept)" if i["top_k"] else ""
    return (
        f"new token {step + 1} was {token} in {count} of {got.shape[0]} rows, far from what "
        f"softmax(logits / temperature){top_k} of the token before it gives"
    )


def _generator_used(case: Case, out: Outputs) -> str | None:
    used = out.get("generator_used")
    if used is None or int(used) == 1:
        return None
    return "generate never drew from the generator it was given: draw with generator=generator"


def _differ(a: Tensor | None, b: Tensor | None) -> bool:
    """Whether two runs' tokens, both of one form, differ."""
    return a is not None and b is not None and a.shape == b.shape and not torch.equal(a, b)


def _same(a: Tensor | None, b: Tensor | None) -> bool:
    """Whether two runs gave the same tokens."""
    return a is not None and b is not None and a.shape == b.shape and torch.equal(a, b)


def _reproducible(case: Case, out: Outputs) -> str | None:
    if not _differ(out.get("sampled"), out.get("sampled_again")):
        return None
    return "two runs with generators seeded alike gave different tokens: draw with generator=generator"


def _seed_used(case: Case, out: Outputs) -> str | None:
    """Runs seeded differently must differ: the first new tokens of two independent runs agree on
    a row with probability sum(p^2), on all b rows with sum(p^2)^b (< 1e-8 for sum(p^2) <= 0.99)."""
    a, b = out.get("sampled"), out.get("sampled_other_seed")
    i = case.inputs
    want = torch.softmax(_kept(_first_token_logits(case), i["top_k"]).double() / i["temperature"], dim=-1)
    if (want**2).sum() > 0.99 or not _same(a, b):
        return None
    return (
        "two runs with generators seeded differently gave the same tokens: draw with "
        "generator=generator, and do not seed the global RNG inside generate"
    )


SAMPLED_PROPERTIES = [
    Property("generate returns (B, P + N) tokens, the prompt first", _sampled_form, concern=SAMPLED),
    Property("every new token follows softmax(logits / temperature)", _every_step, concern=SAMPLED),
    Property("the same seed gives the same tokens", _reproducible, concern=SAMPLED),
    Property("another seed gives other tokens", _seed_used, concern=SAMPLED),
    Property("the generator given is drawn from", _generator_used, concern=SAMPLED),
]


def _sampling_from_question_5(case: Case, out: Outputs) -> str | None:
    got = out.get("sampling_probe")
    if got is None:
        return None
    logits = case.inputs["table"][:2]
    want = torch.cat(
        [torch.softmax(logits / 0.7, dim=-1), nn.functional.one_hot(logits.argmax(-1), len(logits[0]))]
    )
    if got.shape == want.shape and torch.allclose(got.float(), want.float(), atol=FLOAT32_GAP):
        return None
    return (
        "your sampling_distribution (Question 5) is wrong at temperature 0.7 or 0 (see its check): "
        "generate draws from what it gives"
    )


def run_generate_with_probe(targets, case: Case) -> Outputs:
    outputs = run_generate(targets, case)
    with contextlib.suppress(Exception):
        logits = case.inputs["table"][:2]
        _, sampling_distribution = targets
        probe = [sampling_distribution(logits.clone(), t, None) for t in (0.7, 0.0)]
        outputs["sampling_probe"] = _plain(torch.cat(probe), "")
    return outputs


GENERATE = Check(
    name="09.generate",
    target=("generate", "sampling_distribution"),
    run=run_generate_with_probe,
    hidden_points=2,
    concerns=[Concern(GREEDY_RUN, weight=2), Concern(SAMPLED, weight=1)],
    outputs={
        "tokens": "the tensor of tokens generate returned (prompt and new ones)",
        "calls": "the model's calls, as (T, start_pos) rows",
        "sampled": "the sampled tokens",
        "sampled_again": "the tokens of a second run, seeded alike",
        "sampled_other_seed": "the tokens of a run seeded differently",
        "generator_used": "whether generate drew from its generator",
        "sampled_calls": "the model's calls in the sampled run, as (T, start_pos) rows",
        "sampling_probe": "your sampling_distribution's probabilities",
    },
    measured=(*SAMPLED_KEYS, "generator_used", "sampling_probe", "sampled_calls"),
    diagnostic=("sampling_distribution",),
    properties=[
        *SAMPLED_PROPERTIES,
        Property(
            "your sampling_distribution from Question 5 is right", _sampling_from_question_5, names_only=True
        ),
    ],
    error_hints=[
        ErrorHint(
            "runs past the model's",
            "the model holds max_new_tokens + prompt positions: feed each new token once, at its own "
            "position (start_pos = the number of tokens before it), never the whole sequence again.",
        ),
        ErrorHint(
            "probability tensor contains either `inf`, `nan` or element < 0",
            "the probabilities hold inf or NaN: at temperature 0, logits / temperature divides by zero. "
            "Temperature 0 means greedy: take the argmax (sampling_distribution gives it as a one-hot row).",
        ),
    ],
    hints=[
        "The model has a cache: the first call feeds the whole prompt at start_pos 0; after that, each "
        "call feeds only the token just chosen, at its position. Which logits give the next token?",
        "Test it with a model of your own in a new cell, one that prints (tokens.shape, start_pos) in its "
        "forward: for a prompt of 4 tokens and 3 new ones you should see (B, 4) at 0, then (B, 1) at 4 "
        "and (B, 1) at 5.",
        "logits = model(prompt, 0)[:, -1]; then N times: probabilities = sampling_distribution(logits, "
        "temperature, top_k), next = torch.multinomial(probabilities, 1, generator=generator) (B, 1), "
        "append it, and logits = model(next, position of next)[:, -1]. Return the prompt and the N new "
        "tokens, (B, P + N).",
    ],
)

# ------------------------------------------------------------------ nucleus (top-p) sampling

NUCLEUS = "top_p_filter keeps the smallest set of most likely tokens that reaches top_p, renormalised"
EDGES = (
    "the edges: tokens tied at the nucleus's edge kept together, top_p = 1 keeps all, top_p near 0 the argmax"
)
DRAWS = "sample_next: temperature and top-k, then top-p, drawn from the generator"


def run_top_p(targets, case: Case) -> Outputs:
    top_p_filter, sample_next = targets
    i = case.inputs
    if case.concern != DRAWS:
        return {"probabilities": top_p_filter(i["probabilities"].clone(), i["top_p"])}
    # sampling_distribution (Question 5) and top_p_filter are graded on their own: stand-ins take
    # their place here, so that a bug of theirs costs this concern nothing (what sample_next writes
    # out itself is its own).
    stand_ins = {"sampling_distribution": tempered_distribution, "top_p_filter": _nucleus_stand_in(case)}
    with names_replaced(sample_next, stand_ins):
        draws, drew = _drawn(sample_next, case, i["seed"])
        again, _ = _drawn(sample_next, case, i["seed"])
        other, _ = _drawn(sample_next, case, i["seed"] + 1)
    return {
        "draws": draws,
        "draws_again": again,
        "draws_other_seed": other,
        "generator_used": torch.tensor(int(drew)),
    }


def _drawn(sample_next, case: Case, seed: int) -> tuple[Tensor, bool]:
    """sample_next's tokens for every row of the case (each distinct row repeated), as (B,), and
    whether it drew from its generator. A (B, 1) column, as torch.multinomial gives, is taken too."""
    i = case.inputs
    generator = torch.Generator().manual_seed(seed)
    before = generator.get_state()
    logits = i["rows"].repeat_interleave(i["repeats"], dim=0)
    tokens = _plain(sample_next(logits, i["temperature"], i["top_k"], i["top_p"], generator), "")
    if tokens.dim() == 2 and tokens.shape[1] == 1:
        tokens = tokens[:, 0]
    return tokens, not torch.equal(before, generator.get_state())


def tempered_distribution(logits: Tensor, temperature: float = 1.0, top_k: int | None = None) -> Tensor:
    """Question 5's distribution, softmax(top-k(logits) / temperature), at a temperature above 0."""
    return torch.softmax(_kept(logits, top_k).double() / temperature, dim=-1).to(logits.dtype)


def _nucleus_stand_in(case: Case):
    """top_p_filter for sample_next's calls on this case: each row given (a (V,) row, or rows of a
    (N, V) tensor, in the vocabulary's order) that is what Question 5 gives for one of the case's
    logits rows becomes that row's nucleus, worked out on the grader's side. A row that is not
    (top-p taken before the temperature or top-k, say) is not the order asked."""
    i = case.inputs
    tempered, nucleus = i["tempered"].double(), i["nucleus"]

    def top_p_filter(probabilities, top_p):
        if not isinstance(probabilities, Tensor) or probabilities.dim() not in (1, 2) or top_p != i["top_p"]:
            raise NotAsAsked(f"sample_next called top_p_filter with other arguments than {NOT_AS_ASKED}")
        rows = probabilities.detach().double().reshape(-1, tempered.shape[1])
        same = ((rows.unsqueeze(1) - tempered.unsqueeze(0)).abs() <= 1e-5).all(-1)  # (N, R)
        if not bool(same.any(-1).all()):
            raise NotAsAsked(f"sample_next called top_p_filter on other probabilities than {NOT_AS_ASKED}")
        return nucleus[same.double().argmax(-1)].reshape(probabilities.shape).to(probabilities.dtype)

    return top_p_filter


NOT_AS_ASKED = (
    "sampling_distribution(logits, temperature, top_k) and top_p give: top-p comes last, on the "
    "distribution after the temperature and top-k"
)


DRAWN_KEYS = ("draws", "draws_again", "draws_other_seed")


def _draws_form(case: Case, out: Outputs) -> str | None:
    i = case.inputs
    rows = len(i["rows"]) * i["repeats"]
    for key in DRAWN_KEYS:
        got = out.get(key)
        if got is None:
            return f"{TOP_P.describe(key)} did not come back"
        if tuple(got.shape) != (rows,) or got.dtype != torch.long:
            return (
                f"{TOP_P.describe(key)} has shape {tuple(got.shape)} and dtype {got.dtype}: expected one "
                f"token id per row of the logits, ({rows},), torch.long"
            )
        if bool(((got < 0) | (got >= i["rows"].shape[1])).any()):
            return (
                f"{TOP_P.describe(key)} holds a value that is not a token id (0 .. {i['rows'].shape[1] - 1})"
            )
    return None


def _counts(case: Case, draws: Tensor) -> Tensor:
    """(R, V): how often each token was drawn for each distinct row of the case."""
    i = case.inputs
    return nn.functional.one_hot(draws.view(len(i["rows"]), i["repeats"]), i["rows"].shape[1]).sum(1)


def draw_margins(case: Case, draws: Tensor, distribution: Tensor) -> Tensor:
    """(R, V): for each distinct row of the case and each token, how far its count among the row's
    draws is from what `distribution` (R, V) gives, over 5 standard errors plus 5 draws (as
    step_margins); above 1 fails."""
    n, p = case.inputs["repeats"], distribution.double()
    return (_counts(case, draws) - n * p).abs() / (5 * (n * p * (1 - p)).sqrt() + 5)


def _follow_the_nucleus(case: Case, out: Outputs) -> str | None:
    draws, i = out.get("draws"), case.inputs
    if draws is None or _draws_form(case, out):
        return None  # the form property says why
    margins, counts = draw_margins(case, draws, i["nucleus"]), _counts(case, draws)
    outside = (counts > 0) & (i["nucleus"] == 0)  # never drawn by a right answer, whatever the seed
    if not outside.any() and bool((margins <= 1).all()):
        return None
    if bool((draw_margins(case, draws, i["top_p_first"]) <= 1).all()):
        return (
            "the draws follow top-p taken on softmax(top-k(logits)) before the temperature: the "
            "temperature changes which tokens reach top_p, so it comes first, then top-k, then top-p"
        )
    worst = outside.nonzero()[0] if outside.any() else divmod(int(margins.argmax()), margins.shape[1])
    row, token = (int(n) for n in worst)
    want = float(i["nucleus"][row, token])
    where = "outside the nucleus" if want == 0 else f"of probability {want:.3f} in the nucleus"
    return (
        f"token {token} ({where}) was drawn {int(counts[row, token])} times in {i['repeats']} draws from "
        f"row {row}, where the nucleus of softmax(top-k(logits) / temperature) expects about "
        f"{want * i['repeats']:.0f}"
    )


def _draws_reproducible(case: Case, out: Outputs) -> str | None:
    if not _differ(out.get("draws"), out.get("draws_again")):
        return None
    return "two calls with generators seeded alike drew different tokens: draw with generator=generator"


def _draws_seeded(case: Case, out: Outputs) -> str | None:
    a, b, used = out.get("draws"), out.get("draws_other_seed"), out.get("generator_used")
    if used is not None and int(used) == 0:
        return "sample_next never drew from the generator it was given: draw with generator=generator"
    if not _same(a, b):
        return None
    # Two right calls draw alike with probability prod over rows of (sum p^2)^repeats: never, but
    # for rows whose nucleus is one token.
    alike = case.inputs["repeats"] * (case.inputs["nucleus"].double() ** 2).sum(-1).log().sum()
    if alike > math.log(1e-9):
        return None
    return "two calls with generators seeded differently drew the same tokens: draw with generator=generator"


def _nucleus_rows_sum_to_one(case: Case, out: Outputs) -> str | None:
    return _sums_to_one(out.get("probabilities"), case.inputs["probabilities"].shape)


TOP_P = Check(
    name="09.top_p",
    target=("top_p_filter", "sample_next"),
    run=run_top_p,
    added=True,
    concerns=[Concern(NUCLEUS, weight=2), Concern(EDGES, weight=1), Concern(DRAWS, weight=1)],
    outputs={
        "probabilities": "the tensor of probabilities top_p_filter returned",
        "draws": "sample_next's tokens",
        "draws_again": "the tokens of a second call, seeded alike",
        "draws_other_seed": "the tokens of a call seeded differently",
        "generator_used": "whether sample_next drew from its generator",
    },
    measured=(*DRAWN_KEYS, "generator_used"),
    properties=[
        Property("each row sums to 1", _nucleus_rows_sum_to_one),
        Property("sample_next returns one token id per row", _draws_form, concern=DRAWS),
        Property(
            "the draws follow the nucleus of softmax(top-k(logits) / temperature)",
            _follow_the_nucleus,
            concern=DRAWS,
        ),
        Property("the same seed draws the same tokens", _draws_reproducible, concern=DRAWS),
        Property(
            "the generator given is drawn from, and another seed draws other tokens",
            _draws_seeded,
            concern=DRAWS,
        ),
    ],
    error_hints=[
        ErrorHint(
            "invalid multinomial distribution",
            "a row has no probability left: the nucleus always holds the most likely token, whatever top_p.",
        ),
    ],
    hints=[
        "Rank the tokens from the most likely down and add up their probabilities as you go: which tokens "
        "are needed before the running sum reaches top_p? The one that crosses top_p is one of them.",
        "Test it: top_p_filter(torch.tensor([[0.5, 0.3, 0.2]]), 0.6) keeps the first two ([[0.625, 0.375, "
        "0]]); with [[0.4, 0.3, 0.3]] and 0.5 all three stay (the two 0.3 tie); top_p=1 changes nothing; "
        "top_p=1e-6 keeps the argmax alone.",
        "A token is kept when the probability of the tokens ranked above it is below top_p: sort "
        "descending, cumsum minus the token's own probability, compare with top_p; the smallest kept "
        "probability is the edge, and every token at least that likely stays (ties). Zero the rest and "
        "divide by the row's sum. sample_next: top_p_filter(sampling_distribution(logits, temperature, "
        "top_k), top_p), then torch.multinomial(..., 1, generator=generator)[:, 0].",
    ],
)

# ------------------------------------------------------------ the rolling buffer, with sinks

ROLLING = "a window alone: a prefill longer than W, chunks and single tokens, the buffer wrapping many times"
SINKS = "attention sinks: the first n_sinks positions returned to every later query, besides the window"
BUFFER = (
    "the buffer: n_sinks + window_size slots, whatever the length; without sinks, position p in slot p mod W"
)


def visible(query_positions: Tensor, key_positions: Tensor, window_size: int, n_sinks: int) -> Tensor:
    """(T, S) bool: query i sees key j when 0 <= j <= i and (j > i - window_size or j < n_sinks)."""
    i, j = query_positions[:, None], key_positions[None, :]
    return (j >= 0) & (j <= i) & ((j > i - window_size) | (j < n_sinks))


def _attended(q: Tensor, keys: Tensor, values: Tensor, start: int, positions: Tensor, i: dict) -> Tensor:
    """The step's queries (B, Hkv, T, Dh) over what update returned, in float64 (the order of the keys
    returned is the student's: float64 keeps the sums of any order within float32's rounding)."""
    queries = torch.arange(start, start + q.shape[2])
    mask = visible(queries, positions, i["window_size"], i["n_sinks"])
    scores = q.double() @ keys.double().transpose(-2, -1) / math.sqrt(q.shape[-1])
    weights = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
    return (weights @ values.double()).float()


def _returned(result, b: int, h_kv: int, dh: int) -> tuple[Tensor, Tensor, Tensor]:
    """update's (keys, values, positions), parsed: two (B, Hkv, S, Dh) tensors and S integer positions."""
    if not isinstance(result, (tuple, list)) or len(result) != 3:
        raise NotAsAsked(
            "update returned something other than three things: return (keys, values, positions)"
        )
    keys, values = (
        _plain(result[0], "the keys update returned"),
        _plain(result[1], "the values update returned"),
    )
    positions = result[2]
    if isinstance(positions, (list, tuple, range)):
        positions = torch.tensor(list(positions), dtype=torch.long)
    positions = _plain(positions, "the positions update returned")
    if positions.is_floating_point() or positions.is_complex() or positions.dim() != 1:
        raise NotAsAsked(
            f"the positions update returned are a {positions.dtype} tensor of shape "
            f"{tuple(positions.shape)}: expected one integer per key returned, (S,)"
        )
    for name, got in (("keys", keys), ("values", values)):
        if (
            got.dim() != 4
            or tuple(got.shape[:2]) != (b, h_kv)
            or got.shape[3] != dh
            or got.shape[2] != len(positions)
        ):
            raise NotAsAsked(
                f"the {name} update returned have shape {tuple(got.shape)}, with {len(positions)} positions: "
                f"expected (B, Hkv, S, Dh) = ({b}, {h_kv}, {len(positions)}, {dh}), one per position"
            )
    return keys, values, positions.long()


def _first_wrong(
    i: dict, step: int, start: int, keys: Tensor, values: Tensor, positions: Tensor, only_sinks: bool
) -> list[int] | None:
    """(step, kind, position) for the first position the step's queries may see (of the sinks only,
    with only_sinks) that update did not return (kind 1), returned with a key or value not written at
    it in this sequence (2), or returned more than once (3); None when there is none."""
    end = start + i["chunks"][step]
    needed = visible(torch.arange(start, end), torch.arange(end), i["window_size"], i["n_sinks"]).any(0)
    if only_sinks:
        needed &= torch.arange(end) < i["n_sinks"]
    for j in needed.nonzero()[:, 0].tolist():
        found = (positions == j).nonzero()[:, 0]
        if len(found) == 0:
            kind = 1
        elif len(found) > 1:
            kind = 3
        else:
            own = (keys[:, :, found[0]], values[:, :, found[0]])
            kind = 0 if torch.equal(own[0], i["k"][:, :, j]) and torch.equal(own[1], i["v"][:, :, j]) else 2
        if kind:
            return [step, kind, j]
    return None


def _with_the_true_window(i: dict, start: int, end: int, keys: Tensor, values: Tensor, positions: Tensor):
    """What update returned for the sinks, and the case's own keys and values for the rest of what the
    step may see: on the sinks' cases a bug of the window, charged on its own cases, costs nothing."""
    sinks = (positions >= 0) & (positions < i["n_sinks"])
    window = torch.arange(end)
    window = window[(window >= i["n_sinks"]) & (window > start - i["window_size"])]
    return (
        torch.cat([keys[:, :, sinks], i["k"][:, :, window]], dim=2),
        torch.cat([values[:, :, sinks], i["v"][:, :, window]], dim=2),
        torch.cat([positions[sinks], window]),
    )


def _fed(cache, i: dict, k: Tensor, v: Tensor, chunks: list[int], q: Tensor | None = None) -> Outputs:
    """The sequence fed to update in chunks; with q, each step's queries attend over what it returned
    (without, what it returns is not read)."""
    b, h_kv, _, dh = k.shape
    steps, wrong, start = [], None, 0
    only_sinks = i["n_sinks"] > 0
    for step, size in enumerate(chunks):
        part = slice(start, start + size)
        result = cache.update(k[:, :, part].clone(), v[:, :, part].clone(), start)
        if q is not None:
            keys, values, positions = _returned(result, b, h_kv, dh)
            if only_sinks:
                keys, values, positions = _with_the_true_window(
                    i, start, start + size, keys, values, positions
                )
            steps.append(_attended(q[:, :, part], keys, values, start, positions, i))
            if wrong is None:
                wrong = _first_wrong(i, step, start, keys, values, positions, only_sinks)
        start += size
    if q is None:
        return {}
    return {
        "output": torch.cat(steps, dim=2),
        "first_wrong": torch.tensor([-1, 0, 0] if wrong is None else wrong),
    }


def run_rolling(cache_class, case: Case) -> Outputs:
    i = case.inputs
    b, h_kv, _, dh = i["k"].shape
    cache = cache_class(i["max_batch_size"], h_kv, dh, i["window_size"], i["n_sinks"])
    if "earlier" in i:  # another sequence first, in the same buffer
        _fed(cache, i, i["earlier"]["k"], i["earlier"]["v"], i["earlier"]["chunks"])
    if case.concern != BUFFER:
        return _fed(cache, i, i["k"], i["v"], i["chunks"], i["q"])
    _fed(cache, i, i["k"], i["v"], i["chunks"])  # the buffer alone: what update returns costs nothing here
    outputs = {}
    for name in ("cache_k", "cache_v"):
        buffer = getattr(cache, name, None)
        if type(buffer) is not torch.Tensor:
            raise NotAsAsked(f"the cache has no tensor `self.{name}`: allocate it in __init__")
        slots = i["n_sinks"] + i["window_size"]
        if buffer.dim() == 4 and buffer.shape[2] == h_kv and buffer.shape[1] == slots != h_kv:
            buffer = buffer.transpose(1, 2)  # Llama's layout, (max_batch_size, slots, n_kv_heads, head_dim)
        outputs[f"{name}_shape"] = torch.tensor(buffer.shape)
        if not i["n_sinks"]:  # where the sinks sit is the student's: their cases grade what is returned
            outputs[name] = buffer[:b].detach().clone()
    return outputs


def _every_position_seen(case: Case, out: Outputs) -> str | None:
    wrong = out.get("first_wrong")
    if wrong is None or int(wrong[0]) < 0:
        return None
    step, kind, j = (int(n) for n in wrong)
    start = sum(case.inputs["chunks"][:step])
    where = f"step {step + 1} (start_pos={start}, T={case.inputs['chunks'][step]})"
    if kind == 1:
        return (
            f"{where}: position {j}, which a query of the step may see, is not among the positions returned"
        )
    if kind == 3:
        again = " (one of them left from the earlier sequence? start_pos = 0 begins a new one)"
        return (
            f"{where}: position {j} was returned more than once, so its key counts twice in the softmax"
            + (again if "earlier" in case.inputs else "")
        )
    return (
        f"{where}: the key or value returned for position {j} is not the one written at position {j}"
        + (" in this sequence" if "earlier" in case.inputs else "")
        + ": the positions must say which slot holds which position"
    )


def _positions_in_their_slots(case: Case, out: Outputs) -> str | None:
    i, buffer, shape = case.inputs, out.get("cache_k"), out.get("cache_k_shape")
    if shape is None:
        return None
    b, h_kv, length, dh = i["k"].shape
    slots = i["n_sinks"] + i["window_size"]
    want = (i["max_batch_size"], h_kv, slots, dh)
    if tuple(shape.tolist()) != want:
        return (
            f"cache_k has shape {tuple(shape.tolist())}: the buffer holds n_sinks + window_size = {slots} "
            f"slots, {want}, whatever the length of the text"
        )
    if buffer is None:
        return None
    for p in range(length - i["window_size"], length):
        slot = p % i["window_size"]
        if torch.equal(buffer[:, :, slot], i["k"][:, :, p]):
            continue
        found = [n for n in range(slots) if torch.equal(buffer[:, :, n], i["k"][:, :, p])]
        where = f"in slot {found[0]}" if found else "in no slot"
        return f"after {length} positions, the key of position {p} is {where}: it belongs in slot {slot}"
    return None


ROLLING_CACHE = Check(
    name="09.rolling_cache",
    target="RollingKVCache",
    run=run_rolling,
    added=True,
    concerns=[Concern(ROLLING, weight=2), Concern(SINKS, weight=1), Concern(BUFFER, weight=1)],
    outputs={
        "output": "the step's queries attending over what update returned, step after step",
        "first_wrong": "the first position update got wrong",
        "cache_k": "the buffer cache_k[:B] after the sequence",
        "cache_v": "the buffer cache_v[:B] after the sequence",
        "cache_k_shape": "the shape of cache_k",
        "cache_v_shape": "the shape of cache_v",
    },
    measured=("first_wrong",),
    properties=[
        Property(
            "each step returns every position its queries may see, with its key and value",
            _every_position_seen,
        ),
        Property(
            "the buffer holds n_sinks + W slots; without sinks, position p in slot p mod W",
            _positions_in_their_slots,
            concern=BUFFER,
        ),
    ],
    error_hints=[
        ErrorHint(
            "upper bound and lower bound inconsistent",
            "a torch.arange whose end is below its start: early in a sequence there are fewer than W "
            "positions before start_pos, and fewer than n_sinks; filter torch.arange(start_pos) instead.",
        ),
        ErrorHint(
            "Sizes of tensors must match except in dimension",
            "update's k and v hold the call's B sequences, which may be fewer than max_batch_size: read "
            "the buffer's first B rows, cache_k[:B].",
        ),
        ErrorHint(
            "is out of bounds for dimension",
            "a slot beyond the buffer: position p < n_sinks lives in slot p, every later one in slot "
            "n_sinks + (p - n_sinks) % window_size.",
        ),
    ],
    hints=[
        "Which positions may the queries of a step at start_pos .. start_pos + T - 1 see? The first query "
        "sees back to start_pos - W + 1, and every query sees the sinks. Which of those are in the buffer "
        "before the step, and which come with the step itself?",
        "Return before you write: read the held positions' keys from their slots, concatenate the step's "
        "own k and v after them, and return the positions in the same order. Only then write the step's "
        "keys into their slots, and only those later steps need (of a chunk longer than W, the last W).",
        "The held positions: those below start_pos that are sinks (< n_sinks) or later than start_pos - W. "
        "Slot of p: p for a sink, n_sinks + (p - n_sinks) % W after. Return torch.cat of the held keys "
        "(cache_k[:B, :, their slots]) and k along dimension 2, the same for the values, and the held "
        "positions followed by start_pos .. start_pos + T - 1; then write each new position p that is a "
        "sink or one of the last W (p >= start_pos + T - W) at its slot.",
    ],
)


CHECKS = [ROPE_POSITIONS, REPEAT_KV, KV_CACHE, CACHE_BYTES, SAMPLING, GENERATE, TOP_P, ROLLING_CACHE]
