"""The training data builder: unified preference + reflection items (docs/method.md section 3).

The base model judges every pair N times through the service's own ``Judge`` (same prompts,
engine, sampling and parser as stage 1 of a served judgment). Pairs judged right N of N times
teach nothing and are dropped; the rest become preference items, and every pair with both right
and wrong judgments gives one reflection item (a right and a wrong analysis, in random order, the
right one preferred). The two sets are mixed at a fixed ratio and shuffled.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import time
import zlib
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from reflectrm.engines import EngineConfig, open_engine
from reflectrm.engines.base import Engine
from reflectrm.judging.judge import Judge, JudgeConfig, PromptTooLongError
from reflectrm.judging.prompts import (
    TEMPLATE_VERSION,
    Template,
    get_template,
)
from reflectrm.judging.types import Candidate, JudgmentSpec, Message
from reflectrm_harness.datasets import Pair, Presented, pair_to_row
from reflectrm_harness.prompts import preference_messages, reflection_messages

log = logging.getLogger(__name__)

JUDGMENTS_FILE = "judgments.jsonl"
TRAIN_FILE = "train.jsonl"
HOLDOUT_FILE = "holdout.jsonl"
STATS_FILE = "stats.json"


@dataclass(frozen=True)
class BuildConfig:
    samples_per_pair: int = 8  # paper: 8 judgments per pair at temperature 1.0
    temperature: float = 1.0
    max_tokens: int = 1024  # paper: 1024
    # As the service does for models not trained on the template: constrain the output format so
    # a weak base model still writes parseable verdicts and analyses worth reflecting on.
    enforce_format: bool = True
    max_analysis_chars: int | None = None
    # Preference items per reflection item (paper: 4:1). None builds preference items only (the
    # paper's RFT baseline).
    preference_per_reflection: float | None = 4.0
    # Whether an unparseable judgment counts as a wrong analysis for reflection items. Off: its
    # analysis never reached a verdict, so "wrong" would be a guess.
    unparsed_is_incorrect: bool = False
    # Skip pairs whose judging prompt is longer (bounds training cost); None keeps all that fit.
    max_prompt_tokens: int | None = None
    # Pairs set aside (never judged nor trained on) to measure the trained model on.
    holdout_pairs: int = 0
    seed: int = 0
    concurrency: int = 8
    template_version: str = TEMPLATE_VERSION


@dataclass(frozen=True)
class JudgedPair:
    """A pair as the model saw it (responses in the shown order) and its N judgments."""

    pair_id: str
    conversation: tuple[Message, ...]
    responses: tuple[str, str]
    label: int  # the shown position (1 or 2) of the human-preferred response
    candidates: tuple[Candidate, ...]

    def correct(self) -> list[Candidate]:
        return [c for c in self.candidates if c.verdict == self.label]

    def incorrect(self, unparsed_is_incorrect: bool) -> list[Candidate]:
        return [
            c
            for c in self.candidates
            if c.verdict != self.label and (c.verdict is not None or unparsed_is_incorrect)
        ]


@dataclass(frozen=True)
class Stats:
    """Counts per step, like the paper's Table 6."""

    pairs_read: int = 0
    holdout: int = 0
    too_long: int = 0
    judged: int = 0
    judgments: int = 0
    judgments_parsed: int = 0
    judgments_correct: int = 0
    dropped_all_correct: int = 0
    all_wrong: int = 0
    mixed: int = 0
    preference_available: int = 0
    reflection_available: int = 0
    preference_used: int = 0
    reflection_used: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


def shown_order(pair: Pair, rng: random.Random) -> Presented:
    """Responses in a random order and the label: the position of the chosen response."""
    return pair.present(1 if rng.random() < 0.5 else 2)


def preference_item(
    template: Template, judged: JudgedPair, chosen_at: int | None = None
) -> dict[str, Any]:
    """The pair as a preference item, the chosen response at ``chosen_at`` (default: where the
    base model saw it)."""
    r1, r2 = judged.responses
    label = judged.label
    if chosen_at is not None and chosen_at != label:
        r1, r2, label = r2, r1, chosen_at
    return {
        "id": f"{judged.pair_id}#preference",
        "pair_id": judged.pair_id,
        "kind": "preference",
        "prompt": preference_messages(template, judged.conversation, r1, r2),
        "label": label,
        "template_version": template.version,
    }


def balanced_positions(count: int, rng: random.Random) -> list[int]:
    """Where each preference item shows its chosen response: half in each position (one more
    in a random one when ``count`` is odd), in a random order.

    Not where the base model saw it: selection keeps the pairs the base got wrong at least once,
    and a base that favours one position gets those wrong mostly when the chosen response sits
    in the other; kept in their judged order, the items would teach that position (with a base
    naming Response 1 in 99% of its judgments, 80 of 107 items said Response 2)."""
    positions = [1, 2] * (count // 2) + ([rng.choice((1, 2))] if count % 2 else [])
    rng.shuffle(positions)
    return positions


def reflection_item(
    template: Template, judged: JudgedPair, right: Candidate, wrong: Candidate, rng: random.Random
) -> dict[str, Any]:
    """The right and the wrong analysis in a random order; the label is the right one's slot."""
    r1, r2 = judged.responses
    label = 1 if rng.random() < 0.5 else 2
    first, second = (right, wrong) if label == 1 else (wrong, right)
    return {
        "id": f"{judged.pair_id}#reflection",
        "pair_id": judged.pair_id,
        "kind": "reflection",
        "prompt": reflection_messages(
            template, judged.conversation, r1, r2, first.analysis, second.analysis
        ),
        "label": label,
        "template_version": template.version,
    }


def mix_counts(preference: int, reflection: int, ratio: float | None) -> tuple[int, int]:
    """How many of each to keep for exactly ``ratio`` preference items per reflection item.

    Whichever side is in excess is trimmed, so the mix is the ratio asked (the paper's sweep
    found the ratio itself matters); None keeps every preference item and no reflection item.
    """
    if ratio is None:
        return preference, 0
    if ratio <= 0:
        raise ValueError("preference_per_reflection must be positive (or None for no reflection)")
    if reflection * ratio >= preference:
        return preference, min(reflection, int(preference / ratio))
    return int(reflection * ratio), reflection


def select_items(
    judged: Sequence[JudgedPair], config: BuildConfig, rng: random.Random
) -> tuple[list[dict[str, Any]], Stats]:
    """Filter, build both sets, mix them at the configured ratio and shuffle. Pure."""
    template = get_template(config.template_version)
    preference: list[JudgedPair] = []
    reflection: list[dict[str, Any]] = []
    dropped = all_wrong = mixed = 0
    for pair in judged:
        right = pair.correct()
        if len(right) == len(pair.candidates):
            dropped += 1
            continue
        preference.append(pair)
        wrong = pair.incorrect(config.unparsed_is_incorrect)
        if not right:
            all_wrong += 1
        if right and wrong:
            mixed += 1
            reflection.append(
                reflection_item(template, pair, rng.choice(right), rng.choice(wrong), rng)
            )
    n_pref, n_refl = mix_counts(len(preference), len(reflection), config.preference_per_reflection)
    kept = rng.sample(preference, n_pref)
    balanced = [
        preference_item(template, pair, at)
        for pair, at in zip(kept, balanced_positions(len(kept), rng), strict=True)
    ]
    items = balanced + rng.sample(reflection, n_refl)
    rng.shuffle(items)
    candidates = [c for p in judged for c in p.candidates]
    stats = Stats(
        judged=len(judged),
        judgments=len(candidates),
        judgments_parsed=sum(c.verdict is not None for c in candidates),
        judgments_correct=sum(len(p.correct()) for p in judged),
        dropped_all_correct=dropped,
        all_wrong=all_wrong,
        mixed=mixed,
        preference_available=len(preference),
        reflection_available=len(reflection),
        preference_used=n_pref,
        reflection_used=n_refl,
    )
    return items, stats


async def judge_pairs(
    engine: Engine,
    pairs: Sequence[tuple[Pair, tuple[tuple[str, str], int]]],
    config: BuildConfig,
    progress: Callable[[int, int], None] = lambda done, total: None,
    on_judged: Callable[[JudgedPair], None] = lambda judged: None,
) -> tuple[list[JudgedPair], int]:
    """N judgments per pair (shown in the given order) through the service's Judge; returns the
    judged pairs in input order and how many were skipped as too long. ``on_judged`` sees each
    pair as soon as it is done (build saves it, so an interrupted run resumes)."""
    judge = Judge(
        engine,
        JudgeConfig(
            template_version=config.template_version,
            temperature=config.temperature,
            enforce_format=config.enforce_format,
            max_analysis_chars=config.max_analysis_chars,
        ),
    )
    gate = asyncio.Semaphore(config.concurrency)
    done = 0

    async def one(
        index: int, pair: Pair, responses: tuple[str, str], label: int
    ) -> JudgedPair | None:
        nonlocal done
        # Stage 1 of the service, all N outputs kept: "vote" mode runs exactly that request.
        request = JudgmentSpec(
            pair.conversation,
            responses,
            mode="vote",
            num_candidates=config.samples_per_pair,
            # From the pair's id, not its position: a resumed build samples the same outputs.
            seed=zlib.crc32(f"{config.seed}:{pair.id}".encode()) & 0x7FFFFFFF,
            max_tokens=config.max_tokens,
        )
        async with gate:
            try:
                prepared = await asyncio.to_thread(judge.prepare, request)
            except PromptTooLongError:
                return None
            if config.max_prompt_tokens is not None and (
                prepared.prompt.num_tokens > config.max_prompt_tokens
            ):
                return None
            judgment = await judge.run(prepared, f"build-{index}")
        judged = JudgedPair(pair.id, pair.conversation, responses, label, judgment.trace.candidates)
        on_judged(judged)
        done += 1
        progress(done, len(pairs))
        return judged

    results = await asyncio.gather(*(one(i, p, r, y) for i, (p, (r, y)) in enumerate(pairs)))
    judged = [j for j in results if j is not None]
    return judged, len(results) - len(judged)


def split_holdout(
    pairs: Sequence[Pair], count: int, rng: random.Random
) -> tuple[list[Pair], list[Pair]]:
    """(train pairs, held-out pairs), drawn at random so the holdout is no easier subset."""
    picked = set(rng.sample(range(len(pairs)), min(count, len(pairs))))
    train = [p for i, p in enumerate(pairs) if i not in picked]
    holdout = [p for i, p in enumerate(pairs) if i in picked]
    return train, holdout


# --- files ----------------------------------------------------------------------------------------


def judged_to_json(j: JudgedPair) -> dict[str, Any]:
    return {
        "pair_id": j.pair_id,
        "messages": [asdict(m) for m in j.conversation],
        "responses": list(j.responses),
        "label": j.label,
        "candidates": [asdict(c) for c in j.candidates],
    }


def judged_from_json(row: dict[str, Any]) -> JudgedPair:
    return JudgedPair(
        pair_id=row["pair_id"],
        conversation=tuple(Message(m["role"], m["content"]) for m in row["messages"]),
        responses=(row["responses"][0], row["responses"][1]),
        label=int(row["label"]),
        candidates=tuple(Candidate(**c) for c in row["candidates"]),
    )


def write_jsonl(path: Path, rows: Sequence[dict[str, Any]]) -> None:
    with path.open("w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")


def read_items(path: Path) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def write_outputs(
    out_dir: Path,
    items: Sequence[dict[str, Any]],
    stats: Stats,
    judged: Sequence[JudgedPair] | None = None,
    holdout: Sequence[Pair] = (),
) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    write_jsonl(out_dir / TRAIN_FILE, items)
    if judged is not None:
        write_jsonl(out_dir / JUDGMENTS_FILE, [judged_to_json(j) for j in judged])
    if holdout:
        write_jsonl(out_dir / HOLDOUT_FILE, [pair_to_row(p) for p in holdout])
    (out_dir / STATS_FILE).write_text(json.dumps(asdict(stats), indent=2) + "\n")


async def build(engine: Engine, pairs: Sequence[Pair], config: BuildConfig, out_dir: Path) -> Stats:
    """The whole builder on a running engine: holdout, judging, selection, files.

    Judgments are appended to judgments.jsonl as they finish; a rerun with the same pairs and
    config judges only the pairs missing from it.
    """
    rng = random.Random(config.seed)
    train_pairs, holdout = split_holdout(pairs, config.holdout_pairs, rng)
    ordered = [(p, shown_order(p, rng)) for p in train_pairs]
    out_dir.mkdir(parents=True, exist_ok=True)
    saved = out_dir / JUDGMENTS_FILE
    previous = (
        {j.pair_id: j for j in map(judged_from_json, read_items(saved))} if saved.is_file() else {}
    )
    todo = [(p, order) for p, order in ordered if p.id not in previous]
    if previous:
        log.info("resuming: %d pairs already judged in %s", len(previous), saved)
    started = time.monotonic()

    def progress(done: int, total: int) -> None:
        if done % 10 == 0 or done == total:
            log.info("judged %d/%d pairs (%.0f s)", done, total, time.monotonic() - started)

    with saved.open("a", encoding="utf-8") as sink:

        def keep(judged: JudgedPair) -> None:
            sink.write(json.dumps(judged_to_json(judged), ensure_ascii=False) + "\n")
            sink.flush()

        fresh, too_long = await judge_pairs(engine, todo, config, progress, keep)
    by_id = {**previous, **{j.pair_id: j for j in fresh}}
    judged = [by_id[p.id] for p, _ in ordered if p.id in by_id]
    # A fresh generator, as in rebuild(): the same judgments always give the same selection.
    items, stats = select_items(judged, config, random.Random(config.seed))
    stats = Stats(
        **{
            **asdict(stats),
            "pairs_read": len(pairs),
            "holdout": len(holdout),
            "too_long": too_long,
            "extra": {
                "model": engine.model_name,
                "config": asdict(config),
                "judging_seconds": round(time.monotonic() - started, 1),
            },
        }
    )
    write_outputs(out_dir, items, stats, holdout=holdout)
    return stats


def refit(
    items: Sequence[dict[str, Any]], fits: Callable[[dict[str, Any]], bool]
) -> list[dict[str, Any]]:
    """The items that ``fits``, mixed again at the ratio of preference to reflection items that
    ``items`` has (the excess kind trimmed, in file order). Filtering a mixed set alone would
    skew its ratio: reflection prompts, carrying two critiques, are the longer ones. Pure."""
    preference = [i for i in items if i["kind"] == "preference"]
    reflection = [i for i in items if i["kind"] == "reflection"]
    ratio = len(preference) / len(reflection) if reflection else None
    kept_pref = [i for i in preference if fits(i)]
    kept_refl = [i for i in reflection if fits(i)]
    n_pref, n_refl = mix_counts(len(kept_pref), len(kept_refl), ratio)
    keep = {id(i) for i in kept_pref[:n_pref] + kept_refl[:n_refl]}
    return [i for i in items if id(i) in keep]


async def build_with_engine(
    engine_config: EngineConfig, pairs: Sequence[Pair], config: BuildConfig, out_dir: Path
) -> Stats:
    """``build`` on an engine opened for it (``reflectrm train build-data``)."""
    async with open_engine(engine_config) as engine:
        return await build(engine, pairs, config, out_dir)


def rebuild(judgments: Path, config: BuildConfig, out_dir: Path) -> Stats:
    """Select again from saved judgments (e.g. another mix ratio) without running the model."""
    judged = [judged_from_json(r) for r in read_items(judgments)]
    items, stats = select_items(judged, config, random.Random(config.seed))
    stats = Stats(**{**asdict(stats), "extra": {"config": asdict(config), "from": str(judgments)}})
    write_outputs(out_dir, items, stats)
    return stats
