"""Group evaluation over HTTP against the app on a scripted engine: the same records as
in-process, for the pool (``/v1/judge``) and for designs served (``/v1/rewards``), and the
command with ``--url``."""

from __future__ import annotations

import asyncio
import json
import tempfile

import httpx
from test_group_eval import SETTINGS, QualityEngine, _quality_group

from reflectrm.judging.groups import STRATEGIES
from reflectrm.settings import Settings
from reflectrm_harness.evaluation import cli
from reflectrm_harness.evaluation.groups.runner import (
    HttpGroups,
    design_plan,
    in_process_groups,
    load_rows,
    pool_plan,
    run_group_units,
)
from support.served import served

SERVER = {"swap_check_fraction": 0.0, "early_exit": True}


def _comparable(rows):
    def strip(value):
        if isinstance(value, dict):
            return {
                k: strip(v)
                for k, v in value.items()
                if k not in ("latency_ms", "cached_prompt_tokens")
            }
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value

    return sorted((strip(r) for r in rows), key=lambda r: json.dumps(r, sort_keys=True))


def test_http_records_are_the_in_process_records():
    groups = [_quality_group("g1", [3, 1, 4, 2]), _quality_group("g2", [2, 9, 5])]
    units = [*pool_plan(groups, SETTINGS.seed), *design_plan(groups, STRATEGIES, ["none", "swap"])]

    local: list[dict] = []

    async def in_process():
        async with in_process_groups(Settings(**SERVER), QualityEngine(bias=1)) as backend:
            await run_group_units(units, backend, SETTINGS, local.append, 4)

    asyncio.run(in_process())

    remote: list[dict] = []
    with served(QualityEngine(bias=1), **SERVER) as url:

        async def go():
            async with httpx.AsyncClient(timeout=60) as client:
                backend = HttpGroups(client, url)
                await run_group_units(units, backend, SETTINGS, remote.append, 4)

        asyncio.run(go())
    assert len(local) == len(remote) == len(units)
    assert _comparable(local) == _comparable(remote)


def test_command_over_url(tmp_path):
    rows = [
        {"id": "a", "prompt": "question a", "completions": ["x [q=1] a", "y [q=3] a"], "best": 1},
        {
            "id": "b",
            "prompt": "question b",
            "completions": ["x [q=2] b", "y [q=1] b", "z [q=5] b"],
            "best": 2,
        },
    ]
    data = tmp_path / "mine.jsonl"
    data.write_text("\n".join(json.dumps(r) for r in rows))
    out = tmp_path / "out"
    with served(QualityEngine(bias=0), **SERVER) as url:
        argv = ["--groups", "--dataset", str(data), "--url", url, "--mode", "vote"]
        argv += ["--num-candidates", "2", "--max-tokens", "64", "--out-dir", str(out)]
        argv += ["--no-progress", "--bootstrap", "20"]
        assert cli.main(argv) == 0
        assert cli.main([*argv, "--direct", "--design", "swiss"]) == 0
    runs, recs = load_rows(out / "group-results.jsonl")
    assert [r["backend"] for r in runs if r["type"] == "run"] == ["http", "http"]
    # The headers name no path of this machine (the dataset is in the temporary folder).
    assert runs[0]["datasets"]["mine"]["source"] == str(data).replace(
        tempfile.gettempdir(), "<tmp>"
    )
    assert sum(k[0] == "pool" for k in recs) == (1 + 3) * 2
    assert sum(k[0] == "group" for k in recs) == 2 * 2
    report = json.loads((out / "group-report.json").read_text())
    # A judge that always prefers the better completion, in both orders: every design picks it,
    # but pivot, whose group b has the pivot q=1 (all lengths equal: the middle index): q=2 and
    # q=5 both beat it 2-0 and tie at the top (1/2), so pivot scores (1 + 1/2) / 2.
    for name, row in report["rows"].items():
        expected = 0.75 if row["strategy"] == "pivot" else 1.0
        assert row["best_of_n"]["value"] == expected, name
