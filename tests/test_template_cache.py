"""The nbgrader template a batch grades in: generated once per version of the solutions and kept in
the user's cache, so that a second batch starts without the 8 s of generating it."""

import os

import pytest

from grader.notebook import autograde
from grader.notebook.autograde import TEMPLATES_KEPT, prepare_template, template_cache


@pytest.fixture
def generated(tmp_path, monkeypatch):
    """nbgrader's generation stood in for (it takes 8 s): the configs it was called with."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    calls = []

    def generate(config, chosen=None):
        root = config.CourseDirectory.root
        calls.append(root)
        with open(os.path.join(root, "gradebook.db"), "w") as db:
            db.write(f"gradebook {len(calls)}")

    monkeypatch.setattr(autograde, "generate_all", generate)
    return calls


def test_a_second_batch_copies_the_template_the_first_generated(tmp_path, generated):
    first = prepare_template(tmp_path / "one" / "work")
    second = prepare_template(tmp_path / "two" / "work")
    assert len(generated) == 1
    assert (first / "gradebook.db").read_text() == (second / "gradebook.db").read_text() == "gradebook 1"
    assert (second / "source" / "07_rmsnorm" / "07_rmsnorm.ipynb").exists()
    assert not (tmp_path / "two" / "work" / "template.partial").exists()
    assert [p.name for p in template_cache().iterdir() if p.name.startswith("partial-")] == []


def test_other_solutions_get_a_template_of_their_own_and_an_output_folder_keeps_its_own(
    tmp_path, generated, monkeypatch
):
    prepare_template(tmp_path / "one" / "work")
    monkeypatch.setattr(autograde, "solutions_fingerprint", lambda: "changed")
    with pytest.raises(SystemExit, match="solutions/ changed since"):
        prepare_template(tmp_path / "one" / "work")  # graded with the old ones: never mixed
    again = prepare_template(tmp_path / "two" / "work")
    assert len(generated) == 2 and (again / "solutions_sha256").read_text() == "changed"


def test_without_a_cache_to_write_the_batch_generates_its_own(tmp_path, generated, monkeypatch):
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocked))
    template = prepare_template(tmp_path / "one" / "work")
    assert (template / "gradebook.db").read_text() == "gradebook 1" and len(generated) == 1


def test_a_template_another_batch_stored_meanwhile_is_used_and_this_ones_dropped(
    tmp_path, generated, monkeypatch
):
    prepare_template(tmp_path / "one" / "work")
    entry = next(template_cache().iterdir())
    elsewhere = entry.rename(tmp_path / "the other batch's")
    generate = autograde.generate_all

    def generate_while_the_other_batch_finishes(config, chosen=None):
        generate(config, chosen)
        elsewhere.rename(entry)

    monkeypatch.setattr(autograde, "generate_all", generate_while_the_other_batch_finishes)
    second = prepare_template(tmp_path / "two" / "work")
    assert (second / "gradebook.db").read_text() == "gradebook 1"  # the other batch's, not "gradebook 2"
    assert [p.name for p in template_cache().iterdir()] == [entry.name]


def test_only_the_templates_used_last_are_kept(tmp_path, generated, monkeypatch):
    for n in range(TEMPLATES_KEPT + 2):
        monkeypatch.setattr(autograde, "solutions_fingerprint", lambda n=n: f"version {n}")
        prepare_template(tmp_path / str(n) / "work")
    kept = [(p / "solutions_sha256").read_text() for p in template_cache().iterdir()]
    assert sorted(kept) == [f"version {n}" for n in range(2, TEMPLATES_KEPT + 2)]
