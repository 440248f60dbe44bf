"""Checks of notebook 02, positional encodings.

Key: B batch, T sequence length, D hidden size, L max_seq_len, k offset between positions.
The properties of Questions 3 and 4 compare with the sinusoidal table of the reference
(`_with_pe_table`): no code of this package computes it, since that code would answer
Question 1 for any student who imports it.

Concerns: the seed (like the paper) fixes base = 10000, so Questions 1, 3 and 4 grade other bases
apart; it never says what happens past a learned table's last row, so Question 5 grades the
ValueError for T > max_seq_len apart.
"""

import re

import numpy as np
import torch
import torch.nn.functional as F

from ..core import (
    ACCUMULATED_GAP,
    COARSE_GAP,
    FLOAT32_GAP,
    ROUNDING_GAP,
    Case,
    Check,
    Concern,
    ErrorHint,
    Outputs,
    Property,
)

# ------------------------------------------------------------------ the reference's table


def _pe_at(case: Case, positions: torch.Tensor) -> torch.Tensor:
    """PE[positions] (any shape, negative positions too) from the case's table, in float64:
    PE[-p] is PE[p] with its sines negated, since sine is odd and cosine even."""
    table = case.judge_only["pe"].double()
    rows = table[positions.abs()]
    odd = torch.tensor([-1.0, 1.0], dtype=torch.float64).repeat(table.shape[1] // 2)
    return torch.where(positions[..., None] < 0, rows * odd, rows)


# A solution that hard-codes the paper's base, as the seed does, loses only the second concern.
BASE_CONCERNS = [Concern("base 10000 (the paper's)", weight=3), Concern("other bases", weight=1)]


# ------------------------------------------------------------------ sinusoidal encoding


def run_sinusoidal(sinusoidal_positional_encoding, case: Case) -> Outputs:
    i = case.inputs
    return {"pe": sinusoidal_positional_encoding(i["seq_len"], i["hidden_size"], i["base"])}


def _row0(case: Case, out: Outputs) -> str | None:
    pe = out["pe"]
    if pe.ndim != 2 or not len(pe):
        return None
    want = torch.tensor([0.0, 1.0]).repeat(pe.shape[1] // 2)
    if pe.shape[1] % 2 or not torch.allclose(pe[0].double(), want.double(), atol=ROUNDING_GAP):
        first = pe[0, :4].tolist()
        return f"position 0 should be [0, 1, 0, 1, ...] (sin 0, cos 0); its first values are {first}"
    return None


def _bounded(case: Case, out: Outputs) -> str | None:
    worst = out["pe"].abs().max().item() if out["pe"].numel() else 0.0
    return None if worst <= 1 + 1e-6 else f"sines and cosines lie in [-1, 1], but a value reaches {worst:.4g}"


SINUSOIDAL = Check(
    name="02.sinusoidal",
    target="sinusoidal_positional_encoding",
    run=run_sinusoidal,
    concerns=BASE_CONCERNS,
    outputs={"pe": "the PE table"},
    properties=[Property("row 0 is [0, 1, 0, 1, ...]", _row0), Property("values lie in [-1, 1]", _bounded)],
    # Angles reach ~100 rad in the hidden cases, where float32 rounds them by ~1e-5: writing the
    # frequencies as exp(-log(base) 2i / D) or base ** (-2i / D) moves the sines by that much.
    extra_tolerance={torch.float32: (1e-5, 1e-4)},
    error_hints=[
        ErrorHint(
            "must match the size of tensor",
            "the angles have shape (seq_len, hidden_size // 2): one column per pair, written into the "
            "even columns (sin) and the odd columns (cos).",
        ),
    ],
    hints=[
        "Which angle goes into the sine and the cosine of pair i at position p? How many different "
        "frequencies does a row of hidden_size columns use, and do they grow or shrink with i?",
        "Test yourself in a new cell: sinusoidal_positional_encoding(6, 8)[0] should be "
        "[0, 1, 0, 1, 0, 1, 0, 1]; row 1 should start with [sin 1, cos 1] ~ [0.841, 0.540], and its last "
        "pair change much more slowly; with base=100 its last pairs should turn faster than by default.",
        "w_i = 1 / base^(2i / hidden_size) for i = 0 .. hidden_size/2 - 1; PE[p, 2i] = sin(p w_i) and "
        "PE[p, 2i + 1] = cos(p w_i), for positions p = 0 .. seq_len - 1.",
        "freqs from torch.arange(0, hidden_size, 2) / hidden_size (that is 2i / D), shape "
        "(hidden_size // 2,); angles = torch.outer(positions, freqs), shape (seq_len, hidden_size // 2); "
        "then pe[:, 0::2] = angles.sin() and pe[:, 1::2] = angles.cos() in a float32 table of shape "
        "(seq_len, hidden_size).",
    ],
)

# ----------------------------------------------------------------------- the PE figure


def _shown_array(ax) -> np.ndarray:
    """The 2-D array drawn on `ax` by imshow / matshow (an AxesImage) or pcolormesh (a QuadMesh)."""
    if ax.images:
        return np.asarray(ax.images[0].get_array(), dtype=np.float32)
    meshes = [c for c in ax.collections if type(c).__name__ == "QuadMesh"]
    if meshes:
        array = np.asarray(meshes[0].get_array(), dtype=np.float32)
        if array.ndim == 1:  # older matplotlib stores the colours of a mesh flattened
            rows, cols = meshes[0].get_coordinates().shape[:2]
            array = array.reshape(rows - 1, cols - 1)
        return array
    kinds = sorted({type(a).__name__ for a in (*ax.lines, *ax.collections)}) or ["nothing"]
    raise ValueError(
        f"no image on axes '{ax.get_title()}': found {', '.join(kinds)}; draw the matrix with ax.imshow"
    )


def _labelled(ax) -> bool:
    return bool(ax.get_title() and ax.get_xlabel() and ax.get_ylabel())


def run_figure(plot_positional_encoding, case: Case) -> Outputs:
    import matplotlib.pyplot as plt

    fig = plot_positional_encoding(case.inputs["seq_len"], case.inputs["hidden_size"])
    if not isinstance(fig, plt.Figure):
        plt.close("all")  # nothing the check drew may show up under the test cell
        raise TypeError(
            f"plot_positional_encoding should return a matplotlib Figure, got {type(fig).__name__}"
        )
    try:
        colorbars = [ax for ax in fig.axes if ax.get_label() == "<colorbar>" or hasattr(ax, "_colorbar")]
        panels = [ax for ax in fig.axes if not any(ax is c for c in colorbars)]
        if len(panels) != 2:
            raise ValueError(
                f"the figure has {len(panels)} axes besides colorbars, expected 2 "
                "(first the PE matrix, then PE @ PE.T)"
            )
        first, second = (_shown_array(ax) for ax in panels)
        return {
            "pe_shown": torch.from_numpy(first.copy()),
            "dot_shown": torch.from_numpy(second.copy()),
            "panels_with_title_and_axis_labels": torch.tensor(sum(map(_labelled, panels))),
            "colorbars": torch.tensor(len(colorbars)),
        }
    finally:
        plt.close(fig)


def _symmetric(case: Case, out: Outputs) -> str | None:
    dot = out["dot_shown"]
    if dot.ndim != 2 or dot.shape[0] != dot.shape[1]:
        return "the second panel should show a square (seq_len, seq_len) matrix"
    gap = (dot - dot.T).abs().max().item()
    return (
        None
        if gap < COARSE_GAP
        else f"PE @ PE.T is symmetric, but the second panel is off by up to {gap:.3g}"
    )


PE_FIGURE = Check(
    name="02.pe_figure",
    target="plot_positional_encoding",
    run=run_figure,
    outputs={
        "pe_shown": "the matrix drawn in the first panel",
        "dot_shown": "the matrix drawn in the second panel",
        "panels_with_title_and_axis_labels": "the number of panels with a title and both axis labels",
        "colorbars": "the number of colorbars",
    },
    properties=[Property("the second panel is symmetric", _symmetric)],
    # The dot products reach hidden_size / 2 = 256 and sum 512 products of sines whose float32
    # angles are rounded by ~1e-5 (positions up to 127): a correct PE written another way moves
    # them by up to ~1e-3. The catalogued mistakes are off by O(1).
    extra_tolerance={torch.float32: (1e-4, 1e-2)},
    error_hints=[
        ErrorHint(
            "axes besides colorbars",
            "create the two panels with fig, (ax_pe, ax_dots) = plt.subplots(1, 2) (or (2, 1)).",
        ),
        ErrorHint("no image on axes", "draw each matrix with ax.imshow(matrix) (and fig.colorbar on it)."),
        ErrorHint(
            "should return a matplotlib Figure", "return the fig from plt.subplots, not an Axes or None."
        ),
        ErrorHint(
            "mat1 and mat2 shapes cannot be multiplied",
            "pe has shape (seq_len, hidden_size): the dot products of positions are pe @ pe.T.",
        ),
    ],
    hints=[
        "Which two matrices do the panels show, and what are their shapes? Which axis of an imshow picture "
        "runs along the rows of the matrix?",
        "Test yourself in a new cell: fig = plot_positional_encoding(12, 8); fig.axes holds your two panels, "
        "then the colorbars; fig.axes[0].images[0].get_array().shape should be (12, 8) and "
        "fig.axes[1].images[0].get_array().shape (12, 12); each panel's get_title(), get_xlabel() and "
        "get_ylabel() should be non-empty.",
        "First panel: pe = sinusoidal_positional_encoding(seq_len, hidden_size), shape "
        "(seq_len, hidden_size), positions down the y axis. Second: pe @ pe.T, shape (seq_len, seq_len), "
        "whose entry [p, q] is PE[p] . PE[q].",
        "fig, (ax_pe, ax_dots) = plt.subplots(...); image = ax_pe.imshow(pe, aspect='auto', "
        "interpolation='nearest'); "
        "ax_pe.set(title=..., xlabel=..., ylabel=...); fig.colorbar(image, ax=ax_pe, label=...); the same "
        "for the dot products; return fig without plt.show().",
    ],
)

# ------------------------------------------------------------------- PE[p] . PE[p + k]

TOEPLITZ_POSITIONS = (0, 5, 17)  # the positions p of the property PE[p] . PE[p + offset]


def run_dot(pe_dot_product, case: Case) -> Outputs:
    i = case.inputs
    return {"dot": pe_dot_product(i["offset"], i["hidden_size"], i["base"])}


def _toeplitz(case: Case, out: Outputs) -> str | None:
    offset = case.inputs["offset"].reshape(-1)
    got = out["dot"].reshape(-1).double()
    if got.shape != offset.shape:
        return None
    for p in TOEPLITZ_POSITIONS:
        direct = (_pe_at(case, torch.tensor([p])) * _pe_at(case, p + offset)).sum(-1)  # PE[p] . PE[p + k]
        gap = (got - direct).abs().max().item() if len(got) else 0.0
        if gap > COARSE_GAP:
            return f"PE[{p}] . PE[{p} + offset] differs from your value by up to {gap:.3g}"
    return None


PE_DOT = Check(
    name="02.pe_dot_product",
    target="pe_dot_product",
    run=run_dot,
    concerns=BASE_CONCERNS,
    outputs={"dot": "the tensor of dot products"},
    properties=[Property("equals PE[p] . PE[p + offset] for every position p (Toeplitz)", _toeplitz)],
    # A sum of up to 32 cosines of float32 angles up to 60 rad (each rounded by ~4e-6).
    extra_tolerance={torch.float32: (1e-5, 1e-4)},
    error_hints=[
        ErrorHint(
            "must match the size of tensor",
            "offset can have any shape: add a last axis for the pairs (offset[..., None] * freqs), "
            "then sum over it.",
        ),
        ErrorHint(
            "result type Float can't be cast to the desired output type Long",
            "offset is an integer tensor: convert it with offset.float() before multiplying.",
        ),
    ],
    hints=[
        "Pair i adds sin(p w_i) sin(q w_i) + cos(p w_i) cos(q w_i) to PE[p] . PE[q]: which trigonometric "
        "identity turns that into a single cosine, and of what?",
        "Test yourself in a new cell: with pe = sinusoidal_positional_encoding(50, 16), "
        "pe_dot_product(torch.tensor(7), 16) should equal pe[3] @ pe[10] and pe[20] @ pe[27]; "
        "pe_dot_product(torch.tensor(0), 16) should be 8 (hidden_size / 2), and offsets -7 and 7 give the "
        "same value.",
        "PE[p] . PE[p + k] = sum over i = 0 .. hidden_size/2 - 1 of cos(k w_i), with w_i = 1 / base^(2i / "
        "hidden_size): a sum over the pairs, not over the columns.",
        "Give the offsets a last axis for the pairs: offset.float()[..., None] * freqs has shape "
        "offset.shape + (hidden_size // 2,); take .cos() and .sum(dim=-1).",
    ],
)

# ------------------------------------------------------------------------------- M_k

SHIFTED_FROM, SHIFTED_TO = -20, 60  # the positions pos of the property PE[pos] @ M_k == PE[pos + k]


def run_shift(relative_shift_matrix, case: Case) -> Outputs:
    i = case.inputs
    return {"M_k": relative_shift_matrix(i["k"], i["hidden_size"], i["base"])}


def _shifts(case: Case, out: Outputs) -> str | None:
    m, d, k = out["M_k"], case.inputs["hidden_size"], case.inputs["k"]
    if m.shape != (d, d):
        return None
    positions = torch.arange(SHIFTED_FROM, SHIFTED_TO)
    gap = (_pe_at(case, positions) @ m.double() - _pe_at(case, positions + k)).abs().max().item()
    span = f"pos in {SHIFTED_FROM}..{SHIFTED_TO - 1}"
    return (
        None
        if gap < ACCUMULATED_GAP
        else f"PE[pos] @ M_k differs from PE[pos + k] by up to {gap:.3g} ({span})"
    )


def _orthogonal(case: Case, out: Outputs) -> str | None:
    m, d = out["M_k"], case.inputs["hidden_size"]
    if m.shape != (d, d):  # a wrong shape is reported first; never multiply an arbitrary matrix
        return None
    gap = (m.double() @ m.double().T - torch.eye(len(m), dtype=torch.float64)).abs().max().item()
    return None if gap < ACCUMULATED_GAP else f"a rotation has M M^T = I; yours is off by up to {gap:.3g}"


RELATIVE_SHIFT = Check(
    name="02.relative_shift",
    target="relative_shift_matrix",
    run=run_shift,
    concerns=BASE_CONCERNS,
    outputs={"M_k": "the matrix M_k"},
    properties=[
        Property("PE[pos] @ M_k == PE[pos + k]", _shifts),
        Property("M_k is orthogonal", _orthogonal),
    ],
    # cos(w k) for |k| up to 40: float32 rounds the angle by ~2e-6.
    extra_tolerance={torch.float32: (1e-5, 2e-5)},
    hints=[
        "Take one pair, the row vector [sin a, cos a]. Which 2x2 matrix B turns it into [sin(a + b), "
        "cos(a + b)] with b = k w_i, and does B depend on a, that is on the position?",
        "Test yourself in a new cell: with pe = sinusoidal_positional_encoding(64, 16) and "
        "m = relative_shift_matrix(5, 16), pe[:-5] @ m should equal pe[5:]; m @ m.T should be "
        "torch.eye(16), relative_shift_matrix(0, 16) the identity and relative_shift_matrix(-5, 16) m.T.",
        "sin(a + b) = sin a cos b + cos a sin b and cos(a + b) = cos a cos b - sin a sin b. With row "
        "vectors, the output's first entry is the input times column 0 of B: B = [[cos b, -sin b], "
        "[sin b, cos b]], placed at rows and columns 2i, 2i + 1.",
        "The angles k * freqs, shape (hidden_size // 2,); stack [cos, -sin, sin, cos] along a last axis and "
        "reshape to (hidden_size // 2, 2, 2) blocks; torch.block_diag(*blocks) puts them on the diagonal "
        "(or write M[2i:2i+2, 2i:2i+2] in a loop).",
    ],
)

# ------------------------------------------------------------- learned positional table

# The seed's learned table (GPT-2's) says nothing of T > max_seq_len, where nn.Embedding raises an
# IndexError: a solution right for every T <= L loses only the second concern.
WITHIN = "T up to max_seq_len: the table, the position vectors added"
BEYOND = "T above max_seq_len: a ValueError naming T and max_seq_len"
# A ValueError for a T <= L is the length check firing too early (e.g. T >= L): the known mistake
# of that name in solutions/02_positions/mistakes.py ends in this sentence too.
EARLY_ERROR = "a ValueError for a T that fits the table (T >= max_seq_len instead of T > max_seq_len?)"


def run_learned(module_class, case: Case) -> Outputs:
    i = case.inputs
    module = module_class(i["max_seq_len"], i["hidden_size"])
    weight = module.position_embedding.weight
    outputs = {"table_shape": torch.tensor(tuple(weight.shape))}
    if weight.shape != i["table"].shape:
        return outputs  # the shape says it all; the other outputs would come from a random table
    with torch.no_grad():
        weight.copy_(i["table"])
    x, max_len = i["x"], i["max_seq_len"]
    if x.shape[1] <= max_len:
        return {**outputs, "output": module(x)}
    errors, value_errors, named = 0, 0, 0
    try:
        module(x)
    except Exception as error:
        numbers = re.findall(r"\d+", str(error))
        errors, value_errors = 1, int(isinstance(error, ValueError))
        named = int(str(x.shape[1]) in numbers and str(max_len) in numbers)
    return {
        **outputs,
        "errors": torch.tensor(errors),
        "value_errors": torch.tensor(value_errors),
        "errors_naming_both": torch.tensor(named),
    }


def _same_for_every_sequence(case: Case, out: Outputs) -> str | None:
    added, x = out.get("output"), case.inputs["x"]
    if added is None or added.shape != x.shape:
        return None
    added = added - x  # (B, T, D): what forward added to each sequence
    gap = (added - added[:1]).abs().max().item()
    return (
        None
        if gap < FLOAT32_GAP
        else f"the vectors added to the sequences of one batch differ by up to {gap:.3g}"
    )


LEARNED = Check(
    name="02.learned_positions",
    target="LearnedPositionalEmbedding",
    run=run_learned,
    concerns=[Concern(WITHIN, weight=3), Concern(BEYOND, weight=1)],
    outputs={
        "table_shape": "the shape (rows, columns) of self.position_embedding.weight",
        "output": "forward's output",
        "errors": "the number of errors forward raised",
        "value_errors": "the number of ValueErrors forward raised",
        "errors_naming_both": "the number of error messages naming both T and max_seq_len",
    },
    properties=[
        Property("every sequence of the batch gets the same position vectors", _same_for_every_sequence)
    ],
    error_hints=[
        ErrorHint(
            "has no attribute 'position_embedding'",
            "the check reads the table where the question puts it, self.position_embedding: an nn.Embedding "
            "with one row of hidden_size numbers per position up to max_seq_len.",
        ),
        ErrorHint(
            "index out of range in self",
            "an index reached past the table: positions run from 0 to T - 1 and the table has "
            "max_seq_len rows.",
        ),
        ErrorHint(
            "must match the size of tensor",
            "the position vectors have shape (T, hidden_size) and broadcast over the batch; index the "
            "table with torch.arange(T).",
        ),
        ErrorHint(
            "ValueError",
            f"{EARLY_ERROR}. The table has rows 0 .. max_seq_len - 1, one for each position of a sequence of "
            "T = max_seq_len tokens: raise only when T > max_seq_len.",
        ),
    ],
    hints=[
        "How many rows does the table need: one per hidden dimension, or one per position? Which rows does a "
        "sequence of T tokens use, and which T has no rows left?",
        "Test yourself in a new cell: embed = LearnedPositionalEmbedding(16, 8); "
        "embed.position_embedding.weight.shape should be (16, 8); embed(torch.zeros(2, 10, 8)) should be "
        "(2, 10, 8) with both sequences equal to weight[:10]; T = 16 should work and T = 17 raise a "
        "ValueError whose message shows 17 and 16.",
        "output[b, t] = token_embeddings[b, t] + table[t] for t = 0 .. T - 1, the same rows for every b; "
        "raise a ValueError exactly when T > max_seq_len.",
        "__init__: nn.Embedding(max_seq_len, hidden_size) (rows first). forward: T = "
        "token_embeddings.shape[1]; the length check before any lookup, with an f-string naming T and "
        "self.max_seq_len; then add self.position_embedding(torch.arange(T, device=...)), shape (T, D), "
        "which broadcasts over B.",
    ],
)


# --------------------------------------------------------------- permutation equivariance


def _attention(wq: torch.Tensor, wk: torch.Tensor, wv: torch.Tensor):
    """A single-head self-attention without positions, (B, T, D) -> (B, T, D): PyTorch's, which
    01.attention forbids, so that this function answers no question."""

    def attention(z: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(z @ wq, z @ wk, z @ wv)  # scaled by sqrt(D)

    return attention


def run_perm(equivariance_gap, case: Case) -> Outputs:
    i = case.inputs
    attention = _attention(*i["weights"])
    return {
        "gap_without_positions": equivariance_gap(attention, i["x"], i["perm"]),
        "gap_with_positions": equivariance_gap(attention, i["x"], i["perm"], i["positions"]),
    }


def _no_gap(case: Case, out: Outputs) -> str | None:
    gap = float(out["gap_without_positions"])
    return (
        None
        if gap < ACCUMULATED_GAP
        else f"without positions attention commutes with perm, but your gap is {gap:.3g}"
    )


EQUIVARIANCE = Check(
    name="02.permutation_equivariance",
    target="equivariance_gap",
    run=run_perm,
    outputs={
        "gap_without_positions": "the gap without positions",
        "gap_with_positions": "the gap with positions",
    },
    properties=[Property("without positions the gap is ~0", _no_gap)],
    error_hints=[
        ErrorHint(
            "must match the size of tensor",
            "positions has shape (T, D): add it to the (B, T, D) input, it broadcasts over the batch.",
        ),
        ErrorHint(
            "'float' object has no attribute", "return a 0-dim tensor: (a - b).abs().max(), not .item()."
        ),
    ],
    hints=[
        "Shuffle the tokens, then attend; or attend, then shuffle the outputs the same way: which two "
        "tensors does the gap compare, along which axis does perm act, and where do the positions go?",
        "Test yourself in a new cell with attention = lambda z: z, which commutes with every permutation: "
        "without positions the gap should be exactly 0; with positions it should be "
        "(positions - positions[perm]).abs().max(); and perm = torch.arange(T) gives 0 in both cases.",
        "gap = max |f(x[:, perm]) - f(x)[:, perm]|, with f(z) = attention(z + positions) when positions are "
        "given and f(z) = attention(z) otherwise: the positions belong to the slots, the same for both "
        "inputs.",
        "Define f once (a small inner function), apply it to x[:, perm] and to x, index the second result "
        "with [:, perm], and return the .abs().max() of the difference: a 0-dim tensor, no .item().",
    ],
)

CHECKS = [SINUSOIDAL, PE_FIGURE, PE_DOT, RELATIVE_SHIFT, LEARNED, EQUIVARIANCE]
