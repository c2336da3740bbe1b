"""Overload without loss, over real HTTP on loopback: a burst past the in-flight limit and the
queue is answered in full, 200 or 429 with Retry-After, nothing lost or hung, and the queue is
visible on /metrics. The engine is scripted and gated, so the counts are exact."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from dataclasses import dataclass, field

import httpx

from loadtests.common.metrics import parse_metrics
from reflectrm.app import create_app
from reflectrm.engines.base import GenerationResult, Prompt, SamplingSpec
from reflectrm.settings import Settings
from tests.api.served import served
from tests.conftest import ScriptedEngine, judgment

BODY = {"prompt": "What is 2 + 2?", "responses": ["4", "5"], "mode": "single"}
SLOTS, QUEUE, BURST = 4, 16, 80


@dataclass
class GatedEngine(ScriptedEngine):
    """Holds every engine request until the gate opens."""

    gate: threading.Event = field(default_factory=threading.Event)

    async def generate(
        self, prompt: Prompt, spec: SamplingSpec, request_id: str
    ) -> GenerationResult:
        while not self.gate.is_set():
            await asyncio.sleep(0.01)
        return await super().generate(prompt, spec, request_id)


def metric(text: str, name: str) -> float:
    series = parse_metrics(text)
    if name in series:
        return series[name]
    raise AssertionError(f"{name} not on /metrics")


async def burst(url: str, n: int) -> list[httpx.Response | BaseException]:
    limits = httpx.Limits(max_connections=n)
    async with httpx.AsyncClient(base_url=url, timeout=60, limits=limits) as client:
        calls = [client.post("/v1/judge", json={**BODY, "seed": i}) for i in range(n)]
        return await asyncio.gather(*calls, return_exceptions=True)


def wait_for(condition, what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"never happened: {what}"
        time.sleep(0.02)


def test_a_burst_past_slots_and_queue_is_answered_in_full_with_the_queue_on_metrics():
    engine = GatedEngine(stage1=[judgment(1)])
    app = create_app(
        Settings(
            max_concurrent_judgments=SLOTS,
            max_queued_judgments=QUEUE,
            queue_timeout_s=60,
            swap_check_fraction=0.0,
        ),
        engine=engine,
    )
    admission = app.state.reflectrm.admission
    with served(app) as s:
        results: list = []
        sender = threading.Thread(target=lambda: results.extend(asyncio.run(burst(s.url, BURST))))
        sender.start()
        # With the engine held: 4 judgments in flight, 16 waiting, the other 60 refused at once.
        wait_for(lambda: admission.in_flight == SLOTS and admission.queued == QUEUE, "queue full")
        during = httpx.get(f"{s.url}/metrics").text
        assert metric(during, "reflectrm_judgments_in_flight") == SLOTS
        assert metric(during, "reflectrm_judgments_queued") == QUEUE
        wait_for(lambda: refused_so_far(s.url) == BURST - SLOTS - QUEUE, "the rest refused")
        engine.gate.set()
        sender.join(120)
        assert not sender.is_alive(), "a request hung"
        after = httpx.get(f"{s.url}/metrics").text

    lost = [r for r in results if isinstance(r, BaseException)]
    assert lost == []
    assert len(results) == BURST
    statuses = Counter(r.status_code for r in results)
    assert statuses == {200: SLOTS + QUEUE, 429: BURST - SLOTS - QUEUE}
    refused = [r for r in results if r.status_code == 429]
    # No judgment had finished when they were refused: the default Retry-After.
    assert {r.headers["retry-after"] for r in refused} == {"5"}
    assert all("REFLECTRM_MAX_QUEUED_JUDGMENTS" in r.json()["detail"] for r in refused)
    # Every admitted judgment's queue wait is recorded: 4 waited 0 s, 16 waited for a slot.
    assert metric(after, "reflectrm_queue_wait_seconds_count") == SLOTS + QUEUE
    assert metric(after, 'reflectrm_queue_wait_seconds_bucket{le="0.0"}') == SLOTS
    assert metric(after, "reflectrm_queue_wait_seconds_sum") > 0
    assert metric(after, 'reflectrm_judgments_total{mode="single",outcome="rejected"}') == 60
    assert metric(after, 'reflectrm_judgments_total{mode="single",outcome="verdict"}') == 20
    assert (admission.in_flight, admission.queued) == (0, 0)


def refused_so_far(url: str) -> float:
    text = httpx.get(f"{url}/metrics").text
    return metric(text, 'reflectrm_judgments_total{mode="single",outcome="rejected"}')


def test_after_judgments_complete_retry_after_comes_from_the_measured_rate():
    engine = GatedEngine(stage1=[judgment(1)])
    app = create_app(
        Settings(max_concurrent_judgments=2, max_queued_judgments=2, swap_check_fraction=0.0),
        engine=engine,
    )
    admission = app.state.reflectrm.admission
    now = [0.0]
    admission._clock = lambda: now[0]
    with served(app) as s:
        engine.gate.set()
        for t in (0.0, 4.0, 8.0):  # three judgments 4 s apart: 0.25 judgments per second
            now[0] = t
            body = {**BODY, "seed": 1000 + int(t)}  # not one of the burst's seeds
            assert httpx.post(f"{s.url}/v1/judge", json=body).status_code == 200
        engine.gate.clear()
        results: list = []
        sender = threading.Thread(target=lambda: results.extend(asyncio.run(burst(s.url, 6))))
        sender.start()
        wait_for(lambda: admission.in_flight == 2 and admission.queued == 2, "queue full")
        wait_for(lambda: refused_so_far(s.url) == 2, "two refused")
        engine.gate.set()
        sender.join(60)
    refused = [r for r in results if r.status_code == 429]
    # 2 queued + (2 in flight - 2 slots + 1) ahead, plus the caller: (3 + 1) / 0.25 = 16 s.
    assert [r.headers["retry-after"] for r in refused] == ["16", "16"]
    assert Counter(r.status_code for r in results) == {200: 4, 429: 2}
