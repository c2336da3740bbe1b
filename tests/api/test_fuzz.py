"""The service fuzzed from its own OpenAPI schema, every operation, against the app with a
scripted engine over real HTTP (the same against the real engine: tests/e2e)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from schemathesis import GenerationMode

from reflectrm.app import create_app
from reflectrm.settings import Settings
from tests import fuzzing
from tests.api.served import Served, served
from tests.conftest import ScriptedEngine, judgment

# Cases per operation and mode: operations with a body get the full count; the others have
# little to vary and stop early.
EXAMPLES = 100


def app():
    gens = [judgment(1, "a0", (-0.01,) * 10)] + [judgment(2, f"a{i}") for i in range(1, 8)]
    engine = ScriptedEngine(stage1=gens * 4, reflect=lambda c1, c2: 1)
    # A fuzzed cohort member never sees its group fill: it waits at most 0.1 s for it.
    settings = Settings(swap_check_fraction=0.0, cohort_timeout_s=0.05, max_cohort_timeout_s=0.1)
    return create_app(settings, engine=engine)


# The operations present now, whoever added them: each is fuzzed.
with served(app()) as _probe:
    OPERATIONS = sorted(fuzzing.operations(fuzzing.load(_probe.url)))

TALLY = fuzzing.Tally()


@pytest.fixture(scope="module")
def server() -> Iterator[Served]:
    with served(app()) as s:
        yield s
    TALLY.write(os.environ.get("REFLECTRM_FUZZ_REPORT"))


@pytest.fixture(scope="module")
def schema(server: Served):
    return fuzzing.operations(fuzzing.load(server.url))


def test_the_schema_lists_the_documented_operations():
    assert {"POST /v1/judge", "POST /judge", "GET /health", "GET /ready", "GET /metrics"} <= set(
        OPERATIONS
    )


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
@pytest.mark.parametrize("label", OPERATIONS)
def test_fuzzed_requests_get_documented_answers(server: Served, schema, label: str, mode):
    adjust = fuzzing.aligned if mode is GenerationMode.POSITIVE else None
    if not fuzzing.fuzz(schema[label], mode, EXAMPLES, server.url, TALLY, adjust):
        pytest.skip(f"{label} takes no input: nothing to break")
    if mode is GenerationMode.POSITIVE:
        # Valid requests are judged, not only refused: a service answering every request with
        # a documented 4xx would pass every check above.
        key = f"{label} ({mode.value})"
        assert TALLY.answered(key) >= 1, (
            f"no valid request of {label} was answered 200: {TALLY.counts[key]}"
        )
