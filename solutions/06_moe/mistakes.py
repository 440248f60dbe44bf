"""Known wrong answers of notebook 06 (mixture of experts): the judge names them, the tests use
them as mutants.

Instructor-side only (next to the reference, not released). Each is complete and
self-contained, with exactly one thing wrong. The end-to-end tests paste this file into an
answer cell of the notebook, so it defines none of the notebook's names (FeedForward, MoeLayer,
load_balancing_loss, ...) nor of the variables its later cells set (x, moe, expert, routing,
counts, probs, D, E, K, N, ...): its helpers start with an underscore and its answers have names
of their own.

Key: B batch, T sequence length, D hidden size, F d_ff, E experts, K experts per token.
"""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from autograder.core import Mistake

# ------------------------------------------------------------------------- FeedForward


class _ThreeLinears(nn.Module):
    """The course's names: w1 and w3 from D up to F, w2 from F back down, no biases."""

    def __init__(self, hidden_size, d_ff):
        super().__init__()
        self.w1 = nn.Linear(hidden_size, d_ff, bias=False)
        self.w2 = nn.Linear(d_ff, hidden_size, bias=False)
        self.w3 = nn.Linear(hidden_size, d_ff, bias=False)


class _SwiGLUExpert(_ThreeLinears):
    """The right expert, for the layers below: their mistakes are elsewhere."""

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class HomeworkFormulaExpert(nn.Module):
    """The homework's W3 . SiGLU(W1(x) . W2(x)) in its own names (W1, W2 up to F, W3 back down),
    read as SiLU of the product. In the course's names it is w2(silu(w1 x * w3 x)), which is also
    what "SiLU applied after the product" gives: one function, one mistake."""

    def __init__(self, hidden_size, d_ff):
        super().__init__()
        self.w1 = nn.Linear(hidden_size, d_ff, bias=False)
        self.w2 = nn.Linear(hidden_size, d_ff, bias=False)
        self.w3 = nn.Linear(d_ff, hidden_size, bias=False)

    def forward(self, x):
        return self.w3(F.silu(self.w1(x) * self.w2(x)))


class SigmoidGatedExpert(_ThreeLinears):
    """The GLU of notebook 05 (the homework's "SiGLU") in place of SwiGLU."""

    def forward(self, x):
        return self.w2(torch.sigmoid(self.w1(x)) * self.w3(x))


class UngatedExpert(_ThreeLinears):
    """w3 is created and never used."""

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)))


class GeluGatedExpert(_ThreeLinears):
    """GEGLU: the GELU in place of SiLU."""

    def forward(self, x):
        return self.w2(F.gelu(self.w1(x)) * self.w3(x))


class BilinearExpert(_ThreeLinears):
    def forward(self, x):
        return self.w2(self.w1(x) * self.w3(x))


class SiluOnBothExpert(_ThreeLinears):
    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * F.silu(self.w3(x)))


class ExpertWithBiases(nn.Module):
    """nn.Linear's default bias=True, kept."""

    def __init__(self, hidden_size, d_ff):
        super().__init__()
        self.w1 = nn.Linear(hidden_size, d_ff)
        self.w2 = nn.Linear(d_ff, hidden_size)
        self.w3 = nn.Linear(hidden_size, d_ff)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class SiluOnOutputExpert(_ThreeLinears):
    """The activation moved from w1(x) to the end, after w2."""

    def forward(self, x):
        return F.silu(self.w2(self.w1(x) * self.w3(x)))


# ---------------------------------------------------------------------- MoeLayer.__init__


class _Routing(nn.Module):
    """A right forward over self.gate and self.experts; the mistakes below change one part of it."""

    def forward(self, x):
        router_logits = self.gate(x)  # (B, T, E)
        values, selected_experts = torch.topk(router_logits, self.n_experts_per_token)  # (B, T, K)
        return self._combine(x, F.softmax(values, dim=-1), selected_experts)

    def _combine(self, x, weights, selected_experts):
        """The homework's loop: each expert on its tokens, weighted, added into out."""
        out = torch.zeros_like(x)
        for i, expert in enumerate(self.experts):
            batch_idx, token_idx, topk_idx = torch.where(selected_experts == i)
            out[batch_idx, token_idx] += weights[batch_idx, token_idx, topk_idx, None] * expert(
                x[batch_idx, token_idx]
            )
        return out


class ExpertsInPlainList(_Routing):
    def __init__(self, hidden_size, d_ff, num_experts, n_experts_per_token):
        super().__init__()
        self.num_experts = num_experts
        self.n_experts_per_token = n_experts_per_token
        self.gate = nn.Linear(hidden_size, num_experts, bias=False)
        self.experts = [_SwiGLUExpert(hidden_size, d_ff) for _ in range(num_experts)]


class GateToHiddenSize(_Routing):
    def __init__(self, hidden_size, d_ff, num_experts, n_experts_per_token):
        super().__init__()
        self.num_experts = num_experts
        self.n_experts_per_token = n_experts_per_token
        self.gate = nn.Linear(hidden_size, hidden_size, bias=False)
        self.experts = nn.ModuleList([_SwiGLUExpert(hidden_size, d_ff) for _ in range(num_experts)])


class KExperts(_Routing):
    """n_experts_per_token experts built instead of num_experts."""

    def __init__(self, hidden_size, d_ff, num_experts, n_experts_per_token):
        super().__init__()
        self.num_experts = num_experts
        self.n_experts_per_token = n_experts_per_token
        self.gate = nn.Linear(hidden_size, num_experts, bias=False)
        self.experts = nn.ModuleList([_SwiGLUExpert(hidden_size, d_ff) for _ in range(n_experts_per_token)])


class ExpertsFromDff(_Routing):
    """FeedForward(d_ff, hidden_size): the two sizes swapped, so an expert takes d_ff features."""

    def __init__(self, hidden_size, d_ff, num_experts, n_experts_per_token):
        super().__init__()
        self.num_experts = num_experts
        self.n_experts_per_token = n_experts_per_token
        self.gate = nn.Linear(hidden_size, num_experts, bias=False)
        self.experts = nn.ModuleList([_SwiGLUExpert(d_ff, hidden_size) for _ in range(num_experts)])


class OneExpertRepeated(_Routing):
    """[FeedForward(...)] * num_experts: one module, E times."""

    def __init__(self, hidden_size, d_ff, num_experts, n_experts_per_token):
        super().__init__()
        self.num_experts = num_experts
        self.n_experts_per_token = n_experts_per_token
        self.gate = nn.Linear(hidden_size, num_experts, bias=False)
        self.experts = nn.ModuleList([_SwiGLUExpert(hidden_size, d_ff)] * num_experts)


class GateSwapped(_Routing):
    """nn.Linear(num_experts, hidden_size): the gate's two sizes swapped."""

    def __init__(self, hidden_size, d_ff, num_experts, n_experts_per_token):
        super().__init__()
        self.num_experts = num_experts
        self.n_experts_per_token = n_experts_per_token
        self.gate = nn.Linear(num_experts, hidden_size, bias=False)
        self.experts = nn.ModuleList([_SwiGLUExpert(hidden_size, d_ff) for _ in range(num_experts)])


# ------------------------------------------------------------------- MoeLayer.forward


class _RightInit(_Routing):
    def __init__(self, hidden_size, d_ff, num_experts, n_experts_per_token):
        super().__init__()
        self.num_experts = num_experts
        self.n_experts_per_token = n_experts_per_token
        self.gate = nn.Linear(hidden_size, num_experts, bias=False)
        self.experts = nn.ModuleList([_SwiGLUExpert(hidden_size, d_ff) for _ in range(num_experts)])


class NotRenormalised(_RightInit):
    """Mixtral's order stopped halfway: softmax over all E, top K, no division by their sum."""

    def forward(self, x):
        probabilities = F.softmax(self.gate(x), dim=-1)  # (B, T, E)
        weights, selected_experts = torch.topk(probabilities, self.n_experts_per_token)  # (B, T, K)
        return self._combine(x, weights, selected_experts)


class SoftmaxTwice(_RightInit):
    def forward(self, x):
        probabilities = F.softmax(self.gate(x), dim=-1)  # (B, T, E)
        values, selected_experts = torch.topk(probabilities, self.n_experts_per_token)  # (B, T, K)
        return self._combine(x, F.softmax(values, dim=-1), selected_experts)


class TopOneRepeated(_RightInit):
    """The best expert taken K times (argmax repeated) instead of the K best."""

    def forward(self, x):
        router_logits = self.gate(x)  # (B, T, E)
        best = router_logits.argmax(dim=-1, keepdim=True)  # (B, T, 1)
        selected_experts = best.repeat(1, 1, self.n_experts_per_token)  # (B, T, K)
        values = router_logits.gather(-1, selected_experts)
        return self._combine(x, F.softmax(values, dim=-1), selected_experts)


class GateOnExpertOutputs(_RightInit):
    """The router scores what the experts return (their sum) instead of the tokens."""

    def forward(self, x):
        router_logits = self.gate(sum(expert(x) for expert in self.experts))  # (B, T, E)
        values, selected_experts = torch.topk(router_logits, self.n_experts_per_token)
        return self._combine(x, F.softmax(values, dim=-1), selected_experts)


class SoftmaxOverTokens(_RightInit):
    def forward(self, x):
        values, selected_experts = torch.topk(self.gate(x), self.n_experts_per_token)  # (B, T, K)
        return self._combine(x, F.softmax(values, dim=1), selected_experts)


class WeightsDetached(_RightInit):
    """Right values; no gradient reaches the gate."""

    def forward(self, x):
        values, selected_experts = torch.topk(self.gate(x), self.n_experts_per_token)
        return self._combine(x, F.softmax(values, dim=-1).detach(), selected_experts)


class WeightsNotApplied(_RightInit):
    def _combine(self, x, weights, selected_experts):
        out = torch.zeros_like(x)
        for i, expert in enumerate(self.experts):
            batch_idx, token_idx, topk_idx = torch.where(selected_experts == i)
            out[batch_idx, token_idx] += expert(x[batch_idx, token_idx])
        return out


class Overwritten(_RightInit):
    """`=` in place of `+=`: each token keeps the last of its K contributions."""

    def _combine(self, x, weights, selected_experts):
        out = torch.zeros_like(x)
        for i, expert in enumerate(self.experts):
            batch_idx, token_idx, topk_idx = torch.where(selected_experts == i)
            out[batch_idx, token_idx] = weights[batch_idx, token_idx, topk_idx, None] * expert(
                x[batch_idx, token_idx]
            )
        return out


class StartsFromInput(_RightInit):
    def _combine(self, x, weights, selected_experts):
        out = x.clone()
        for i, expert in enumerate(self.experts):
            batch_idx, token_idx, topk_idx = torch.where(selected_experts == i)
            out[batch_idx, token_idx] += weights[batch_idx, token_idx, topk_idx, None] * expert(
                x[batch_idx, token_idx]
            )
        return out


# ------------------------------------------------------------------- load balancing


def balance_with_counts(router_logits, selected_experts):
    num_experts = router_logits.shape[-1]
    assigned = F.one_hot(selected_experts.reshape(-1), num_experts).float().sum(0)
    probabilities = F.softmax(router_logits, dim=-1).reshape(-1, num_experts).mean(0)
    return num_experts * (assigned * probabilities).sum()


def balance_per_token(router_logits, selected_experts):
    """The counts divided by the N tokens, not by the N * K assignments."""
    num_experts = router_logits.shape[-1]
    tokens = router_logits.reshape(-1, num_experts).shape[0]
    assigned = F.one_hot(selected_experts.reshape(-1), num_experts).float().sum(0) / tokens
    probabilities = F.softmax(router_logits, dim=-1).reshape(-1, num_experts).mean(0)
    return num_experts * (assigned * probabilities).sum()


def balance_without_e(router_logits, selected_experts):
    num_experts = router_logits.shape[-1]
    assigned = F.one_hot(selected_experts.reshape(-1), num_experts).float().mean(0)
    probabilities = F.softmax(router_logits, dim=-1).reshape(-1, num_experts).mean(0)
    return (assigned * probabilities).sum()


def balance_of_logits(router_logits, selected_experts):
    num_experts = router_logits.shape[-1]
    assigned = F.one_hot(selected_experts.reshape(-1), num_experts).float().mean(0)
    mean_logits = router_logits.reshape(-1, num_experts).mean(0)
    return num_experts * (assigned * mean_logits).sum()


def balance_of_probabilities_only(router_logits, selected_experts):
    """f taken from the probabilities too: selected_experts is never used."""
    num_experts = router_logits.shape[-1]
    probabilities = F.softmax(router_logits, dim=-1).reshape(-1, num_experts).mean(0)
    return num_experts * (probabilities * probabilities).sum()


def balance_detached(router_logits, selected_experts):
    num_experts = router_logits.shape[-1]
    assigned = F.one_hot(selected_experts.reshape(-1), num_experts).float().mean(0)
    probabilities = F.softmax(router_logits, dim=-1).detach().reshape(-1, num_experts).mean(0)
    return num_experts * (assigned * probabilities).sum()


def balance_first_choice_only(router_logits, selected_experts):
    """f from each token's first choice, selected_experts[..., 0]: the other K - 1 are dropped."""
    num_experts = router_logits.shape[-1]
    assigned = F.one_hot(selected_experts[..., 0].reshape(-1), num_experts).float().mean(0)
    probabilities = F.softmax(router_logits, dim=-1).reshape(-1, num_experts).mean(0)
    return num_experts * (assigned * probabilities).sum()


def balance_softmax_over_batch(router_logits, selected_experts):
    """dim=0: the batch of a (B, T, E) input."""
    num_experts = router_logits.shape[-1]
    assigned = F.one_hot(selected_experts.reshape(-1), num_experts).float().mean(0)
    probabilities = F.softmax(router_logits, dim=0).reshape(-1, num_experts).mean(0)
    return num_experts * (assigned * probabilities).sum()


def balance_softmax_over_tokens(router_logits, selected_experts):
    """dim=1: the tokens of a (B, T, E) input."""
    num_experts = router_logits.shape[-1]
    assigned = F.one_hot(selected_experts.reshape(-1), num_experts).float().mean(0)
    probabilities = F.softmax(router_logits, dim=1).reshape(-1, num_experts).mean(0)
    return num_experts * (assigned * probabilities).sum()


EXPERT = "SiLU of w1(x) alone, times w3(x) as it is, and w2 of that product last"
# What to change, in words and the notebook's formulas: the code is the hint ladder's to give.
INIT = (
    "the gate is one bias-free linear map from hidden_size to num_experts (a score per expert), and the "
    "experts are num_experts FeedForward(hidden_size, d_ff), each built by its own call, in an nn.ModuleList"
)
ROUTE = (
    "each token takes its K largest gate logits (torch.topk), a softmax over those K gives its weights, and "
    "each selected expert's output, times its weight, is added into that token's row of out"
)
SHARES = (
    "f_i = (assignments to expert i) / (N * K), P_i = mean over tokens of softmax(router_logits, dim=-1)_i, "
    "loss = E * sum_i f_i P_i"
)

MISTAKES = {
    "06.feed_forward": [
        Mistake(
            "the homework's garbled formula W3 . SiGLU(W1(x) . W2(x)) taken literally: SiLU applied after "
            "the product, to w1(x) * w3(x)",
            f"the product comes after the activation, which takes w1(x) alone: {EXPERT}.",
            HomeworkFormulaExpert,
        ),
        Mistake(
            "a sigmoid gate (the GLU, the homework's 'SiGLU') instead of SiLU (SwiGLU)",
            f"Mistral's and Llama's experts are SwiGLU: F.silu, x * sigmoid(x), not torch.sigmoid: {EXPERT}.",
            SigmoidGatedExpert,
        ),
        Mistake(
            "no gate: w3(x) is never used, the output is w2(silu(w1(x)))",
            f"multiply the activation by the second up-projection before w2: {EXPERT}.",
            UngatedExpert,
        ),
        Mistake(
            "GELU instead of SiLU (that is GEGLU)",
            f"the course's expert gates with SiLU (F.silu): {EXPERT}.",
            GeluGatedExpert,
        ),
        Mistake(
            "no activation: w2(w1(x) * w3(x)), the bilinear unit",
            f"pass w1(x) through F.silu before the product: {EXPERT}.",
            BilinearExpert,
        ),
        Mistake(
            "SiLU applied to both up-projections",
            f"only w1(x) goes through the activation; w3(x) multiplies it as it is: {EXPERT}.",
            SiluOnBothExpert,
        ),
        Mistake(
            "SiLU applied to the output, after w2, instead of to w1(x)",
            f"the activation goes inside, on w1(x), and w2 is the last layer: {EXPERT}.",
            SiluOnOutputExpert,
        ),
        Mistake(
            "the linears keep their biases (nn.Linear's default bias=True)",
            "Mistral's and Llama's experts have none: nn.Linear(..., bias=False) for w1, w2 and w3.",
            ExpertWithBiases,
        ),
    ],
    "06.moe_init": [
        Mistake(
            "experts kept in a plain Python list",
            "a module registers the modules among its attributes, not those inside a list, so the "
            "experts' parameters are not the layer's: an optimizer never trains them, state_dict() does not "
            f"save them, .to() does not move them. {INIT}.",
            ExpertsInPlainList,
        ),
        Mistake(
            "a gate nn.Linear(hidden_size, hidden_size): one score per feature, not per expert",
            f"the gate gives one logit per expert: {INIT}.",
            GateToHiddenSize,
        ),
        Mistake(
            "n_experts_per_token experts built instead of num_experts",
            f"the layer holds all E experts; each token uses K of them: {INIT}.",
            KExperts,
        ),
        Mistake(
            "one expert repeated num_experts times ([FeedForward(...)] * num_experts)",
            "multiplying a list repeats the same module, so every entry shares one set of weights: build "
            f"each expert with its own call, in a list comprehension. {INIT}.",
            OneExpertRepeated,
        ),
        Mistake(
            "a gate nn.Linear(num_experts, hidden_size), its two sizes swapped",
            "nn.Linear(in_features, out_features): the gate reads hidden_size features and gives "
            f"num_experts scores. {INIT}.",
            GateSwapped,
        ),
        Mistake(
            "experts built as FeedForward(d_ff, hidden_size), the two sizes swapped",
            "an expert maps hidden_size to hidden_size through d_ff: FeedForward(hidden_size, d_ff). "
            f"{INIT}.",
            ExpertsFromDff,
        ),
    ],
    "06.moe_routing": [
        Mistake(
            "softmax over all E logits, then the top K probabilities, not renormalised",
            "in this question (Mixtral's convention) the K weights sum to 1: divide the top K probabilities "
            f"by their sum (Hugging Face's order), or take the softmax of the top K logits only: {ROUTE}.",
            NotRenormalised,
        ),
        Mistake(
            "softmax applied twice: to all E logits, then again to the top K probabilities",
            f"one softmax, over the top K logits (or divide the top K probabilities by their sum): {ROUTE}.",
            SoftmaxTwice,
        ),
        Mistake(
            "the routing weights are detached from the gate",
            "without .detach() (or torch.no_grad()) on the weights: the gate learns only through them.",
            WeightsDetached,
        ),
        Mistake(
            "every token routed K times to its best expert (the top-1 repeated) instead of to its K best",
            f"take each token's K best experts, K different ones, with torch.topk: {ROUTE}.",
            TopOneRepeated,
        ),
        Mistake(
            "the gate applied after the experts: the router scores the experts' output instead of x",
            f"the router scores the tokens themselves: the gate reads x, before any expert runs. {ROUTE}.",
            GateOnExpertOutputs,
        ),
        Mistake(
            "the routing weights are not multiplied in: each token gets the plain sum of its K experts",
            f"scale each expert's output by its weight: {ROUTE}.",
            WeightsNotApplied,
        ),
        Mistake(
            "out[batch_idx, token_idx] = ... overwrites: each token keeps only the last of its K experts",
            f"add with +=, so that each token sums its K weighted experts: {ROUTE}.",
            Overwritten,
        ),
        Mistake(
            "the softmax taken over the tokens (dim=1) instead of over the K selected logits (dim=-1)",
            f"each token's K weights must sum to 1: the softmax runs over the last dimension, the K selected "
            f"logits. {ROUTE}.",
            SoftmaxOverTokens,
        ),
        Mistake(
            "out starts from x instead of zeros (a residual added inside the layer)",
            "start from zeros, out = torch.zeros_like(x), as the given line has it: the residual belongs to "
            "the transformer block (notebook 08), not to the MoE layer.",
            StartsFromInput,
        ),
    ],
    "06.load_balancing": [
        Mistake(
            "f counts the assignments instead of taking their share",
            f"divide the counts by the N * K assignments, so that f sums to 1: {SHARES}.",
            balance_with_counts,
        ),
        Mistake(
            "f divided by the N tokens instead of the N * K assignments (a uniform router gives K, as in "
            "Hugging Face's Mixtral code)",
            f"each token makes K assignments; divide by N * K so that f sums to 1: {SHARES}.",
            balance_per_token,
        ),
        Mistake(
            "the factor E is missing (a uniform router gives 1 / E)",
            f"multiply by E, so that a uniform router gives 1: {SHARES}.",
            balance_without_e,
        ),
        Mistake(
            "P averaged from the raw logits, without the softmax",
            f"P is a mean of probabilities: softmax(router_logits, dim=-1) first. {SHARES}.",
            balance_of_logits,
        ),
        Mistake(
            "f taken from the probabilities instead of the counted assignments (selected_experts unused)",
            f"f counts what the top-K selection did, from selected_experts: {SHARES}.",
            balance_of_probabilities_only,
        ),
        Mistake(
            "the probabilities are detached: no gradient reaches the router",
            "P must stay a differentiable function of router_logits: no .detach() or torch.no_grad(). "
            f"{SHARES}.",
            balance_detached,
        ),
        Mistake(
            "f counts only each token's first choice, selected_experts[..., 0]",
            f"every one of the K choices is an assignment: count all of selected_experts. {SHARES}.",
            balance_first_choice_only,
        ),
        Mistake(
            "the softmax taken over the batch (dim=0) instead of over the experts (dim=-1)",
            "each token's probabilities over the E experts sum to 1: softmax(router_logits, dim=-1). "
            f"{SHARES}.",
            balance_softmax_over_batch,
        ),
        Mistake(
            "the softmax taken over the tokens (dim=1) instead of over the experts (dim=-1)",
            "each token's probabilities over the E experts sum to 1: softmax(router_logits, dim=-1). "
            f"{SHARES}.",
            balance_softmax_over_tokens,
        ),
    ],
}


# ------------------------------------------------------------- sorted dispatch (extension)


def _sorted_pairs(x, selected_experts, experts):
    """The right first half: pairs sorted by expert, each expert run once on its slice."""
    num_tokens, k = selected_experts.shape
    flat = selected_experts.reshape(-1)
    order = torch.argsort(flat, stable=True)
    token_of_pair = torch.arange(num_tokens).repeat_interleave(k)[order]
    counts = torch.bincount(flat, minlength=len(experts)).tolist()
    rows = x[token_of_pair].split(counts)
    outputs = torch.cat(
        [expert(chunk) for expert, chunk in zip(experts, rows, strict=True) if chunk.shape[0]]
    )
    return order, token_of_pair, outputs


def dispatch_weights_unsorted(x, selected_experts, weights, experts):
    order, token_of_pair, outputs = _sorted_pairs(x, selected_experts, experts)
    return torch.zeros_like(x).index_add_(0, token_of_pair, outputs * weights.reshape(-1, 1))


def dispatch_tokens_unsorted(x, selected_experts, weights, experts):
    order, _, outputs = _sorted_pairs(x, selected_experts, experts)
    tokens = torch.arange(x.shape[0]).repeat_interleave(selected_experts.shape[1])
    return torch.zeros_like(x).index_add_(0, tokens, outputs * weights.reshape(-1)[order, None])


def dispatch_overwritten(x, selected_experts, weights, experts):
    order, token_of_pair, outputs = _sorted_pairs(x, selected_experts, experts)
    out = torch.zeros_like(x)
    out[token_of_pair] = outputs * weights.reshape(-1)[order, None]
    return out


def dispatch_unweighted(x, selected_experts, weights, experts):
    order, token_of_pair, outputs = _sorted_pairs(x, selected_experts, experts)
    return torch.zeros_like(x).index_add_(0, token_of_pair, outputs)


def dispatch_per_token(x, selected_experts, weights, experts):
    """Right output, one expert call per (token, slot)."""
    out = torch.zeros_like(x)
    for n in range(x.shape[0]):
        for slot in range(selected_experts.shape[1]):
            expert = experts[int(selected_experts[n, slot])]
            out[n] += weights[n, slot] * expert(x[n : n + 1])[0]
    return out


SORTED = (
    "the (token, slot) pairs are sorted by expert once, each pair's token index and weight carried through "
    "the same order, each expert run once on its own rows, and a token's K rows added back into it"
)

MISTAKES["06.sorted_dispatch"] = [
    Mistake(
        "the weights left in the original order while the rows were sorted",
        f"sort the weights with the same order as the rows: {SORTED}.",
        dispatch_weights_unsorted,
    ),
    Mistake(
        "the rows added back to the tokens in the original order, not the sorted one",
        f"the token index of each row must be sorted with it: {SORTED}.",
        dispatch_tokens_unsorted,
    ),
    Mistake(
        "out[token_ids] = ... overwrites a token's earlier rows instead of adding them",
        f"a token has K rows, one per expert: add them with index_add_. {SORTED}.",
        dispatch_overwritten,
    ),
    Mistake(
        "the routing weights are not multiplied in",
        f"scale each expert's output row by its token's weight for that expert: {SORTED}.",
        dispatch_unweighted,
    ),
    Mistake(
        "one expert call per token and slot (a Python loop over tokens)",
        f"run each expert once, on all its tokens together: {SORTED}.",
        dispatch_per_token,
    ),
]


# ---------------------------------------------------- expert capacity, token dropping (added)


def _queue_places(order_keys, selected_experts, num_experts):
    """Each pair's place in its expert's queue, the pairs queued by ascending `order_keys` (N, K)."""
    order = torch.argsort(order_keys.reshape(-1), stable=True)
    queue = F.one_hot(selected_experts.reshape(-1)[order], num_experts)  # (N K, E), in queue order
    places = torch.empty_like(order)
    places[order] = (queue.cumsum(0) * queue).sum(-1) - 1
    return places.reshape(selected_experts.shape)


def _slot_major(selected_experts):
    """The course's queue: slot by slot, earlier tokens first within a slot."""
    num_tokens, k = selected_experts.shape
    return torch.arange(k)[None, :] * num_tokens + torch.arange(num_tokens)[:, None]


def _route_kept(x, selected_experts, weights, experts, kept):
    out = torch.zeros_like(x)
    for i, expert in enumerate(experts):
        token_idx, slot_idx = torch.where((selected_experts == i) & kept)
        if token_idx.numel():
            out.index_add_(0, token_idx, weights[token_idx, slot_idx, None] * expert(x[token_idx]))
    return out


def _kept_with(selected_experts, num_experts, limit, order_keys=None):
    keys = _slot_major(selected_experts) if order_keys is None else order_keys
    return _queue_places(keys, selected_experts, num_experts) < limit


def _course_capacity(capacity_factor, selected_experts, num_experts):
    return math.ceil(capacity_factor * selected_experts.numel() / num_experts)  # N K pairs


def capacity_floored(x, selected_experts, weights, experts, capacity_factor):
    num_tokens, k = selected_experts.shape
    limit = math.floor(capacity_factor * num_tokens * k / len(experts))
    kept = _kept_with(selected_experts, len(experts), limit)
    return _route_kept(x, selected_experts, weights, experts, kept), kept


def capacity_without_k(x, selected_experts, weights, experts, capacity_factor):
    """C = ceil(c N / E): an expert's share of the tokens, not of the N K pairs."""
    limit = math.ceil(capacity_factor * selected_experts.shape[0] / len(experts))
    kept = _kept_with(selected_experts, len(experts), limit)
    return _route_kept(x, selected_experts, weights, experts, kept), kept


def capacity_last_tokens_first(x, selected_experts, weights, experts, capacity_factor):
    limit = _course_capacity(capacity_factor, selected_experts, len(experts))
    num_tokens, k = selected_experts.shape
    keys = torch.arange(k)[None, :] * num_tokens + torch.arange(num_tokens - 1, -1, -1)[:, None]
    kept = _kept_with(selected_experts, len(experts), limit, keys)
    return _route_kept(x, selected_experts, weights, experts, kept), kept


def capacity_by_weight(x, selected_experts, weights, experts, capacity_factor):
    """V-MoE's batch-prioritized order: the largest weights first, whatever the slot."""
    limit = _course_capacity(capacity_factor, selected_experts, len(experts))
    kept = _kept_with(selected_experts, len(experts), limit, -weights)
    return _route_kept(x, selected_experts, weights, experts, kept), kept


def capacity_token_by_token(x, selected_experts, weights, experts, capacity_factor):
    """The pairs queued in the (N, K) tensor's own order: token 0's K choices, then token 1's."""
    limit = _course_capacity(capacity_factor, selected_experts, len(experts))
    keys = torch.arange(selected_experts.numel()).reshape(selected_experts.shape)
    kept = _kept_with(selected_experts, len(experts), limit, keys)
    return _route_kept(x, selected_experts, weights, experts, kept), kept


def capacity_whole_token_dropped(x, selected_experts, weights, experts, capacity_factor):
    """A token loses all its pairs when one of them is over capacity."""
    limit = _course_capacity(capacity_factor, selected_experts, len(experts))
    kept = _kept_with(selected_experts, len(experts), limit).all(-1, keepdim=True).expand_as(selected_experts)
    return _route_kept(x, selected_experts, weights, experts, kept), kept


def capacity_renormalised(x, selected_experts, weights, experts, capacity_factor):
    """The kept weights of each token divided by their sum."""
    limit = _course_capacity(capacity_factor, selected_experts, len(experts))
    kept = _kept_with(selected_experts, len(experts), limit)
    kept_weights = weights * kept
    total = kept_weights.sum(-1, keepdim=True)
    shared = torch.where(total > 0, kept_weights / total.clamp(min=1e-30), 0.0)
    return _route_kept(x, selected_experts, shared, experts, kept), kept


def capacity_dropped_still_added(x, selected_experts, weights, experts, capacity_factor):
    """kept is right, but every pair's output is added, the dropped ones too."""
    limit = _course_capacity(capacity_factor, selected_experts, len(experts))
    kept = _kept_with(selected_experts, len(experts), limit)
    everything = torch.ones_like(kept)
    return _route_kept(x, selected_experts, weights, experts, everything), kept


def capacity_every_pair_computed(x, selected_experts, weights, experts, capacity_factor):
    """Right output, but each expert runs on all its pairs, the dropped ones then weighted 0."""
    limit = _course_capacity(capacity_factor, selected_experts, len(experts))
    kept = _kept_with(selected_experts, len(experts), limit)
    everything = torch.ones_like(kept)
    return _route_kept(x, selected_experts, weights * kept, experts, everything), kept


QUEUE = (
    "C = ceil(capacity_factor * N * K / E) pairs per expert; the pairs queue slot by slot (every token's "
    "first choice before any second choice), earlier tokens first within a slot, and each expert keeps the "
    "first C of its queue"
)
DROPPED = (
    "a kept pair adds its weight, as given, times its expert's output; a dropped pair adds nothing, and the "
    "kept weights are not renormalised"
)

MISTAKES["06.capacity_dispatch"] = [
    Mistake(
        "the capacity rounded down (floor) instead of up",
        f"round c N K / E up, so that C >= 1 for any capacity factor: {QUEUE}.",
        capacity_floored,
    ),
    Mistake(
        "the capacity taken from N / E, ignoring the K pairs of each token",
        f"the N tokens make N K (token, slot) pairs, and an even share is N K / E: {QUEUE}.",
        capacity_without_k,
    ),
    Mistake(
        "the last tokens queued first",
        f"earlier tokens are kept first, within each slot: {QUEUE}.",
        capacity_last_tokens_first,
    ),
    Mistake(
        "the pairs queued by their weight (V-MoE's batch-prioritized routing), not by slot and position",
        f"this question fixes the slot-then-position order of GShard and Switch: {QUEUE}.",
        capacity_by_weight,
    ),
    Mistake(
        "the pairs queued token by token (token 0's K choices, then token 1's), not slot by slot",
        f"every token's first choice queues before any token's second choice: {QUEUE}.",
        capacity_token_by_token,
    ),
    Mistake(
        "a token dropped whole when one of its pairs is over capacity",
        f"capacity drops (token, slot) pairs, each on its own: {QUEUE}.",
        capacity_whole_token_dropped,
    ),
    Mistake(
        "the kept weights renormalised to sum to 1",
        f"Switch Transformer does not renormalise: {DROPPED}.",
        capacity_renormalised,
    ),
    Mistake(
        "the dropped pairs' outputs still added to their tokens",
        f"a pair dropped is dropped from the output too: {DROPPED}.",
        capacity_dropped_still_added,
    ),
    Mistake(
        "every pair computed by its expert, the dropped ones then weighted 0",
        "a dropped pair is never computed, which is the work a capacity saves: give each expert only its "
        "kept pairs.",
        capacity_every_pair_computed,
    ),
]


# ------------------------------------------------------------------- router z-loss (added)


def z_loss_naive_log_sum_exp(router_logits):
    return torch.log(torch.exp(router_logits).sum(-1)).square().mean()


def z_loss_summed(router_logits):
    return torch.logsumexp(router_logits, dim=-1).square().sum()


def z_loss_square_of_mean(router_logits):
    return torch.logsumexp(router_logits, dim=-1).mean().square()


def z_loss_squares_inside(router_logits):
    return torch.logsumexp(router_logits.square(), dim=-1).mean()


def z_loss_not_squared(router_logits):
    return torch.logsumexp(router_logits, dim=-1).mean()


def z_loss_of_the_largest_logit(router_logits):
    return router_logits.amax(dim=-1).square().mean()


def z_loss_of_the_logits(router_logits):
    """An L2 penalty on every logit, not on each token's log-sum-exp."""
    return router_logits.square().mean()


def z_loss_over_the_first_dimension(router_logits):
    return torch.logsumexp(router_logits, dim=0).square().mean()


def z_loss_detached(router_logits):
    return torch.logsumexp(router_logits.detach(), dim=-1).square().mean()


Z = "z = mean over the tokens of (log sum_i exp(logit_i))^2, the sum over each token's E logits"

MISTAKES["06.router_z_loss"] = [
    Mistake(
        "log(sum(exp(logits))) computed as written: exp overflows float32 above about 88.7",
        f"subtract each token's largest logit before the exponential and add it back after the log (what "
        f"torch.logsumexp does): {Z}.",
        z_loss_naive_log_sum_exp,
    ),
    Mistake(
        "the squares summed over the tokens instead of averaged",
        f"a mean, so that the loss does not grow with the batch: {Z}.",
        z_loss_summed,
    ),
    Mistake(
        "the mean of the log-sum-exps squared, instead of the mean of their squares",
        f"square each token's log-sum-exp, then average: {Z}.",
        z_loss_square_of_mean,
    ),
    Mistake(
        "the logits squared inside the log-sum-exp",
        f"the square goes outside, on each token's log-sum-exp: {Z}.",
        z_loss_squares_inside,
    ),
    Mistake(
        "the log-sum-exp not squared",
        f"square each token's log-sum-exp before the mean: {Z}.",
        z_loss_not_squared,
    ),
    Mistake(
        "each token's largest logit in place of its log-sum-exp",
        f"the log-sum-exp counts every logit, not only the largest: {Z}.",
        z_loss_of_the_largest_logit,
    ),
    Mistake(
        "the mean of the squared logits (an L2 penalty), not of the squared log-sum-exps",
        f"one log-sum-exp per token first: {Z}.",
        z_loss_of_the_logits,
    ),
    Mistake(
        "the log-sum-exp taken over the first dimension instead of over the experts (dim=-1)",
        f"each token's log-sum-exp runs over its E logits, the last dimension: {Z}.",
        z_loss_over_the_first_dimension,
    ),
    Mistake(
        "the logits detached: no gradient reaches the router",
        f"the z-loss must stay a differentiable function of router_logits: no .detach() or torch.no_grad(). "
        f"{Z}.",
        z_loss_detached,
    ),
]


# ------------------------------------------- balancing without an auxiliary loss (added)


def _routed(scores, bias, k):
    """The right routing, for the mistakes of the update."""
    selected = torch.topk(scores + bias, k).indices
    chosen = scores.gather(-1, selected)
    return selected, chosen / chosen.sum(-1, keepdim=True)


def _updated(bias, selected_experts, gamma):
    """The right update, for the mistakes of the routing."""
    load = torch.bincount(selected_experts.flatten(), minlength=bias.numel()).float()
    return bias - gamma * torch.sign(load - load.mean())


def _routing_without_bias(scores, bias, k):
    selected = torch.topk(scores, k).indices
    chosen = scores.gather(-1, selected)
    return selected, chosen / chosen.sum(-1, keepdim=True)


def _routing_bias_subtracted(scores, bias, k):
    selected = torch.topk(scores - bias, k).indices
    chosen = scores.gather(-1, selected)
    return selected, chosen / chosen.sum(-1, keepdim=True)


def _weights_from_biased_scores(scores, bias, k):
    biased = scores + bias
    chosen, selected = torch.topk(biased, k)
    return selected, chosen / chosen.sum(-1, keepdim=True)


def _weights_not_normalised(scores, bias, k):
    selected = torch.topk(scores + bias, k).indices
    return selected, scores.gather(-1, selected)


def _weights_softmax(scores, bias, k):
    """DeepSeek-V2's softmax over the selected scores, in place of V3's division by their sum."""
    selected = torch.topk(scores + bias, k).indices
    return selected, F.softmax(scores.gather(-1, selected), dim=-1)


def _update_sign_flipped(bias, selected_experts, gamma):
    load = torch.bincount(selected_experts.flatten(), minlength=bias.numel()).float()
    return bias + gamma * torch.sign(load - load.mean())


def _update_by_the_gap(bias, selected_experts, gamma):
    """gamma times the load's gap to the mean, not its sign."""
    load = torch.bincount(selected_experts.flatten(), minlength=bias.numel()).float()
    return bias - gamma * (load - load.mean())


def _update_at_the_mean_lowered(bias, selected_experts, gamma):
    load = torch.bincount(selected_experts.flatten(), minlength=bias.numel()).float()
    return torch.where(load < load.mean(), bias + gamma, bias - gamma)


def _update_first_choices_only(bias, selected_experts, gamma):
    load = torch.bincount(selected_experts[:, 0], minlength=bias.numel()).float()
    return bias - gamma * torch.sign(load - load.mean())


def _update_mean_without_k(bias, selected_experts, gamma):
    """The mean load taken as N / E: the tokens' share, not the N K assignments'."""
    load = torch.bincount(selected_experts.flatten(), minlength=bias.numel()).float()
    return bias - gamma * torch.sign(load - selected_experts.shape[0] / bias.numel())


CHOOSE = "the bias is added to the scores to choose each token's top K experts: topk(scores + bias, k)"
WEIGH = (
    "the weights come from the original scores of the experts chosen, divided by their sum per token; the "
    "bias never enters them"
)
UPDATE = (
    "load_i = the assignments to expert i in the batch (all K per token), mean = N K / E; an expert above "
    "the mean loses gamma, one below gains gamma, one exactly at the mean keeps its bias"
)

MISTAKES["06.biased_routing"] = [
    Mistake("the selection made without the bias", f"{CHOOSE}.", (_routing_without_bias, _updated)),
    Mistake(
        "the bias subtracted from the scores to choose",
        f"an underloaded expert has a positive bias, which must make it more likely to be chosen: {CHOOSE}.",
        (_routing_bias_subtracted, _updated),
    ),
    Mistake(
        "the weights taken from the biased scores",
        f"the bias only chooses; {WEIGH}.",
        (_weights_from_biased_scores, _updated),
    ),
    Mistake(
        "the weights not normalised over the experts chosen",
        f"DeepSeek-V3 divides the chosen sigmoid scores by their sum: {WEIGH}.",
        (_weights_not_normalised, _updated),
    ),
    Mistake(
        "a softmax over the chosen scores (DeepSeek-V2's gate) instead of dividing them by their sum",
        f"the scores are already sigmoid affinities in (0, 1): {WEIGH}.",
        (_weights_softmax, _updated),
    ),
    Mistake(
        "the update's sign flipped: an overloaded expert's bias raised",
        f"a bias that rises makes an expert chosen more often: {UPDATE}.",
        (_routed, _update_sign_flipped),
    ),
    Mistake(
        "the bias moved by gamma times the load's gap to the mean, not by gamma",
        f"the step is gamma whatever the gap, only its sign counts: {UPDATE}.",
        (_routed, _update_by_the_gap),
    ),
    Mistake(
        "an expert exactly at the mean load lowered",
        f"sign(0) = 0: {UPDATE}.",
        (_routed, _update_at_the_mean_lowered),
    ),
    Mistake(
        "the load counted from each token's first choice only",
        f"every one of the K choices is an assignment: {UPDATE}.",
        (_routed, _update_first_choices_only),
    ),
    Mistake(
        "the mean load taken as N / E, ignoring the K choices of each token",
        f"{UPDATE}.",
        (_routed, _update_mean_without_k),
    ),
]
