"""The operator's state and its per-namespace reconcile (no kopf in here).

:class:`Operator` holds what the watches told it (namespaces, policies, the kill switch, the
managed quotas' ``status.used``), the peak windows, and the workqueue. Its
:meth:`Operator.reconcile` is the one decision per namespace: read the managed quota, compute
usage ``U = max(tally, status.used)`` and peaks, call the pure
:func:`dynquota.policy.decide`, and apply the :class:`~dynquota.policy.Decision` with one
create, JSON merge-patch or delete. It talks to the cluster only through the small ports
below (:class:`QuotaStore`, :class:`EventSink`, :class:`UsageView`, :class:`PolicyStatusSink`),
so unit tests fake them at that boundary.

Writes (quotas, Events, policy status) happen only while ``gate.is_leader``.

Fault safety (``docs/operator.md``): a managed-quota write needs positive knowledge — the
policies listed once since start (:meth:`Operator.on_policy_list`), the informers synced, the
kill switch read, and the Lease valid for the whole write (``gate.can_write``); a write that
shrinks (:attr:`~dynquota.policy.Decision.shrinks`) also needs the informers healthy now.
Otherwise the decision is *held*: nothing is written, the reason is logged and counted in
``dynquota_writes_held_total{reason}``, and the namespace is retried with backoff. The kill
switch is the exception on purpose: its sweep needs only a consistent read of ``kube-system``
showing it engaged, and the Lease.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import math
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from aiolimiter import AsyncLimiter
from cachetools import TTLCache

from dynquota._k8s.backoff import Backoff
from dynquota._k8s.errors import ApiError, ConflictError, KubeError, NotFoundError
from dynquota._k8s.timeouts import REQUEST_TIMEOUT
from dynquota._k8s.workqueue import Outcome, WorkQueue
from dynquota.kube.events import EventType, ObjectRef
from dynquota.kube.quotas import MANAGED_QUOTA_NAME, QuotaSnapshot
from dynquota.metrics import Metrics
from dynquota.policy import (
    KILL_SWITCH,
    OVERRIDE,
    RECURRING_REASONS,
    TRACKED_RESOURCES,
    Decision,
    Governance,
    NamespaceInfo,
    PolicyInfo,
    QuotaState,
    apply_decision,
    decide,
    govern,
    resolve_kill_switch,
    target,
    validate_policy,
)
from dynquota.policy.decide import reject_unmanaged_override
from dynquota.quantity import QuantityError, parse_quantity
from dynquota.settings import Settings
from dynquota.usage import PeakWindows

__all__ = [
    "EventSink",
    "LeaderView",
    "Operator",
    "PolicyStatusSink",
    "QuotaStore",
    "UsageView",
]

log = logging.getLogger("dynquota.operator")

KUBE_SYSTEM = "kube-system"
FOREIGN_QUOTA = "ForeignQuota"
QUOTA_WRITE_FAILED = "QuotaWriteFailed"
KILL_SWITCH_ENGAGED = "KillSwitchEngaged"
KILL_SWITCH_RELEASED = "KillSwitchReleased"
KILL_SWITCH_INVALID = "KillSwitchInvalid"
MANAGED_LABEL_IGNORED = "ManagedLabelIgnored"
QUOTA_REMOVED = "QuotaRemoved"
QUOTA_RELEASED = "QuotaReleased"
POLICY_INVALID = "PolicyInvalid"
POLICY_API_VERSION = "dynquota.io/v1alpha1"
POLICY_KIND = "DynamicQuotaPolicy"
_WARNING_TTL = 3600.0
WRITE_TIMEOUT = REQUEST_TIMEOUT
"""Seconds one managed-quota write may take (the kube/ request timeout, the same value the
Settings lease rule checks): a write starts only when the Lease stays valid that long."""
RECONCILE_TIMEOUT = 60.0
"""Seconds after which a reconcile is abandoned and retried with backoff (a safety net
under the per-request timeouts: a hung reconcile never stalls a worker for good)."""
CONFLICT_RETRIES = 3
"""Re-reads after a 409 Conflict on a managed-quota write, before backing off."""
HELD_POLICIES = "policies-unknown"
HELD_INFORMERS = "informers-not-synced"
HELD_STALE = "informers-stale"
HELD_KILL_SWITCH = "kill-switch-unknown"
HELD_RELEASE = "kill-switch-release-unconfirmed"
HELD_LEASE = "lease-not-held"
HOLD_REASONS = (
    HELD_POLICIES,
    HELD_INFORMERS,
    HELD_STALE,
    HELD_KILL_SWITCH,
    HELD_RELEASE,
    HELD_LEASE,
)
"""Why a managed-quota write is held (label of ``dynquota_writes_held_total``)."""


class QuotaStore(Protocol):
    """Managed-quota I/O (:class:`dynquota.kube.quotas.QuotaClient`)."""

    async def get(self, namespace: str) -> QuotaSnapshot | None: ...
    async def list_managed(self) -> list[QuotaSnapshot]: ...
    async def create(
        self, namespace: str, hard: Mapping[str, str], annotations: Mapping[str, str]
    ) -> QuotaSnapshot: ...
    async def patch(
        self, namespace: str, body: Mapping[str, Any], resource_version: str | None = None
    ) -> QuotaSnapshot: ...
    async def delete(self, namespace: str, uid: str | None = None) -> bool: ...


class EventSink(Protocol):
    """Event posting (:class:`dynquota.kube.events.EventRecorder`)."""

    async def emit(self, ref: ObjectRef, type_: EventType, reason: str, message: str) -> bool: ...


class UsageView(Protocol):
    """Usage tallies (:class:`dynquota.kube.informer.UsageWatcher`).

    ``synced``: every informer applied its first full list. ``healthy(now, margin)``: every
    informer completed a watch cycle or list within its watch timeout plus ``margin``
    seconds (its tallies are fresh enough to shrink on).
    """

    @property
    def synced(self) -> bool: ...
    def healthy(self, now: float | None = None, margin: float = 60.0) -> bool: ...
    def usage(self, namespace: str, resource: str, now: float | None = None) -> int: ...
    def next_expiry(self, namespace: str, now: float | None = None) -> float | None: ...


class PolicyStatusSink(Protocol):
    """Policy status writes (:class:`dynquota.kube.cluster.ClusterClient`)."""

    async def patch_policy_status(self, name: str, status: Mapping[str, Any]) -> None: ...


class NamespaceReader(Protocol):
    """Consistent reads of a Namespace (:class:`dynquota.kube.cluster.ClusterClient`)."""

    async def read_namespace(self, name: str) -> dict[str, Any]: ...


class LeaderView(Protocol):
    """Whether this replica may write (:class:`dynquota.kube.leader.LeaderGate`).

    ``is_leader``: it holds the Lease now. ``can_write(seconds)``: a write that takes up to
    ``seconds`` would finish before leadership could lapse (time fencing).
    """

    @property
    def is_leader(self) -> bool: ...
    def can_write(self, seconds: float) -> bool: ...


class _Leading:
    is_leader = True

    def can_write(self, seconds: float) -> bool:
        return True


@dataclass(frozen=True)
class Applied:
    """What writing one decision came to.

    ``outcome`` ``None``: the decision was written (or there was nothing to write) and
    ``quota`` is the managed quota afterwards (``None`` after a delete). Otherwise ``outcome``
    is for the workqueue and ``result`` labels ``dynquota_reconciles_total``. ``conflict``:
    409 Conflict — read the quota again and decide again.
    """

    quota: QuotaSnapshot | None = None
    outcome: Outcome | None = None
    result: str = "ok"
    conflict: bool = False


@dataclass
class _PolicyRecord:
    info: PolicyInfo
    generation: int
    status: Mapping[str, Any]
    uid: str = ""


@dataclass
class PolicyTally:
    """What one policy does to the known namespaces (counts of namespaces).

    ``governed``: it manages them. ``frozen``: it is invalid and freezes them. ``matched``:
    its selector matches them and they are managed (by it or another policy). ``shadowed``:
    matched but governed by another policy; ``winners`` counts those per winning policy.
    """

    governed: int = 0
    frozen: int = 0
    matched: int = 0
    shadowed: int = 0
    winners: dict[str, int] = field(default_factory=dict)


@dataclass
class NamespaceView:
    """What the operator last decided for a namespace (for ``plan``, the demo and tests).

    ``usage``/``hard``/``target`` per resource (counts), ``action`` the last decision's action,
    ``reasons`` its change reasons (or notes), ``at`` when (seconds since the epoch).
    """

    usage: dict[str, int] = field(default_factory=dict)
    tally: dict[str, int] = field(default_factory=dict)
    status_used: dict[str, int] = field(default_factory=dict)
    hard: dict[str, int] = field(default_factory=dict)
    target: dict[str, int] = field(default_factory=dict)
    action: str = ""
    reasons: tuple[str, ...] = ()
    at: float = 0.0
    governance: str = ""
    dry_run: bool = False


def _int_map(values: Mapping[str, str]) -> dict[str, int]:
    result: dict[str, int] = {}
    for key, text in values.items():
        with contextlib.suppress(QuantityError):
            result[key] = parse_quantity(text).ceil()
    return result


def _quota_state(snapshot: QuotaSnapshot) -> QuotaState:
    hard = {}
    for key, text in snapshot.spec_hard.items():
        with contextlib.suppress(QuantityError):
            hard[key] = parse_quantity(text)
    return QuotaState(hard, dict(snapshot.annotations))


def _rv(obj: Mapping[str, Any]) -> int:
    raw = str((obj.get("metadata") or {}).get("resourceVersion") or "")
    return int(raw) if raw.isdigit() else 0


def _namespace_terminating(exc: ApiError) -> bool:
    """A 403 for creating in a namespace that is being deleted (``NamespaceTerminating``)."""
    return exc.status == 403 and "being terminated" in exc.message


def _now_rfc3339() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Operator:
    """State and reconcile loop of one operator replica.

    Args:
        settings: the operator settings.
        quotas, events, policy_status: the I/O ports (see the module docs).
        metrics: where to report (a fresh :class:`~dynquota.metrics.Metrics` if omitted).
        gate: leadership (always leading if omitted).
        clock: wall clock, seconds since the epoch.

    Set :attr:`usage` (a :class:`UsageView`) before the queue runs; feed the watches with
    :meth:`on_namespace`, :meth:`on_quota`, :meth:`on_policy`, :meth:`on_usage_change`.
    """

    def __init__(
        self,
        settings: Settings,
        *,
        quotas: QuotaStore,
        events: EventSink,
        policy_status: PolicyStatusSink,
        metrics: Metrics | None = None,
        gate: LeaderView | None = None,
        clock: Callable[[], float] = time.time,
        namespace_reader: NamespaceReader | None = None,
    ) -> None:
        self.settings = settings
        self.quotas = quotas
        self.events = events
        self.policy_status = policy_status
        self.namespace_reader = namespace_reader
        """Consistent reads of ``kube-system`` confirming a kill-switch change seen in a
        watch event before it deletes or re-creates quotas (``None``: the event is trusted;
        unit tests only)."""
        self.metrics = metrics if metrics is not None else Metrics()
        self.gate: LeaderView = gate if gate is not None else _Leading()
        self.clock = clock
        self.usage: UsageView | None = None
        self.started_at = clock()
        self.namespaces: dict[str, NamespaceInfo] = {}
        self._namespace_rv: dict[str, int] = {}
        self._deleted: TTLCache[str, int] = TTLCache(maxsize=100_000, ttl=3600)
        self._policies: dict[str, _PolicyRecord] = {}
        self.policies_listed = False
        """Whether a consistent LIST of the policies succeeded since start
        (:meth:`on_policy_list`); until then every managed-quota write is held."""
        self._release_confirmed = True
        """``False`` from a watch event releasing the kill switch until a consistent read of
        ``kube-system`` confirms it: creates are held meanwhile."""
        self._held_logged: dict[str, float] = {}
        self._kill_switch_observed = False
        self._kill_switch_logged: str | None = None
        self.kill_switch: bool | None = None
        self.managed_quotas_exist: bool | None = None
        """Whether managed quotas existed at start-up (read only when the kill-switch
        annotation is invalid then); ``None``: not known."""
        self._kube_system_uid = ""
        self._namespace_uid: dict[str, str] = {}
        self._deleted_by_others: set[str] = set()
        """Namespaces whose managed quota someone else deleted (re-created as
        ``QuotaRecreated``)."""
        self._own_deletes: TTLCache[str, bool] = TTLCache(maxsize=100_000, ttl=600)
        """Namespaces whose managed quota dynquota itself is deleting (kill switch,
        unmanaged), so their DELETED event is not taken for someone else's."""
        self._status_used: dict[str, dict[str, int]] = {}
        self.simulated: dict[str, QuotaState | None] = {}
        self.views: dict[str, NamespaceView] = {}
        self._background_tasks: set[asyncio.Task[Any]] = set()
        self.peaks = PeakWindows(self._peak_horizon())
        # keyed by (namespace or object, reason, cause): never by message, which carries usage
        # and tenant text
        self._warned: TTLCache[tuple[str, str, str], bool] = TTLCache(
            maxsize=20000, ttl=_WARNING_TTL, timer=clock
        )
        self._invalid_reported: dict[str, int] = {}
        """Policy name -> the generation whose ``PolicyInvalid`` Event was posted."""
        # one token per 1/qps seconds: deletes evenly spaced, never a burst
        self._delete_limiter = AsyncLimiter(1, 1.0 / settings.kill_switch_delete_qps)
        self._overrides: set[str] = set()
        self._kill_task: asyncio.Task[None] | None = None
        self._sweeping = False
        """Whether a kill-switch sweep is deleting (reconciles then leave deletes to it)."""
        self._status_dirty = asyncio.Event()
        self.queue = WorkQueue(
            self.reconcile, workers=settings.workers, coalesce=settings.coalesce_seconds
        )
        self.on_decision: Callable[[str, Decision], None] | None = None
        """Hook called after every decision (the demo's live table)."""

    # -- watches ---------------------------------------------------------------------------

    def on_namespace(self, event_type: str | None, obj: Mapping[str, Any]) -> None:
        """A Namespace event (``ADDED``/``MODIFIED``/``DELETED``, ``None`` for a listing)."""
        meta = obj.get("metadata") or {}
        name = str(meta.get("name") or "")
        if not name:
            return
        rv = _rv(obj)
        if event_type == "DELETED":
            self.namespaces.pop(name, None)
            self._namespace_rv.pop(name, None)
            self._deleted[name] = rv
            self._forget(name)
            self.mark_policy_status_dirty()
            return
        if rv and rv < max(self._namespace_rv.get(name, 0), self._deleted.get(name, 0)):
            return  # older than what we hold (e.g. a start-up listing racing the watch)
        self._namespace_rv[name] = rv
        self._namespace_uid[name] = str(meta.get("uid") or "")
        if name == KUBE_SYSTEM:
            self._kube_system_uid = str(meta.get("uid") or "")
            self.observe_kill_switch(
                (meta.get("annotations") or {}).get(KILL_SWITCH), consistent=event_type is None
            )
        info = NamespaceInfo(
            name,
            dict(meta.get("labels") or {}),
            terminating=bool(meta.get("deletionTimestamp")),
        )
        if self.namespaces.get(name) != info:
            self.namespaces[name] = info
            self.queue.add(name)
            self.mark_policy_status_dirty()

    def on_quota(self, event_type: str | None, obj: Mapping[str, Any]) -> None:
        """An event of a ResourceQuota named ``dynquota`` (managed or not)."""
        snapshot = QuotaSnapshot.from_object(obj)
        if snapshot.name != MANAGED_QUOTA_NAME or not snapshot.namespace:
            return
        own = event_type == "DELETED" and self._own_deletes.pop(snapshot.namespace, False)
        if event_type == "DELETED" and snapshot.managed and not own and not self._ours(snapshot):
            self._deleted_by_others.add(snapshot.namespace)
        if event_type == "DELETED" or not snapshot.managed:
            self._status_used.pop(snapshot.namespace, None)
        else:
            self._status_used[snapshot.namespace] = _int_map(snapshot.status_used)
        self.queue.add(snapshot.namespace)

    def _ours(self, deleted: QuotaSnapshot) -> bool:
        """Whether a deletion was dynquota's own, by whichever replica made it: the kill
        switch is engaged, the namespace is not managed (opted out, no policy), or it is in
        dry run (its quota released). A replica records only its own deletes, so after a
        leader change it could otherwise report its peer's deletes as someone else's
        (``QuotaRecreated``)."""
        if self.kill_switch or self.settings.dry_run:
            return True
        governance = self.governance(deleted.namespace)
        if governance is not None and governance.kind == "managed" and governance.dry_run:
            return True
        return governance is not None and governance.kind in ("unmanaged", "excluded")

    def on_policy(self, event_type: str | None, obj: Mapping[str, Any]) -> None:
        """A DynamicQuotaPolicy event: re-validate it and re-queue every namespace if its
        spec changed."""
        meta = obj.get("metadata") or {}
        name = str(meta.get("name") or "")
        if not name:
            return
        if event_type == "DELETED":
            if self._policies.pop(name, None) is not None:
                self._policies_changed()
            return
        info = validate_policy(obj)
        generation = int(meta.get("generation") or 0)
        old = self._policies.get(name)
        self._policies[name] = _PolicyRecord(
            info, generation, dict(obj.get("status") or {}), str(meta.get("uid") or "")
        )
        if old is None or old.info != info:
            if not info.valid:
                log.warning("policy %s is invalid: %s", name, info.reason)
            self._policies_changed()
        elif old.status != self._policies[name].status or old.generation != generation:
            self.mark_policy_status_dirty()

    def on_policy_list(self, items: Iterable[Mapping[str, Any]]) -> None:
        """The policies as returned by a consistent LIST: each is applied as
        :meth:`on_policy` does, and the policies count as known from now on, so writes held
        on them proceed (every namespace is queued again)."""
        for obj in items:
            self.on_policy(None, obj)
        if not self.policies_listed:
            self.policies_listed = True
            log.debug("policies listed: %d; writes may proceed", len(self._policies))
            self.queue.add_all(list(self.namespaces))
            self.mark_policy_status_dirty()

    def on_usage_change(self, namespace: str, resource: str) -> None:
        """The informers' callback: sample the peak and queue the namespace."""
        if self.usage is not None:
            now = self.clock()
            used = self._status_used.get(namespace, {}).get(resource, 0)
            value = max(self.usage.usage(namespace, resource, now), used)
            self.peaks.observe(namespace, resource, value, now)
        self.queue.add(namespace)

    @property
    def policies(self) -> list[PolicyInfo]:
        """Every stored policy, valid or not."""
        return [record.info for record in self._policies.values()]

    def _policies_changed(self) -> None:
        # a shorter horizon is held for the longer one's length (never shortened early)
        self.peaks.set_horizon(self._peak_horizon(), self.clock())
        self.queue.add_all(list(self.namespaces))
        self.mark_policy_status_dirty()

    def _peak_horizon(self) -> float:
        from dynquota.policy import DEFAULT_PROFILES

        longest = max(p.downscale_cooldown for p in DEFAULT_PROFILES.values())
        for record in self._policies.values():
            if record.info.spec is not None:
                for profile in record.info.spec.resources.values():
                    longest = max(longest, profile.downscale_cooldown)
        return float(max(longest, 1))

    def _forget(self, namespace: str) -> None:
        self.queue.forget(namespace)
        self.peaks.forget(namespace)
        self._deleted_by_others.discard(namespace)
        self._own_deletes.pop(namespace, None)
        if namespace != KUBE_SYSTEM:
            self._namespace_uid.pop(namespace, None)
        self._status_used.pop(namespace, None)
        self.simulated.pop(namespace, None)
        self.views.pop(namespace, None)
        self._overrides.discard(namespace)
        with contextlib.suppress(KeyError):
            self.metrics.overrides_active.remove(namespace)
        self.metrics.forget_namespace(namespace, TRACKED_RESOURCES)

    # -- kill switch ---------------------------------------------------------------------------

    def observe_kill_switch(self, value: str | None, *, consistent: bool = True) -> None:
        """The ``dynquota.io/kill-switch`` annotation of ``kube-system`` as read now.

        An invalid value keeps the last valid state; with none yet (start-up), the state is
        released if :attr:`managed_quotas_exist` (set at start-up), else unknown (nothing is
        written) — see :func:`dynquota.policy.resolve_kill_switch`.

        ``consistent``: the value comes from a consistent read (a GET or LIST), not from a
        watch event. A release seen in a watch event re-creates nothing until a consistent
        read of ``kube-system`` confirms it; an engage seen in one is confirmed the same way
        by the sweep before it deletes.
        """
        observed_before, self._kill_switch_observed = self._kill_switch_observed, True
        reading = resolve_kill_switch(
            value,
            self.kill_switch,
            managed_quotas_exist=self.managed_quotas_exist if self.kill_switch is None else None,
        )
        for state in ("engaged", "released", "unknown"):
            self.metrics.kill_switch_state.labels(state).set(1 if state == reading.state else 0)
        if reading.warning and reading.warning != self._kill_switch_logged:
            self._kill_switch_logged = reading.warning  # the same value read again: once
            log.warning("%s", reading.warning)
            self._spawn(
                self._warn_once(
                    ObjectRef.namespace_object(KUBE_SYSTEM, self._kube_system_uid),
                    KILL_SWITCH_INVALID,
                    reading.warning,
                    key=KUBE_SYSTEM,
                    logged=True,
                )
            )
        if consistent and reading.engaged is False:
            self._release_confirmed = True
        if reading.engaged is None or reading.engaged == self.kill_switch:
            return
        # the first reading since start-up announces nothing (the change was announced when
        # it happened); leaving the unknown state later is a change like any other
        first = not observed_before
        released_by_switch = self.kill_switch is not False and not reading.engaged
        self.kill_switch = reading.engaged
        if released_by_switch:
            self._deleted_by_others.clear()  # deleted by the switch (maybe by a peer)
        self.metrics.kill_switch.set(1 if reading.engaged else 0)
        if self._kill_task is not None:
            self._kill_task.cancel()
            self._kill_task = None
            self._sweeping = False
        if reading.engaged and not self.gate.is_leader:
            log.warning("kill switch engaged: the leader deletes every managed quota (standby)")
        elif reading.engaged:
            log.warning("kill switch engaged: deleting every managed quota, creating none")
            self._start_sweep(announce=not first)
        elif not first:
            log.warning("kill switch released: re-creating quotas for every managed namespace")
            if not consistent and self.namespace_reader is not None:
                self._release_confirmed = False
            self._spawn(self._release_kill_switch())
        self.queue.add_all(list(self.namespaces))

    async def confirm_kill_switch(self, engaged: bool) -> bool:
        """Whether a consistent read of ``kube-system`` shows the kill switch ``engaged``
        (``True``) or released (``False``), as the in-memory state says.

        Retries the read with backoff (each request has its own timeout) while the in-memory
        state still says ``engaged``; returns ``False`` once it says otherwise. A read that
        disagrees is applied (:meth:`on_namespace`) and ``False`` is returned. Without a
        :attr:`namespace_reader` the watch event is trusted: ``True``.
        """
        if self.namespace_reader is None:
            return True
        backoff = Backoff(initial=1.0, maximum=30.0)
        while self.kill_switch is engaged:
            try:
                obj = await self.namespace_reader.read_namespace(KUBE_SYSTEM)
            except KubeError as exc:
                delay = backoff.next_delay()
                log.warning(
                    "kill switch: reading %s to confirm it failed (%s); retrying in %.1f s",
                    KUBE_SYSTEM,
                    exc,
                    delay,
                )
                await asyncio.sleep(delay)
                continue
            value = ((obj.get("metadata") or {}).get("annotations") or {}).get(KILL_SWITCH)
            if resolve_kill_switch(value, engaged).engaged is engaged:
                return True
            log.warning(
                "kill switch: a watch event said %s but a consistent read of %s does not; "
                "acting on the read",
                "engaged" if engaged else "released",
                KUBE_SYSTEM,
            )
            self.on_namespace(None, obj)
            return False
        return False

    def _start_sweep(self, announce: bool = False) -> None:
        # marked before any reconcile queued with it can run, so they leave deletes to it
        self._sweeping = not self.settings.dry_run
        self._kill_task = self._spawn(self.engage_kill_switch(announce=announce))

    async def engage_kill_switch(self, announce: bool = False) -> int:
        """Delete every managed quota in the cluster (rate-limited); returns how many this
        sweep deleted (quotas already gone, 404, are not counted).

        Called when the switch engages, at start-up and when this replica becomes leader
        while it is engaged. Lists the managed quotas and deletes them, then lists again until
        a list comes back empty (so a quota created meanwhile is not missed); while it runs,
        reconciles leave deletes to it. Each deletion is logged; the summary is one WARNING
        line with exact counts. Stops early if the switch is released or leadership is lost.
        """
        self._sweeping = not self.settings.dry_run
        try:
            return await self._sweep(announce)
        finally:
            self._sweeping = False

    async def _sweep(self, announce: bool) -> int:
        """The body of :meth:`engage_kill_switch`."""
        if not await self.confirm_kill_switch(True):
            return 0
        if announce and self.gate.is_leader:
            await self._emit(
                ObjectRef.namespace_object(KUBE_SYSTEM, self._kube_system_uid),
                "Normal",
                KILL_SWITCH_ENGAGED,
                f"{KILL_SWITCH}=true: deleting every managed quota "
                f"(at most {self.settings.kill_switch_delete_qps:g}/s); none is created",
            )
        if self.settings.dry_run:
            try:
                found = await self.quotas.list_managed()
            except KubeError as exc:
                log.warning("(dry run) kill switch: listing managed quotas failed: %s", exc)
                return 0
            for quota in found:
                log.warning(
                    "(dry run) kill switch: would delete the managed quota of %s", quota.namespace
                )
            log.warning("(dry run) kill switch: would delete %d managed quotas", len(found))
            return 0
        deleted = gone = 0
        complete = False
        try:
            while self.kill_switch and self.gate.is_leader:
                try:
                    found = await self.quotas.list_managed()
                except KubeError as exc:
                    log.warning("kill switch: listing managed quotas failed: %s; retrying", exc)
                    await asyncio.sleep(2)
                    continue
                if not found:
                    complete = True
                    break
                failed = 0
                for quota in found:
                    if not self.kill_switch:
                        break
                    if not self.gate.can_write(WRITE_TIMEOUT):
                        # the Lease could lapse during the delete: wait for a renew (or for
                        # leadership to be lost, which ends the sweep)
                        self.metrics.writes_held.labels(HELD_LEASE).inc()
                        failed += 1
                        break
                    try:
                        if await self._delete_managed(
                            quota.namespace, quota.uid, "kill-switch", "kill switch engaged"
                        ):
                            deleted += 1
                        else:
                            gone += 1
                    except KubeError as exc:
                        failed += 1
                        log.warning(
                            "kill switch: deleting the managed quota of %s failed: %s",
                            quota.namespace,
                            exc,
                        )
                if failed:
                    await asyncio.sleep(1)  # then list again and retry what is left
        finally:
            self._sweeping = False
        if complete:
            log.warning(
                "kill switch: deleted %d managed quotas (%d already gone); none is left",
                deleted,
                gone,
            )
        else:
            log.warning(
                "kill switch: sweep stopped (%s) after deleting %d managed quotas "
                "(%d already gone)",
                "released" if not self.kill_switch else "not leading",
                deleted,
                gone,
            )
        return deleted

    async def _delete_managed(self, namespace: str, uid: str | None, cause: str, why: str) -> bool:
        """Delete the managed quota of ``namespace`` (the object ``uid``) for ``cause``
        (``kill-switch`` or ``unmanaged``): waits for the shared client-side rate limit
        (``KILL_SWITCH_DELETE_QPS``), logs the deletion with ``why`` at WARNING, counts it in
        ``dynquota_quota_deletions_total{cause}``. Returns ``False`` if the quota was already
        gone or replaced. Raises :class:`~dynquota.kube.errors.KubeError`.
        """
        await self._delete_limiter.acquire()
        self._own_deletes[namespace] = True
        try:
            deleted = await self.quotas.delete(namespace, uid)
        except BaseException:
            self._own_deletes.pop(namespace, False)
            raise
        if not deleted:
            log.info("managed quota of %s already gone (%s)", namespace, why)
            return False
        log.warning("deleted the managed quota of %s: %s", namespace, why)
        self.metrics.quota_deletions.labels(cause).inc()
        view = self._record_view(namespace, "delete", (why,))
        view.hard = {}
        for resource in TRACKED_RESOURCES:
            with contextlib.suppress(KeyError):
                self.metrics.hard.remove(namespace, resource)
        return True

    async def _release_kill_switch(self) -> None:
        if not self._release_confirmed:
            if not await self.confirm_kill_switch(False):
                return
            self._release_confirmed = True
            self.queue.add_all(list(self.namespaces))
        if self.gate.is_leader:
            await self._emit(
                ObjectRef.namespace_object(KUBE_SYSTEM, self._kube_system_uid),
                "Normal",
                KILL_SWITCH_RELEASED,
                f"{KILL_SWITCH} released: re-creating quotas for every managed namespace",
            )

    async def on_leadership(self, leading: bool) -> None:
        """Leadership changed: report it; a new leader catches up on everything."""
        self.metrics.leader.set(1 if leading else 0)
        if leading:
            if self.kill_switch:
                self._start_sweep()
            self.queue.add_all(list(self.namespaces))
            self.mark_policy_status_dirty()

    # -- reconcile --------------------------------------------------------------------------------

    def governance(self, namespace: str) -> Governance | None:
        """How ``namespace`` is governed now (``None`` if it is not known)."""
        info = self.namespaces.get(namespace)
        if info is None:
            return None
        return govern(
            info,
            self.policies,
            self.settings.namespace,
            self.settings.excluded(namespace),
        )

    async def reconcile(self, namespace: str) -> Outcome:
        """Decide and apply the managed quota of ``namespace`` (the workqueue's handler).

        Abandoned after :data:`RECONCILE_TIMEOUT` seconds (then retried with backoff)."""
        started = time.monotonic()
        result = "ok"
        try:
            async with asyncio.timeout(RECONCILE_TIMEOUT):
                outcome, result = await self._reconcile(namespace)
            return outcome
        except KubeError as exc:
            result = "retry"
            log.warning("reconcile %s: %s; retrying", namespace, exc)
            return Outcome(retry=True)
        except TimeoutError:
            result = "retry"
            log.warning("reconcile %s took over %.0f s; retrying", namespace, RECONCILE_TIMEOUT)
            return Outcome(retry=True)
        finally:
            self.metrics.reconcile_seconds.observe(time.monotonic() - started)
            self.metrics.reconciles.labels(result).inc()
            self.metrics.queue_depth.set(len(self.queue))

    async def _reconcile(self, namespace: str) -> tuple[Outcome, str]:
        if not self.gate.is_leader:
            return Outcome(), "standby"
        governance = self.governance(namespace)
        if governance is None:
            self._forget(namespace)
            return Outcome(), "ok"
        if governance.kind == "excluded":
            return Outcome(), "ok"
        if governance.warning:
            await self._warn_once(
                ObjectRef.namespace_object(namespace, self._namespace_uid.get(namespace, "")),
                MANAGED_LABEL_IGNORED,
                governance.warning,
                key=namespace,
            )
        dry_run = self.settings.dry_run or governance.dry_run
        for attempt in range(CONFLICT_RETRIES + 1):
            # every attempt reads the quota afresh: the patch is conditional on its
            # resourceVersion, so it never overwrites a change it has not seen
            current = await self.quotas.get(namespace)
            if current is not None and not current.managed:
                await self._report_foreign(current)
                return Outcome(), "ok"
            now = self.clock()
            decision = self._decide(namespace, governance, current, now, dry_run)
            if decision.dry_run:
                simulated = apply_decision(
                    self._quota_for_decision(namespace, current, dry_run), decision
                )
                written = current
                if current is not None and governance.kind in ("managed", "unmanaged"):
                    # dry run enforces nothing: the managed quota is released (deleted)
                    applied = await self._release(namespace, governance, simulated, current)
                    if applied.conflict:
                        gave_up = attempt == CONFLICT_RETRIES
                        self.metrics.write_conflicts.labels(
                            "gave-up" if gave_up else "retried"
                        ).inc()
                        continue
                    if applied.outcome is not None:
                        return applied.outcome, applied.result
                    written = None
                self.simulated[namespace] = simulated
                result = "dry-run"
                break
            if decision.action == "delete" and self.kill_switch and self._sweeping:
                return Outcome(), "ok"  # the kill-switch sweep deletes it (and logs it)
            applied = await self._apply(namespace, governance, decision, current)
            if applied.conflict:
                gave_up = attempt == CONFLICT_RETRIES
                self.metrics.write_conflicts.labels("gave-up" if gave_up else "retried").inc()
                continue
            if applied.outcome is not None:
                return applied.outcome, applied.result
            written, result = applied.quota, "ok"
            break
        else:
            log.warning(
                "reconcile %s: the managed quota changed under %d writes in a row (409 "
                "Conflict); retrying with backoff",
                namespace,
                CONFLICT_RETRIES + 1,
            )
            return Outcome(retry=True), "retry"
        await self._report_decision(namespace, governance, decision, written, dry_run)
        return Outcome(requeue_at=self._next_look(namespace, governance, decision, now)), result

    def _decide(
        self,
        namespace: str,
        governance: Governance,
        current: QuotaSnapshot | None,
        now: float,
        dry_run: bool,
    ) -> Decision:
        """Usage, peaks and :func:`~dynquota.policy.decide` for ``current`` (reports usage)."""
        status_used = _int_map(current.status_used) if current is not None else {}
        if current is not None:
            self._status_used[namespace] = status_used
        tally: dict[str, int] = {}
        usage: dict[str, int] = {}
        peak: dict[str, int] = {}
        for resource in TRACKED_RESOURCES:
            counted = self.usage.usage(namespace, resource, now) if self.usage else 0
            tally[resource] = counted
            usage[resource] = max(counted, status_used.get(resource, 0))
            self.peaks.observe(namespace, resource, usage[resource], now)
            profile = governance.profiles.get(resource)
            if profile is not None:
                found = self.peaks.peak(namespace, resource, now, profile.downscale_cooldown)
                peak[resource] = usage[resource] if found is None else found
        decision = decide(
            governance=governance,
            usage=usage,
            peak=peak,
            quota=self._quota_for_decision(namespace, current, dry_run),
            kill_switch=self.kill_switch,
            now=now,
            started_at=self.started_at,
            dry_run=self.settings.dry_run,
            override_ttl=self.settings.override_ttl,
            previously_managed=namespace in self._deleted_by_others,
            namespace=namespace,
            help_url=self.settings.tenant_help_url,
        )
        self._report_usage(namespace, governance, tally, status_used, usage, current)
        return decision

    def _quota_for_decision(
        self, namespace: str, current: QuotaSnapshot | None, dry_run: bool
    ) -> QuotaState | None:
        real = _quota_state(current) if current is not None else None
        if not dry_run:
            self.simulated.pop(namespace, None)
            return real
        if namespace not in self.simulated:
            self.simulated[namespace] = real
        simulated = self.simulated[namespace]
        if simulated is None:
            return None
        # the tenant's request lives on the real quota
        annotations = dict(simulated.annotations)
        request = current.annotations.get(OVERRIDE) if current is not None else None
        if request is None:
            annotations.pop(OVERRIDE, None)
        else:
            annotations[OVERRIDE] = request
        return QuotaState(simulated.hard, annotations)

    def hold_reason(self, decision: Decision) -> str | None:
        """Why writing ``decision`` must wait (one of :data:`HOLD_REASONS`), or ``None``.

        Every write needs the policies listed, the kill switch read (a release seen in a
        watch event confirmed by a consistent read before anything is created), the
        informers synced and the Lease valid for :data:`WRITE_TIMEOUT` seconds; a write that
        shrinks also needs the informers healthy now. A kill-switch delete needs only the
        Lease (the switch itself was read: it must work in the incident it exists for).
        """
        if decision.action == "delete" and self.kill_switch:
            return None if self.gate.can_write(WRITE_TIMEOUT) else HELD_LEASE
        if not self.policies_listed:
            return HELD_POLICIES
        if self.kill_switch is None:
            return HELD_KILL_SWITCH
        if decision.action == "create" and not self._release_confirmed:
            return HELD_RELEASE
        if self.usage is None or not self.usage.synced:
            return HELD_INFORMERS
        margin = float(self.settings.liveness_margin_seconds)
        if decision.shrinks and not self.usage.healthy(margin=margin):
            return HELD_STALE
        if not self.gate.can_write(WRITE_TIMEOUT):
            return HELD_LEASE
        return None

    def _hold(self, namespace: str, decision: Decision, why: str) -> Applied:
        """Count and log (at most once a minute per reason) a held write."""
        self.metrics.writes_held.labels(why).inc()
        now = time.monotonic()
        if now - self._held_logged.get(why, -math.inf) >= 60.0:
            self._held_logged[why] = now
            log.warning(
                "holding the %s of the managed quota of %s (and others for the same reason "
                "within a minute): %s; retrying",
                decision.action,
                namespace,
                why,
            )
        return Applied(outcome=Outcome(retry=True), result="held")

    async def _apply(
        self,
        namespace: str,
        governance: Governance,
        decision: Decision,
        current: QuotaSnapshot | None,
    ) -> Applied:
        """Write ``decision`` (conditionally on what was read: the patch carries
        ``current``'s resourceVersion, a delete its uid), or hold it (:meth:`hold_reason`)."""
        if decision.action == "nothing":
            return Applied(current)
        if not self.gate.is_leader:
            return Applied(outcome=Outcome(), result="standby")
        if decision.action in ("create", "patch") and self.kill_switch is not False:
            # the switch moved since the decision: decide again
            return Applied(outcome=Outcome(requeue_at=self.clock()), result="retry")
        why = self.hold_reason(decision)
        if why is not None:
            return self._hold(namespace, decision, why)
        try:
            if decision.action == "create":
                created = await self.quotas.create(
                    namespace,
                    {k: str(v) for k, v in decision.hard.items()},
                    dict(decision.set_annotations),
                )
                self._deleted_by_others.discard(namespace)
                if self.kill_switch is not False:
                    # engaged while the create was in flight: a sweep that listed before it
                    # landed missed it, so decide again (the decision is then a delete)
                    self.queue.add_now(namespace)
                return Applied(created)
            if decision.action == "patch":
                assert current is not None
                patched = await self.quotas.patch(
                    namespace, decision.merge_patch(), resource_version=current.resource_version
                )
                return Applied(patched)
            if decision.action == "delete":
                return await self._apply_delete(namespace, governance, current)
        except ConflictError:
            return Applied(conflict=True)  # created or changed meanwhile: read it again
        except NotFoundError:
            # the quota or the namespace is gone (a namespace deletion the watch missed):
            # back off rather than spin; a DELETED event or the resync ends it
            return Applied(outcome=Outcome(retry=True), result="retry")
        except ApiError as exc:
            if exc.retryable or _namespace_terminating(exc):
                return Applied(outcome=Outcome(retry=True), result="retry")
            log.error("%s of quota in %s refused: %s", decision.action, namespace, exc)
            await self._warn_once(
                ObjectRef.quota(namespace, MANAGED_QUOTA_NAME, current.uid if current else ""),
                QUOTA_WRITE_FAILED,
                f"{decision.action} of the managed quota refused by the apiserver "
                f"({exc.status} {exc.reason}): {exc.message}",
                key=namespace,
                logged=True,
            )
            return Applied(outcome=Outcome(), result="invalid")
        raise AssertionError(f"unknown action {decision.action!r}")

    async def _release(
        self,
        namespace: str,
        governance: Governance,
        simulated: QuotaState | None,
        current: QuotaSnapshot,
    ) -> Applied:
        """Release the managed quota of a namespace in dry run: delete it (uid precondition,
        the shared delete rate limit, the same hold rules as any delete), count it in
        ``dynquota_quota_deletions_total{cause="dry-run"}`` and post a ``QuotaReleased``
        Event saying who is in dry run and what dynquota would set (``simulated``)."""
        if self.settings.dry_run:
            who = "the operator is in dry run (operator.dryRun)"
        else:
            who = f"policy {governance.policy} is in dry run (spec.dryRun)"
        hard = {
            r: v.ceil() if not isinstance(v, int) else v
            for r, v in (simulated.hard.items() if simulated is not None else ())
            if r in TRACKED_RESOURCES
        }
        would = (
            "it would set " + ", ".join(f"{r}={v}" for r, v in sorted(hard.items()))
            if hard and governance.kind == "managed"
            else f"it would manage no quota here ({governance.reason})"
        )
        why = f"{who}: dynquota enforces nothing in this namespace"
        release = Decision("delete", notes=(why,))
        if not self.gate.is_leader:
            return Applied(outcome=Outcome(), result="standby")
        held = self.hold_reason(release)
        if held is not None:
            return self._hold(namespace, release, held)
        try:
            deleted = await self._delete_managed(namespace, current.uid, "dry-run", why)
        except ConflictError:
            return Applied(conflict=True)
        except NotFoundError:
            return Applied(outcome=Outcome(retry=True), result="retry")
        except ApiError as exc:
            if exc.retryable or _namespace_terminating(exc):
                return Applied(outcome=Outcome(retry=True), result="retry")
            log.error("release of the quota in %s refused: %s", namespace, exc)
            await self._warn_once(
                ObjectRef.quota(namespace, MANAGED_QUOTA_NAME, current.uid),
                QUOTA_WRITE_FAILED,
                f"release (delete) of the managed quota refused by the apiserver "
                f"({exc.status} {exc.reason}): {exc.message}",
                key=namespace,
                logged=True,
            )
            return Applied(outcome=Outcome(), result="invalid")
        if not deleted:
            return Applied(outcome=Outcome(requeue_at=self.clock()), result="retry")
        await self._emit(
            ObjectRef.quota(namespace, MANAGED_QUOTA_NAME, current.uid),
            "Normal",
            QUOTA_RELEASED,
            f"{why}: the managed ResourceQuota {MANAGED_QUOTA_NAME} was released (deleted); "
            f"{would}. Leaving dry run creates it again from current usage",
        )
        return Applied(None)

    async def _apply_delete(
        self, namespace: str, governance: Governance, current: QuotaSnapshot | None
    ) -> Applied:
        uid = current.uid if current else None
        if self.kill_switch:
            if not await self._delete_managed(namespace, uid, "kill-switch", "kill switch engaged"):
                return Applied(outcome=Outcome(requeue_at=self.clock()), result="retry")
            return Applied(None)
        why = governance.reason
        if not await self._delete_managed(namespace, uid, "unmanaged", why):
            # gone or replaced meanwhile: decide again
            return Applied(outcome=Outcome(requeue_at=self.clock()), result="retry")
        await self._warn(
            ObjectRef.namespace_object(namespace, self._namespace_uid.get(namespace, "")),
            QUOTA_REMOVED,
            f"the managed ResourceQuota {MANAGED_QUOTA_NAME} was deleted: {why}",
            logged=True,
        )
        return Applied(None)

    def _next_look(
        self, namespace: str, governance: Governance, decision: Decision, now: float
    ) -> float | None:
        candidates: list[float] = []
        if decision.requeue_at is not None:
            candidates.append(decision.requeue_at)
        if governance.kind == "managed":
            if self.usage is not None:
                expiry = self.usage.next_expiry(namespace, now)
                if expiry is not None:
                    candidates.append(math.floor(expiry) + 1.0)
            for resource, profile in governance.profiles.items():
                drop = self.peaks.peak_expiry(namespace, resource, now, profile.downscale_cooldown)
                if drop is not None:
                    candidates.append(drop)
        future = [c for c in candidates if c > now]
        return min(future) if future else (now + 1.0 if candidates else None)

    # -- reporting -------------------------------------------------------------------------------

    def _report_usage(
        self,
        namespace: str,
        governance: Governance,
        tally: Mapping[str, int],
        status_used: Mapping[str, int],
        usage: Mapping[str, int],
        current: QuotaSnapshot | None,
    ) -> None:
        m = self.metrics
        if governance.kind != "managed":
            m.forget_namespace(namespace, TRACKED_RESOURCES)
        view = self.views.setdefault(namespace, NamespaceView())
        view.usage = dict(usage)
        view.tally = dict(tally)
        view.status_used = dict(status_used)
        view.target = {r: target(usage[r], p) for r, p in governance.profiles.items() if r in usage}
        for resource in TRACKED_RESOURCES:
            profile = governance.profiles.get(resource)
            if governance.kind != "managed" or profile is None:
                continue
            m.usage.labels(namespace, resource).set(usage[resource])
            m.tally.labels(namespace, resource).set(tally[resource])
            m.target.labels(namespace, resource).set(target(usage[resource], profile))
            m.maximum.labels(namespace, resource).set(profile.maximum)
            m.above_maximum.labels(namespace, resource).set(
                1 if usage[resource] > profile.maximum else 0
            )
            if resource in status_used:
                m.drift.labels(namespace, resource).set(tally[resource] - status_used[resource])
            hard = current.hard_int(resource) if current is not None else None
            if hard is not None:
                m.hard.labels(namespace, resource).set(hard)

    async def _report_decision(
        self,
        namespace: str,
        governance: Governance,
        decision: Decision,
        quota: QuotaSnapshot | None,
        dry_run: bool,
    ) -> None:
        if decision.action == "delete" and not decision.dry_run:
            pass  # logged by _delete_managed
        elif decision.action != "nothing" or decision.changes:
            prefix = "(dry run) " if decision.dry_run else ""
            lines = decision.reasons or decision.notes
            log.info("%s%s %s: %s", prefix, decision.action, namespace, "; ".join(lines) or "state")
        else:
            for note in decision.notes:
                log.debug("%s: %s", namespace, note)
        if not decision.dry_run:
            for change in decision.changes:
                if change.old is None or change.new is None:
                    continue
                with contextlib.suppress(QuantityError):
                    old = parse_quantity(change.old).ceil()
                    new = parse_quantity(change.new).ceil()
                    direction = "up" if new > old else "down"
                    self.metrics.resizes.labels(direction, change.kind).inc()
            if quota is not None and governance.kind == "managed":
                for resource in TRACKED_RESOURCES:
                    hard = quota.hard_int(resource)
                    if hard is not None:
                        self.metrics.hard.labels(namespace, resource).set(hard)
            if decision.action == "delete":
                for resource in TRACKED_RESOURCES:
                    with contextlib.suppress(KeyError):
                        self.metrics.hard.remove(namespace, resource)
        elif decision.hard:
            for resource, value in decision.hard.items():
                self.metrics.hard.labels(namespace, resource).set(value)
        active = quota is not None and "dynquota.io/override-granted-at" in quota.annotations
        if decision.dry_run:
            simulated = self.simulated.get(namespace)
            active = simulated is not None and (
                "dynquota.io/override-granted-at" in simulated.annotations
            )
        if active:
            self._overrides.add(namespace)
            self.metrics.overrides_active.labels(namespace).set(1)
        else:
            self._overrides.discard(namespace)
            with contextlib.suppress(KeyError):
                self.metrics.overrides_active.remove(namespace)
        ref = ObjectRef.quota(namespace, MANAGED_QUOTA_NAME, quota.uid if quota else "")
        for event in decision.events:
            if event.type != "Warning":
                await self._emit(ref, event.type, event.reason, event.message)
            elif event.reason in RECURRING_REASONS:
                await self._warn_once(
                    ref, event.reason, event.message, key=namespace, cause=event.cause
                )
            else:
                await self._warn(ref, event.reason, event.message)
        view = self._record_view(namespace, decision.action, decision.reasons or decision.notes)
        view.dry_run = decision.dry_run
        view.governance = f"{governance.kind}: {governance.reason}"
        if decision.dry_run:
            simulated = self.simulated.get(namespace)
            view.hard = {
                r: v.ceil() if not isinstance(v, int) else v
                for r, v in (simulated.hard.items() if simulated else ())
                if r in TRACKED_RESOURCES
            }
        elif quota is not None:
            view.hard = {r: v for r in TRACKED_RESOURCES if (v := quota.hard_int(r)) is not None}
        else:
            view.hard = {}
        if self.on_decision is not None:
            self.on_decision(namespace, decision)

    def _record_view(self, namespace: str, action: str, reasons: Iterable[str]) -> NamespaceView:
        view = self.views.setdefault(namespace, NamespaceView())
        if action != "nothing" or not view.action:
            view.action = action
            view.reasons = tuple(reasons)
            view.at = self.clock()
        return view

    async def _report_foreign(self, quota: QuotaSnapshot) -> None:
        ref = ObjectRef.quota(quota.namespace, quota.name, quota.uid)
        await self._warn_once(
            ref,
            FOREIGN_QUOTA,
            f"a ResourceQuota named {MANAGED_QUOTA_NAME} without the label "
            "app.kubernetes.io/managed-by=dynquota exists: dynquota leaves it alone and does not "
            "manage this namespace",
            key=quota.namespace,
        )
        request = quota.annotations.get(OVERRIDE)
        if request is not None:
            event = reject_unmanaged_override(quota.name, request)
            await self._warn_once(ref, event.reason, event.message, key=quota.namespace)

    async def _emit(self, ref: ObjectRef, type_: EventType, reason: str, message: str) -> None:
        if not self.gate.is_leader:
            return
        if await self.events.emit(ref, type_, reason, message):
            self.metrics.events.labels(reason).inc()

    async def _warn(
        self, ref: ObjectRef, reason: str, message: str, *, logged: bool = False
    ) -> None:
        """Log a Warning at WARNING (unless the caller ``logged`` it already) and post it as
        an Event (leader only)."""
        if not self.gate.is_leader:
            return
        if not logged:
            where = f"{ref.namespace}/{ref.name}" if ref.namespace else ref.name
            log.warning("%s on %s %s: %s", reason, ref.kind, where, message)
        await self._emit(ref, "Warning", reason, message)

    async def _warn_once(
        self,
        ref: ObjectRef,
        reason: str,
        message: str,
        key: str,
        *,
        cause: str = "",
        logged: bool = False,
    ) -> None:
        """:meth:`_warn`, unless a Warning with this ``reason`` about this ``cause`` was
        posted for ``key`` within the last hour (Warnings that recur while their cause lasts).

        Keyed on ``(key, reason, cause)``, never on ``message``: a message changes with usage
        and with what a tenant writes, and a tenant-chosen key would let the cache grow.
        """
        if not self.gate.is_leader:
            return
        cache_key = (key, reason, cause)
        if cache_key in self._warned:
            return
        self._warned[cache_key] = True
        await self._warn(ref, reason, message, logged=logged)

    # -- policy status ---------------------------------------------------------------------------

    def mark_policy_status_dirty(self) -> None:
        """Ask :meth:`run_policy_status` to recompute the policies' status."""
        self._status_dirty.set()

    async def run_policy_status(self, debounce: float = 1.0) -> None:
        """Keep each policy's status (``Valid`` condition, namespaces governed) current;
        runs until cancelled. Writes only what differs, only while leading."""
        while True:
            await self._status_dirty.wait()
            await asyncio.sleep(debounce)
            self._status_dirty.clear()
            try:
                await self.write_policy_status()
            except KubeError as exc:
                log.warning("policy status: %s; retrying", exc)
                await asyncio.sleep(2)
                self._status_dirty.set()

    def policy_tallies(self) -> tuple[dict[str, PolicyTally], int, int]:
        """``({policy: PolicyTally}, managed, frozen)`` over the known namespaces (counts)."""
        tallies = {name: PolicyTally() for name in self._policies}
        managed = frozen = 0
        for name in self.namespaces:
            governance = self.governance(name)
            if governance is None or governance.policy is None:
                continue
            if governance.kind == "frozen":
                frozen += 1
                tallies.setdefault(governance.policy, PolicyTally()).frozen += 1
                continue
            if governance.kind != "managed":
                continue
            managed += 1
            tallies.setdefault(governance.policy, PolicyTally()).governed += 1
            labels = self.namespaces[name].labels
            for policy_name, record in self._policies.items():
                spec = record.info.spec
                if spec is None or not spec.namespace_selector.matches(labels):
                    continue
                tally = tallies[policy_name]
                tally.matched += 1
                if policy_name != governance.policy:
                    tally.shadowed += 1
                    tally.winners[governance.policy] = tally.winners.get(governance.policy, 0) + 1
        return tallies, managed, frozen

    def _shadowed_condition(self, name: str, tally: PolicyTally) -> tuple[str, str, str]:
        """``(status, reason, message)`` of the ``Shadowed`` condition of valid ``name``."""
        if not tally.shadowed:
            return (
                "False",
                "NotShadowed",
                (f"governs every managed namespace it matches ({tally.governed})"),
            )
        own = self._policies[name].info.priority or 0
        ranked = sorted(tally.winners.items(), key=lambda item: (-item[1], item[0]))
        parts = []
        for winner, count in ranked[:3]:
            theirs = self._policies[winner].info.priority if winner in self._policies else None
            why = (
                f"equal priority {own}, name {winner} sorts first"
                if theirs == own
                else f"priority {theirs} > {own}"
            )
            parts.append(f"{winner} in {count} ({why})")
        if len(ranked) > 3:
            parts.append(f"{len(ranked) - 3} more policies")
        top = ranked[0][0]
        top_priority = self._policies[top].info.priority if top in self._policies else None
        reason = "NameTieBreak" if top_priority == own else "LowerPriority"
        message = (
            f"matches {tally.matched} managed namespaces but governs {tally.governed}: "
            f"outranked by policy {'; '.join(parts)}"
        )
        return "True", reason, message

    async def _report_invalid_policy(
        self, name: str, record: _PolicyRecord, frozen: int, old_valid: Mapping[str, Any]
    ) -> None:
        """Post ``PolicyInvalid`` once per generation of an invalid policy (also not again
        when its stored status already reports this generation invalid)."""
        if self._invalid_reported.get(name) == record.generation:
            return
        already = (
            old_valid.get("status") == "False"
            and old_valid.get("observedGeneration") == record.generation
        )
        self._invalid_reported[name] = record.generation
        if already:
            return
        await self._warn(
            ObjectRef(POLICY_API_VERSION, POLICY_KIND, name, "", record.uid),
            POLICY_INVALID,
            f"{record.info.reason}; it freezes {frozen} namespaces (their managed quota is "
            "left as it is) until it is fixed",
        )

    async def write_policy_status(self) -> int:
        """Patch the status of every policy whose status differs; returns how many.

        Status: ``observedGeneration``, ``namespaces`` (governed), ``frozenNamespaces``
        (frozen by this policy being invalid), conditions ``Valid`` and, for a valid policy,
        ``Shadowed`` (it matches managed namespaces another policy governs). An invalid
        policy also gets a ``PolicyInvalid`` Warning Event, once per generation.
        """
        tallies, managed, frozen = self.policy_tallies()
        self.metrics.managed.set(managed)
        self.metrics.frozen.set(frozen)
        if not self.gate.is_leader:
            return 0
        for name in list(self._invalid_reported):
            if name not in self._policies or self._policies[name].info.valid:
                del self._invalid_reported[name]
        written = 0
        for name, record in list(self._policies.items()):
            info = record.info
            tally = tallies.get(name, PolicyTally())
            old = record.status
            old_conditions = {c.get("type"): c for c in old.get("conditions") or []}
            if not info.valid:
                await self._report_invalid_policy(
                    name, record, tally.frozen, old_conditions.get("Valid") or {}
                )
            wanted: list[tuple[str, str, str, str]] = [
                (
                    "Valid",
                    *(
                        ("True", "Valid", "the policy passed validation")
                        if info.valid
                        else (
                            "False",
                            "InvalidSpec",
                            f"{info.reason}; the namespaces it may govern are frozen",
                        )
                    ),
                )
            ]
            if info.valid:
                wanted.append(("Shadowed", *self._shadowed_condition(name, tally)))
            conditions = []
            same = True
            for type_, status_, reason, message in wanted:
                previous = old_conditions.get(type_) or {}
                same = same and (
                    previous.get("status") == status_
                    and previous.get("reason") == reason
                    and previous.get("message") == message[:32000]
                    and previous.get("observedGeneration") == record.generation
                )
                transition = (
                    previous.get("lastTransitionTime")
                    if previous.get("status") == status_ and previous.get("lastTransitionTime")
                    else _now_rfc3339()
                )
                conditions.append(
                    {
                        "type": type_,
                        "status": status_,
                        "reason": reason,
                        "message": message[:32000],
                        "observedGeneration": record.generation,
                        "lastTransitionTime": transition,
                    }
                )
            known = {c["type"] for c in conditions} | {"Shadowed"}
            kept = [c for t, c in old_conditions.items() if t not in known]
            status: dict[str, Any] = {
                "observedGeneration": record.generation,
                "namespaces": tally.governed,
                "frozenNamespaces": tally.frozen,
                "conditions": kept + conditions,
            }
            if (
                same
                and len(old.get("conditions") or []) == len(kept) + len(conditions)
                and old.get("namespaces") == tally.governed
                and old.get("frozenNamespaces") == tally.frozen
                and old.get("observedGeneration") == record.generation
            ):
                continue
            await self.policy_status.patch_policy_status(name, status)
            record.status = status
            written += 1
        return written

    # -- helpers ---------------------------------------------------------------------------------

    def _spawn(self, coro: Awaitable[Any]) -> asyncio.Task[Any]:
        task: asyncio.Task[Any] = asyncio.ensure_future(coro)
        self._background_tasks.add(task)
        task.add_done_callback(self._background_tasks.discard)
        return task

    async def stop_background(self) -> None:
        """Cancel the kill-switch and event tasks this object started."""
        tasks = list(self._background_tasks)
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
