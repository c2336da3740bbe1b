"""Fair shares: per-tenant queues served in weighted round robin, per-tenant and tenant-count
bounds. Exact orders, computed by hand."""

from __future__ import annotations

import asyncio

import pytest

from reflectrm.serving.admission import Admission, OverloadedError


async def settle() -> None:
    for _ in range(10):
        await asyncio.sleep(0)


class Gate:
    """Judgments that finish one at a time when the test says, recording the order they
    started in."""

    def __init__(self, admission: Admission) -> None:
        self.admission = admission
        self.started: list[str] = []
        self.events: dict[str, asyncio.Event] = {}

    def submit(self, tenant: str, name: str) -> asyncio.Task[str]:
        event = self.events[name] = asyncio.Event()

        async def work() -> str:
            self.started.append(name)
            await event.wait()
            return name

        return asyncio.create_task(self.admission.admitted(work(), 30, tenant))

    async def finish(self, name: str) -> None:
        self.events[name].set()
        await settle()


async def test_a_light_tenant_is_served_within_one_round_of_a_flood():
    gate = Gate(Admission(max_in_flight=1, max_queued=100, queue_timeout_s=30))
    flood = [gate.submit("trainer", f"t{i}") for i in range(20)]
    await settle()
    light = gate.submit("eval", "e0")
    await settle()
    assert gate.started == ["t0"]
    assert gate.admission.queued == 20
    await gate.finish("t0")
    # 19 of the flood were queued first, yet the light tenant's one judgment goes next.
    assert gate.started == ["t0", "e0"]
    await gate.finish("e0")
    assert gate.started == ["t0", "e0", "t1"]
    for i in range(1, 20):
        await gate.finish(f"t{i}")
    assert await light == "e0"
    assert [await t for t in flood] == [f"t{i}" for i in range(20)]  # none lost, in order
    assert (gate.admission.in_flight, gate.admission.queued) == (0, 0)
    assert gate.admission.tenant_stats() == {}  # idle tenants are forgotten


async def test_weights_give_a_tenant_that_many_slots_per_round():
    admission = Admission(max_in_flight=1, max_queued=100, queue_timeout_s=30, weights={"a": 2})
    gate = Gate(admission)
    gate.submit("z", "z-first")  # holds the only slot while the queues fill
    await settle()
    tasks = [gate.submit("a", f"a{i}") for i in range(4)]
    tasks += [gate.submit("b", f"b{i}") for i in range(4)]
    await settle()
    for _ in range(9):
        await gate.finish(gate.started[-1])  # one slot: the last started is the one running
    # Tags (virtual start times): a's advance by 1/2 (0, 0.5, 1, 1.5), b's by 1 (0, 1, 2, 3);
    # the smallest goes first, the earlier arrival on a tie: two of a's to each of b's.
    assert gate.started == ["z-first", "a0", "b0", "a1", "a2", "b1", "a3", "b2", "b3"]
    await asyncio.gather(*tasks)


async def test_a_tenant_at_its_own_queue_bound_is_refused_while_others_still_queue():
    admission = Admission(
        max_in_flight=1, max_queued=100, queue_timeout_s=30, max_queued_per_tenant=2
    )
    gate = Gate(admission)
    tasks = [gate.submit("a", f"a{i}") for i in range(3)]  # one runs, two wait: a's bound
    await settle()
    with pytest.raises(OverloadedError) as refused:
        await admission.admitted(asyncio.sleep(0), 30, "a")
    assert refused.value.bound == "tenant_queue"
    assert "tenant 'a' has 2 judgments queued" in str(refused.value)
    assert "REFLECTRM_MAX_QUEUED_PER_TENANT=2" in str(refused.value)
    other = gate.submit("b", "b0")  # another tenant is still taken in
    await settle()
    assert admission.tenant_stats()["b"].queued == 1
    for name in ("a0", "b0", "a1", "a2"):  # b's one comes after the running a0
        await gate.finish(name)
    assert gate.started == ["a0", "b0", "a1", "a2"]
    assert [await t for t in tasks] == ["a0", "a1", "a2"]
    assert await other == "b0"


async def test_a_per_tenant_in_flight_cap_lets_the_other_tenant_use_the_free_slots():
    admission = Admission(
        max_in_flight=3, max_queued=100, queue_timeout_s=30, max_in_flight_per_tenant=1
    )
    gate = Gate(admission)
    tasks = [gate.submit("a", f"a{i}") for i in range(3)]
    await settle()
    assert gate.started == ["a0"]  # a holds its one slot; two slots stay free for others
    tasks += [gate.submit("b", f"b{i}") for i in range(2)]
    await settle()
    # One slot each: b takes one of the two a may not use, the third stays free.
    assert gate.started == ["a0", "b0"]
    assert admission.tenant_stats()["a"].queued == 2
    assert admission.in_flight == 2
    await gate.finish("b0")
    assert gate.started == ["a0", "b0", "b1"]  # a is still at its cap: b's next goes
    await gate.finish("a0")
    assert gate.started == ["a0", "b0", "b1", "a1"]
    for name in ("a1", "b1", "a2"):
        await gate.finish(name)
    assert gate.started == ["a0", "b0", "b1", "a1", "a2"]
    assert len(await asyncio.gather(*tasks)) == 5


async def test_more_active_tenants_than_the_bound_are_refused():
    admission = Admission(max_in_flight=1, max_queued=100, queue_timeout_s=30, max_tenants=2)
    gate = Gate(admission)
    first = gate.submit("a", "a0")
    second = gate.submit("b", "b0")
    await settle()
    with pytest.raises(OverloadedError) as refused:
        await admission.admitted(asyncio.sleep(0), 30, "c")
    assert refused.value.bound == "tenants"
    assert "REFLECTRM_MAX_TENANTS=2" in str(refused.value)
    await gate.finish("a0")
    await gate.finish("b0")
    await asyncio.gather(first, second)
    # Once a and b are idle they are forgotten, and c is taken in.
    assert await admission.admitted(asyncio.sleep(0, "c"), 30, "c") == "c"


async def test_a_cancelled_waiter_of_one_tenant_leaves_the_others_their_order():
    gate = Gate(Admission(max_in_flight=1, max_queued=100, queue_timeout_s=30))
    running = gate.submit("a", "a0")
    await settle()
    leaving = gate.submit("b", "b0")
    staying = gate.submit("c", "c0")
    await settle()
    leaving.cancel()
    await settle()
    assert gate.admission.queued == 1
    await gate.finish("a0")
    assert gate.started == ["a0", "c0"]
    await gate.finish("c0")
    assert await running == "a0"
    assert await staying == "c0"
    assert (gate.admission.in_flight, gate.admission.queued) == (0, 0)


async def test_jobs_of_one_key_split_its_share_and_take_turns_within_it():
    """Tenants "key/job" are jobs within the key's share: the key's turns alternate with the
    other key's whatever its number of jobs, and within its turns its jobs take turns (a light
    job is not stuck behind a flooding job of the same key)."""
    gate = Gate(Admission(max_in_flight=1, max_queued=100, queue_timeout_s=30))
    gate.submit("z", "z-first")  # holds the only slot while the queues fill
    await settle()
    tasks = [gate.submit("key-a/job-1", f"a1.{i}") for i in range(4)]
    tasks.append(gate.submit("key-a/job-2", "a2.0"))
    tasks += [gate.submit("key-b", f"b{i}") for i in range(2)]
    await settle()
    assert set(gate.admission.tenant_stats()) == {"z", "key-a/job-1", "key-a/job-2", "key-b"}
    for _ in range(8):
        await gate.finish(gate.started[-1])
    # Key tags: key-a 0, 1, 2, ... and key-b 0, 1 (the earlier arrival on a tie); key-a's turns
    # go to job-1 (tag 0), job-2 (0, after job-1's on the tie), then job-1's rest.
    assert gate.started == ["z-first", "a1.0", "b0", "a2.0", "b1", "a1.1", "a1.2", "a1.3"]
    await asyncio.gather(*tasks)
    assert gate.admission.tenant_stats() == {}


async def test_the_bounds_of_a_tenant_count_every_job_of_its_key():
    admission = Admission(
        max_in_flight=1, max_queued=100, queue_timeout_s=30, max_queued_per_tenant=2, max_tenants=2
    )
    gate = Gate(admission)
    tasks = [gate.submit("key-a/job-1", f"a{i}") for i in range(3)]  # one runs, two wait
    tasks.append(gate.submit("key-b/job-1", "b0"))
    await settle()
    with pytest.raises(OverloadedError) as refused:
        await admission.admitted(asyncio.sleep(0), 30, "key-a/job-2")
    assert refused.value.bound == "tenant_queue"
    assert "tenant 'key-a' has 2 judgments queued" in str(refused.value)
    # Another job of a key already active is no new tenant; a third key is.
    with pytest.raises(OverloadedError) as refused:
        await admission.admitted(asyncio.sleep(0), 30, "key-c/job-1")
    assert refused.value.bound == "tenants"
    tasks.append(gate.submit("key-b/job-2", "b1"))
    await settle()
    assert admission.tenant_stats()["key-b/job-2"].queued == 1
    for name in ("a0", "b0", "a1", "b1", "a2"):
        await gate.finish(name)
    assert len(await asyncio.gather(*tasks)) == 5
