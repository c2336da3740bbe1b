"""What both reports are made of: numbers rounded for report.json, values with their 95%
intervals and paired differences for the Markdown tables, the chart's figure and bars, and the
three files (``report.json``, ``.md``, ``.png``) written side by side."""

from __future__ import annotations

import contextlib
import json
import logging
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from reflectrm_harness.evaluation.scoring import interval

log = logging.getLogger(__name__)

Cell = Mapping[str, Any]  # {"value": ..., "ci95": [low, high], ...} as report.json holds it

# --- numbers in report.json -----------------------------------------------------------------


def number(x: float | None, digits: int = 2) -> float | None:
    """``x`` rounded for the report; None when there is no finite value."""
    return None if x is None or not math.isfinite(x) else round(float(x), digits)


def ci(samples: np.ndarray, digits: int = 2) -> list[float | None]:
    """The 95% percentile interval of bootstrap samples, rounded."""
    low, high = interval(samples)
    return [number(low, digits), number(high, digits)]


# --- numbers in Markdown --------------------------------------------------------------------

MISSING = "–"


def fmt(x: float | None, digits: int = 1) -> str:
    return MISSING if x is None else f"{x:.{digits}f}"


def fmt_cell(cell: Cell | None, scale: float = 1.0, digits: int = 1) -> str:
    """A value with its 95% interval (``ci95``), both times ``scale``."""
    if not cell or cell.get("value") is None:
        return MISSING
    value = cell["value"] * scale
    low, high = cell.get("ci95") or (None, None)
    if low is None or high is None:
        return f"{value:.{digits}f}"
    return f"{value:.{digits}f} [{low * scale:.{digits}f}, {high * scale:.{digits}f}]"


def fmt_delta(delta: Cell | None, scale: float = 1.0, digits: int = 1) -> str:
    """A signed difference with its paired 95% interval (``ci95_paired``); `~` marks one whose
    interval contains 0 (within noise)."""
    if not delta or delta.get("value") is None:
        return MISSING
    low, high = delta.get("ci95_paired") or (None, None)
    if low is None or high is None:
        return f"{delta['value'] * scale:+.{digits}f}"
    noise = " ~" if low <= 0 <= high else ""
    return (
        f"{delta['value'] * scale:+.{digits}f} "
        f"[{low * scale:+.{digits}f}, {high * scale:+.{digits}f}]{noise}"
    )


def table(head: Sequence[str], rows: Sequence[Sequence[str]], text_columns: int = 1) -> list[str]:
    """A Markdown table: the first ``text_columns`` columns left-aligned, numbers right."""
    lines = ["| " + " | ".join(head) + " |"]
    lines.append("|" + "---|" * text_columns + "---:|" * (len(head) - text_columns))
    lines += ["| " + " | ".join(cells) + " |" for cells in rows]
    return lines


# --- the chart ------------------------------------------------------------------------------


@contextlib.contextmanager
def figure(
    path: Path,
    panels: int,
    size: tuple[float, float],
    dpi: int,
    rect: tuple[float, float, float, float] | None = None,
) -> Iterator[tuple[Any, Any]]:
    """A row of ``panels`` charts sharing one value axis, drawn without a display and saved to
    ``path`` when the block ends. ImportError without matplotlib (the eval extra)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, panels, figsize=size, sharey=True)
    try:
        yield fig, axes
        fig.tight_layout(rect=rect)
        fig.savefig(path, dpi=dpi)
    finally:
        plt.close(fig)


def bars(
    cells: Sequence[Cell | None], scale: float = 1.0
) -> tuple[list[float], list[float], list[float]]:
    """Bar lengths and their error bars below and above, from cells with a value and a 95%
    interval (times ``scale``); a cell without a value is no bar."""
    values, lows, highs = [], [], []
    for c in cells:
        value = None if c is None else c.get("value")
        low, high = (c or {}).get("ci95") or (None, None)
        values.append(np.nan if value is None else value * scale)
        lows.append(0.0 if value is None or low is None else abs(value - low) * scale)
        highs.append(0.0 if value is None or high is None else abs(high - value) * scale)
    return values, lows, highs


# --- the files ------------------------------------------------------------------------------


def write_files(
    report: Mapping[str, Any],
    out_dir: Path,
    stem: str,
    as_markdown: Callable[[Mapping[str, Any]], str],
    draw: Callable[[Mapping[str, Any], Path], None],
) -> dict[str, Path]:
    """The report as ``{stem}.json``, ``{stem}.md`` and (with matplotlib) ``{stem}.png``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {
        "json": out_dir / f"{stem}.json",
        "markdown": out_dir / f"{stem}.md",
        "chart": out_dir / f"{stem}.png",
    }
    paths["json"].write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n")
    paths["markdown"].write_text(as_markdown(report))
    try:
        draw(report, paths["chart"])
    except ImportError:
        log.warning("no chart: matplotlib is missing (pip install -e harness)")
        del paths["chart"]
    return paths
