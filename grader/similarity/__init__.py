"""Which answers were copied: answers of a class that share what the rest of the class does not
write, with each other, with earlier classes' answers and with published solutions.

    answers.py       the answer cells of a graded class (OUT/work/runs), the files of known sources
    order.py         independent statements put in one order (a shuffled copy reads as its original)
    fingerprints.py  an answer filtered, hashed and winnowed (copydetect's winnowing)
    matching.py      the fingerprints' rarity, the flagged pairs
    page.py          the pairs in OUT/report.html (instructors only) and OUT/similar-answers.csv

docs/similar-answers.md says what is compared, how a pair is scored and what it cannot see.
"""

from pathlib import Path

from grader.record.record import holds_a_class
from grader.similarity.answers import class_answers, given_code, source_files
from grader.similarity.fingerprints import Normalised
from grader.similarity.matching import Match, find_matches

CACHE = "similar_answers.json"  # in OUT/work: the answers as the search reads them (Normalised)


def similar_answers(out: Path, compare_with: list[Path] = ()) -> tuple[list[Match], list[str]]:
    """The flagged pairs of the class graded into `out`, among its students and against each
    folder of `compare_with`: an earlier class's output folder, or any folder of .py and .ipynb
    files (published solutions); and notes on the folders that could not be compared."""
    answers, sources, notes = class_answers(out), [], []
    for folder in dict.fromkeys(Path(f).resolve() for f in compare_with):  # each once, in order
        if folder == out.resolve():
            continue
        if not folder.is_dir():
            notes.append(f"--compare-with {folder}: no longer a folder, not compared")
        elif holds_a_class(folder):
            answers += class_answers(folder, origin=str(folder))
        else:
            sources += source_files(folder, outside=out)
    given = {notebook: given_code(notebook) for notebook in {a.notebook for a in answers}}
    normalised = Normalised(out / "work" / CACHE)
    matches = find_matches(answers, sources, given, normalised)
    normalised.save()
    return matches, notes
