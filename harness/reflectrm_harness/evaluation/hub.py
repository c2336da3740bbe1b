"""Hugging Face copies of the benchmarks, converted to the shared schema (online users only).

Only called when a ``--dataset`` value is a hub id (``benchmarks.load_hub`` turns the rows into
pairs); needs the ``datasets`` package (the ``eval`` extra). Each converter is a pure function of
one upstream row, tested offline.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from reflectrm_harness.datasets import DatasetError
from reflectrm_harness.evaluation.names import (
    JUDGEBENCH,
    PPE,
    REWARDBENCH,
    RMB,
    RMBENCH,
    canonical_name,
)
from reflectrm_harness.evaluation.scoring import rewardbench_section

Row = Mapping[str, Any]
Converter = Callable[[Row, str], Iterable[dict[str, Any]]]  # (upstream row, split) -> rows

# RM-Bench's three styles, in the order of its `chosen` and `rejected` lists.
RMBENCH_STYLES = ("concise", "detailed_plain", "detailed_markdown")


def rewardbench_rows(row: Row, split: str) -> Iterator[dict[str, Any]]:
    subset = str(row["subset"])
    yield {
        "id": f"rewardbench-{subset}-{row['id']}",
        "prompt": row["prompt"],
        "chosen": row["chosen"],
        "rejected": row["rejected"],
        "subset": subset,
        "section": rewardbench_section(subset),
    }


def rmbench_difficulty(chosen_style: int, rejected_style: int) -> str:
    """Hard when the chosen response is plainer than the rejected one (upper triangle)."""
    if chosen_style == rejected_style:
        return "normal"
    return "hard" if chosen_style < rejected_style else "easy"


def rmbench_rows(row: Row, split: str) -> Iterator[dict[str, Any]]:
    """One upstream item (3 chosen x 3 rejected styles) expanded to its 9 pairs."""
    for i, chosen in enumerate(row["chosen"]):
        for j, rejected in enumerate(row["rejected"]):
            yield {
                "id": f"rmbench-{row['id']}-c{i}r{j}",
                "prompt": row["prompt"],
                "chosen": chosen,
                "rejected": rejected,
                "subset": row["domain"],
                "item_id": row["id"],
                "chosen_style": RMBENCH_STYLES[i],
                "rejected_style": RMBENCH_STYLES[j],
                "difficulty": rmbench_difficulty(i, j),
            }


def rmb_rows(row: Row, split: str) -> Iterator[dict[str, Any]]:
    path = str(row.get("category_path") or "")
    subset = path.split("/", 1)[1] if path.startswith("Pairwise_set/") else path
    messages = [{"role": m["role"], "content": m["content"]} for m in row["conversation"]]
    yield {
        "id": f"rmb-{row['pair_uid']}",
        "messages": messages,
        "chosen": row["chosen"],
        "rejected": row["rejected"],
        "goal": row["alignment_goal"],
        "subset": subset or row["alignment_goal"],
    }


def judgebench_category(source: str) -> str:
    if source.startswith("mmlu-pro"):
        return "knowledge"
    if source == "livecodebench":
        return "coding"
    return source.removeprefix("livebench-")  # livebench-reasoning, livebench-math


def judgebench_rows(row: Row, split: str) -> Iterator[dict[str, Any]]:
    label = str(row["label"])
    if label not in ("A>B", "B>A"):
        return  # JudgeBench has no ties; anything else is not a pair with a preference
    a, b = row["response_A"], row["response_B"]
    chosen, rejected = (a, b) if label == "A>B" else (b, a)
    yield {
        "id": f"judgebench-{split}-{row['pair_id']}",
        "prompt": row["question"],
        "chosen": chosen,
        "rejected": rejected,
        "subset": judgebench_category(str(row["source"])),
        "split": split,
    }


_PPE_FIRST = {"model_a", "response_1", "a", "1"}
_PPE_SECOND = {"model_b", "response_2", "b", "2"}


def ppe_rows(row: Row, split: str) -> Iterator[dict[str, Any]]:
    """PPE human preference: the arena vote decides; ties (any kind) are excluded."""
    winner = str(row.get("winner", "")).strip().lower()
    if winner in _PPE_FIRST:
        chosen, rejected = row["response_1"], row["response_2"]
    elif winner in _PPE_SECOND:
        chosen, rejected = row["response_2"], row["response_1"]
    else:
        return
    prompt = row["prompt"]
    conversation = (
        {"messages": [{"role": m["role"], "content": m["content"]} for m in prompt]}
        if isinstance(prompt, list)
        else {"prompt": prompt}
    )
    yield {
        "id": f"ppe-{row.get('question_id', row.get('id'))}",
        **conversation,
        "chosen": chosen,
        "rejected": rejected,
        "subset": str(row.get("category") or row.get("language") or "all"),
    }


@dataclass(frozen=True)
class HubSource:
    benchmark: str
    splits: tuple[str, ...] | None  # None: every split
    convert: Converter


HUB_SOURCES = {
    "allenai/reward-bench": HubSource(REWARDBENCH, ("filtered",), rewardbench_rows),
    "thu-keg/rm-bench": HubSource(RMBENCH, None, rmbench_rows),
    "ilgee/rmb-pairwise": HubSource(RMB, None, rmb_rows),
    "scalerlab/judgebench": HubSource(JUDGEBENCH, ("gpt", "claude"), judgebench_rows),
    "lmarena-ai/ppe-human-preference-v1": HubSource(PPE, None, ppe_rows),
}


def convert(source: HubSource, splits: Mapping[str, Iterable[Row]]) -> list[dict[str, Any]]:
    wanted = source.splits or tuple(splits)
    missing = [s for s in wanted if s not in splits]
    if missing:
        raise DatasetError(f"the hub copy has no split {missing}; it has {sorted(splits)}")
    return [out for split in wanted for row in splits[split] for out in source.convert(row, split)]


def hub_rows(hub_id: str, benchmark: str | None = None) -> tuple[str, list[dict[str, Any]]]:
    """The benchmark a hub dataset holds and its rows in the shared schema (downloads it)."""
    source = HUB_SOURCES.get(hub_id.lower())
    if source is None:
        known = ", ".join(HUB_SOURCES)
        raise DatasetError(f"no converter for hub dataset {hub_id!r}; known: {known}")
    if benchmark is not None and canonical_name(benchmark) != source.benchmark:
        raise DatasetError(f"{hub_id} holds {source.benchmark}, not {benchmark}")
    try:
        import datasets
    except ImportError:
        raise DatasetError(
            "loading a hub dataset needs the `datasets` package: pip install -e harness"
        ) from None
    loaded = datasets.load_dataset(hub_id)
    return source.benchmark, convert(source, {name: loaded[name] for name in loaded})
