"""A stand-in for the service behind ``httpx.MockTransport``, speaking the contract of
``/v1/rewards``, ``/get_reward`` and the cohort route ``/v1/rewards/sample`` (a member's call
answers once ``group_size`` members of its cohort have arrived, or the cohort timeout cut it),
for the adapters' tests. Rewards are hand-computable: a completion's quality is its length in
words; against a reference the reward is 0.75 for a longer completion, 0.25 for a shorter one,
0.5 for a tie; in a cohort the members ordered by (quality, text) get rank / (n - 1), and a
member whose text is ``"?"`` gets no verdict (None)."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from reflectrm.client import AsyncClient, Client
from reflectrm.integrations import common


def quality(text: str) -> int:
    return len(text.split())


def against(completion: str, reference: str) -> float:
    a, b = quality(completion), quality(reference)
    return 0.75 if a > b else 0.25 if a < b else 0.5


def rewards_reply(body: dict[str, Any]) -> dict[str, Any]:
    completions = body["completions"]
    reference = body.get("reference")
    debias = body.get("debias", "swap")
    if reference is not None:
        rewards: list[float | None] = [against(c, reference) for c in completions]
        comparisons = [
            {
                "pair": [i, "reference"],
                "orders": [{"scores": [r, 1 - r]}] * (2 if debias == "swap" else 1),
                "consistent": True if debias == "swap" else None,
            }
            for i, r in enumerate(rewards)
        ]
    else:
        ranked = sorted(range(len(completions)), key=lambda i: (quality(completions[i]), i))
        rewards = [ranked.index(i) / (len(completions) - 1) for i in range(len(completions))]
        comparisons = []
    return {
        "rewards": rewards,
        "strategy": body.get("strategy") or ("reference" if reference else "round_robin"),
        "debias": debias,
        "mode": body.get("mode", "reflect"),
        "pivot": None,
        "completions": [
            {"index": i, "reward": r, "no_verdict": 0, "duplicate_of": None}
            for i, r in enumerate(rewards)
        ],
        "comparisons": comparisons,
        "judgments": len(comparisons),
        "rounds": 1,
        "seed": body.get("seed", 0),
    }


@dataclass
class Cohort:
    group_size: int
    opened: float
    members: list[dict[str, Any]] = field(default_factory=list)
    answer: dict[str, Any] | None = None


@dataclass
class FakeService:
    """Records every call (path, query parameters, body) in ``calls``."""

    cohort_timeout_s: float = 5.0
    # Every judging call answered with this status (504: past the deadline), as a service
    # whose judgments fail for want of the judge answers.
    fail_status: int | None = None
    calls: list[tuple[str, dict[str, str], dict[str, Any]]] = field(default_factory=list)
    cohorts: dict[str, Cohort] = field(default_factory=dict)
    lock: threading.Condition = field(default_factory=threading.Condition)

    # --- the cohort route ------------------------------------------------------------------

    def _join(self, body: dict[str, Any]) -> tuple[str, Cohort, int]:
        conversation = body.get("prompt") or json.dumps(body.get("messages"))
        key = body.get("group_id") or conversation
        with self.lock:
            cohort = self.cohorts.get(key)
            if cohort is None or cohort.answer is not None:
                cohort = self.cohorts[key] = Cohort(body["group_size"], time.monotonic())
            cohort.members.append(body)
            position = len(cohort.members) - 1
            self._judge_if_ready(key, cohort)
            self.lock.notify_all()
        return key, cohort, position

    def _judge_if_ready(self, key: str, cohort: Cohort) -> None:
        timeout = cohort.members[0].get("cohort_timeout_s") or self.cohort_timeout_s
        cut = time.monotonic() - cohort.opened >= timeout
        if cohort.answer is not None or (len(cohort.members) < cohort.group_size and not cut):
            return
        texts = sorted((quality(m["completion"]), m["completion"]) for m in cohort.members)
        order = [t for _, t in texts]
        n = len(order)
        rewards: list[float | None] = [
            None if t == "?" else (k / (n - 1) if n > 1 else None) for k, t in enumerate(order)
        ]
        cohort.answer = {
            "group_id": key,
            "group_size": cohort.group_size,
            "arrived": n,
            "cut": n < cohort.group_size,
            "wait_ms": (time.monotonic() - cohort.opened) * 1000,
            "rewards": rewards,
            "order": order,
            "judgments": max(n - 1, 0),
            "strategy": cohort.members[0].get("strategy", "knockout"),
            "seed": 7,
        }

    def _member_reply(self, cohort: Cohort, body: dict[str, Any]) -> dict[str, Any]:
        assert cohort.answer is not None
        answer = dict(cohort.answer)
        index = answer.pop("order").index(body["completion"])
        reward = answer["rewards"][index]
        return {
            "reward": reward,
            "no_verdict": 1 if reward is None else 0,
            "cohort": {**answer, "index": index, "duplicate_of": None},
            "usage": {},
            "latency_ms": answer["wait_ms"],
            "model": "fake",
            "template_version": "v1",
            "request_id": "fake",
        }

    def _tick(self, cohort: Cohort, key: str) -> bool:
        with self.lock:
            self._judge_if_ready(key, cohort)
            return cohort.answer is not None

    def sample(self, body: dict[str, Any]) -> dict[str, Any]:
        key, cohort, _ = self._join(body)
        while not self._tick(cohort, key):
            with self.lock:
                self.lock.wait(0.01)
        return self._member_reply(cohort, body)

    async def sample_async(self, body: dict[str, Any]) -> dict[str, Any]:
        key, cohort, _ = self._join(body)
        while not self._tick(cohort, key):
            await asyncio.sleep(0.005)
        return self._member_reply(cohort, body)

    # --- the other routes -------------------------------------------------------------------

    def get_reward(self, params: dict[str, str], body: dict[str, Any]) -> dict[str, Any]:
        rewards = [
            against(q, label or "") for q, label in zip(body["query"], body["labels"], strict=True)
        ]
        return {"rewards": rewards, "scores": rewards, "extra_logs": {"judge_no_verdict": [0.0]}}

    def _record(self, request: httpx.Request) -> tuple[str, dict[str, str], dict[str, Any]]:
        call = (request.url.path, dict(request.url.params), json.loads(request.content))
        with self.lock:
            self.calls.append(call)
        return call

    def _failed(self) -> httpx.Response:
        return httpx.Response(self.fail_status or 500, json={"detail": "the judgment timed out"})

    def handle(self, request: httpx.Request) -> httpx.Response:
        path, params, body = self._record(request)
        if self.fail_status is not None:
            return self._failed()
        if path == "/v1/rewards/sample":
            return httpx.Response(200, json=self.sample(body))
        if path == "/get_reward":
            return httpx.Response(200, json=self.get_reward(params, body))
        assert path == "/v1/rewards", path
        return httpx.Response(200, json=rewards_reply(body))

    async def handle_async(self, request: httpx.Request) -> httpx.Response:
        path, _, body = self._record(request)
        if self.fail_status is not None:
            return self._failed()
        if path == "/v1/rewards/sample":
            return httpx.Response(200, json=await self.sample_async(body))
        assert path == "/v1/rewards", path
        return httpx.Response(200, json=rewards_reply(body))


@contextmanager
def fake_service(
    monkeypatch: pytest.MonkeyPatch, url: str = "http://reflectrm.test"
) -> Iterator[FakeService]:
    """The adapters' pooled clients (reflectrm.integrations.common) talk to a FakeService."""
    service = FakeService()
    sync_transport = httpx.MockTransport(service.handle)
    async_transport = httpx.MockTransport(service.handle_async)
    monkeypatch.setenv("REFLECTRM_URL", url)
    monkeypatch.setattr(common, "_sync_clients", {})
    monkeypatch.setattr(common, "_async_clients", __import__("weakref").WeakKeyDictionary())
    monkeypatch.setattr(
        common,
        "Client",
        lambda base: Client(base, http=httpx.Client(base_url=base, transport=sync_transport)),
    )
    monkeypatch.setattr(
        common,
        "AsyncClient",
        lambda base: AsyncClient(
            base, http=httpx.AsyncClient(base_url=base, transport=async_transport)
        ),
    )
    yield service
