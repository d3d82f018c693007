"""The reconciler: one decision per namespace (a part of
:class:`~dynquota.operator.assembly.Operator`, built alone in tests; no kopf in here).

:meth:`Reconciler.reconcile` is the workqueue's handler: read the managed quota (or decide from
the copy its watch just delivered), compute usage ``U = max(tally, status.used)`` and peaks,
call the pure :func:`dynquota.policy.decide` (through
:func:`~dynquota.operator.decision.decide_namespace`, the road ``dynquota plan`` takes too), let
the budgets take their keys out (:meth:`~dynquota.operator.budgets.Budgets.shape`) and hand
the :class:`~dynquota.policy.Decision` to the :class:`~dynquota.operator.apply.QuotaWriter`
(one create, JSON merge-patch or delete), then report it and say when to look again. The
reconciler owns what a replica remembers between decisions of one namespace: the dry run's
simulated quota, since when a key is uncounted, since when ``status.used`` exceeds the tally.

Fault safety (``docs/operator.md``): every write asks the one client-side write gate first
(:mod:`dynquota.operator.write_gate`): a managed-quota write needs positive knowledge — the
policies and budgets listed since start, the usage informers synced, the kill switch read, and
the Lease valid for the whole write; a write that shrinks also needs every informer fresh now.
Otherwise the decision is *held*: nothing is written, the reason is logged and counted in
``dynquota_writes_held_total{reason}``, and the namespace is retried with backoff. The chart's
Lease fence refuses, server-side, any write from a replica that does not hold the Lease.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable, Mapping
from typing import Any

from dynquota._k8s.errors import KubeError
from dynquota._k8s.workqueue import Outcome, WorkQueue
from dynquota.kube.events import ObjectRef
from dynquota.kube.quotas import QuotaSnapshot
from dynquota.metrics import Metrics
from dynquota.names import EventReason
from dynquota.operator.apply import QuotaWriter
from dynquota.operator.budgets import Budgets
from dynquota.operator.cluster_view import ClusterView
from dynquota.operator.companion import Companions
from dynquota.operator.daemons import NodeGrowth
from dynquota.operator.decision import Replica, decide_namespace, observe
from dynquota.operator.deleter import Deleter
from dynquota.operator.ports import (
    CONFLICT_RETRIES,
    RECONCILE_TIMEOUT,
    LeaderView,
    QuotaStore,
    ReconcileResult,
    SwitchView,
)
from dynquota.operator.reporting import Reporter
from dynquota.operator.stall import StallWatch
from dynquota.policy import (
    OVERRIDE,
    TRACKED_RESOURCES,
    Decision,
    Governance,
    QuotaState,
    apply_decision,
)
from dynquota.settings import Settings

__all__ = ["Reconciler"]

log = logging.getLogger("dynquota.operator")


class Reconciler:
    """Decides and applies the managed quota of one namespace at a time (see the module docs).

    Args:
        settings: the operator settings.
        quotas: reads the managed quota afresh (a GET).
        cluster: what the watches told (namespaces, governance, the watched quotas, the usage
            tally and peaks, lineage).
        writer: writes (or holds) a decision; releases a dry run's quota.
        companions: the compute trap's LimitRange defaults.
        reporter: Warnings, usage metrics, the decision's report.
        deleter: whether a create re-creates a quota someone else deleted.
        switch: the kill switch (decided on; a sweep leaves deletes to itself).
        budgets: a member's budgeted keys are its budget's to write.
        stall: the quota controller's signals (observed; a stall holds raises).
        node_growth: the DaemonSet floor of new nodes.
        queue: whether a run is the first of a quiet namespace (decide from the watch); its
            depth is reported.
        leader: only the leader decides.
        metrics: the reconcile's counters and histogram.
        forget: forgets a namespace everywhere (a namespace no longer known).
        clock: the cluster's time, seconds since the epoch; ``monotonic``: seconds on a
            clock that never steps (peak windows, forecasts; default ``clock``).
        settled: called with a namespace whose decision is written or needs no write (a
            refused write of an earlier run is then no longer wanted).
    """

    def __init__(
        self,
        settings: Settings,
        *,
        quotas: QuotaStore,
        cluster: ClusterView,
        writer: QuotaWriter,
        companions: Companions,
        reporter: Reporter,
        deleter: Deleter,
        switch: SwitchView,
        budgets: Budgets,
        stall: StallWatch,
        node_growth: NodeGrowth,
        queue: WorkQueue,
        leader: LeaderView,
        metrics: Metrics,
        forget: Callable[[str], None],
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] | None = None,
        settled: Callable[[str], None] = lambda _namespace: None,
    ) -> None:
        self.settings = settings
        self.settled = settled
        self.quotas = quotas
        self.cluster = cluster
        self.writer = writer
        self.companions = companions
        self.reporter = reporter
        self.deleter = deleter
        self.switch = switch
        self.budgets = budgets
        self.stall = stall
        self.node_growth = node_growth
        self.queue = queue
        self.leader = leader
        self.metrics = metrics
        self.forget_everywhere = forget
        self.clock = clock
        self.monotonic = monotonic if monotonic is not None else clock
        self.started_at = clock()
        self.simulated: dict[str, QuotaState | None] = {}
        """Per namespace in dry run, the quota dynquota would have (kept in memory only)."""
        self._uncounted: dict[str, dict[str, float]] = {}  # ns -> status-driven key -> since
        self._excess_since: dict[str, dict[str, float]] = {}  # ns -> key -> status.used > tally
        # ns -> the keys a quiet namespace's first run took as phantom: admission's charge
        # arrived before the object's own event, whose tally change then runs it at once
        self._confirming: dict[str, frozenset[str]] = {}
        self._counted: dict[str, Any] = {}  # result -> its reconciles counter (one labels())

    def forget(self, namespace: str) -> None:
        """``namespace`` was deleted: what was remembered of it goes."""
        self._uncounted.pop(namespace, None)
        self._excess_since.pop(namespace, None)
        self._confirming.pop(namespace, None)
        self.simulated.pop(namespace, None)

    def confirms(self, namespace: str, resource: str) -> bool:
        """Whether a tally change of ``resource`` in ``namespace`` confirms a charge the
        namespace's first run after a quiet spell took as phantom (``status.used`` ahead of
        the tally): it is then decided at once, not at the end of the coalescing window.
        Answers yes once per such run."""
        keys = self._confirming.get(namespace)
        if keys is None or resource not in keys:
            return False
        del self._confirming[namespace]
        return True

    async def reconcile(self, namespace: str) -> Outcome:
        """Decide and apply the managed quota of ``namespace`` (the workqueue's handler).

        Abandoned after :data:`RECONCILE_TIMEOUT` seconds (then retried with backoff)."""
        started = time.monotonic()
        result: ReconcileResult = "ok"
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
            counter = self._counted.get(result)
            if counter is None:
                counter = self._counted[result] = self.metrics.reconciles.labels(result)
            counter.inc()
            self.metrics.queue_depth.set(len(self.queue))

    async def _reconcile(self, namespace: str) -> tuple[Outcome, ReconcileResult]:
        if not self.leader.is_leader:
            return Outcome(), "standby"
        governance = self.cluster.governance(namespace)
        if governance is None:
            self.forget_everywhere(namespace)
            return Outcome(), "ok"
        if governance.kind == "excluded":
            # e.g. being deleted: its series go now, not at the namespace's DELETED event
            self.reporter.not_governed(namespace)
            return Outcome(), "ok"
        if governance.warning:
            await self.reporter.warn_once(
                ObjectRef.namespace_object(namespace, self.cluster.namespace_uid(namespace)),
                EventReason.MANAGED_LABEL_IGNORED,
                governance.warning,
                key=namespace,
                value=governance.warning,
            )
        dry_run = self.settings.dry_run or governance.dry_run
        result: ReconcileResult
        # Decide from the quota its watch delivered once that copy shows this replica's own
        # last write (no GET on the reaction path); a retry reads it afresh. Either way a patch
        # is conditional on the resourceVersion decided from, so it never overwrites a change it
        # has not seen (409: read again); anything but a patch is decided again from a GET.
        watched = self.cluster.current(namespace)
        for attempt in range(CONFLICT_RETRIES + 1 + (watched is not None)):
            from_watch = attempt == 0 and watched is not None
            current = watched if from_watch else await self.quotas.get(namespace)
            # the tally ahead of the watched status.used: admission's charge may not be
            # delivered yet, and only a read tells that from an object admitted uncharged
            # (which lowers a raise); a decision to write nothing stands (under churn most do)
            lagging = (
                from_watch
                and current is not None
                and bool(current.uncharged(self.cluster.tally(namespace, self.clock())))
            )
            # Decide on what is known now: the policies may have been listed (or changed)
            # during the read (CI: an operator starting deleted three quotas as "no policy
            # matches", decided before its policy list landed, written after it).
            latest = self.cluster.governance(namespace)
            if latest is None or latest.kind == "excluded":
                return Outcome(requeue_at=self.clock()), "retry"
            governance, dry_run = latest, self.settings.dry_run or latest.dry_run
            if current is not None and not current.managed:
                await self.reporter.report_foreign(current)
                return Outcome(), "ok"
            now = self.clock()
            missing = await self.companions.missing_defaults(
                namespace, governance, current, dry_run
            )
            decision = self._decide(namespace, governance, current, now, dry_run, missing)
            if from_watch and (
                decision.dry_run
                or decision.action not in ("patch", "nothing")
                or (lagging and decision.action != "nothing")
            ):
                continue
            if not decision.dry_run:
                # budgeted keys are the budget task's to write: their hard is its demand
                decision = self.budgets.shape(namespace, decision, current)
            if decision.dry_run:
                simulated = apply_decision(
                    self._quota_for_decision(namespace, current, dry_run), decision
                )
                written = current
                if current is not None and governance.kind in ("managed", "unmanaged"):
                    # dry run enforces nothing: the managed quota is released (deleted)
                    applied = await self.writer.release(namespace, governance, simulated, current)
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
            if decision.action == "delete" and self.switch.engaged and self.switch.sweeping:
                return Outcome(), "ok"  # the kill-switch sweep deletes it (and logs it)
            applied = await self.writer.apply(namespace, governance, decision, current)
            if applied.conflict:
                gave_up = attempt == CONFLICT_RETRIES
                self.metrics.write_conflicts.labels("gave-up" if gave_up else "retried").inc()
                continue
            if applied.outcome is not None:
                return applied.outcome, applied.result
            written, result = applied.quota, "ok"
            self.cluster.lineage.saw(namespace, written)
            break
        else:
            log.warning(
                "reconcile %s: the managed quota changed under %d writes in a row (409 "
                "Conflict); retrying with backoff",
                namespace,
                CONFLICT_RETRIES + 1,
            )
            return Outcome(retry=True), "retry"
        self.settled(namespace)
        await self.reporter.report_decision(
            namespace, governance, decision, written, self.simulated.get(namespace)
        )
        return Outcome(requeue_at=self._next_look(namespace, governance, decision, now)), result

    def _decide(
        self,
        namespace: str,
        governance: Governance,
        current: QuotaSnapshot | None,
        now: float,
        dry_run: bool,
        missing_defaults: frozenset[str] = frozenset(),
    ) -> Decision:
        """Usage, peaks and :func:`~dynquota.policy.decide` for ``current`` (reports usage)."""
        status_used = current.used_counts() if current is not None else {}
        if current is not None:
            self.cluster.read_status_used(namespace, status_used)
        tally = self.cluster.tally(namespace, now)
        self.stall.observe_usage(namespace, current, tally, status_used, now)
        phantom = self._phantom(namespace, tally, status_used, now)
        if phantom and self.queue.leading(namespace):
            self._confirming[namespace] = phantom
        else:
            self._confirming.pop(namespace, None)
        observed = observe(governance, status_used, tally, phantom)
        usage = observed.usage
        peak: dict[str, int] = {}
        steady = self.monotonic()  # peak windows: in memory, on a clock that never steps
        peaks = self.cluster.peaks
        view = self.reporter.view(namespace)
        view.forget_forecasts()
        for resource in observed.keys:
            if resource not in usage:
                continue  # usage unknown: held, no peak sample
            peaks.observe(namespace, resource, usage[resource], steady)
            profile = governance.profiles.get(resource)
            if profile is not None:
                found = peaks.peak(namespace, resource, steady, profile.downscale_cooldown)
                peak[resource] = usage[resource] if found is None else found
                view.observe_trend(resource, usage[resource], profile.maximum, current, steady)
        lineage = self.cluster.lineage
        replica = Replica(
            peak=peak,
            started_at=self.started_at,
            previously_managed=self.deleter.previously_managed(
                namespace, current, self.cluster.watched(namespace)
            ),
            uncounted_since=self._uncounted_since(namespace, current, now),
            daemon_floor=self.node_growth.floor(namespace),
            born_at=lineage.born_at(self.cluster.namespaces.get(namespace)),
            hard_before=lineage.hard_before(namespace, governance, dry_run, current),
            stalled=self.stall.stalled,
            exhaustion=view.exhaustion_of("maximum"),
        )
        decision = decide_namespace(
            namespace,
            governance,
            observed,
            self._quota_for_decision(namespace, current, dry_run),
            current=current,
            kill_switch=self.switch.engaged,
            now=now,
            settings=self.settings,
            dry_run=dry_run,
            missing_defaults=missing_defaults,
            budgeted=self.budgets.budgeted(namespace),
            replica=replica,
        )
        self.reporter.report_usage(
            namespace, governance, tally, status_used, usage, current, dry_run=dry_run
        )
        return decision

    def _phantom(
        self, namespace: str, tally: Mapping[str, int], status_used: Mapping[str, int], now: float
    ) -> frozenset[str]:
        """The tally-driven keys whose ``status.used`` has exceeded the tally for less than the
        quota controller's sync period (first seen by this replica): their excess is taken as
        phantom charges until the recount (issue 27; docs/operator.md, "Phantom charges")."""
        seen = self._excess_since.setdefault(namespace, {})
        phantom = set()
        for key in TRACKED_RESOURCES:
            if status_used.get(key, 0) > tally.get(key, 0):
                since = seen.setdefault(key, now)
                if now - since < self.settings.quota_sync_period or self.stall.stalled:
                    phantom.add(key)  # (a stalled controller recounts nothing)
            else:
                seen.pop(key, None)
        if not seen:
            self._excess_since.pop(namespace, None)
        return frozenset(phantom)

    def _uncounted_since(
        self, namespace: str, current: QuotaSnapshot | None, now: float
    ) -> dict[str, float]:
        """Per status-driven key of the managed quota: since when ``status.hard`` shows it
        without a ``status.used`` (first seen by this replica)."""
        keys = current.uncounted() if current is not None else frozenset()
        keys = frozenset(k for k in keys if k not in TRACKED_RESOURCES)
        seen = self._uncounted.get(namespace, {})
        since = {k: seen.get(k, now) for k in keys}
        if since:
            self._uncounted[namespace] = since
        else:
            self._uncounted.pop(namespace, None)
        return since

    def _quota_for_decision(
        self, namespace: str, current: QuotaSnapshot | None, dry_run: bool
    ) -> QuotaState | None:
        real = current.state() if current is not None else None
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

    def _next_look(
        self, namespace: str, governance: Governance, decision: Decision, now: float
    ) -> float | None:
        candidates: list[float] = []
        if decision.requeue_at is not None:
            candidates.append(decision.requeue_at)
        if governance.kind == "managed":
            usage = self.cluster.usage
            if usage is not None:
                expiry = usage.next_expiry(namespace, now)
                if expiry is not None:
                    candidates.append(math.floor(expiry) + 1.0)
            steady = self.monotonic()
            for resource, profile in governance.profiles.items():
                drop = self.cluster.peaks.peak_expiry(
                    namespace, resource, steady, profile.downscale_cooldown
                )
                if drop is not None:  # monotonic instant -> the cluster's time
                    candidates.append(now + (drop - steady))
        future = [c for c in candidates if c > now]
        return min(future) if future else (now + 1.0 if candidates else None)
