"""A recipe's settings from outside: ``--set KEY=VALUE`` strings and YAML values, read into the
recipe's settings dataclass by one builder (both recipes' commands use it)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

import yaml

T = TypeVar("T")


def parse_overrides(pairs: Sequence[str], cls: type[Any]) -> dict[str, Any]:
    """``--set key=value`` strings for the settings dataclass ``cls``.

    Each value is read as YAML, so numbers, booleans and null keep their types; an unknown key
    is an error naming the known ones.
    """
    known = sorted(f.name for f in dataclasses.fields(cls))
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise ValueError(f"--set expects key=value, got {pair!r}")
        key = key.strip()
        if key not in known:
            raise ValueError(f"unknown setting {key!r}; known: {', '.join(known)}")
        out[key] = yaml.safe_load(value)
    return out


def make_settings(cls: type[T], values: Mapping[str, Any], where: str = "") -> T:
    """The settings ``cls`` with ``values`` over its defaults. An unknown key is an error (naming
    ``where`` the values came from, e.g. a file); a value takes its field's type where YAML
    reads it otherwise: ``1e-6`` (no dot) is a string to YAML, a list stands for a tuple."""
    fields = {f.name: str(f.type) for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(values) - set(fields))
    if unknown:
        source = f" in {where}" if where else ""
        raise ValueError(f"unknown settings{source}: {', '.join(unknown)}")
    return cls(**{k: _typed(fields[k], v) for k, v in values.items()})


def _typed(kind: str, value: Any) -> Any:
    if value is None:
        return None
    if kind.startswith("float"):
        return float(value)
    if kind.startswith("tuple[float"):
        return tuple(float(x) for x in value)
    if kind.startswith("tuple"):
        return tuple(value)
    return value
