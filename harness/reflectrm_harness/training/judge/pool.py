"""The judge recipe's pool: its split by prompt, what is dropped, and the states pass's plan.

- **Split**: each pair's prompt (the whole conversation) gets a seeded hash in [0, 1); below
  ``heldout_fraction`` the prompt is held out, below ``heldout_fraction + dev_fraction`` it is a
  development prompt, else a training prompt. The split is a function of the data and the seed
  alone, so it is stated as the seed, the fractions and each file's sha256 (a changed file is
  refused), not as a list of ids.
- **Dropped**: any pair whose prompt (a user turn, whitespace-normalised, case-folded) is a
  prompt of a benchmark file, whatever its role; the count per source is reported.
- **Plan**: a seeded sample of each source's training and development pairs, capped per source,
  and samples of benchmark groups (read up to the first response's end only), interleaved so a
  pass stopped anywhere holds a balanced sample.
"""

from __future__ import annotations

import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reflectrm.checkpoints.files import file_sha256
from reflectrm_harness.datasets import Pair, write_rows
from reflectrm_harness.training.judge.split import prompt_draw, role_by_draw
from reflectrm_harness.training.judge.states import (
    Item,
    StatesConfig,
    both_orders,
    interleave,
    read_file_pairs,
)

LICENCES = {
    "helpsteer2_ratings_pairs": "CC-BY-4.0",
    "pandalm_human_testset": "Apache-2.0",
    "hh_rlhf_harmless_base_test": "MIT",
    "alpaca_eval_lenbal_pairs": "CC-BY-NC-4.0",
    "gpt4llm_comparison_pairs": "CC-BY-NC-4.0",
}


@dataclass(frozen=True)
class PoolConfig:
    seed: int = 2026
    heldout_fraction: float = 0.22
    dev_fraction: float = 0.15
    # pairs per source read by the states pass (both orders each)
    train_caps: Mapping[str, int] = field(
        default_factory=lambda: {
            "alpaca_eval_lenbal_pairs": 600,
            "gpt4llm_comparison_pairs": 300,
            "helpsteer2_ratings_pairs": 250,
            "pandalm_human_testset": 350,
            "hh_rlhf_harmless_base_test": 350,
        }
    )
    dev_caps: Mapping[str, int] = field(
        default_factory=lambda: {
            "alpaca_eval_lenbal_pairs": 150,
            "gpt4llm_comparison_pairs": 80,
            "helpsteer2_ratings_pairs": 80,
            "pandalm_human_testset": 90,
            "hh_rlhf_harmless_base_test": 100,
        }
    )
    bench_per_group: int = 80


def role_of(pair: Pair, config: PoolConfig) -> str:
    """The split rule (``split.role_by_draw``) with the pool's seed and fixed shares."""
    shares = [("heldout", config.heldout_fraction), ("dev", config.dev_fraction)]
    return role_by_draw(prompt_draw(pair, f"judge-split:{config.seed}"), shares)


_SPACE = re.compile(r"\s+")


def normal(text: str) -> str:
    return _SPACE.sub(" ", text).strip().casefold()


def benchmark_prompts(paths: Sequence[Path]) -> set[str]:
    out: set[str] = set()
    for path in paths:
        for pair, _row in read_file_pairs(path):
            out.update(normal(m.content) for m in pair.conversation if m.role == "user")
    return out


def in_benchmark(pair: Pair, prompts: set[str]) -> bool:
    return any(normal(m.content) in prompts for m in pair.conversation if m.role == "user")


def source_name(path: Path) -> str:
    return path.name.split(".")[0]


@dataclass
class Pool:
    pairs: dict[str, Pair]  # by "source/id"
    roles: dict[str, str]
    sources: dict[str, dict[str, Any]]  # per source: file hash, counts, licence

    def of(self, source: str, role: str) -> list[Pair]:
        return [
            p
            for key, p in self.pairs.items()
            if key.startswith(source + "/") and self.roles[key] == role
        ]


def read_pool(paths: Sequence[Path], benchmarks: Sequence[Path], config: PoolConfig) -> Pool:
    bench = benchmark_prompts(benchmarks)
    pairs: dict[str, Pair] = {}
    roles: dict[str, str] = {}
    sources: dict[str, dict[str, Any]] = {}
    for path in paths:
        name = source_name(path)
        counts = {"pairs": 0, "dropped_in_benchmark": 0, "train": 0, "dev": 0, "heldout": 0}
        for pair, _row in read_file_pairs(path):
            counts["pairs"] += 1
            if in_benchmark(pair, bench):
                counts["dropped_in_benchmark"] += 1
                continue
            key = f"{name}/{pair.id}"
            role = role_of(pair, config)
            pairs[key], roles[key] = pair, role
            counts[role] += 1
        sources[name] = {
            "sha256": file_sha256(path),
            "licence": LICENCES.get(name, "unknown"),
            **counts,
        }
    return Pool(pairs, roles, sources)


BENCH_GROUPS: dict[str, tuple[str, Any]] = {
    # group: (file stem, row test)
    "rewardbench-chat": ("rewardbench", lambda r: r.get("section") == "Chat"),
    "rewardbench-chat-hard": ("rewardbench", lambda r: r.get("section") == "Chat Hard"),
    "rm-bench-normal": ("rm-bench", lambda r: r.get("difficulty") == "normal"),
    "rm-bench-hard": ("rm-bench", lambda r: r.get("difficulty") == "hard"),
    "rmb-helpfulness": ("rmb", lambda r: r.get("goal") == "Helpfulness"),
}


def bench_pairs(benchmarks: Sequence[Path], group: str) -> list[tuple[Pair, dict[str, Any]]]:
    stem, test = BENCH_GROUPS[group]
    for path in benchmarks:
        if source_name(path) == stem:
            return [(p, r) for p, r in read_file_pairs(path) if test(r)]
    return []


def build_plan(
    pool: Pool,
    benchmarks: Sequence[Path],
    config: PoolConfig,
    fits: Any = None,
) -> tuple[list[Item], dict[str, Pair]]:
    """The states pass's items (train, dev, benchmark samples), interleaved, and every pair they
    name by "source/id". ``fits(pair) -> bool`` leaves out pairs whose prompt is too long."""
    rng = random.Random(config.seed)
    buckets: list[list[Item]] = []
    named: dict[str, Pair] = {}
    for role, caps in (("train", config.train_caps), ("dev", config.dev_caps)):
        for source, cap in caps.items():
            pairs = [p for p in pool.of(source, role) if fits is None or fits(p)]
            rng.shuffle(pairs)
            bucket: list[Item] = []
            for p in pairs[:cap]:
                named[f"{source}/{p.id}"] = p
                bucket += both_orders(p, source, role, cut=False)
            buckets.append(bucket)
    for group in BENCH_GROUPS:
        rows = bench_pairs(benchmarks, group)
        rows = [(p, r) for p, r in rows if fits is None or fits(p)]
        rng.shuffle(rows)
        bucket = []
        for p, r in rows[: config.bench_per_group]:
            named[f"{group}/{p.id}"] = p
            bucket += both_orders(p, group, "bench", cut=True, subset=str(r.get("subset", "")))
        buckets.append(bucket)
    # a pair's two orders stay together: interleave pairs, not items
    paired = [[b[i : i + 2] for i in range(0, len(b), 2)] for b in buckets]
    items = [it for two in interleave(paired) for it in two]
    return items, named


def role_rows(
    pool: Pool, role: str, caps: Mapping[str, int], config: PoolConfig
) -> list[dict[str, Any]]:
    """The pairs of one role as shared-schema rows (``source`` naming their file), at most
    ``caps[source]`` of a source (a seeded sample): what ``reflectrm train pool-split`` writes."""
    from reflectrm_harness.datasets import pair_to_row

    rng = random.Random(config.seed)
    rows = []
    for source in sorted(pool.sources):
        pairs = pool.of(source, role)
        if source in caps and len(pairs) > caps[source]:
            pairs = rng.sample(pairs, caps[source])
        for p in pairs:
            rows.append({**pair_to_row(p), "source": source})
    return rows


def write_role(
    pool: Pool, role: str, caps: Mapping[str, int], config: PoolConfig, out: Path
) -> int:
    """``role_rows`` written to ``out`` (JSONL, gzip-compressed when it ends in ``.gz``); how
    many pairs."""
    return write_rows(role_rows(pool, role, caps, config), out)


def states_pass(
    data: Sequence[Path],
    benchmarks: Sequence[Path],
    model: str,
    out: Path,
    states: StatesConfig,
    *,
    plan_from: Path | None = None,
    limit_pairs: int | None = None,
    worker: tuple[int, int] = (0, 1),
    progress_bar: bool = True,
) -> dict[str, Any]:
    """``reflectrm train states``: the pool's plan (made once, or another pass's), saved in
    ``out``, then the states pass over it (``states.read_states``)."""
    import json

    from transformers import AutoTokenizer

    from reflectrm.engines.chat import ChatRenderer
    from reflectrm.judging.prompts import get_template, preference_chat
    from reflectrm_harness.training.judge.states import (
        LEAD,
        PLAN,
        load_plan,
        read_states,
        save_plan,
    )

    config = PoolConfig()
    pool = read_pool(data, benchmarks, config)
    if not (out / PLAN).exists():
        if plan_from:
            items = load_plan(plan_from)
            info = json.loads((plan_from / PLAN).read_text())["info"]
        else:
            tok = AutoTokenizer.from_pretrained(model)
            renderer = ChatRenderer(tok)
            template = get_template(states.template_version)
            lead = len(tok.encode(LEAD, add_special_tokens=False))

            def fits(p: Pair) -> bool:
                chat = preference_chat(template, p.conversation, p.chosen, p.rejected)
                return len(renderer.render(chat).token_ids) + lead <= states.max_prompt_tokens

            items, _ = build_plan(pool, benchmarks, config, fits)
            info = {
                "pool": pool.sources,
                "config": {
                    k: (dict(v) if isinstance(v, Mapping) else v)
                    for k, v in config.__dict__.items()
                },
            }
        if limit_pairs:
            items = items[: 2 * limit_pairs]
        save_plan(out, items, info)
    named = dict(pool.pairs)
    for group in BENCH_GROUPS:
        for p, _r in bench_pairs(benchmarks, group):
            named[f"{group}/{p.id}"] = p
    return read_states(
        load_plan(out), named, model, out, states, worker=worker, progress_bar=progress_bar
    )
