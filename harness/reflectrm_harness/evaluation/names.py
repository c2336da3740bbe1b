"""The benchmarks the harness knows: their names, display names and accepted spellings.

A leaf: loading (``benchmarks``), hub conversion (``hub``), scoring and the report all name
benchmarks through it.
"""

from __future__ import annotations

from reflectrm_harness.datasets import DatasetError

REWARDBENCH = "rewardbench"
RMBENCH = "rm-bench"
RMB = "rmb"
PPE = "ppe"
JUDGEBENCH = "judgebench"

# Display order: the paper's main table, then JudgeBench (consistency only in the paper).
BENCHMARKS = (REWARDBENCH, RMBENCH, RMB, PPE, JUDGEBENCH)
# The paper's headline average is the plain mean of these four.
MAIN_BENCHMARKS = (REWARDBENCH, RMBENCH, RMB, PPE)
DISPLAY_NAMES = {
    REWARDBENCH: "RewardBench",
    RMBENCH: "RM-Bench",
    RMB: "RMB",
    PPE: "PPE-Pref",
    JUDGEBENCH: "JudgeBench",
}
_ALIASES = {
    "rewardbench": REWARDBENCH,
    "reward-bench": REWARDBENCH,
    "rm-bench": RMBENCH,
    "rmbench": RMBENCH,
    "rmb": RMB,
    "ppe": PPE,
    "ppe-preference": PPE,
    "ppe-human-preference": PPE,
    "judgebench": JUDGEBENCH,
}


def _key(name: str) -> str:
    return name.strip().lower().replace("_", "-")


def canonical_name(name: str) -> str:
    if _key(name) not in _ALIASES:
        known = ", ".join(BENCHMARKS)
        raise DatasetError(f"unknown benchmark {name!r}; known: {known}")
    return _ALIASES[_key(name)]


def is_benchmark_name(name: str) -> bool:
    return _key(name) in _ALIASES
