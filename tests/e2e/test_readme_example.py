"""The README's sample judgment is what the default judge answers: its request posted to
`reflectrm serve` as `make serve` starts it (the default judge, default settings), and the stable
fields of the real reply compared with the README's block (scripts/readme_example.py writes it)."""

from __future__ import annotations

from pathlib import Path

import httpx

from loadtests.harness.process import launch_service, stop_process, wait_ready
from scripts.readme_example import REQUEST, SHOWN, readme_reply, render, shown


def test_the_readme_shows_the_default_judges_reply(tmp_path: Path) -> None:
    # The default judge, whatever the suite's other services serve (tests/e2e/conftest.py).
    service = launch_service(tmp_path / "serve.log", {"REFLECTRM_MODEL": "default"})
    try:
        wait_ready(service.url, 900, service)
        r = httpx.post(f"{service.url}/v1/judge", json=REQUEST, timeout=600)
    finally:
        stop_process(service.proc)
    assert r.status_code == 200, r.text
    real = shown(r.json())
    assert list(real) == list(SHOWN)
    # Sampled at temperature 1 in bf16, the analyses and vote counts can differ between two
    # runs of the same seed (batching); the verdict, its scoring and the judge cannot.
    stable = ("winner", "scoring", "outcome", "mode", "model", "seed")
    shown_reply = readme_reply()
    assert {k: real[k] for k in stable} == {k: shown_reply[k] for k in stable}, (
        "the README's sample reply is stale; the judge answers:\n"
        f"{render(r.json())}\nregenerate it with `.venv/bin/python -m scripts.readme_example`"
    )
