"""Evaluator behaviour tables (batching, dirty work, retries, deadlines), in memory."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import pytest

from dynquota.admission import (
    DYNQUOTA,
    NAIVE,
    UPSTREAM,
    AdmissionAttributes,
    ConflictPolicy,
    DefaultDenyError,
    Evaluator,
    InMemoryQuotaAccessor,
    InMemoryQuotaServer,
    QuotaAccessError,
    QuotaConflictError,
    QuotaForbiddenError,
    ResourceQuota,
)
from dynquota.testing.wait import async_wait_until

from ._upstream import CONFIGMAPS, PODS, WIDGETS

KEY = "count/widgets.example.com"


def widget(ns: str = "ns", i: int = 0, dry_run: bool = False) -> AdmissionAttributes:
    return AdmissionAttributes(
        namespace=ns, resource=WIDGETS, object={}, name=f"w-{i}", dry_run=dry_run
    )


def used(server: InMemoryQuotaServer, name: str = "q", ns: str = "ns", key: str = KEY) -> str:
    return str(server.get(ns, name).used[key])


async def outcome(evaluator: Evaluator, a: AdmissionAttributes) -> BaseException | None:
    try:
        await evaluator.evaluate(a)
    except Exception as e:
        return e
    return None


async def run_all(evaluator: Evaluator, requests: list[AdmissionAttributes]) -> list[Any]:
    return list(await asyncio.gather(*(outcome(evaluator, a) for a in requests)))


# --- batching ---------------------------------------------------------------------------


async def test_ten_waiters_one_write_and_the_tenth_sees_the_nine_before_it() -> None:
    server = InMemoryQuotaServer()
    server.create("ns", "q", {KEY: 9})
    async with Evaluator(InMemoryQuotaAccessor(server)) as ev:
        results = await run_all(ev, [widget(i=i) for i in range(10)])
    assert ev.stats.batches == 1
    assert ev.stats.max_batch == 10
    assert results[:9] == [None] * 9
    assert isinstance(results[9], QuotaForbiddenError)
    assert results[9].detail == (
        f"exceeded quota: q, requested: {KEY}=1, used: {KEY}=9, limited: {KEY}=9"
    )
    assert server.stats.status_writes == 1
    assert used(server) == "9"


async def test_work_arriving_mid_batch_waits_in_the_dirty_buffer() -> None:
    server = InMemoryQuotaServer()
    server.create("ns", "q", {KEY: 7})
    accessor = InMemoryQuotaAccessor(server)
    accessor.read_gate = asyncio.Event()
    async with Evaluator(accessor) as ev:
        first = [asyncio.ensure_future(outcome(ev, widget(i=i))) for i in range(5)]
        await async_wait_until(lambda: ev.stats.batches == 1, "first batch taken", timeout=5)
        second = [asyncio.ensure_future(outcome(ev, widget(i=i))) for i in range(5, 10)]
        await async_wait_until(lambda: ev.stats.requests == 10, "second wave queued", timeout=5)
        assert ev.stats.batches == 1  # the second wave waits while the first is in progress
        accessor.read_gate.set()
        results = await asyncio.gather(*first, *second)
    assert ev.stats.batches == 2
    assert ev.stats.max_batch == 5
    assert results[:7] == [None] * 7
    assert [str(r.detail) for r in results[7:]] == [
        f"exceeded quota: q, requested: {KEY}=1, used: {KEY}=7, limited: {KEY}=7"
    ] * 3
    assert server.stats.status_writes == 2
    assert used(server) == "7"


async def test_namespaces_are_batched_separately() -> None:
    server = InMemoryQuotaServer()
    for ns in ("a", "b", "c"):
        server.create(ns, "q", {KEY: 100})
    async with Evaluator(InMemoryQuotaAccessor(server), workers=2) as ev:
        results = await run_all(ev, [widget(ns, i) for i in range(4) for ns in ("a", "b", "c")])
    assert results == [None] * 12
    assert ev.stats.batches == 3
    assert server.stats.writes_by_quota == {"a/q": 1, "b/q": 1, "c/q": 1}
    assert [used(server, ns=ns) for ns in ("a", "b", "c")] == ["4", "4", "4"]


async def test_no_matching_quota_admits_without_writing() -> None:
    server = InMemoryQuotaServer()
    server.create("ns", "q", {"pods": 1})
    async with Evaluator(InMemoryQuotaAccessor(server)) as ev:
        assert await run_all(ev, [widget(i=i) for i in range(3)]) == [None] * 3
        # a namespace without any quota
        assert await outcome(ev, widget("elsewhere")) is None
    assert server.stats.status_writes == 0


async def test_requests_that_cannot_change_usage_skip_the_queue() -> None:
    server = InMemoryQuotaServer()
    server.create("ns", "q", {KEY: 0})
    async with Evaluator(InMemoryQuotaAccessor(server)) as ev:
        status = AdmissionAttributes("ns", WIDGETS, object={}, subresource="status")
        cluster = AdmissionAttributes("", WIDGETS, object={})
        assert await run_all(ev, [status, cluster]) == [None, None]
    assert ev.stats.requests == 0


# --- dry run ----------------------------------------------------------------------------


async def test_dry_run_is_checked_but_never_charged() -> None:
    server = InMemoryQuotaServer()
    server.create("ns", "q", {KEY: 2}, {KEY: 1})
    async with Evaluator(InMemoryQuotaAccessor(server)) as ev:
        assert await outcome(ev, widget(dry_run=True)) is None
        assert used(server) == "1"
        assert await outcome(ev, widget()) is None
        denied = await outcome(ev, widget(dry_run=True))
    assert isinstance(denied, QuotaForbiddenError)
    assert "exceeded quota: q" in str(denied)
    assert server.stats.status_writes == 1
    assert used(server) == "2"


# --- partial re-evaluation and retries --------------------------------------------------


@pytest.mark.parametrize("policy", [UPSTREAM, DYNQUOTA], ids=lambda p: p.name)
async def test_only_the_failed_document_is_re_evaluated(policy: ConflictPolicy) -> None:
    server = InMemoryQuotaServer()
    server.create("ns", "a", {KEY: 10})
    server.create("ns", "b", {KEY: 20})
    server.conflict_before_next_writes("ns", "b", times=1)
    async with Evaluator(InMemoryQuotaAccessor(server), policy=policy) as ev:
        results = await run_all(ev, [widget(i=i) for i in range(3)])
    assert results == [None] * 3
    assert server.stats.conflicts == 1
    assert ev.stats.rounds == 2
    assert (used(server, "a"), used(server, "b")) == ("3", "3")  # a is not charged twice
    assert server.stats.writes_by_quota == {"ns/a": 1, "ns/b": 1}


@pytest.mark.parametrize("policy", [UPSTREAM, DYNQUOTA], ids=lambda p: p.name)
async def test_a_denied_request_stays_denied_when_another_quota_is_retried(
    policy: ConflictPolicy,
) -> None:
    """kubernetes#141904: the retry covers only the quota whose write conflicted."""
    server = InMemoryQuotaServer()
    server.create("ns", "pods", {"pods": 1}, {"pods": 1})  # full
    server.create("ns", "configmaps", {"configmaps": 10})
    server.conflict_before_next_writes("ns", "configmaps", times=1)
    pod = AdmissionAttributes("ns", PODS, object={"spec": {"containers": []}}, name="p")
    configmap = AdmissionAttributes("ns", CONFIGMAPS, object={}, name="c")
    async with Evaluator(InMemoryQuotaAccessor(server), policy=policy) as ev:
        results = await run_all(ev, [configmap, pod])
    # upstream retries within the batch; dynquota sends the undecided configmap back to the
    # queue (nothing was written) and decides it in a second batch after a live read
    assert (ev.stats.batches, ev.stats.rounds) == ((1, 2) if policy is UPSTREAM else (2, 2))
    assert results[0] is None
    assert isinstance(results[1], QuotaForbiddenError)
    assert results[1].detail.startswith("exceeded quota: pods, requested: pods=1")
    assert str(server.get("ns", "pods").used["pods"]) == "1"
    assert str(server.get("ns", "configmaps").used["configmaps"]) == "1"


@pytest.mark.parametrize(("policy", "writes", "batches"), [(UPSTREAM, 2, 2), (DYNQUOTA, 1, 2)])
async def test_after_a_conflict_dynquota_decides_the_batch_with_the_work_that_arrived(
    policy: ConflictPolicy, writes: int, batches: int
) -> None:
    server = InMemoryQuotaServer()
    server.create("ns", "q", {KEY: 100})
    server.conflict_before_next_writes("ns", "q", times=1)
    accessor = InMemoryQuotaAccessor(server)
    accessor.read_gate = asyncio.Event()
    async with Evaluator(accessor, policy=policy) as ev:
        first = [asyncio.ensure_future(outcome(ev, widget(i=i))) for i in range(5)]
        await async_wait_until(lambda: ev.stats.batches == 1, "first batch taken", timeout=5)
        second = [asyncio.ensure_future(outcome(ev, widget(i=i))) for i in range(5, 10)]
        await async_wait_until(lambda: ev.stats.requests == 10, "second wave queued", timeout=5)
        accessor.read_gate.set()
        assert await asyncio.gather(*first, *second) == [None] * 10
    assert server.stats.conflicts == 1
    assert server.stats.status_writes == writes
    assert ev.stats.batches == batches
    assert ev.stats.max_batch == (10 if policy is DYNQUOTA else 5)
    assert used(server) == "10"


async def test_dynquota_conflicts_do_not_consume_the_retry_budget() -> None:
    server = InMemoryQuotaServer()
    server.create("ns", "q", {KEY: 5})
    server.conflict_before_next_writes("ns", "q", times=6)
    async with Evaluator(InMemoryQuotaAccessor(server), policy=DYNQUOTA) as ev:
        assert await outcome(ev, widget()) is None
    assert server.stats.conflicts == 6
    assert ev.stats.live_rereads == 6
    assert used(server) == "1"


async def test_upstream_conflicts_consume_the_retry_budget() -> None:
    server = InMemoryQuotaServer()
    server.create("ns", "q", {KEY: 5})
    server.conflict_before_next_writes("ns", "q", times=4)
    async with Evaluator(InMemoryQuotaAccessor(server), policy=UPSTREAM) as ev:
        result = await outcome(ev, widget())
    assert isinstance(result, QuotaConflictError)
    assert result.status == 409
    assert server.stats.conflicts == 4  # first attempt and 3 retries
    assert used(server) == "0"


@pytest.mark.parametrize(("failures", "admitted"), [(3, True), (4, False)])
async def test_other_errors_consume_the_budget_of_three(failures: int, admitted: bool) -> None:
    server = InMemoryQuotaServer()
    server.create("ns", "q", {KEY: 5})
    error = QuotaAccessError("etcdserver: request timed out", 500)
    server.fail_next("update", error, times=failures)
    async with Evaluator(InMemoryQuotaAccessor(server), policy=DYNQUOTA) as ev:
        result = await outcome(ev, widget())
    assert (result is None) == admitted
    assert used(server) == ("1" if admitted else "0")
    if not admitted:
        assert result is error


async def test_a_deleted_quota_is_not_checked_on_retry() -> None:
    server = InMemoryQuotaServer()
    server.create("ns", "q", {KEY: 5})
    accessor = InMemoryQuotaAccessor(server)
    await accessor.get_quotas("ns")  # nothing cached yet; the informer holds q
    server.fail_next("update", QuotaConflictError("gone"), times=1)
    async with Evaluator(accessor) as ev:
        server.delete("ns", "q")
        # the informer (lag 0) already dropped q, so the request is simply admitted
        assert await outcome(ev, widget()) is None
    assert server.stats.status_writes == 0


# --- default deny (deadlines: test_evaluator_deadlines.py) ----------------------------


class _BrokenAccessor(InMemoryQuotaAccessor):
    async def write_quota_status(self, quota: ResourceQuota) -> ResourceQuota:
        raise RuntimeError("bug")


async def test_an_unexpected_failure_leaves_the_default_deny() -> None:
    server = InMemoryQuotaServer()
    server.create("ns", "q", {KEY: 5})
    async with Evaluator(_BrokenAccessor(server)) as ev:
        result = await outcome(ev, widget())
    assert isinstance(result, DefaultDenyError)
    assert str(result) == "DEFAULT DENY: quota evaluation did not decide"
    assert used(server) == "0"


async def test_read_errors_deny_the_whole_batch() -> None:
    server = InMemoryQuotaServer()
    server.create("ns", "q", {KEY: 5})
    accessor = InMemoryQuotaAccessor(server, synced=False)
    error = QuotaAccessError("apiserver unavailable", 503, "ServiceUnavailable")
    server.fail_next("list", error)
    async with Evaluator(accessor) as ev:
        results = await run_all(ev, [widget(i=i) for i in range(3)])
    assert results == [error] * 3
    assert used(server) == "0"


async def test_closed_evaluator_denies() -> None:
    server = InMemoryQuotaServer()
    ev = Evaluator(InMemoryQuotaAccessor(server))
    await ev.close()
    with pytest.raises(DefaultDenyError, match="closed"):
        await ev.evaluate(widget())


# --- caches through the evaluator -------------------------------------------------------


async def test_cold_cache_one_live_list_for_fifty_concurrent_requests() -> None:
    server = InMemoryQuotaServer(list_latency=0.02)
    server.create("ns", "q", {KEY: 40})
    accessor = InMemoryQuotaAccessor(server, synced=False)
    async with Evaluator(accessor) as ev:
        results = await run_all(ev, [widget(i=i) for i in range(50)])
    assert server.stats.lists == 1
    assert results.count(None) == 40
    assert all(isinstance(r, QuotaForbiddenError) for r in results[40:])
    assert used(server) == "40"  # metered: a cold start never admits unmetered


async def test_cold_cache_naive_requests_share_one_list() -> None:
    # the writes take a moment, so the 50 read-modify-writes overlap and 49 conflict
    server = InMemoryQuotaServer(list_latency=0.02, write_latency=0.002)
    server.create("ns", "q", {KEY: 1000})
    accessor = InMemoryQuotaAccessor(server, synced=False)
    async with Evaluator(accessor, policy=NAIVE) as ev:
        await run_all(ev, [widget(i=i) for i in range(50)])
    # the singleflight: 50 concurrent reads, one list; conflict re-reads use the cached list
    assert server.stats.lists == 1
    assert server.stats.conflicts >= 49
    assert accessor.stats.live_cache_hits >= 49


@pytest.mark.parametrize(("look_aside", "conflicts"), [(True, 0), (False, 19)])
async def test_look_aside_cache_avoids_conflicts_with_a_lagging_informer(
    look_aside: bool, conflicts: int
) -> None:
    server = InMemoryQuotaServer()
    server.create("ns", "q", {KEY: 100})
    accessor = InMemoryQuotaAccessor(server, informer_lag=3600, look_aside=look_aside)
    async with Evaluator(accessor) as ev:
        for i in range(20):
            assert await outcome(ev, widget(i=i)) is None
    assert server.stats.conflicts == conflicts
    assert server.stats.status_writes == 20
    assert used(server) == "20"


@pytest.mark.parametrize(("window", "conflicts"), [(0.0, 2), (60.0, 1)])
async def test_live_read_window_after_a_conflict(window: float, conflicts: int) -> None:
    server = InMemoryQuotaServer()
    server.create("ns", "q", {KEY: 100})
    accessor = InMemoryQuotaAccessor(server, informer_lag=3600, look_aside=False)
    server.competing_write("ns", "q", {KEY: 1})  # the informer never sees it
    policy = dataclasses.replace(DYNQUOTA, live_read_window=window)
    async with Evaluator(accessor, policy=policy) as ev:
        assert await outcome(ev, widget(i=1)) is None
        assert await outcome(ev, widget(i=2)) is None
    assert server.stats.conflicts == conflicts
    assert accessor.stats.live_lists == 2
    assert used(server) == "3"


async def test_conflict_backoff_still_admits() -> None:
    server = InMemoryQuotaServer()
    server.create("ns", "q", {KEY: 5})
    server.conflict_before_next_writes("ns", "q", times=5)
    accessor = InMemoryQuotaAccessor(server)
    server.competing_write("ns", "q", {KEY: 1})
    # without requeueing, the retries stay inside the batch, where the backoff applies
    policy = dataclasses.replace(DYNQUOTA, conflict_backoff=0.001, requeue_on_conflict=False)
    async with Evaluator(accessor, policy=policy) as ev:
        assert await outcome(ev, widget()) is None
    assert server.stats.conflicts == 5
    assert ev.stats.rounds == 6
    assert used(server) == "2"
