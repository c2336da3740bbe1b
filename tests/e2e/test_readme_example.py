"""The README's sample judgment is what the default judge answers, in both orders: its request
posted to `reflectrm serve` as `make serve` starts it (the default judge, default settings), then
again with its two responses swapped. The same response wins both times, the scores mirror each
other, and the fields the README calls stable are the reply's (scripts/readme_example.py writes
them)."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from loadtests.common.process import launch_service, stop_process, wait_ready
from scripts.readme_example import (
    MIRROR_TOLERANCE,
    REQUEST,
    SHOWN,
    readme_reply,
    render,
    shown,
    swapped,
)

# "What is 2+2?": a pair whose answer a one-order judge names by position (issue: the default
# judge named whichever of "4" and "5" was shown first).
ARITHMETIC = {"prompt": "What is 2+2?", "responses": ["4", "5"]}


def test_the_readme_request_is_answered_alike_in_both_orders(tmp_path: Path) -> None:
    # The default judge, whatever the suite's other services serve (tests/e2e/conftest.py).
    service = launch_service(tmp_path / "serve.log", {"REFLECTRM_MODEL": "default"})
    try:
        wait_ready(service.url, 900, service)
        with httpx.Client(base_url=service.url, timeout=600) as client:
            replies = {
                name: (
                    client.post("/v1/judge", json=body),
                    client.post("/v1/judge", json=swapped(body)),
                )
                for name, body in (("readme", REQUEST), ("arithmetic", ARITHMETIC))
            }
    finally:
        stop_process(service.proc)
    for name, (r, s) in replies.items():
        assert r.status_code == 200, r.text
        assert s.status_code == 200, s.text
        first, second = r.json(), s.json()
        # Position-led one-order verdicts would name Response 1 both times.
        assert first["winner"] in (1, 2), (name, first)
        assert second["winner"] == 3 - first["winner"], (name, first, second)
        assert first["scores"][0] == pytest.approx(second["scores"][1], abs=MIRROR_TOLERANCE)
        assert first["mode"] == "margin"
        assert first["debias"] == "swap"
        assert first["note"], "a reply judged by the judge's own defaults says why"
    # Paris, shown first in the README's order.
    assert replies["readme"][0].json()["winner"] == 1
    real = shown(replies["readme"][0].json())
    assert list(real) == list(SHOWN)
    assert real == readme_reply(), (
        "the README's sample reply is stale; the judge answers:\n"
        f"{render(replies['readme'][0].json())}\nregenerate it with "
        "`.venv/bin/python -m scripts.readme_example`"
    )
