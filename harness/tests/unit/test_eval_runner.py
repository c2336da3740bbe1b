"""The plan, the backends, the append-only results file and resuming, with a scripted engine."""

from __future__ import annotations

import asyncio
import json
from collections import Counter

import httpx
import pytest

from reflectrm.engines.base import GenerationResult, Prompt, SamplingSpec
from reflectrm.judging.judge import Judge, JudgeConfig
from reflectrm.judging.types import Message
from reflectrm_harness.datasets import Pair
from reflectrm_harness.evaluation import records
from reflectrm_harness.evaluation.benchmarks import JUDGEBENCH, RMB
from reflectrm_harness.evaluation.common import (
    CountingEngine,
    EngineWork,
    ServiceRefusedError,
    TransientError,
    pending,
    stable_int,
)
from reflectrm_harness.evaluation.pairwise.runner import (
    EVAL_MODES,
    EngineBackend,
    HttpBackend,
    mode_label,
    plan,
    primary_position,
    run_units,
)
from support.engines import ScriptedEngine, judgment


def make_pairs(n: int, benchmark: str = RMB) -> list[Pair]:
    meta = {"goal": "Helpfulness", "subset": "Helpfulness/Chat"} if benchmark == RMB else {}
    return [
        Pair(f"p{i}", (Message("user", f"question {i}"),), f"good {i}", f"bad {i}", benchmark, meta)
        for i in range(n)
    ]


def scripted_engine(**kw) -> ScriptedEngine:
    """Position-biased: most samples say Response 1, whatever the responses are."""
    verdicts = [1, 1, 2, 1, 2, 1, 1, 2]
    stage1 = [judgment(v, f"a{i}", (-0.01,) * 9 + (-1.0 - i / 10,)) for i, v in enumerate(verdicts)]
    return ScriptedEngine(stage1=stage1, **kw)


# --- plan -----------------------------------------------------------------------------------


def test_plan_covers_pairs_orders_and_modes_with_shared_seeds():
    pairs = make_pairs(40)
    units = plan(pairs, list(EVAL_MODES), both_orders=True, seed=0, num_candidates=8, max_tokens=64)
    assert len(units) == 40 * 2 * 8
    assert len({u.key for u in units}) == len(units)
    # The seeded random order puts the chosen response first for some pairs and second for others.
    firsts = Counter(primary_position(p, 0) for p in pairs)
    assert firsts[1] > 5
    assert firsts[2] > 5
    by_order: dict[tuple[str, int], set[int]] = {}
    for u in units:
        by_order.setdefault((u.pair.id, u.chosen_position), set()).add(u.seed)
        assert u.responses[u.chosen_position - 1] == u.pair.chosen
    # One judging seed per pair and order, shared by every mode (paired comparisons).
    assert all(len(seeds) == 1 for seeds in by_order.values())
    assert by_order[("p0", 1)] != by_order[("p0", 2)]
    n = {u.mode.name: u.num_candidates for u in units}
    assert n == {
        "single": 1,
        "margin": 1,
        "vote": 8,
        "vote_matched": 15,
        "reflect": 8,
        "random_anchor": 8,
        "random_winners": 8,
        "anchor_only": 8,
    }
    assert mode_label("vote_matched", 8) == "Majority vote @15 (matched compute)"
    one = plan(pairs, ["reflect"], both_orders=False, seed=0, num_candidates=8, max_tokens=64)
    assert all(u.primary for u in one)
    assert len(one) == 40


def test_stable_int_does_not_depend_on_the_process():
    assert stable_int("order", 0, "rmb", "p1") == stable_int("order", 0, "rmb", "p1")
    assert stable_int("order", 0, "rmb", "p1") != stable_int("order", 1, "rmb", "p1")
    assert stable_int("x") == 0x2D711642  # the first 4 bytes of sha256(b"x"), not hash()


# --- running and resuming -------------------------------------------------------------------


def run(units, backend, path, concurrency=4, share_samples=False):
    async def go():
        with records.Writer(path) as writer:
            return await run_units(units, backend, writer, concurrency, None, share_samples)

    return asyncio.run(go())


class SeededEngine(ScriptedEngine):
    """Stage-1 outputs that depend on the prompt and the seed as vLLM's do: output i of a
    seeded request is drawn with seed + i whatever n is; a greedy request depends on the prompt
    only. Every output is 10 tokens; reflections prefer the alphabetically first critique."""

    def __init__(self) -> None:
        super().__init__(reflect=lambda c1, c2: 1 if c1 <= c2 else 2)

    async def generate(
        self, prompt: Prompt, spec: SamplingSpec, request_id: str
    ) -> GenerationResult:
        if "# Critiques for Judgment" in prompt.text:
            return await super().generate(prompt, spec, request_id)
        self.calls.append((prompt.text, spec))
        outs = []
        for i in range(spec.n):
            draw = stable_int(prompt.text, "greedy" if spec.seed is None else spec.seed + i)
            confidence = (-0.01,) * 9 + (-(draw % 1000) / 100,)
            outs.append(judgment(1 + draw % 2, f"analysis {draw % 97}", confidence))
        return GenerationResult(generations=tuple(outs), prompt_tokens=prompt.num_tokens)


def test_shared_samples_give_the_per_mode_results_with_less_engine_work(tmp_path):
    """Every mode of a pair-order starting from one stage-1 request (the largest N) records
    exactly what judging each mode alone records, byte for byte but the measured latency."""
    units = plan(make_pairs(3), list(EVAL_MODES), True, 0, 8, 64)
    out: dict[bool, tuple[list[str], EngineWork]] = {}
    for share in (False, True):
        work = EngineWork()
        judge = Judge(CountingEngine(SeededEngine(), work), JudgeConfig(early_exit=False))
        path = tmp_path / f"share-{share}.jsonl"
        summary = run(units, EngineBackend(judge), path, concurrency=3, share_samples=share)
        assert summary.judged == 3 * 2 * 8
        rows = []
        for r in records.load(path).records:
            row = r.to_json()
            del row["latency_ms"]
            rows.append(json.dumps(row, sort_keys=True))
        out[share] = (sorted(rows), work)
    assert out[True][0] == out[False][0]
    verdicts = Counter(json.loads(r)["winner"] for r in out[True][0])
    assert verdicts[1]
    assert verdicts[2]
    # Per pair and order, alone: 6 stage-1 requests of 8, 15, 8, 8, 8, 8 samples, 1 greedy, 1
    # margin request (this engine answers it with a whole output), and 3 x 7 reflections
    # (random_anchor, random_winners and ReflectRM; anchor_only has none): 29 requests,
    # (55 + 1 + 1 + 21) x 10 tokens. Shared: one request of 15 samples for the six.
    alone, shared = out[False][1], out[True][1]
    assert (alone.requests, alone.generated_tokens) == (6 * 29, 6 * 780)
    assert (shared.requests, shared.generated_tokens) == (6 * 24, 6 * 380)


def test_run_appends_one_record_per_judgment_and_resumes(tmp_path):
    path = tmp_path / "results.jsonl"
    engine = scripted_engine()
    backend = EngineBackend(Judge(engine, JudgeConfig()))
    units = plan(make_pairs(3), ["single", "vote", "reflect"], True, 0, 8, 64)
    first = run(units[:7], backend, path)
    assert (first.judged, first.errors, first.retry_later) == (7, 0, 0)
    # A kill mid-write leaves a partial line: it is skipped and the judgment redone.
    with path.open("a") as f:
        f.write('{"type": "result", "benchmark": "rmb", "pair_')
    loaded = records.load(path)
    assert len(loaded.records) == 7
    todo = pending(units, (r.key for r in loaded.records))
    assert len(todo) == len(units) - 7
    second = run(todo, backend, path)
    assert second.judged == len(units) - 7
    loaded = records.load(path)
    assert len(loaded.records) == len(units)
    assert pending(units, (r.key for r in loaded.records)) == []
    r = next(x for x in loaded.records if x.mode == "reflect")
    assert r.status == "verdict"
    assert r.winner == 1
    assert r.outputs is not None
    assert r.outputs >= 8
    assert r.parse_failures == 0
    assert r.lengths == (len("good 0"), len("bad 0"))  # characters, for length-balanced accuracy
    single = next(x for x in loaded.records if x.mode == "single")
    assert (single.outputs, single.engine_requests, single.generated_tokens) == (1, 1, 10)


def test_a_prompt_too_long_is_recorded_as_an_error(tmp_path):
    path = tmp_path / "results.jsonl"
    backend = EngineBackend(Judge(scripted_engine(max_model_len=50), JudgeConfig()))
    units = plan(make_pairs(1), ["single"], False, 0, 8, 64)
    summary = run(units, backend, path)
    assert summary.errors == 1
    (r,) = records.load(path).records
    assert r.status == "error"
    assert r.winner is None
    assert r.error.startswith("prompt_too_long")


def test_results_from_other_settings_are_refused(tmp_path):
    path = tmp_path / "results.jsonl"
    with records.Writer(path) as w:
        w.write({"type": "run", "model": "m", "max_tokens": 64, "num_candidates": 8, "seed": 0})
    loaded = records.load(path)
    records.check_compatible(loaded, {"model": "m", "max_tokens": 64, "url": "x"}, path)
    with pytest.raises(records.ResultsMismatchError, match="max_tokens: 64 in the file, 48 now"):
        records.check_compatible(loaded, {"model": "m", "max_tokens": 48}, path)


# --- the HTTP backend -----------------------------------------------------------------------

SERVICE_OK = {
    "winner": 2,
    "scores": [0.25, 0.75],
    "outcome": "verdict",
    "usage": {"prompt_tokens": 300, "generated_tokens": 500, "engine_requests": 8},
    "latency_ms": 1234.5,
    "early_exit": False,
    "parse_failures": 1,
}


def http_backend(handler) -> tuple[HttpBackend, httpx.AsyncClient]:
    client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    return HttpBackend(client, "http://svc/", retries=2, backoff_s=0.0), client


def test_http_backend_sends_the_contract_and_reads_the_answer():
    seen: list[dict] = []

    def handler(request: httpx.Request) -> httpx.Response:
        assert request.url == "http://svc/v1/judge"
        seen.append(json.loads(request.content))
        return httpx.Response(200, json=SERVICE_OK)

    backend, client = http_backend(handler)
    pair = Pair("j1", (Message("user", "q"),), "good", "bad", JUDGEBENCH, {"subset": "math"})
    (unit,) = plan([pair], ["reflect"], False, 0, 8, 64)
    out = asyncio.run(backend.judge(unit, "r1"))
    asyncio.run(client.aclose())
    body = seen[0]
    assert body["prompt"] == "q"
    assert "messages" not in body
    assert "ablation" not in body
    assert body["responses"] == list(unit.responses)
    assert (body["mode"], body["num_candidates"], body["seed"], body["max_tokens"]) == (
        "reflect",
        8,
        unit.seed,
        64,
    )
    assert (out.status, out.winner, out.generated_tokens, out.latency_ms) == (
        "verdict",
        2,
        500,
        1234.5,
    )
    assert out.outputs == 8 + 7
    assert out.parse_failures == 1


def test_http_backend_multi_turn_and_ablation_bodies():
    conv = (Message("user", "a"), Message("assistant", "b"), Message("user", "c"))
    pair = Pair("m", conv, "x", "y", RMB, {"goal": "G", "subset": "G/s"})
    (unit,) = plan([pair], ["anchor_only"], False, 0, 8, 64)
    body = HttpBackend.body(unit)
    assert body["messages"][1] == {"role": "assistant", "content": "b"}
    assert body["ablation"] == "anchor_only"
    assert "prompt" not in body


def test_http_backend_retries_transient_and_records_permanent_failures():
    calls = Counter()

    def flaky(request: httpx.Request) -> httpx.Response:
        calls["n"] += 1
        if calls["n"] == 1:
            return httpx.Response(503, json={"detail": "loading"})
        return httpx.Response(200, json=SERVICE_OK)

    (unit,) = plan(make_pairs(1), ["single"], False, 0, 8, 64)
    backend, _ = http_backend(flaky)
    assert asyncio.run(backend.judge(unit, "r")).status == "verdict"
    assert calls["n"] == 2

    backend, _ = http_backend(lambda r: httpx.Response(413, json={"detail": "too long"}))
    out = asyncio.run(backend.judge(unit, "r"))
    assert (out.status, out.error) == ("error", "http_413: too long")

    backend, _ = http_backend(lambda r: httpx.Response(504, json={"detail": "deadline"}))
    with pytest.raises(TransientError, match="http_504"):
        asyncio.run(backend.judge(unit, "r"))


def test_http_backend_repeats_one_request_id_and_gives_up_as_transient():
    seen: list[tuple[str, dict]] = []
    replies: list[httpx.Response | Exception] = [
        httpx.Response(499, json={"detail": "client closed"}),
        httpx.ReadTimeout("slow"),
        httpx.Response(200, json=SERVICE_OK),
    ]

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append((request.headers["x-request-id"], json.loads(request.content)))
        reply = replies.pop(0)
        if isinstance(reply, Exception):
            raise reply
        return reply

    client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    backend = HttpBackend(client, "http://svc", retries=2, backoff_s=0.0)
    (unit,) = plan(make_pairs(1), ["vote"], False, 0, 8, 64)
    assert asyncio.run(backend.judge(unit, "r7")).status == "verdict"
    assert [rid for rid, _ in seen] == ["r7"] * 3
    assert len({json.dumps(body, sort_keys=True) for _, body in seen}) == 1

    def down(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused")

    client = httpx.AsyncClient(transport=httpx.MockTransport(down))
    backend = HttpBackend(client, "http://svc", retries=2, backoff_s=0.0)
    with pytest.raises(TransientError, match=r"r8: ConnectError: refused \(after 3 attempts\)"):
        asyncio.run(backend.judge(unit, "r8"))

    # An answer that is neither permanent for the pair nor transient stops the run, untried.
    backend, _ = http_backend(lambda r: httpx.Response(404, json={"detail": "Not Found"}))
    with pytest.raises(ServiceRefusedError, match="answered 404: Not Found"):
        asyncio.run(backend.judge(unit, "r9"))


def test_an_empty_text_is_refused_alike_in_process_and_over_http(tmp_path):
    """The service's schema refuses empty texts with 422; in-process the harness applies the
    same rule, so both backends record the same error without judging (see the API test)."""
    empty = Pair("e", (Message("user", ""),), "good", "bad", RMB, {"goal": "G", "subset": "s"})
    (unit,) = plan([empty], ["reflect"], False, 0, 8, 64)
    engine = scripted_engine()
    local = EngineBackend(Judge(engine, JudgeConfig())).judge(unit, "r")
    remote, _ = http_backend(lambda r: pytest.fail("nothing may be sent"))
    outcomes = [asyncio.run(local), asyncio.run(remote.judge(unit, "r"))]
    assert outcomes[0] == outcomes[1]
    assert outcomes[0].status == "error"
    assert outcomes[0].error == "invalid_request: turn 1 (user) of the conversation is empty"
    assert engine.calls == []


def test_a_service_refusing_ablations_stops_the_run():
    detail = "ablation 'anchor_only' is for evaluation and this server does not allow it"
    backend, _ = http_backend(lambda r: httpx.Response(422, json={"detail": detail}))
    (unit,) = plan(make_pairs(1), ["anchor_only"], False, 0, 8, 64)
    with pytest.raises(ServiceRefusedError, match="REFLECTRM_ALLOW_ABLATIONS"):
        asyncio.run(backend.judge(unit, "r"))


def test_transient_failures_are_not_recorded(tmp_path):
    path = tmp_path / "results.jsonl"
    backend, _ = http_backend(lambda r: httpx.Response(429, json={"detail": "busy"}))
    units = plan(make_pairs(2), ["single"], False, 0, 8, 64)
    summary = run(units, backend, path)
    assert (summary.judged, summary.retry_later) == (0, 2)
    assert records.load(path).records == ()
