"""An answer as its fingerprints: what a copier changes cheaply taken out, then hashed and winnowed.

The text: Pygments' Python tokens, every name one letter (variables, attributes, functions,
classes, built-ins, `self`: "V"), every string one letter ("S"), comments and whitespace gone;
keywords, numbers and operators kept. copydetect's own filter keeps built-in names and `self` as
written, so that renaming `self` or naming a variable `len` would hide a copy: the course filters
the tokens itself and keeps where each character came from.

The fingerprints: every run of K characters of that text hashed (a polynomial hash, the same in
every process: Python's own `hash` of a string changes from run to run, and so would the pairs),
then winnowed by copydetect (MOSS's algorithm: Schleimer, Wilkerson and Aiken, SIGMOD 2003): any
run of GUARANTEE characters two answers share is found. Runs found in the code the notebook gives
are dropped.
"""

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np
import pygments
from pygments import token
from pygments.lexers import PythonLexer

from grader.similarity.order import canonical_order

K = 35  # filtered characters hashed together: two short statements ("V=V.V(V,V=-1)" is 13)
GUARANTEE = 40  # any shared run this long is found (winnowing window: GUARANTEE - K + 1)
MAX_FILTERED = 200_000  # characters of an answer's filtered text compared (the longest reference: 718)
BASE = 1_000_003  # of the polynomial hash, modulo 2**64
LEXER = PythonLexer(stripnl=False, ensurenl=False)  # positions are the text's own


def filtered(text: str) -> tuple[str, np.ndarray]:
    """The text as fingerprints read it, and for each of its characters, its position in `text`."""
    out, at, in_string = [], [], False
    for start, kind, value in LEXER.get_tokens_unprocessed(text):
        if kind in token.String:
            if not in_string:
                out.append("S")
                at.append(start)
            in_string = True
            continue
        in_string = False
        if kind in token.Comment or kind in token.Text or kind in token.Whitespace:
            continue
        if kind in token.Name:
            out.append("V")
            at.append(start)
        else:
            out.append(value)
            at.extend(range(start, start + len(value)))
    return "".join(out), np.array(at, dtype=np.int64)


def hashed_runs(text: str) -> np.ndarray:
    """The hash of every run of K characters of `text`, in order (int64)."""
    codes = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32).astype(np.uint64)
    if len(codes) < K:
        return np.zeros(0, np.int64)
    powers = np.array([pow(BASE, K - 1 - j, 2**64) for j in range(K)], dtype=np.uint64)
    windows = np.lib.stride_tricks.sliding_window_view(codes, K)
    return (windows * powers).sum(axis=1, dtype=np.uint64).view(np.int64)


@dataclass(frozen=True)
class Fingerprints:
    raw: str  # the answer, its independent statements in canonical order (order.py)
    line_of: list[int]  # the answer's line (from 1) of each line of `raw`
    text: str  # `raw` filtered
    hashes: np.ndarray  # each winnowed fingerprint, in order, repeats kept
    positions: np.ndarray  # where each starts in `text`
    unique: np.ndarray = field(init=False)  # sorted, once each

    def __post_init__(self):
        object.__setattr__(self, "unique", np.unique(self.hashes))

    def covered(self, shared: np.ndarray) -> int:
        """How many filtered characters the runs of the fingerprints `shared` cover."""
        starts, ends = self._runs(shared)
        return int(np.sum(ends - starts))

    def lines(self, shared: np.ndarray, given: set[str] = frozenset()) -> tuple[int, ...]:
        """The lines (from 1) of the answer that hold the runs of the fingerprints `shared`, less
        those whose text (stripped) is in `given`."""
        starts, ends = self._runs(shared)
        if len(starts) == 0:
            return ()
        at = _positions(self.raw)
        newlines = np.array([i for i, c in enumerate(self.raw) if c == "\n"], dtype=np.int64)
        first = np.searchsorted(newlines, at[starts], side="right") + 1
        last = np.searchsorted(newlines, at[ends - 1], side="right") + 1
        raw_lines = self.raw.split("\n")
        held = {n for a, b in zip(first, last, strict=True) for n in range(int(a), int(b) + 1)}
        return tuple(sorted(self.line_of[n - 1] for n in held if raw_lines[n - 1].strip() not in given))

    def _runs(self, shared: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Where the runs of the fingerprints `shared` start and end in `text`."""
        from copydetect.utils import get_copied_slices

        starts, ends = get_copied_slices(self.positions[np.isin(self.hashes, shared)], K)
        return np.asarray(starts, dtype=np.int64), np.asarray(ends, dtype=np.int64)


@lru_cache(maxsize=1024)
def _positions(raw: str) -> np.ndarray:
    """Where each character of the answer's filtered text comes from (answers in several pairs)."""
    return filtered(raw)[1]


class Normalised:
    """Answers as their fingerprints read them (independent statements in one order, then
    filtered), by the SHA-256 of each answer: the slow part of a search (milliseconds an answer,
    Pygments' lexer mostly), kept between runs in a file (`path`) when given. A file written by
    another version, or an entry that does not fit its answer, is made again; only the answers of
    the last search are written."""

    VERSION = f"2 pygments {pygments.__version__}"  # change it with what order.py or `filtered` make

    def __init__(self, path: Path | None = None):
        self.path, self.used = path, {}
        try:
            kept = json.loads(path.read_text()) if path else {}
        except (OSError, ValueError):
            kept = {}
        fits = isinstance(kept, dict) and kept.get("version") == self.VERSION
        self.kept = kept["answers"] if fits and isinstance(kept.get("answers"), dict) else {}

    def of(self, code: str) -> tuple[str, list[int], str]:
        """(the text in canonical order, the answer's line of each of its lines, the filtered text)."""
        key = hashlib.sha256(code.encode("utf-8", "surrogatepass")).hexdigest()
        lines = code.split("\n")
        entry = self.used.get(key) or self.kept.get(key)
        if _fits(entry, len(lines)):
            line_of, text = entry
            raw = "\n".join(lines[n - 1] for n in line_of)
        else:
            raw, line_of = canonical_order(code)
            text = filtered(raw)[0][:MAX_FILTERED]
        self.used[key] = [line_of, text]
        return raw, line_of, text

    def save(self) -> None:
        if self.path:
            partial = self.path.with_name(self.path.name + ".partial")
            partial.write_text(json.dumps({"version": self.VERSION, "answers": self.used}))
            partial.replace(self.path)


def _fits(entry, lines: int) -> bool:
    """Whether a cached entry is [some of the answer's lines (numbers from 1, each once), a text]."""
    if not (isinstance(entry, list) and len(entry) == 2 and isinstance(entry[0], list)):
        return False
    order, text = entry
    numbers = [n for n in order if type(n) is int and 1 <= n <= lines]
    return isinstance(text, str) and len(numbers) == len(order) == len(set(order))


def fingerprints(code: str, given: np.ndarray, normalised: Normalised | None = None) -> Fingerprints:
    """The winnowed fingerprints of `code`, less every run also in the given code's `given`."""
    from copydetect.utils import winnow

    raw, line_of, text = (normalised or Normalised()).of(code)
    hashes = hashed_runs(text)
    if len(hashes) == 0:
        return Fingerprints(raw, line_of, text, np.zeros(0, np.int64), np.zeros(0, np.int64))
    kept, positions = winnow(hashes, GUARANTEE - K + 1, remove_duplicates=False)
    mine = ~np.isin(kept, given)
    return Fingerprints(raw, line_of, text, kept[mine], positions[mine])


def given_runs(cells: Sequence[str]) -> np.ndarray:
    """Every run of K filtered characters of the given cells, as written and in canonical order
    (an untouched stub is read in that order too), hashed: all of them, not winnowed."""
    texts = [text for cell in cells for text in {cell, canonical_order(cell)[0]}]
    return np.unique(np.concatenate([np.zeros(0, np.int64), *(hashed_runs(filtered(t)[0]) for t in texts)]))
