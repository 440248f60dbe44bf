"""The channel from a grading kernel to the judge: only well-formed data gets through."""

import linecache
import os
import pickle
import subprocess
import threading
import zipfile

import pytest
import torch

from autograder import api, exchange
from autograder.api import check, make_cases
from autograder.cells import check_calls, grade_id
from autograder.checks import CHECKS
from autograder.core import STUB, judge

from .helpers.submissions import release, solution_sources


@pytest.fixture
def folder(tmp_path):
    exchange.prepare(tmp_path)
    return tmp_path


def _write(folder, data, name="07.rmsnorm"):
    torch.save(data, folder / "results" / f"{name}.pt")


def test_results_round_trip(folder):
    results = [{"y": torch.ones(2)}, "ValueError: bad (in your code: `x`)"]
    _write(folder, results)
    back = exchange.read_results(folder, "07.rmsnorm", False, 2)
    assert torch.equal(back[0]["y"], torch.ones(2)) and back[1] == results[1]


def test_missing_results_are_none(folder):
    assert exchange.read_results(folder, "07.rmsnorm", True, 3) is None


@pytest.mark.parametrize(
    "data, problem",
    [
        ([{"y": torch.ones(2)}], "expected a list of 2 results"),
        ({"y": torch.ones(2)}, "expected a list of 2 results"),
        ([{"y": torch.ones(2)}, {"y": [1.0, 2.0]}], "neither a dict of tensors"),
        ([{"y": torch.ones(2)}, 3.5], "neither a dict of tensors"),
        ([{"y": torch.ones(2)}, {"y": torch.ones(2).to_sparse()}], "neither a dict of tensors"),
        ([{"y": torch.ones(2)}, {"y": torch.empty(2, device="meta")}], "neither a dict of tensors"),
        (
            [{"y": torch.ones(2)}, {"y": torch.quantize_per_tensor(torch.ones(2), 0.1, 0, torch.qint8)}],
            "neither a dict of tensors",
        ),
    ],
)
def test_malformed_results_are_refused(folder, data, problem):
    _write(folder, data)
    with pytest.raises(exchange.MalformedResults, match=problem):
        exchange.read_results(folder, "07.rmsnorm", False, 2)


class Payload:
    def __reduce__(self):  # what unpickling it would run
        return (print, ("owned",))


def test_pickled_objects_are_never_loaded(folder, capsys):
    (folder / "results" / "07.rmsnorm.pt").write_bytes(pickle.dumps([Payload(), Payload()]))
    with pytest.raises(exchange.MalformedResults, match="not what torch.save writes"):
        exchange.read_results(folder, "07.rmsnorm", False, 2)
    _write(folder, [Payload(), Payload()])  # the same objects inside torch.save's zip
    with pytest.raises(exchange.MalformedResults, match="cannot be read as data"):
        exchange.read_results(folder, "07.rmsnorm", False, 2)
    assert "owned" not in capsys.readouterr().out


def test_stretched_and_compressed_tensors_are_refused(folder):
    _write(folder, [{"y": torch.zeros(1).expand(60000, 60000)}])  # 4 bytes stored, 3.6e9 claimed
    with pytest.raises(exchange.MalformedResults, match="more than"):
        exchange.read_results(folder, "07.rmsnorm", False, 1)
    path = folder / "results" / "07.rmsnorm.pt"
    _write(folder, [{"y": torch.zeros(1000)}])
    with zipfile.ZipFile(path) as stored:
        entries = [(info.filename, stored.read(info)) for info in stored.infolist()]
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as squeezed:
        for name, data in entries:
            squeezed.writestr(name, data)
    with pytest.raises(exchange.MalformedResults, match="compressed"):
        exchange.read_results(folder, "07.rmsnorm", False, 1)


def test_the_numbers_of_a_file_are_bounded_before_any_is_materialised(folder):
    """Many outputs per case, each a zero-stride view just under the old per-tensor cap, claimed
    7.4 GB from a 3.5 kB file: the sum per case and per file is what counts."""
    stretched = torch.zeros(1).expand(2**24 - 1)
    _write(folder, [{f"y{i}": stretched for i in range(40)}])
    with pytest.raises(exchange.MalformedResults, match="more than 64 outputs|numbers"):
        exchange.read_results(folder, "07.rmsnorm", False, 1)
    assert (folder / "results" / "07.rmsnorm.pt").stat().st_size < 20_000
    case = {"y": torch.zeros(1).expand(exchange.MAX_CASE_ELEMENTS)}  # at the per-case cap
    _write(folder, [case] * 3)
    with pytest.raises(exchange.MalformedResults, match=f"more than {exchange.MAX_FILE_ELEMENTS} numbers"):
        exchange.read_results(folder, "07.rmsnorm", False, 3)
    _write(folder, [{f"y{i}": torch.zeros(1) for i in range(65)}])
    with pytest.raises(exchange.MalformedResults, match="more than 64 outputs"):
        exchange.read_results(folder, "07.rmsnorm", False, 1)


def test_an_outsized_structure_is_refused_before_loading(folder):
    _write(folder, [{"y": torch.zeros(1)}, "x" * (2 * exchange.MAX_PICKLE_BYTES)])
    with pytest.raises(exchange.MalformedResults, match="structure of the results is larger"):
        exchange.read_results(folder, "07.rmsnorm", False, 2)
    _write(folder, [{f"y{i}": torch.zeros(1) for i in range(60)} for _ in range(70)])  # 4200 storages
    with pytest.raises(exchange.MalformedResults, match="more than 4096 entries"):
        exchange.read_results(folder, "07.rmsnorm", False, 70)


def test_an_archive_member_whose_name_does_not_decode_fails_only_that_check(folder):
    path = folder / "results" / "07.rmsnorm.pt"
    _write(folder, [{"y": torch.ones(2)}])
    raw = bytearray(path.read_bytes())
    name = next(info.filename for info in zipfile.ZipFile(path).infolist()).encode()
    raw = raw.replace(name, b"\xff\xfe" + name[2:])  # local header and central directory alike
    central = raw.find(b"PK\x01\x02")
    raw[central + 8 : central + 10] = (0x800).to_bytes(2, "little")  # flag: the name is UTF-8
    path.write_bytes(bytes(raw))
    with pytest.raises(exchange.MalformedResults, match="not what torch.save writes"):
        exchange.read_results(folder, "07.rmsnorm", False, 1)


def test_results_are_materialised(folder):
    _write(folder, [{"y": torch.arange(6.0).reshape(2, 3).t()}])
    (result,) = exchange.read_results(folder, "07.rmsnorm", False, 1)
    assert result["y"].is_contiguous() and result["y"].tolist() == [[0, 3], [1, 4], [2, 5]]


def test_long_error_texts_are_cut(folder):
    _write(folder, ["E" * 10**6])
    assert len(exchange.read_results(folder, "07.rmsnorm", False, 1)[0]) == exchange.MAX_ERROR_CHARS


def test_oversized_results_are_refused(folder, monkeypatch):
    monkeypatch.setattr(exchange, "MAX_RESULT_BYTES", 100)
    _write(folder, [{"y": torch.ones(1000)}])
    with pytest.raises(exchange.MalformedResults, match="larger than"):
        exchange.read_results(folder, "07.rmsnorm", False, 1)


def test_in_a_grading_kernel_check_runs_stage_two_only(folder, monkeypatch, capsys):
    """check() reads the grader's cases, writes outputs and judges nothing (no reference needed)."""
    namespace = {"torch": torch, "nn": torch.nn}
    exec(solution_sources("07_rmsnorm")["rmsnorm"], namespace)
    drawn = api.Drawn("07.rmsnorm", True, make_cases("07.rmsnorm", hidden=True, seed=5))
    exchange.write_cases(folder, "07.rmsnorm", True, drawn.cases)
    monkeypatch.setenv(exchange.ENV, str(folder))
    monkeypatch.setattr(api, "live_expectations", None)  # any judging would fail loudly
    check("07.rmsnorm", namespace["RMSNorm"], hidden=True)
    assert capsys.readouterr().out == ""
    results = exchange.read_results(folder, "07.rmsnorm", True, len(drawn.cases))
    monkeypatch.undo()
    assert api.judge_results(drawn, results).passed


def test_a_worker_judges_a_class_on_one_draw_working_out_the_expectations_once(monkeypatch):
    """Every notebook of a batch is judged on the same cases: the reference runs once per check
    and the mistakes once, when a first answer is wrong; an answer that writes into its inputs
    leaves them as drawn for the next."""
    namespace = {"torch": torch, "nn": torch.nn}
    exec(solution_sources("07_rmsnorm")["rmsnorm"], namespace)
    right = namespace["RMSNorm"]

    class Scribbles(right):
        def forward(self, x):
            return x.mul_(2)  # wrong, and changes its input in place

    worked_out = []
    live = api.live_expectations
    monkeypatch.setattr(api, "live_expectations", lambda *a, **k: worked_out.append(k) or live(*a, **k))
    judged = []
    for answer in (right, Scribbles, right, Scribbles, right):
        drawn = api.draw("07.rmsnorm", hidden=True, seed=20261128)
        judged.append(
            api.judge_results(drawn, api.run_stage(CHECKS["07.rmsnorm"], answer, drawn.cases)).passed
        )
    assert judged == [True, False, True, False, True]
    assert worked_out == [{"with_mistakes": False}, {}]
    assert all(
        torch.equal(a.inputs["x"], b.inputs["x"])
        for a, b in zip(drawn.cases, make_cases("07.rmsnorm", hidden=True, seed=20261128), strict=True)
    )


def test_an_unfilled_stub_is_judged_without_running_the_mistakes(monkeypatch):
    """No known mistake looks like a stub's `raise`: the verdict of an untouched notebook's answer
    is the same without them, and they are not worked out for it."""
    source = "\n".join(c.source for c in release("07_rmsnorm").cells if grade_id(c) in ("imports", "rmsnorm"))
    cell = "<ipython-input-1>"  # where a kernel's traceback says the stub's line is
    monkeypatch.setitem(linecache.cache, cell, (len(source), None, source.splitlines(True), cell))
    namespace = {}
    exec(compile(source, cell, "exec"), namespace)
    drawn = api.draw("07.rmsnorm", hidden=True, seed=20261129)
    results = api.run_stage(CHECKS["07.rmsnorm"], namespace["RMSNorm"], drawn.cases)
    assert all(result.endswith(STUB) for result in results), results[0]
    worked_out = []
    live = api.live_expectations
    monkeypatch.setattr(api, "live_expectations", lambda *a, **k: worked_out.append(k) or live(*a, **k))
    verdict = api.judge_results(drawn, results)
    assert worked_out == [{"with_mistakes": False}]
    diagnosed = judge(CHECKS["07.rmsnorm"], drawn.cases, results, *drawn.with_mistakes)
    assert verdict == diagnosed.worth(CHECKS["07.rmsnorm"].hidden_points) and not verdict.passed


@pytest.mark.parametrize("name", CHECKS)
def test_a_kernel_gets_each_case_as_the_grader_made_it_but_for_what_only_the_judge_sees(folder, name):
    """A run stage may answer a part of a question (its concern) with outputs of its own: the
    kernel must see the concern. The judge-only inputs stay behind."""
    cases = make_cases(name, hidden=True, seed=3)
    exchange.write_cases(folder, name, True, cases)
    back = exchange.read_cases(folder, name, True)
    assert [(c.name, c.concern, sorted(c.inputs)) for c in back] == [
        (c.name, c.concern, sorted(c.inputs)) for c in cases
    ]
    assert all(not c.judge_only for c in back)


def test_prepare_removes_what_an_earlier_cell_left(folder):
    _write(folder, [{"y": torch.ones(1)}])
    exchange.prepare(folder)
    assert exchange.read_results(folder, "07.rmsnorm", False, 1) is None


def test_grading_seeds_differ_by_batch_cell_and_from_the_visible_seed():
    seeds = {api.grading_seed(b, "07.rmsnorm", h) for b in (1, 2) for h in (False, True)}
    assert len(seeds) == 4 and api.VISIBLE_SEED not in seeds
    assert api.grading_seed(1, "07.rmsnorm", True) == api.grading_seed(1, "07.rmsnorm", True)


def test_check_calls_are_read_from_the_test_source():
    source = '# comment\ncheck("04.rope_forward", RoPE)\ncheck("04.rope_forward", RoPE, hidden=True)\n'
    assert check_calls(source) == [("04.rope_forward", False), ("04.rope_forward", True)]
    assert check_calls("x = 1") == []
    with pytest.raises(ValueError):
        check_calls("check(name, RoPE)")
    with pytest.raises(ValueError):
        check_calls('check("04.rope_forward", RoPE, hidden=flag)')


def test_links_fifos_and_folders_in_results_are_never_followed(folder, tmp_path_factory):
    secret = tmp_path_factory.mktemp("outside") / "secret.pt"
    torch.save([{"y": torch.ones(1)}], secret)
    (folder / "results" / "07.rmsnorm.pt").symlink_to(secret)
    os.mkfifo(folder / "results" / "07.rmsnorm.hidden.pt")
    (folder / "results" / "07.rmsnorm_norm.pt").mkdir()
    (folder / "results" / "07.rmsnorm_norm.pt" / "inner").symlink_to(secret)
    for name, hidden in (("07.rmsnorm", False), ("07.rmsnorm", True), ("07.rmsnorm_norm", False)):
        with pytest.raises(exchange.MalformedResults, match="not a plain file"):
            exchange.read_results(folder, name, hidden, 1)
    exchange.prepare(folder)
    assert list((folder / "results").iterdir()) == [] and secret.exists()


def test_what_a_kernel_leaves_is_removed_without_touching_link_targets(folder, tmp_path_factory):
    target = tmp_path_factory.mktemp("outside") / "keep.txt"
    target.write_text("keep")
    target.chmod(0o644)
    locked = folder / "results" / "locked"
    locked.mkdir()
    (locked / "link").symlink_to(target)
    locked.chmod(0o500)
    deep = folder / "results" / ("d/" * 1200)  # deeper than Python's recursion limit
    subprocess.run(["mkdir", "-p", str(deep)], check=True)
    (deep / "unreadable").mkdir()
    (deep / "unreadable").chmod(0)
    exchange.prepare(folder)  # while the kernel runs: one pass, the top of the tree
    assert not (folder / "results" / "locked").exists()
    exchange.remove_tree(folder / "results")  # once it is gone: all of it
    assert not (folder / "results").exists()
    assert target.read_text() == "keep" and target.stat().st_mode & 0o777 == 0o644


def test_a_kernel_swapping_folders_and_links_during_the_clean_up_changes_nothing_outside(
    folder, tmp_path_factory
):
    """The race of a red team: a kernel's thread swaps a folder and a symlink to a folder outside
    while the grader cleans up; `chmod -R` on the name followed the link, as root."""
    outside = tmp_path_factory.mktemp("outside")
    (outside / "keep.txt").write_text("keep")
    outside.chmod(0o550)  # what `chmod u+rwX` through a link would change
    results = folder / "results"
    stop = threading.Event()

    def swap():
        while not stop.is_set():
            for name in ("a", "b"):
                try:
                    (results / name).mkdir()
                    (results / name / "inner").mkdir()
                    os.rename(results / name, results / f"{name}.old")
                    os.symlink(outside, results / name)
                except OSError:
                    pass

    swapper = threading.Thread(target=swap)
    swapper.start()
    try:
        for _ in range(200):
            try:
                exchange.prepare(folder)
            except OSError:
                pass  # a folder that keeps refilling may stay: never a reason to touch what is outside
    finally:
        stop.set()
        swapper.join()
    exchange.remove_tree(results)
    assert not results.exists()
    assert outside.stat().st_mode & 0o777 == 0o550 and (outside / "keep.txt").read_text() == "keep"
