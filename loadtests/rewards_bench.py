"""Reward throughput where trainers feel it, side by side in one run (``make bench
ARGS="rewards --pairs runs/heldout.jsonl"``):

(a) **Pooled pairs** of the held-out split, each judged in both orders, by
    - ``floor``: raw ``AsyncLLM`` in this process making the minimal requests of a pooled margin
      judgment and nothing else: the two verdict reads (one token, the two digits' log-probs by
      token id) and one likelihood pass per response (prompt log-probs from the response on,
      the prefix cache read), all four at once, with the prompts the service's own ``Judge``
      renders;
    - ``margin``: ``POST /v1/judge`` of ``reflectrm serve`` (mode margin, debias swap);
    - ``single``: the same service, mode single, debias swap.
(b) **GRPO steps**, 8 prompts x 8 completions each (the base policy's own sampled completions to
    the policy example's training questions, made before the engines start), rewarded
    - ``api``: eight ``POST /v1/rewards`` at once, one per prompt;
    - ``trl``: one call of ``reflectrm.integrations.trl.ReflectRMReward`` with the step's 64
      completions, as TRL's ``GRPOTrainer`` makes it;
    for each ``--strategy``; engine work from the service's ``/metrics`` before and after.

No contender rides on another's prefix cache or reply cache: the floor has an engine of its own,
opened with the service's engine settings, and judges the same pairs as ``margin``; ``single``
judges pairs of its own, and every GRPO step prompts of its own. Within a round every
contender runs once, in an order that alternates between rounds, so a slow spell of the machine
falls on all of them alike; the two engines never work at the same time.

The output folder keeps ``records.jsonl`` (a line per pair and per step), ``summary.json``,
``report.md`` (``loadtests/rewards_report.py``; docs/performance.md's tables are
``scripts/rewards_bench_results.py``'s), ``completions.json`` and the service's log.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import statistics
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from loadtests.common.metrics import parse_metrics
from loadtests.common.process import RunError, served
from loadtests.rewards_report import render
from reflectrm_harness.datasets import Pair, pair_from_row, read_rows

REPO = Path(__file__).resolve().parents[1]
PAIR_CONTENDERS = ("floor", "margin", "single")
STEP_CONTENDERS = ("api", "trl")
WORK = (
    "reflectrm_engine_requests_total",
    "reflectrm_prompt_tokens_total",
    "reflectrm_cached_prompt_tokens_total",
)
# The service as the run measures it: the judgments are the only engine work, and nothing is
# refused for want of a slot (a step's 64 rewards at once).
SERVICE_FIXED = {
    "REFLECTRM_SWAP_CHECK_FRACTION": "0",
    "REFLECTRM_MAX_QUEUED_JUDGMENTS": "1024",
}


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m loadtests.bench rewards",
        description="Pooled margin judgments beside the raw engine's floor and single mode, and "
        "GRPO-shaped reward steps through /v1/rewards and the TRL adapter, in one run.",
    )
    p.add_argument("--pairs", default="runs/heldout.jsonl", help="held-out pairs (JSONL[.gz])")
    p.add_argument("--pairs-per-round", type=int, default=8)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--concurrency", type=int, default=8, help="pooled pairs in flight")
    p.add_argument("--steps", type=int, default=2, help="GRPO steps per contender and strategy")
    p.add_argument("--prompts", type=int, default=8, help="prompts per GRPO step")
    p.add_argument("--group", type=int, default=8, help="completions per prompt")
    p.add_argument(
        "--strategy", action="append", help="rewards strategy (default reference, pivot)"
    )
    p.add_argument("--completion-tokens", type=int, default=48)
    p.add_argument("--policy", help="the policy folder (default: the policy example's)")
    p.add_argument("--completions", help="completions.json of an earlier run, reused")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", help="output folder (default runs/bench-rewards/<time>)")
    p.add_argument("--service-url", help="a running service to measure instead of starting one")
    p.add_argument("--ready-timeout", type=float, default=600.0)
    args = p.parse_args(argv)
    args.strategy = args.strategy or ["reference", "pivot"]
    if min(args.pairs_per_round, args.rounds, args.concurrency, args.prompts, args.group) < 1:
        p.error("counts must be positive")
    if args.group < 2:
        p.error("--group must be at least 2")
    return args


# --- the pairs ----------------------------------------------------------------------------------


def draw_pairs(path: Path, args: argparse.Namespace) -> dict[tuple[str, int], list[Pair]]:
    """Each round's pairs, from one shuffled draw of the file: ``floor`` and ``margin`` judge the
    same pairs (each on its own engine, so neither reads the other's cache), ``single`` others
    (its judging prompt is the start of margin's, which the service's cache would keep)."""
    if not path.is_file():
        raise RunError(
            f"{path} not found: make the held-out split with `reflectrm train pool-split ... "
            "--role heldout` (docs/results.md gives the command) or pass --pairs"
        )
    pairs = [pair_from_row(row, where=where, default_id=where) for where, row in read_rows(path)]
    random.Random(args.seed).shuffle(pairs)
    need = 2 * args.rounds * args.pairs_per_round
    if len(pairs) < need:
        raise RunError(f"{path} has {len(pairs)} pairs; this run needs {need}")
    out: dict[tuple[str, int], list[Pair]] = {}
    it = iter(pairs)
    for r in range(args.rounds):
        out[("floor", r)] = out[("margin", r)] = [next(it) for _ in range(args.pairs_per_round)]
        out[("single", r)] = [next(it) for _ in range(args.pairs_per_round)]
    return out


@dataclass
class PairRecord:
    kind: str
    contender: str
    round: int
    pair_id: str
    seconds: float
    engine_requests: int
    prompt_tokens: int
    cached_prompt_tokens: int
    verdict_prompt_tokens: int  # the two orders' verdict prompts, rendered here for every pair
    winner: int | None
    error: str | None = None


class Floor:
    """The minimal requests of one pooled margin judgment, straight to ``AsyncLLM``."""

    def __init__(self, llm: Any, judge: Any) -> None:
        self.llm = llm
        self.judge = judge

    def requests(self, pair: Pair) -> list[tuple[Any, Any]]:
        from vllm import SamplingParams, TokensPrompt
        from vllm.sampling_params import RequestOutputKind

        from reflectrm.judging.judge import swapped
        from reflectrm.judging.prompts import answer_chat

        spec = pair_spec(pair)
        out = []
        for s in (spec, swapped(spec)):
            prompt = self.judge.prepare(s).prompt
            ids = list(self.judge.stage1_spec(s).logprob_token_ids)
            params = SamplingParams(
                n=1,
                temperature=0.0,
                max_tokens=1,
                logprob_token_ids=ids,
                detokenize=False,
                output_kind=RequestOutputKind.FINAL_ONLY,
            )
            out.append((TokensPrompt(prompt_token_ids=list(prompt.token_ids)), params))
        for response in (pair.chosen, pair.rejected):
            # The whole answer chat is sent; the engine reads what it can of it from its prefix
            # cache and computes the log-probs of the rest (as the service's pass does).
            full = self.judge.engine.render_chat(answer_chat(pair.conversation, response))
            params = SamplingParams(
                n=1,
                temperature=0.0,
                max_tokens=1,
                prompt_logprobs=0,
                skip_reading_prefix_cache=False,
                detokenize=False,
                output_kind=RequestOutputKind.FINAL_ONLY,
            )
            out.append((TokensPrompt(prompt_token_ids=list(full.token_ids)), params))
        return out

    def verdict_prompt_tokens(self, pair: Pair) -> int:
        """The two orders' verdict prompts' tokens: what a pooled verdict cannot do without."""
        from reflectrm.judging.judge import swapped

        spec = pair_spec(pair)
        return sum(self.judge.prepare(s).prompt.num_tokens for s in (spec, swapped(spec)))

    async def judge_pair(self, pair: Pair, request_id: str) -> tuple[int, int, int]:
        """(engine requests, prompt tokens, cached prompt tokens) of the pair's minimal work."""
        reqs = await asyncio.to_thread(self.requests, pair)

        async def one(k: int, prompt: Any, params: Any) -> tuple[int, int]:
            final = None
            async for o in self.llm.generate(prompt, params, f"{request_id}-{k}"):
                final = o
            if final is None:
                raise RunError(f"the engine returned nothing for {request_id}-{k}")
            return len(prompt["prompt_token_ids"]), int(final.num_cached_tokens or 0)

        done = await asyncio.gather(*(one(k, p, s) for k, (p, s) in enumerate(reqs)))
        return len(done), sum(d[0] for d in done), sum(d[1] for d in done)


def pair_spec(pair: Pair) -> Any:
    from reflectrm.judging.types import JudgmentSpec

    return JudgmentSpec(pair.conversation, (pair.chosen, pair.rejected), mode="margin")


def judge_body(pair: Pair, mode: str) -> dict[str, Any]:
    return {
        "messages": [{"role": m.role, "content": m.content} for m in pair.conversation],
        "responses": [pair.chosen, pair.rejected],
        "mode": mode,
        "debias": "swap",
        "return_trace": False,
    }


async def run_pairs(
    contender: str,
    rnd: int,
    pairs: Sequence[Pair],
    concurrency: int,
    floor: Floor,
    client: httpx.AsyncClient,
) -> tuple[float, list[PairRecord]]:
    """One contender's pairs, ``concurrency`` in flight: (seconds, one record per pair). The
    verdict prompts are rendered and counted before the clock starts."""
    queue = list(enumerate(pairs))
    counted = await asyncio.to_thread(lambda: [floor.verdict_prompt_tokens(p) for p in pairs])
    records: list[PairRecord] = []

    async def one(k: int, pair: Pair) -> None:
        rid = f"{contender}-r{rnd}-{k}"
        verdict_tokens = counted[k]
        started = time.monotonic()
        winner, error = None, None
        try:
            if contender == "floor":
                req, prompt, cached = await floor.judge_pair(pair, rid)
            else:
                r = await client.post(
                    "/v1/judge", json=judge_body(pair, contender), headers={"x-request-id": rid}
                )
                if r.status_code != 200:
                    raise RunError(f"HTTP {r.status_code}: {r.text[:300]}")
                data = r.json()
                u = data["usage"]
                req, prompt, cached = (
                    u["engine_requests"],
                    u["prompt_tokens"],
                    u["cached_prompt_tokens"],
                )
                winner = data["winner"]
        except Exception as exc:  # recorded and counted: the run reports failures
            req = prompt = cached = 0
            error = f"{type(exc).__name__}: {exc}"[:300]
        records.append(
            PairRecord(
                "pair",
                contender,
                rnd,
                pair.id,
                time.monotonic() - started,
                req,
                prompt,
                cached,
                verdict_tokens,
                winner,
                error,
            )
        )

    async def worker() -> None:
        while queue:
            k, pair = queue.pop(0)
            await one(k, pair)

    started = time.monotonic()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return time.monotonic() - started, records


# --- the GRPO steps -----------------------------------------------------------------------------


def make_groups(args: argparse.Namespace, out: Path) -> list[dict[str, Any]]:
    """The groups every step draws from: a training question and the base policy's sampled
    completions to it (``--completions`` reuses an earlier run's)."""
    from examples.policy_grpo import default_policy, generate, make_questions

    steps = args.steps * len(args.strategy) * len(STEP_CONTENDERS)
    need = steps * args.prompts
    path = out / "completions.json"
    if args.completions:
        groups = json.loads(Path(args.completions).read_text())
    else:
        questions = make_questions(args.seed)["train"][:need]
        if len(questions) < need:
            raise RunError(
                f"the policy example has {len(questions)} training questions; {need} needed"
            )
        policy = args.policy or default_policy()
        print(f"sampling {need} x {args.group} completions of {policy} ...", flush=True)
        texts = generate(policy, None, questions, args.completion_tokens, args.group, args.seed)
        groups = [
            {
                "question": q.question,
                "reference": q.reference,
                "completions": texts[i * args.group : (i + 1) * args.group],
            }
            for i, q in enumerate(questions)
        ]
    if len(groups) < need or any(len(g["completions"]) != args.group for g in groups[:need]):
        raise RunError(f"the completions do not make {need} groups of {args.group}")
    path.write_text(json.dumps(groups, indent=1) + "\n")
    return groups[:need]


async def metric_totals(client: httpx.AsyncClient) -> dict[str, float]:
    r = await client.get("/metrics")
    r.raise_for_status()
    return parse_metrics(r.text, by="name", names=WORK)


async def run_step(
    contender: str,
    strategy: str,
    step: int,
    groups: Sequence[Mapping[str, Any]],
    client: httpx.AsyncClient,
    url: str,
) -> dict[str, Any]:
    """One GRPO step's rewards: seconds, rewards given, and the engine work it took."""
    from reflectrm.integrations.trl import ReflectRMReward

    before = await metric_totals(client)
    started = time.monotonic()
    error = None
    rewards: list[float | None] = []
    try:
        if contender == "api":

            async def one(g: Mapping[str, Any]) -> list[float | None]:
                body: dict[str, Any] = {
                    "prompt": g["question"],
                    "completions": g["completions"],
                    "strategy": strategy,
                }
                if strategy == "reference":
                    body["reference"] = g["reference"]
                r = await client.post("/v1/rewards", json=body)
                if r.status_code != 200:
                    raise RunError(f"HTTP {r.status_code}: {r.text[:300]}")
                return list(r.json()["rewards"])

            for part in await asyncio.gather(*(one(g) for g in groups)):
                rewards += part
        else:
            reward = ReflectRMReward(url, strategy=strategy)
            prompts = [
                [{"role": "user", "content": g["question"]}]
                for g in groups
                for _ in g["completions"]
            ]
            completions = [
                [{"role": "assistant", "content": c}] for g in groups for c in g["completions"]
            ]
            references = [g["reference"] for g in groups for _ in g["completions"]]
            rewards = await reward(prompts=prompts, completions=completions, reference=references)
    except Exception as exc:
        error = f"{type(exc).__name__}: {exc}"[:300]
    seconds = time.monotonic() - started
    after = await metric_totals(client)
    work = {k.removeprefix("reflectrm_").removesuffix("_total"): after[k] - before[k] for k in WORK}
    return {
        "kind": "step",
        "contender": contender,
        "strategy": strategy,
        "step": step,
        "seconds": seconds,
        "completions": sum(len(g["completions"]) for g in groups),
        "rewards": sum(r is not None for r in rewards),
        **{k: int(v) for k, v in work.items()},
        "error": error,
    }


# --- the run ------------------------------------------------------------------------------------


async def measure(args: argparse.Namespace, out: Path) -> dict[str, Any]:
    from reflectrm.engines.factory import resolve
    from reflectrm.engines.vllm_engine import VLLMEngine, engine_args, shut_down
    from reflectrm.judging.judge import Judge
    from reflectrm.settings import Settings

    pairs = draw_pairs(Path(args.pairs), args)
    groups = make_groups(args, out)
    settings = Settings()
    config = resolve(settings.engine_config())  # the service's checkpoint folder
    log_records = (out / "records.jsonl").open("w")
    run: dict[str, Any] = {
        "argv": args.argv,
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "cpus": os.cpu_count(),
        "model": config.served_model_name or Path(config.model).name,
        "pairs_file": args.pairs,
        "omp_bind": os.environ.get("VLLM_CPU_OMP_THREADS_BIND", "auto"),
    }
    log_records.write(json.dumps({"kind": "run", **run}) + "\n")
    from vllm.v1.engine.async_llm import AsyncLLM

    llm = await asyncio.to_thread(AsyncLLM.from_engine_args, engine_args(config))
    try:
        tokenizer = llm.get_tokenizer()
        engine = VLLMEngine(llm, tokenizer, run["model"], int(llm.model_config.max_model_len))
        floor = Floor(llm, Judge(engine, settings.judge_config()))
        env = {**SERVICE_FIXED}
        with served(args.service_url, out / "service.log", env, args.ready_timeout, run) as url:
            async with httpx.AsyncClient(base_url=url, timeout=600.0) as client:
                # Warm-up: one built-in pair each, not counted (the first requests pay for
                # compiling and allocating).
                await warm_up(floor, client)
                rows: list[dict[str, Any]] = []
                for r in range(args.rounds):
                    order = list(PAIR_CONTENDERS) if r % 2 == 0 else list(reversed(PAIR_CONTENDERS))
                    for c in order:
                        seconds, recs = await run_pairs(
                            c, r, pairs[(c, r)], args.concurrency, floor, client
                        )
                        row = {"kind": "round", "contender": c, "round": r, "seconds": seconds}
                        for rec in recs:
                            log_records.write(json.dumps(asdict(rec)) + "\n")
                        log_records.write(json.dumps(row) + "\n")
                        log_records.flush()
                        rows += [row, *(asdict(x) for x in recs)]
                        print(f"round {r} {c}: {len(recs)} pairs in {seconds:.1f} s", flush=True)
                it = iter(groups)
                for s in range(args.steps):
                    for k, strategy in enumerate(args.strategy):
                        order = (
                            list(STEP_CONTENDERS)
                            if (s + k) % 2 == 0
                            else list(reversed(STEP_CONTENDERS))
                        )
                        for c in order:
                            step_groups = [next(it) for _ in range(args.prompts)]
                            row = await run_step(c, strategy, s, step_groups, client, url)
                            log_records.write(json.dumps(row) + "\n")
                            log_records.flush()
                            rows.append(row)
                            print(
                                f"step {s} {strategy} {c}: {row['rewards']} rewards in "
                                f"{row['seconds']:.1f} s, {row['engine_requests']} requests",
                                flush=True,
                            )
    finally:
        shut_down(llm)
        log_records.close()
    run["pairs_per_round"], run["rounds"], run["concurrency"] = (
        args.pairs_per_round,
        args.rounds,
        args.concurrency,
    )
    run["prompts"], run["group"] = args.prompts, args.group
    return {"run": run, "summary": summarize(rows)}


async def warm_up(floor: Floor, client: httpx.AsyncClient) -> None:
    from reflectrm.judging.types import Message

    pair = Pair(
        id="warm-up",
        conversation=(Message("user", "Name a colour of the sky."),),
        chosen="Blue.",
        rejected="Green.",
    )
    await floor.judge_pair(pair, "warm-floor")
    for mode in ("margin", "single"):
        r = await client.post("/v1/judge", json=judge_body(pair, mode))
        if r.status_code != 200:
            raise RunError(f"the warm-up judgment failed: HTTP {r.status_code}: {r.text[:300]}")


def summarize(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Per contender: pooled pairs per second (overall and per round), engine work per pair;
    per step contender and strategy: rewards per second and engine work per reward."""
    pairs_out: dict[str, Any] = {}
    for c in PAIR_CONTENDERS:
        recs = [x for x in rows if x["kind"] == "pair" and x["contender"] == c]
        rounds = {
            x["round"]: x["seconds"] for x in rows if x["kind"] == "round" and x["contender"] == c
        }
        ok = [x for x in recs if x["error"] is None]
        n = max(1, len(ok))
        per_round = {
            r: sum(1 for x in ok if x["round"] == r) / s for r, s in sorted(rounds.items())
        }
        pairs_out[c] = {
            "pairs": len(recs),
            "failed": len(recs) - len(ok),
            "seconds": sum(rounds.values()),
            "pairs_per_s": len(ok) / sum(rounds.values()) if rounds else 0.0,
            "pairs_per_s_by_round": per_round,
            "engine_requests": sum(x["engine_requests"] for x in ok) / n,
            "prompt_tokens": sum(x["prompt_tokens"] for x in ok) / n,
            "computed_prompt_tokens": sum(
                x["prompt_tokens"] - x["cached_prompt_tokens"] for x in ok
            )
            / n,
            "verdict_prompt_tokens": sum(x["verdict_prompt_tokens"] for x in ok) / n,
            "latency_s_median": statistics.median([x["seconds"] for x in ok]) if ok else None,
        }
    steps_out: dict[str, Any] = {}
    for x in rows:
        if x["kind"] != "step":
            continue
        s = steps_out.setdefault(
            f"{x['contender']}/{x['strategy']}",
            {
                "steps": 0,
                "failed": 0,
                "seconds": 0.0,
                "completions": 0,
                "rewards": 0,
                "engine_requests": 0,
                "prompt_tokens": 0,
                "cached_prompt_tokens": 0,
            },
        )
        s["steps"] += 1
        s["failed"] += x["error"] is not None
        for k in (
            "seconds",
            "completions",
            "rewards",
            "engine_requests",
            "prompt_tokens",
            "cached_prompt_tokens",
        ):
            s[k] += x[k]
    for s in steps_out.values():
        n = max(1, s["rewards"])
        s["rewards_per_s"] = s["rewards"] / s["seconds"] if s["seconds"] else 0.0
        s["requests_per_reward"] = s["engine_requests"] / n
        s["computed_prompt_tokens_per_reward"] = (
            s["prompt_tokens"] - s["cached_prompt_tokens"]
        ) / n
    return {"pairs": pairs_out, "steps": steps_out}


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    args.argv = ["rewards", *(sys.argv[1:] if argv is None else argv)]
    # Stopped as a background job (SIGINT ignored) or by SIGTERM: end as on Ctrl-C, so that the
    # service and the floor's engine are stopped in order.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _interrupt)
    out = (
        Path(args.out)
        if args.out
        else REPO / "runs" / "bench-rewards" / time.strftime("%Y%m%d-%H%M%S")
    )
    out.mkdir(parents=True, exist_ok=True)
    try:
        result = asyncio.run(measure(args, out))
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except (RunError, FileNotFoundError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    (out / "summary.json").write_text(json.dumps(result, indent=2) + "\n")
    report = render(result)
    (out / "report.md").write_text(report)
    print(report)
    print(f"output: {out}")
    failed = sum(c["failed"] for c in result["summary"]["pairs"].values()) + sum(
        s["failed"] for s in result["summary"]["steps"].values()
    )
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
