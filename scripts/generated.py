"""What the scripts that write generated parts of the docs share: a Markdown table row, a
percentage with its interval, a table read from a record's own Markdown report, and the text
between a page's two markers, read or replaced (the tests compare it with a fresh render)."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any


def table_row(cells: Sequence[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def pct_ci(found: Mapping[str, Any] | None, digits: int = 1, scale: float = 1.0) -> str:
    """A report's ``{"value": v, "ci95": [low, high]}`` as ``v [low, high]``, each times
    ``scale`` (100 for a share); "–" when absent."""
    if not found or found.get("value") is None:
        return "–"
    text = f"{found['value'] * scale:.{digits}f}"
    if found.get("ci95"):
        low, high = found["ci95"]
        text += f" [{low * scale:.{digits}f}, {high * scale:.{digits}f}]"
    return text


def report_rows(report: Path, heading: str) -> list[list[str]]:
    """The cells of the first Markdown table from the line starting with ``heading`` in a
    record's report (a Markdown file the run wrote): the header row, the rule, then the rows.
    ``heading`` may be the start of the table's own header row."""
    lines = report.read_text().splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith(heading))
    first = next(i for i in range(at, len(lines)) if lines[i].startswith("|"))
    rows: list[list[str]] = []
    for line in lines[first:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
    return rows


def report_table(report: Path, heading: str, columns: Sequence[str] | None = None) -> str:
    """That table as Markdown, keeping only ``columns`` (by header, in order) if given."""
    rows = report_rows(report, heading)
    if columns is not None:
        keep = [rows[0].index(c) for c in columns]
        rows = [[r[i] for i in keep] for r in rows]
    return "\n".join(table_row(r) for r in rows) + "\n"


def between(text: str, start: str, end: str) -> str:
    """The text between the markers ``start`` and ``end``."""
    return text.split(start, 1)[1].split(end, 1)[0]


def replace_between(page: Path, start: str, end: str, body: str) -> None:
    """``page`` with ``body`` (ending in a newline) between its markers."""
    text = page.read_text()
    head, rest = text.split(start, 1)
    tail = rest.split(end, 1)[1]
    page.write_text(f"{head}{start}\n{body}{end}{tail}")


def page_markers(prefix: str, name: str) -> tuple[str, str]:
    """The two markers around a page's table ``name``: ``<!-- prefix-name: start/end -->``."""
    return f"<!-- {prefix}-{name}: start -->", f"<!-- {prefix}-{name}: end -->"


def write_tables(
    doc: str | None,
    page: Path,
    markers: Callable[[str], tuple[str, str]],
    tables: Mapping[str, Callable[[], str]],
) -> None:
    """A page script's command: print every table rendered from its record, or with
    ``--write`` put each between its markers on ``page``."""
    p = argparse.ArgumentParser(description=(doc or "").split("\n\n")[0])
    p.add_argument("--write", action="store_true", help="replace the page's tables")
    args = p.parse_args()
    for name, render in tables.items():
        if args.write:
            replace_between(page, *markers(name), render())
        else:
            print(f"{markers(name)[0]}\n{render()}")
