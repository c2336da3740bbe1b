"""docs/judges.md: the shipped judges side by side, generated from their manifests
(service/reflectrm/artifacts/*/manifest.json), never typed by hand.

A manifest's figures are read from its ``figures`` block, one entry per column, each
``{"value": number, "ci95": [low, high] (optional), "record": "docs/records/..." (optional)}``:
``heldout`` (accuracy on held-out pairs, both orders, percent), ``length_balanced`` (the same
pairs with longer-chosen and shorter-chosen scored apart and averaged, percent), ``trap`` (the
helpful answer picked over a non-answer, percent), ``slot1`` (verdicts naming Response 1,
percent) and ``cost`` (with a ``unit``). The default judge's manifest from before that block
records its held-out run under ``heldout``; those fields are read when ``figures`` lacks them.
A figure no manifest records is printed as "not measured".

    .venv/bin/python -m scripts.judges_table > docs/judges.md
    .venv/bin/python -m scripts.judges_table --readme   # the README's sentence on the default

The README's figures on the default judge sit between its ``default-judge-figures`` markers,
rendered by ``readme_figures`` from the same manifest.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from reflectrm.checkpoints.judges import ARTIFACTS, DEFAULT_MODEL, SHIPPED, ShippedJudge
from reflectrm.checkpoints.resolve import served_defaults
from reflectrm.judging import defaults
from scripts.generated import replace_between

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "judges.md"
NOT_MEASURED = "not measured"
COLUMNS = (
    ("heldout", "held-out accuracy [95% CI]"),
    ("length_balanced", "length-balanced [95% CI]"),
    ("trap", "non-answer trap"),
    ("correctness", "correctness set"),
    ("slot1", "names Response 1"),
    ("ties", "no winner"),
    ("cost", "cost per judgment"),
)


def _legacy(manifest: dict[str, Any], key: str) -> dict[str, Any] | None:
    """A figure from the held-out block of a manifest written before ``figures``."""
    held = manifest.get("heldout")
    if not isinstance(held, dict):
        return None
    record = held.get("records")
    found = {
        "heldout": ("accuracy_mean_of_both_orders", "accuracy_95", None),
        "slot1": ("says_response_1_percent", None, None),
        "cost": ("generated_tokens_per_judgment", None, "generated tokens"),
    }.get(key)
    if found is None or found[0] not in held:
        return None
    value, ci, unit = found
    out: dict[str, Any] = {"value": held[value], "record": record}
    if ci and ci in held:
        out["ci95"] = held[ci]
    if unit:
        out["unit"] = unit
    return out


def figure(manifest: dict[str, Any], key: str) -> dict[str, Any] | None:
    figures = manifest.get("figures")
    found = figures.get(key) if isinstance(figures, dict) else None
    if key == "cost" and isinstance(found, dict) and found.get("prompt_tokens") is not None:
        # What a judgment costs on a CPU is its prefill: the prompt tokens beside the generated.
        prompt = f"{float(found['prompt_tokens']):,.0f} prompt tokens"
        found = {**found, "unit": f"{found.get('unit', '')} and {prompt}"}
    mode = figures.get("mode") if isinstance(figures, dict) else None
    if key == "cost" and isinstance(found, dict) and mode:
        found = {**found, "unit": f"{found.get('unit', '')} ({mode})".strip()}
    if isinstance(found, dict) and found.get("value") is not None:
        return dict(found)
    return _legacy(manifest, key)


def _number(x: Any) -> str:
    return f"{float(x):.1f}"


def cell(found: dict[str, Any] | None, percent: bool = True) -> str:
    if found is None:
        return NOT_MEASURED
    text = _number(found["value"]) + ("%" if percent else "")
    ci = found.get("ci95")
    if isinstance(ci, list) and len(ci) == 2:
        text += f" [{_number(ci[0])}, {_number(ci[1])}]"
    if found.get("unit"):
        text += f" {found['unit']}"
    if found.get("record"):
        text += f" ([record]({_link(str(found['record']))}))"
    return text


def _link(record: str) -> str:
    """A repository path as a link from docs/."""
    record = record.rstrip("/")
    return record.removeprefix("docs/") if record.startswith("docs/") else f"../{record}"


def licences(manifest: dict[str, Any]) -> str:
    named = manifest.get("data_licences")
    if not named:
        named = sorted({d["licence"] for d in manifest.get("data", []) if d.get("licence")})
    return ", ".join(named) if named else "not recorded"


def shipped(folder: Path) -> ShippedJudge | None:
    """The register's judge an artifact folder holds (each is named after its setting)."""
    return next((j for j in SHIPPED.values() if j.folder.name == folder.name), None)


def served(folder: Path) -> str:
    """The mode and debias a pair is judged with when its call names none: the manifest's
    ``serving`` block, else the method's defaults (as the settings read them)."""
    named = served_defaults(str(folder))
    mode = named.get("mode", defaults.MODE)
    debias = named.get("debias", defaults.PAIR_DEBIAS)
    return f"`{mode}`, debias `{debias}`" + ("" if named else " (the method's defaults)")


def recipe(judge: ShippedJudge | None) -> str:
    if judge is None:
        return "not recorded"
    return " → ".join(f"`{c}`" for c in judge.commands())


def row(folder: Path) -> str:
    manifest = json.loads((folder / "manifest.json").read_text())
    judge = shipped(folder)
    setting = f"`{judge.setting}`" if judge else f"`service/reflectrm/artifacts/{folder.name}`"
    base = manifest.get("base_model", {}).get("name", "not recorded")
    cells = [cell(figure(manifest, key), percent=key != "cost") for key, _ in COLUMNS]
    return (
        "| "
        + " | ".join([setting, base, served(folder), *cells, licences(manifest), recipe(judge)])
        + " |"
    )


def _order(folder: Path) -> tuple[int, str]:
    """The register's order (the default first), then any other folder by name."""
    judge = shipped(folder)
    return (list(SHIPPED).index(judge.setting) if judge else len(SHIPPED), folder.name)


def render(artifacts: Path = ARTIFACTS) -> str:
    folders = sorted((p.parent for p in artifacts.glob("*/manifest.json")), key=_order)
    header = [
        "`REFLECTRM_MODEL`",
        "base model",
        "a pair is judged with",
        *(t for _, t in COLUMNS),
        "training data licence",
        "recipe",
    ]
    lines = [
        "# The shipped judges",
        "",
        "Generated by `.venv/bin/python -m scripts.judges_table > docs/judges.md` from each "
        "shipped judge's manifest (`service/reflectrm/artifacts/*/manifest.json`);",
        "`tests/unit/test_judges_table.py` fails when this page is stale. A figure its "
        "manifest does not record reads "
        f'"{NOT_MEASURED}". How each was measured: [results.md](results.md) and '
        "[training.md](training.md).",
        "The setting, base model and recipe of each are the register's "
        "(`service/reflectrm/checkpoints/judges.py`); how a pair is judged when its call names "
        "no `mode` or `debias` is the manifest's `serving` block, else the method's defaults.",
        "",
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
        *(row(f) for f in folders),
    ]
    return "\n".join(lines) + "\n"


README = ROOT / "README.md"
README_START = "<!-- default-judge-figures: start -->"
README_END = "<!-- default-judge-figures: end -->"


def readme_figures() -> str:
    """What the default judge does and does not, in the README's words, with its manifest's
    figures (rounded to one decimal) and the records they come from."""
    manifest = SHIPPED[DEFAULT_MODEL].manifest()
    f = {
        k: figure(manifest, k) or {}
        for k in ("trap", "correctness", "heldout", "length_balanced", "ties")
    }

    def pct(key: str) -> str:
        return f"{f[key]['value']:.1f}%"

    records = sorted({str(v["record"]) for v in f.values() if v.get("record")})
    links = ", ".join(f"[{Path(r).name}]({r.rstrip('/')})" for r in records)
    return (
        f"What the default judge does: on the project's non-answer trap it pays the helpful answer "
        f"more in {pct('trap')} of pairs, and it leaves {pct('ties')} of pairs without a winner; "
        f"what it does not: it picks the right of two same-length answers in "
        f"{pct('correctness')} of the correctness set only, and on held-out general chat "
        f"({pct('heldout')}) it mostly follows length ({pct('length_balanced')} "
        f"length-balanced): it keeps a policy from being paid for refusing or evading, it does "
        f"not teach it quality (records: {links}).\n"
    )


def write_readme(readme: Path = README) -> None:
    replace_between(readme, README_START, README_END, readme_figures())


if __name__ == "__main__":
    import sys

    if "--readme" in sys.argv:
        write_readme()
    else:
        print(render(), end="")
