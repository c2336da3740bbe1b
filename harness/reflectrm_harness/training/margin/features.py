"""Margin mode's two features for every pair of a pairs file, on a real engine: the verdict
digits' log-odds in both orders (chosen shown first, then second) and each response's mean token
log-prob given the conversation. What ``fit`` (``reflectrm train margin-fit``) fits the margin
weights on.

    reflectrm train margin-features --model qwen05b --pairs dev.jsonl --out features.jsonl

Resumable: pairs already in ``--out`` are skipped. One line per pair: ``id``, ``source``,
``subset``, ``lengths`` (characters of chosen, rejected), ``z_first`` (log p(chosen)/p(rejected)
with the chosen response shown first), ``z_second`` (the same with it shown second), ``l_chosen``,
``l_rejected``, ``seconds``.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from reflectrm.engines.factory import open_engine
from reflectrm.judging.judge import Judge
from reflectrm.judging.types import JudgmentSpec
from reflectrm.settings import Settings
from reflectrm_harness.datasets import Pair, pair_from_row, read_rows


def log_odds(probabilities: tuple[float, float] | None) -> float | None:
    if probabilities is None:
        return None
    p1, p2 = probabilities
    return math.log(p1) - math.log(p2)


async def features(judge: Judge, pair: Pair) -> dict[str, Any]:
    started = time.monotonic()
    zs = []
    for first in (1, 2):
        shown = pair.present(first).responses
        spec = JudgmentSpec(pair.conversation, shown, mode="margin", max_tokens=1)
        j = await judge.judge(spec, f"{pair.id}-{first}")
        z = log_odds(j.trace.candidates[0].probabilities)
        zs.append(None if z is None else (z if first == 1 else -z))
    l_chosen, _ = await judge.likelihood(pair.conversation, pair.chosen, f"{pair.id}-lc")
    l_rejected, _ = await judge.likelihood(pair.conversation, pair.rejected, f"{pair.id}-lr")
    return {
        "id": pair.id,
        "source": pair.meta.get("source") or pair.benchmark,
        "subset": pair.meta.get("subset", ""),
        "lengths": [len(pair.chosen), len(pair.rejected)],
        "z_first": zs[0],
        "z_second": zs[1],
        "l_chosen": l_chosen,
        "l_rejected": l_rejected,
        "seconds": round(time.monotonic() - started, 3),
    }


def read(path: Path) -> list[Pair]:
    """The file's pairs, each id prefixed by its source (ids repeat across sources)."""
    pairs = []
    for where, row in read_rows(path):
        source = str(row.get("source") or row.get("benchmark") or "")
        meta = {"source": source, "subset": str(row.get("subset") or "")}
        pair = pair_from_row(row, where=where, meta=meta)
        pairs.append(
            Pair(f"{source}/{pair.id}", pair.conversation, pair.chosen, pair.rejected, source, meta)
        )
    return pairs


def pending(pairs: Path, out: Path) -> tuple[list[Pair], int]:
    """The pairs of ``pairs`` not yet in ``out`` (a run is resumed), and how many it holds."""
    every = read(pairs)
    done: set[str] = set()
    if out.is_file():
        done = {json.loads(line)["id"] for line in out.read_text().splitlines() if line}
    return [p for p in every if p.id not in done], len(every)


async def write_features(model: str, todo: Sequence[Pair], out: Path, concurrency: int) -> None:
    """The features of each pair of ``todo`` on an engine opened for ``model``, appended to
    ``out`` as each is done, ``concurrency`` pairs at once."""
    settings = Settings(model=model)
    async with open_engine(settings.engine_config()) as engine:
        judge = Judge(engine, settings.judge_config())
        queue = list(todo)

        async def worker() -> None:
            while queue:
                pair = queue.pop(0)
                row = await features(judge, pair)
                with out.open("a") as f:
                    f.write(json.dumps(row) + "\n")

        await asyncio.gather(*(worker() for _ in range(concurrency)))
