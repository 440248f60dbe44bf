"""Reading a feedback page, or the class report, as its reader sees it."""

import html
import re
from html.parser import HTMLParser
from pathlib import Path

from bs4 import BeautifulSoup, NavigableString


def document(page: str) -> list[tuple]:
    """The page as a browser reads it: its elements with their attributes, and its text, where
    whitespace counts only inside <pre> (two writings of one page differ in their indentation)."""
    read = []
    for node in BeautifulSoup(page, "html.parser").descendants:
        if isinstance(node, NavigableString):
            text = str(node) if node.find_parent("pre") else " ".join(node.split())
            read += [("text", text)] if text else []
        else:
            attributes = {k: " ".join(v) if isinstance(v, list) else v for k, v in node.attrs.items()}
            read.append((node.name, sorted(attributes.items())))
    return read


def page_text(page: Path) -> str:
    """The text a browser shows: no styles, scripts or tags (CSS names such as Traceback)."""
    visible = re.sub(r"<(style|script)[^>]*>.*?</\1>", "", page.read_text(), flags=re.DOTALL)
    return html.unescape(re.sub(r"<[^>]+>", "", visible))


class Tables(HTMLParser):
    """Each table of the page as rows of cell texts, under the id of the section it is in."""

    def __init__(self):
        super().__init__()
        self.tables: dict[str, list[list[list[str]]]] = {}
        self.sections: list[str] = []
        self.cell: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        if tag == "section":
            self.sections.append(dict(attrs).get("id", ""))
        elif tag == "table":
            self.tables.setdefault(self.sections[-1], []).append([])
        elif tag == "tr":
            self.tables[self.sections[-1]][-1].append([])
        elif tag in ("td", "th"):
            self.cell = []

    def handle_endtag(self, tag):
        if tag == "section":
            self.sections.pop()
        elif tag in ("td", "th") and self.cell is not None:
            self.tables[self.sections[-1]][-1][-1].append("".join(self.cell).strip())
            self.cell = None

    def handle_data(self, data):
        if self.cell is not None:
            self.cell.append(data)


def report_tables(page: Path) -> dict[str, list[list[list[str]]]]:
    """section id -> its tables, each a list of rows of cell texts ("" holds those outside any section)."""
    parser = Tables()
    parser.tables[""] = []
    parser.sections.append("")
    parser.feed(page.read_text())
    return parser.tables
