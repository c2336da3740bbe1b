"""What the scripts that write generated parts of the docs share: a Markdown table row, and the
text between a page's two markers, read or replaced (the tests compare it with a fresh render)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path


def table_row(cells: Sequence[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def between(text: str, start: str, end: str) -> str:
    """The text between the markers ``start`` and ``end``."""
    return text.split(start, 1)[1].split(end, 1)[0]


def replace_between(page: Path, start: str, end: str, body: str) -> None:
    """``page`` with ``body`` (ending in a newline) between its markers."""
    text = page.read_text()
    head, rest = text.split(start, 1)
    tail = rest.split(end, 1)[1]
    page.write_text(f"{head}{start}\n{body}{end}{tail}")
