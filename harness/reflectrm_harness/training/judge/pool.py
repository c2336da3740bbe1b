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
from reflectrm_harness.datasets import Pair
from reflectrm_harness.training.judge.split import prompt_draw, role_by_draw
from reflectrm_harness.training.judge.states import Item, both_orders, interleave, read_file_pairs

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


def _pool_arguments(ap: Any) -> None:
    ap.add_argument(
        "--data",
        type=Path,
        action="append",
        required=True,
        help="a training-pool file (repeat): ../shared/data/train/*.jsonl.gz",
    )
    ap.add_argument(
        "--benchmark",
        type=Path,
        action="append",
        default=[],
        help="a benchmark file (repeat): its prompts are dropped from the pool, and "
        "the states pass samples its groups",
    )


def add_states_parser(commands: Any) -> None:
    p = commands.add_parser(
        "states",
        help="the judge recipe's states pass: a frozen backbone reads the pool's training and "
        "development pairs and benchmark samples in both orders (resumable)",
    )
    _pool_arguments(p)
    p.add_argument("--model", required=True, help="the backbone's checkpoint folder")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--plan-from", type=Path, help="reuse another pass's plan")
    p.add_argument("--limit-pairs", type=int, help="only the plan's first N pairs")
    p.add_argument("--max-prompt-tokens", type=int, default=1024)
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--worker", default="0/1", help="k/n: this process reads pairs k mod n")
    p.set_defaults(func=run_states)


def add_split_parser(commands: Any) -> None:
    p = commands.add_parser(
        "pool-split",
        help="write one role of the judge recipe's split (heldout, dev, train) as a pairs file "
        "`reflectrm eval` reads",
    )
    _pool_arguments(p)
    p.add_argument("--role", choices=("heldout", "dev", "train"), default="heldout")
    p.add_argument(
        "--cap",
        action="append",
        default=[],
        help="SOURCE=N: at most N pairs of a source (a seeded sample), repeatable",
    )
    p.add_argument("--out", type=Path, required=True)
    p.set_defaults(func=run_split)


def run_split(args: Any) -> int:
    import gzip
    import json

    from reflectrm_harness.datasets import pair_to_row

    config = PoolConfig()
    pool = read_pool(args.data, args.benchmark, config)
    caps = {k: int(v) for k, v in (c.split("=", 1) for c in args.cap)}
    rng = random.Random(config.seed)
    rows = []
    for source in sorted(pool.sources):
        pairs = pool.of(source, args.role)
        if source in caps and len(pairs) > caps[source]:
            pairs = rng.sample(pairs, caps[source])
        for p in pairs:
            row = pair_to_row(p)
            row["source"] = source
            rows.append(row)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    opener = gzip.open if args.out.suffix == ".gz" else open
    with opener(args.out, "wt") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    print(f"{len(rows)} {args.role} pairs written to {args.out}")
    print(json.dumps(pool.sources, indent=1))
    return 0


def run_states(args: Any) -> int:
    import json

    from transformers import AutoTokenizer

    from reflectrm.engines.chat import ChatRenderer
    from reflectrm.judging.prompts import get_template, preference_chat
    from reflectrm_harness.training.judge.states import (
        LEAD,
        PLAN,
        StatesConfig,
        load_plan,
        read_states,
        save_plan,
    )

    config = PoolConfig()
    states = StatesConfig(max_prompt_tokens=args.max_prompt_tokens, threads=args.threads)
    pool = read_pool(args.data, args.benchmark, config)
    if not (args.out / PLAN).exists():
        if args.plan_from:
            items = load_plan(args.plan_from)
            info = json.loads((args.plan_from / PLAN).read_text())["info"]
        else:
            tok = AutoTokenizer.from_pretrained(args.model)
            renderer = ChatRenderer(tok)
            template = get_template(states.template_version)
            lead = len(tok.encode(LEAD, add_special_tokens=False))

            def fits(p: Pair) -> bool:
                chat = preference_chat(template, p.conversation, p.chosen, p.rejected)
                return len(renderer.render(chat).token_ids) + lead <= states.max_prompt_tokens

            items, _ = build_plan(pool, args.benchmark, config, fits)
            info = {
                "pool": pool.sources,
                "config": {
                    k: (dict(v) if isinstance(v, Mapping) else v)
                    for k, v in config.__dict__.items()
                },
            }
        if args.limit_pairs:
            items = items[: 2 * args.limit_pairs]
        save_plan(args.out, items, info)
    items = load_plan(args.out)
    named = dict(pool.pairs)
    for group in BENCH_GROUPS:
        for p, _r in bench_pairs(args.benchmark, group):
            named[f"{group}/{p.id}"] = p
    k, n = (int(x) for x in args.worker.split("/"))
    print(read_states(items, named, args.model, args.out, states, worker=(k, n)))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m reflectrm_harness.training.judge.pool`` = ``reflectrm train states``."""
    import argparse

    ap = argparse.ArgumentParser(prog="reflectrm train states")
    commands = ap.add_subparsers(dest="c")
    add_states_parser(commands)
    args = ap.parse_args(["states", *(argv if argv is not None else __import__("sys").argv[1:])])
    return int(args.func(args))


if __name__ == "__main__":
    raise SystemExit(main())
