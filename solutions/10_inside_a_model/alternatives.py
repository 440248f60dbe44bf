"""Correct answers of notebook 10 (looking inside a model) written differently from the reference.

Key: B batch, T sequence length, D hidden size, H heads, Dh = D // H, W window, V vocabulary size.
"""

import contextlib
import functools
import math

import torch
import torch.nn.functional as F

from autograder.language_model import ALPHABET, decode, encode

# --------------------------------------------------------------- 10.record_activations


class Recorder:
    """A context manager: hooks on while inside, records kept, every hook removed on the way out."""

    def __init__(self, model):
        self.model, self.records, self.handles = model, {}, []

    def _hook(self, name, module, args, output):
        self.records.setdefault(name, []).append((tuple(a.detach() for a in args), output.detach()))

    def __enter__(self):
        for name, module in self.model.named_modules():
            self.handles.append(module.register_forward_hook(functools.partial(self._hook, name)))
        return self.records

    def __exit__(self, *exc):
        for handle in self.handles:
            handle.remove()
        self.handles.clear()
        return False  # an error inside goes on


def record_with_context_manager(model, tokens):
    with Recorder(model) as records:
        model(tokens)
    return records


def record_with_pre_hooks(model, tokens):
    """Inputs from a pre-hook, outputs from a hook (one stack per module), ExitStack for the removals;
    no torch.no_grad(), every tensor detached instead."""
    records, pending = {}, {}
    with contextlib.ExitStack() as stack:
        for name, module in model.named_modules():

            def before(module, args, name=name):
                pending.setdefault(name, []).append(tuple(a.detach() for a in args))

            def after(module, args, output, name=name):
                records.setdefault(name, []).append((pending[name].pop(), output.detach()))

            stack.callback(module.register_forward_pre_hook(before).remove)
            stack.callback(module.register_forward_hook(after).remove)
        model(tokens)
    return records


def record_with_global_hook(model, tokens):
    """One global hook for every module, names found by the module's id; records built afterwards."""
    names = {id(module): name for name, module in model.named_modules()}
    calls = []
    handle = torch.nn.modules.module.register_module_forward_hook(
        lambda module, args, output: calls.append((names.get(id(module)), args, output))
    )
    try:
        with torch.inference_mode():
            model(tokens)
    finally:
        handle.remove()
    records = {}
    for name, args, output in calls:
        if name is not None:
            records.setdefault(name, []).append((tuple(args), output))
    return records


def record_with_kwargs_hooks(model, tokens):
    """Hooks registered with_kwargs=True (the keyword inputs ignored), handles in a dict by name."""
    records = {}
    handles = {}

    def make(name):
        def hook(module, args, kwargs, output):
            records.setdefault(name, [])
            records[name] += [(tuple(x.detach().clone() for x in args), output.detach().clone())]

        return hook

    try:
        for name, module in model.named_modules():
            handles[name] = module.register_forward_hook(make(name), with_kwargs=True)
        with torch.no_grad():
            model(tokens)
    finally:
        for handle in handles.values():
            handle.remove()
    return dict(records)


# --------------------------------------------------------------- 10.next_token_probabilities


def probabilities_by_hand(logits):
    last = logits[..., -1, :]
    e = (last - last.amax(dim=-1, keepdim=True)).exp()
    return e / e.sum(dim=-1, keepdim=True)


def probabilities_from_log_softmax(logits):
    return F.log_softmax(logits.select(-2, -1), dim=-1).exp()


def probabilities_functional(logits):
    return F.softmax(logits.narrow(-2, logits.shape[-2] - 1, 1).squeeze(-2), dim=-1)


# ------------------------------------------------------------------------ 10.is_distribution


def distribution_isclose(p, atol=1e-5):
    total = p.sum(dim=-1)
    return torch.isclose(total, torch.ones_like(total), rtol=0, atol=atol) & (p.amin(dim=-1) >= 0)


def distribution_in_double(p, atol=1e-5):
    return p.ge(0).all(-1).logical_and(p.double().sum(-1).sub(1).abs().le(atol))


def distribution_where(p, atol=1e-5):
    gap = torch.where(torch.isnan(p).any(-1), torch.inf, (p.sum(-1) - 1).abs())
    return (gap <= atol) & ~(p < 0).any(-1)


# ------------------------------------------------------------------------ 10.most_likely_next


def next_by_softmax(model, text, context):
    tokens = torch.tensor([[ALPHABET.index(c) for c in text]])[:, -context:]
    with torch.no_grad():
        p = F.softmax(model(tokens)[:, -1], dim=-1)  # (1, V)
    return decode(p.argmax(-1))


def next_by_topk(model, text, context):
    window = text[max(0, len(text) - context) :]
    logits = model(encode(window).unsqueeze(0)).detach()
    return ALPHABET[logits[0, -1].topk(1).indices.item()]


# ----------------------------------------------------------------- 10.cosine_similarity_matrix


def similarity_broadcast(embeddings):
    return F.cosine_similarity(embeddings[:, None, :], embeddings[None, :, :], dim=-1)


def similarity_normalize(embeddings):
    unit = F.normalize(embeddings, dim=-1)
    return torch.einsum("id,jd->ij", unit, unit)


def similarity_outer_norms(embeddings):
    norms = torch.linalg.vector_norm(embeddings, dim=1)
    return (embeddings @ embeddings.T) / torch.outer(norms, norms).clamp_min(1e-16)


# ----------------------------------------------------------------------- 10.attention_weights


def _attention_input(model, tokens, block):
    """The input of the block's attention, by a forward hook (its args), removed in finally."""
    seen = []
    handle = model.blocks[block].attention.register_forward_hook(lambda m, args, out: seen.append(args[0]))
    try:
        with torch.no_grad():
            model(tokens.unsqueeze(0))
    finally:
        handle.remove()
    return seen[0]


def weights_einsum(model, tokens, block, head):
    """einsum scores, RoPE in the real 2 x 2 form, the mask from tril and triu, -1e9 for masked scores."""
    attention = model.blocks[block].attention
    x = _attention_input(model, tokens, block)
    _, T, D = x.shape
    H, W = attention.num_heads, attention.window_size
    Dh = D // H
    with torch.no_grad():
        qkv = attention.qkv_linear(x)[0].view(T, H, 3 * Dh)[:, head]  # (T, 3 Dh): this head only
    q, k = qkv[:, :Dh], qkv[:, Dh : 2 * Dh]
    cos, sin = attention.rotation_matrix[:T].real, attention.rotation_matrix[:T].imag  # (T, Dh // 2)

    def rotate(t):
        even, odd = t[:, 0::2], t[:, 1::2]
        return torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1).reshape(T, Dh)

    scores = torch.einsum("id,jd->ij", rotate(q), rotate(k)) * Dh**-0.5
    band = torch.ones(T, T, dtype=torch.bool).tril().triu(-(W - 1))
    return torch.softmax(torch.where(band, scores, torch.tensor(-1e9)), dim=-1)


def weights_every_head(model, tokens, block, head):
    """Every head's weights at once (B, H, T, T), then the one asked for; mask as an additive -inf bias."""
    attention = model.blocks[block].attention
    x = _attention_input(model, tokens, block)
    B, T, D = x.shape
    H = attention.num_heads
    Dh = D // H
    with torch.no_grad():
        q, k, _ = attention.qkv_linear(x).view(B, T, H, 3 * Dh).permute(0, 2, 1, 3).split(Dh, dim=-1)
    rotation = attention.rotation_matrix[:T]
    q = torch.view_as_real(torch.view_as_complex(q.contiguous().view(B, H, T, -1, 2)) * rotation).flatten(-2)
    k = torch.view_as_real(torch.view_as_complex(k.contiguous().view(B, H, T, -1, 2)) * rotation).flatten(-2)
    i = torch.arange(T).view(T, 1)
    j = torch.arange(T).view(1, T)
    bias = torch.zeros(T, T).masked_fill((j > i) | (j <= i - attention.window_size), -math.inf)
    return ((q @ k.transpose(-2, -1)) / math.sqrt(Dh) + bias).softmax(-1)[0, head]


ALTERNATIVES = {
    "10.record_activations": [
        record_with_context_manager,
        record_with_pre_hooks,
        record_with_global_hook,
        record_with_kwargs_hooks,
    ],
    "10.next_token_probabilities": [
        probabilities_by_hand,
        probabilities_from_log_softmax,
        probabilities_functional,
    ],
    "10.is_distribution": [distribution_isclose, distribution_in_double, distribution_where],
    "10.most_likely_next": [next_by_softmax, next_by_topk],
    "10.cosine_similarity_matrix": [similarity_broadcast, similarity_normalize, similarity_outer_norms],
    "10.attention_weights": [weights_einsum, weights_every_head],
}
