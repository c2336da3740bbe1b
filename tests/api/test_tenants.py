"""One judge shared by many jobs, over real HTTP on loopback with a gated scripted engine, so the
counts are exact: fair shares between a flooding and a light tenant, per-tenant and per-call
bounds, identical calls joined or cached (and not judged twice), a body that drips."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections import Counter
from dataclasses import dataclass, field

import httpx

from loadtests.common.metrics import parse_metrics
from reflectrm.api.auth import tenant_of_key
from reflectrm.app import create_app
from reflectrm.engines.base import GenerationResult, Prompt, SamplingSpec
from reflectrm.settings import Settings
from tests.api.served import served
from tests.conftest import ScriptedEngine, judgment

BODY = {"prompt": "What is 2 + 2?", "responses": ["4", "5"], "mode": "single"}


@dataclass
class OrderedEngine(ScriptedEngine):
    """Holds each engine request until the test lets one through, and records whose it was
    (the tenant rides in the response text the test chose) in the order they ran."""

    gate: threading.Semaphore = field(default_factory=lambda: threading.Semaphore(0))
    ran: list[str] = field(default_factory=list)

    async def generate(
        self, prompt: Prompt, spec: SamplingSpec, request_id: str
    ) -> GenerationResult:
        while not self.gate.acquire(blocking=False):
            await asyncio.sleep(0.005)
        self.ran.append("light" if "light" in prompt.text else "flood")
        return await super().generate(prompt, spec, request_id)


def metric(text: str, name: str, default: float | None = None) -> float:
    series = parse_metrics(text)
    if name in series:
        return series[name]
    if default is not None:
        return default
    raise AssertionError(f"{name} not on /metrics")


def wait_for(condition, what: str, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"never happened: {what}"
        time.sleep(0.01)


async def send(url: str, bodies: list[dict], headers: dict[str, str]) -> list[httpx.Response]:
    limits = httpx.Limits(max_connections=len(bodies))
    async with httpx.AsyncClient(base_url=url, timeout=60, limits=limits) as client:
        calls = [client.post("/v1/judge", json=b, headers=headers) for b in bodies]
        return list(await asyncio.gather(*calls))


def in_thread(url: str, bodies: list[dict], headers: dict[str, str], out: list) -> threading.Thread:
    thread = threading.Thread(target=lambda: out.extend(asyncio.run(send(url, bodies, headers))))
    thread.start()
    return thread


def test_a_light_tenant_is_served_next_however_much_a_flooding_tenant_has_queued():
    engine = OrderedEngine(stage1=[judgment(1)])
    app = create_app(Settings(max_concurrent_judgments=1, swap_check_fraction=0.0), engine=engine)
    admission = app.state.reflectrm.admission
    flood = [{**BODY, "seed": i} for i in range(40)]
    light = [{**BODY, "responses": ["light 4", "light 5"], "seed": i} for i in range(3)]
    with served(app) as s:
        flooded: list = []
        first = in_thread(s.url, flood, {"X-Reflectrm-Tenant": "trainer"}, flooded)
        wait_for(lambda: admission.queued == 39, "the flood queued")
        lit: list = []
        second = in_thread(s.url, light, {"X-Reflectrm-Tenant": "eval"}, lit)
        wait_for(lambda: admission.queued == 42, "the light tenant queued")
        during = httpx.get(f"{s.url}/metrics").text
        for _ in range(43):
            engine.gate.release()
        first.join(60)
        second.join(60)
        after = httpx.get(f"{s.url}/metrics").text
    # Every call answered 200: nothing refused, nothing lost.
    assert Counter(r.status_code for r in flooded) == {200: 40}
    assert Counter(r.status_code for r in lit) == {200: 3}
    # Fair queuing: after the flood's running judgment, the two tenants alternate while both
    # wait (the light one's three go 2nd, 4th and 6th), although 39 of the flood came first.
    assert engine.ran[:7] == ["flood", "light", "flood", "light", "flood", "light", "flood"]
    assert engine.ran.count("flood") == 40
    assert metric(during, 'reflectrm_tenant_judgments_queued{tenant="trainer"}') == 39
    assert metric(during, 'reflectrm_tenant_judgments_queued{tenant="eval"}') == 3
    assert metric(after, 'reflectrm_tenant_judgments_admitted_total{tenant="trainer"}') == 40
    assert metric(after, 'reflectrm_tenant_judgments_admitted_total{tenant="eval"}') == 3


def test_a_tenant_over_its_queue_bound_gets_429_naming_it_while_another_is_served():
    engine = OrderedEngine(stage1=[judgment(1)])
    app = create_app(
        Settings(max_concurrent_judgments=1, max_queued_per_tenant=4, swap_check_fraction=0.0),
        engine=engine,
    )
    admission = app.state.reflectrm.admission
    with served(app) as s:
        flooded: list = []
        first = in_thread(
            s.url, [{**BODY, "seed": i} for i in range(10)], {"X-Reflectrm-Tenant": "a"}, flooded
        )
        wait_for(lambda: admission.queued == 4 and len(flooded) == 0, "a's queue full")
        refusals = 'reflectrm_refusals_total{bound="tenant_queue",tenant="a"}'
        wait_for(
            lambda: metric(httpx.get(f"{s.url}/metrics").text, refusals, 0) == 5,
            "the rest of a's refused",
        )
        other: list = []
        second = in_thread(s.url, [{**BODY, "seed": 99}], {"X-Reflectrm-Tenant": "b"}, other)
        wait_for(lambda: admission.queued == 5, "b queued beside a's")
        for _ in range(6):
            engine.gate.release()
        first.join(60)
        second.join(60)
    statuses = Counter(r.status_code for r in flooded)
    assert statuses == {200: 5, 429: 5}  # 1 running + 4 queued answered; 5 refused
    refused = [r for r in flooded if r.status_code == 429]
    assert all("REFLECTRM_MAX_QUEUED_PER_TENANT=4" in r.json()["detail"] for r in refused)
    assert all(r.headers["retry-after"] for r in refused)
    assert [r.status_code for r in other] == [200]


def test_api_keys_are_the_tenants_and_a_header_names_only_a_job_within_them():
    key_a, key_b = "a" * 32, "b" * 32
    engine = ScriptedEngine(stage1=[judgment(1)])
    app = create_app(Settings(api_keys=f"{key_a},{key_b}"), engine=engine)
    with served(app) as s:
        for key, seed, named in ((key_a, 1, "someone"), (key_a, 2, None), (key_b, 3, "someone")):
            headers = {"Authorization": f"Bearer {key}"}
            if named is not None:
                headers["X-Reflectrm-Tenant"] = named
            r = httpx.post(f"{s.url}/v1/judge", json={**BODY, "seed": seed}, headers=headers)
            assert r.status_code == 200, r.text
        text = httpx.get(f"{s.url}/metrics").text
    assert tenant_of_key(key_a).startswith("key-")
    name = "reflectrm_tenant_judgments_admitted_total"
    assert metric(text, f'{name}{{tenant="{tenant_of_key(key_a)}/someone"}}') == 1
    assert metric(text, f'{name}{{tenant="{tenant_of_key(key_a)}"}}') == 1
    assert metric(text, f'{name}{{tenant="{tenant_of_key(key_b)}/someone"}}') == 1
    # The header cannot take a call out of its key's share: no tenant "someone" of its own.
    assert 'tenant="someone"' not in text
    assert key_a not in text


def test_a_malformed_tenant_header_is_refused_with_what_to_fix():
    with served(create_app(Settings(), engine=ScriptedEngine(stage1=[judgment(1)]))) as s:
        r = httpx.post(f"{s.url}/v1/judge", json=BODY, headers={"X-Reflectrm-Tenant": "x" * 65})
    assert r.status_code == 422
    assert "1 to 64 letters" in r.json()["detail"]


def test_a_call_over_the_engine_work_bound_is_refused_saying_by_how_much():
    engine = ScriptedEngine(stage1=[judgment(1)])
    # 8 candidates x 64 max_tokens = 512 per judgment; swap makes 2 judgments: 1,024 tokens.
    app = create_app(Settings(max_call_work_tokens=1000), engine=engine)
    with served(app) as s:
        body = {**BODY, "mode": "vote", "max_tokens": 64, "num_candidates": 8}
        one = httpx.post(f"{s.url}/v1/judge", json=body)
        both = httpx.post(f"{s.url}/v1/judge", json={**body, "debias": "swap"})
        group = httpx.post(
            f"{s.url}/v1/rewards",
            json={
                "prompt": "q",
                "completions": ["a", "b", "c"],
                "strategy": "round_robin",
                "mode": "single",
                "max_tokens": 64,
            },
        )
        text = httpx.get(f"{s.url}/metrics").text
    assert one.status_code == 200
    assert both.status_code == 422
    detail = both.json()["detail"]
    assert "2 judgments x 8 candidates x 64 max_tokens = 1024 tokens" in detail
    assert "24 over this server's bound of 1000" in detail
    assert "REFLECTRM_MAX_CALL_WORK_TOKENS" in detail
    # 3 pairs x 2 orders x 1 candidate x 64 = 384: within the bound.
    assert group.status_code == 200, group.text
    assert metric(text, 'reflectrm_refusals_total{bound="call_work",tenant="default"}') == 1
    assert len([c for c in engine.calls if c[1].n == 8]) == 1  # the refused call cost nothing


def test_identical_calls_are_judged_once_joined_in_flight_and_cached_after():
    engine = OrderedEngine(stage1=[judgment(1)])
    app = create_app(Settings(swap_check_fraction=0.0), engine=engine)
    admission = app.state.reflectrm.admission
    with served(app) as s:
        answers: list = []
        thread = in_thread(s.url, [{**BODY, "seed": 5}] * 6, {}, answers)
        wait_for(lambda: admission.in_flight == 1, "the first judgment started")
        time.sleep(0.2)  # the five others arrive and join it
        engine.gate.release()
        thread.join(60)
        later = httpx.post(f"{s.url}/v1/judge", json={**BODY, "seed": 5})  # a retry
        engine.gate.release()  # for the unseeded call's one judgment
        unseeded = [httpx.post(f"{s.url}/v1/judge", json=BODY) for _ in range(2)]
        text = httpx.get(f"{s.url}/metrics").text
    assert [r.status_code for r in answers] == [200] * 6
    assert later.status_code == 200
    assert len(engine.ran) == 2  # one for the six and the retry, one for the unseeded pair
    bodies = [r.json() for r in [*answers, later]]
    assert len({(b["winner"], b["seed"], tuple(b["scores"])) for b in bodies}) == 1
    assert len({b["request_id"] for b in bodies}) == 7  # each call keeps its own id
    # An unseeded call matches an unseeded one: the repeat gets the first answer, seed and all.
    assert unseeded[0].json()["seed"] == unseeded[1].json()["seed"]
    assert metric(text, 'reflectrm_reused_answers_total{how="joined"}') == 5
    assert metric(text, 'reflectrm_reused_answers_total{how="cached"}') == 2
    # Every call is answered and counted as one; the engine ran twice.
    assert metric(text, 'reflectrm_judgments_total{mode="single",outcome="verdict"}') == 9
    assert metric(text, 'reflectrm_engine_requests_total{stage="rollouts"}') == 2


def test_other_tenants_do_not_share_answers():
    engine = ScriptedEngine(stage1=[judgment(1)])
    with served(create_app(Settings(), engine=engine)) as s:
        for tenant in ("a", "b", "a"):
            r = httpx.post(
                f"{s.url}/v1/judge",
                json={**BODY, "seed": 1},
                headers={"X-Reflectrm-Tenant": tenant},
            )
            assert r.status_code == 200
    assert len(engine.calls) == 2  # a, b; a's repeat from the cache


def test_a_body_that_drips_gets_408_and_the_server_goes_on():
    engine = ScriptedEngine(stage1=[judgment(1)])
    app = create_app(Settings(body_timeout_s=0.5), engine=engine)
    with served(app) as s:
        host, port = s.url.removeprefix("http://").split(":")
        started = time.monotonic()
        with socket.create_connection((host, int(port)), timeout=10) as conn:
            conn.sendall(
                b"POST /v1/judge HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                b"Content-Length: 100\r\n\r\n{"
            )
            stop = threading.Event()

            def drip() -> None:  # a byte every 0.1 s: far slower than the body's deadline
                for _ in range(30):
                    if stop.wait(0.1):
                        return
                    try:
                        conn.sendall(b" ")
                    except OSError:
                        return

            dripper = threading.Thread(target=drip)
            dripper.start()
            reply = b""
            while b"\r\n\r\n" not in reply:
                chunk = conn.recv(4096)
                if not chunk:
                    break
                reply += chunk
            stop.set()
            dripper.join()
        waited = time.monotonic() - started
        ok = httpx.post(f"{s.url}/v1/judge", json=BODY)
    assert reply.startswith(b"HTTP/1.1 408"), reply[:200]
    assert waited < 5
    assert ok.status_code == 200


def test_batch_defaults_are_shared_by_the_items_not_copied_and_reach_the_engine():
    from reflectrm.api import convert, schemas

    long_prompt = "Which answer is right? " + "context " * 20_000
    body = schemas.BatchRequest.model_validate(
        {
            "defaults": {"prompt": long_prompt, "mode": "single"},
            "items": [
                {"responses": ["4", "5"], "seed": 1},
                {"responses": ["6", "7"], "seed": 2},
                {"prompt": "Own question?", "responses": ["a", "b"]},
                {"responses": ["only one"]},
            ],
        }
    )
    items = convert.batch_items(body)
    first, second, own, bad = items
    assert first.conversation is second.conversation  # one object, not a copy per item
    assert first.conversation[0].content == long_prompt
    assert own.conversation[0].content == "Own question?"
    assert "responses" in str(bad.error)

    engine = ScriptedEngine(stage1=[judgment(1)])
    with served(create_app(Settings(), engine=engine)) as s:
        r = httpx.post(f"{s.url}/v1/judge/batch", json=body.model_dump(exclude_none=True))
    assert r.status_code == 200, r.text
    assert [item["status"] for item in r.json()["results"]] == [200, 200, 200, 422]
    prompts = [text for text, _ in engine.calls]
    assert sum(long_prompt[:40] in p for p in prompts) == 2
    assert not any("(the defaults' conversation)" in p for p in prompts)


def test_a_head_that_drips_is_cut_off_and_the_server_goes_on():
    from reflectrm.server import head_deadline_protocol

    engine = ScriptedEngine(stage1=[judgment(1)])
    app = create_app(Settings(), engine=engine)
    with served(app, http=head_deadline_protocol(0.5)) as s:
        host, port = s.url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=10) as conn:
            started = time.monotonic()
            conn.sendall(b"POST /v1/judge HTTP/1.1\r\nHost: x\r\n")
            closed_after = None
            for _ in range(40):  # a header byte every 0.1 s, never the blank line
                time.sleep(0.1)
                try:
                    conn.sendall(b"X")
                    conn.settimeout(0.01)
                    if conn.recv(1) == b"":
                        closed_after = time.monotonic() - started
                        break
                except (TimeoutError, BlockingIOError):
                    continue
                except OSError:
                    closed_after = time.monotonic() - started
                    break
        idle = socket.create_connection((host, int(port)), timeout=10)
        idle.settimeout(5)
        assert idle.recv(1) == b""  # a connection that sends nothing is closed too
        idle.close()
        ok = httpx.post(f"{s.url}/v1/judge", json=BODY)
    assert closed_after is not None, "the connection was never closed"
    assert 0.4 < closed_after < 2.0
    assert ok.status_code == 200


def test_defaults_whose_messages_end_with_an_assistant_turn_fail_the_items_that_use_them():
    from reflectrm.api import convert, schemas

    body = schemas.BatchRequest.model_validate(
        {
            "defaults": {
                "messages": [
                    {"role": "user", "content": "q"},
                    {"role": "assistant", "content": "a"},
                ]
            },
            "items": [{"responses": ["4", "5"]}, {"prompt": "own", "responses": ["a", "b"]}],
        }
    )
    shared, own = convert.batch_items(body)
    assert "must end with a user turn" in str(shared.error)
    assert own.conversation[0].content == "own"
