"""A cohort cut with members missing is said in the log and counted: the sign of a trainer that
splits each group across judges. OpenRLHF 0.11.2 given several comma-separated
``--reward.remote_url`` values rotates them per call (its own client, vendored in
tests/frameworks), so the N samples of a prompt land on different judges and every cohort waits
out its timeout with a share of its members."""

from __future__ import annotations

import asyncio
import logging
from contextlib import ExitStack
from typing import Any

import httpx
import pytest

from loadtests.common.metrics import parse_metrics
from tests.api.conftest import PreferenceEngine, served

PROMPT = "<|im_start|>user\nWhat is asked?<|im_end|>\n<|im_start|>assistant\n"
TEXTS = ["alpha answer", "b", "gamma", "delta"]
COHORT = "get_reward?group_size=4&strategy=round_robin&mode=vote&seed=3&cohort_timeout_s=1"


def engine() -> PreferenceEngine:
    return PreferenceEngine(quality={"alpha answer": 2, "b": 0, "gamma": 1, "delta": 1})


def metric(url: str, name: str) -> float:
    series = parse_metrics(httpx.get(f"{url}/metrics").text)
    assert name in series, f"{name} not exposed"
    return series[name]


def openrlhf(urls: list[str]) -> Any:
    """OpenRLHF's remote reward client for ``--reward.remote_url`` with these URLs."""
    pytest.importorskip("aiohttp")
    from tests.frameworks import load_openrlhf_agent

    return load_openrlhf_agent().SingleTurnAgentExecutor(urls)


async def samples(executor: Any, texts: list[str]) -> list[dict[str, Any]]:
    calls = [executor._fetch_rewards_via_http([PROMPT + text], [PROMPT], [None]) for text in texts]
    return [info for [info] in await asyncio.gather(*calls)]


def cut_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.WARNING and "cut by its" in r.getMessage()
    ]


def test_a_group_split_across_two_judge_urls_is_cut_on_both_and_each_says_so(caplog):
    caplog.set_level(logging.WARNING)
    with ExitStack() as stack:
        urls = [stack.enter_context(served(engine(), swap_check_fraction=0)) for _ in range(2)]
        executor = openrlhf([f"{url}/{COHORT}" for url in urls])
        infos = asyncio.run(samples(executor, TEXTS))
        counts = [
            (
                metric(url, 'reflectrm_cohorts_cut_total{reason="most_missing"}'),
                metric(url, 'reflectrm_cohorts_cut_total{reason="some_missing"}'),
                metric(url, "reflectrm_cohort_members_missing_total"),
            )
            for url in urls
        ]
    # OpenRLHF rotated the calls: two samples on each judge, each cohort cut with 2 of 4.
    assert [info["extra_logs"]["judge_cohort_arrived"] for info in infos] == [[2.0]] * 4
    assert [info["extra_logs"]["judge_cohort_cut"] for info in infos] == [[1.0]] * 4
    assert counts == [(1.0, 0.0, 2.0), (1.0, 0.0, 2.0)]
    warnings = cut_warnings(caplog)
    assert len(warnings) == 2
    for line in warnings:
        assert "with 2 of 4 members (2 missing)" in line
        assert "Members may be going to other judge URLs" in line
        assert "give each job one judge URL" in line


def test_one_late_member_is_a_cut_with_some_missing_and_a_full_cohort_is_no_cut(caplog):
    caplog.set_level(logging.WARNING)
    with served(engine(), swap_check_fraction=0) as url:
        executor = openrlhf([f"{url}/{COHORT}"])
        whole = asyncio.run(samples(executor, TEXTS))
        assert metric(url, "reflectrm_cohort_members_missing_total") == 0
        assert not cut_warnings(caplog)
        short = asyncio.run(samples(executor, TEXTS[:3]))
        counts = (
            metric(url, 'reflectrm_cohorts_cut_total{reason="most_missing"}'),
            metric(url, 'reflectrm_cohorts_cut_total{reason="some_missing"}'),
            metric(url, "reflectrm_cohort_members_missing_total"),
        )
    assert [info["extra_logs"]["judge_cohort_cut"] for info in whole] == [[0.0]] * 4
    assert [info["extra_logs"]["judge_cohort_cut"] for info in short] == [[1.0]] * 3
    assert counts == (0.0, 1.0, 1.0)
    [line] = cut_warnings(caplog)
    assert "with 3 of 4 members (1 missing)" in line
    assert "tenant default" in line
