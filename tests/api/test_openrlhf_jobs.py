"""OpenRLHF jobs told apart and authenticated by the URL alone: OpenRLHF 0.11.2's own client
(tests/frameworks, `SingleTurnAgentExecutor._fetch_rewards_via_http`) sends no headers of its
own, so the API key rides as the password of HTTP Basic auth in the URL's user info
(``http://job-a:KEY@host/get_reward``, which aiohttp sends as ``Authorization: Basic``) and the
user name names the job: a tenant within the key's share, with cohorts of its own.

The engine is tests/api/conftest.py's PreferenceEngine (vote mode, 8 samples: response 1 gets
4 + quality(r1) - quality(r2) + 2 votes). A against B, round robin with swap: A shown first gets
8 of 8, shown second 4 of 8, so A's reward is (1 + 0.5) / 2 = 0.75 and B's 0.25, from one pair
judged in two orders: two engine calls per cohort.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
from typing import Any

import httpx
import pytest

from loadtests.common.metrics import parse_metrics
from reflectrm.api.auth import tenant_of_key
from tests.api.conftest import PreferenceEngine, served

A, B = "alpha answer", "b"
KEY = "job-key-0123456789abcdef"
OTHER_KEY = "other-key-fedcba9876543210"
PROMPT = "<|im_start|>user\nWhat is asked?<|im_end|>\n<|im_start|>assistant\n"
COHORT = "group_size=2&strategy=round_robin&mode=vote&seed=3"


def engine() -> PreferenceEngine:
    return PreferenceEngine(quality={A: 2, B: 0}, first_bias=2)


def with_user_info(url: str, user: str, password: str | None = None) -> str:
    info = user if password is None else f"{user}:{password}"
    return url.replace("http://", f"http://{info}@", 1)


def executor(url: str) -> Any:
    """OpenRLHF 0.11.2's remote reward client, unchanged, for ``--reward.remote_url url``."""
    pytest.importorskip("aiohttp")
    from tests.frameworks import load_openrlhf_agent

    return load_openrlhf_agent().SingleTurnAgentExecutor(url)


async def openrlhf_samples(jobs: list[tuple[Any, str]]) -> list[dict[str, Any]]:
    """Each (executor, response) posted as OpenRLHF posts a sample right after generating it,
    all at once; the rewards info of each."""

    async def one(ex: Any, response: str) -> dict[str, Any]:
        [info] = await ex._fetch_rewards_via_http([PROMPT + response], [PROMPT], [None])
        assert isinstance(info, dict)
        return info

    return list(await asyncio.gather(*(one(ex, r) for ex, r in jobs)))


def admitted(url: str) -> dict[str, float]:
    text = httpx.get(f"{url}/metrics").text
    name = "reflectrm_tenant_judgments_admitted_total"
    return {
        dict(labels)["tenant"]: value
        for (n, labels), value in parse_metrics(text, name, by="labels").items()
        if n == name
    }


def test_openrlhf_reaches_get_reward_with_the_key_in_its_url_as_its_jobs_tenant(caplog):
    caplog.set_level(logging.INFO)
    eng = engine()
    with served(eng, api_keys=f"{KEY},{OTHER_KEY}", swap_check_fraction=0) as url:
        job_a = executor(with_user_info(f"{url}/get_reward?{COHORT}", "job-a", KEY))
        infos = asyncio.run(openrlhf_samples([(job_a, A), (job_a, B)]))
        counts = admitted(url)
    assert [info["rewards"] for info in infos] == [[0.75], [0.25]]
    assert [info["extra_logs"]["judge_cohort_arrived"] for info in infos] == [[2.0], [2.0]]
    assert len(eng.calls) == 2  # one pair, two orders
    # Judged as the job's tenant within the key's share, and nowhere else.
    assert counts == {"default": 0, f"{tenant_of_key(KEY)}/job-a": 2}
    # Neither the key nor the Basic credentials carrying it appear in any log line.
    lines = [r.getMessage() for r in caplog.records]
    access = [json.loads(m) for r, m in zip(caplog.records, lines, strict=True)
              if r.name == "reflectrm.access"]  # fmt: skip
    assert [(a["route"], a["status"]) for a in access if a["route"] == "/get_reward"] == [
        ("/get_reward", 200)
    ] * 2
    assert {a.get("tenant") for a in access if a["route"] == "/get_reward"} == {
        f"{tenant_of_key(KEY)}/job-a"
    }
    secret = base64.b64encode(f"job-a:{KEY}".encode()).decode()
    assert not [m for m in lines if KEY in m or secret in m]


def test_two_jobs_on_the_same_prompts_form_two_cohorts_each_judged_apart():
    """Before, every OpenRLHF job was tenant "default": the same prompts made the same cohort
    keys, and two jobs' samples merged into each other's groups."""
    eng = engine()
    with served(eng, api_keys=KEY, swap_check_fraction=0) as url:
        job_a = executor(with_user_info(f"{url}/get_reward?{COHORT}", "job-a", KEY))
        job_b = executor(with_user_info(f"{url}/get_reward?{COHORT}", "job-b", KEY))
        # The first sample of each job, then the second of each: merged cohorts would be
        # (A, A) and (B, B), two groups of one text, every reward 0.5.
        infos = asyncio.run(openrlhf_samples([(job_a, A), (job_b, A), (job_a, B), (job_b, B)]))
        counts = admitted(url)
    assert [info["rewards"] for info in infos] == [[0.75], [0.75], [0.25], [0.25]]
    for info in infos:
        logs = info["extra_logs"]
        assert logs["judge_cohort_arrived"] == [2.0]
        assert logs["judge_cohort_cut"] == [0.0]
        assert logs["judge_judgments_per_reward"] == [1.0]  # 2 judgments (swap) for 2 rewards
    assert len(eng.calls) == 4  # two cohorts, each one pair in two orders
    tenant = tenant_of_key(KEY)
    assert counts == {"default": 0, f"{tenant}/job-a": 2, f"{tenant}/job-b": 2}


def test_with_keys_off_the_user_name_or_the_tenant_parameter_names_the_job():
    eng = engine()
    with served(eng, swap_check_fraction=0) as url:
        by_user = executor(with_user_info(f"{url}/get_reward?{COHORT}", "job-a"))
        by_query = executor(f"{url}/get_reward?{COHORT}&tenant=job-b")
        infos = asyncio.run(
            openrlhf_samples([(by_user, A), (by_query, A), (by_user, B), (by_query, B)])
        )
        counts = admitted(url)
    assert [info["rewards"] for info in infos] == [[0.75], [0.75], [0.25], [0.25]]
    assert counts == {"default": 0, "job-a": 2, "job-b": 2}


def test_a_wrong_password_is_401_saying_the_password_is_the_api_key(caplog):
    caplog.set_level(logging.INFO)
    with served(engine(), api_keys=KEY) as url:
        body = {"query": [PROMPT + A], "prompts": [PROMPT], "labels": ["reference"]}
        wrong = httpx.post(f"{url}/get_reward", json=body, auth=("job-a", KEY + "x"))
        garbled = httpx.post(
            f"{url}/get_reward", json=body, headers={"Authorization": "Basic not-base64!"}
        )
        missing = httpx.post(f"{url}/get_reward", json=body)
        bad_job = httpx.post(f"{url}/get_reward", json=body, auth=("a job", KEY))
    assert wrong.status_code == 401
    detail = wrong.json()["detail"]
    assert "API key is not valid" in detail
    assert "password of HTTP Basic auth" in detail
    assert KEY not in wrong.text
    assert 'Basic realm="reflectrm"' in wrong.headers["www-authenticate"]
    assert garbled.status_code == 401
    assert "not base64" in garbled.json()["detail"]
    assert missing.status_code == 401
    assert "http://JOB:KEY@host:port/" in missing.json()["detail"]
    assert bad_job.status_code == 422
    assert "user name of HTTP Basic auth" in bad_job.json()["detail"]
    # The refused calls are logged (route and status), the password never.
    lines = [r.getMessage() for r in caplog.records]
    assert sum('"status": 401' in m for m in lines) == 3
    assert not [m for m in lines if KEY in m]


def test_a_cohort_without_verdict_is_flagged_to_openrlhf_not_rewarded():
    """OpenRLHF 0.11.2 has no per-sample mask: its reward must be a number. A cohort whose
    comparisons all ended without a verdict gives each sample the neutral number, the same for
    all (no advantage between them), and extra_logs judge_failed 1.0, which OpenRLHF's own
    client hands on as the sample's extra_logs (then an info tensor per key)."""
    from tests.conftest import ScriptedEngine, judgment

    silent = ScriptedEngine(stage1=[judgment(None)] * 8)
    with served(silent, swap_check_fraction=0) as url:
        ex = executor(f"{url}/get_reward?{COHORT}")
        infos = asyncio.run(openrlhf_samples([(ex, A), (ex, B)]))
    assert [i["rewards"] for i in infos] == [[0.5], [0.5]]
    assert [i["extra_logs"]["judge_failed"] for i in infos] == [[1.0], [1.0]]
    assert [i["extra_logs"]["judge_no_verdict"] for i in infos] == [[1.0], [1.0]]
