"""What the watches told the operator: the first layer of
:class:`~dynquota.operator.reconcile.Operator`.

:class:`OperatorCache` holds the namespaces, the policies, the managed quotas' ``status.used``,
the peak windows and the workqueue, and the per-replica bookkeeping the layers above share
(own deletions, quotas deleted by others, warn-once cache). Its ``on_*`` methods are fed by
the kopf handlers and the informers; each queues the namespaces whose decision may change.
The layers above (``reporting`` < ``policy_status`` < ``killswitch`` < ``apply`` <
``reconcile``) add one concern each.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from aiolimiter import AsyncLimiter
from cachetools import LRUCache, TTLCache

from dynquota._k8s.workqueue import Outcome, WorkQueue
from dynquota.kube.quotas import MANAGED_QUOTA_NAME, QuotaSnapshot
from dynquota.metrics import Metrics
from dynquota.names import MANAGED_LIMIT_RANGE_NAME
from dynquota.operator.brake import CONFIRM, UnmanageBrake
from dynquota.operator.budgets import Budgets
from dynquota.operator.daemons import NodeGrowth
from dynquota.operator.decision import Lineage, governance_of
from dynquota.operator.ports import (
    KUBE_SYSTEM,
    WARNING_TTL,
    AlwaysLeading,
    BudgetStatusSink,
    EventSink,
    LeaderView,
    LimitRangeReader,
    NamespaceReader,
    NamespaceView,
    PolicyRecord,
    PolicyStatusSink,
    QuotaStore,
    UsageView,
    resource_version_of,
)
from dynquota.operator.stall import StallWatch
from dynquota.operator.wake import Waker
from dynquota.policy import (
    KILL_SWITCH,
    TRACKED_RESOURCES,
    ContainerDefaults,
    Decision,
    Governance,
    NamespaceInfo,
    PolicyInfo,
    QuotaState,
    format_time,
    observed_usage,
    validate_policy,
)
from dynquota.policy.state import BUDGET, parse_time
from dynquota.settings import Settings
from dynquota.usage import PeakWindows

__all__ = ["OperatorCache"]

log = logging.getLogger("dynquota.operator")

WATCHED_QUOTAS = 256  # managed quotas kept as the watch delivered them (about 3 KB each)


class OperatorCache(abc.ABC):
    """The operator's cached state and watch handlers (see the module docs).

    Args:
        settings: the operator settings.
        quotas, events, policy_status: the I/O ports (see :mod:`dynquota.operator.ports`).
        metrics: where to report (a fresh :class:`~dynquota.metrics.Metrics` if omitted).
        gate: leadership (always leading if omitted).
        clock: the cluster's time, seconds since the epoch, against which persisted stamps are
            judged (the runtime passes a :class:`~dynquota._k8s.clock.ServerClock`: a local
            wall-clock step does not move it).
        monotonic: seconds on a clock that never steps, for in-memory windows (the peak
            windows); default ``clock`` (unit tests move one fake clock).

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
        monotonic: Callable[[], float] | None = None,
        namespace_reader: NamespaceReader | None = None,
        limit_ranges: LimitRangeReader | None = None,
        budget_status: BudgetStatusSink | None = None,
    ) -> None:
        self.settings = settings
        self.quotas = quotas
        self.events = events
        self.policy_status = policy_status
        self.namespace_reader = namespace_reader
        """Consistent reads of ``kube-system`` confirming a kill-switch change seen in a
        watch event before it deletes or re-creates quotas (``None``: the event is trusted;
        unit tests only)."""
        self.limit_ranges = limit_ranges
        self.budget_status = budget_status  # QuotaBudget status writes (None: unit tests)
        """LimitRange defaults per namespace, read before a compute key (the compute trap) is
        added to a quota, and the companion LimitRange's writes (``None``: no defaults known,
        such keys are held)."""
        self._companions: TTLCache[str, ContainerDefaults] = TTLCache(maxsize=100_000, ttl=600)
        """Per namespace, the companion LimitRange defaults last written or seen in place
        (re-checked with a LIST after 10 minutes, or at once when the policy changes them)."""
        self.metrics = metrics if metrics is not None else Metrics()
        self.gate: LeaderView = gate if gate is not None else AlwaysLeading()
        self.clock = clock
        self.monotonic = monotonic if monotonic is not None else clock
        self.usage: UsageView | None = None
        self.waker: Waker | None = None
        """Wakes the controllers a raise made room for (the runtime sets it)."""
        self.node_growth: NodeGrowth | None = None  # DaemonSets' new nodes (operator.daemons)
        self.stall = StallWatch(settings.quota_sync_period, self.metrics, self._on_stall)
        self.started_at = clock()
        self.namespaces: dict[str, NamespaceInfo] = {}
        self.lineage = Lineage()  # fed by on_namespace and the informer's sync
        self._namespace_rv: dict[str, int] = {}
        self._deleted: TTLCache[str, int] = TTLCache(maxsize=100_000, ttl=3600)
        self._policies: dict[str, PolicyRecord] = {}
        self.policies_listed = False
        """Whether the policy informer applied a full (consistent) list since start
        (:meth:`on_policies_synced`); until then every managed-quota write is held."""
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
        # the managed quotas the watch delivered last, for the namespaces active most recently:
        # a quiet namespace's first event decides from it instead of a GET (bounded: a GET
        # waits behind the create that caused the event, p50 13 ms, p99 58 ms on 2 cores)
        self._watched: LRUCache[str, QuotaSnapshot] = LRUCache(maxsize=WATCHED_QUOTAS)
        self._metric_keys: dict[str, set[str]] = {}
        """Per namespace, the quota keys it has per-key metric series for."""
        self._uncounted: dict[str, dict[str, float]] = {}  # ns -> status-driven key -> since
        self._excess_since: dict[str, dict[str, float]] = {}  # ns -> key -> status.used > tally
        self.simulated: dict[str, QuotaState | None] = {}
        self.views: dict[str, NamespaceView] = {}
        self._background_tasks: set[asyncio.Task[Any]] = set()
        self.peaks = PeakWindows(self._peak_horizon())
        # keyed by (namespace or object, reason, cause): never by message, which carries usage
        # and tenant text
        self._warned: TTLCache[tuple[str, str, str], tuple[str, float]] = TTLCache(
            maxsize=20000, ttl=WARNING_TTL, timer=clock
        )
        self._invalid_reported: dict[str, int] = {}
        """Policy name -> the generation whose ``PolicyInvalid`` Event was posted."""
        # one token per 1/qps seconds: deletes evenly spaced, never a burst
        self._delete_limiter = AsyncLimiter(1, 1.0 / settings.kill_switch_delete_qps)
        self._overrides: set[str] = set()
        self.brake = UnmanageBrake(
            settings.unmanage_brake_share, settings.unmanage_brake_window_seconds
        )
        """The brake on mass un-management (:mod:`dynquota.operator.brake`)."""
        self.unmanage_confirmed_at: float | None = None  # kube-system's CONFIRM time, if valid
        self._kill_task: asyncio.Task[None] | None = None
        self._sweeping = False  # a kill-switch sweep deletes: reconciles leave deletes to it
        self._status_dirty = asyncio.Event()
        self.queue = WorkQueue(
            self.reconcile,
            workers=settings.workers,
            coalesce=settings.coalesce_seconds,
            clock=clock,  # requeue instants are the cluster's time (Outcome.requeue_at)
        )
        self.budgets = Budgets(self)
        """The QuotaBudgets and their members' demands (issue #13)."""
        self.on_decision: Callable[[str, Decision], None] | None = None  # the demo's table

    # -- hooks of the layers above ------------------------------------------------------------

    @abc.abstractmethod
    async def reconcile(self, namespace: str) -> Outcome:
        """Decide and apply the managed quota of ``namespace`` (the workqueue's handler;
        :class:`~dynquota.operator.reconcile.Operator`)."""

    @abc.abstractmethod
    def observe_kill_switch(self, value: str | None, *, consistent: bool = True) -> None:
        """The kill-switch annotation of ``kube-system`` as read now
        (:class:`~dynquota.operator.killswitch.KillSwitch`)."""

    # -- watches ---------------------------------------------------------------------------

    def on_namespace(self, event_type: str | None, obj: Mapping[str, Any]) -> None:
        """A Namespace event (``ADDED``/``MODIFIED``/``DELETED``, ``None`` for a listing)."""
        meta = obj.get("metadata") or {}
        name = str(meta.get("name") or "")
        if not name:
            return
        rv = resource_version_of(obj)
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
        self.lineage.seen(name, listing=event_type is None)
        if name == KUBE_SYSTEM:
            self._kube_system_uid = str(meta.get("uid") or "")
            self._observe_confirmation((meta.get("annotations") or {}).get(CONFIRM))
            self.observe_kill_switch(
                (meta.get("annotations") or {}).get(KILL_SWITCH), consistent=event_type is None
            )
        info = NamespaceInfo.of(meta)
        before = self.namespaces.get(name)
        if before != info:
            self.namespaces[name] = info
            self.queue.add(name)
            self.mark_policy_status_dirty()
            # the budgets its dynquota.io/budget label names now and named before look again
            # (a namespace without a policy never reaches shape)
            self.budgets.wake_labelled(before.labels if before else None, info.labels)

    def _observe_confirmation(self, value: str | None) -> None:
        """``kube-system``'s :data:`CONFIRM` annotation: a valid time releases the holds begun
        at or before it (every namespace is decided again); anything else confirms nothing."""
        try:
            confirmed: float | None = float(parse_time(value)) if value else None
        except ValueError:
            confirmed = None
        if confirmed != self.unmanage_confirmed_at:
            self.unmanage_confirmed_at = confirmed
            if confirmed is not None:
                self.queue.add_all(list(self.brake.held))
                since = self.brake.held_since
                if since is not None and confirmed < math.floor(since):
                    log.warning(
                        "%s=%s confirms nothing: the hold began at %s (use a time not before it)",
                        CONFIRM, value, format_time(since),
                    )  # fmt: skip

    def on_quota(self, event_type: str | None, obj: Mapping[str, Any]) -> None:
        """An event of a ResourceQuota named ``dynquota`` (managed or not)."""
        snapshot = QuotaSnapshot.from_object(obj)
        if snapshot.name != MANAGED_QUOTA_NAME or not snapshot.namespace:
            return
        before = self._watched.get(snapshot.namespace)
        own = event_type == "DELETED" and self._own_deletes.pop(snapshot.namespace, False)
        if event_type == "DELETED" and snapshot.managed and not own and not self._ours(snapshot):
            self._deleted_by_others.add(snapshot.namespace)
        gone = event_type == "DELETED" or not snapshot.managed
        self.stall.observe_quota(snapshot.namespace, None if gone else snapshot, self.clock())
        if gone:
            self._status_used.pop(snapshot.namespace, None)
            self._watched.pop(snapshot.namespace, None)
        else:
            self._status_used[snapshot.namespace] = snapshot.used_counts()
            self._watched[snapshot.namespace] = snapshot
            if self.waker is not None and self.gate.is_leader:
                old = before.status_hard if before is not None else None
                self.waker.observe(
                    snapshot.namespace, old, snapshot.status_hard, snapshot.resource_version
                )
        self.queue.add(snapshot.namespace)
        # the budget it is a member of, and a budget whose mark it carries or just dropped
        # (that budget holds the slice of a namespace that left it until the mark goes)
        marks = {q.annotations.get(BUDGET) for q in (before, snapshot) if q is not None}
        self.budgets.wake_namespace(snapshot.namespace, marks)

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
        self._policies[name] = PolicyRecord(
            info, generation, dict(obj.get("status") or {}), str(meta.get("uid") or "")
        )
        if old is None or old.info != info:
            if not info.valid:
                log.warning("policy %s is invalid: %s", name, info.reason)
            self._policies_changed()
        elif old.status != self._policies[name].status or old.generation != generation:
            self.mark_policy_status_dirty()

    def on_policies_synced(self) -> None:
        """The policy informer applied a full list: the policies count as known from now on,
        so writes held on them proceed (every namespace is queued again)."""
        if not self.policies_listed:
            self.policies_listed = True
            log.debug("policies listed: %d; writes may proceed", len(self._policies))
            self.queue.add_all(list(self.namespaces))
            self.mark_policy_status_dirty()

    def on_limit_range(self, event_type: str | None, obj: Mapping[str, Any]) -> None:
        """An event of a LimitRange named ``dynquota`` (the companion, or a foreign one of that
        name): what the operator confirmed about it is forgotten and the namespace is decided
        again, so a companion deleted or edited by hand is restored at once, not at the next
        confirmation (a missing default refuses every pod without requests)."""
        meta = obj.get("metadata") or {}
        namespace = str(meta.get("namespace") or "")
        if meta.get("name") != MANAGED_LIMIT_RANGE_NAME or not namespace:
            return
        self._companions.pop(namespace, None)
        if namespace in self.namespaces:
            self.queue.add(namespace)

    def on_usage_change(self, namespace: str, resource: str) -> None:
        """The informers' callback: sample the peak and queue the namespace."""
        if self.usage is not None:
            now = self.clock()
            tally = {resource: self.usage.usage(namespace, resource, now)}
            used = observed_usage(tally, self._status_used.get(namespace, {}), tally)
            self.peaks.observe(namespace, resource, used[resource], self.monotonic())
        self.queue.add(namespace)

    @property
    def policies(self) -> list[PolicyInfo]:
        """Every stored policy, valid or not."""
        return [record.info for record in self._policies.values()]

    def _policies_changed(self) -> None:
        # a shorter horizon is held for the longer one's length (never shortened early)
        self.peaks.set_horizon(self._peak_horizon(), self.monotonic())
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
        self.budgets.forget(namespace)
        self.peaks.forget(namespace)
        if self.waker is not None:
            self.waker.forget(namespace)
        if self.node_growth is not None:
            self.node_growth.forget(namespace)
        self.stall.signals.forget(namespace)
        self.lineage.forget(namespace)
        self._deleted_by_others.discard(namespace)
        self._own_deletes.pop(namespace, None)
        if namespace != KUBE_SYSTEM:
            self._namespace_uid.pop(namespace, None)
        self._status_used.pop(namespace, None)
        self._watched.pop(namespace, None)
        self._uncounted.pop(namespace, None)
        self._excess_since.pop(namespace, None)
        self._companions.pop(namespace, None)  # a namespace re-created is read afresh
        self.simulated.pop(namespace, None)
        self.views.pop(namespace, None)
        self._overrides.discard(namespace)
        with contextlib.suppress(KeyError):
            self.metrics.overrides_active.remove(namespace)
        self.metrics.forget_namespace(
            namespace, self._metric_keys.pop(namespace, TRACKED_RESOURCES)
        )

    # -- reconcile --------------------------------------------------------------------------------

    def governance(self, namespace: str) -> Governance | None:
        """How ``namespace`` is governed now (``None`` if it is not known)."""
        info = self.namespaces.get(namespace)
        if info is None:
            return None
        return governance_of(info, self.policies, self.settings)

    # -- policy status ---------------------------------------------------------------------------

    def mark_policy_status_dirty(self) -> None:
        """Ask :meth:`run_policy_status` to recompute the policies' status."""
        self._status_dirty.set()

    def _on_stall(self, stalled: bool) -> None:
        """The quota controller stalled or recovered (once recovered: decide all again)."""
        self.mark_policy_status_dirty()
        if not stalled:
            self.queue.add_all(list(self.namespaces))

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
