"""The namespace workqueue: coalescing, per-key serialisation, timers, backoff.

On a loop clock (:mod:`unit.loopclock`): the queue's clock is the loop's, which jumps to the next
timer, so the windows and backoffs below take no wall time and their instants are exact.
"""

from __future__ import annotations

import asyncio
import functools
import itertools

import pytest

from dynquota._k8s import workqueue
from dynquota._k8s.workqueue import Outcome
from dynquota.testing.wait import async_wait_until

from ..loopclock import now

pytestmark = pytest.mark.loop_clock

WorkQueue = functools.partial(workqueue.WorkQueue, clock=now)


class Recorder:
    def __init__(self, outcome: Outcome | None = None) -> None:
        self.runs: list[tuple[str, float]] = []
        self.outcome = outcome or Outcome()
        self.gate: asyncio.Event | None = None
        self.active: set[str] = set()
        self.overlaps = 0

    async def __call__(self, key: str) -> Outcome:
        if key in self.active:
            self.overlaps += 1
        self.active.add(key)
        try:
            self.runs.append((key, now()))
            if self.gate is not None:
                await self.gate.wait()
            return self.outcome
        finally:
            self.active.discard(key)


async def test_a_burst_of_adds_is_one_run() -> None:
    rec = Recorder()
    queue = WorkQueue(rec, workers=2)
    for _ in range(1000):
        queue.add("ns-a")
    queue.add("ns-b")
    queue.start()
    await queue.wait_idle(timeout=5)
    await queue.stop()
    assert sorted(key for key, _ in rec.runs) == ["ns-a", "ns-b"]
    assert queue.runs == 2


async def test_adding_a_key_being_processed_runs_it_once_more_never_concurrently() -> None:
    rec = Recorder()
    rec.gate = asyncio.Event()
    queue = WorkQueue(rec, workers=4)
    queue.start()
    queue.add("ns")
    await async_wait_until(lambda: rec.active == {"ns"}, "first run started", timeout=5)
    for _ in range(50):
        queue.add("ns")
    rec.gate.set()
    await queue.wait_idle(timeout=5)
    await queue.stop()
    assert [key for key, _ in rec.runs] == ["ns", "ns"]
    assert rec.overlaps == 0


async def test_add_at_fires_at_the_instant_and_the_earliest_wins() -> None:
    rec = Recorder()
    queue = WorkQueue(rec, workers=1)
    queue.start()
    start = now()
    queue.add_at("ns", start + 0.6)
    queue.add_at("ns", start + 0.3)  # earlier: replaces
    queue.add_at("ns", start + 0.9)  # later: dropped
    assert queue.scheduled("ns") == pytest.approx(start + 0.3)
    await async_wait_until(lambda: len(rec.runs) == 1, "timed run", timeout=5)
    ran_at = rec.runs[0][1]
    assert ran_at >= start + 0.3
    assert ran_at < start + 0.55
    assert queue.scheduled("ns") is None
    await asyncio.sleep(0.8)  # nothing else may fire: the later instants were dropped
    assert len(rec.runs) == 1
    await queue.stop()


async def test_handler_requeue_at_schedules_the_next_run() -> None:
    calls: list[float] = []

    async def handler(key: str) -> Outcome:
        calls.append(now())
        if len(calls) == 1:
            return Outcome(requeue_at=now() + 0.25)
        return Outcome()

    queue = WorkQueue(handler, workers=1)
    queue.start()
    queue.add("ns")
    await async_wait_until(lambda: len(calls) == 2, "requeued run", timeout=5)
    assert calls[1] - calls[0] >= 0.25
    await queue.stop()


async def test_failures_back_off_exponentially_and_success_resets() -> None:
    calls: list[float] = []

    async def handler(key: str) -> Outcome:
        calls.append(now())
        if len(calls) <= 3:
            raise RuntimeError("boom")  # counts as retry
        return Outcome()

    queue = WorkQueue(handler, workers=1, backoff_base=0.1, backoff_cap=0.25)
    queue.start()
    queue.add("ns")
    await async_wait_until(lambda: len(calls) == 4, "retries", timeout=5)
    gaps = [b - a for a, b in itertools.pairwise(calls)]
    assert gaps[0] >= 0.1  # 0.1
    assert gaps[1] >= 0.2  # 0.2
    assert gaps[2] >= 0.25  # capped at 0.25 (0.4 otherwise)
    assert gaps[2] < 0.4
    await queue.wait_idle(timeout=5)
    assert queue.scheduled("ns") is None
    await queue.stop()


async def test_first_event_of_a_quiet_key_runs_at_once() -> None:
    rec = Recorder()
    queue = WorkQueue(rec, workers=1, coalesce=0.3)
    queue.start()
    start = now()
    queue.add("a")
    await async_wait_until(lambda: len(rec.runs) == 1, "ran", timeout=5)
    assert rec.runs[0][1] - start < 0.15  # leading edge: no coalescing wait
    await queue.wait_idle(timeout=5)
    await queue.stop()


async def test_a_burst_coalesces_into_the_leading_run_and_one_trailing_run() -> None:
    rec = Recorder()
    rec.gate = asyncio.Event()
    queue = WorkQueue(rec, workers=2, coalesce=0.3)
    queue.start()
    for _ in range(500):  # before the worker starts: all absorbed by the queued run
        queue.add("ns")
    await async_wait_until(lambda: rec.active == {"ns"}, "leading run started", timeout=5)
    first = rec.runs[0][1]
    for _ in range(500):  # while it runs: one more run, at the window's end
        queue.add("ns")
    rec.gate.set()
    await async_wait_until(lambda: len(rec.runs) == 2, "trailing run", timeout=5)
    await queue.wait_idle(timeout=5)
    assert queue.scheduled("ns") is None
    await asyncio.sleep(0.4)
    assert [key for key, _ in rec.runs] == ["ns", "ns"]
    assert rec.runs[1][1] - first >= 0.3
    assert rec.overlaps == 0
    await queue.stop()


async def test_an_event_soon_after_a_run_waits_for_the_window_end() -> None:
    rec = Recorder()
    queue = WorkQueue(rec, workers=1, coalesce=0.3)
    queue.start()
    queue.add("a")
    await queue.wait_idle(timeout=5)
    first = rec.runs[0][1]
    queue.add("a")  # the key is idle but ran within the window: trailing edge
    queue.add("a")
    queue.add_now("b")
    await async_wait_until(lambda: len(rec.runs) == 3, "all ran", timeout=5)
    by_key = [(key, at - first) for key, at in rec.runs]
    assert by_key[1][0] == "b"
    assert by_key[1][1] < 0.2
    assert by_key[2][0] == "a"
    assert by_key[2][1] >= 0.3
    # quiet again after the window: at once
    await asyncio.sleep(0.35)
    again = now()
    queue.add("a")
    await async_wait_until(lambda: len(rec.runs) == 4, "ran again", timeout=5)
    assert rec.runs[3][1] - again < 0.15
    await queue.stop()


async def test_forget_drops_the_timer() -> None:
    rec = Recorder()
    queue = WorkQueue(rec, workers=1)
    queue.start()
    queue.add_at("ns", now() + 0.2)
    queue.forget("ns")
    await asyncio.sleep(0.4)
    assert rec.runs == []
    await queue.stop()


async def test_only_the_first_event_of_a_quiet_key_makes_a_leading_run() -> None:
    leading: list[tuple[str, bool]] = []

    async def handler(key: str) -> Outcome:
        leading.append((key, queue.leading(key)))
        return Outcome()

    queue = WorkQueue(handler, workers=1, coalesce=0.3)
    queue.start()
    queue.add("a")  # quiet: leading edge
    await async_wait_until(lambda: len(leading) == 1, "leading run", timeout=5)
    queue.add("a")  # within the window: trailing edge
    queue.add_now("b")  # asked for directly: not an event of a quiet key
    await async_wait_until(lambda: len(leading) == 3, "trailing run", timeout=5)
    queue.add_at("c", now() + 0.05)  # a timer
    await async_wait_until(lambda: len(leading) == 4, "timed run", timeout=5)
    await queue.wait_idle(timeout=5)
    assert leading == [("a", True), ("b", False), ("a", False), ("c", False)]
    assert not queue.leading("a")  # only while its run is in progress
    await queue.stop()
