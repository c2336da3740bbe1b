"""The benchmark runner's smoke mode on the real engine: the live service beside the engine's
limit and a real ``vllm serve`` with the careful and the naive client, two tiny judgments per
level, each answered; and the peer's command line means to vLLM what the service's engine
arguments say."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from loadtests.contenders import EngineSettings, vllm_serve_command

ROOT = Path(__file__).resolve().parents[2]


def test_vllm_serve_flags_parse_to_the_services_engine_arguments():
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    settings = EngineSettings(model="/models/m", served_model_name="m", kv_cache_gib=1.5)
    kwargs = settings.engine_kwargs()
    command = vllm_serve_command(kwargs, port=8999)
    assert command[1:5] == ["-m", "vllm.entrypoints.openai.api_server", "--model", "/models/m"]
    parsed = vars(make_arg_parser(FlexibleArgumentParser()).parse_args(command[3:]))
    for name, value in kwargs.items():
        if name == "model":
            assert parsed[name] == value
        elif name == "served_model_name":
            assert parsed[name] == [value]
        else:
            assert parsed[name] == value, name
    assert parsed["enable_prompt_tokens_details"] is True
    assert parsed["port"] == 8999


def test_bench_smoke_measures_every_contender(live, tmp_path):
    out = tmp_path / "bench"
    command = [
        sys.executable,
        "-m",
        "loadtests.bench",
        "--smoke",
        "--service-url",
        live.url,
        "--no-early-exit",  # as the live service is set up
        "--out",
        str(out),
    ]
    # A bound on the whole run, not a timed assertion.
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=1500)
    report = done.stdout[-4000:] + done.stderr[-4000:]
    assert done.returncode == 0, report

    summary = json.loads((out / "summary.json").read_text())
    assert summary["levels"] == [1, 2]
    assert [c["name"] for c in summary["run"]["contenders"]] == [
        "limit",
        "service",
        "peer",
        "naive",
    ]
    for name, points in summary["points"].items():
        for level in ("1", "2"):
            p = points[level]
            assert p["judgments"] == 2, (name, level, p["errors"])
            assert p["failed"] == 0, (name, level, p["errors"])
            assert p["tokens"]["generated_tokens"] > 0
            assert p["judgments_per_s"] > 0
            assert p["latency_ms"]["p50"] <= p["latency_ms"]["p95"] <= p["latency_ms"]["max"]
    # Stage 1 is one request for the careful peer and eight for the naive one.
    careful = summary["points"]["peer"]["1"]["by_stage"]["rollouts"]
    naive = summary["points"]["naive"]["1"]["by_stage"]["rollouts"]
    assert careful["requests"] == 2
    assert naive["requests"] == 16
    assert set(summary["ratios"]["service"]) == {"service/limit", "service/peer", "service/naive"}
    records = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    assert len(records) == 4 * 2 * 2
    assert all(r["ok"] for r in records)
    assert (out / "chart.png").read_bytes()[:4] == b"\x89PNG"
    assert "| service/limit |" in (out / "report.md").read_text()
    assert (out / "vllm-serve.log").is_file()
