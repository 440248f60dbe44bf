"""The course's language model (autograder/language_model.py) and its checkpoint, which notebook 08
trains and notebook 10 inspects: the generated text, the baselines, the causal window, the RoPE table
under .to(device) and .to(torch.bfloat16), and the committed checkpoint itself.

Key: B batch, T sequence length, D hidden size, H heads, W window, V vocabulary size.
"""

import io
import math

import pytest
import torch
import torch.nn.functional as F

from autograder import language_model as lm
from autograder import reference
from autograder.playground import one_thread

ASSIGNMENT = "08_transformer"
MAX_CHECKPOINT_BYTES = 5 * 2**20
REPLAYED_STEPS = 30


def ref(name: str):
    return reference.namespace(ASSIGNMENT)[name]


def small_model(**changes):
    config = {**lm.COURSE_MODEL, "hidden_size": 16, "n_blocks": 2, "max_seq_len": 24, "window_size": 5}
    torch.manual_seed(0)
    return ref("Transformer")(**{**config, **changes})


# --------------------------------------------------------------------------------- the text


def test_the_text_is_reproducible_and_uses_its_alphabet_only():
    text = lm.course_text(5_000, seed=3)
    assert text == lm.course_text(5_000, seed=3) != lm.course_text(5_000, seed=4)
    assert len(text) >= 5_000 and set(text) <= set(lm.ALPHABET)
    assert lm.decode(lm.encode(text)) == text


def test_subjects_and_verbs_agree_in_number():
    """The structure a bigram table cannot see: 'the cats see', 'the cat sees'."""
    text = lm.course_text(20_000, seed=0)
    for singular, plural in lm.VERBS:
        for subject in lm.PLURAL:
            assert f"{subject} {singular} " not in text
        for subject in lm.SINGULAR:
            assert f"{subject} {plural} " not in text


def test_the_bigram_baseline_beats_the_unigram_one():
    train, held_out = lm.encode(lm.course_text(50_000, 0)), lm.encode(lm.course_text(5_000, 1))
    V = len(lm.ALPHABET)
    unigram, bigram = lm.unigram_loss(train, held_out, V), lm.bigram_loss(train, held_out, V)
    assert bigram < unigram < math.log(V)


# ------------------------------------------------------------------------ the causal window


def test_the_causal_window_equals_band_masked_attention():
    """CausalWindowAttention is the notebook-03 layer's projections and RoPE under a causal band:
    computed here from 03's own mask and PyTorch's attention."""
    attention = small_model().blocks[0].attention
    causal = lm.CausalWindowAttention(attention)
    B, T, D, H, W = 2, 13, 16, attention.num_heads, attention.window_size
    x = torch.randn(B, T, D)
    qkv = attention.qkv_linear(x).view(B, T, H, 3 * D // H).transpose(1, 2)
    q, k, v = qkv.chunk(3, dim=-1)
    q, k = attention.rope(q, k)
    band = ~reference.namespace("03_sliding_window")["sliding_window_mask"](T, W, causal=True)
    expected = attention.out(
        F.scaled_dot_product_attention(q, k, v, attn_mask=band).transpose(1, 2).reshape(B, T, D)
    )
    torch.testing.assert_close(causal(x), expected, rtol=1e-5, atol=1e-5)


def test_a_causal_model_does_not_see_the_future():
    model = lm.make_causal(small_model()).eval()
    tokens = torch.randint(len(lm.ALPHABET), (1, 20))
    changed = tokens.clone()
    changed[0, 12:] = (changed[0, 12:] + 1) % len(lm.ALPHABET)
    with torch.no_grad():
        torch.testing.assert_close(model(tokens)[:, :12], model(changed)[:, :12])
        assert not torch.allclose(model(tokens)[:, 12:], model(changed)[:, 12:])


def test_make_causal_keeps_the_parameter_names_and_objects():
    model = small_model()
    before = {name: p for name, p in model.named_parameters()}
    causal = lm.make_causal(model)
    assert {name: p for name, p in causal.named_parameters()} == before


# ------------------------------------------------------------------------ the RoPE table


def test_the_rotation_table_survives_a_cast_to_bfloat16():
    """A plain attribute is out of the cast's reach: the table stays complex64, shared by the blocks."""
    model = small_model()
    tokens = torch.randint(len(lm.ALPHABET), (2, 11))
    with torch.no_grad():
        full = model(tokens)
        model.to(torch.bfloat16)
        half = model(tokens)
    tables = {id(block.attention.rope.rotation_matrix) for block in model.blocks}
    assert len(tables) == 1 and model.blocks[0].attention.rope.rotation_matrix.dtype == torch.complex64
    assert half.dtype == torch.bfloat16
    gap = ((half.float() - full).norm(dim=-1) / full.norm(dim=-1)).median()
    assert gap < 0.05, gap


def test_the_rotation_table_follows_the_attention_to_another_device():
    """On the meta device (no GPU needed): the table moves to the input's device in forward. The
    whole model cannot run on meta (the MoE's torch.where needs values); see the next test."""
    attention = small_model().blocks[0].attention.to("meta")
    out = attention(torch.randn(2, 7, 16, device="meta"))
    assert out.device.type == "meta" and out.shape == (2, 7, 16)
    assert attention.rope.rotation_matrix.device.type == "meta"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no GPU on this machine")
def test_the_whole_model_follows_to_a_gpu():
    model = small_model()
    tokens = torch.randint(len(lm.ALPHABET), (2, 11))
    with torch.no_grad():
        expected = model(tokens)
        got = model.to("cuda")(tokens.cuda())
    torch.testing.assert_close(got.cpu(), expected, rtol=1e-4, atol=1e-4)


# --------------------------------------------------------------------------- the checkpoint


@pytest.fixture(scope="module")
def checkpoint():
    assert lm.CHECKPOINT.exists(), "run `make build` to train the course's checkpoint"
    return torch.load(lm.CHECKPOINT, weights_only=True)  # tensors and plain values only


def test_the_checkpoint_is_small_and_describes_itself(checkpoint):
    assert lm.CHECKPOINT.stat().st_size < MAX_CHECKPOINT_BYTES
    assert checkpoint["config"] == lm.COURSE_MODEL
    assert checkpoint["recipe"] == lm.RECIPE
    assert checkpoint["embedding_std"] == lm.EMBEDDING_STD
    assert checkpoint["alphabet"] == lm.ALPHABET
    assert len(checkpoint["losses"]) == lm.RECIPE["steps"]


def test_the_checkpoint_beats_the_bigram_baseline_clearly(checkpoint):
    """Loaded into the reference's model by name, it scores on the held-out text what it recorded,
    and at least 1 nat per character below the bigram table."""
    model = lm.make_causal(ref("Transformer")(**checkpoint["config"]))
    model.load_state_dict(checkpoint["state_dict"])
    held_out = lm.encode(lm.course_text(lm.HELD_OUT_CHARS, lm.HELD_OUT_SEED))
    loss = lm.held_out_loss(model.eval(), held_out, lm.RECIPE["length"])
    assert loss == pytest.approx(checkpoint["held_out_loss"], abs=1e-4)
    assert loss < checkpoint["bigram_loss"] - 1.0 < checkpoint["unigram_loss"] - 1.0


def test_the_checkpoint_comes_from_its_recipe(checkpoint):
    """The file is byte-for-byte reproducible on the machine that built it (two runs below give the
    same bytes). Not across machines: another CPU's vector kernels round some sums differently (1e-7
    seen in the visible snapshots), and 1200 steps of AdamW carry that far. So the committed file is
    tied to its recipe by the start of its loss curve, replayed here to 1e-4."""
    runs = []
    for _ in range(2):
        with one_thread():
            contents = lm.train_course_model(ref("Transformer"), stop_after=REPLAYED_STEPS)
        buffer = io.BytesIO()
        torch.save(contents["state_dict"], buffer)
        runs.append((contents, buffer.getvalue()))
    assert runs[0][1] == runs[1][1]
    replayed = runs[0][0]["losses"]
    torch.testing.assert_close(replayed, checkpoint["losses"][:REPLAYED_STEPS], rtol=0, atol=1e-4)


# The correlation notebook 10 prints: 0.34 for the committed checkpoint; -0.05 when the embedding
# started at nn.Embedding's std 1 and ended at cosine 0.998 with its random start.
LEARNED_CORRELATION = 0.2


def test_the_embedding_learned_what_follows_each_character(checkpoint):
    """Notebook 10's plot sets the learned embeddings' cosine similarities beside those of the
    characters' followers in the training text: training must have moved the rows well past their
    start and copied some of the text's pattern into them."""
    embedding = checkpoint["state_dict"]["embedding.weight"]  # (V, D)
    start_norm = checkpoint["embedding_std"] * math.sqrt(embedding.shape[1])
    assert embedding.norm(dim=-1).median() > 2 * start_norm
    text = lm.encode(lm.course_text(lm.TEXT_CHARS, lm.TEXT_SEED))
    followers = lm.bigram_counts(text, len(lm.ALPHABET)).float()
    seen = followers.sum(dim=1) > 0  # q, j, x and z never occur
    different = ~torch.eye(int(seen.sum()), dtype=torch.bool)
    in_text, learned = (
        F.cosine_similarity(rows[seen][:, None], rows[seen][None], dim=-1)[different]
        for rows in (followers, embedding)
    )
    assert torch.corrcoef(torch.stack([in_text, learned]))[0, 1] > LEARNED_CORRELATION
