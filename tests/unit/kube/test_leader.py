"""The leader elector (dynquota.kube.leader) on virtual time, with a fake at its own boundary.

The fake is :class:`FakeLeases`, a :class:`~dynquota.kube.lease.LeaseApi` keeping one Lease
with resourceVersion preconditions (409 on a stale one), into which faults are injected:
connection errors, a request that never answers, a barrier that makes two candidates write
on the same resourceVersion. Time is :class:`VirtualTime`: the gate's monotonic clock and
sleep, advanced by the test. Ported from the reproducers of issue 10's leader cases.
"""

from __future__ import annotations

import asyncio
import copy
import datetime as dt
import heapq
import itertools
import logging
import random
from collections.abc import Mapping
from typing import Any

import pydantic
import pytest

from dynquota._k8s.errors import ConflictError, TransportError
from dynquota.kube.leader import AlwaysLeader, LeaderGate
from dynquota.kube.leader_durations import check_durations
from dynquota.kube.lease import LeaseRecord
from dynquota.settings import Settings

NS, NAME = "ops", "dynquota"
D, RD, RP, RT = 15.0, 10.0, 2.0, 3.0  # lease duration, renew deadline, retry period, timeout


async def settle() -> None:
    for _ in range(30):
        await asyncio.sleep(0)


class VirtualTime:
    """A monotonic clock and sleep that move only when the test advances them."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._seq = itertools.count()

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (self.now + max(0.0, seconds), next(self._seq), future))
        await future

    async def advance(self, seconds: float) -> None:
        target = self.now + seconds
        await settle()
        while self._sleepers and self._sleepers[0][0] <= target:
            when, _, future = heapq.heappop(self._sleepers)
            if future.done():
                continue
            self.now = max(self.now, when)
            future.set_result(None)
            await settle()
        self.now = target
        await settle()

    async def run_until(self, condition: Any, limit: float, step: float = 0.1) -> float:
        """Advance in ``step``s until ``condition()``; return the time; fail after ``limit``."""
        end = self.now + limit
        await settle()
        while not condition():
            if self.now >= end:
                raise AssertionError(f"condition not met within {limit} s of virtual time")
            await self.advance(step)
        return self.now


class FakeLeases:
    """One namespace's Leases with resourceVersion preconditions, and injectable faults."""

    def __init__(self) -> None:
        self.leases: dict[str, dict[str, Any]] = {}
        self.get_timeouts: list[float | None] = []
        self.version = 0
        self.failures: list[Exception] = []  # raised by the next requests, in order
        self.fail_always: Exception | None = None
        self.hang = asyncio.Event()  # set: every request hangs until cleared
        self.unhang = asyncio.Event()
        self.barrier: int = 0  # > 0: replace waits until this many replaces are waiting
        self._waiting: list[asyncio.Future[None]] = []
        self.calls: list[str] = []

    async def _enter(self, verb: str) -> None:
        self.calls.append(verb)
        if self.hang.is_set():
            await self.unhang.wait()
        if self.fail_always is not None:
            raise self.fail_always
        if self.failures:
            raise self.failures.pop(0)

    def _stored(self, body: Mapping[str, Any]) -> dict[str, Any]:
        self.version += 1
        lease = copy.deepcopy(dict(body))
        lease["metadata"]["resourceVersion"] = str(self.version)
        self.leases[lease["metadata"]["name"]] = lease
        return copy.deepcopy(lease)

    async def get(
        self, namespace: str, name: str, timeout: float | None = None
    ) -> dict[str, Any] | None:
        self.get_timeouts.append(timeout)
        await self._enter("get")
        lease = self.leases.get(name)
        return copy.deepcopy(lease) if lease is not None else None

    async def create(self, namespace: str, body: Mapping[str, Any]) -> dict[str, Any]:
        await self._enter("create")
        if body["metadata"]["name"] in self.leases:
            raise ConflictError(409, "AlreadyExists", "leases already exists")
        return self._stored(body)

    async def replace(self, namespace: str, name: str, body: Mapping[str, Any]) -> dict[str, Any]:
        await self._enter("replace")
        if self.barrier:
            future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiting.append(future)
            if len(self._waiting) >= self.barrier:
                self.barrier = 0
                for waiting in self._waiting:
                    waiting.set_result(None)
                self._waiting.clear()
            await future
        current = self.leases.get(name)
        if current is None:
            raise TransportError("lease vanished")
        if body["metadata"].get("resourceVersion") != current["metadata"]["resourceVersion"]:
            raise ConflictError(409, "Conflict", "the object has been modified")
        return self._stored(body)

    def holder(self) -> str:
        lease = self.leases.get(NAME)
        return LeaseRecord.from_lease(lease).holder if lease else ""


class Candidate:
    """A LeaderGate on the shared fake and clock, with its on_change calls and run task."""

    def __init__(self, identity: str, leases: FakeLeases, clock: VirtualTime, **kw: Any) -> None:
        self.changes: list[tuple[float, bool]] = []

        async def on_change(leading: bool) -> None:
            self.changes.append((clock.now, leading))

        self.gate = LeaderGate(
            None,
            namespace=NS,
            name=NAME,
            identity=identity,
            lease_duration=kw.pop("lease_duration", D),
            renew_deadline=kw.pop("renew_deadline", RD),
            retry_period=kw.pop("retry_period", RP),
            request_timeout=kw.pop("request_timeout", RT),
            on_change=on_change,
            lease_api=leases,
            clock=clock,
            sleep=clock.sleep,
            wall_clock=kw.pop(
                "wall_clock", lambda: dt.datetime.fromtimestamp(1.8e9 + clock.now, dt.UTC)
            ),
            rng=random.Random(7),
        )
        self.task: asyncio.Task[None] | None = None

    def start(self) -> Candidate:
        self.task = asyncio.create_task(self.gate.run())
        return self

    async def cancel(self) -> None:
        assert self.task is not None
        self.task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await self.task

    @property
    def leading(self) -> list[bool]:
        return [leading for _, leading in self.changes]


@pytest.fixture
def clock() -> VirtualTime:
    return VirtualTime()


@pytest.fixture
def leases() -> FakeLeases:
    return FakeLeases()


async def test_a_connection_error_does_not_end_the_leaders_campaign(
    clock: VirtualTime, leases: FakeLeases
) -> None:
    a = Candidate("a", leases, clock).start()
    await clock.run_until(lambda: a.gate.is_leader, 1)
    assert a.leading == [True]
    renewals = a.gate.renewals
    leases.failures = [TransportError("connection refused")]  # one renew fails
    await clock.advance(3 * RP)
    assert a.task is not None
    assert not a.task.done()
    assert a.gate.is_leader
    assert a.gate.renewals > renewals  # renewed after the failure
    assert a.leading == [True]  # one failed renew within the deadline loses nothing
    await a.cancel()


async def test_connection_errors_do_not_end_a_candidates_campaign(
    clock: VirtualTime, leases: FakeLeases
) -> None:
    # p4c: nothing listens; the candidate's task must keep going, and win once the API is back
    leases.fail_always = TransportError("connection refused")
    b = Candidate("b", leases, clock).start()
    await clock.advance(10 * RP)
    assert b.task is not None
    assert not b.task.done()
    assert not b.gate.is_leader
    assert b.gate.healthy()
    leases.fail_always = None
    await clock.run_until(lambda: b.gate.is_leader, 3 * RP)
    assert b.leading == [True]
    await b.cancel()


async def test_any_exception_is_caught_and_warned_rate_limited(
    clock: VirtualTime, leases: FakeLeases, caplog: pytest.LogCaptureFixture
) -> None:
    leases.fail_always = RuntimeError("a bug in the adapter")
    b = Candidate("b", leases, clock).start()
    with caplog.at_level(logging.DEBUG, logger="dynquota.kube.leader"):
        await clock.advance(20)  # about 8 attempts within 30 s
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "a bug in the adapter" in warnings[0].getMessage()
    assert "not leading; retrying every 2 s" in warnings[0].getMessage()
    assert b.task is not None
    assert not b.task.done()
    await b.cancel()


async def test_a_hanging_renew_ends_leadership_at_send_time_plus_duration_minus_one(
    clock: VirtualTime, leases: FakeLeases
) -> None:
    # p4_leader.py B: a renew that never answers must not keep is_leader True
    a = Candidate("a", leases, clock).start()
    await clock.run_until(lambda: a.gate.is_leader, 1)
    await clock.advance(RP)  # one renewal: a sent it at exactly this virtual time
    sent = clock.now
    assert a.gate.valid_until == sent + D - 1
    leases.hang.set()  # the next renew hangs (half-open connection)
    await clock.advance(D - 1 - 2.5)
    assert a.gate.is_leader
    assert a.gate.can_write(2.0)
    assert not a.gate.can_write(2.5)  # would end after valid_until
    await clock.advance(2.4)
    assert a.gate.is_leader
    await clock.advance(0.1)  # now == sent + D - 1
    assert clock.now == sent + D - 1
    assert not a.gate.is_leader
    assert a.gate.valid_until == 0.0
    assert not a.gate.can_write(0.0)
    # announced by the timer at valid_until, although the loop still hangs in the request
    assert a.changes == [(a.changes[0][0], True), (sent + D - 1, False)]
    assert a.task is not None
    assert not a.task.done()
    # liveness: the loop has not iterated for longer than its bound -> unhealthy
    assert a.gate.healthy()
    await clock.advance(D + 2 * RT + RP)
    assert not a.gate.healthy()
    leases.hang.clear()
    leases.unhang.set()  # the request returns at last: the campaign resumes
    await clock.run_until(lambda: a.gate.is_leader, 2 * RP)
    assert a.gate.healthy()
    assert a.leading == [True, False, True]
    await a.cancel()


async def test_failing_renewals_step_down_at_the_renew_deadline_and_campaign_again(
    clock: VirtualTime, leases: FakeLeases
) -> None:
    a = Candidate("a", leases, clock).start()
    await clock.run_until(lambda: a.gate.is_leader, 1)
    last_renewal = clock.now
    leases.fail_always = TransportError("503")
    lost = await clock.run_until(lambda: not a.gate.is_leader, D)
    # the deadline is measured from the last successful send, not restarted per retry
    assert last_renewal + RD <= lost <= last_renewal + RD + RP
    assert a.leading == [True, False]
    leases.fail_always = None
    await clock.run_until(lambda: a.gate.is_leader, 3 * RP)  # the record still names a
    assert a.leading == [True, False, True]
    await a.cancel()


@pytest.mark.parametrize("frozen_wall_clock", [False, True])
async def test_takeover_only_after_lease_duration_of_an_unchanged_record(
    clock: VirtualTime, leases: FakeLeases, frozen_wall_clock: bool
) -> None:
    # frozen: every renewTime is the same string (a wall clock stepped back); the renewals
    # still count as changes (their resourceVersion differs)
    kw = (
        {"wall_clock": lambda: dt.datetime(2026, 12, 1, tzinfo=dt.UTC)} if frozen_wall_clock else {}
    )
    a = Candidate("a", leases, clock, **kw).start()
    await clock.run_until(lambda: a.gate.is_leader, 1)
    b = Candidate("b", leases, clock, **kw).start()
    # while a renews, b never leads and the two never lead at once
    for _ in range(600):
        await clock.advance(0.1)
        assert not (a.gate.is_leader and b.gate.is_leader)
    assert a.gate.is_leader
    assert not b.gate.is_leader
    assert b.changes == []
    a_valid_until = a.gate.valid_until
    a_last_send = a_valid_until - (D - 1)
    await a.cancel()  # crash: no release, the record stays unchanged
    took = await clock.run_until(lambda: b.gate.is_leader, 2 * D)
    assert leases.holder() == "b"
    b_send = b.gate.valid_until - (D - 1)
    # b observed the record after a's last send, and waited a full lease duration from then
    assert b_send >= a_last_send + D
    assert b_send > a_valid_until  # the validity windows do not overlap
    assert took <= a_last_send + D + RP * 1.2 + RP  # observation lag and one poll
    assert LeaseRecord.from_lease(leases.leases[NAME]).lease_transitions == 1
    await b.cancel()


async def test_a_record_held_by_another_with_a_longer_duration_is_respected(
    clock: VirtualTime, leases: FakeLeases
) -> None:
    leases._stored(
        {
            "metadata": {"name": NAME, "namespace": NS},
            "spec": {"holderIdentity": "other", "leaseDurationSeconds": 60},
        }
    )
    b = Candidate("b", leases, clock).start()
    await clock.advance(1)
    observed = clock.now
    await clock.advance(58)
    assert not b.gate.is_leader  # 60 s of the record's duration, not our 15
    took = await clock.run_until(lambda: b.gate.is_leader, 10)
    assert took >= observed + 60 - 1
    await b.cancel()


async def test_two_candidates_writing_the_same_resource_version_cannot_both_win(
    clock: VirtualTime, leases: FakeLeases
) -> None:
    leases._stored({"metadata": {"name": NAME, "namespace": NS}, "spec": {}})  # no holder
    leases.barrier = 2  # both replaces are sent on the resourceVersion both read
    a = Candidate("a", leases, clock).start()
    b = Candidate("b", leases, clock).start()
    await clock.advance(0.5)
    assert leases.calls.count("replace") == 2
    assert [a.gate.is_leader, b.gate.is_leader].count(True) == 1
    winner, loser = (a, b) if a.gate.is_leader else (b, a)
    assert leases.holder() == winner.gate.identity
    assert loser.changes == []
    assert loser.gate.valid_until == 0.0
    assert winner.leading == [True]
    for _ in range(100):
        await clock.advance(0.5)
        assert winner.gate.is_leader
        assert not loser.gate.is_leader
    await a.cancel()
    await b.cancel()


async def test_recampaign_after_losing_the_lease_to_another(
    clock: VirtualTime, leases: FakeLeases
) -> None:
    a = Candidate("a", leases, clock).start()
    await clock.run_until(lambda: a.gate.is_leader, 1)
    b = Candidate("b", leases, clock).start()
    leases.hang.set()  # a's renewals (and b's reads) hang: a's window ends, b waits
    await clock.advance(D)
    assert not a.gate.is_leader
    assert a.leading == [True, False]
    leases.hang.clear()
    leases.unhang.set()
    await clock.run_until(lambda: a.gate.is_leader or b.gate.is_leader, 2 * D)
    # whoever wins, the other is a candidate again; kill the winner: the other leads
    winner, other = (a, b) if a.gate.is_leader else (b, a)
    await winner.cancel()
    await clock.run_until(lambda: other.gate.is_leader, 2 * D + 3 * RP)
    assert other.gate.is_leader
    assert other.task is not None
    assert not other.task.done()
    await other.cancel()


async def test_release_hands_over_at_once_only_while_valid(
    clock: VirtualTime, leases: FakeLeases
) -> None:
    a = Candidate("a", leases, clock).start()
    await clock.run_until(lambda: a.gate.is_leader, 1)
    b = Candidate("b", leases, clock).start()
    await clock.advance(RP)
    await a.cancel()
    assert not a.gate.is_leader  # no write after run() is cancelled
    await a.gate.release()
    record = LeaseRecord.from_lease(leases.leases[NAME])
    assert record.holder == ""
    assert record.lease_duration_seconds == 1
    took = await clock.run_until(lambda: b.gate.is_leader, 2 * RP * 1.2 + 0.2)
    assert took < clock.now + D  # at b's next retry, not after a lease duration
    await b.cancel()
    # a second release by an expired gate writes nothing
    version = leases.version
    await b.gate.release()  # b was cancelled while valid: releases
    assert leases.version == version + 1
    await b.gate.release()
    assert leases.version == version + 1


async def test_release_after_expiry_does_not_touch_the_lease(
    clock: VirtualTime, leases: FakeLeases
) -> None:
    a = Candidate("a", leases, clock).start()
    await clock.run_until(lambda: a.gate.is_leader, 1)
    await a.cancel()
    await clock.advance(D)
    version = leases.version
    await a.gate.release()
    assert leases.version == version
    assert leases.holder() == "a"


async def test_is_leader_false_after_run_is_cancelled(
    clock: VirtualTime, leases: FakeLeases
) -> None:
    a = Candidate("a", leases, clock).start()
    await clock.run_until(lambda: a.gate.is_leader, 1)
    assert a.gate.healthy()
    await a.cancel()
    assert not a.gate.is_leader
    assert not a.gate.can_write(0)
    await settle()
    assert a.leading == [True, False]
    assert not a.gate.healthy()  # run() ended


def test_durations_are_validated() -> None:
    check_durations(15, 10, 2, 3)
    with pytest.raises(ValueError, match=r"lease duration \(15 s\) must be >= renew deadline"):
        check_durations(15, 10, 2, 10)
    with pytest.raises(ValueError, match="renew deadline"):
        check_durations(15, 2, 2, 3)
    with pytest.raises(ValueError, match=r"write timeout \(10 s\) \+ retry period \(2 s\)"):
        check_durations(13, 8, 2, 3, write_timeout=10)
    check_durations(14, 8, 2, 3, write_timeout=10)
    with pytest.raises(ValueError, match="must be positive"):
        check_durations(15, 10, 0, 3)
    with pytest.raises(ValueError, match="lease duration"):
        LeaderGate(
            None,
            namespace=NS,
            name=NAME,
            identity="a",
            request_timeout=10,
            lease_api=FakeLeases(),
        )


def test_settings_refuse_inconsistent_lease_durations() -> None:
    assert Settings().lease_duration_seconds == 15  # the defaults are consistent
    with pytest.raises(pydantic.ValidationError, match=r"= 8 s"):
        Settings(
            lease_duration_seconds=6,
            lease_renew_deadline_seconds=4,
            lease_retry_period_seconds=1,
        )
    # 6 >= 2 + 1 + 3, but no 10 s write could ever start inside a 6 s lease
    with pytest.raises(pydantic.ValidationError, match=r"write timeout \(10 s\)"):
        Settings(
            lease_duration_seconds=6, lease_renew_deadline_seconds=2, lease_retry_period_seconds=1
        )
    Settings(
        lease_duration_seconds=13, lease_renew_deadline_seconds=8, lease_retry_period_seconds=1
    )


def test_lease_times_are_written_as_micro_time() -> None:
    record = LeaseRecord.from_lease(
        {"spec": {"acquireTime": "2026-12-01T05:30:00+00:00", "renewTime": "2026-12-01T05:30:01Z"}}
    )
    assert record.acquire_time == "2026-12-01T05:30:00.000000Z"
    assert record.renew_time == "2026-12-01T05:30:01.000000Z"


def test_always_leader() -> None:
    gate = AlwaysLeader()
    assert gate.is_leader
    assert gate.healthy()
    assert gate.can_write(1e9)
    assert gate.valid_until == float("inf")


async def test_a_standby_reads_with_a_lease_duration_the_leader_with_its_request_timeout(
    clock: VirtualTime, leases: FakeLeases
) -> None:
    a = Candidate("a", leases, clock).start()
    await clock.run_until(lambda: a.gate.is_leader, 1)
    b = Candidate("b", leases, clock).start()
    await clock.advance(3 * RP)
    # every read is a candidate's or a standby's (the leader renews from the Lease it wrote):
    # each may take a lease duration (a new TLS connection on a slow path)
    assert len(leases.get_timeouts) >= 3
    assert set(leases.get_timeouts) == {a.gate.lease_duration}
    assert a.gate.is_leader
    assert not b.gate.is_leader
    await b.cancel()
    await a.cancel()
