"""Which answers were copied (grader/similarity): a generated class whose copies are known, the
canonical order of independent statements, what is read from hostile files, and what the class
report and its CSV show. Precision and recall on larger classes: benchmarks/similarity.py."""

import csv
import html
import json
import os
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest

from autograder.paths import NOTEBOOKS
from grader.grades import Result
from grader.record.class_report import write_class_report
from grader.record.record import save_result
from grader.similarity import similar_answers
from grader.similarity.answers import Answer, answer_cells, class_answers, source_files
from grader.similarity.fingerprints import fingerprints, given_runs
from grader.similarity.matching import find_matches
from grader.similarity.order import canonical_order
from grader.similarity.page import write_csv

from .helpers.similar_class import GIVEN, GIVEN_CELL, NOTEBOOK, disguise, generated_class, planted_class
from .helpers.submissions import perfect, release, solution_sources

CLASS_GIVEN = {NOTEBOOK: [GIVEN_CELL, *GIVEN.values()]}
REPO = Path(__file__).resolve().parents[1]
HOSTILE = "<script>window.PWNED=1</script>"


def _found(matches) -> set[tuple[str, str, str]]:
    return {(m.question, m.a.owner, m.b.owner) for m in matches}


@pytest.fixture(scope="module")
def planted():
    answers, source, copies, independent = planted_class(seed=0)
    return answers, source, copies, independent, find_matches(answers, [source], CLASS_GIVEN)


def test_every_planted_copy_is_found_with_its_pair_and_nothing_else(planted):
    """Exact, renamed and reformatted, reordered and published copies are found, each with the
    answer it came from; two students who wrote the same short softmax are not flagged, nor is
    any pair of the 60 honest students."""
    _, _, copies, independent, matches = planted
    assert _found(matches) == copies
    assert not _found(matches) & independent


def test_a_flagged_pair_shows_the_lines_it_shares_not_the_given_ones(planted):
    answers, _, _, _, matches = planted
    [exact] = [m for m in matches if (m.a.owner, m.b.owner) == ("s0001", "s0002")]
    lines = exact.a.source.split("\n")
    written = {
        n for n, line in enumerate(lines, 1) if line.strip() and line.strip() not in GIVEN["attention"]
    }
    assert exact.lines_a == exact.lines_b
    assert set(exact.lines_a) >= written - {
        n for n, line in enumerate(lines, 1) if line.strip().startswith("#")
    }
    assert 1 not in exact.lines_a  # the given signature


def test_a_copy_of_the_published_solution_names_the_file():
    answers, source, _, _ = planted_class(seed=0)
    [match] = [m for m in find_matches(answers, [source], CLASS_GIVEN) if not m.b.notebook]
    assert (match.a.owner, match.b.owner, match.b.origin) == ("s0007", "published/solutions.py", "known")
    assert match.lines_b and min(match.lines_b) > source.source[
        : source.source.index("class MultiHead")
    ].count("\n")


def test_given_code_alone_is_never_a_match():
    """Students who hand in the stubs, or paste the notebook's given cell into an answer, share
    only what the notebook gives."""
    stub = Answer("a", NOTEBOOK, "heads", GIVEN["heads"])
    pasted = Answer("b", NOTEBOOK, "heads", GIVEN["heads"] + "\n" + GIVEN_CELL * 3)
    same = Answer("c", NOTEBOOK, "heads", GIVEN["heads"])
    assert find_matches([stub, pasted, same], [], CLASS_GIVEN) == []


def test_a_small_class_still_finds_an_exact_copy():
    written, _ = generated_class(6, seed=3, copiers=0)
    answers = [w.answer for w in written]
    victim = next(a for a in answers if a.question == "heads" and a.owner == "s0001")
    answers = [a for a in answers if (a.owner, a.question) != ("s0002", "heads")]
    answers.append(Answer("s0002", NOTEBOOK, "heads", victim.source))
    assert _found(find_matches(answers, [], CLASS_GIVEN)) == {("heads", "s0001", "s0002")}


# ------------------------------------------------------------------------------ order


HEADS_INIT = """class A(nn.Module):
    def __init__(self, hidden_size, num_heads):
        super().__init__()
        self.h = num_heads
        self.q = nn.Linear(hidden_size, hidden_size)
        self.k = nn.Linear(hidden_size, hidden_size, bias=False)
        self.hd = hidden_size // self.h
        self.v = nn.Linear(hidden_size, hidden_size)
        nn.init.zeros_(self.v.bias)
        self.o = nn.Linear(hidden_size, self.h * self.hd)"""


def _filtered(code: str) -> str:
    return fingerprints(code, given_runs([])).text


def test_independent_statements_read_the_same_in_any_order_that_computes_the_same():
    lines = HEADS_INIT.split("\n")
    body = lines[3:]
    reference = _filtered(HEADS_INIT)
    rng = random.Random(0)
    tried = 0
    while tried < 20:
        shuffled = rng.sample(body, len(body))
        position = {line: i for i, line in enumerate(shuffled)}
        after = [  # (a line, one it must follow)
            (3, 0),  # self.hd reads self.h
            (5, 4),  # zeros_ writes self.v.bias
            (6, 0),
            (6, 3),
        ]
        if any(position[body[a]] < position[body[b]] for a, b in after):
            continue
        tried += 1
        assert _filtered("\n".join(lines[:3] + shuffled)) == reference, shuffled


def test_a_statement_never_moves_before_what_it_reads():
    code, line_of = canonical_order("z = f(y)\ny = 1\nx = 2\na = x + 1")
    assert code.split("\n").index("a = x + 1") > code.split("\n").index("x = 2")
    assert code.split("\n").index("y = 1") > code.split("\n").index("z = f(y)")  # a write after a read
    assert sorted(line_of) == [1, 2, 3, 4]
    assert canonical_order("super().__init__()\nself.a = 1")[0].startswith("super()")


def test_a_statement_nested_past_the_stack_stops_no_reordering():
    """A reader that recursed would give up on the whole answer (and a copier could add one such
    line to keep the original's order from being found)."""
    junk = "        _ = " + "+".join(["0"] * 990)
    lines = HEADS_INIT.split("\n")
    shuffled = [*lines[:3], junk, lines[4], lines[3], *lines[5:]]  # q before h: independent
    assert _filtered("\n".join(shuffled)) == _filtered("\n".join([*lines[:3], junk, *lines[3:]]))


def test_code_that_does_not_parse_is_compared_as_written():
    code = "def f(:\n    y = torch.zeros(3, 4, dtype=torch.float64)\n    x = torch.ones(4, dtype=torch.int8)"
    assert canonical_order(code) == (code, [1, 2, 3])
    prints = fingerprints(code, given_runs([]))
    assert prints.lines(prints.unique) == (1, 2, 3)


# ------------------------------------------------------------------------------ reading a graded class


def _graded_folder(out: Path, answers: dict[tuple[str, str], dict[str, str] | bytes]) -> Path:
    """An output folder as grading leaves it, for the answers given: (student, notebook) -> the
    answer cells' sources by grade id, or the bytes of the file itself."""
    for (student, notebook), cells in answers.items():
        save_result(out, Result(student, notebook, 1.0, 2.0, "graded"), "")
        path = (
            out
            / "work"
            / "runs"
            / student
            / notebook
            / "submitted"
            / student
            / notebook
            / f"{notebook}.ipynb"
        )
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(cells, bytes):
            path.write_bytes(cells)
            continue
        nb = json.loads((NOTEBOOKS / notebook / f"{notebook}.ipynb").read_text())
        for cell in nb["cells"]:
            grade_id = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
            if grade_id in cells:
                cell["source"] = cells[grade_id]
        path.write_text(json.dumps(nb))
    return out


def _hostile_notebooks() -> dict[str, bytes]:
    cell = {"cell_type": "code", "metadata": {"nbgrader": {"grade_id": "rope_forward", "solution": True}}}
    return {
        "broken": b'{"cells": [',
        "not-an-object": b"[1, 2]",
        "cells-not-a-list": json.dumps({"cells": {"a": 1}}).encode(),
        "source-of-numbers": json.dumps({"cells": [{**cell, "source": [1, 2]}]}).encode(),
        "metadata-a-string": json.dumps({"cells": [{**cell, "metadata": "x", "source": "x = 1"}]}).encode(),
        "grade-id-a-list": json.dumps(
            {"cells": [{**cell, "metadata": {"nbgrader": {"grade_id": ["rope_forward"]}}, "source": "x"}]}
        ).encode(),
        "markdown-answer": json.dumps(
            {"cells": [{**cell, "cell_type": "markdown", "source": "x = 1"}]}
        ).encode(),
    }


def test_hostile_notebooks_give_no_answer_and_stop_nothing(tmp_path):
    rope = solution_sources("04_rope")["rope_forward"]
    answers = {(student, "04_rope"): data for student, data in _hostile_notebooks().items()}
    answers["ann", "04_rope"] = {"rope_forward": rope}
    answers["two-cells", "04_rope"] = json.dumps(
        {
            "cells": [
                {
                    "cell_type": "code",
                    "metadata": {"nbgrader": {"grade_id": "rope_forward"}},
                    "source": "first",
                },
                {
                    "cell_type": "code",
                    "metadata": {"nbgrader": {"grade_id": "rope_forward"}},
                    "source": "second",
                },
            ]
        }
    ).encode()
    read = class_answers(_graded_folder(tmp_path, answers))
    by_owner = {(a.owner, a.question): a.source for a in read}
    assert by_owner[("ann", "rope_forward")] == rope
    assert by_owner[("two-cells", "rope_forward")] == "first"  # the first cell of an id, as nbgrader takes it
    assert {owner for owner, _ in by_owner} == {"ann", "two-cells"}


def test_answers_are_the_answer_cells_only(tmp_path):
    notebook = perfect("04_rope")
    read = class_answers(_graded_folder(tmp_path, {("ann", "04_rope"): solution_sources("04_rope")}))
    assert (
        {a.question for a in read}
        == set(answer_cells("04_rope"))
        == {
            c.metadata.nbgrader["grade_id"]
            for c in notebook.cells
            if c.metadata.get("nbgrader", {}).get("solution")
        }
    )


def test_earlier_classes_and_published_files_are_compared(tmp_path):
    """A copy from last year's class and one from a file of published solutions, each named
    with where it comes from; the two earlier students' own likeness is not sought."""
    rope = solution_sources("04_rope")["rope_forward"]
    other = _other_rope_forward()
    rng = random.Random(1)
    earlier = _graded_folder(
        tmp_path / "2025",
        {("old", "04_rope"): {"rope_forward": other}, ("old2", "04_rope"): {"rope_forward": other}},
    )
    published = tmp_path / "published"
    (published / "deep").mkdir(parents=True)
    (published / "deep" / "rope.ipynb").write_text(json.dumps(perfect("04_rope")))
    (published / "junk.py").write_bytes(b"\xff\xfe\x00garbage")
    (published / "notes.txt").write_text(rope)  # not a .py or .ipynb: not read
    out = _graded_folder(
        tmp_path / "out",
        {
            ("ann", "04_rope"): {"rope_forward": disguise(rope, rng)},
            ("bob", "04_rope"): {"rope_forward": disguise(other, rng)},
            ("cy", "04_rope"): {},
        },
    )
    matches, notes = similar_answers(out, [earlier, published, out, tmp_path / "missing", earlier])
    found = {(m.a.owner, m.b.owner, m.b.origin) for m in matches}
    assert found == {
        ("ann", "deep/rope.ipynb", str(published)),
        ("bob", "old", str(earlier)),
        ("bob", "old2", str(earlier)),
    }
    assert notes == [f"--compare-with {tmp_path / 'missing'}: no longer a folder, not compared"]
    assert [s.owner for s in source_files(published, outside=out)] == ["deep/rope.ipynb", "junk.py"]


def _other_rope_forward() -> str:
    """A correct rope_forward written another way than the reference: one loop over both tensors."""
    stub = answer_cells("04_rope")["rope_forward"]
    return stub[: stub.index("        # YOUR CODE HERE")] + (
        "        rotation = self.rotation_matrix\n"
        "        outputs = []\n"
        "        for tensor in (queries, keys):\n"
        "            length = tensor.shape[-2]\n"
        "            halves = tensor.float().unflatten(-1, (-1, 2))\n"
        "            spun = torch.view_as_complex(halves.contiguous()) * rotation[:length]\n"
        "            outputs.append(torch.view_as_real(spun).flatten(-2).to(tensor.dtype))\n"
        "        return tuple(outputs)\n"
    )


# ------------------------------------------------------------------------------ the report and the CSV


def test_the_report_shows_each_pair_escaped_and_the_csv_defuses_formulas(tmp_path):
    hostile = Answer(f"=HYPERLINK({HOSTILE})", NOTEBOOK, "attention", "")
    answers, source, _, _ = planted_class(seed=0)
    answers = [
        Answer(hostile.owner, a.notebook, a.question, a.source + f"\n    # </pre>{HOSTILE}")
        if a.owner == "s0001"
        else a
        for a in answers
    ]
    matches = find_matches(answers, [source], CLASS_GIVEN)
    assert any(m.a.owner == hostile.owner or m.b.owner == hostile.owner for m in matches)
    rows = [Result(a.owner, NOTEBOOK, 1.0, 2.0, "graded") for a in answers if a.question == "softmax"]
    page = tmp_path / "report.html"
    write_class_report(page, rows, matches)
    text = page.read_text()
    assert HOSTILE not in text and "</pre><script" not in text
    assert html.escape(HOSTILE, quote=True) in text
    assert text.count("<details") == len(matches)
    assert "href='feedback/s0003/01_attention.html'" in text
    assert "published/solutions.py" in text
    write_csv(tmp_path / "similar.csv", matches)
    with (tmp_path / "similar.csv").open() as file:
        rows = list(csv.DictReader(file))
    assert len(rows) == len(matches)
    assert all(not value.startswith("=") for row in rows for value in row.values())
    copied = next(row for row in rows if row["other"] == "s0002")
    assert copied["student"].startswith("'=HYPERLINK") and copied["other_from"] == "this class"


def test_a_class_with_nothing_flagged_says_so(tmp_path):
    written, _ = generated_class(20, seed=5, copiers=0)
    page = tmp_path / "report.html"
    rows = [
        Result(w.answer.owner, NOTEBOOK, 1.0, 2.0, "graded")
        for w in written
        if w.answer.question == "softmax"
    ]
    write_class_report(page, rows, [])
    assert "No pair of answers was flagged." in page.read_text()


def test_the_stubs_left_out_are_the_ones_students_get():
    untouched = {
        c.metadata.nbgrader["grade_id"]: c.source
        for c in release("04_rope").cells
        if c.metadata.get("nbgrader", {}).get("solution")
    }
    assert answer_cells("04_rope") == untouched


def test_a_later_run_reads_the_answers_normalised_before_and_survives_a_broken_cache(tmp_path, monkeypatch):
    rope = solution_sources("04_rope")["rope_forward"]
    out = _graded_folder(
        tmp_path, {("ann", "04_rope"): {"rope_forward": rope}, ("bob", "04_rope"): {"rope_forward": rope}}
    )
    first, _ = similar_answers(out)
    cache = out / "work" / "similar_answers.json"
    assert len(json.loads(cache.read_text())["answers"]) == 1  # one answer, twice
    normalised = []
    with monkeypatch.context() as patched:  # the answer is read from the cache, not normalised again
        patched.setattr(
            "grader.similarity.fingerprints.canonical_order",
            lambda code: normalised.append(code) or canonical_order(code),
        )
        assert similar_answers(out)[0] == first
    assert normalised and rope not in normalised  # only the notebook's given cells
    cached = json.loads(cache.read_text())
    for broken in (
        "{",
        "[]",
        json.dumps({**cached, "version": "an older one"}),
        json.dumps({**cached, "answers": {key: [[0, 2], "x"] for key in cached["answers"]}}),
    ):
        cache.write_text(broken)
        assert similar_answers(out)[0] == first
    assert [(m.a.owner, m.b.owner) for m in first] == [("ann", "bob")]


def test_answers_built_to_break_the_reader_are_compared_as_written():
    """Nesting past Python's stack, a thousand independent statements, a megabyte of code: each
    is read as written (or cut), in seconds, and costs no other answer its match."""
    deep = "x = " + "a." * 5000 + "b\n" + "y = " + "(" * 150 + "1" + ")" * 150
    many = "\n".join(f"v{i} = torch.zeros({i})" for i in range(1000))
    assert canonical_order(deep)[1] == [1, 2]
    assert canonical_order(many)[1] == list(range(1, 1001))
    answers, source, copies, _ = planted_class(seed=0)
    answers += [
        Answer("deep", NOTEBOOK, "heads", deep),
        Answer("many", NOTEBOOK, "heads", many),
        Answer("huge", NOTEBOOK, "heads", "z = 1\n" * 200_000),
    ]
    assert _found(find_matches(answers, [source], CLASS_GIVEN)) == copies


# ------------------------------------------------------------------------------ what a copier may try


def _disguises(code: str) -> dict[str, str]:
    """An exact copy of `code` changed in ways that change nothing a fingerprint reads."""
    lines = code.split("\n")
    body = next(i for i, line in enumerate(lines) if "super().__init__()" in line) + 1
    attributes = sorted(set(re.findall(r"(?<=self\.)\w+", code)) - {"__init__"})
    builtins = dict(
        zip(attributes, ["len", "id", "hash", "iter", "next", "vars", "type", "map", "zip"], strict=False)
    )
    return {
        "self renamed": re.sub(r"\bself\b", "me", code),
        "attributes named as built-ins": re.sub(
            r"(?<=self\.)(\w+)\b", lambda m: builtins.get(m.group(1), m.group(1)), code
        ),
        "a magic line": "\n".join([*lines[:body], "        %time 0", *lines[body:]]),
        "a long comment first": "#" * 60_000 + "\n" + code,
        "strings' text changed": re.sub(r"'([^'\n]*)'", lambda m: f"'{m.group(1)[::-1]}x'", code),
    }


@pytest.mark.parametrize("disguise_name", list(_disguises(GIVEN["heads"])))
def test_cheap_disguises_of_a_copy_hide_nothing(disguise_name):
    answers, source, copies, _ = planted_class(seed=0)
    victim = next(a for a in answers if (a.owner, a.question) == ("s0004", "heads"))
    code = _disguises(victim.source)[disguise_name]
    answers = [
        Answer("s0003", NOTEBOOK, "heads", code) if (a.owner, a.question) == ("s0003", "heads") else a
        for a in answers
    ]
    assert ("heads", "s0003", "s0004") in _found(find_matches(answers, [source], CLASS_GIVEN))


def test_the_pairs_are_the_same_in_every_process():
    """Python salts its string hash per process; the fingerprints do not use it."""
    script = (
        "from tests.helpers.similar_class import planted_class, GIVEN, GIVEN_CELL, NOTEBOOK\n"
        "from grader.similarity.matching import find_matches\n"
        "answers, source, _, _ = planted_class(seed=0)\n"
        "for m in find_matches(answers, [source], {NOTEBOOK: [GIVEN_CELL, *GIVEN.values()]}):\n"
        "    print(m.question, m.a.owner, m.b.owner, m.share, m.evidence, m.lines_a)\n"
    )
    runs = {
        subprocess.run(
            [sys.executable, "-c", script],
            env={**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(REPO)},
            capture_output=True,
            text=True,
            check=True,
            cwd=REPO,
        ).stdout
        for seed in ("1", "2")
    }
    assert len(runs) == 1 and runs.pop().count("\n") == 5


def test_unprintable_characters_of_an_answer_are_shown_as_escapes(tmp_path):
    answers, source, _, _ = planted_class(seed=0)
    odd = "    # \u202e reversed \ud800 \x1b[31m"
    answers = [
        Answer(a.owner, a.notebook, a.question, a.source + "\n" + odd)
        if (a.owner, a.question) in {("s0001", "attention"), ("s0002", "attention")}
        else a
        for a in answers
    ]
    matches = find_matches(answers, [source], CLASS_GIVEN)
    assert any(m.a.owner == "s0001" and m.b.owner == "s0002" for m in matches)
    page = tmp_path / "report.html"
    write_class_report(page, [Result("s0001", NOTEBOOK, 1.0, 2.0, "graded")], matches)
    text = page.read_text(encoding="utf-8")
    assert "\\u202e reversed \\ud800 \\x1b[31m" in text
    assert not set(text) & {"\u202e", "\x1b"}


def test_folders_given_to_compare_with_that_cannot_be_read_stop_nothing(tmp_path):
    out = _graded_folder(tmp_path / "out", {("ann", "04_rope"): {"rope_forward": _other_rope_forward()}})
    junk = tmp_path / "downloaded"
    (junk / "work" / "results" / "x").mkdir(parents=True)  # looks like an output folder, is not one
    (junk / "work" / "results" / "x" / "04_rope.json").write_text('{"status": ["graded"]}')
    (junk / "work" / "results" / "x" / "01_attention.json").write_text("not json")
    unreadable = tmp_path / "unreadable"
    unreadable.mkdir()
    (unreadable / "mem.py").symlink_to("/proc/self/mem")  # a file whose reading fails, even as root
    matches, notes = similar_answers(out, [junk, unreadable, tmp_path])  # tmp_path holds OUT itself
    assert matches == [] and notes == []


def test_a_report_whose_answers_could_not_be_compared_says_why(tmp_path):
    page = tmp_path / "report.html"
    rows = [Result("ann", NOTEBOOK, 1.0, 2.0, "graded")]
    write_class_report(page, rows, [], f"the answers could not be compared (ValueError: {HOSTILE})")
    text = page.read_text()
    assert "Not compared: the answers could not be compared (ValueError: &lt;script&gt;" in text
    assert "No pair of answers was flagged" not in text
