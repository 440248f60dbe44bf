"""Checks of notebook 04, rotary position embedding.

Key: B batch, H heads, T sequence length, Dh head dim, C context size (rows of the table).
"""

import torch

from ..core import (
    ACCUMULATED_GAP,
    FLOAT32_GAP,
    ROUNDING_GAP,
    Case,
    Check,
    Concern,
    ErrorHint,
    Outputs,
    Property,
)

# ------------------------------------------------------------------ get_rotation_matrix


def run_rotation_matrix(get_rotation_matrix, case: Case) -> Outputs:
    i = case.inputs
    return {"rotation_matrix": get_rotation_matrix(i["dim"], i["context_size"], i["period"])}


def _unit_modulus(case: Case, out: Outputs) -> str | None:
    table = out["rotation_matrix"]
    if not torch.is_tensor(table) or not table.is_complex():
        return "entries should be complex numbers e^(i theta)"
    worst = (table.abs() - 1).abs().max().item() if table.numel() else 0.0
    return None if worst < FLOAT32_GAP else f"entries should have modulus 1; |z| is off by up to {worst:.3g}"


def _row0_identity(case: Case, out: Outputs) -> str | None:
    table = out["rotation_matrix"]
    if not torch.is_tensor(table) or not table.is_complex() or table.ndim != 2 or not len(table):
        return None
    worst = (table[0] - 1).abs().max().item()
    return (
        None if worst < ROUNDING_GAP else f"position 0 should not rotate (row 0 all 1+0j); off by {worst:.3g}"
    )


ROTATION_MATRIX = Check(
    name="04.rotation_matrix",
    target="get_rotation_matrix",
    run=run_rotation_matrix,
    properties=[Property("unit modulus", _unit_modulus), Property("row 0 is the identity", _row0_identity)],
    # Angles reach ~300 rad in the hidden cases, where float32 rounds them by ~3e-5.
    extra_tolerance={torch.complex64: (1e-5, 1e-4)},
    outputs={"rotation_matrix": "the rotation table"},
    hints=[
        "Which angle turns pair k of the token at position p, and which pair turns fastest? "
        "Write theta[p, k] with one frequency w_k per pair before writing any code.",
        "Test your table: get_rotation_matrix(4, 3, 100.0) must have shape (3, 2), every |z| = 1, "
        "row 0 all 1+0j, and row 1's angles (table[1].angle()) equal to [1.0, 0.1].",
        "w_k = 1 / period ** (2k / dim) for k = 0 .. dim/2 - 1; theta[p, k] = p * w_k for "
        "p = 0 .. context_size - 1; the entry is e^(i theta) = cos(theta) + i sin(theta).",
        "torch.arange(0, dim, 2, dtype=torch.float32) gives the 2k; torch.outer(positions, freqs) gives "
        "the (context_size, dim // 2) angles; torch.polar(abs, angle) with abs all ones makes e^(i angle).",
    ],
)

# ------------------------------------------------------------------------- RoPE.forward

CORE = "float32 q and k"
CAST = "a module cast to bfloat16 and back keeps its table"
BFLOAT16 = "a bfloat16 model: bfloat16 q and k in, bfloat16 out"


def run_rope(rope_class, case: Case) -> Outputs:
    rope = rope_class(case.inputs["rotation_matrix"])
    for dtype in case.inputs.get("module_casts", []):
        rope = rope.to(getattr(torch, dtype))
    q, k = rope(case.inputs["q"], case.inputs["k"])
    return {"queries": q, "keys": k}


def _pairs(x: torch.Tensor) -> torch.Tensor:
    return x.float().reshape(*x.shape[:-1], -1, 2)  # (..., Dh/2, 2)


def _keeps_norms(case: Case, out: Outputs) -> str | None:
    for name, key in (("queries", "q"), ("keys", "k")):
        got, x = out[name], case.inputs[key]
        if got.shape != x.shape:
            return None
        gap = (_pairs(got).norm(dim=-1) - _pairs(x).norm(dim=-1)).abs().max().item()
        if gap > (2e-2 if x.dtype == torch.bfloat16 else 1e-4):
            return f"the length of each (x[2k], x[2k+1]) pair of {name} changes by up to {gap:.3g}"
    return None


def _position0_identity(case: Case, out: Outputs) -> str | None:
    got, x = out["queries"], case.inputs["q"]
    if got.shape != x.shape or x.dtype == torch.bfloat16:
        return None
    gap = (got[..., 0, :] - x[..., 0, :]).abs().max().item()
    return (
        None
        if gap < FLOAT32_GAP
        else f"the query at position 0 moved by up to {gap:.3g}; row 0 of the table is 1"
    )


def _rotation_2x2(case: Case, out: Outputs) -> str | None:
    x, got = case.inputs["q"], out["queries"]
    if got.shape != x.shape or x.dtype == torch.bfloat16:
        return None
    gap = (got - case.judge_only["rotated_q"]).abs().max().item()
    return (
        None
        if gap < ACCUMULATED_GAP
        else f"the 2x2 rotation of each (x[2k], x[2k+1]) pair differs by up to {gap:.3g}"
    )


def _relative_scores(case: Case, out: Outputs) -> str | None:
    if not case.name.startswith("one q and one k"):
        return None
    q, k = out["queries"], out["keys"]
    if q.shape != case.inputs["q"].shape or k.shape != q.shape:
        return None
    scores = (q @ k.transpose(-1, -2))[0, 0]  # (T, T): <RoPE(q)_m, RoPE(k)_n>
    gap = (scores[1:, 1:] - scores[:-1, :-1]).abs().max().item()
    return (
        None
        if gap < ACCUMULATED_GAP
        else f"<q_m, k_n> should depend on n - m only, but shifting both moves it by {gap:.3g}"
    )


NOT_COMPLEX = (
    "the table is no longer complex: module.to(torch.bfloat16) casts every buffer and parameter, and a "
    "complex one becomes real. Keep the table a plain attribute (self.rotation_matrix = rotation_matrix), "
    "as the given __init__ does."
)

ROPE = Check(
    name="04.rope_forward",
    target="RoPE",
    run=run_rope,
    # The original homework keeps the table as a plain attribute, which .to() leaves alone, and never
    # asks for another dtype: a RoPE that asserts float32 input, or returns float32, is right for it.
    # The course's bfloat16 advice is reported, for no points.
    concerns=[Concern(CORE, weight=3), Concern(CAST, weight=1), Concern(BFLOAT16, weight=0)],
    outputs={"queries": "the tensor of rotated queries", "keys": "the tensor of rotated keys"},
    properties=[
        Property("keeps the norm of every pair", _keeps_norms),
        Property("position 0 is the identity", _position0_identity),
        Property("q.k depends only on n - m", _relative_scores),
        Property("equals the real 2x2 rotation of each pair", _rotation_2x2),
    ],
    error_hints=[
        ErrorHint(
            "must match the size of tensor",
            "the rotation table has context_size rows; keep only the first T (rotation_matrix[:T]) "
            "before multiplying.",
        ),
        ErrorHint(
            "view_as_complex is only supported for",
            "view_as_complex refuses bfloat16 (it takes float16, float32 and float64): rotate x.float() "
            "and return the result .type_as(x).",
        ),
        ErrorHint(
            "Tensor must have a last dimension of size 2",
            "reshape to (B, H, T, Dh // 2, 2) before view_as_complex.",
        ),
        ErrorHint("is not implemented for tensors with non-complex dtypes", NOT_COMPLEX),
        ErrorHint("is only supported for complex tensors", NOT_COMPLEX),
        ErrorHint(
            "has no attribute 'to'",
            "RoPE must be an nn.Module (class RoPE(nn.Module), calling super().__init__()): a model "
            "casts and moves its layers with .to().",
        ),
    ],
    hints=[
        "Which two features form pair k, and which row of the table belongs to the token at position t? "
        "A complex number a + ib times e^(i theta) is the pair (a, b) rotated by theta.",
        "Test it on pairs you can predict: x = torch.zeros(1, 1, T, Dh) with x[..., 0::2] = 1 puts every "
        "pair at (1, 0), so the output pair k at position t must be (table[t, k].real, table[t, k].imag), "
        "and position 0 must come out unchanged.",
        "out[..., t, 2k] + i out[..., t, 2k+1] = (x[..., t, 2k] + i x[..., t, 2k+1]) * rotation_matrix[t, k] "
        "for t < T: the first T rows of the table given to __init__, never a table of your own.",
        "x.float().reshape(B, H, T, Dh // 2, 2) -> torch.view_as_complex -> times self.rotation_matrix[:T] "
        "(it broadcasts over B and H) -> torch.view_as_real -> reshape to (B, H, T, Dh) -> .type_as(x).",
    ],
)

# ------------------------------------------------------------ interleaved <-> half-split


def run_permutation(interleaved_to_half, case: Case) -> Outputs:
    return {"permutation": torch.as_tensor(interleaved_to_half(case.inputs["dim"]))}


HALF_SPLIT = Check(
    name="04.half_split_permutation",
    target="interleaved_to_half",
    run=run_permutation,
    exact_dtype=False,
    outputs={"permutation": "the permutation"},
    hints=[
        "The interleaved layout keeps pair k at features (2k, 2k + 1). At which two positions does the "
        "rotate-half layout keep the same pair, the one turning at frequency w_k?",
        "Run the cell under your answer with dim = 8 (for dim 2 and 4 a permutation and its inverse are "
        "the same): rope_half(x[..., perm], table) must equal RoPE(table)(x, x)[0][..., perm].",
        "perm gathers, x_half[..., j] = x[..., perm[j]]: for k < dim/2, perm[k] = 2k (the first feature of "
        "pair k) and perm[k + dim/2] = 2k + 1 (its second).",
        "Two torch.arange calls with step 2, one starting at 0 and one at 1, joined with torch.cat.",
    ],
)

CHECKS = [ROTATION_MATRIX, ROPE, HALF_SPLIT]
