"""Prometheus text exposition (what GET /metrics answers, the service's and vLLM's alike), read
once for the load scripts and the tests.

``parse_metrics(text)`` gives each sample's value, keyed in one of three ways (``by``):

- ``"series"``: the series as written on its line, ``name{label="v",...}`` (labels in the order
  written, values as escaped there), or ``name`` alone;
- ``"name"``: the metric's name, summed over its labels;
- ``"labels"``: ``(name, frozenset of (label, value) pairs)``, the values unescaped.

``prefix`` keeps only the names that start with it; ``names`` only those names, and with
``by="name"`` each of them is present (0.0 when it has no sample). Comment and blank lines are
skipped, and so is a sample whose value is not a number.

``by_label(values, name, label)`` regroups values keyed by series (a scrape, or the change
between two) by one label's value.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Literal, NamedTuple, overload

Labels = frozenset[tuple[str, str]]

# name, then the labels (a quoted value may hold "}" or an escaped quote), then the value.
_SAMPLE = re.compile(r'^([A-Za-z_:][A-Za-z0-9_:]*)(\{(?:[^"}]|"(?:[^"\\]|\\.)*")*\})?[ \t]+(\S+)')
_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"')
_ESCAPE = re.compile(r"\\(.)")


class Sample(NamedTuple):
    name: str
    series: str  # as written: the name and its labels' braces, if any
    labels: dict[str, str]
    value: float


def _unescape(value: str) -> str:
    return _ESCAPE.sub(lambda m: "\n" if m.group(1) == "n" else m.group(1), value)


def samples(text: str) -> Iterator[Sample]:
    """Every sample line of the exposition, in order."""
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        if m is None:
            continue
        try:
            value = float(m.group(3))
        except ValueError:
            continue
        braces = m.group(2) or ""
        labels = {k: _unescape(v) for k, v in _LABEL.findall(braces)}
        yield Sample(m.group(1), m.group(1) + braces, labels, value)


@overload
def parse_metrics(
    text: str,
    prefix: str = "",
    *,
    by: Literal["series", "name"] = "series",
    names: Sequence[str] | None = None,
) -> dict[str, float]: ...


@overload
def parse_metrics(
    text: str,
    prefix: str = "",
    *,
    by: Literal["labels"],
    names: Sequence[str] | None = None,
) -> dict[tuple[str, Labels], float]: ...


def parse_metrics(
    text: str,
    prefix: str = "",
    *,
    by: Literal["series", "name", "labels"] = "series",
    names: Sequence[str] | None = None,
) -> dict[str, float] | dict[tuple[str, Labels], float]:
    """The samples of a Prometheus text exposition, keyed as ``by`` says (see the module)."""
    wanted = set(names) if names is not None else None
    keep = [
        s
        for s in samples(text)
        if s.name.startswith(prefix) and (wanted is None or s.name in wanted)
    ]
    if by == "series":
        return {s.series: s.value for s in keep}
    if by == "labels":
        return {(s.name, frozenset(s.labels.items())): s.value for s in keep}
    totals: dict[str, float] = dict.fromkeys(names, 0.0) if names is not None else {}
    for s in keep:
        totals[s.name] = totals.get(s.name, 0.0) + s.value
    return totals


def by_label(values: Mapping[str, float], name: str, label: str) -> dict[str, float]:
    """Values keyed by series as written (``parse_metrics``'s default, or a change between two
    scrapes) of metric ``name``, keyed by the value of ``label`` and summed over the other
    labels; a series without that label is keyed by ""."""
    out: dict[str, float] = {}
    for series, value in values.items():
        base, brace, rest = series.partition("{")
        if base != name:
            continue
        labels = {k: _unescape(v) for k, v in _LABEL.findall(brace + rest)}
        key = labels.get(label, "")
        out[key] = out.get(key, 0.0) + value
    return out
