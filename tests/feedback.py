"""Reading a feedback page as its reader sees it."""

import html
import re
from pathlib import Path


def page_text(page: Path) -> str:
    """The text a browser shows: no styles, scripts or tags (CSS names such as Traceback)."""
    visible = re.sub(r"<(style|script)[^>]*>.*?</\1>", "", page.read_text(), flags=re.DOTALL)
    return html.unescape(re.sub(r"<[^>]+>", "", visible))
