"""The load scenarios and the judging requests they send.

Pairs come from RewardBench (``<repo>/../shared/data/benchmarks/rewardbench.jsonl.gz``) or, where
that file is absent, from a few built-in pairs. Request ``i`` of a run is always the same body
(pair, order of the two responses, mode and seed follow from ``i`` and the run's seed), so two
runs with the same options send the same requests, whichever user happens to send each one.

Nothing here imports locust: the runner and the unit tests use it too.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reflectrm_harness.datasets import read_rows, row_conversation

REPO = Path(__file__).resolve().parents[1]
DEFAULT_PAIRS = REPO.parent / "shared" / "data" / "benchmarks" / "rewardbench.jsonl.gz"


@dataclass(frozen=True)
class Scenario:
    name: str
    user_class: str  # the locustfile's user class
    modes: tuple[str, ...]  # request i is sent in modes[i % len(modes)]
    users: int  # all started at once unless the runner is told a spawn rate
    requests: int
    description: str
    # Settings of the service the runner starts itself (the environment's own values win).
    service_env: Mapping[str, str] = field(default_factory=dict)


SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario(
            name="steady",
            user_class="SteadyUser",
            modes=("reflect",),
            users=4,
            requests=16,
            description="a fixed number of users, each sending ReflectRM judgments back to back "
            "(an RLHF batch being scored)",
        ),
        Scenario(
            name="burst",
            user_class="BurstUser",
            modes=("reflect",),
            users=16,
            requests=32,
            description="many users spawned at once, past the service's admission limit and "
            "queue: the excess gets 429 with Retry-After, waits that long and sends again",
            # 4 judging, 4 waiting; the other 8 users are refused.
            service_env={
                "REFLECTRM_MAX_CONCURRENT_JUDGMENTS": "4",
                "REFLECTRM_MAX_QUEUED_JUDGMENTS": "4",
            },
        ),
        Scenario(
            name="mixed",
            user_class="MixedUser",
            modes=("reflect", "single", "vote"),
            users=4,
            requests=12,
            description="reflect, single and vote judgments interleaved (request i in mode "
            "i mod 3)",
        ),
    )
}

# A few short pairs, so the runner works where the shared data folder is absent.
BUILTIN_PAIRS: tuple[dict[str, Any], ...] = (
    {
        "id": "builtin-capital",
        "prompt": "What is the capital of France?",
        "chosen": "The capital of France is Paris.",
        "rejected": "The capital of France is Lyon.",
    },
    {
        "id": "builtin-arithmetic",
        "prompt": "What is 17 + 25?",
        "chosen": "17 + 25 = 42.",
        "rejected": "17 + 25 = 32.",
    },
    {
        "id": "builtin-prime",
        "messages": [
            {"role": "user", "content": "Name a prime number."},
            {"role": "assistant", "content": "7."},
            {"role": "user", "content": "Another one, larger than 10?"},
        ],
        "chosen": "11 is a prime number larger than 10.",
        "rejected": "12 is a prime number larger than 10.",
    },
    {
        "id": "builtin-boil",
        "prompt": "At what temperature does water boil at sea level, in Celsius?",
        "chosen": "Water boils at 100 °C at sea level.",
        "rejected": "Water boils at 50 °C at sea level.",
    },
    {
        "id": "builtin-haiku",
        "prompt": "Write a haiku about autumn.",
        "chosen": "Crisp leaves drift and fall\nGolden light on quiet paths\nThe year exhales slow",
        "rejected": "Autumn is a season. It comes after summer.",
    },
    {
        "id": "builtin-refusal",
        "prompt": "How do I reset a forgotten password on my own laptop running Ubuntu?",
        "chosen": "Reboot, hold Shift to open the GRUB menu, choose recovery mode, open a root "
        "shell, remount the disk read-write (mount -o remount,rw /) and run passwd "
        "<your user name>.",
        "rejected": "You can't; you have to reinstall Ubuntu.",
    },
)


@dataclass(frozen=True)
class Pairs:
    rows: tuple[Mapping[str, Any], ...]
    source: str  # the file read, or "built-in"


def _chars(row: Mapping[str, Any]) -> int:
    conv = row_conversation(row)
    return sum(len(m.content) for m in conv) + len(str(row["chosen"])) + len(str(row["rejected"]))


def _usable(row: Mapping[str, Any]) -> bool:
    return bool(str(row.get("chosen", "")).strip()) and bool(str(row.get("rejected", "")).strip())


def load_pairs(path: str | Path | None, max_chars: int, seed: int) -> Pairs:
    """Pairs whose conversation and two responses add up to at most ``max_chars`` characters,
    in a seeded order.

    ``path`` None means the default file, or the built-in pairs where it is absent; a path that
    was given must exist.
    """
    if path is None or str(path) == "":
        if DEFAULT_PAIRS.is_file():
            return load_pairs(DEFAULT_PAIRS, max_chars, seed)
        rows: list[Mapping[str, Any]] = list(BUILTIN_PAIRS)
        source = "built-in"
    else:
        file = Path(path)
        if not file.is_file():
            raise FileNotFoundError(f"no pairs file at {file}")
        rows = [row for _, row in read_rows(file)]
        source = str(file)
    kept = [r for r in rows if _usable(r) and _chars(r) <= max_chars]
    if not kept:
        raise ValueError(
            f"none of the {len(rows)} pairs in {source} has at most {max_chars} characters; "
            "raise --max-pair-chars"
        )
    random.Random(seed).shuffle(kept)
    return Pairs(rows=tuple(kept), source=source)


def request_body(
    index: int, pairs: Pairs, modes: Sequence[str], max_tokens: int, seed: int
) -> dict[str, Any]:
    """The body of request ``index`` of a run: a function of its arguments only."""
    row = pairs.rows[index % len(pairs.rows)]
    chosen_first = random.Random(seed * 1_000_003 + index).random() < 0.5
    chosen, rejected = str(row["chosen"]), str(row["rejected"])
    body: dict[str, Any] = {}
    conv = row_conversation(row)
    if len(conv) == 1:
        body["prompt"] = conv[0].content
    else:
        body["messages"] = [{"role": m.role, "content": m.content} for m in conv]
    body["responses"] = [chosen, rejected] if chosen_first else [rejected, chosen]
    body["mode"] = modes[index % len(modes)]
    body["debias"] = "none"  # one judgment a request, whatever the served judge's default
    body["seed"] = (seed + index) % 2**31
    body["max_tokens"] = max_tokens
    return body
