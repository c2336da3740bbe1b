"""The harness follows the service's rules: its retry policy over HTTP, and in-process evaluation
refusing exactly the pairs the HTTP schema refuses."""

from __future__ import annotations

import math
from collections.abc import Iterator

import httpx
import pytest
from fastapi.testclient import TestClient

from reflectrm.app import create_app
from reflectrm.settings import Settings
from reflectrm_harness.evaluation.common import service_retry_policy
from support.engines import ScriptedEngine, judgment


def answer(status: int, retry_after: str | None = None) -> httpx.Response:
    headers = {"Retry-After": retry_after} if retry_after is not None else {}
    return httpx.Response(status, headers=headers)


def test_evaluation_over_http_keeps_its_retry_numbers():
    service = service_retry_policy()
    assert (service.attempts, service.backoff_s, service.max_backoff_s, service.jitter) == (
        6,
        2.0,
        math.inf,
        0.0,
    )
    assert service.statuses == {429, 499, 500, 502, 503, 504}
    assert service.errors == (httpx.TransportError,)
    # The service's Retry-After is honoured, or the backoff when that is longer.
    assert service.wait_after(0, answer(503, "7")) == 7.0
    assert service.wait_after(2, answer(429, "1")) == 8.0


@pytest.fixture
def client() -> Iterator[TestClient]:
    engine = ScriptedEngine(stage1=[judgment(1)] * 8)
    with TestClient(create_app(Settings(), engine=engine)) as c:
        yield c


def test_the_evaluation_harness_refuses_exactly_what_the_schema_does(client: TestClient):
    """One rule for HTTP and in-process evaluation: a text of zero characters (e.g. five RMB
    pairs' empty prompt) is refused; whitespace is a text."""
    from reflectrm_harness.datasets import Pair, pair_from_row
    from reflectrm_harness.evaluation.pairwise.runner import plan, refusal

    rows = [
        {"prompt": "", "chosen": "a", "rejected": "b"},
        {"messages": [{"role": "user", "content": ""}], "chosen": "a", "rejected": "b"},
        {
            "messages": [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": ""},
                {"role": "user", "content": "and?"},
            ],
            "chosen": "a",
            "rejected": "b",
        },
        {"prompt": "q", "chosen": "a", "rejected": ""},
        {"prompt": "q", "chosen": "a", "rejected": " "},
        {"prompt": " ", "chosen": "a", "rejected": "b"},
    ]
    for i, row in enumerate(rows):
        pair: Pair = pair_from_row(row, default_id=i)
        (unit,) = plan([pair], ["single"], False, 0, 8, 64)
        conv = [{"role": m.role, "content": m.content} for m in pair.conversation]
        body = {"messages": conv, "responses": list(unit.responses), "mode": "single"}
        status = client.post("/v1/judge", json=body).status_code
        assert (status == 422) == (refusal(unit) is not None), (row, status)
        assert status in (200, 422)
