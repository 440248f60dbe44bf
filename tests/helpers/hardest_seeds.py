"""The hidden seeds on which correct answers come closest to failing, found once by
benchmarks/hardest_seeds.py and kept in tests/helpers/hardest_seeds.json.

Each check's entry holds its seeds, the names of the answers that were scanned and a
fingerprint of the hidden cases those seeds draw: when either changes, the seeds are no
longer known to be the hardest and the tests say to scan again.
"""

import hashlib
import json
from pathlib import Path
from typing import Any

import torch

from autograder.api import make_cases
from autograder.playground import one_thread

from .alternatives import ALTERNATIVES

PINNED = Path(__file__).with_suffix(".json")


def answer_names(name: str) -> list[str]:
    """The correct answers of a check, as the scan and the tests name them."""
    return ["reference", *(answer.__name__ for answer in ALTERNATIVES[name])]


def fingerprint(name: str, seeds: list[int]) -> str:
    """sha256 of every hidden case those seeds draw: names, concerns and every input, bit for bit.

    Drawn on one thread, as a grading worker draws them: cases that hold a model's outputs (08's
    parts) differ in their last bits with the thread count."""
    digest = hashlib.sha256()
    for seed in seeds:
        with one_thread():
            cases = make_cases(name, hidden=True, seed=seed)
        for case in cases:
            digest.update(f"{case.name}\0{case.concern}\0".encode())
            for key in sorted(case.inputs):
                digest.update(key.encode() + b"\0" + _value_bytes(case.inputs[key]))
            for key in sorted(case.judge_only):
                digest.update(key.encode() + b"\0" + _value_bytes(case.judge_only[key]))
    return digest.hexdigest()


def _value_bytes(value: Any) -> bytes:
    if isinstance(value, torch.Tensor):
        raw = value.detach().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
        return f"{value.dtype}{tuple(value.shape)}".encode() + raw
    if isinstance(value, list | tuple):
        return b"[" + b",".join(map(_value_bytes, value)) + b"]"
    if isinstance(value, dict):
        return b"{" + b",".join(repr(k).encode() + b":" + _value_bytes(v) for k, v in value.items()) + b"}"
    return repr(value).encode()


def load() -> dict:
    return json.loads(PINNED.read_text()) if PINNED.exists() else {"checks": {}}


def save(pinned: dict) -> None:
    PINNED.write_text(json.dumps(pinned, indent=1, sort_keys=True) + "\n")
