"""Known wrong answers of notebook 09 (KV cache and generation): the judge names them, the tests use
them as mutants.

Instructor-side only (next to the reference, not released). Each is complete, with exactly one
thing wrong. The end-to-end tests paste this file into an answer cell of the notebook
(tests/helpers/submissions.py::mutant), so it defines none of the notebook's names: the right parts a
mistake needs are written again here under names of their own (`_RoPE`, `_repeat_kv`,
`_sampling_distribution`).

Key: B batch, T tokens in one call, D hidden size, H query heads, Hkv key/value heads,
Dh = D // H, C max_seq_len, W window, V vocabulary size.
"""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from autograder.core import Mistake

# ------------------------------------------------------------------------ right parts


class _RoPE(nn.Module):
    """Question 1, right: the token at index t of the call turned by rotation_matrix[start_pos + t]."""

    def __init__(self, rotation_matrix):
        super().__init__()
        self.rotation_matrix = rotation_matrix

    def rows(self, start_pos: int, T: int):
        return self.rotation_matrix[start_pos : start_pos + T]

    def forward(self, queries, keys, start_pos=0):
        rows = self.rows(start_pos, queries.shape[2])
        return _turned(queries, rows), _turned(keys, rows)


def _turned(x, rows):
    B, H, T, Dh = x.shape
    z = torch.view_as_complex(x.float().reshape(B, H, T, Dh // 2, 2))
    return torch.view_as_real(z * rows).reshape(B, H, T, Dh).type_as(x)


def _repeat_kv(x, n_rep):
    return x.repeat_interleave(n_rep, dim=1)


# ------------------------------------------------------------------- Question 1 (RoPE)


class _RoPEFromZero(_RoPE):
    def rows(self, start_pos, T):
        return self.rotation_matrix[:T]


class _RoPEOneLate(_RoPE):
    def rows(self, start_pos, T):
        return self.rotation_matrix[start_pos + 1 : start_pos + 1 + T]


class _RoPEOneRow(_RoPE):
    def rows(self, start_pos, T):
        return self.rotation_matrix[start_pos]


class _RoPEKeysFromZero(_RoPE):
    def forward(self, queries, keys, start_pos=0):
        T = queries.shape[2]
        return _turned(queries, self.rows(start_pos, T)), _turned(keys, self.rows(0, T))


ROPE_MISTAKES = [
    Mistake(
        "start_pos ignored: the call's tokens are rotated by rows 0 .. T - 1, as if the call began the "
        "sequence",
        "a token of the call sits at position start_pos + t of the sequence, so it needs that row of the "
        "table, not row t.",
        _RoPEFromZero,
    ),
    Mistake(
        "the rows start one position late (start_pos + 1)",
        "the first token of the call is at position start_pos itself, not start_pos + 1: the rows start there.",
        _RoPEOneLate,
    ),
    Mistake(
        "every token of the call turned by the one row start_pos",
        "right for T = 1 only: each token of the call needs the row of its own position, start_pos + t.",
        _RoPEOneRow,
    ),
    Mistake(
        "the keys rotated from position 0 while the queries start at start_pos",
        "queries and keys of a call sit at the same positions: rotate both with the same rows.",
        _RoPEKeysFromZero,
    ),
]

# --------------------------------------------------------------- Question 2 (repeat_kv)


def _repeat_tiled(x, n_rep):
    return x.repeat(1, n_rep, 1, 1)


def _repeat_along_time(x, n_rep):
    return x.repeat_interleave(n_rep, dim=2)


def _repeat_along_features(x, n_rep):
    return x.repeat_interleave(n_rep, dim=3)


REPEAT_MISTAKES = [
    Mistake(
        "the heads tiled ([k0, k1, k0, k1]) instead of grouped ([k0, k0, k1, k1])",
        "x.repeat(1, n_rep, 1, 1) pairs query head h with key head h % Hkv; Llama's grouping is h // n_rep: "
        "the n_rep copies of each key/value head must sit next to each other.",
        _repeat_tiled,
    ),
    Mistake(
        "repeated along the sequence (dim 2), not the heads",
        "the heads are dim 1 of (B, Hkv, T, Dh): the output is (B, Hkv * n_rep, T, Dh).",
        _repeat_along_time,
    ),
    Mistake(
        "repeated along the features (the last dim), not the heads",
        "the heads are dim 1 of (B, Hkv, T, Dh): the output is (B, Hkv * n_rep, T, Dh).",
        _repeat_along_features,
    ),
]

# --------------------------------------------------------- Question 3 (CachedAttention)


class _Cached(nn.Module):
    """Right, with the steps a mistake changes as methods of their own."""

    def __init__(
        self,
        hidden_size,
        num_heads,
        n_kv_heads,
        max_batch_size,
        max_seq_len,
        rotation_matrix,
        window_size=None,
    ):
        super().__init__()
        self.num_heads, self.n_kv_heads = num_heads, n_kv_heads
        self.head_dim = hidden_size // num_heads
        self.window_size = window_size
        self.wq = nn.Linear(hidden_size, num_heads * self.head_dim, bias=False)
        self.wk = nn.Linear(hidden_size, n_kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(hidden_size, n_kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(num_heads * self.head_dim, hidden_size, bias=False)
        self.rope = _RoPE(rotation_matrix)
        shape = (max_batch_size, n_kv_heads, max_seq_len, self.head_dim)
        self.cache_k, self.cache_v = torch.zeros(shape), torch.zeros(shape)

    def project(self, x, start_pos):
        B, T, _ = x.shape
        q = self.wq(x).view(B, T, self.num_heads, self.head_dim).transpose(1, 2)
        k = self.wk(x).view(B, T, self.n_kv_heads, self.head_dim).transpose(1, 2)
        v = self.wv(x).view(B, T, self.n_kv_heads, self.head_dim).transpose(1, 2)
        q, k = self.rope(q, k, start_pos)
        return q, k, v

    def write(self, k, v, start_pos):
        B, _, T, _ = k.shape
        self.cache_k[:B, :, start_pos : start_pos + T] = k
        self.cache_v[:B, :, start_pos : start_pos + T] = v

    def read(self, B, end):
        return self.cache_k[:B, :, :end], self.cache_v[:B, :, :end]

    def visible(self, start_pos, T, end):
        query = torch.arange(start_pos, start_pos + T)[:, None]
        key = torch.arange(end)[None, :]
        seen = key <= query
        if self.window_size is not None:
            seen = seen & (key > query - self.window_size)
        return seen

    def repeat(self, x):
        return _repeat_kv(x, self.num_heads // self.n_kv_heads)

    def scale(self):
        return 1 / math.sqrt(self.head_dim)

    def forward(self, x, start_pos):
        B, T, _ = x.shape
        q, k, v = self.project(x, start_pos)
        self.write(k, v, start_pos)
        end = start_pos + T
        keys, values = self.read(B, end)
        keys, values = self.repeat(keys), self.repeat(values)
        scores = q @ keys.transpose(-2, -1) * self.scale()
        scores = scores.masked_fill(~self.visible(start_pos, T, keys.shape[2]), float("-inf"))
        context = torch.softmax(scores, dim=-1) @ values
        return self.wo(context.transpose(1, 2).reshape(B, T, -1))


class _WrittenAtZero(_Cached):
    def write(self, k, v, start_pos):
        super().write(k, v, 0)


class _WrittenOneLate(_Cached):
    def write(self, k, v, start_pos):
        super().write(k, v, start_pos + 1)

    def read(self, B, end):
        return self.cache_k[:B, :, 1 : end + 1], self.cache_v[:B, :, 1 : end + 1]


class _TrainingMask(_Cached):
    def visible(self, start_pos, T, end):
        return torch.ones(T, end, dtype=torch.bool).tril()  # the diagonal at key 0, not at start_pos


class _NoMask(_Cached):
    def visible(self, start_pos, T, end):
        return torch.ones(T, end, dtype=torch.bool)


class _KeysRotatedFromZero(_Cached):
    def project(self, x, start_pos):
        q, k, v = super().project(x, start_pos)
        B, T = x.shape[:2]
        raw = self.wk(x).view(B, T, self.n_kv_heads, self.head_dim).transpose(1, 2)
        _, k = self.rope(raw, raw, 0)
        return q, k, v


class _QueryBlind(_Cached):
    def visible(self, start_pos, T, end):
        return torch.arange(end)[None, :] < torch.arange(start_pos, start_pos + T)[:, None]


class _RotatedWhenRead(_Cached):
    """Caches the keys as projected and rotates all of them at every read: right outputs, but each
    step turns every cached key again, and the cache holds unrotated keys."""

    def project(self, x, start_pos):
        B, T, _ = x.shape
        q = self.wq(x).view(B, T, self.num_heads, self.head_dim).transpose(1, 2)
        k = self.wk(x).view(B, T, self.n_kv_heads, self.head_dim).transpose(1, 2)
        v = self.wv(x).view(B, T, self.n_kv_heads, self.head_dim).transpose(1, 2)
        q, _ = self.rope(q, q, start_pos)
        return q, k, v

    def read(self, B, end):
        keys, values = super().read(B, end)
        _, keys = self.rope(keys, keys, 0)
        return keys, values


class _WholeCacheRead(_Cached):
    def read(self, B, end):
        return self.cache_k[:B], self.cache_v[:B]

    def visible(self, start_pos, T, end):
        return torch.ones(T, end, dtype=torch.bool)


class _StaleKeysSeen(_Cached):
    def read(self, B, end):
        return self.cache_k[:B], self.cache_v[:B]

    def visible(self, start_pos, T, end):
        query = torch.arange(start_pos, start_pos + T)[:, None]
        key = torch.arange(end)[None, :]
        seen = (key <= query) | (key >= start_pos + T)  # positions past the end: left from before
        if self.window_size is not None:
            seen = seen & (key > query - self.window_size)
        return seen


class _TiledHeads(_Cached):
    def repeat(self, x):
        return x.repeat(1, self.num_heads // self.n_kv_heads, 1, 1)


class _TiledHeadsInSteps(_Cached):
    """Grouped heads in a prefill, tiled ones in a single-token call (a decode path of its own)."""

    def forward(self, x, start_pos):
        self.single_token = x.shape[1] == 1
        return super().forward(x, start_pos)

    def repeat(self, x):
        if self.single_token:
            return x.repeat(1, self.num_heads // self.n_kv_heads, 1, 1)
        return super().repeat(x)


class _HeadsViewedWithoutTranspose(_Cached):
    def project(self, x, start_pos):
        B, T, _ = x.shape
        q = self.wq(x).view(B, self.num_heads, T, self.head_dim)
        k = self.wk(x).view(B, self.n_kv_heads, T, self.head_dim)
        v = self.wv(x).view(B, self.n_kv_heads, T, self.head_dim)
        q, k = self.rope(q, k, start_pos)
        return q, k, v


class _ScaledByHidden(_Cached):
    def scale(self):
        return 1 / math.sqrt(self.num_heads * self.head_dim)


class _WindowIgnored(_Cached):
    def visible(self, start_pos, T, end):
        return torch.arange(end)[None, :] <= torch.arange(start_pos, start_pos + T)[:, None]


class _WindowOneWide(_Cached):
    def visible(self, start_pos, T, end):
        query = torch.arange(start_pos, start_pos + T)[:, None]
        key = torch.arange(end)[None, :]
        seen = key <= query
        if self.window_size is not None:
            seen = seen & (key >= query - self.window_size)  # W + 1 keys
        return seen


class _GrownCache(_Cached):
    """torch.cat onto a cache that starts empty: right outputs, but the memory grows with every
    step (a copy each time) and the shape is not the preallocated one."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.cache_k = self.cache_k[:, :, :0]
        self.cache_v = self.cache_v[:, :, :0]

    def write(self, k, v, start_pos):
        B = k.shape[0]
        self.cache_k = torch.cat([self.cache_k[:B, :, :start_pos], k], dim=2)
        self.cache_v = torch.cat([self.cache_v[:B, :, :start_pos], v], dim=2)


def _cached(impl):
    return (impl, _RoPE, _repeat_kv)


CACHE_MISTAKES = [
    Mistake(
        "the new keys and values written at position 0 of the cache, not at start_pos",
        "write them at [:B, :, start_pos : start_pos + T]: the cache keeps every earlier token where it was.",
        _cached(_WrittenAtZero),
    ),
    Mistake(
        "the cache written and read one position late (an off-by-one offset)",
        "the call's first token goes to index start_pos itself, and the keys read are [0, start_pos + T).",
        _cached(_WrittenOneLate),
    ),
    Mistake(
        "a causal triangle that starts at key 0: the training mask reused (torch.tril of a (T, start_pos + T) "
        "block), or scaled_dot_product_attention's is_causal=True, which puts its triangle at the top left",
        "in a step, query i sits at position start_pos + i: it sees key j when j <= start_pos + i. Build the "
        "mask from absolute positions, not from indices within the call, and pass it as attn_mask.",
        _cached(_TrainingMask),
    ),
    Mistake(
        "no causal mask: a query of a prefill sees the keys after it",
        "query i (position start_pos + i) must not see key j > start_pos + i; fill those scores with -inf.",
        _cached(_NoMask),
    ),
    Mistake(
        "a query cannot see its own key (j < start_pos + i): the first query sees no key, and the softmax "
        "of a row of -inf is NaN",
        "query i (position start_pos + i) sees key j when j <= start_pos + i: its own key included.",
        _cached(_QueryBlind),
    ),
    Mistake(
        "unrotated keys cached, then rotated at every read",
        "rotate k at its absolute positions, with start_pos, before writing it: the cache holds rotated "
        "keys, each turned once, not again at every step.",
        _cached(_RotatedWhenRead),
    ),
    Mistake(
        "the keys rotated from position 0 in every call, not at their absolute positions",
        "pass the call's start_pos to the RoPE: a key is rotated once, at its own absolute position, before "
        "it is cached.",
        _cached(_KeysRotatedFromZero),
    ),
    Mistake(
        "the whole cache read: positions past start_pos + T (zeros, or an earlier sequence's keys) take "
        "softmax weight",
        "read only the positions written so far, the first start_pos + T of the cache.",
        _cached(_WholeCacheRead),
    ),
    Mistake(
        "positions past the current end left visible: keys of an earlier sequence take softmax weight",
        "read only the positions written so far, the first start_pos + T of the cache, or mask the rest.",
        _cached(_StaleKeysSeen),
    ),
    Mistake(
        "the key/value heads tiled ([k0, k1, k0, k1]) instead of grouped",
        "query head h reads key/value head h // n_rep: repeat_kv must repeat each head in place.",
        _cached(_TiledHeads),
    ),
    Mistake(
        "the key/value heads grouped in a prefill but tiled ([k0, k1, k0, k1]) in single-token calls",
        "a step must share the key/value heads among the query heads as a prefill does: query head h "
        "reads key/value head h // n_rep in every call, whatever its length.",
        _cached(_TiledHeadsInSteps),
    ),
    Mistake(
        "the heads split by viewing (B, T, D) as (B, H, T, Dh) directly, without a transpose",
        "that view mixes tokens into heads: view the projections as (B, T, H, Dh), one head's Dh "
        "features after another, and then move the head axis in front of the tokens.",
        _cached(_HeadsViewedWithoutTranspose),
    ),
    Mistake(
        "scores scaled by 1 / sqrt(D) instead of 1 / sqrt(head_dim)",
        "each head's dot products have head_dim terms: divide by math.sqrt(self.head_dim).",
        _cached(_ScaledByHidden),
    ),
    Mistake(
        "the window ignored: every earlier key seen",
        "with window_size W, query at position p sees keys p - W + 1 .. p: also require j > p - W.",
        _cached(_WindowIgnored),
    ),
    Mistake(
        "a window of W + 1 keys (j >= p - W), as the Mistral paper's text words it; the course counts W, "
        "as the paper's figure and Hugging Face do",
        "query at position p sees the W keys p - W + 1 .. p: require j > p - W.",
        _cached(_WindowOneWide),
    ),
    Mistake(
        "the cache grown with torch.cat instead of preallocated",
        "torch.cat copies the whole cache at every step and its memory is not known in advance: allocate "
        "zeros of shape (max_batch_size, n_kv_heads, max_seq_len, head_dim) once, in __init__, and write "
        "into them.",
        _cached(_GrownCache),
    ),
]

# ------------------------------------------------------------ Question 4 (cache memory)


def _keys_only(n_layers, batch_size, seq_len, num_heads, n_kv_heads, head_dim, bytes_per_value):
    return n_layers * batch_size * seq_len * n_kv_heads * head_dim * bytes_per_value


def _query_heads(n_layers, batch_size, seq_len, num_heads, n_kv_heads, head_dim, bytes_per_value):
    return 2 * n_layers * batch_size * seq_len * num_heads * head_dim * bytes_per_value


def _one_layer(n_layers, batch_size, seq_len, num_heads, n_kv_heads, head_dim, bytes_per_value):
    return 2 * batch_size * seq_len * n_kv_heads * head_dim * bytes_per_value


def _bits(n_layers, batch_size, seq_len, num_heads, n_kv_heads, head_dim, bytes_per_value):
    return 2 * n_layers * batch_size * seq_len * n_kv_heads * head_dim * bytes_per_value * 8


MEMORY_MISTAKES = [
    Mistake(
        "the keys alone (the factor 2 for the values left out)",
        "the cache holds keys and values: 2 x ...",
        _keys_only,
    ),
    Mistake(
        "num_heads in place of n_kv_heads",
        "the cache holds one key and one value per key/value head; the query heads are not cached.",
        _query_heads,
    ),
    Mistake(
        "one layer's cache (n_layers left out)",
        "every layer has its own cache: multiply by n_layers.",
        _one_layer,
    ),
    Mistake("bits, not bytes (a factor 8)", "bytes_per_value is already in bytes: no factor 8.", _bits),
]

# ------------------------------------------------------ Question 5 (sampling distribution)


def _sampling_distribution(logits, temperature=1.0, top_k=None):
    if top_k is not None:
        logits = logits.masked_fill(
            logits < torch.topk(logits, top_k, dim=-1).values[..., -1:], float("-inf")
        )
    if temperature == 0:
        return F.one_hot(logits.argmax(dim=-1), logits.shape[-1]).to(logits.dtype)
    return torch.softmax(logits / temperature, dim=-1)


def _temperature_multiplies(logits, temperature=1.0, top_k=None):
    if temperature == 0:
        return _sampling_distribution(logits, 0, top_k)
    return _sampling_distribution(logits * temperature * temperature, temperature, top_k)


def _temperature_ignored(logits, temperature=1.0, top_k=None):
    return _sampling_distribution(logits, 1.0 if temperature != 0 else 0, top_k)


def _divides_by_zero(logits, temperature=1.0, top_k=None):
    if top_k is not None:
        logits = logits.masked_fill(
            logits < torch.topk(logits, top_k, dim=-1).values[..., -1:], float("-inf")
        )
    return torch.softmax(logits / temperature, dim=-1)


def _top_k_ignored(logits, temperature=1.0, top_k=None):
    return _sampling_distribution(logits, temperature, None)


def _top_k_smallest(logits, temperature=1.0, top_k=None):
    if top_k is None:
        return _sampling_distribution(logits, temperature)
    kept = -torch.topk(-logits, top_k, dim=-1).values[..., -1:]
    return _sampling_distribution(logits.masked_fill(logits > kept, float("-inf")), temperature)


def _top_k_after_softmax(logits, temperature=1.0, top_k=None):
    probabilities = _sampling_distribution(logits, temperature)
    if top_k is None:
        return probabilities
    return probabilities.masked_fill(logits < torch.topk(logits, top_k, dim=-1).values[..., -1:], 0.0)


def _over_the_batch(logits, temperature=1.0, top_k=None):
    if top_k is not None:
        logits = logits.masked_fill(
            logits < torch.topk(logits, top_k, dim=-1).values[..., -1:], float("-inf")
        )
    if temperature == 0:
        return F.one_hot(logits.argmax(dim=-1), logits.shape[-1]).to(logits.dtype)
    return torch.softmax(logits / temperature, dim=0)


SAMPLING_MISTAKES = [
    Mistake(
        "the logits multiplied by the temperature (sharper as it grows)",
        "divide: softmax(logits / temperature); a higher temperature must flatten the distribution.",
        _temperature_multiplies,
    ),
    Mistake(
        "the temperature ignored",
        "divide the logits by the temperature before the softmax.",
        _temperature_ignored,
    ),
    Mistake(
        "temperature 0 divides by zero (logits / 0 gives inf and NaN)",
        "temperature 0 is the greedy limit: return a one-hot row at the argmax, without dividing.",
        _divides_by_zero,
    ),
    Mistake(
        "top_k ignored",
        "keep only the k largest logits: the others become -inf before the softmax.",
        _top_k_ignored,
    ),
    Mistake(
        "top_k keeps the k smallest logits",
        "torch.topk returns the largest by default: keep the logits >= the k-th largest.",
        _top_k_smallest,
    ),
    Mistake(
        "top_k applied after the softmax without renormalising (the rows no longer sum to 1)",
        "mask the logits with -inf before the softmax, so that the kept probabilities sum to 1.",
        _top_k_after_softmax,
    ),
    Mistake(
        "softmax over the batch (dim 0), not over the vocabulary",
        "each row is one distribution over the V tokens: softmax(..., dim=-1).",
        _over_the_batch,
    ),
]

# ------------------------------------------------------------------ Question 6 (generate)


@torch.no_grad()
def _generate_no_cache(model, prompt, max_new_tokens, temperature=1.0, top_k=None, generator=None):
    tokens = prompt
    for _ in range(max_new_tokens):
        logits = model(tokens, 0)[:, -1]
        next_token = torch.multinomial(
            _sampling_distribution(logits, temperature, top_k), 1, generator=generator
        )
        tokens = torch.cat([tokens, next_token], dim=1)
    return tokens


@torch.no_grad()
def _generate_first_position(model, prompt, max_new_tokens, temperature=1.0, top_k=None, generator=None):
    tokens = prompt
    logits = model(prompt, 0)[:, 0]
    for step in range(max_new_tokens):
        next_token = torch.multinomial(
            _sampling_distribution(logits, temperature, top_k), 1, generator=generator
        )
        tokens = torch.cat([tokens, next_token], dim=1)
        if step + 1 < max_new_tokens:
            logits = model(next_token, tokens.shape[1] - 1)[:, 0]
    return tokens


@torch.no_grad()
def _generate_position_stuck(model, prompt, max_new_tokens, temperature=1.0, top_k=None, generator=None):
    tokens = prompt
    logits = model(prompt, 0)[:, -1]
    for step in range(max_new_tokens):
        next_token = torch.multinomial(
            _sampling_distribution(logits, temperature, top_k), 1, generator=generator
        )
        tokens = torch.cat([tokens, next_token], dim=1)
        if step + 1 < max_new_tokens:
            logits = model(next_token, prompt.shape[1])[:, -1]  # every new token at the same position
    return tokens


@torch.no_grad()
def _generate_one_late(model, prompt, max_new_tokens, temperature=1.0, top_k=None, generator=None):
    tokens = prompt
    logits = model(prompt, 0)[:, -1]
    for step in range(max_new_tokens):
        next_token = torch.multinomial(
            _sampling_distribution(logits, temperature, top_k), 1, generator=generator
        )
        tokens = torch.cat([tokens, next_token], dim=1)
        if step + 1 < max_new_tokens:
            logits = model(next_token, tokens.shape[1])[:, -1]  # one past the token's own position
    return tokens


@torch.no_grad()
def _generate_prompt_token_by_token(
    model, prompt, max_new_tokens, temperature=1.0, top_k=None, generator=None
):
    for position in range(prompt.shape[1]):
        logits = model(prompt[:, position : position + 1], position)[:, -1]
    tokens = prompt
    for step in range(max_new_tokens):
        next_token = torch.multinomial(
            _sampling_distribution(logits, temperature, top_k), 1, generator=generator
        )
        tokens = torch.cat([tokens, next_token], dim=1)
        if step + 1 < max_new_tokens:
            logits = model(next_token, tokens.shape[1] - 1)[:, -1]
    return tokens


@torch.no_grad()
def _generate_new_only(model, prompt, max_new_tokens, temperature=1.0, top_k=None, generator=None):
    tokens = prompt
    logits = model(prompt, 0)[:, -1]
    for step in range(max_new_tokens):
        next_token = torch.multinomial(
            _sampling_distribution(logits, temperature, top_k), 1, generator=generator
        )
        tokens = torch.cat([tokens, next_token], dim=1)
        if step + 1 < max_new_tokens:
            logits = model(next_token, tokens.shape[1] - 1)[:, -1]
    return tokens[:, prompt.shape[1] :]


def _generating(impl):
    return (impl, _sampling_distribution)


GENERATE_MISTAKES = [
    Mistake(
        "the whole sequence fed again at every step (no use of the cache)",
        "feed the prompt once at start_pos 0, then only the token just drawn, at its own position: "
        "model(next_token, position).",
        _generating(_generate_no_cache),
    ),
    Mistake(
        "the logits of the first position used, not the last",
        "the logits at the last position predict the next token: model(...)[:, -1].",
        _generating(_generate_first_position),
    ),
    Mistake(
        "every new token fed at the same start_pos",
        "the token just drawn goes at the position that follows the tokens before it: its start_pos is how "
        "many tokens come before it.",
        _generating(_generate_position_stuck),
    ),
    Mistake(
        "each new token fed one position late (start_pos = tokens.shape[1])",
        "the tokens before the one just drawn hold positions 0 to n - 1, so it goes at n, the number of "
        "tokens before it, not counting itself.",
        _generating(_generate_one_late),
    ),
    Mistake(
        "the prompt fed one token at a time",
        "feed the whole prompt once, model(prompt, 0): one call computes all its positions; then one token "
        "per call.",
        _generating(_generate_prompt_token_by_token),
    ),
    Mistake(
        "only the new tokens returned, without the prompt",
        "return the prompt followed by the new tokens, (B, P + max_new_tokens).",
        _generating(_generate_new_only),
    ),
]

# ---------------------------------------------------------- Question 7 (nucleus sampling)


def _sample_next(logits, temperature=1.0, top_k=None, top_p=1.0, generator=None):
    """Right, as the notebook's: the check puts its own stand-ins in place of both names it calls."""
    probabilities = top_p_filter(sampling_distribution(logits, temperature, top_k), top_p)  # noqa: F821
    return torch.multinomial(probabilities, 1, generator=generator)[:, 0]


def _ranked(probabilities):
    ranked = probabilities.sort(dim=-1, descending=True).values
    return ranked, ranked.cumsum(dim=-1) - ranked  # the values, and what the tokens above hold


def _nucleus_mask(probabilities, top_p):
    """Right: the tokens at least as likely as the least likely one the running sum needs."""
    ranked, before = _ranked(probabilities)
    return probabilities >= ranked.masked_fill(before >= top_p, float("inf")).amin(-1, keepdim=True)


def _crossing_dropped(probabilities, top_p):
    ranked, before = _ranked(probabilities)
    edge = ranked.masked_fill(before + ranked > top_p, float("inf")).amin(-1, keepdim=True)
    kept = probabilities.masked_fill(probabilities < edge, 0.0)
    return kept / kept.sum(-1, keepdim=True)


def _not_renormalised(probabilities, top_p):
    return probabilities.masked_fill(~_nucleus_mask(probabilities, top_p), 0.0)


def _divided_by_top_p(probabilities, top_p):
    return _not_renormalised(probabilities, top_p) / min(top_p, 1.0)


def _ties_split(probabilities, top_p):
    ranked, order = probabilities.sort(dim=-1, descending=True)
    kept_ranked = ranked.cumsum(dim=-1) - ranked < top_p
    kept = torch.zeros_like(kept_ranked).scatter(-1, order, kept_ranked)
    kept_probabilities = probabilities.masked_fill(~kept, 0.0)
    return kept_probabilities / kept_probabilities.sum(-1, keepdim=True)


def _mask_left_in_rank_order(probabilities, top_p):
    ranked, before = _ranked(probabilities)
    kept = probabilities.masked_fill(before >= top_p, 0.0)  # the ranks' mask on the tokens' order
    return kept / kept.sum(-1, keepdim=True)


def _least_likely_kept(probabilities, top_p):
    ranked = probabilities.sort(dim=-1).values  # ascending
    before = ranked.cumsum(dim=-1) - ranked
    edge = ranked.masked_fill(before >= top_p, float("-inf")).amax(-1, keepdim=True)
    kept = probabilities.masked_fill(probabilities > edge, 0.0)
    return kept / kept.sum(-1, keepdim=True)


def _nucleus(impl):
    return (impl, _sample_next)


TOP_P_MISTAKES = [
    Mistake(
        "the token that makes the running sum reach top_p dropped (what is kept holds less than top_p)",
        "a token stays when the tokens ranked above it hold less than top_p: the running sum before the "
        "token, not after it.",
        _nucleus(_crossing_dropped),
    ),
    Mistake(
        "the nucleus not renormalised (the rows no longer sum to 1)",
        "divide what is kept by its own sum, row by row.",
        _nucleus(_not_renormalised),
    ),
    Mistake(
        "the nucleus divided by top_p, not by what it holds",
        "the kept tokens hold at least top_p, rarely exactly: divide by their own sum, row by row.",
        _nucleus(_divided_by_top_p),
    ),
    Mistake(
        "tokens tied at the edge split: the sort keeps one of them",
        "a token as likely as the least likely one kept stays too: compare each probability with that "
        "edge value, not each rank with the running sum alone.",
        _nucleus(_ties_split),
    ),
    Mistake(
        "the mask worked out on the sorted tokens applied to the tokens in their own order",
        "sorting moves the tokens: bring the mask back to the vocabulary's order (the sort's indices, or "
        "a threshold on the probabilities) before applying it.",
        _nucleus(_mask_left_in_rank_order),
    ),
    Mistake(
        "the least likely tokens kept (the sort ascending)",
        "the nucleus starts from the most likely token: sort in descending order.",
        _nucleus(_least_likely_kept),
    ),
]


# ------------------------------------------------------------------------ the rolling buffer


class _Rolling:
    """Right but for what a subclass changes: sinks in slots 0 .. s - 1, position p >= s in slot
    s + (p - s) % W; update returns the sinks and the last W - 1 positions held, then the step's own."""

    def __init__(self, max_batch_size, n_kv_heads, head_dim, window_size, n_sinks=0):
        self.window_size, self.n_sinks = window_size, n_sinks
        shape = (max_batch_size, n_kv_heads, n_sinks + window_size, head_dim)
        self.cache_k, self.cache_v = torch.zeros(shape), torch.zeros(shape)

    def slot(self, p):
        s = self.n_sinks
        return torch.where(p < s, p, s + (p - s) % self.window_size)

    def held(self, start_pos):
        held = torch.arange(start_pos)
        return held[(held < self.n_sinks) | (held > start_pos - self.window_size)]

    def kept(self, new, end):
        return new[(new < self.n_sinks) | (new >= end - self.window_size)]

    def read(self, k, v, start_pos):
        B, held = k.shape[0], self.held(start_pos)
        keys = torch.cat([self.cache_k[:B, :, self.slot(held)], k], dim=2)
        values = torch.cat([self.cache_v[:B, :, self.slot(held)], v], dim=2)
        return keys, values, torch.cat([held, torch.arange(start_pos, start_pos + k.shape[2])])

    def write(self, k, v, start_pos):
        kept = self.kept(torch.arange(start_pos, start_pos + k.shape[2]), start_pos + k.shape[2])
        self.cache_k[: k.shape[0], :, self.slot(kept)] = k[:, :, kept - start_pos]
        self.cache_v[: k.shape[0], :, self.slot(kept)] = v[:, :, kept - start_pos]

    def update(self, k, v, start_pos):
        returned = self.read(k, v, start_pos)
        self.write(k, v, start_pos)
        return returned


class _ReadAfterWriting(_Rolling):
    def update(self, k, v, start_pos):
        self.write(k, v, start_pos)
        B, end = k.shape[0], start_pos + k.shape[2]
        positions = self.held(end)
        return self.cache_k[:B, :, self.slot(positions)], self.cache_v[:B, :, self.slot(positions)], positions


class _LongStepCut(_Rolling):
    def read(self, k, v, start_pos):
        keys, values, positions = super().read(k, v, start_pos)
        keep = positions >= min(start_pos, start_pos + k.shape[2] - self.window_size)
        keep |= positions < self.n_sinks
        return keys[:, :, keep], values[:, :, keep], positions[keep]


class _OneRing(_Rolling):
    def slot(self, p):
        return p % (self.n_sinks + self.window_size)


class _SinksForgotten(_Rolling):
    def slot(self, p):
        return p % self.window_size

    def held(self, start_pos):
        held = torch.arange(start_pos)
        return held[held > start_pos - self.window_size]

    def kept(self, new, end):
        return new[new >= end - self.window_size]


class _OneShort(_Rolling):
    def held(self, start_pos):
        held = torch.arange(start_pos)
        return held[(held < self.n_sinks) | (held > start_pos - self.window_size + 1)]


class _SlotsReturned(_Rolling):
    def read(self, k, v, start_pos):
        keys, values, positions = super().read(k, v, start_pos)
        held = positions < start_pos
        return keys, values, torch.cat([self.slot(positions[held]), positions[~held]])


class _EarlierSequenceKept(_Rolling):
    """Remembers which position each slot holds, and never forgets at start_pos = 0."""

    def __init__(self, max_batch_size, n_kv_heads, head_dim, window_size, n_sinks=0):
        super().__init__(max_batch_size, n_kv_heads, head_dim, window_size, n_sinks)
        self.tags = torch.full((n_sinks + window_size,), -1)

    def update(self, k, v, start_pos):
        B, filled = k.shape[0], (self.tags >= 0).nonzero()[:, 0]
        keys = torch.cat([self.cache_k[:B, :, filled], k], dim=2)
        values = torch.cat([self.cache_v[:B, :, filled], v], dim=2)
        positions = torch.cat([self.tags[filled], torch.arange(start_pos, start_pos + k.shape[2])])
        self.write(k, v, start_pos)
        kept = self.kept(torch.arange(start_pos, start_pos + k.shape[2]), start_pos + k.shape[2])
        self.tags[self.slot(kept)] = kept
        return keys, values, positions


class _Grown(_Rolling):
    """Appends every step to the cache: right answers, and every position held, as Question 3's."""

    def update(self, k, v, start_pos):
        B = k.shape[0]
        if start_pos == 0:
            self.cache_k, self.cache_v = k.clone(), v.clone()
        else:
            self.cache_k = torch.cat([self.cache_k[:B], k], dim=2)
            self.cache_v = torch.cat([self.cache_v[:B], v], dim=2)
        return self.cache_k, self.cache_v, torch.arange(self.cache_k.shape[2])


ROLLING_MISTAKES = [
    Mistake(
        "the buffer read after the step's keys are written: a chunk's first queries lose the keys its "
        "later tokens overwrite",
        "return the keys held before the step (and the step's own) first; write into the buffer after.",
        _ReadAfterWriting,
    ),
    Mistake(
        "a step longer than the window returns only its last W keys",
        "every query of the step needs keys back to W - 1 before it: a prefill longer than W keeps only its "
        "last W in the buffer, but its early queries attend over all of its keys.",
        _LongStepCut,
    ),
    Mistake(
        "one ring of n_sinks + W slots: the sinks are overwritten once it wraps",
        "the sinks keep slots 0 .. n_sinks - 1 for good; only the window's W slots roll: slot "
        "n_sinks + (p - n_sinks) % W.",
        _OneRing,
    ),
    Mistake(
        "the sinks never kept (the window alone)",
        "the first n_sinks positions stay in the buffer and are returned at every step, besides the last W.",
        _SinksForgotten,
    ),
    Mistake(
        "one position short of the window: W - 2 positions held before a query instead of W - 1",
        "query i sees keys i - W + 1 .. i: W keys, its own included.",
        _OneShort,
    ),
    Mistake(
        "the buffer's slots returned as the keys' positions",
        "once the buffer wraps, slot and position differ: return the position each key was written at.",
        _SlotsReturned,
    ),
    Mistake(
        "the positions the slots held carried over from an earlier sequence",
        "start_pos = 0 begins a new sequence: what the buffer holds from an earlier one is not to be "
        "returned.",
        _EarlierSequenceKept,
    ),
    Mistake(
        "the cache grown by torch.cat at every step (all positions kept, as Question 3's)",
        "allocate n_sinks + W slots once, in __init__, and write each position at its slot: the point is "
        "memory that stops growing.",
        _Grown,
    ),
]


MISTAKES = {
    "09.rope_positions": ROPE_MISTAKES,
    "09.repeat_kv": REPEAT_MISTAKES,
    "09.kv_cache": CACHE_MISTAKES,
    "09.cache_bytes": MEMORY_MISTAKES,
    "09.sampling_distribution": SAMPLING_MISTAKES,
    "09.generate": GENERATE_MISTAKES,
    "09.top_p": TOP_P_MISTAKES,
    "09.rolling_cache": ROLLING_MISTAKES,
}
