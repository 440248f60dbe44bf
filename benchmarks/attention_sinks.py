"""Attention sinks on the course's model: the next-character loss past the training length, streamed
through notebook 09's rolling cache with a window alone and with sinks.

    .venv/bin/python benchmarks/attention_sinks.py [--length L] [--json PATH]

Two models, both notebook 08's architecture trained by the course's recipe (language_model.RECIPE:
1200 steps on random 64-character windows of the generated text, seed 0):
- the course's checkpoint, trained with Mistral's causal window of 16 (what notebook 09 plots);
- a copy trained here without a window (a window of 64, the training length: full causal attention),
  as the models StreamingLLM measured were (Xiao et al. 2023: Llama 2, Falcon, Pythia, MPT). Training
  it takes about 2 minutes on one thread.

Each streams the first L (default 512) characters of the held-out text one at a time
(language_model.streamed_losses, with the reference RollingKVCache of notebook 09) under each cache:
- full: every key, at absolute positions (past 64, positions the model never saw);
- window W: the last W keys (the model's own window for the course's checkpoint; 32 for the other);
- 4 sinks + window W - 4, at absolute positions, and at positions in the cache (StreamingLLM's).
Printed: the mean loss over position ranges, and over everything past the training length.
Deterministic on one machine and thread count (one thread is set).
"""

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from autograder import language_model as lm  # noqa: E402
from autograder.reference import namespace  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
TRAINED = lm.RECIPE["length"]  # 64 characters
RANGES = [(0, TRAINED), (TRAINED, 128), (128, 256), (256, 512), (512, 1024)]
SINKS = 4


def model_of(contents: dict) -> lm.CourseModel:
    model = lm.CourseModel(contents["config"])
    model.load_state_dict(contents["state_dict"])
    return model.eval()


def caches(window: int, length: int) -> dict[str, dict]:
    return {
        "full": {"window_size": length, "n_sinks": 0, "in_cache": False},
        f"window {window}": {"window_size": window, "n_sinks": 0, "in_cache": False},
        f"{SINKS} sinks + window {window - SINKS}": {
            "window_size": window - SINKS,
            "n_sinks": SINKS,
            "in_cache": False,
        },
        f"{SINKS} sinks + window {window - SINKS}, positions in the cache": {
            "window_size": window - SINKS,
            "n_sinks": SINKS,
            "in_cache": True,
        },
    }


def streamed(model: lm.CourseModel, tokens: torch.Tensor, window: int) -> dict[str, dict]:
    rolling = namespace("09_kv_cache")["RollingKVCache"]
    heads = model.config["num_heads"]
    dh = model.config["hidden_size"] // heads
    rows = {}
    for name, cache in caches(window, len(tokens)).items():

        def new_cache(cache=cache):
            return rolling(1, heads, dh, cache["window_size"], cache["n_sinks"])

        losses = lm.streamed_losses(model, tokens, new_cache, in_cache=cache["in_cache"])
        rows[name] = {
            "ranges": {f"{a}-{b}": float(losses[a:b].mean()) for a, b in RANGES if a < len(losses)},
            "past_training": float(losses[TRAINED:].mean()),
        }
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--length", type=int, default=512, help="characters streamed")
    parser.add_argument("--json", type=Path, default=RESULTS / "attention_sinks_cpu.json")
    args = parser.parse_args()
    namespace("09_kv_cache")
    torch.set_num_threads(1)
    start = time.perf_counter()
    tokens = lm.encode(lm.course_text(lm.HELD_OUT_CHARS, lm.HELD_OUT_SEED))[: args.length + 1]
    transformer = namespace("08_transformer")["Transformer"]
    full_attention = lm.train_course_model(transformer, config=lm.COURSE_MODEL | {"window_size": TRAINED})
    models = {
        "the course's checkpoint (trained with a window of 16)": (
            lm.course_model(),
            lm.COURSE_MODEL["window_size"],
        ),
        f"a copy trained without a window (full attention over {TRAINED})": (model_of(full_attention), 32),
    }
    record = {"length": args.length, "trained_on": TRAINED, "models": {}}
    for label, (model, window) in models.items():
        record["models"][label] = streamed(model, tokens, window)
    record["wall_s"] = time.perf_counter() - start
    for label, rows in record["models"].items():
        names = list(next(iter(rows.values()))["ranges"])
        print(f"\n{label}: mean next-character loss (nats) by position\n")
        print("| cache | " + " | ".join(names) + f" | past {TRAINED} |")
        print("| --- |" + " ---: |" * (len(names) + 1))
        for name, row in rows.items():
            cells = " | ".join(f"{row['ranges'][n]:.3f}" for n in names)
            print(f"| {name} | {cells} | {row['past_training']:.3f} |")
    args.json.write_text(json.dumps(record, indent=2) + "\n")
    print(f"\n{record['wall_s']:.0f} s; saved {args.json}")


if __name__ == "__main__":
    main()
