"""A real evaluation of a few benchmark pairs on the default model: in-process and via the service."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from reflectrm.judging.judge import Judge
from reflectrm_harness.datasets import Pair
from reflectrm_harness.evaluation import cli, records
from reflectrm_harness.evaluation.benchmarks import JUDGEBENCH, REWARDBENCH, load_dataset
from reflectrm_harness.evaluation.common import pending
from reflectrm_harness.evaluation.pairwise import report
from reflectrm_harness.evaluation.pairwise.runner import EngineBackend, HttpBackend, plan, run_units
from tests.conftest import SHARED_DATA
from tests.e2e.conftest import E2E_MAX_TOKENS, default_model_name

pytestmark = pytest.mark.skipif(
    not (SHARED_DATA / "benchmarks").is_dir(),
    reason=f"the shared benchmark files are absent ({SHARED_DATA}/benchmarks)",
)


def shortest(name: str, k: int) -> list[Pair]:
    """The k pairs with the least text: real benchmark pairs that prefill fast on a CPU."""
    pairs = load_dataset(name, SHARED_DATA).pairs

    def size(p: Pair) -> int:
        return len(p.chosen) + len(p.rejected) + sum(len(m.content) for m in p.conversation)

    return sorted(pairs, key=size)[:k]


def judge_units(units, backend, path, concurrency=8):
    async def go():
        with records.Writer(path) as writer:
            return await run_units(units, backend, writer, concurrency)

    return asyncio.run(go())


def test_eval_in_process_scores_and_rescores(engine, live, tmp_path):
    pairs = shortest(REWARDBENCH, 2) + shortest(JUDGEBENCH, 1)
    # Four candidates keep it short and still exercise the anchor, reflections and the vote.
    units = plan(
        pairs, ["single", "reflect"], True, seed=0, num_candidates=4, max_tokens=E2E_MAX_TOKENS
    )
    path = tmp_path / "results.jsonl"
    backend = EngineBackend(Judge(engine, live.settings.judge_config()))
    summary = judge_units(units, backend, path)
    assert (summary.judged, summary.retry_later) == (12, 0)

    loaded = records.load(path)
    assert len(loaded.records) == 12
    assert pending(units, (r.key for r in loaded.records)) == []
    for r in loaded.records:
        assert r.status in ("verdict", "no_verdict"), r.error
        assert r.generated_tokens > 0
        assert r.latency_ms > 0
        if r.mode == "reflect":
            # early_exit is off in the e2e settings: stage 1 plus one reflection per non-anchor.
            assert r.engine_requests == 1 + (r.outputs - 4)
            assert r.outputs >= 4

    built = report.build(loaded, path, resamples=100, seed=0)
    for metric in ("accuracy", "consistency", "agreement"):
        for mode in ("single", "reflect"):
            for b in (REWARDBENCH, JUDGEBENCH):
                cell = built[metric][mode]["benchmarks"][b]
                assert 0.0 <= cell["value"] <= 100.0
    assert built["consistency"]["reflect"]["benchmarks"][REWARDBENCH]["n"] == 2
    # Both orders with scores recorded: every mode has its swap-debiased row, at no engine cost.
    for mode in ("single", "reflect"):
        assert built["accuracy"][f"{mode}+swap"]["benchmarks"][REWARDBENCH]["n"] == 2
        assert built["position"][f"{mode}+swap"][REWARDBENCH]["first_position_rate"] in (
            50.0,
            None,
        )
    assert (
        built["cost"]["reflect"]["generated_tokens"] > built["cost"]["single"]["generated_tokens"]
    )

    # The saved records alone reproduce every number.
    paths = report.write(built, tmp_path)
    again = report.build(records.load(path), path, resamples=100, seed=0)
    assert json.dumps(again, sort_keys=True) == json.dumps(built, sort_keys=True)
    assert paths["chart"].stat().st_size > 10_000


def test_eval_command_through_the_service(live, tmp_path):
    data = tmp_path / "judgebench-1.jsonl"
    (pair,) = shortest(JUDGEBENCH, 1)
    row = {
        "id": pair.id,
        "benchmark": "judgebench",
        "prompt": pair.conversation[-1].content,
        "chosen": pair.chosen,
        "rejected": pair.rejected,
        **pair.meta,
    }
    data.write_text(json.dumps(row) + "\n")
    out = tmp_path / "out"
    argv = ["--dataset", str(data), "--url", live.url, "--mode", "single", "--mode", "vote"]
    argv += ["--num-candidates", "4", "--max-tokens", str(E2E_MAX_TOKENS), "--out-dir", str(out)]
    argv += ["--no-progress", "--bootstrap", "50"]
    assert cli.main(argv) == 0
    loaded = records.load(out / cli.RESULTS_NAME)
    assert loaded.runs[0]["model"] == default_model_name()
    assert len(loaded.records) == 4  # 1 pair x 2 orders x 2 modes
    for r in loaded.records:
        assert r.status in ("verdict", "no_verdict")
        assert r.engine_requests == 1
        assert r.prompt_tokens > 0
    assert (out / "report.md").read_text().count("JudgeBench") >= 2
    # This service does not allow ablations: naming one stops the command before judging.
    refused = tmp_path / "ablation"
    argv = ["--dataset", str(data), "--url", live.url, "--mode", "anchor_only"]
    assert cli.main([*argv, "--no-progress", "--out-dir", str(refused)]) == 2
    assert not (refused / cli.RESULTS_NAME).exists()


def test_http_backend_reports_service_errors_as_records(live, tmp_path):
    conv = shortest(REWARDBENCH, 1)[0].conversation
    huge = Pair("huge", conv, "word " * 20000, "x", REWARDBENCH, {"subset": "hep-go"})
    (unit,) = plan([huge], ["single"], False, 0, 4, E2E_MAX_TOKENS)

    async def go():
        async with httpx.AsyncClient(timeout=300) as client:
            return await HttpBackend(client, live.url).judge(unit, "too-long")

    out = asyncio.run(go())
    assert out.status == "error"
    assert out.error.startswith("http_413")
