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

The Lease API sits behind the small :class:`LeaseApi` protocol (plain dicts), so the elector
is unit-tested with a fake at that boundary and an injected clock; :class:`KubeLeaseApi` is
the real one. Without leader election the operator uses :class:`AlwaysLeader`.
"""

from __future__ import annotations

import asyncio
import collections
import datetime as dt
import logging
import math
import random
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import aiohttp
from kubernetes_asyncio import client

from dynquota._k8s import timeouts
from dynquota._k8s.errors import ConflictError, KubeError, NotFoundError
from dynquota._k8s.request import ApiCallObserver, call_api

__all__ = [
    "AlwaysLeader",
    "KubeLeaseApi",
    "LeaderGate",
    "LeaseApi",
    "LeaseRecord",
    "check_durations",
]

log = logging.getLogger(__name__)

Callback = Callable[[bool], Awaitable[None]]
"""``async (is_leader)``: called when leadership is gained (True) or lost (False)."""

Clock = Callable[[], float]
"""Monotonic seconds (``time.monotonic`` in production)."""
Sleep = Callable[[float], Awaitable[None]]
"""``async sleep(seconds)`` on the same clock (``asyncio.sleep`` in production)."""

JITTER = 0.2
"""A candidate waits ``retry_period * (1 + JITTER * random())`` between attempts."""
SAFETY_MARGIN = 1.0
"""Seconds leadership ends before ``send_time + lease_duration`` (clock-rate drift)."""
WARN_EVERY = 30.0
"""Seconds between two WARNINGs about repeated Lease failures."""


def check_durations(
    lease_duration: float,
    renew_deadline: float,
    retry_period: float,
    request_timeout: float,
    write_timeout: float | None = None,
) -> None:
    """Validate the elector's durations (seconds).

    Requires ``retry_period > 0``, ``request_timeout > 0``, ``renew_deadline > JITTER-scaled
    retry_period`` (client-go: ``renewDeadline > 1.2 * retryPeriod``), ``lease_duration >
    SAFETY_MARGIN`` and ``lease_duration >= renew_deadline + retry_period + request_timeout``:
    the leader's last renew, started just before the renew deadline, is answered (or timed
    out) before a candidate may take over. With ``write_timeout`` (the longest write gated by
    :meth:`LeaderGate.can_write`) also ``lease_duration > write_timeout + retry_period +
    SAFETY_MARGIN``: otherwise the window left after a renewal is never long enough for a
    write to start, and the leader never writes.

    Raises ``ValueError`` naming the violated rule and the values.
    """
    if retry_period <= 0 or request_timeout <= 0:
        raise ValueError(
            f"retry period ({retry_period:g} s) and request timeout ({request_timeout:g} s) "
            "must be positive"
        )
    if renew_deadline <= (1 + JITTER) * retry_period:
        raise ValueError(
            f"renew deadline ({renew_deadline:g} s) must be greater than "
            f"{1 + JITTER:g} x retry period ({retry_period:g} s)"
        )
    if lease_duration <= SAFETY_MARGIN:
        raise ValueError(f"lease duration ({lease_duration:g} s) must exceed {SAFETY_MARGIN:g} s")
    needed = renew_deadline + retry_period + request_timeout
    if lease_duration < needed:
        raise ValueError(
            f"lease duration ({lease_duration:g} s) must be >= renew deadline "
            f"({renew_deadline:g} s) + retry period ({retry_period:g} s) + Lease request "
            f"timeout ({request_timeout:g} s) = {needed:g} s"
        )
    if write_timeout is not None:
        shortest = write_timeout + retry_period + SAFETY_MARGIN
        if lease_duration <= shortest:
            raise ValueError(
                f"lease duration ({lease_duration:g} s) must be greater than the write timeout "
                f"({write_timeout:g} s) + retry period ({retry_period:g} s) + {SAFETY_MARGIN:g} s"
                f" = {shortest:g} s: a write starts only while the Lease stays valid for its "
                "whole timeout"
            )


class LeaseApi(Protocol):
    """The Lease requests the elector makes (the adapter boundary; Leases as decoded JSON).

    Each method raises :class:`~dynquota._k8s.errors.KubeError` subclasses
    (``ConflictError`` on 409, ``TransportError`` on a timeout); the elector catches any
    ``Exception``.
    """

    async def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The Lease, or ``None`` if it does not exist (404)."""
        ...

    async def create(self, namespace: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """Create ``body``; return the stored Lease. ``ConflictError`` if it exists."""
        ...

    async def replace(self, namespace: str, name: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """Update (PUT) the Lease with ``body``, whose ``metadata.resourceVersion`` is a
        precondition; return the stored Lease. ``ConflictError`` if it changed."""
        ...


class KubeLeaseApi:
    """:class:`LeaseApi` over a kubernetes_asyncio ``ApiClient`` (``coordination.k8s.io/v1``).

    Every request has ``request_timeout`` seconds in total (3 s connect at most).
    ``observer`` hears ``(verb, "leases", status)`` after every call.
    """

    def __init__(
        self,
        api_client: client.ApiClient,
        *,
        request_timeout: float = timeouts.LEASE_REQUEST_TIMEOUT,
        observer: ApiCallObserver | None = None,
    ) -> None:
        self._api: Any = client.CoordinationV1Api(api_client)
        self._sanitize = api_client.sanitize_for_serialization
        self.request_timeout = request_timeout
        self._observer = observer

    async def _call(
        self, verb: str, request: Callable[[aiohttp.ClientTimeout], Awaitable[Any]]
    ) -> dict[str, Any]:
        model = await call_api(
            verb,
            "leases",
            request,
            self._observer,
            timeout=timeouts.lease_timeout(self.request_timeout),
        )
        result: dict[str, Any] = self._sanitize(model)
        return result

    async def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The Lease ``namespace/name`` or ``None``; see :class:`LeaseApi`."""
        try:
            return await self._call(
                "get",
                lambda t: self._api.read_namespaced_lease(name, namespace, _request_timeout=t),
            )
        except NotFoundError:
            return None

    async def create(self, namespace: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """Create the Lease ``body``; see :class:`LeaseApi`."""
        return await self._call(
            "create",
            lambda t: self._api.create_namespaced_lease(namespace, dict(body), _request_timeout=t),
        )

    async def replace(self, namespace: str, name: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """Update the Lease with ``body`` (resourceVersion precondition); see :class:`LeaseApi`."""
        return await self._call(
            "update",
            lambda t: self._api.replace_namespaced_lease(
                name, namespace, dict(body), _request_timeout=t
            ),
        )


@dataclass(frozen=True)
class LeaseRecord:
    """The leader-election record in a Lease's ``spec`` (client-go's ``LeaderElectionRecord``).

    Times are the RFC 3339 strings as stored (informational only: the elector measures time on
    its own monotonic clock); ``lease_duration_seconds`` is 0 when unset.
    """

    holder: str = ""
    lease_duration_seconds: int = 0
    acquire_time: str | None = None
    renew_time: str | None = None
    lease_transitions: int = 0

    @classmethod
    def from_lease(cls, lease: Mapping[str, Any]) -> LeaseRecord:
        """The record of a Lease as decoded JSON (camelCase keys)."""
        spec = lease.get("spec") or {}

        def number(key: str) -> int:
            value = spec.get(key)
            return int(value) if isinstance(value, int | float) else 0

        def text(key: str) -> str | None:
            value = spec.get(key)
            if value is None:
                return None
            # MicroTime needs exactly 6 fractional digits; a decoded datetime's isoformat()
            # drops them when they are 0, and the apiserver would refuse the write
            try:
                parsed = dt.datetime.fromisoformat(str(value))
            except ValueError:
                return str(value)
            if parsed.tzinfo is None:
                parsed = parsed.replace(tzinfo=dt.UTC)
            return _micro_time(parsed)

        return cls(
            holder=str(spec.get("holderIdentity") or ""),
            lease_duration_seconds=number("leaseDurationSeconds"),
            acquire_time=text("acquireTime"),
            renew_time=text("renewTime"),
            lease_transitions=number("leaseTransitions"),
        )

    def spec(self) -> dict[str, Any]:
        """The Lease ``spec`` holding this record."""
        return {
            "holderIdentity": self.holder or None,
            "leaseDurationSeconds": self.lease_duration_seconds,
            "acquireTime": self.acquire_time,
            "renewTime": self.renew_time,
            "leaseTransitions": self.lease_transitions,
        }


def _micro_time(now: dt.datetime) -> str:
    """A ``metav1.MicroTime`` string (RFC 3339, microseconds, UTC)."""
    return now.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


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
        self.on_change = on_change
        """The ``on_change`` callback (may be set after construction)."""
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
        self._announced = False
        self._pending: collections.deque[bool] = collections.deque()
        self._notifier: asyncio.Task[None] | None = None
        self._deadline_task: asyncio.Task[None] | None = None
        self._running = False
        self._started = False
        self._stopped = False
        self._last_iteration = 0.0
        self._failures = 0
        self._last_warning = -math.inf
        self.renewals = 0
        """Successful creates/updates of the Lease by this replica (a count)."""
        self.transitions = 0
        """Times this replica started leading (a count)."""

    # -- what the operator reads ----------------------------------------------------------

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
        return self._failures

    def healthy(self) -> bool:
        """Liveness of the elector: True before :meth:`run` starts; while it runs, its loop
        completed an iteration within ``lease_duration + 2 * request_timeout +
        retry_period`` seconds (one iteration is at most two requests and a sleep); False
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
                    self._succeeded_request()
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
        lease = await self._api.get(self.namespace, self.name)
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
        now = _micro_time(self._wall_clock())
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
        body = dict(lease)
        metadata = dict(body.get("metadata") or {})
        metadata.pop("managedFields", None)  # the apiserver keeps them on update
        body["metadata"] = metadata
        body["spec"] = record.spec()
        body.setdefault("apiVersion", "coordination.k8s.io/v1")
        body.setdefault("kind", "Lease")
        send_time = self._clock()
        written = await self._api.replace(self.namespace, self.name, body)
        self._acquired(written, send_time)

    def _acquired(self, lease: dict[str, Any], send_time: float) -> None:
        """A create/update sent at ``send_time`` succeeded: we lead until the new deadline."""
        now = self._clock()
        if self._announced and now >= self._valid_until:
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
        """Record the new state and have ``on_change`` hear it, in order, from a task of its
        own: a slow callback never delays a renewal."""
        if leading and not self.is_leader:
            return
        if leading == self._announced:
            return
        self._announced = leading
        if leading:
            self.transitions += 1
        log.info(
            "%s %s the Lease %s",
            self.identity,
            "holds" if leading else "no longer holds",
            self._lease_name,
        )
        self._pending.append(leading)
        try:
            asyncio.get_running_loop()
        except RuntimeError:  # no loop (a synchronous caller): delivered with the next change
            return
        if self._notifier is None or self._notifier.done():
            self._notifier = asyncio.create_task(
                self._notify(), name=f"dynquota-lease-notify-{self.identity}"
            )

    async def _notify(self) -> None:
        while self._pending:
            leading = self._pending.popleft()
            if self.on_change is None:
                continue
            try:
                await self.on_change(leading)
            except Exception:
                log.exception("on_change(%s) failed", leading)

    async def settled(self) -> None:
        """Wait until ``on_change`` has heard every change announced so far."""
        while self._notifier is not None and not self._notifier.done():
            await asyncio.shield(self._notifier)

    def _failed(self, exc: Exception) -> None:
        self._failures += 1
        now = self._clock()
        if self.is_leader:
            meaning = (
                f"still leading for {self._valid_until - now:.1f} s; steps down after the renew"
                f" deadline ({self.renew_deadline:g} s without renewal)"
            )
        else:
            meaning = f"not leading; retrying every {self.retry_period:g} s"
        if self._failures == 1 or now - self._last_warning >= WARN_EVERY:
            self._last_warning = now
            log.warning(
                "%s: Lease %s request failed (%d in a row): %s; %s",
                self.identity,
                self._lease_name,
                self._failures,
                exc if isinstance(exc, KubeError) else repr(exc),
                meaning,
                exc_info=not isinstance(exc, KubeError),
            )
        else:
            log.debug("%s: Lease %s request failed: %r", self.identity, self._lease_name, exc)

    def _succeeded_request(self) -> None:
        if self._failures:
            log.info(
                "%s: Lease %s requests succeed again after %d failures",
                self.identity,
                self._lease_name,
                self._failures,
            )
        self._failures = 0
        self._last_warning = -math.inf

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
        now = _micro_time(self._wall_clock())
        record = LeaseRecord(
            holder="",
            lease_duration_seconds=1,
            acquire_time=now,
            renew_time=now,
            lease_transitions=old.lease_transitions,
        )
        body = dict(lease)
        metadata = dict(body.get("metadata") or {})
        metadata.pop("managedFields", None)
        body["metadata"] = metadata
        body["spec"] = record.spec()
        try:
            await self._api.replace(self.namespace, self.name, body)
        except Exception as exc:  # best effort: the Lease then expires on its own
            log.warning("%s: releasing Lease %s failed: %s", self.identity, self._lease_name, exc)
        else:
            log.info("%s released the Lease %s", self.identity, self._lease_name)
        self._announce(False)
