"""Similar answers (grader/similarity): how well generated copies are found, and how long and how
much memory a class takes against its size.

    .venv/bin/python benchmarks/similarity.py [--quality] [--scale] [--scan] [--json PATH]

--quality  precision and recall on generated classes (tests/helpers/similar_class.py) of 60, 200
           and 500 students, 15% of them copying one answer (exactly, renamed and reformatted,
           statements reordered, a line added, or from the published solution), on seeds the
           thresholds were not set on. A pair counts as a copy when one answer comes from the
           other or both from the same one; copies of the short softmax, which many honest
           students write alike, are not counted as copies to find, and flagging one counts as
           a false alarm. Recall is also given per kind of copy.
--scale    an output folder as grading leaves it, for N students x the course's 12 notebooks
           (every answer cell filled with a generated answer), written to a temporary folder;
           then `similar_answers(OUT)` in a fresh process, twice: its wall time the first time
           and again (with the answers normalised by the first run, as every later report of a
           class finds them), and its peak memory (RSS).
--scan     the thresholds' scan: F1 of each setting of K, the common share and the minimum
           length on four classes of 200 and eight of 60 (seeds 1-8), the best minimum evidence
           and share for each (what matching.py's constants were set from; minutes).
"""

import argparse
import itertools
import json
import os
import platform
import random
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from grader.similarity import fingerprints as fingerprinting  # noqa: E402
from grader.similarity import matching  # noqa: E402
from tests.helpers.similar_class import (  # noqa: E402
    GIVEN,
    GIVEN_CELL,
    NOTEBOOK,
    copy_pairs,
    generated_class,
    honest,
    render,
    student_names,
)

RESULTS = REPO / "benchmarks" / "results" / "similarity_cpu.json"
CLASS_GIVEN = {NOTEBOOK: [GIVEN_CELL, *GIVEN.values()]}
QUALITY_SEEDS = (101, 102, 103)


def _score(written, source, matches) -> dict:
    truth = {t for t in copy_pairs(written, source) if t[0] != "softmax"}
    found = {(m.question, m.a.owner, m.b.owner) for m in matches}
    how = {(w.answer.question, w.answer.owner): w.how for w in written}
    kinds = Counter()
    missed = Counter()
    for question, a, b in truth:
        kind = how[question, a] if how[question, a] != "honest" else how.get((question, b), "published")
        kinds[kind] += 1
        missed[kind] += (question, a, b) not in found
    return {
        "truth": len(truth),
        "found": len(found),
        "right": len(found & truth),
        "kinds": kinds,
        "missed": missed,
    }


def quality() -> dict:
    results = {}
    for students in (60, 200, 500):
        total = Counter()
        kinds, missed = Counter(), Counter()
        started = time.perf_counter()
        for seed in QUALITY_SEEDS:
            written, source = generated_class(students, seed=seed)
            matches = matching.find_matches([w.answer for w in written], [source], CLASS_GIVEN)
            score = _score(written, source, matches)
            total.update({k: score[k] for k in ("truth", "found", "right")})
            kinds.update(score["kinds"])
            missed.update(score["missed"])
        results[students] = {
            "classes": len(QUALITY_SEEDS),
            "copy_pairs": total["truth"],
            "flagged": total["found"],
            "precision": round(total["right"] / max(1, total["found"]), 3),
            "recall": round(total["right"] / max(1, total["truth"]), 3),
            "recall_by_kind": {k: round(1 - missed[k] / kinds[k], 3) for k in sorted(kinds)},
            "pairs_by_kind": dict(sorted(kinds.items())),
            "seconds": round(time.perf_counter() - started, 1),
        }
        print(f"{students} students: {results[students]}", flush=True)
    return results


def _write_class(out: Path, students: int, seed: int) -> int:
    """An output folder as grading leaves it (results and submitted notebooks) for `students`
    students of every notebook, each answer cell holding a generated answer; the answers written."""
    from autograder.paths import NOTEBOOKS, assignments
    from grader.grades import Result
    from grader.record.record import save_result

    rng = random.Random(seed)
    questions = list(GIVEN)
    written = 0
    for notebook in assignments():
        release = json.loads((NOTEBOOKS / notebook / f"{notebook}.ipynb").read_text())
        for index in range(students):
            student = f"s{index:04d}"
            names = student_names(rng)
            for number, cell in enumerate(release["cells"]):
                meta = cell.get("metadata", {}).get("nbgrader", {})
                if cell["cell_type"] == "code" and meta.get("solution"):
                    question = questions[number % len(questions)]
                    cell["source"] = render(question, *honest(question, rng), names, rng)
                    written += 1
            save_result(out, Result(student, notebook, 1.0, 2.0, "graded"), "")
            path = out / "work" / "runs" / student / notebook / "submitted" / student / notebook
            path.mkdir(parents=True, exist_ok=True)
            (path / f"{notebook}.ipynb").write_text(json.dumps(release))
    return written


MEASURE = """
import json, resource, sys, time
from pathlib import Path
started = time.perf_counter()
from grader.similarity import similar_answers
matches = similar_answers(Path(sys.argv[1]))
print(json.dumps({"seconds": time.perf_counter() - started, "pairs": len(matches),
                  "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def scale(sizes: list[int]) -> dict:
    results = {}
    for students in sizes:
        with tempfile.TemporaryDirectory() as tmp:
            answers = _write_class(Path(tmp), students, seed=students)
            cold, warm = (
                json.loads(
                    subprocess.run(
                        [sys.executable, "-c", MEASURE, tmp],
                        capture_output=True,
                        text=True,
                        check=True,
                        cwd=REPO,
                    ).stdout
                )
                for _ in ("cold", "warm")
            )
        results[students] = {
            "notebooks": students * 12,
            "answers": answers,
            "seconds_first": round(cold["seconds"], 1),
            "seconds_again": round(warm["seconds"], 1),
            "peak_rss_mib": round(max(cold["peak_rss_mib"], warm["peak_rss_mib"])),
            "pairs_flagged": cold["pairs"],
        }
        print(f"{students} students: {results[students]}", flush=True)
    return results


def _settings() -> dict:
    return {
        **{name: getattr(fingerprinting, name) for name in ("K", "GUARANTEE")},
        **{
            name: getattr(matching, name)
            for name in ("COMMON_SHARE", "MIN_COMMON", "MIN_EVIDENCE", "MIN_SHARE", "MIN_CHARS")
        },
    }


def _set(values: dict) -> None:
    for name, value in values.items():
        setattr(fingerprinting if name in ("K", "GUARANTEE") else matching, name, value)


def scan() -> list[dict]:
    classes = [generated_class(200, seed=s) for s in (1, 2, 3, 4)] + [
        generated_class(60, seed=s) for s in range(1, 9)
    ]
    kept = _settings()
    normalised = fingerprinting.Normalised()  # the same for every setting: made once
    rows = []
    try:
        for (k, guarantee), common, chars in itertools.product(
            [(25, 30), (30, 35), (35, 40)], [1 / 8, 1 / 4], [80, 100, 120]
        ):
            _set({"K": k, "GUARANTEE": guarantee, "COMMON_SHARE": common, "MIN_CHARS": chars})
            _set({"MIN_EVIDENCE": 0, "MIN_SHARE": 0})
            judged = []
            for written, source in classes:
                truth = {t for t in copy_pairs(written, source) if t[0] != "softmax"}
                answers = [w.answer for w in written]
                judged.append((truth, matching.find_matches(answers, [source], CLASS_GIVEN, normalised)))
            best = {"f1": 0.0}
            for evidence, share in itertools.product([2, 4, 6, 8, 10, 12, 15], [0.5, 0.6, 0.7, 0.8, 0.9]):
                right = flagged = truths = 0
                for truth, matches in judged:
                    found = {
                        (m.question, m.a.owner, m.b.owner)
                        for m in matches
                        if m.evidence >= evidence and m.share >= share
                    }
                    right, flagged, truths = (
                        right + len(found & truth),
                        flagged + len(found),
                        truths + len(truth),
                    )
                precision, recall = right / max(1, flagged), right / truths
                f1 = 2 * precision * recall / max(1e-9, precision + recall)
                if f1 > best["f1"]:
                    best = {"f1": round(f1, 3), "min_evidence": evidence, "min_share": share,
                            "precision": round(precision, 3), "recall": round(recall, 3)}  # fmt: skip
            rows.append({"K": k, "guarantee": guarantee, "common_share": common, "min_chars": chars, **best})
            print(rows[-1], flush=True)
    finally:
        _set(kept)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quality", action="store_true")
    parser.add_argument("--scale", action="store_true")
    parser.add_argument("--sizes", default="50,100,250,500", help="class sizes for --scale")
    parser.add_argument("--scan", action="store_true")
    parser.add_argument("--json", type=Path, default=RESULTS)
    args = parser.parse_args()
    results = json.loads(args.json.read_text()) if args.json.exists() else {}
    results["machine"] = {
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "load_1min_before": os.getloadavg()[0],
        "date": time.strftime("%Y-%m-%d"),
    }
    results["settings"] = _settings()
    if args.quality:
        results["quality"] = quality()
    if args.scale:
        results["scale"] = scale([int(n) for n in args.sizes.split(",")])
    if args.scan:
        results["scan"] = scan()
    results["machine"]["load_1min_after"] = os.getloadavg()[0]
    args.json.write_text(json.dumps(results, indent=1) + "\n")
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
