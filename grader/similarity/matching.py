"""Which answers share what the rest of the class does not write.

Fingerprints (copydetect, MOSS's winnowing: Schleimer, Wilkerson and Aiken, SIGMOD 2003): each
answer is tokenized by Pygments and filtered (every name becomes one letter, strings one letter,
whitespace and comments go), the filtered text's runs of K characters are hashed, and winnowing
keeps at least one hash of every run of GUARANTEE characters, so any run that long shared by two
answers is found. Runs found in the code the notebook gives (stubs, given cells) are dropped.
Renamed variables and reformatting change no fingerprint; reordered statements change only the
runs that span two of them (fingerprints are a set, not a sequence), and independent statements
are put in one order first (order.py).

Rarity: for one question the population is every answer to it (this class's and the earlier
classes') and every source file. A fingerprint held by n of them is worth log(c / n) / log(c / 2)
to each pair that shares it, c being a quarter of the population (at least 8): 1 when only the
pair has it, less the more of the population writes it, nothing from c on. A pair's evidence is
what its shared fingerprints are worth; its share, that evidence over the smaller of the two
answers' worth (each of its fingerprints at that rate, 1 where it alone has one). A pair is
flagged when its evidence, its share and the length of the runs it shares reach their minimums:
a short answer never does, whoever else writes it.

Scale: only fingerprints held by 2 to c answers make pairs: the work grows with the answers
times c, through an index from fingerprints to answers, and no two answers are compared whole.
"""

import hashlib
import json
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from grader.similarity.answers import Answer
from grader.similarity.order import canonical_order

# Set from a scan of generated classes (benchmarks/README.md, "Similar answers"): the best F1 of the
# settings scanned on twelve classes, then measured on classes they were not set on.
K = 30  # filtered characters hashed together: two short statements ("V=V.V(V,V=-1)" is 13)
GUARANTEE = 35  # any shared run this long is found (winnowing window: GUARANTEE - K + 1)
COMMON_SHARE = 1 / 4  # a fingerprint held by this share of the answers is what the class writes:
MIN_COMMON = 8  # worth nothing (nor one held by this many, in a small class)
MIN_EVIDENCE = 10.0  # what the shared fingerprints of a flagged pair are worth, at least
MIN_SHARE = 0.8  # of the smaller answer's worth, at least
MIN_CHARS = 100  # filtered characters of the class's answer in shared runs, at least (5 or 6 lines)
MAX_ANSWER_CHARS = 50_000  # of one answer compared (the longest reference answer: 4,238)


@dataclass(frozen=True)
class Fingerprints:
    raw: str  # the answer, its independent statements in canonical order (order.py)
    line_of: list[int]  # the answer's line (from 1) of each line of `raw`
    filtered: str
    hashes: np.ndarray  # each winnowed fingerprint, in order, repeats kept
    positions: np.ndarray  # where each starts in the filtered text
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
        raw_starts, raw_ends = self._raw(starts), self._raw(ends)
        newlines = np.array([i for i, c in enumerate(self.raw) if c == "\n"], dtype=np.int64)
        first = np.searchsorted(newlines, raw_starts, side="right") + 1
        last = np.searchsorted(newlines, np.maximum(raw_ends - 1, raw_starts), side="right") + 1
        raw_lines = self.raw.split("\n")
        held = {n for a, b in zip(first, last, strict=True) for n in range(int(a), int(b) + 1)}
        return tuple(sorted(self.line_of[n - 1] for n in held if raw_lines[n - 1].strip() not in given))

    def _runs(self, shared: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Where the runs of the fingerprints `shared` start and end in the filtered text."""
        from copydetect.utils import get_copied_slices

        starts, ends = get_copied_slices(self.positions[np.isin(self.hashes, shared)], K)
        return np.asarray(starts, dtype=np.int64), np.asarray(ends, dtype=np.int64)

    def _raw(self, filtered: np.ndarray) -> np.ndarray:
        """Positions in the filtered text -> positions in the raw text (as copydetect maps them,
        from the characters its filter removed before each position)."""
        from copydetect.utils import filter_code

        offsets = np.asarray(filter_code(self.raw, "answer.py", language="python")[1], dtype=np.int64)
        if len(offsets) == 0:
            return filtered
        at = np.clip(np.searchsorted(offsets[:, 0], filtered), 0, len(offsets) - 1)
        return filtered + offsets[at, 1]


class Normalised:
    """Answers as their fingerprints read them (independent statements in one order, then
    copydetect's filter), by the SHA-256 of each answer: the slow part of a search (milliseconds an
    answer, Pygments' lexer mostly), kept between runs in a file (`path`) when given. An entry
    that does not fit its answer is made again; only the answers of the last search are written."""

    def __init__(self, path: Path | None = None):
        self.path, self.used = path, {}
        try:
            kept = json.loads(path.read_text()) if path else {}
        except (OSError, ValueError):
            kept = {}
        self.kept = kept if isinstance(kept, dict) else {}

    def of(self, code: str) -> tuple[str, list[int], str]:
        """(the text in canonical order, the answer's line of each of its lines, the filtered text)."""
        from copydetect.utils import filter_code

        key = hashlib.sha256(code.encode("utf-8", "replace")).hexdigest()
        lines = code.split("\n")
        entry = self.used.get(key) or self.kept.get(key)
        if _fits(entry, len(lines)):
            line_of, filtered = entry
        else:
            line_of = canonical_order(code)[1]
            filtered = filter_code("\n".join(lines[n - 1] for n in line_of), "answer.py", language="python")[
                0
            ]
        self.used[key] = [line_of, filtered]
        return "\n".join(lines[n - 1] for n in line_of), line_of, filtered

    def save(self) -> None:
        if self.path:
            partial = self.path.with_name(self.path.name + ".partial")
            partial.write_text(json.dumps(self.used))
            partial.replace(self.path)


def _fits(entry, lines: int) -> bool:
    """Whether a cached entry is [some of the answer's lines (numbers from 1, each once), a text]."""
    if not (isinstance(entry, list) and len(entry) == 2 and isinstance(entry[0], list)):
        return False
    order, filtered = entry
    numbers = [n for n in order if type(n) is int and 1 <= n <= lines]
    return isinstance(filtered, str) and len(numbers) == len(order) == len(set(order))


def fingerprints(code: str, given: np.ndarray, normalised: Normalised | None = None) -> Fingerprints:
    """The winnowed fingerprints of `code`, less every run also in the given code's `given`."""
    from copydetect.utils import hashed_kgrams, winnow

    text, line_of, filtered = (normalised or Normalised()).of(code)
    hashes = hashed_kgrams(filtered, K)
    if len(hashes) == 0:
        return Fingerprints(text, line_of, filtered, np.zeros(0, np.int64), np.zeros(0, np.int64))
    kept, positions = winnow(hashes, GUARANTEE - K + 1, remove_duplicates=False)
    mine = ~np.isin(kept, given)
    return Fingerprints(text, line_of, filtered, kept[mine], positions[mine])


def given_runs(cells: Sequence[str]) -> np.ndarray:
    """Every run of K filtered characters of the given cells, as written and in canonical order
    (an untouched stub is read in that order too), hashed: all of them, not winnowed."""
    from copydetect.utils import filter_code, hashed_kgrams

    texts = [text for cell in cells for text in {cell, canonical_order(cell)[0]}]
    runs = [hashed_kgrams(filter_code(text, "given.py", language="python")[0], K) for text in texts]
    return np.unique(np.concatenate([np.zeros(0, np.int64), *runs]))


@dataclass(frozen=True)
class Match:
    """Two answers to one question that share what the rest of the population does not: `a` is of
    this class; `b` of this class, of an earlier one, or a source file."""

    a: Answer
    b: Answer
    share: float  # of the smaller answer's worth
    evidence: float  # what the shared fingerprints are worth
    lines_a: tuple[int, ...]  # the lines of each answer that hold what they share
    lines_b: tuple[int, ...]

    @property
    def notebook(self) -> str:
        return self.a.notebook

    @property
    def question(self) -> str:
        return self.a.question


def find_matches(
    answers: list[Answer],
    sources: list[Answer],
    given: dict[str, Sequence[str]],
    normalised: Normalised | None = None,
) -> list[Match]:
    """The flagged pairs among `answers` (this class's and earlier classes', each to one question)
    and between them and `sources` (files of any layout, compared with every question); `given`:
    notebook -> the code it gives, cell by cell. Pairs of two answers from outside this class are
    not sought."""
    normalised = normalised or Normalised()
    runs = {notebook: given_runs(cells) for notebook, cells in given.items()}
    none = np.zeros(0, np.int64)
    printed = [fingerprints(s.source, none, normalised) for s in sources]
    by_question = defaultdict(list)
    for answer in answers:
        by_question[answer.notebook, answer.question].append(answer)
    matches = []
    for (notebook, _), group in sorted(by_question.items()):
        if not any(a.in_this_class for a in group):
            continue
        prints = [
            fingerprints(a.source[:MAX_ANSWER_CHARS], runs.get(notebook, none), normalised) for a in group
        ]
        given_lines = {line.strip() for cell in given.get(notebook, ()) for line in cell.split("\n")}
        matches += _question_matches(group + sources, prints + printed, given_lines)
    return sorted(matches, key=lambda m: (m.notebook, -m.share, -m.evidence, m.a.owner, m.b.owner))


def _worth(held: np.ndarray, population: int) -> np.ndarray:
    """What a fingerprint held by `held` answers is worth to a pair that shares it: 1 when only
    the pair holds it, falling with the log of how many do, 0 from `common` on."""
    common = max(MIN_COMMON, population * COMMON_SHARE)
    return np.clip(np.log(common / np.maximum(held, 2)) / np.log(common / 2), 0.0, 1.0)


def _question_matches(population: list[Answer], prints: list[Fingerprints], given: set[str]) -> list[Match]:
    """The flagged pairs of one question's population, at least one of each pair in this class;
    the lines they share, less those that are given code (`given`: stripped)."""
    holder = np.concatenate([np.full(len(p.unique), i, np.int64) for i, p in enumerate(prints)])
    hashes = np.concatenate([p.unique for p in prints])
    if len(hashes) == 0:
        return []
    order = np.argsort(hashes, kind="stable")
    hashes, holder = hashes[order], holder[order]
    _, start, held = np.unique(hashes, return_index=True, return_counts=True)
    worth = _worth(held, len(population))
    own = np.bincount(
        holder, weights=np.repeat(np.where(held == 1, 1.0, worth), held), minlength=len(population)
    )
    mine = np.array([a.in_this_class for a in population])
    firsts, seconds, values = [], [], []
    for size in np.unique(held[(held >= 2) & (worth > 0)]):
        groups = start[held == size]
        members = holder[groups[:, None] + np.arange(size)]
        i, j = np.triu_indices(size, 1)
        firsts.append(members[:, i].ravel())
        seconds.append(members[:, j].ravel())
        values.append(np.full(len(groups) * len(i), worth[held == size][0]))
    if not firsts:
        return []
    first, second, value = np.concatenate(firsts), np.concatenate(seconds), np.concatenate(values)
    wanted = mine[first] | mine[second]
    keys = first[wanted] * len(population) + second[wanted]
    pairs, where = np.unique(keys, return_inverse=True)
    evidence = np.bincount(where, weights=value[wanted])
    found = []
    for key, worth_shared in zip(pairs, evidence, strict=True):
        x, y = divmod(int(key), len(population))
        if not mine[x]:
            x, y = y, x
        share = worth_shared / min(own[x], own[y])
        if worth_shared < MIN_EVIDENCE or share < MIN_SHARE:
            continue
        shared = np.intersect1d(prints[x].unique, prints[y].unique)
        if prints[x].covered(shared) < MIN_CHARS:
            continue
        a, b = population[x], population[y]
        if b.in_this_class and b.owner < a.owner:
            (a, x), (b, y) = (b, y), (a, x)
        found.append(
            Match(
                a,
                b,
                round(float(min(share, 1.0)), 3),
                round(float(worth_shared), 2),
                prints[x].lines(shared, given),
                prints[y].lines(shared, given),
            )
        )
    return found
