"""The deployment and the service agree on how long stopping takes."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from reflectrm.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
# After the drain: the engine's own shutdown (vLLM gives its workers 5 s) and the reaper's check.
ENGINE_SHUTDOWN_S = 20


def seconds(duration: str) -> float:
    m = re.fullmatch(r"(?:(\d+)m)?(?:(\d+)s)?", duration)
    assert m, duration
    assert duration, duration
    return 60 * int(m[1] or 0) + int(m[2] or 0)


def test_compose_waits_longer_than_the_drain_and_the_engine_shutdown():
    compose = yaml.safe_load((ROOT / "compose.yaml").read_text())
    stop = seconds(compose["services"]["judge"]["stop_grace_period"])
    grace = Settings(_env_file=ROOT / ".env.example").shutdown_grace_s  # type: ignore[call-arg]
    assert grace == Settings().shutdown_grace_s
    assert stop >= grace + ENGINE_SHUTDOWN_S, (stop, grace)
