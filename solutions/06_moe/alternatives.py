"""Correct answers to notebook 06 (mixture of experts) written differently from the reference.

Key: B batch, T sequence length, D hidden size, F d_ff, E experts, K experts per token,
N = B * T tokens. The reference routes with the homework's loop over experts (torch.where, then
`out[...] += ...`) and a softmax over the top-K logits; Mixtral's order (softmax over all E,
top K, renormalise; Hugging Face's order) is the same function.
"""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from grader.casework import Answer

# ------------------------------------------------------------------------- FeedForward


class FeedForwardHFNames(nn.Module):
    """Hugging Face's names, registered down, up, gate (the check finds w2 by its shape)."""

    def __init__(self, hidden_size: int, d_ff: int):
        super().__init__()
        self.down_proj = nn.Linear(d_ff, hidden_size, bias=False)
        self.up_proj = nn.Linear(hidden_size, d_ff, bias=False)
        self.gate_proj = nn.Linear(hidden_size, d_ff, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class FeedForwardFused(nn.Module):
    """One Linear(D, 2 F) for both up-projections, chunked: the gated half first."""

    def __init__(self, hidden_size: int, d_ff: int):
        super().__init__()
        self.w13 = nn.Linear(hidden_size, 2 * d_ff, bias=False)
        self.w2 = nn.Linear(d_ff, hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gated, up = self.w13(x).chunk(2, dim=-1)  # (..., F) each
        return self.w2(gated * torch.sigmoid(gated) * up)


class FeedForwardFunctional(nn.Module):
    """Raw nn.Parameter matrices and F.linear; SiLU written as x * sigmoid(x)."""

    def __init__(self, hidden_size: int, d_ff: int):
        super().__init__()
        self.w1 = nn.Parameter(torch.randn(d_ff, hidden_size) * hidden_size**-0.5)
        self.w3 = nn.Parameter(torch.randn(d_ff, hidden_size) * hidden_size**-0.5)
        self.w2 = nn.Parameter(torch.randn(hidden_size, d_ff) * d_ff**-0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.linear(x, self.w1)
        return F.linear(h * torch.sigmoid(h) * F.linear(x, self.w3), self.w2)


# ---------------------------------------------------------------------------- MoeLayer


class _MoeBase(nn.Module):
    """A right __init__ with fused experts; each subclass routes in its own way."""

    def __init__(self, hidden_size: int, d_ff: int, num_experts: int, n_experts_per_token: int):
        super().__init__()
        self.num_experts = num_experts
        self.n_experts_per_token = n_experts_per_token
        self.gate = nn.Linear(hidden_size, num_experts, bias=False)
        self.experts = nn.ModuleList([FeedForwardFused(hidden_size, d_ff) for _ in range(num_experts)])


class MoeMixtralOrder(_MoeBase):
    """Hugging Face's Mixtral order: softmax over all E in float32, top K, renormalise."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        probabilities = F.softmax(self.gate(x), dim=-1, dtype=torch.float32)  # (B, T, E)
        weights, selected = torch.topk(probabilities, self.n_experts_per_token)  # (B, T, K)
        weights = (weights / weights.sum(dim=-1, keepdim=True)).to(x.dtype)
        out = torch.zeros_like(x)
        for i, expert in enumerate(self.experts):
            batch_idx, token_idx, topk_idx = torch.where(selected == i)
            out[batch_idx, token_idx] += weights[batch_idx, token_idx, topk_idx, None] * expert(
                x[batch_idx, token_idx]
            )
        return out


class MoeDense(_MoeBase):
    """Every expert on every token; the weights scattered into (B, T, E), zero off the top K."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        values, selected = torch.topk(self.gate(x), self.n_experts_per_token)  # (B, T, K)
        dense = torch.zeros(*x.shape[:-1], self.num_experts).scatter(-1, selected, values.softmax(-1))
        outputs = torch.stack([expert(x) for expert in self.experts], dim=-2)  # (B, T, E, D)
        return torch.einsum("bte,bted->btd", dense, outputs)


class MoeIndexAdd(_MoeBase):
    """The homework's loop on flattened tokens, accumulated with index_add_."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, D = x.shape
        tokens = x.reshape(B * T, D)  # (N, D)
        values, selected = torch.topk(self.gate(tokens), self.n_experts_per_token)  # (N, K)
        weights = F.softmax(values, dim=-1)
        out = torch.zeros_like(tokens)
        for i, expert in enumerate(self.experts):
            token_idx, topk_idx = torch.where(selected == i)
            out.index_add_(0, token_idx, weights[token_idx, topk_idx, None] * expert(tokens[token_idx]))
        return out.reshape(B, T, D)


class MoeLoopOverSlots(_MoeBase):
    """A loop over the K slots, then the experts, with boolean masks instead of torch.where."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        values, selected = torch.topk(self.gate(x), self.n_experts_per_token)  # (B, T, K)
        weights = torch.exp(values - values.logsumexp(dim=-1, keepdim=True))
        out = torch.zeros_like(x)
        for slot in range(self.n_experts_per_token):
            for i, expert in enumerate(self.experts):
                chosen = selected[..., slot] == i  # (B, T)
                out[chosen] = out[chosen] + weights[..., slot][chosen, None] * expert(x[chosen])
        return out


class MoeGateWithBias(MoeMixtralOrder):
    """A gate with a bias (the question leaves it free) and experts added one by one."""

    def __init__(self, hidden_size: int, d_ff: int, num_experts: int, n_experts_per_token: int):
        nn.Module.__init__(self)
        self.num_experts = num_experts
        self.n_experts_per_token = n_experts_per_token
        self.gate = nn.Linear(hidden_size, num_experts)
        self.experts = nn.ModuleList()
        for _ in range(num_experts):
            self.experts.append(FeedForwardHFNames(hidden_size, d_ff))


class MoePlainList(MoeIndexAdd):
    """Experts in a plain Python list: not registered (06.moe_init says so), routed right."""

    def __init__(self, hidden_size: int, d_ff: int, num_experts: int, n_experts_per_token: int):
        nn.Module.__init__(self)
        self.num_experts = num_experts
        self.n_experts_per_token = n_experts_per_token
        self.gate = nn.Linear(hidden_size, num_experts, bias=False)
        self.experts = [FeedForwardFused(hidden_size, d_ff) for _ in range(num_experts)]


# ------------------------------------------------------------------- load balancing


def balance_bincount(router_logits: torch.Tensor, selected_experts: torch.Tensor) -> torch.Tensor:
    """f from torch.bincount; P over the flattened tokens."""
    E = router_logits.shape[-1]
    counts = torch.bincount(selected_experts.flatten(), minlength=E)  # (E,)
    f = counts / selected_experts.numel()
    P = router_logits.reshape(-1, E).softmax(dim=-1).mean(dim=0)  # (E,)
    return E * torch.dot(f.to(P.dtype), P)


def balance_scatter_add(router_logits: torch.Tensor, selected_experts: torch.Tensor) -> torch.Tensor:
    """f from scatter_add of ones; P summed and divided by N by hand."""
    E = router_logits.shape[-1]
    selected = selected_experts.reshape(-1)
    f = torch.zeros(E).scatter_add(0, selected, torch.ones(selected.shape)) / selected.numel()
    probabilities = torch.softmax(router_logits, dim=-1).reshape(-1, E)  # (N, E)
    P = probabilities.sum(dim=0) / probabilities.shape[0]
    return (f * P).sum() * E


# ------------------------------------------------------------------ sorted dispatch


def dispatch_with_where(x, selected_experts, weights, experts):
    """The homework's loop over experts on flat tokens: torch.where, one call per expert."""
    out = torch.zeros_like(x)
    for i, expert in enumerate(experts):
        token_idx, slot_idx = torch.where(selected_experts == i)
        if token_idx.numel():
            out.index_add_(0, token_idx, weights[token_idx, slot_idx, None] * expert(x[token_idx]))
    return out


def dispatch_with_sort_and_offsets(x, selected_experts, weights, experts):
    """torch.sort, then slices between cumulative counts; index_put_ with accumulate=True."""
    flat_experts, order = torch.sort(selected_experts.flatten(), stable=True)
    tokens = order // selected_experts.shape[1]
    ends = torch.cumsum(torch.bincount(flat_experts, minlength=len(experts)), 0).tolist()
    out = torch.zeros_like(x)
    start = 0
    for expert, end in zip(experts, ends, strict=True):
        if end > start:
            rows = tokens[start:end]
            scaled = weights.flatten()[order[start:end], None] * expert(x[rows])
            out.index_put_((rows,), scaled, accumulate=True)
        start = end
    return out


ALTERNATIVES = {
    "06.feed_forward": [FeedForwardHFNames, FeedForwardFused, FeedForwardFunctional],
    "06.moe_init": [MoeMixtralOrder, MoeGateWithBias],
    "06.moe_routing": [
        MoeMixtralOrder,
        MoeDense,
        MoeIndexAdd,
        MoeLoopOverSlots,
        MoeGateWithBias,
        MoePlainList,
    ],
    "06.load_balancing": [balance_bincount, balance_scatter_add],
    "06.sorted_dispatch": [dispatch_with_where, dispatch_with_sort_and_offsets],
}


# ------------------------------------------------------------ expert capacity (added)


def capacity_by_where_on_slots(x, selected_experts, weights, experts, capacity_factor):
    """torch.where on the (K, N) transpose lists an expert's pairs slot by slot, earlier tokens first:
    its first C are kept. Then one call per expert on those rows."""
    num_tokens, k = selected_experts.shape
    limit = math.ceil(num_tokens * k * capacity_factor / len(experts))
    kept = torch.zeros(k, num_tokens, dtype=torch.bool)
    out = torch.zeros_like(x)
    for i, expert in enumerate(experts):
        slots, tokens = torch.where(selected_experts.T == i)  # row-major: slot first, then token
        slots, tokens = slots[:limit], tokens[:limit]
        kept[slots, tokens] = True
        if tokens.numel():
            out.index_add_(0, tokens, weights[tokens, slots, None] * expert(x[tokens]))
    return out, kept.T


def capacity_with_counters(x, selected_experts, weights, experts, capacity_factor):
    """The queue walked in Python with one counter per expert; then the pairs sorted by expert, as
    sorted_dispatch does, and each expert run once on its kept rows."""
    num_tokens, k = selected_experts.shape
    limit = -(-capacity_factor * num_tokens * k // len(experts))  # ceil without math
    taken = [0] * len(experts)
    kept = torch.zeros(num_tokens, k, dtype=torch.bool)
    for slot in range(k):
        for token in range(num_tokens):
            expert = int(selected_experts[token, slot])
            if taken[expert] < limit:
                taken[expert] += 1
                kept[token, slot] = True
    token_of_pair, slot_of_pair = torch.nonzero(kept, as_tuple=True)
    expert_of_pair = selected_experts[token_of_pair, slot_of_pair]
    order = torch.argsort(expert_of_pair, stable=True)
    token_of_pair, slot_of_pair = token_of_pair[order], slot_of_pair[order]
    counts = torch.bincount(expert_of_pair, minlength=len(experts)).tolist()
    rows = x[token_of_pair].split(counts)
    outputs = [expert(chunk) for expert, chunk in zip(experts, rows, strict=True) if len(chunk)]
    out = torch.zeros_like(x)
    if outputs:
        out.index_add_(0, token_of_pair, torch.cat(outputs) * weights[token_of_pair, slot_of_pair, None])
    return out, kept


ALTERNATIVES["06.capacity_dispatch"] = [capacity_by_where_on_slots, capacity_with_counters]


# ------------------------------------------------------------------- router z-loss (added)


def z_loss_shifted_by_the_max(router_logits):
    """The log-sum-exp written out, each row shifted by its largest logit."""
    largest = router_logits.amax(dim=-1, keepdim=True)  # (..., 1)
    lse = largest.squeeze(-1) + torch.log(torch.exp(router_logits - largest).sum(dim=-1))
    return (lse**2).mean()


def z_loss_from_log_softmax(router_logits):
    """log softmax(l)_i = l_i - logsumexp(l): the log-sum-exp is any logit less its log-probability."""
    lse = (router_logits - F.log_softmax(router_logits, dim=-1))[..., 0]
    return torch.mean(lse * lse)


ALTERNATIVES["06.router_z_loss"] = [z_loss_shifted_by_the_max, z_loss_from_log_softmax]


# ------------------------------------------- balancing without an auxiliary loss (added)


def routing_by_argsort(scores, bias, k):
    """argsort of the biased scores; the weights gathered by fancy indexing."""
    selected = torch.argsort(scores + bias, dim=-1, descending=True)[:, :k]
    chosen = scores[torch.arange(scores.shape[0])[:, None], selected]
    return selected, chosen / chosen.sum(dim=-1, keepdim=True)


def update_by_comparisons(bias, selected_experts, gamma):
    """The load from one_hot; the three cases written out with torch.where."""
    load = F.one_hot(selected_experts.reshape(-1), bias.shape[0]).sum(0)  # (E,)
    mean = selected_experts.numel() / bias.shape[0]
    return torch.where(load > mean, bias - gamma, torch.where(load < mean, bias + gamma, bias))


def routing_by_masking(scores, bias, k):
    """The top K of scores + bias, its weights as a dense (N, E) row masked to those K."""
    selected = torch.topk(scores + bias, k, sorted=False).indices
    mask = torch.zeros_like(scores).scatter(-1, selected, 1.0)
    dense = scores * mask / (scores * mask).sum(-1, keepdim=True)  # (N, E)
    return selected, dense.gather(-1, selected)


def update_in_float64(bias, selected_experts, gamma):
    load = torch.bincount(selected_experts.flatten(), minlength=len(bias)).double()
    return (bias.double() + gamma * torch.sign(load.mean() - load)).float()


ALTERNATIVES["06.biased_routing"] = [
    Answer("argsort_comparisons", routing_by_argsort, update_by_comparisons),
    Answer("masking_float64", routing_by_masking, update_in_float64),
]
