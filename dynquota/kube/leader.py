"""Leader election on a coordination.k8s.io/v1 Lease, fenced by time (I/O).

Our own elector, following client-go's ``staging/src/k8s.io/client-go/tools/leaderelection``
(``leaderelection.go``: ``tryAcquireOrRenew``, ``acquire``, ``renew``, ``release``) on the
Lease lock (``resourcelock/leaselock.go``). kubernetes_asyncio's ``LeaderElection`` is not
used: it measures time on the wall clock, catches only ``ApiException`` (one connection error
ends the election for good), sends no request timeout, restarts the renew deadline after each
retry, exposes no renew time, and returns after losing the lease.

**Campaign** (:meth:`LeaderGate.run`, forever until cancelled), every ``retry_period``:

1. GET the Lease. Missing: CREATE it holding it (a 409 means another candidate created it
   first: not leading).
2. When the record (holder, durations, times, transitions) or the Lease's resourceVersion
   differs from the one last observed, note *when we observed it* on the monotonic clock.
3. Held by another identity and observed unchanged for less than ``lease_duration`` (the
   larger of the record's ``leaseDurationSeconds`` and ours): not leading.
4. Otherwise UPDATE (PUT) the Lease with ourselves as holder and the ``resourceVersion`` we
   read: if another candidate wrote in between, the apiserver answers 409 and we do not lead,
   so two candidates can never both win. A leader renews by updating ``renewTime`` from its
   last written Lease (one request; a 409 sends it back to step 1).

**Fencing by time.** The monotonic time just *before* each successful create/update was sent
is recorded; leadership is valid until ``send_time + lease_duration - 1 s``. A candidate takes
over only ``lease_duration`` after it *observed* the record, which is after the leader's send
time, so the two validity windows never overlap (the 1 s absorbs clock-rate drift).
:attr:`LeaderGate.is_leader` is computed from the clock (never a stale ``True`` while a renew
hangs), :meth:`LeaderGate.can_write` tells whether a write taking up to ``seconds`` finishes
inside the window, and a timer announces the loss (``on_change(False)``) at ``valid_until``
at the latest. A leader that has not renewed for ``renew_deadline`` seconds steps down
earlier and campaigns again.

**Errors.** Every ``Exception`` in the loop is caught and logged (WARNING on the first failure
and then at most every 30 s, saying what it means), and the campaign goes on.
``CancelledError`` ends it. Every Lease request has a request timeout
(:data:`dynquota._k8s.timeouts.LEASE_REQUEST_TIMEOUT`, 3 s), and durations must satisfy
``lease_duration >= renew_deadline + retry_period + request_timeout`` (15 >= 10 + 2 + 3 by
default).

Beside it: :mod:`dynquota.kube.lease` (the Lease requests behind the small ``LeaseApi``
protocol, so the elector is unit-tested with a fake at that boundary and an injected clock,
and the ``LeaseRecord``), :mod:`dynquota.kube.leader_durations` (``check_durations``) and
:mod:`dynquota.kube.leader_reporting` (``on_change`` delivery, failure logging). Without
leader election the operator uses :class:`AlwaysLeader`.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import math
import random
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from kubernetes_asyncio import client

from dynquota._k8s import timeouts
from dynquota._k8s.errors import ConflictError
from dynquota._k8s.request import ApiCallObserver
from dynquota.kube.leader_durations import JITTER, SAFETY_MARGIN, check_durations
from dynquota.kube.leader_reporting import Callback, LeadershipReporter
from dynquota.kube.lease import KubeLeaseApi, LeaseApi, LeaseRecord, lease_body, micro_time

__all__ = ["AlwaysLeader", "LeaderGate"]

log = logging.getLogger(__name__)

Clock = Callable[[], float]
"""Monotonic seconds (``time.monotonic`` in production)."""
Sleep = Callable[[float], Awaitable[None]]
"""``async sleep(seconds)`` on the same clock (``asyncio.sleep`` in production)."""


class AlwaysLeader:
    """The gate of a single replica: always leading, for ever."""

    is_leader = True
    identity = ""
    valid_until = math.inf

    def can_write(self, seconds: float) -> bool:
        """Always true."""
        return True

    def healthy(self) -> bool:
        """Always true."""
        return True

    async def run(self) -> None:
        """Nothing to do: return at once."""

    async def release(self) -> None:
        """Nothing to release."""


class LeaderGate:
    """Campaigns for the Lease ``namespace/name`` as ``identity`` until cancelled.

    Args:
        api_client: kubernetes_asyncio ``ApiClient`` (not closed here); may be ``None`` when
            ``lease_api`` is given.
        lease_duration, renew_deadline, retry_period: seconds, as client-go (15/10/2 there);
            see :func:`check_durations`.
        request_timeout: seconds one Lease request may take (default 3).
        on_change: awaited with ``True`` when this replica starts leading and ``False`` when
            it stops (in order, one at a time, from a task of its own).
        observer: hears ``(verb, "leases", status)`` after every Lease request (metrics).
        lease_api: the Lease requests (default: :class:`KubeLeaseApi` on ``api_client``).
        clock, sleep: monotonic seconds and a sleep on the same clock (tests inject both).
        wall_clock: UTC now, for the informational ``acquireTime``/``renewTime``.
        rng: random source for the candidate's jitter.

    Raises ``ValueError`` for inconsistent durations (:func:`check_durations`).
    """

    def __init__(
        self,
        api_client: client.ApiClient | None,
        *,
        namespace: str,
        name: str,
        identity: str,
        lease_duration: float = 15,
        renew_deadline: float = 10,
        retry_period: float = 2,
        request_timeout: float = timeouts.LEASE_REQUEST_TIMEOUT,
        on_change: Callback | None = None,
        observer: ApiCallObserver | None = None,
        lease_api: LeaseApi | None = None,
        clock: Clock = time.monotonic,
        sleep: Sleep = asyncio.sleep,
        wall_clock: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC),
        rng: random.Random | None = None,
    ) -> None:
        check_durations(lease_duration, renew_deadline, retry_period, request_timeout)
        if not identity:
            raise ValueError("leader election needs a non-empty identity")
        if lease_api is None:
            if api_client is None:
                raise ValueError("LeaderGate needs an api_client or a lease_api")
            lease_api = KubeLeaseApi(api_client, request_timeout=request_timeout, observer=observer)
        self._api = lease_api
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.lease_duration = float(lease_duration)
        self.renew_deadline = float(renew_deadline)
        self.retry_period = float(retry_period)
        self.request_timeout = float(request_timeout)
        self._reporter = LeadershipReporter(identity, f"{namespace}/{name}", on_change)
        self._clock = clock
        self._sleep = sleep
        self._wall_clock = wall_clock
        self._rng = rng if rng is not None else random.Random()
        self._valid_until = 0.0
        self._last_send = 0.0  # send time of the last successful create/update
        self._lease: dict[str, Any] | None = None  # the Lease as we last wrote it (leading)
        self._observed: LeaseRecord | None = None
        self._observed_version = ""  # resourceVersion of the Lease as last observed
        self._observed_time = 0.0
        self._deadline_task: asyncio.Task[None] | None = None
        self._running = False
        self._started = False
        self._stopped = False
        self._last_iteration = 0.0
        self.renewals = 0
        """Successful creates/updates of the Lease by this replica (a count)."""

    # -- what the operator reads ----------------------------------------------------------

    @property
    def on_change(self) -> Callback | None:
        """The ``on_change`` callback (may be set after construction)."""
        return self._reporter.on_change

    @on_change.setter
    def on_change(self, callback: Callback | None) -> None:
        self._reporter.on_change = callback

    @property
    def transitions(self) -> int:
        """Times this replica started leading (a count)."""
        return self._reporter.transitions

    async def settled(self) -> None:
        """Wait until ``on_change`` has heard every change announced so far."""
        await self._reporter.settled()

    @property
    def valid_until(self) -> float:
        """Monotonic seconds (``clock``) until which this replica leads: the send time of its
        last successful acquire/renew + ``lease_duration`` - 1 s; 0.0 when not leading."""
        return self._valid_until if self.is_leader else 0.0

    @property
    def is_leader(self) -> bool:
        """Whether this replica leads *now* (computed from the clock at each read; False after
        :meth:`run` was cancelled)."""
        return not self._stopped and self._clock() < self._valid_until

    def can_write(self, seconds: float) -> bool:
        """Whether a write that takes up to ``seconds`` finishes before leadership could
        lapse: ``now + seconds < valid_until``."""
        return not self._stopped and self._clock() + seconds < self._valid_until

    @property
    def observed_holder(self) -> str:
        """The holder identity of the Lease as last read or written ("" if none/unknown)."""
        return self._observed.holder if self._observed is not None else ""

    @property
    def consecutive_failures(self) -> int:
        """Lease requests that failed in a row (0 after a success)."""
        return self._reporter.failures

    def healthy(self) -> bool:
        """Liveness of the elector: True before :meth:`run` starts; while it runs, its loop
        completed an iteration within ``lease_duration + 2 * request_timeout +
        retry_period`` seconds (one iteration is at most two requests and a sleep; a standby's
        read may take ``lease_duration``, its write ``request_timeout``); False
        once :meth:`run` has ended."""
        if not self._started:
            return True
        if not self._running:
            return False
        bound = self.lease_duration + 2 * self.request_timeout + self.retry_period
        return self._clock() - self._last_iteration <= bound

    # -- the campaign ---------------------------------------------------------------------

    async def run(self) -> None:
        """Campaign, lead, and campaign again after losing the Lease; runs until cancelled.

        Never returns and never raises but ``CancelledError``: every other exception is
        logged and the campaign goes on.
        """
        self._started = True
        self._running = True
        self._stopped = False
        try:
            while True:
                self._last_iteration = self._clock()
                try:
                    await self._try_acquire_or_renew()
                except Exception as exc:  # the campaign must never end: log and go on
                    self._failed(exc)
                else:
                    self._reporter.succeeded()
                if self._valid_until and self._clock() >= self._last_send + self.renew_deadline:
                    self._step_down(
                        f"no renewal within the renew deadline ({self.renew_deadline:g} s)"
                    )
                self._last_iteration = self._clock()
                await self._sleep(self._pause())
        finally:
            self._running = False
            self._stopped = True
            self._cancel_deadline_timer()
            self._announce(False)

    def _pause(self) -> float:
        if self.is_leader:
            return self.retry_period
        return self.retry_period * (1 + JITTER * self._rng.random())

    async def _try_acquire_or_renew(self) -> None:
        """One attempt (client-go ``tryAcquireOrRenew``); raises on request failures."""
        if self._lease is not None and self.is_leader:
            # fast path (as client-go since 1.28): renew from the Lease we last wrote
            try:
                await self._write(self._lease, self._record(LeaseRecord.from_lease(self._lease)))
                return
            except ConflictError:
                self._lease = None  # changed behind us: read it again below
        # A standby reads with a timeout of a lease duration, not the leader's short one: on a
        # slow path (2 s latency) a read that must open a new TLS connection takes longer than
        # 3 s, and each timed-out read drops its connection, so a standby with the short timeout
        # never got a read through and never took over (measured in the kill -9 fault test). A
        # late read only makes the holder's expiry look later (counted from its answer).
        lease = await self._api.get(
            self.namespace, self.name, timeout=None if self.is_leader else self.lease_duration
        )
        if lease is None:
            await self._create()
            return
        record = LeaseRecord.from_lease(lease)
        version = str((lease.get("metadata") or {}).get("resourceVersion") or "")
        if record != self._observed or version != self._observed_version:
            # any write counts as a change (stricter than client-go's record comparison, which
            # two renewals stamped with the same renewTime, e.g. after a clock step, would fool)
            self._observed = record
            self._observed_version = version
            self._observed_time = self._clock()
        if record.holder and record.holder != self.identity:
            if self._valid_until:
                self._step_down(f"the Lease is held by {record.holder!r}")
            duration = max(float(record.lease_duration_seconds), self.lease_duration)
            if self._clock() < self._observed_time + duration:
                return  # held by another, not expired
        try:
            await self._write(lease, self._record(record))
        except ConflictError:  # another candidate wrote first: it won
            log.debug("%s: Lease %s changed while acquiring it", self.identity, self._lease_name)

    def _record(self, old: LeaseRecord) -> LeaseRecord:
        now = micro_time(self._wall_clock())
        if old.holder == self.identity:
            return LeaseRecord(
                holder=self.identity,
                lease_duration_seconds=math.ceil(self.lease_duration),
                acquire_time=old.acquire_time or now,
                renew_time=now,
                lease_transitions=old.lease_transitions,
            )
        return LeaseRecord(
            holder=self.identity,
            lease_duration_seconds=math.ceil(self.lease_duration),
            acquire_time=now,
            renew_time=now,
            lease_transitions=old.lease_transitions + (1 if old.holder else 0),
        )

    async def _create(self) -> None:
        record = self._record(LeaseRecord())
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self.name, "namespace": self.namespace},
            "spec": record.spec(),
        }
        send_time = self._clock()
        try:
            created = await self._api.create(self.namespace, body)
        except ConflictError:
            log.debug("%s: Lease %s created by another candidate", self.identity, self._lease_name)
            return
        self._acquired(created, send_time)

    async def _write(self, lease: Mapping[str, Any], record: LeaseRecord) -> None:
        body = lease_body(lease, record)
        send_time = self._clock()
        written = await self._api.replace(self.namespace, self.name, body)
        self._acquired(written, send_time)

    def _acquired(self, lease: dict[str, Any], send_time: float) -> None:
        """A create/update sent at ``send_time`` succeeded: we lead until the new deadline."""
        now = self._clock()
        if self._reporter.announced and now >= self._valid_until:
            # leadership lapsed before this answer came: say so before leading again
            self._announce(False)
        self._lease = lease
        self._observed = LeaseRecord.from_lease(lease)
        self._observed_version = str((lease.get("metadata") or {}).get("resourceVersion") or "")
        self._observed_time = send_time
        self._last_send = send_time
        self._valid_until = send_time + self.lease_duration - SAFETY_MARGIN
        self.renewals += 1
        self._start_deadline_timer()
        if self.is_leader:
            self._announce(True)

    def _step_down(self, why: str) -> None:
        was_leading = self._valid_until > 0
        self._valid_until = 0.0
        self._lease = None
        self._cancel_deadline_timer()
        if was_leading:
            log.warning("%s stops leading (Lease %s): %s", self.identity, self._lease_name, why)
        self._announce(False)

    # -- the deadline timer (independent of the loop, which may hang in a request) --------

    def _start_deadline_timer(self) -> None:
        self._cancel_deadline_timer()
        self._deadline_task = asyncio.create_task(
            self._expire_at(self._valid_until), name=f"dynquota-lease-deadline-{self.identity}"
        )

    def _cancel_deadline_timer(self) -> None:
        task, self._deadline_task = self._deadline_task, None
        if task is not None and task is not asyncio.current_task():
            task.cancel()

    async def _expire_at(self, deadline: float) -> None:
        while (remaining := deadline - self._clock()) > 0:
            await self._sleep(remaining)
        if self._valid_until == deadline:  # not renewed meanwhile
            self._deadline_task = None
            self._step_down(
                f"leadership expired (no renewal sent within {self.lease_duration:g} s - "
                f"{SAFETY_MARGIN:g} s)"
            )

    # -- reporting ------------------------------------------------------------------------

    @property
    def _lease_name(self) -> str:
        return f"{self.namespace}/{self.name}"

    def _announce(self, leading: bool) -> None:
        """Announce a change (:class:`LeadershipReporter`); never "leading" unless this
        replica leads by the clock now."""
        if leading and not self.is_leader:
            return
        self._reporter.announce(leading)

    def _failed(self, exc: Exception) -> None:
        now = self._clock()
        if self.is_leader:
            meaning = (
                f"still leading for {self._valid_until - now:.1f} s; steps down after the renew"
                f" deadline ({self.renew_deadline:g} s without renewal)"
            )
        else:
            meaning = f"not leading; retrying every {self.retry_period:g} s"
        self._reporter.failed(exc, now, meaning)

    # -- shutdown -------------------------------------------------------------------------

    async def release(self) -> None:
        """Give the Lease up on a clean shutdown (client-go ``release``): only if this
        replica still leads by the clock, the holder is emptied (with the resourceVersion of
        our last write, so a Lease someone else holds is never touched) and
        ``leaseDurationSeconds`` set to 1, so a standby takes over at its next retry. Call
        after cancelling :meth:`run`; never raises."""
        lease, valid = self._lease, self._clock() < self._valid_until
        self._valid_until = 0.0
        self._lease = None
        self._cancel_deadline_timer()
        if lease is None or not valid:
            return
        old = LeaseRecord.from_lease(lease)
        now = micro_time(self._wall_clock())
        record = LeaseRecord(
            holder="",
            lease_duration_seconds=1,
            acquire_time=now,
            renew_time=now,
            lease_transitions=old.lease_transitions,
        )
        try:
            await self._api.replace(self.namespace, self.name, lease_body(lease, record))
        except Exception as exc:  # best effort: the Lease then expires on its own
            log.warning("%s: releasing Lease %s failed: %s", self.identity, self._lease_name, exc)
        else:
            log.info("%s released the Lease %s", self.identity, self._lease_name)
        self._announce(False)
