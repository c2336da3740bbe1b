"""Three `reflectrm serve` replicas, each with its own real engine (the default model), peers of
each other (REFLECTRM_PEERS), called by OpenRLHF's own client (its ``SingleTurnAgentExecutor``
from the pinned wheel) given all three as ``--reward.remote_url``: it sends each sample of a
prompt to the next URL in turn, so every cohort's members reach all three replicas.

- All up: each cohort is judged once, by its owner, with the engine work one replica alone does
  for it (a knockout over 4 in single mode, one order: 2 semi-finals and a final, 3 engine
  requests); the other replicas' engines do nothing and every member's reply is the whole
  cohort's (4 arrived, not cut, not split).
- One replica killed (SIGKILL, mid-run, its cohorts waiting or being judged): no call hangs;
  every call the client sent to a live replica is answered with a reward (counted, not only
  allowed); a call sent to the dead one is answered before the kill or ends in OpenRLHF's own
  error after its 5 tries; the members of the dead owner's cohorts that reached a live replica
  are judged there, their replies saying cohort_split, each counted a fallback (a member alone
  there has no comparison: its reply says judge_failed, for the trainer to mask).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest

from loadtests.cohort_run import chat_prompt
from loadtests.common.family import WatchedServe, reflectrm_env
from loadtests.common.metrics import by_label, parse_metrics
from loadtests.common.ports import HOST, free_ports
from loadtests.common.process import wait_for
from loadtests.peers_run import ENGINE, FORWARDS, change, owner_of
from tests.frameworks import load_openrlhf_agent

ROOT = Path(__file__).resolve().parents[2]
GROUP = 4
COHORT_TIMEOUT_S = 10.0


def params(seed: int) -> str:
    """OpenRLHF's URL path for each replica: a cohort of GROUP per prompt, single mode, one
    order (each test its own seed: no judgment of one is reused by the other)."""
    return (
        f"get_reward?group_size={GROUP}&mode=single&debias=none&max_tokens=32&seed={seed}"
        f"&cohort_timeout_s={COHORT_TIMEOUT_S:g}"
    )


# Knockout over 4 in single mode, one order: two semi-finals and a final.
ENGINE_REQUESTS_PER_COHORT = 3
# Prompts with 4 distinct rollouts each (a duplicate is judged once, which changes the count),
# enough of them that each replica owns several whatever the ports (ownership hashes the URLs).
DISTINCT = [
    (f"What is {a} plus {b}?", (f"{a + b}.", f"{a + b + 1}.", f"{a} + {b} = {a + b}.", "No idea."))
    for a in range(2, 8)
    for b in range(3, 13)
]
# Bound on a run: the cohort timeout, a judging, OpenRLHF's 5 tries 1 s apart, with room.
HANG_S = 240.0
CLOSED = "reflectrm_cohorts_closed_total"


@pytest.fixture(scope="module")
def replicas(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[WatchedServe]]:
    folder = tmp_path_factory.mktemp("peers")
    ports = free_ports(3)
    urls = [f"http://{HOST}:{port}" for port in ports]
    started: list[WatchedServe] = []
    try:
        for k, (url, port) in enumerate(zip(urls, ports, strict=True)):
            env = reflectrm_env(
                {"peers": ",".join(urls), "peer_url": url}, pythonpath=(ROOT / "service", ROOT)
            )
            started.append(WatchedServe(folder / f"replica-{k}.stderr", env, port=port))
        for replica in started:
            replica.wait_ready()
            replica.note_family()
        yield started
    finally:
        for replica in started:
            replica.stop(signals=(signal.SIGINT, signal.SIGTERM, signal.SIGKILL))


def counts(replica: WatchedServe) -> dict[str, float]:
    values = parse_metrics(httpx.get(f"{replica.url}/metrics", timeout=10).text)
    return {
        "engine": sum(by_label(values, ENGINE, "stage").values()),
        **{f"closed_{k}": v for k, v in by_label(values, CLOSED, "how").items()},
        **{f"forward_{k}": v for k, v in by_label(values, FORWARDS, "outcome").items()},
    }


def first_owned(urls: Sequence[str], by: str, skip: Sequence[str] = ()) -> tuple[str, tuple]:
    """The first distinct-rollout prompt (not in ``skip``) whose cohort ``by`` owns."""
    for question, rollouts in DISTINCT:
        if question not in skip and owner_of(urls, question, rollouts[0], GROUP) == by:
            return question, tuple(rollouts[:GROUP])
    raise AssertionError(f"no prompt of {len(DISTINCT)} is owned by {by}")


def executor(urls: Sequence[str], seed: int) -> Any:
    """OpenRLHF 0.11.2's reward client, given every replica as ``--reward.remote_url``."""
    return load_openrlhf_agent().SingleTurnAgentExecutor([f"{u}/{params(seed)}" for u in urls])


def one_per_replica(urls: Sequence[str]) -> list[tuple[str, tuple]]:
    """The first test's cohorts: the first prompt each replica owns, in the replicas' order."""
    chosen: list[tuple[str, tuple]] = []
    for url in urls:
        chosen.append(first_owned(urls, url, skip=[q for q, _ in chosen]))
    return chosen


async def rewards(client: Any, cohorts: Sequence[tuple[str, Sequence[str]]]) -> list[Any]:
    """Every rollout of ``cohorts`` scored at once, one call each as OpenRLHF's rollout does
    (call k goes to URL k mod 3: the client's own rotation); a call's result is its reward
    info, or the exception OpenRLHF raised."""

    async def one(question: str, text: str) -> Any:
        prompt = chat_prompt(question)
        [info] = await client._fetch_rewards_via_http([prompt + text], [prompt], [None])
        return info

    calls = [one(q, t) for q, texts in cohorts for t in texts]
    return list(await asyncio.wait_for(asyncio.gather(*calls, return_exceptions=True), HANG_S))


def test_each_cohort_is_judged_once_by_its_owner_with_one_replicas_engine_work(replicas):
    urls = [r.url for r in replicas]
    client = executor(urls, seed=5)
    for k, (question, texts) in enumerate(one_per_replica(urls)):
        before = [counts(r) for r in replicas]
        [*infos] = asyncio.run(rewards(client, [(question, texts)]))
        delta = [change(counts(r), b) for r, b in zip(replicas, before, strict=True)]
        assert all(isinstance(i, dict) for i in infos), infos
        logs = [i["extra_logs"] for i in infos]
        assert [x["judge_cohort_arrived"] for x in logs] == [[4.0]] * GROUP
        assert [x["judge_cohort_cut"] for x in logs] == [[0.0]] * GROUP
        assert [x["judge_cohort_split"] for x in logs] == [[0.0]] * GROUP
        assert len({tuple(i["rewards"]) for i in infos}) > 1  # each member its own reward
        # Judged once, by the owner, with one replica's engine work; nothing on the others.
        assert [d["engine"] for d in delta] == [
            ENGINE_REQUESTS_PER_COHORT if j == k else 0 for j in range(3)
        ]
        assert [d.get("closed_full", 0) for d in delta] == [1 if j == k else 0 for j in range(3)]
        # Call j went to URL j mod 3 (the client's rotation continues from cohort to cohort):
        # the owner's own members were not forwarded; each other member was, once, ok.
        forwarded = sum(d.get("forward_ok", 0) for d in delta)
        assert forwarded == sum(1 for j in range(GROUP) if (4 * k + j) % 3 != k)
        assert sum(d.get("forward_fallback_local", 0) for d in delta) == 0


def test_a_replica_killed_mid_run_no_call_hangs_and_every_reward_is_accounted_for(replicas):
    urls = [r.url for r in replicas]
    victim = replicas[1]
    live = [r for r in replicas if r is not victim]
    # Two cohorts the victim owns and two a live replica owns, all posted at once.
    # Not the first test's prompts: a cohort judged already would be answered at once.
    used = [q for q, _ in one_per_replica(urls)]
    cohorts: list[tuple[str, tuple]] = []
    for own in (victim, victim, live[0], live[1]):
        cohorts.append(first_owned(urls, own.url, skip=used + [q for q, _ in cohorts]))
    owners = [owner_of(urls, q, texts[0], GROUP) for q, texts in cohorts]
    calls = [(c, urls[j % 3]) for j, c in enumerate(k for k in range(4) for _ in range(GROUP))]
    before = [counts(r) for r in live]
    client = executor(urls, seed=6)

    async def run() -> list[Any]:
        # Every call bounded by HANG_S (rewards): a call that hangs fails the test.
        scored = asyncio.ensure_future(rewards(client, cohorts))
        await asyncio.sleep(0.5)  # every member posted; owners waiting or judging
        victim.proc.send_signal(signal.SIGKILL)
        return await scored

    results = asyncio.run(run())
    victim.proc.wait(30)
    wait_for(lambda: not victim.left_running(), "the killed replica's engine processes end", 60)
    delta = [change(counts(r), b) for r, b in zip(live, before, strict=True)]

    assert len(results) == len(calls) == 4 * GROUP
    at_live = [r for r, (_, url) in zip(results, calls, strict=True) if url != victim.url]
    at_victim = [r for r, (_, url) in zip(results, calls, strict=True) if url == victim.url]
    # 16 calls over 3 URLs in turn: 6, 5 and 5; the victim (the second) had 5.
    assert (len(at_live), len(at_victim)) == (11, 5)
    # Every call to a live replica answered with a reward: counted, not only allowed.
    answered = [r for r in at_live if isinstance(r, dict)]
    assert len(answered) == 11, [r for r in at_live if not isinstance(r, dict)]
    # A call to the dead replica: answered before the kill, or OpenRLHF's own error.
    for r in at_victim:
        assert isinstance(r, dict) or "Request error for 5 times" in str(r), repr(r)
    # Members of the dead owner's cohorts at a live replica: judged there, marked split, each
    # counted a fallback; members of live owners' cohorts: never split.
    split_at_live = 0
    for r, (cohort, url) in zip(results, calls, strict=True):
        if url == victim.url:
            continue
        logs = r["extra_logs"]
        split = logs["judge_cohort_split"][0]
        if logs["judge_cohort_arrived"][0] < 2:  # alone where it fell back: no comparison
            assert logs["judge_failed"] == [1.0], logs
            assert logs["judge_cohort_cut"] == [1.0], logs
        if owners[cohort] == victim.url:
            split_at_live += split == 1.0
        else:
            assert split == 0.0, (cohort, url, r)
    fallbacks = sum(d.get("forward_fallback_local", 0) for d in delta)
    # Killed before it could judge: its cohorts' members at live replicas fell back there.
    assert split_at_live >= 1
    assert fallbacks == split_at_live
    for r in live:
        assert r.ready_status() == 200
    with contextlib.suppress(httpx.TransportError):
        assert httpx.get(f"{victim.url}/ready", timeout=2).status_code != 200
