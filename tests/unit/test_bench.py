"""The benchmark's parts that need no engine: its plan, the client-side two-stage judgment (the
same verdicts as the service's judge on the same outputs), the peer's completions requests and
replies, the service contender on the app, and the report's arithmetic."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import httpx
import pytest

from loadtests import bench, bench_report
from loadtests.contenders import (
    CompletionsGenerate,
    Service,
    cli_flags,
    naive_strategy,
    reply_of,
)
from loadtests.twostage import (
    REFLECTIONS,
    ROLLOUTS,
    Ask,
    ClientJudge,
    Output,
    Reply,
    Strategy,
    regex_for,
)
from reflectrm.app import create_app
from reflectrm.engines.base import Prompt, SamplingSpec
from reflectrm.judging.judge import REFLECTION_PRIORITY, Judge, JudgeConfig
from reflectrm.judging.prompts import RESPONSE_VERDICTS
from reflectrm.judging.types import JudgmentSpec, Message
from reflectrm.settings import Settings
from tests.conftest import ScriptedEngine, judgment

BODY = {
    "prompt": "What is 2 + 2?",
    "responses": ["4", "5"],
    "mode": "reflect",
    "debias": "none",
    "seed": 11,
    "max_tokens": 64,
}


def mixed_engine() -> ScriptedEngine:
    """c0 (most confident) says 1; the rest say 2; a critique shown first wins unless it is
    the anchor's."""
    gens = [judgment(1, "a0", (-0.01,) * 9 + (-0.1,))]
    gens += [judgment(2, f"a{i}", (-0.01,) * 9 + (-1.0 - i,)) for i in range(1, 8)]
    return ScriptedEngine(stage1=gens, reflect=lambda c1, c2: 2 if c1 == "a0" else 1)


def client_of(engine: ScriptedEngine, strategy: Strategy) -> ClientJudge:
    """A ClientJudge whose engine is the scripted one, seen through text prompts."""

    def render(messages):
        return engine.render_chat(messages).text

    async def generate(ask: Ask, request_id: str) -> Reply:
        spec = SamplingSpec(
            n=ask.n,
            temperature=ask.temperature,
            max_tokens=ask.max_tokens,
            seed=ask.seed,
            regex=ask.regex,
            stop=ask.stop,
            top_logprobs=ask.top_logprobs,
        )
        prompt = Prompt(ask.prompt, tuple(range(len(ask.prompt.split()))))
        result = await engine.generate(prompt, spec, request_id)
        outs = tuple(Output(g.text, g.token_logprobs, g.finish_reason) for g in result.generations)
        return Reply(outs, result.prompt_tokens)

    return ClientJudge(render, generate, strategy)


async def test_client_judge_reaches_the_services_verdict_with_the_same_requests():
    service_engine, client_engine = mixed_engine(), mixed_engine()
    request = JudgmentSpec(
        conversation=(Message("user", BODY["prompt"]),),
        responses=("4", "5"),
        seed=11,
        max_tokens=64,
    )
    expected = await Judge(service_engine, JudgeConfig()).judge(request, "x")
    got = await client_of(client_engine, Strategy()).judge(BODY, "x")

    assert (got.winner, got.scores, got.early_exit) == (2, (0.0, 1.0), False)
    assert (expected.winner, expected.scores) == (got.winner, got.scores)
    # The same prompts with the same sampling, in the same order (reflection orders follow
    # from the seed alike); only the service asks for reflections first where the engine
    # schedules by priority.
    assert [c[1].priority for c in service_engine.calls] == [0] + [REFLECTION_PRIORITY] * 7
    unprioritized = [(t, dataclasses.replace(s, priority=0)) for t, s in service_engine.calls]
    assert client_engine.calls == unprioritized
    assert got.stages[ROLLOUTS].requests == 1
    assert got.stages[REFLECTIONS].requests == 7
    assert got.usage.generated_tokens == expected.usage.generated_tokens == 15 * 10
    assert got.usage.prompt_tokens == expected.usage.prompt_tokens


async def test_early_exit_when_every_verdict_agrees_and_the_careful_peer_reflects_anyway():
    gens = [judgment(1, f"a{i}", (-0.1 * (i + 1),) * 10) for i in range(8)]
    exits = await client_of(ScriptedEngine(stage1=list(gens)), Strategy()).judge(BODY, "x")
    assert exits.early_exit
    assert exits.winner == 1
    assert exits.scores == (1.0, 0.0)
    assert set(exits.stages) == {ROLLOUTS}
    full = await client_of(ScriptedEngine(stage1=list(gens)), bench_careful()).judge(BODY, "x")
    assert not full.early_exit
    assert full.winner == 1
    assert full.stages[REFLECTIONS].requests == 7


def bench_careful() -> Strategy:
    from loadtests.contenders import careful_strategy

    return careful_strategy()


async def test_naive_strategy_asks_one_sample_per_request_with_the_childrens_seeds():
    asked: list[Ask] = []
    outputs = [judgment(1 + i % 2, f"a{i}", (-0.1 * (i + 1),) * 10) for i in range(8)]

    async def generate(ask: Ask, request_id: str) -> Reply:
        asked.append(ask)
        if ask.n == 8:
            outs = outputs
        elif ask.temperature > 0:
            outs = [outputs[ask.seed - 11]]  # the sample the n=8 request's child seed + i gives
        else:
            outs = [judgment(1, "r", kind="Critique")]
        return Reply(tuple(Output(g.text, g.token_logprobs, g.finish_reason) for g in outs), 5)

    naive = await ClientJudge(lambda m: m[-1]["content"], generate, naive_strategy()).judge(
        BODY, "x"
    )
    stage1 = [a for a in asked if a.temperature > 0]
    assert [a.seed for a in stage1] == list(range(11, 19))
    assert {a.n for a in stage1} == {1}
    assert naive.stages[ROLLOUTS].requests == 8
    assert naive.stages[ROLLOUTS].prompt_tokens == 40
    asked.clear()
    careful = await ClientJudge(lambda m: m[-1]["content"], generate, bench_careful()).judge(
        BODY, "x"
    )
    assert [a.n for a in asked if a.temperature > 0] == [8]
    assert (naive.winner, naive.scores) == (careful.winner, careful.scores)


def test_completions_request_and_reply():
    gen = CompletionsGenerate(httpx.AsyncClient(), "m", cache_salt="naive")
    ask = Ask("prompt text", 8, 1.0, 64, 7, regex_for(RESPONSE_VERDICTS, 64))
    body = gen.body(ask)
    assert body["n"] == 8
    assert body["seed"] == 7
    assert body["logprobs"] == 0
    assert body["structured_outputs"] == {"regex": ask.regex}
    assert "{1,40}" in ask.regex
    assert body["stop"] == ["</Result>"]
    assert body["include_stop_str_in_output"] is True
    assert body["add_special_tokens"] is False
    assert body["cache_salt"] == "naive"
    reply = reply_of(
        {
            "choices": [
                {
                    "index": 1,
                    "text": "b",
                    "logprobs": {"token_logprobs": [-0.5]},
                    "finish_reason": "length",
                },
                {
                    "index": 0,
                    "text": "a",
                    "logprobs": {"token_logprobs": [-0.1, -0.2]},
                    "finish_reason": "stop",
                },
            ],
            "usage": {
                "prompt_tokens": 30,
                "completion_tokens": 3,
                "prompt_tokens_details": {"cached_tokens": 16},
            },
        }
    )
    assert [o.text for o in reply.outputs] == ["a", "b"]
    assert reply.outputs[0].token_logprobs == (-0.1, -0.2)
    assert reply.outputs[1].finish_reason == "length"
    assert (reply.prompt_tokens, reply.cached_prompt_tokens) == (30, 16)


def test_engine_fields_become_vllm_serve_flags():
    kwargs = {
        "model": "/m",
        "dtype": "float32",
        "max_model_len": 4096,
        "enforce_eager": True,
        "enable_chunked_prefill": False,
        "disable_log_stats": False,
        "kv_cache_memory_bytes": 1 << 30,
    }
    assert cli_flags(kwargs) == [
        "--dtype",
        "float32",
        "--max-model-len",
        "4096",
        "--enforce-eager",
        "--no-enable-chunked-prefill",
        "--kv-cache-memory-bytes",
        str(1 << 30),
    ]


async def test_service_contender_reads_the_judge_response():
    app = create_app(Settings(swap_check_fraction=0), engine=mixed_engine())
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://svc") as client:
            verdict = await Service("service", client).judge(BODY, "req-1")
            assert (verdict.winner, verdict.scores, verdict.early_exit) == (2, (0.0, 1.0), False)
            assert verdict.usage.requests == 8
            assert verdict.usage.generated_tokens == 150
            with pytest.raises(Exception, match="HTTP 422"):
                await Service("service", client).judge({**BODY, "responses": ["x"]}, "req-2")


def test_plan_interleaves_contenders_and_never_repeats_a_pair():
    blocks = bench.plan([1, 4, 16, 64], [16, 16, 32, 64], 2, ["a", "b", "c"])
    assert [(b.concurrency, len(b.indices)) for b in blocks] == [
        (1, 8),
        (1, 8),
        (4, 8),
        (4, 8),
        (16, 16),
        (16, 16),
        (64, 64),
    ]
    assert [b.order for b in blocks[:4]] == [
        ("a", "b", "c"),
        ("c", "b", "a"),
        ("b", "c", "a"),
        ("a", "c", "b"),
    ]
    indices = [i for b in blocks for i in b.indices]
    assert indices == list(range(16 + 16 + 32 + 64))
    # A level with fewer judgments than two rounds of its concurrency runs one round.
    assert [len(b.indices) for b in bench.plan([4], [6], 2, ["a"])] == [6]


def test_smoke_options_and_variants():
    args = bench.parse_args(
        [
            "--smoke",
            "--contenders",
            "limit,service,prio",
            "--variant",
            "prio:REFLECTRM_X=1,REFLECTRM_Y=2",
        ]
    )
    assert args.levels == [1, 2]
    assert args.counts == [2, 2]
    assert args.max_tokens == 32
    assert args.variants == {"prio": {"REFLECTRM_X": "1", "REFLECTRM_Y": "2"}}
    assert bench.kind_of("prio", args) == "service"
    with pytest.raises(SystemExit):
        bench.parse_args(["--contenders", "limit,nobody"])
    with pytest.raises(SystemExit):
        bench.parse_args(["--concurrency", "1,4", "--judgments", "1,2,3"])


def record(name, kind, c, index, latency, winner=1, early=False, stages=None, ok=True):
    return {
        "contender": name,
        "kind": kind,
        "concurrency": c,
        "index": index,
        "ok": ok,
        "latency_s": latency,
        "winner": winner,
        "early_exit": early,
        "stages": stages or {},
    }


def usage(prompt, cached, generated, requests):
    return {
        "prompt_tokens": prompt,
        "cached_prompt_tokens": cached,
        "generated_tokens": generated,
        "requests": requests,
    }


def test_report_throughput_ratios_savings_and_targets(tmp_path: Path):
    contenders = [
        {"name": "limit", "kind": "limit"},
        {"name": "service", "kind": "service"},
        {"name": "peer", "kind": "peer"},
    ]
    records, blocks = [], []
    for c, walls in (
        (1, {"limit": 10.0, "service": 10.0, "peer": 12.0}),
        (16, {"limit": 4.0, "service": 5.0, "peer": 6.0}),
    ):
        for name, wall in walls.items():
            cpu = {"server_api_s": 1.0, "server_engine_s": 6.0, "client_s": 0.0}
            blocks.append({"contender": name, "concurrency": c, "wall_s": wall, "cpu_s": cpu})
            for i in range(2):
                index = c * 10 + i
                early = i == 0 and name != "peer"
                if name == "peer":
                    stages = {
                        "rollouts": usage(100, 20, 80, 1),
                        "reflections": usage(700, 350, 70, 7),
                    }
                elif early:
                    stages = {"rollouts": usage(100, 20, 80, 1)}
                else:
                    stages = {
                        "rollouts": usage(100, 20, 80, 1),
                        "reflections": usage(700, 350, 70, 7),
                    }
                if name == "service":
                    stages = {
                        "all": {k: sum(s[k] for s in stages.values()) for k in stages["rollouts"]}
                    }
                records.append(record(name, name, c, index, 1.0 + i, early=early, stages=stages))
    records.append(record("service", "service", 16, 99, 50.0, ok=False))
    s = bench_report.summarize(records, blocks, contenders)

    limit16, service16 = s["points"]["limit"]["16"], s["points"]["service"]["16"]
    assert limit16["judgments_per_s"] == 2 / 4.0
    assert service16["judgments_per_s"] == 2 / 5.0
    assert service16["failed"] == 1
    assert service16["judgments"] == 2
    assert service16["latency_ms"]["p50"] == 1000
    assert service16["latency_ms"]["p95"] == 2000
    # limit at c=16: one early exit (180 generated) and one full judgment (150): 330 tokens / 4 s
    assert limit16["generated_tokens_per_s"] == (80 + 150) / 4.0
    assert limit16["by_stage"]["reflections"]["cached_share"] == 0.5
    assert limit16["cpu_s_per_judgment"] == {
        "server_api_s": 0.5,
        "server_engine_s": 3.0,
        "client_s": 0.0,
    }
    assert s["ratios"]["service"]["service/limit"]["16"] == pytest.approx(0.8)
    assert s["ratios"]["service"]["service/peer"]["1"] == pytest.approx(12 / 10)
    assert s["gains"]["service"]["gain"] == pytest.approx((2 / 5) / (2 / 10))
    saved = s["early_exit_savings"]["service"]
    assert saved["early_exits"] == 2
    assert saved["saved"]["generated_tokens"] == 2 * 70
    assert saved["saved_share"]["generated_tokens"] == pytest.approx(140 / (4 * 150))
    assert s["agreement"]["service"]["same_winner"] == 4
    targets = {t["target"]: t for t in s["targets"]}
    assert targets["service/limit judgments/s at c=16 >= 0.97"]["met"] is False
    assert targets["service/limit judgments/s at c=16 >= 0.97"]["short_by"] == pytest.approx(0.17)
    assert targets["service/peer judgments/s at c=16 >= 1.3"]["value"] == pytest.approx(1.2)
    assert targets["service 2*p50/p95 at c=16 >= 1 (p95 <= 2*p50)"]["met"] is True
    assert targets["service gain c=1->16 / limit gain >= 0.9"]["value"] == pytest.approx(2.0 / 2.5)

    text = bench_report.markdown(s, contenders)
    assert "| 16 | service | 2 | 0.400 |" in text
    assert "| service/limit | 1.00 | 0.80 |" in text
    assert "no, 0.17 short" in text
    assert "| 16 | limit | 0.50 | 3.00 | 0.00 | 3.50 |" in text
    bench_report.chart(s, contenders, tmp_path / "chart.png", "test")
    assert (tmp_path / "chart.png").read_bytes()[:4] == b"\x89PNG"
    json.dumps(s)  # the summary is written as JSON
    assert not any(isinstance(v, float) and math.isnan(v) for v in limit16.values())


def test_pyspy_summary_counts_busy_time_per_thread_and_frame():
    raw = (
        "thread (1): MainThread;run (loop.py);judge (routes.py);render (engine.py) 30\n"
        "thread (1): MainThread;run (loop.py);encode (json.py) 10\n"
        "thread (2): worker;tokenize (engine.py) 10\n"
    )
    text = bench_report.pyspy_top(raw, rate=10)
    assert text.startswith("50 busy samples at 10/s (5.0 s of busy thread time)")
    assert "| thread (1): MainThread | 4.0 | 0.800 |" in text
    assert "| `render (engine.py)` | 3.0 | 0.600 |" in text  # own samples
    assert "| `run (loop.py)` | 4.0 | 0.800 |" in text  # with its callees
