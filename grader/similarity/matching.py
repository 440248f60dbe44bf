"""Which answers share what the rest of the class does not write.

Each answer's fingerprints (fingerprints.py) are weighed by how rare they are, and the pairs of
answers that share rare ones are found through an index from fingerprints to answers.

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

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from grader.similarity.answers import Answer, given_lines
from grader.similarity.fingerprints import Fingerprints, Normalised, fingerprints, given_runs

# Set from a scan of generated classes (benchmarks/README.md, "Similar answers"), with K and
# GUARANTEE (fingerprints.py): the best F1 of the settings scanned on twelve classes, then measured
# on classes they were not set on.
COMMON_SHARE = 1 / 4  # a fingerprint held by this share of the answers is what the class writes:
MIN_COMMON = 8  # worth nothing (nor one held by this many, in a small class)
MIN_EVIDENCE = 12.0  # what the shared fingerprints of a flagged pair are worth, at least
MIN_SHARE = 0.7  # of the smaller answer's worth, at least
MIN_CHARS = 100  # filtered characters of the class's answer in shared runs, at least (5 or 6 lines)


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
    lines = {notebook: given_lines(cells) for notebook, cells in given.items()}
    none = np.zeros(0, np.int64)
    printed = [fingerprints(s.source, none, normalised) for s in sources]
    by_question = defaultdict(list)
    for answer in answers:
        by_question[answer.notebook, answer.question].append(answer)
    matches = []
    for (notebook, _), group in sorted(by_question.items()):
        if not any(a.in_this_class for a in group):
            continue
        prints = [fingerprints(a.source, runs.get(notebook, none), normalised) for a in group]
        matches += _question_matches(group + sources, prints + printed, lines.get(notebook, set()))
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
