"""The documents hold together: every relative link and anchor resolves, every section that a
command's help, a message or a comment names is a heading of the file it names, and the README
stays an entry page. Anchors are GitHub's, since the documents are read there."""

import ast
import contextlib
import io
import re
from functools import cache
from pathlib import Path

import pytest

from grader import cli

REPO = Path(__file__).resolve().parents[1]
README_MAX_LINES = 70  # one screen: what the course is, the two commands, one command per role, links
POINTS_START = "<!-- points table: written by `course build`, do not edit -->"
POINTS_END = "<!-- end of points table -->"

# A reference in prose: a file of the course, then the section it names, quoted
# ('docs/instructors.md, "Hand grading"', 'README, "Two commands" and "Notebooks"', 'README ("Notebooks")'),
# or, in older strings, bare up to a closing bracket or a semicolon ('README, Instructors)').
DOCUMENT = r"(?<![\w/.-])(?P<file>benchmarks/README\.md|docs/[\w-]+\.md|README(?:\.md)?|CHANGELOG\.md)"
QUOTED = r"""["'][^"'()]+["']"""
SECTIONS = rf"(?P<sections>{QUOTED}(?:\s*(?:,|and)\s*{QUOTED})*)"
REFERENCE = re.compile(
    rf"{DOCUMENT}(?:(?:,\s*|\s*\(\s*){SECTIONS}|,\s*(?P<bare>[A-Za-z][\w -]{{0,60}}?)\s*[);])?"
)
CROSS_REFERENCE = re.compile(r"""\bsee "[^"]+"|"[^"]+" (?:below|above)\b""")
LINK = re.compile(r"\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")


# ------------------------------------------------------------------------------ Markdown


def without_code(text: str) -> str:
    """The text with fenced blocks blanked (lines kept, for line numbers) and inline code removed:
    what is in code is not a link, a heading or a cross-reference."""
    lines, fence = [], None
    for line in text.splitlines():
        marker = re.match(r"\s*(`{3,}|~{3,})", line)
        if fence is None and marker:
            fence = marker.group(1)[0] * len(marker.group(1))
            lines.append("")
        elif fence is not None:
            if line.strip().startswith(fence):
                fence = None
            lines.append("")
        else:
            lines.append(re.sub(r"(`+)(?:(?!\1).)+?\1", "", line))
    return "\n".join(lines)


def anchor(heading: str) -> str:
    """GitHub's anchor for a heading: its text as shown, lower case, punctuation dropped (letters,
    digits, `_` and `-` kept), spaces turned to hyphens."""
    shown = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link shows its text
    shown = re.sub(r"[`*]|<[^>]+>", "", shown)
    return re.sub(r"[^\w\- ]", "", shown.strip().lower()).replace(" ", "-")


@cache
def anchors(path: Path) -> frozenset[str]:
    """Every heading's anchor in a Markdown file; a repeated one gets -1, -2, ... as on GitHub."""
    seen: dict[str, int] = {}
    found = set()
    for line in without_code(path.read_text(encoding="utf-8")).splitlines():
        heading = re.match(r" {0,3}#{1,6}\s+(.*?)\s*#*\s*$", line)
        if heading:
            slug = anchor(heading.group(1))
            found.add(f"{slug}-{seen[slug]}" if slug in seen else slug)
            seen[slug] = seen.get(slug, 0) + 1
    return frozenset(found)


def newest_changelog_section() -> str:
    text = (REPO / "CHANGELOG.md").read_text(encoding="utf-8")
    sections = re.split(r"(?m)^(?=## )", text)
    return sections[1]


def documents() -> dict[str, str]:
    """The Markdown a reader follows links in, by path: the README, docs/, the benchmarks' README and
    the newest section of the CHANGELOG (older sections are history, with the links of their day)."""
    paths = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), REPO / "benchmarks" / "README.md"]
    texts = {str(p.relative_to(REPO)): p.read_text(encoding="utf-8") for p in paths}
    texts["CHANGELOG.md"] = newest_changelog_section()
    return texts


def broken_links(name: str, text: str) -> list[str]:
    """Where a relative link of a document leads nowhere: a missing file, or an anchor that is no
    heading of its file."""
    here = (REPO / name).parent
    text = without_code(text)
    broken = []
    for link in LINK.finditer(text):  # a link's text may run over a line break
        target, number = link.group(1), text.count("\n", 0, link.start()) + 1
        if re.match(r"[a-z][a-z0-9+.-]*:", target, re.I):  # https:, mailto:
            continue
        path, _, fragment = target.partition("#")
        file = (here / path).resolve() if path else REPO / name
        if not file.exists():
            broken.append(f"{name}:{number}: {target}: no file {file.relative_to(REPO)}")
        elif fragment and file.suffix != ".md":
            broken.append(f"{name}:{number}: {target}: an anchor into a file that is not Markdown")
        elif fragment and fragment not in anchors(file):
            broken.append(
                f"{name}:{number}: {target}: no heading of {file.relative_to(REPO)} has #{fragment}"
            )
    return broken


def unresolved(where: str, text: str, section_required: bool = False, bare_files: bool = True) -> list[str]:
    """The references in `text` to a file that does not exist, or to a section that is no heading of
    it. With `section_required`, a reference to the README must name its section: the README is an
    entry page, and "see the README" says nothing. Without `bare_files`, a file named without a
    section is not looked for (a test's fixture, made where the test runs)."""
    text = " ".join(text.split())
    wrong = []
    for found in REFERENCE.finditer(text):
        name = found["file"] if found["file"].endswith(".md") else "README.md"
        path = REPO / name
        names_section = bool(found["sections"] or found["bare"])
        if not path.exists() and (names_section or bare_files):
            wrong.append(f"{where}: {found[0]!r}: there is no {name}")
            continue
        if found["sections"]:
            sections = [s.strip("\"'") for s in re.findall(QUOTED, found["sections"])]
        elif found["bare"]:
            sections = [found["bare"]]
        else:
            if section_required and name == "README.md":
                wrong.append(f"{where}: {found[0]!r} names no section: name the document and its heading")
            continue
        for section in sections:
            if anchor(section) not in anchors(path):
                wrong.append(f"{where}: {found[0]!r}: {name} has no heading {section!r}")
    return wrong


# ------------------------------------------------------------------------------ what names sections


def help_texts(monkeypatch) -> dict[str, str]:
    """`course --help` and each subcommand's, from the parser in this process."""
    monkeypatch.setenv("COLUMNS", "1000")  # one line per option: a reference is never split

    def shown(argv: list[str]) -> str:
        out = io.StringIO()
        with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
            cli.main(argv)
        return out.getvalue()

    top = shown(["--help"])
    commands = re.search(r"\{([\w,-]+)\}", top).group(1).split(",")
    assert {"grade", "check", "progress"} <= set(commands), top
    return {"course --help": top} | {f"course {c} --help": shown([c, "--help"]) for c in commands}


def python_strings(path: Path) -> str:
    """Every string constant of a module, docstrings and f-strings' text included, one per line;
    adjacent literals arrive joined, as Python joins them."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return "\n".join(
        n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
    )


def sources_naming_sections() -> dict[str, str]:
    """What else names a document's section: the package's messages and docstrings, the tests'
    messages, and the comments of the Makefile, pyproject.toml and CI."""
    modules = [p for package in ("autograder", "grader") for p in sorted((REPO / package).rglob("*.py"))]
    modules += sorted((REPO / "tests").glob("*.py"))
    texts = {str(p.relative_to(REPO)): python_strings(p) for p in modules if p.name != "test_docs.py"}
    for name in ("Makefile", "pyproject.toml", ".ci/run"):
        texts[name] = (REPO / name).read_text(encoding="utf-8")
    return texts


# ------------------------------------------------------------------------------ the tests


@pytest.mark.parametrize("name", sorted(documents()))
def test_every_relative_link_leads_to_a_file_and_a_heading(name):
    broken = broken_links(name, documents()[name])
    assert not broken, "links that lead nowhere:\n" + "\n".join(broken)


def test_every_section_a_commands_help_names_exists(monkeypatch):
    wrong = [
        line for where, text in help_texts(monkeypatch).items() for line in unresolved(where, text, True)
    ]
    assert not wrong, "help that names a section no document has:\n" + "\n".join(wrong)


def test_every_section_a_message_or_comment_names_exists():
    wrong = [
        line
        for where, text in sources_naming_sections().items()
        for line in unresolved(where, text, bare_files=not where.startswith("tests/"))
    ]
    assert not wrong, "strings and comments that name a section no document has:\n" + "\n".join(wrong)


@pytest.mark.parametrize("name", sorted(documents()))
def test_documents_refer_to_sections_by_links(name):
    text = without_code(documents()[name])
    plain = unresolved(name, text) + [
        f"{name}: {m[0]!r}: make it a link, [X](#x) or [X](file.md#x)" for m in CROSS_REFERENCE.finditer(text)
    ]
    assert not plain, "cross-references a reader cannot follow:\n" + "\n".join(plain)


def test_the_readme_is_an_entry_page():
    lines = (REPO / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, (
        f"README.md has {len(lines)} lines, expected at most {README_MAX_LINES}: move what is for one "
        "reader to docs/students.md, docs/instructors.md or docs/design.md, and figures to benchmarks/"
    )
    readme = "\n".join(lines)
    assert "make lab" in readme and "\nmake test " in readme, "CI and newcomers read these two commands there"


def test_the_points_table_has_its_place_in_the_students_page():
    """`course build` writes the table between these markers (its build check finds a hand-edited
    one stale): each must be alone on its line, once, the start above the end."""
    lines = (REPO / "docs" / "students.md").read_text(encoding="utf-8").splitlines()
    assert lines.count(POINTS_START) == 1 and lines.count(POINTS_END) == 1, (
        f"docs/students.md needs each marker once, alone on its line: {POINTS_START!r}, {POINTS_END!r}"
    )
    assert lines.index(POINTS_START) < lines.index(POINTS_END), "the start marker comes first"


def test_anchors_are_githubs():
    assert anchor('Canvas: "Download Submissions"') == "canvas-download-submissions"
    assert anchor("OUT/intake.csv") == "outintakecsv"
    assert anchor("All flags of `course grade`") == "all-flags-of-course-grade"
    assert anchor("00.spirals: the accuracy threshold, from 1000 seeds") == (
        "00spirals-the-accuracy-threshold-from-1000-seeds"
    )
    assert anchor("On the student's side") == "on-the-students-side"
    assert anchor("Self-study: hints and solutions") == "self-study-hints-and-solutions"


def test_each_check_here_can_fail():
    """The checkers above find what they are for: a broken link, a missing anchor, a section that
    does not exist, a README named without a section, a quoted cross-reference."""
    assert broken_links("README.md", "[x](docs/nowhere.md)")
    assert broken_links("README.md", "[x](docs/instructors.md#nowhere)")
    assert broken_links("docs/students.md", "[x](#nowhere)")
    assert not broken_links("docs/students.md", "[x](#how-points-are-given) `[y](#nowhere)`")
    assert broken_links("docs/students.md", "a [link over\na line](#nowhere)")
    assert unresolved("t", 'see docs/instructors.md, "Nowhere"')
    assert unresolved("t", "(README, Grading on a Dask cluster); --jobs")
    assert unresolved("t", 'README, "Two commands" and "Nowhere"')
    assert unresolved("t", "the LMS's own export: README)", section_required=True)
    assert not unresolved("t", 'docs/instructors.md, "Hand grading" and README ("Two commands")', True)
    assert CROSS_REFERENCE.search('(see "What is not covered")')
