"""Trusted support for notebook 08's language model: its text, a causal window, a training loop.

Nothing here answers a question of the course. The text is generated (no download, no third-party
text): sentences drawn from word lists written for this course by a small grammar with number
agreement ("the cat sees" / "the cats see"), so that a model can learn words and agreement, which
a bigram table cannot. Characters are the tokens.

The homework's sliding window is centred: a token sees the tokens after it, which a next-token
model must not. `make_causal` gives each block's attention Mistral's causal window instead, with
the block's own projections and RoPE (its weights and parameter names unchanged). The same
`train` loop trains the notebook's model, the course's checkpoint (`course build`) and, at
grading time, the student's model in 08.training.

Key: B batch, T sequence length, D hidden size, H heads, Dh = D // H, W window, V vocabulary.
"""

import functools
import math
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

Tensor = torch.Tensor

# ---------------------------------------------------------------------------------- the text

SINGULAR = [
    "the cat",
    "the dog",
    "a bird",
    "my sister",
    "the old man",
    "our teacher",
    "the farmer",
    "a child",
]
PLURAL = ["the cats", "the dogs", "two birds", "my brothers", "the old men", "our teachers", "the farmers"]
VERBS = [("sees", "see"), ("finds", "find"), ("likes", "like"), ("carries", "carry"), ("paints", "paint")]
VERBS += [("follows", "follow"), ("watches", "watch"), ("feeds", "feed"), ("wants", "want")]
OBJECTS = ["the red ball", "a green apple", "the river", "an old book", "the small boat", "a warm coat"]
OBJECTS += ["the yellow kite", "some bread", "the blue door", "a wooden chair"]
PLACES = ["in the garden", "near the house", "at the market", "under the bridge", "by the sea", "in town"]
TIMES = ["every morning", "at night", "on sunday", "after lunch", "in winter", "today"]
ALPHABET = "\n ,.abcdefghijklmnopqrstuvwxyz"  # every character the sentences use, in token order


def sentence(generator: torch.Generator) -> str:
    """One sentence: a subject, its verb (agreeing in number), an object, and a place or a time."""

    def pick(words: list):
        return words[int(torch.randint(len(words), (), generator=generator))]

    plural = bool(torch.randint(2, (), generator=generator))
    subject = pick(PLURAL if plural else SINGULAR)
    verb = pick(VERBS)[plural]
    ending = pick(PLACES if torch.randint(2, (), generator=generator) else TIMES)
    if torch.randint(4, (), generator=generator) == 0:  # one in four: two clauses, each agreeing
        other_plural = bool(torch.randint(2, (), generator=generator))
        other = f"{pick(PLURAL if other_plural else SINGULAR)} {pick(VERBS)[other_plural]} {pick(OBJECTS)}"
        return f"{subject} {verb} {pick(OBJECTS)} {ending}, and {other}.\n"
    return f"{subject} {verb} {pick(OBJECTS)} {ending}.\n"


def course_text(n_chars: int, seed: int) -> str:
    """At least n_chars characters of sentences, the same for the same seed."""
    generator = torch.Generator().manual_seed(seed)
    parts, size = [], 0
    while size < n_chars:
        parts.append(sentence(generator))
        size += len(parts[-1])
    return "".join(parts)


def encode(text: str) -> Tensor:
    """Characters -> token ids (int64), one per character of ALPHABET."""
    index = {c: i for i, c in enumerate(ALPHABET)}
    return torch.tensor([index[c] for c in text], dtype=torch.long)


def decode(tokens) -> str:
    return "".join(ALPHABET[int(t)] for t in tokens)


# ------------------------------------------------------------------------------- baselines


def unigram_loss(train: Tensor, held_out: Tensor, vocabulary_size: int) -> float:
    """Cross-entropy (nats per token) on held_out of the training text's character frequencies."""
    counts = torch.bincount(train, minlength=vocabulary_size).double() + 1  # add-one smoothing
    log_p = (counts / counts.sum()).log()
    return float(-log_p[held_out].mean())


def bigram_counts(tokens: Tensor, vocabulary_size: int) -> Tensor:
    """counts[a, b]: how often token b comes right after token a, (V, V) int64."""
    pairs = tokens[:-1] * vocabulary_size + tokens[1:]
    return torch.bincount(pairs, minlength=vocabulary_size**2).view(vocabulary_size, vocabulary_size)


def bigram_loss(train: Tensor, held_out: Tensor, vocabulary_size: int) -> float:
    """Cross-entropy on held_out of p(next | previous) counted on the training text (add-one)."""
    counts = bigram_counts(train, vocabulary_size).double() + 1
    log_p = (counts / counts.sum(-1, keepdim=True)).log()
    return float(-log_p[held_out[:-1], held_out[1:]].mean())


# -------------------------------------------------------------------------- a causal window


class CausalWindowAttention(nn.Module):
    """Mistral's causal sliding window on the projections and RoPE of a notebook-03 layer.

    forward: x (B, T, D) -> (B, T, D). Query t attends to keys t - W + 1 .. t, with the layer's
    per-head qkv split and its RoPE; equals F.scaled_dot_product_attention with a causal band mask.
    The layer's qkv_linear, out and rope are held under the same names, so a state_dict saved
    from the causal model loads into the centred one and back.
    """

    def __init__(self, attention: nn.Module):
        super().__init__()
        self.qkv_linear, self.out = attention.qkv_linear, attention.out
        self.rope = getattr(attention, "rope", None)
        self.num_heads, self.window_size = attention.num_heads, attention.window_size

    def forward(self, x: Tensor) -> Tensor:
        B, T, D = x.shape
        H, W = self.num_heads, self.window_size
        qkv = self.qkv_linear(x).view(B, T, H, 3 * (D // H)).transpose(1, 2)  # (B, H, T, 3 * Dh)
        queries, keys, values = qkv.chunk(3, dim=-1)  # (B, H, T, Dh) each
        queries, keys = (queries, keys) if self.rope is None else self.rope(queries, keys)
        visible = causal_window(T, W, x.device)
        context = F.scaled_dot_product_attention(queries, keys, values, attn_mask=visible)  # (B, H, T, Dh)
        return self.out(context.transpose(1, 2).reshape(B, T, D))  # heads merged: (B, T, D)


def causal_window(T: int, W: int, device: torch.device) -> Tensor:
    """(T, T) bool: query i sees key j when j - i is in (-W, 0] (Mistral's causal sliding window)."""
    offset = torch.arange(T, device=device)[None, :] - torch.arange(T, device=device)[:, None]
    return (offset <= 0) & (offset > -W)


def make_causal(model: nn.Module) -> nn.Module:
    """Give every block's attention the causal window, under the block's own name for it (the part is
    found by what it is, as the checks find it); returns model."""
    from .checks.transformer import made_causal  # here: that module imports this one

    return made_causal(model)


# ---------------------------------------------------------------------------------- training


def batches(
    tokens: Tensor, batch_size: int, length: int, generator: torch.Generator
) -> tuple[Tensor, Tensor]:
    """batch_size windows of length + 1 tokens at random offsets: inputs (B, T) and targets (B, T)."""
    starts = torch.randint(len(tokens) - length, (batch_size,), generator=generator)
    windows = torch.stack([tokens[s : s + length + 1] for s in starts.tolist()])  # (B, T + 1)
    return windows[:, :-1], windows[:, 1:]


def train(
    model: nn.Module,
    tokens: Tensor,
    *,
    steps: int,
    batch_size: int,
    length: int,
    lr: float,
    seed: int,
    every: Callable[[int, float], None] | None = None,
    stop_after: int | None = None,
) -> list[float]:
    """AdamW on next-token cross-entropy, the learning rate warmed up over the first tenth of the
    steps and decayed to a tenth by a cosine; gradients clipped to norm 1. Returns each step's loss.
    stop_after: run only the first steps of that schedule (a test replays the checkpoint's start)."""
    generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    warmup = max(1, steps // 10)

    def rate(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        return 0.1 + 0.45 * (1 + math.cos(math.pi * (step - warmup) / max(1, steps - warmup)))

    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, rate)
    model.train()
    losses = []
    for step in range(steps if stop_after is None else min(steps, stop_after)):
        inputs, targets = batches(tokens, batch_size, length, generator)
        logits = model(inputs)  # (B, T, V)
        loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten())
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        losses.append(loss.item())
        if every is not None:
            every(step, losses[-1])
    model.eval()
    return losses


@torch.no_grad()
def held_out_loss(model: nn.Module, tokens: Tensor, length: int) -> float:
    """Mean next-token cross-entropy over consecutive windows of held-out tokens."""
    n = (len(tokens) - 1) // length
    inputs = tokens[: n * length].view(n, length)
    targets = tokens[1 : n * length + 1].view(n, length)
    return float(F.cross_entropy(model(inputs).flatten(0, 1), targets.flatten()))


@torch.no_grad()
def generate(
    model: nn.Module, prompt: str, n_chars: int, *, context: int, temperature: float = 0.8, seed: int = 0
) -> str:
    """prompt and n_chars sampled characters, each from softmax(logits / temperature) of the last
    `context` characters (the model recomputes the whole window each time: notebook 09 caches it)."""
    generator = torch.Generator().manual_seed(seed)
    tokens = encode(prompt).tolist()
    for _ in range(n_chars):
        logits = model(torch.tensor([tokens[-context:]]))[0, -1]  # (V,)
        probabilities = F.softmax(logits.float() / temperature, dim=-1)
        tokens.append(int(torch.multinomial(probabilities, 1, generator=generator)))
    return decode(tokens)


# ------------------------------------------------------------------------ loading weights


COURSE_PARTS = ("norm1", "attention", "norm2", "moe")  # a block's parts, as the course's model names them


def load_weights(model: nn.Module, state: dict[str, Tensor]) -> None:
    """Weights saved under the course's names (the checkpoint's, a check's) into a student's
    Transformer: by name, except inside each expert, whose matrices notebook 06 let the student
    name: there the down projection is found by its shape and the gated one of the two others by
    trying both ways on a probe. Tolerated, as the student's choices elsewhere in the course: a bias
    the saved weights lack (a gate's or an expert's) is set to zero, a head without a bias is
    accepted where the saved one is zero, blocks kept in a plain list are loaded under the names an
    nn.ModuleList gives them, buffers are left alone. A block whose parts have other names than the
    course's (norm1, attention, norm2, moe) is loaded through a view of it under the course's names,
    the parts found by what they are. Names that match nothing raise, listed."""
    if not all(isinstance(getattr(b, name, None), nn.Module) for b in model.blocks for name in COURSE_PARTS):
        from .checks.transformer import course_view  # here: that module imports this one

        model = course_view(model, torch.zeros(1, 2, dtype=torch.long))
    own, buffers = _own_state(model)
    expert_keys = {k for k in state if ".moe.experts." in k}
    head_bias = "out.bias" in state and not bool(state["out.bias"].any())
    missing = [
        k for k in state if k not in expert_keys and k not in own and not (k == "out.bias" and head_bias)
    ]
    unexpected = [
        k
        for k in own
        if k not in state
        and k not in buffers
        and ".moe.experts." not in k
        and not k.endswith("moe.gate.bias")
    ]
    if missing or unexpected:
        raise ValueError(_names_message(missing, unexpected))
    with torch.no_grad():
        # In the state's order (a set's changes between processes): blocks that share their weights
        # ([block] * n) keep the last block's, in a student's kernel as in the build.
        for key in (k for k in state if k not in expert_keys and k in own):
            if own[key].shape != state[key].shape:
                yours, saved = tuple(own[key].shape), tuple(state[key].shape)
                raise ValueError(f"{key} has shape {yours} in your model, {saved} in the saved one")
            own[key].copy_(state[key])
        for key in own:
            if key.endswith("moe.gate.bias"):
                own[key].zero_()
        for i, block in enumerate(model.blocks):
            for j, expert in enumerate(block.moe.experts):
                prefix = f"blocks.{i}.moe.experts.{j}."
                w1, w2, w3 = (state[f"{prefix}{name}.weight"] for name in ("w1", "w2", "w3"))
                _load_expert(expert, w1, w2, w3, prefix)


def _own_state(model: nn.Module) -> tuple[dict[str, Tensor], set[str]]:
    """The model's state_dict and the names of its buffers, blocks kept in a plain list included
    under the names an nn.ModuleList gives them (their registration is another question's)."""
    own = model.state_dict()
    buffers = {name for name, _ in model.named_buffers(remove_duplicate=False)}
    for i, block in enumerate(getattr(model, "blocks", None) or []):
        for key, value in block.state_dict().items():
            own.setdefault(f"blocks.{i}.{key}", value)
        buffers |= {f"blocks.{i}.{name}" for name, _ in block.named_buffers(remove_duplicate=False)}
    return own, buffers


def _load_expert(expert: nn.Module, w1: Tensor, w2: Tensor, w3: Tensor, prefix: str) -> None:
    """w2(silu(w1 x) * w3 x) into an expert whatever it named its matrices (one fused (2F, D) up
    projection too); under no_grad."""
    named = dict(expert.named_parameters())
    if {"w1.weight", "w2.weight", "w3.weight"} <= named.keys():
        ways = [{"w1.weight": w1, "w2.weight": w2, "w3.weight": w3}]
    else:
        ups = [
            n
            for n, p in named.items()
            if p.dim() == 2 and tuple(p.shape) == tuple(w1.shape) and n != "w2.weight"
        ]
        fused = [
            n for n, p in named.items() if p.dim() == 2 and tuple(p.shape) == (2 * w1.shape[0], w1.shape[1])
        ]
        downs = [
            n for n, p in named.items() if p.dim() == 2 and tuple(p.shape) == tuple(w2.shape) and n not in ups
        ]
        if len(downs) != 1 or not (len(ups) == 2 or len(fused) == 1):
            shapes = ", ".join(f"{n} {tuple(p.shape)}" for n, p in named.items())
            raise ValueError(
                f"{prefix[:-1]} holds {shapes or 'no parameters'}: the course's expert holds two (d_ff, D) "
                "matrices (or one fused (2 d_ff, D)) and one (D, d_ff)"
            )
        if fused:
            ways = [{fused[0]: torch.cat(pair), downs[0]: w2} for pair in ((w1, w3), (w3, w1))]
        else:
            ways = [{ups[0]: a, ups[1]: b, downs[0]: w2} for a, b in ((w1, w3), (w3, w1))]
    for parameter in named.values():
        if parameter.dim() == 1:
            parameter.zero_()
    probe = torch.randn(3, w1.shape[1], generator=torch.Generator().manual_seed(0)).to(w1)
    expected = (F.silu(probe @ w1.T) * (probe @ w3.T)) @ w2.T
    for way in ways:
        for name, value in way.items():
            named[name].copy_(value)
        if torch.allclose(expert(probe), expected, rtol=1e-4, atol=1e-5):
            return  # else the other way; an expert right neither way keeps the last (its own check says why)


def _names_message(missing: list[str], unexpected: list[str]) -> str:
    def listed(names: list[str]) -> str:
        shown = ", ".join(names[:6])
        return shown + (f" and {len(names) - 6} more" if len(names) > 6 else "")

    lines = ["the saved weights could not be loaded into your model by name"]
    if missing:
        lines.append(f"they have, your model has not: {listed(missing)}")
    if unexpected:
        lines.append(f"your model has, they have not: {listed(unexpected)}")
    if any(name.endswith("rotation_matrix") for name in unexpected):
        lines.append(
            "your RoPE table is in the state_dict, so it is a buffer or a parameter: keep it a plain "
            "attribute, as notebook 04's RoPE does (a cast to bfloat16 would turn it into its real part)"
        )
    lines.append(
        "the names come from the attributes: embedding, blocks (an nn.ModuleList), out; in each block "
        "norm1, attention, norm2, moe; inside them the names notebooks 03, 06 and 07 give (qkv_linear, out, "
        "gate, experts, weight). The homework's model has no final norm"
    )
    return "; ".join(lines)


# ------------------------------------------------------------------- the course's checkpoint

# The model notebook 10 inspects, trained by `course build` for about a minute on 2 CPU cores.
CHECKPOINT = Path(__file__).resolve().parent / "data" / "course_model.pt"  # in the package, as released
COURSE_MODEL = {  # Transformer(**COURSE_MODEL), then make_causal
    "vocabulary_size": len(ALPHABET),
    "hidden_size": 64,
    "num_heads": 4,
    "window_size": 16,
    "d_ff": 128,
    "num_experts": 4,
    "n_experts_per_token": 2,
    "n_blocks": 2,
    "max_seq_len": 64,
}
RECIPE = {"steps": 1200, "batch_size": 32, "length": 64, "lr": 3e-3, "seed": 0}
# The embedding starts as GPT-2's does. nn.Embedding's default, std 1, gives rows of norm 8 that
# 1200 steps of AdamW at this rate barely turn (cosine 0.998 with their start): notebook 10's
# similarity plot would show the random initialisation, not what training taught.
EMBEDDING_STD = 0.02
TEXT_SEED, HELD_OUT_SEED = 0, 1  # the training text and the held-out text
TEXT_CHARS, HELD_OUT_CHARS = 200_000, 20_000


def train_course_model(transformer_class, stop_after: int | None = None, config: dict = COURSE_MODEL) -> dict:
    """Build, train and evaluate the course's model; returns the checkpoint's contents.

    Deterministic for a seed on one machine and thread count (`course build` uses one thread);
    another CPU may round differently and drift from the committed file (tests/test_course_model.py).
    stop_after: only the first steps of the recipe. config: another size or window, trained by the
    same recipe (benchmarks/attention_sinks.py)."""
    recipe = dict(RECIPE)
    torch.manual_seed(recipe["seed"])
    model = make_causal(transformer_class(**config))
    nn.init.normal_(model.embedding.weight, std=EMBEDDING_STD)
    train_tokens = encode(course_text(TEXT_CHARS, TEXT_SEED))
    held_out = encode(course_text(HELD_OUT_CHARS, HELD_OUT_SEED))
    losses = train(model, train_tokens, **recipe, stop_after=stop_after)
    V = config["vocabulary_size"]
    return {
        "config": dict(config),
        "recipe": recipe,
        "embedding_std": EMBEDDING_STD,
        "alphabet": ALPHABET,
        "state_dict": {k: v.detach().clone() for k, v in model.state_dict().items()},
        "losses": torch.tensor(losses),
        "held_out_loss": held_out_loss(model, held_out, recipe["length"]),
        "unigram_loss": unigram_loss(train_tokens, held_out, V),
        "bigram_loss": bigram_loss(train_tokens, held_out, V),
    }


# ------------------------------------------------- the checkpoint in a model of torch's own layers
#
# Notebook 10 inspects the checkpoint without the student's notebook-08 code (a bug there costs
# nothing in 10): CourseModel is notebook 08's architecture with the causal window, built from
# torch's layers (nn.RMSNorm, F.scaled_dot_product_attention, a dense mixture of experts) under the
# checkpoint's parameter names. Its parts take a configuration dict, not the arguments of any
# question, and call what the questions forbid: it answers none of them
# (tests/test_package_answers.py). A student can read it, as any model they are given.

PERIOD = 10000.0  # the RoPE period of notebook 08's model (Llama's)


class CourseAttention(nn.Module):
    """Mistral's causal sliding window with the course's per-head qkv split and RoPE.

    forward: x (B, T, D) -> (B, T, D). Query t attends to keys t - W + 1 .. t. The fused projection
    is split as notebook 03 splits it: view (B, T, H, 3 Dh), heads forward, chunk into q, k, v.
    Queries and keys are rotated on interleaved pairs (2j, 2j + 1) by `rotation_matrix[t, j]`,
    e^(i t w_j) with w_j = PERIOD^(-2j / Dh): notebook 04's table, a plain attribute (not a buffer,
    so that a cast to bfloat16 leaves it complex). Equals language_model.CausalWindowAttention on a
    notebook-03 layer with those weights.
    """

    def __init__(self, config: dict):
        super().__init__()
        d, h = config["hidden_size"], config["num_heads"]
        self.num_heads, self.window_size = h, config["window_size"]
        self.qkv_linear = nn.Linear(d, 3 * d)
        self.out = nn.Linear(d, d)
        half = torch.arange(0, d // h, 2, dtype=torch.float32) / (d // h)  # 2j / Dh
        # the period written out, not read from PERIOD: a module global an answer could change
        angles = torch.outer(torch.arange(config["max_seq_len"], dtype=torch.float32), 10000.0**-half)
        self.rotation_matrix = torch.complex(angles.cos(), angles.sin())  # (C, Dh // 2)

    def forward(self, x: Tensor) -> Tensor:
        B, T, D = x.shape
        H, W = self.num_heads, self.window_size
        qkv = self.qkv_linear(x).view(B, T, H, 3 * (D // H)).transpose(1, 2)  # (B, H, T, 3 Dh)
        queries, keys, values = qkv.chunk(3, dim=-1)  # (B, H, T, Dh) each
        cos = self.rotation_matrix.real[:T].to(x.device)  # (T, Dh // 2)
        sin = self.rotation_matrix.imag[:T].to(x.device)
        # each pair (x_2j, x_2j+1) turned by its angle, inline: no RoPE function for an answer to wrap
        queries, keys = (
            torch.stack(
                (t[..., 0::2] * cos - t[..., 1::2] * sin, t[..., 0::2] * sin + t[..., 1::2] * cos), -1
            ).flatten(-2)
            for t in (queries, keys)
        )
        context = F.scaled_dot_product_attention(
            queries, keys, values, attn_mask=causal_window(T, W, x.device)
        )  # (B, H, T, Dh)
        return self.out(context.transpose(1, 2).reshape(B, T, D))  # (B, T, D)


class CourseExpert(nn.Module):
    """One expert, w2(silu(w1 x) * w3 x): w1 the gated projection, w3 the other, w2 back to D."""

    def __init__(self, config: dict):
        super().__init__()
        d, f = config["hidden_size"], config["d_ff"]
        self.w1, self.w3 = nn.Linear(d, f, bias=False), nn.Linear(d, f, bias=False)
        self.w2 = nn.Linear(f, d, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        gated = F.silu(self.w1(x)) * self.w3(x)  # (B, T, F)
        return self.w2(gated)  # (B, T, D)


class CourseMoe(nn.Module):
    """Mixture of experts, top-K of the gate's logits, softmax over those K (Mistral's order).

    Computed densely: every expert runs on every token and its output is weighted by zero where the
    token did not choose it. The output equals the routed one of notebook 06; each expert's record
    (notebook 10) then holds all B x T tokens."""

    def __init__(self, config: dict):
        super().__init__()
        self.n_experts_per_token = config["n_experts_per_token"]
        self.gate = nn.Linear(config["hidden_size"], config["num_experts"], bias=False)
        self.experts = nn.ModuleList(CourseExpert(config) for _ in range(config["num_experts"]))

    def forward(self, x: Tensor) -> Tensor:
        logits = self.gate(x)  # (B, T, E)
        top, chosen = logits.topk(self.n_experts_per_token, dim=-1)  # (B, T, K)
        weights = torch.zeros_like(logits).scatter(-1, chosen, top.softmax(dim=-1))  # (B, T, E)
        outputs = torch.stack([expert(x) for expert in self.experts], dim=-2)  # (B, T, E, D)
        return (weights.unsqueeze(-1) * outputs).sum(dim=-2)  # (B, T, D)


class CourseBlock(nn.Module):
    """Pre-norm block: h = x + attention(norm1(x)), y = h + moe(norm2(h))."""

    def __init__(self, config: dict):
        super().__init__()
        d = config["hidden_size"]
        self.norm1, self.norm2 = nn.RMSNorm(d, eps=1e-6), nn.RMSNorm(d, eps=1e-6)
        self.attention, self.moe = CourseAttention(config), CourseMoe(config)

    def forward(self, x: Tensor) -> Tensor:
        for norm, sublayer in ((self.norm1, self.attention), (self.norm2, self.moe)):
            x = x + sublayer(norm(x))  # (B, T, D)
        return x


class CourseModel(nn.Module):
    """Notebook 08's Transformer with the causal window: tokens (B, T) -> logits (B, T, V).

    `config` holds Transformer's arguments by name (language_model.COURSE_MODEL); T <= max_seq_len,
    the rows of the RoPE table."""

    def __init__(self, config: dict):
        super().__init__()
        self.config = dict(config)
        self.max_seq_len = config["max_seq_len"]
        self.embedding = nn.Embedding(config["vocabulary_size"], config["hidden_size"])
        self.blocks = nn.ModuleList(CourseBlock(config) for _ in range(config["n_blocks"]))
        self.out = nn.Linear(config["hidden_size"], config["vocabulary_size"])

    def forward(self, tokens: Tensor) -> Tensor:
        if tokens.dim() != 2:
            raise ValueError(f"the model takes tokens of shape (B, T), got {tuple(tokens.shape)}")
        if tokens.shape[1] > self.max_seq_len:
            raise ValueError(
                f"{tokens.shape[1]} tokens are more than the model's context, max_seq_len = "
                f"{self.max_seq_len}: give it the last {self.max_seq_len} at most"
            )
        x = self.embedding(tokens)  # (B, T, D)
        for block in self.blocks:
            x = block(x)
        return self.out(x)  # (B, T, V)


@functools.cache
def _checkpoint() -> dict:
    return torch.load(CHECKPOINT, weights_only=True)


def course_model() -> CourseModel:
    """The course's trained checkpoint (language_model.CHECKPOINT), in eval mode: a new model at each
    call (load_state_dict copies the weights)."""
    saved = _checkpoint()
    model = CourseModel(saved["config"])
    model.load_state_dict(saved["state_dict"])
    return model.eval()


def random_course_model(config: dict, state: dict[str, Tensor]) -> CourseModel:
    """A CourseModel of another size with the given weights (a check's), in eval mode."""
    model = CourseModel(config)
    model.load_state_dict(state)
    return model.eval()


# ------------------------------------------------------------ streaming through a rolling cache


def _rotated(x: Tensor, positions: Tensor) -> Tensor:
    """x (..., S, Dh) with each row turned at its position (S,) as CourseAttention turns them, at any
    position (the model's table stops at max_seq_len)."""
    dh = x.shape[-1]
    angles = positions.float()[:, None] * 10000.0 ** -(torch.arange(0, dh, 2, dtype=torch.float32) / dh)
    cos, sin = angles.cos(), angles.sin()  # (S, Dh // 2)
    even, odd = x[..., 0::2], x[..., 1::2]
    return torch.stack((even * cos - odd * sin, even * sin + odd * cos), -1).flatten(-2)


@torch.no_grad()
def streamed_losses(
    model: CourseModel, tokens: Tensor, new_cache: Callable, *, in_cache: bool = False
) -> Tensor:
    """The next-token loss at each position of `tokens` (L,), fed to `model` one token at a time,
    with no limit of length: (L - 1,).

    Each block's attention keeps its keys and values in a cache of notebook 09's Question 8,
    `new_cache()` (one per block): `update(k, v, p)` with the step's (1, H, 1, Dh) key and value,
    unrotated, returns the keys, values and positions the query may see. A query at position p sees
    key j <= p when j > p - cache.window_size or j < cache.n_sinks. Queries and keys are rotated at
    each step: at their positions, or, with in_cache, at their ranks among the keys the query sees
    (StreamingLLM's positions in the cache), the query last."""
    config = model.config
    heads = config["num_heads"]
    dh = config["hidden_size"] // heads
    caches = [new_cache() for _ in model.blocks]
    losses = []
    for p in range(len(tokens) - 1):
        x = model.embedding(tokens[p : p + 1])[None]  # (1, 1, D)
        for block, cache in zip(model.blocks, caches, strict=True):
            qkv = block.attention.qkv_linear(block.norm1(x)).view(1, 1, heads, 3 * dh).transpose(1, 2)
            query, key, value = qkv.chunk(3, dim=-1)  # (1, H, 1, Dh) each
            keys, values, positions = cache.update(key, value, p)
            positions = torch.as_tensor(positions)
            seen = (positions >= 0) & (positions <= p)
            seen &= (positions > p - cache.window_size) | (positions < cache.n_sinks)
            keys, values, positions = keys[:, :, seen], values[:, :, seen], positions[seen]
            if in_cache:  # rank among the keys seen; the query is the last of them
                positions = positions.argsort().argsort()
                at = torch.tensor([len(positions) - 1])
            else:
                at = torch.tensor([p])
            context = F.scaled_dot_product_attention(_rotated(query, at), _rotated(keys, positions), values)
            x = x + block.attention.out(context.transpose(1, 2).reshape(1, 1, -1))
            x = x + block.moe(block.norm2(x))
        losses.append(F.cross_entropy(model.out(x)[0], tokens[p + 1 : p + 2]))
    return torch.stack(losses)
