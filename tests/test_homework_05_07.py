"""Notebooks 05-07 answered the way the original homework's stub and text lead (Questions 16-22), with
the freedoms it leaves: names of its own for the linears, Mistral's flattened routing loop, Llama's
RMSNorm signature. Written for these tests from the homework's text; each earns full marks on every
check it answers, on the visible cases and on hidden ones."""

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from autograder import reference

from .helpers.submissions import verdict

# Question 22 in Llama's layer, RMSNorm(dim, eps): a correct alternative of solutions/07_rmsnorm/.
RMSNormLlama = reference.instructor_module("07_rmsnorm", "alternatives.py").RMSNormLlama

SEEDS = [None, 3, 17]  # the visible cases, then the hidden cases of two seeds


class SiGLU(nn.Module):
    """Question 16: "implement SiGLU without the bias terms. You will need 2 linear layers W, Wg"."""

    def __init__(self, input_dim, output_dim):
        super().__init__()
        self.W = nn.Linear(input_dim, output_dim, bias=False)
        self.Wg = nn.Linear(input_dim, output_dim, bias=False)

    def forward(self, x):
        return self.W(x) * torch.sigmoid(self.Wg(x))


class FeedForward(nn.Module):
    """Question 17, "an expert similar to the ones used in Mistral-7B": three linears, a SiLU module."""

    def __init__(self, hidden_size, d_ff):
        super().__init__()
        self.gate_proj = nn.Linear(hidden_size, d_ff, bias=False)
        self.up_proj = nn.Linear(hidden_size, d_ff, bias=False)
        self.down_proj = nn.Linear(d_ff, hidden_size, bias=False)
        self.act = nn.SiLU()

    def forward(self, x):
        return self.down_proj(self.act(self.gate_proj(x)) * self.up_proj(x))


class MoeLayer(nn.Module):
    """Questions 18-21 as Mistral's own layer does them: tokens flattened to rows, top-k on the gate's
    logits, a softmax in float32 over the k, a loop over experts with torch.where."""

    def __init__(self, hidden_size, d_ff, num_experts, n_experts_per_token):
        super().__init__()
        self.experts = nn.ModuleList([FeedForward(hidden_size, d_ff) for _ in range(num_experts)])
        self.gate = nn.Linear(hidden_size, num_experts, bias=False)
        self.num_experts_per_tok = n_experts_per_token

    def forward(self, inputs):
        rows = inputs.view(-1, inputs.shape[-1])  # (B * T, D)
        gate_logits = self.gate(rows)
        weights, selected_experts = torch.topk(gate_logits, self.num_experts_per_tok)
        weights = F.softmax(weights, dim=1, dtype=torch.float).to(inputs.dtype)
        results = torch.zeros_like(rows)
        for i, expert in enumerate(self.experts):
            batch_idx, nth_expert = torch.where(selected_experts == i)
            results[batch_idx] += weights[batch_idx, nth_expert, None] * expert(rows[batch_idx])
        return results.view_as(inputs)


ANSWERS = [
    ("05.siglu", SiGLU),
    ("06.feed_forward", FeedForward),
    ("06.moe_init", MoeLayer),
    ("06.moe_routing", MoeLayer),
    ("07.rmsnorm_norm", RMSNormLlama),
    ("07.rmsnorm", RMSNormLlama),
]


@pytest.mark.parametrize("seed", SEEDS, ids=["visible", "hidden-3", "hidden-17"])
@pytest.mark.parametrize(("name", "answer"), ANSWERS, ids=[name for name, _ in ANSWERS])
def test_homework_led_answer_earns_full_marks(name, answer, seed):
    result = verdict(name, answer, seed)
    assert result.passed and result.points == result.max_points, result.message
