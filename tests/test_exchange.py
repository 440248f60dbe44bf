"""The channel from a grading kernel to the judge: only well-formed data gets through."""

import os
import pickle
import subprocess
import zipfile

import pytest
import torch

from autograder import api, exchange
from autograder.api import check, make_cases
from autograder.cells import check_calls

from .submissions import solution_sources


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
    cases = make_cases("07.rmsnorm", hidden=True, seed=5)
    exchange.write_cases(folder, "07.rmsnorm", True, cases)
    monkeypatch.setenv(exchange.ENV, str(folder))
    monkeypatch.setattr(api, "live_expectations", None)  # any judging would fail loudly
    check("07.rmsnorm", namespace["RMSNorm"], hidden=True)
    assert capsys.readouterr().out == ""
    results = exchange.read_results(folder, "07.rmsnorm", True, len(cases))
    monkeypatch.undo()
    assert api.judge_results("07.rmsnorm", cases, results, hidden=True).passed


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
    exchange.prepare(folder)
    assert list((folder / "results").iterdir()) == []
    assert target.read_text() == "keep" and target.stat().st_mode & 0o777 == 0o644
