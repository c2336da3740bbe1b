"""One GRPO cohort of 8, as OpenRLHF sends it, on the real service: what each rollout is paid.

One everyday question and 8 rollouts: 4 that do what was asked (two full recipes, a short
correct one, a correct one with a needless preamble) and 4 that do not (a refusal, "I don't
know.", an evasion, an off-topic answer). The run starts ``reflectrm serve`` with ``--model``
(a model setting: ``default``, ``qwen05b``, a folder) on a free loopback port, posts the 8
samples as separate ``POST /get_reward?group_size=8`` calls at once in OpenRLHF's body, and
writes each rollout's reward, whether it does what was asked, and how many helpful rollouts
outrank every unhelpful one, to ``--out`` (``cohort_example.json``, ``cohort_example.md``).
The service is stopped by its pid (SIGINT first).

    env PYTHONPATH=service .venv/bin/python -m studies.cohort_example --model qwen05b \
        --out docs/records/cohort-of-8-rewards/qwen05b
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx

if __package__ in (None, ""):  # run as a script: make the repo importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from loadtests.cohort_run import chat_prompt, openrlhf_body, reward_fields
from loadtests.common.process import RunError, served

QUESTION = "How do I boil an egg so the yolk is firm?"
# (rollout, does it do what was asked)
ROLLOUTS: tuple[tuple[str, bool], ...] = (
    (
        "Put the egg in a pan and cover it with cold water. Bring it to a boil, then turn the "
        "heat down and simmer for 10 to 12 minutes. Move the egg to cold water for a few "
        "minutes before peeling: the yolk will be firm all the way through.",
        True,
    ),
    ("I don't know.", False),
    (
        "Lower the egg into boiling water with a spoon and keep it at a gentle boil for about "
        "11 minutes. Then cool it under cold running water; the white and the yolk will both "
        "be set.",
        True,
    ),
    ("I'm sorry, but I can't help with that.", False),
    ("Boil it for about 11 minutes, then cool it in cold water.", True),
    ("It depends. There are many ways to cook eggs; you should look it up.", False),
    (
        "Good question! Eggs are a great source of protein. For a firm yolk, simmer the egg "
        "for 10 to 12 minutes and then put it in cold water.",
        True,
    ),
    (
        "The Eiffel Tower is in Paris and was finished in 1889 for the World's Fair.",
        False,
    ),
)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--model", default="default", help="the REFLECTRM_MODEL to serve")
    p.add_argument("--url", help="a running service (default: start one)")
    p.add_argument("--strategy", default="round_robin")
    p.add_argument("--mode", default="margin")
    p.add_argument("--debias", default="swap")
    p.add_argument("--max-tokens", type=int, default=160)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--ready-timeout", type=float, default=900.0)
    return p.parse_args(argv)


def outranked(rewards: Sequence[float], helpful: Sequence[bool]) -> dict[str, Any]:
    """How many helpful rollouts score above every unhelpful one, and the pairs (helpful,
    unhelpful) ordered right (a tie is half)."""
    good = [r for r, h in zip(rewards, helpful, strict=True) if h]
    bad = [r for r, h in zip(rewards, helpful, strict=True) if not h]
    pairs = [1.0 if g > b else 0.5 if g == b else 0.0 for g in good for b in bad]
    return {
        "helpful_above_every_unhelpful": sum(1 for g in good if all(g > b for b in bad)),
        "helpful": len(good),
        "pairs_ordered_right": sum(pairs) / len(pairs) if pairs else None,
        "every_helpful_above_every_unhelpful": bool(good and bad and min(good) > max(bad)),
    }


async def measure(url: str, args: argparse.Namespace) -> dict[str, Any]:
    params = {
        "group_size": len(ROLLOUTS),
        "strategy": args.strategy,
        "mode": args.mode,
        "debias": args.debias,
        "max_tokens": args.max_tokens,
        "seed": args.seed,
    }
    prompt = chat_prompt(QUESTION)
    async with httpx.AsyncClient(base_url=url, timeout=1800) as http:

        async def one(text: str) -> httpx.Response:
            return await http.post("/get_reward", params=params, json=openrlhf_body(prompt, text))

        replies = await asyncio.gather(*(one(text) for text, _ in ROLLOUTS))
    rows = []
    for (text, helpful), r in zip(ROLLOUTS, replies, strict=True):
        row: dict[str, Any] = {"response": text, "helpful": helpful, "status": r.status_code}
        if r.status_code == 200:
            row.update(reward_fields(r.json()))
        else:
            row["detail"] = r.text[:300]
        rows.append(row)
    answered = [r for r in rows if r["status"] == 200]
    report: dict[str, Any] = {"question": QUESTION, "params": params, "rollouts": rows}
    if len(answered) == len(rows):
        report["ranking"] = outranked([r["reward"] for r in rows], [r["helpful"] for r in rows])
    return report


def markdown(report: Mapping[str, Any]) -> str:
    p = report["params"]
    lines = [
        f"# A cohort of 8 on `{report['model']}`",
        "",
        f"`{report['command']}`",
        "",
        f"Question: *{report['question']}* 8 per-sample `/get_reward?group_size=8` calls at "
        f"once; strategy {p['strategy']}, mode {p['mode']}, debias {p['debias']}, max_tokens "
        f"{p['max_tokens']}, seed {p['seed']}.",
        "",
        "| rollout | does what was asked | reward |",
        "|---|:---:|---:|",
    ]
    for r in sorted(report["rollouts"], key=lambda r: -r.get("reward", -1.0)):
        text = r["response"] if len(r["response"]) <= 90 else r["response"][:87] + "..."
        reward = f"{r['reward']:.3f}" if "reward" in r else f"HTTP {r['status']}"
        lines.append(f"| {text} | {'yes' if r['helpful'] else 'no'} | {reward} |")
    rank = report.get("ranking")
    if rank:
        right = rank["pairs_ordered_right"]
        lines += [
            "",
            f"Helpful rollouts above every unhelpful one: {rank['helpful_above_every_unhelpful']}"
            f" of {rank['helpful']}; (helpful, unhelpful) pairs ordered right: {100 * right:.1f}%.",
        ]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {
        "command": " ".join(["python -m studies.cohort_example", *(argv or sys.argv[1:])]),
        "model": args.model,
        "machine": {"cpus": os.cpu_count()},
    }
    settings = {
        "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "service"),
        "REFLECTRM_MODEL": args.model,
        "REFLECTRM_KV_CACHE_GIB": "2",
        "REFLECTRM_MAX_MODEL_LEN": "4096",
        "REFLECTRM_SWAP_CHECK_FRACTION": "0",
    }
    try:
        with served(args.url, args.out / "service.log", settings, args.ready_timeout) as url:
            report.update(asyncio.run(measure(url, args)))
    except RunError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    (args.out / "cohort_example.json").write_text(json.dumps(report, indent=2) + "\n")
    (args.out / "cohort_example.md").write_text(markdown(report))
    print(markdown(report))
    return 0 if all(r["status"] == 200 for r in report["rollouts"]) else 1


if __name__ == "__main__":
    raise SystemExit(main())
