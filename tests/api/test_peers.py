"""Several replicas for one job (REFLECTRM_PEERS): each cohort is judged by its one owner, the
members sent to the other replicas forwarded there; an owner that is down or slow costs no
member, each is judged where it arrived and its reply says cohort_split.

Every replica is the app on tests/api/conftest.py's PreferenceEngine behind a real server on a
loopback port (tests/api/served.py), so the forwarded calls are real HTTP. A replica listed in
REFLECTRM_PEERS but never started is an owner that is down: its port refuses connections.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any

import httpx
import pytest

from loadtests.common.metrics import parse_metrics
from loadtests.common.ports import free_ports
from reflectrm.api.auth import tenant_of_key
from reflectrm.app import create_app
from reflectrm.serving.ownership import owner
from reflectrm.settings import Settings
from tests.api.conftest import PreferenceEngine
from tests.api.conftest import served as served_one
from tests.api.served import served

A, B, C, D = "alpha answer", "b", "gamma", "delta"
QUALITY = {A: 2, B: 0, C: 1, D: 1}
Q = "What is asked?"
TENANT = "default"
KEY = "k" * 24
# Bound on any one test's calls: a member that hangs fails the test, never the suite.
HANG_S = 30.0


def engine(**kw: Any) -> PreferenceEngine:
    return PreferenceEngine(quality=dict(QUALITY), first_bias=2, **kw)


def member(completion: str, group_id: str, **kw: Any) -> dict[str, Any]:
    return {
        "prompt": Q,
        "completion": completion,
        "group_id": group_id,
        "group_size": 4,
        "strategy": "round_robin",
        "mode": "vote",
        "seed": 3,
        **kw,
    }


def group_owned_by(urls: Sequence[str], which: str, tenant: str = TENANT) -> str:
    """A group_id whose cohort ``which`` owns among ``urls``."""
    for k in itertools.count():
        group_id = f"step-1/prompt-{k}"
        if owner(list(urls), f"{tenant}\ng:{group_id}") == which:
            return group_id
    raise AssertionError("unreachable")


@contextlib.contextmanager
def replicas(engines: Sequence[PreferenceEngine | None], **settings: Any) -> Iterator[list[str]]:
    """One replica per engine, all listed in each one's REFLECTRM_PEERS; a None engine is a
    replica listed but never started (down)."""
    ports = free_ports(len(engines))
    urls = [f"http://127.0.0.1:{port}" for port in ports]
    settings = {"swap_check_fraction": 0, "peers": ",".join(urls), **settings}
    with contextlib.ExitStack() as stack:
        for url, port, eng in zip(urls, ports, engines, strict=True):
            if eng is None:
                continue
            app = create_app(Settings(peer_url=url, **settings), engine=eng)
            stack.enter_context(served(app, port=port, lifespan="on"))
        yield urls


async def post_each(
    calls: Sequence[tuple[str, dict[str, Any]]],
    path: str = "/v1/rewards/sample",
    headers: dict[str, str] | None = None,
) -> list[httpx.Response]:
    """Each (url, body) posted at once; every call bounded, so none can hang the test."""
    async with httpx.AsyncClient(timeout=HANG_S, headers=headers) as http:
        tasks = [http.post(url + path, json=body) for url, body in calls]
        return list(await asyncio.wait_for(asyncio.gather(*tasks), HANG_S))


def series(url: str) -> dict[str, float]:
    return parse_metrics(httpx.get(f"{url}/metrics").text)


def forwards(url: str, outcome: str) -> float:
    return series(url)[f'reflectrm_peer_forward_total{{outcome="{outcome}"}}']


def ok_bodies(replies: Sequence[httpx.Response]) -> list[dict[str, Any]]:
    assert [r.status_code for r in replies] == [200] * len(replies), [r.text for r in replies]
    return [r.json() for r in replies]


def one_replica_alone(texts: Sequence[str], group_id: str) -> tuple[list[dict[str, Any]], int]:
    """The same cohort sent to one replica without peers: its replies and engine requests."""
    eng = engine()
    with served_one(eng, swap_check_fraction=0) as url:
        bodies = ok_bodies(asyncio.run(post_each([(url, member(t, group_id)) for t in texts])))
    return bodies, len(eng.calls)


# --- a cohort whose members alternate between replicas --------------------------------------


def test_a_cohort_alternating_between_two_replicas_is_judged_once_by_its_owner():
    engines = [engine(), engine()]
    with replicas(engines) as urls:
        group_id = group_owned_by(urls, urls[1])
        texts = [A, B, C, D]
        calls = [(urls[k % 2], member(t, group_id)) for k, t in enumerate(texts)]
        bodies = ok_bodies(asyncio.run(post_each(calls)))
        forwarded = [forwards(urls[0], o) for o in ("ok", "fallback_local", "error")]
        owned = [forwards(urls[1], o) for o in ("ok", "fallback_local", "error")]
    alone, alone_calls = one_replica_alone(texts, group_id)
    # The owner judged the whole group once; the other replica's engine did nothing.
    assert len(engines[0].calls) == 0
    assert len(engines[1].calls) == alone_calls == 12  # 6 pairs x 2 orders
    assert forwarded == [2.0, 0.0, 0.0]  # its two members went to the owner
    assert owned == [0.0, 0.0, 0.0]
    for body, lone in zip(bodies, alone, strict=True):
        assert body["cohort_split"] is False
        assert body["cohort"]["arrived"] == 4
        assert body["cohort"]["cut"] is False
        assert body["reward"] == lone["reward"]
        assert body["cohort"]["rewards"] == lone["cohort"]["rewards"]


def test_three_replicas_and_api_keys_the_forwarded_call_carries_the_callers_credentials():
    engines = [engine(), engine(), engine()]
    with replicas(engines, api_keys=KEY) as urls:
        group_id = group_owned_by(urls, urls[2], tenant=tenant_of_key(KEY))
        calls = [(urls[k % 3], member(t, group_id)) for k, t in enumerate([A, B, C, D])]
        auth = {"Authorization": f"Bearer {KEY}"}
        bodies = ok_bodies(asyncio.run(post_each(calls, headers=auth)))
    assert [len(e.calls) for e in engines] == [0, 0, 12]
    assert [b["cohort"]["arrived"] for b in bodies] == [4, 4, 4, 4]
    assert [b["cohort_split"] for b in bodies] == [False] * 4


def test_openrlhf_rotating_its_urls_gets_whole_cohorts():
    pytest.importorskip("aiohttp")
    from tests.frameworks import load_openrlhf_agent

    prompt = "<|im_start|>user\nWhat is asked?<|im_end|>\n<|im_start|>assistant\n"
    path = "get_reward?group_size=4&strategy=round_robin&mode=vote&seed=3&cohort_timeout_s=5"
    engines = [engine(), engine()]
    with replicas(engines) as urls:
        executor = load_openrlhf_agent().SingleTurnAgentExecutor([f"{u}/{path}" for u in urls])

        async def rewards() -> list[dict[str, Any]]:
            calls = [
                executor._fetch_rewards_via_http([prompt + t], [prompt], [None])
                for t in (A, B, C, D)
            ]
            return [info for [info] in await asyncio.wait_for(asyncio.gather(*calls), HANG_S)]

        infos = asyncio.run(rewards())
    assert [info["extra_logs"]["judge_cohort_arrived"] for info in infos] == [[4.0]] * 4
    assert [info["extra_logs"]["judge_cohort_cut"] for info in infos] == [[0.0]] * 4
    assert [info["extra_logs"]["judge_cohort_split"] for info in infos] == [[0.0]] * 4
    assert sorted(len(e.calls) for e in engines) == [0, 12]


def test_a_get_reward_call_with_samples_of_two_owners_is_judged_where_it_arrived_marked_split():
    engines = [engine(), engine()]
    with replicas(engines) as urls:
        prompts = [f"Prompt {k}?" for k in range(50)]
        owners = {p: owner(urls, prompt_cohort(p)) for p in prompts}
        first = next(p for p in prompts if owners[p] == urls[0])
        second = next(p for p in prompts if owners[p] == urls[1])
        body = {
            "query": [first + A, second + B],
            "prompts": [first, second],
            "labels": [None, None],
        }
        path = "/get_reward?group_size=2&mode=vote&cohort_timeout_s=1"
        [reply] = asyncio.run(post_each([(urls[0], body)], path=path))
        sent = sum(forwards(urls[0], o) for o in ("ok", "fallback_local", "error"))
    assert reply.status_code == 200, reply.text
    assert reply.json()["extra_logs"]["judge_cohort_split"] == [1.0, 1.0]
    assert sent == 0
    assert [len(e.calls) for e in engines] == [0, 0]  # two cohorts of one: nothing to compare


def prompt_cohort(prompt: str) -> str:
    from reflectrm.serving.service import cohort_name, member_asks
    from reflectrm.serving.types import SampleAsk, SampleOptions

    [ask] = member_asks(
        [SampleAsk(query=prompt + "x", prompt=prompt, label=None)], SampleOptions(group_size=2)
    )
    return cohort_name(TENANT, ask)


def test_a_caller_gone_during_a_forward_leaves_its_member_at_the_owner_for_its_retry():
    engines = [engine(), engine()]
    with replicas(engines) as urls:
        group_id = group_owned_by(urls, urls[1])

        def body(text: str) -> dict[str, Any]:
            return member(text, group_id, group_size=2, cohort_timeout_s=10)

        async def gone_then_retried() -> list[httpx.Response]:
            async with httpx.AsyncClient(timeout=0.7) as impatient:
                with pytest.raises(httpx.ReadTimeout):
                    await impatient.post(f"{urls[0]}/v1/rewards/sample", json=body(A))
            await asyncio.sleep(1.0)  # both replicas notice within 0.25 s polls
            return await post_each([(urls[0], body(A)), (urls[1], body(B))])

        bodies = ok_bodies(asyncio.run(asyncio.wait_for(gone_then_retried(), HANG_S)))
    assert [b["retried"] for b in bodies] == [True, False]  # the retry took the member over
    assert [b["cohort"]["arrived"] for b in bodies] == [2, 2]
    assert [b["reward"] for b in bodies] == [0.75, 0.25]
    assert [len(e.calls) for e in engines] == [0, 2]


# --- the owner down or slow ----------------------------------------------------------------


def test_the_owner_down_every_member_is_answered_where_it_arrived_marked_split():
    engines = [engine(), engine(), None]  # the third replica is listed, never started
    with replicas(engines) as urls:
        group_id = group_owned_by(urls, urls[2])
        texts = [A, B, C, D]
        calls = [
            (urls[k % 2], member(t, group_id, cohort_timeout_s=1)) for k, t in enumerate(texts)
        ]
        bodies = ok_bodies(asyncio.run(post_each(calls)))
        fallbacks = [forwards(u, "fallback_local") for u in urls[:2]]
    assert len(bodies) == 4
    assert [b["cohort_split"] for b in bodies] == [True] * 4
    # Each live replica judged the two members it got, as a cut cohort of two.
    assert [b["cohort"]["arrived"] for b in bodies] == [2, 2, 2, 2]
    assert [b["cohort"]["cut"] for b in bodies] == [True] * 4
    assert fallbacks == [2.0, 2.0]
    assert [len(e.calls) for e in engines if e is not None] == [2, 2]  # 1 pair x 2 orders each


def test_all_members_at_one_replica_with_the_owner_down_make_a_whole_local_cohort():
    engines = [engine(), None]
    with replicas(engines) as urls:
        group_id = group_owned_by(urls, urls[1])
        calls = [(urls[0], member(t, group_id)) for t in (A, B, C, D)]
        bodies = ok_bodies(asyncio.run(post_each(calls)))
    assert [b["cohort"]["arrived"] for b in bodies] == [4] * 4
    assert [b["cohort"]["cut"] for b in bodies] == [False] * 4
    assert [b["cohort_split"] for b in bodies] == [True] * 4
    assert len(engines[0].calls) == 12


def test_a_slow_owner_is_given_up_before_the_callers_deadline():
    # The owner's engine takes 60 s a request; the callers wait 8 s: the forwards are given up
    # after 8 - 1 (cohort timeout) - 5 = 2 s and the members judged where they arrived.
    slow, fast = engine(delay_s=60.0), engine()
    with replicas([fast, slow], shutdown_grace_s=0) as urls:
        group_id = group_owned_by(urls, urls[1])
        calls = [(urls[0], member(t, group_id, group_size=2, cohort_timeout_s=1)) for t in (A, B)]
        headers = {"X-Reflectrm-Deadline-S": "8"}

        async def timed() -> tuple[list[httpx.Response], float]:
            loop = asyncio.get_running_loop()
            started = loop.time()
            replies = await post_each(calls, headers=headers)
            return replies, loop.time() - started

        replies, seconds = asyncio.run(timed())
        fallbacks = forwards(urls[0], "fallback_local")
    bodies = ok_bodies(replies)
    assert [b["cohort_split"] for b in bodies] == [True, True]
    assert [b["cohort"]["arrived"] for b in bodies] == [2, 2]  # judged here, whole
    # A against B in both orders: A gets 8 of 8 votes shown first, 4 of 8 shown second.
    assert [b["reward"] for b in bodies] == [0.75, 0.25]
    assert fallbacks == 2.0
    assert len(fast.calls) == 2
    assert len(slow.calls) == 2  # the owner had started the judging it was not waited for
    assert 2.0 <= seconds < 8.0  # within the callers' deadline


@contextlib.asynccontextmanager
async def never_loads(settings: Settings) -> AsyncIterator[Any]:
    await asyncio.Event().wait()  # an engine still loading: the replica answers 503
    yield None


def test_an_owner_not_serving_yet_gets_its_members_judged_where_they_arrived():
    ports = free_ports(2)
    urls = [f"http://127.0.0.1:{port}" for port in ports]
    settings = {"swap_check_fraction": 0, "peers": ",".join(urls)}
    eng = engine()
    with contextlib.ExitStack() as stack:
        here = create_app(Settings(peer_url=urls[0], **settings), engine=eng)
        loading = create_app(Settings(peer_url=urls[1], **settings), engine_factory=never_loads)
        stack.enter_context(served(here, port=ports[0], lifespan="on"))
        stack.enter_context(served(loading, port=ports[1], lifespan="on"))
        group_id = group_owned_by(urls, urls[1])
        calls = [(urls[0], member(t, group_id, group_size=2)) for t in (A, B)]
        bodies = ok_bodies(asyncio.run(post_each(calls)))
        fallbacks = forwards(urls[0], "fallback_local")
    assert [b["cohort_split"] for b in bodies] == [True, True]
    assert [b["cohort"]["arrived"] for b in bodies] == [2, 2]
    assert fallbacks == 2.0
    assert len(eng.calls) == 2


def test_an_owners_refusal_is_relayed_as_it_is_and_counted_an_error():
    # The owner has other API keys than the replica the call reached: its 401 is the reply.
    ports = free_ports(2)
    urls = [f"http://127.0.0.1:{port}" for port in ports]
    settings = {"swap_check_fraction": 0, "peers": ",".join(urls)}
    engines = [engine(), engine()]
    with contextlib.ExitStack() as stack:
        for k, other_key in enumerate((KEY, "o" * 24)):
            app = create_app(
                Settings(peer_url=urls[k], api_keys=other_key, **settings), engine=engines[k]
            )
            stack.enter_context(served(app, port=ports[k], lifespan="on"))
        group_id = group_owned_by(urls, urls[1], tenant=tenant_of_key(KEY))
        auth = {"Authorization": f"Bearer {KEY}"}
        [reply] = asyncio.run(post_each([(urls[0], member(A, group_id))], headers=auth))
        counted = [forwards(urls[0], o) for o in ("ok", "fallback_local", "error")]
    assert reply.status_code == 401
    assert counted == [0.0, 0.0, 1.0]
    assert [len(e.calls) for e in engines] == [0, 0]


# --- one hop at most, and off by default ---------------------------------------------------


def test_a_forwarded_call_is_judged_where_it_arrives_never_forwarded_again():
    # As a replica whose list names another owner than the forwarding replica's did (the lists
    # differ during a rollout) sees it: judged here, marked split, not sent on.
    engines = [engine(), engine()]
    with replicas(engines) as urls:
        group_id = group_owned_by(urls, urls[1])
        calls = [(urls[0], member(t, group_id, group_size=2)) for t in (A, B)]
        bodies = ok_bodies(asyncio.run(post_each(calls, headers={"X-Reflectrm-Forwarded": "1"})))
        sent = sum(forwards(urls[0], o) for o in ("ok", "fallback_local", "error"))
    assert sent == 0
    assert [len(e.calls) for e in engines] == [2, 0]
    assert [b["cohort_split"] for b in bodies] == [True, True]


def test_without_peers_nothing_changes():
    eng = engine()
    with served_one(eng, swap_check_fraction=0) as url:
        replies = asyncio.run(post_each([(url, member(t, "g", group_size=2)) for t in (A, B)]))
        exposed = series(url)
    bodies = ok_bodies(replies)
    assert all("cohort_split" not in b for b in bodies)
    assert not [name for name in exposed if "peer_forward" in name]
