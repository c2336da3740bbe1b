"""Paths in written artifacts (run headers, reports, load-test summaries) without the machine they
ran on: a report copied into docs/ names ``../shared/data/...`` and ``~/.cache/...``, not
``/work/shared/data/...`` and ``/root/.cache/...``."""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any


def _pattern(root: Path) -> tuple[re.Pattern[str], dict[str, str]]:
    """The absolute prefixes to shorten and what each becomes: the repository (``root``) goes,
    leaving a relative path; the folder it sits in becomes ``..``, the home directory ``~`` and
    the temporary folder ``<tmp>`` (a path there belongs to that machine; what follows remains)."""
    root = Path(os.path.abspath(root))
    short = {
        os.path.abspath(tempfile.gettempdir()): "<tmp>",
        str(Path.home()): "~",
        str(root.parent): "..",  # after home: a repository in ~ keeps ../shared/data
        str(root): ".",
    }
    short = {p: s for p, s in short.items() if p.strip("/")}
    alternatives = "|".join(re.escape(p) for p in sorted(short, key=len, reverse=True))
    # A whole path component: not inside a longer name, and followed by "/" or the path's end.
    return re.compile(rf"(?<![\w.~/-])({alternatives})(/|(?![\w.-]))"), short


def portable_text(text: str, root: Path) -> str:
    """``text`` with every absolute path under ``root``, the folder it sits in, the home
    directory or the temporary folder written relative to them (``service/x.py``,
    ``../shared/data``, ``~/.cache``, ``<tmp>/run``); the rest of the text unchanged."""
    pattern, short = _pattern(root)

    def shorter(match: re.Match[str]) -> str:
        head, slash = short[match.group(1)], match.group(2)
        if head == ".":
            return "" if slash else "."
        return head + slash

    return pattern.sub(shorter, text)


def portable(value: Any, root: Path) -> Any:
    """A JSON-like value with ``portable_text`` applied to every string in it (keys included)."""
    if isinstance(value, str):
        return portable_text(value, root)
    if isinstance(value, Mapping):
        return {portable(k, root): portable(v, root) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [portable(v, root) for v in value]
    return value
