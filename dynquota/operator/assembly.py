"""One replica's operator, assembled from parts that own their state (no kopf in here).

:class:`Operator` is built the way kube's controllers are: a struct of collaborators, each
handed what it needs by its constructor, none reaching into another's fields
(``docs/architecture.md``, "The operator: parts that own their state"). It builds, in order:

- the workqueue (its handler is :meth:`Operator.reconcile`) and the
  :class:`~dynquota.operator.cluster_view.ClusterView` (what the watches told);
- the kill switch's :class:`~dynquota.operator.killswitch.SwitchState`, the
  :class:`~dynquota.operator.budgets.Budgets`, and the one
  :class:`~dynquota.operator.write_gate.WriteGate` that reads them, the cluster view and the
  Lease;
- the :class:`~dynquota.operator.reporting.Reporter`, the
  :class:`~dynquota.operator.deleter.Deleter`, the
  :class:`~dynquota.operator.stall.StallWatch`, the
  :class:`~dynquota.operator.policy_status.PolicyStatusWriter`, the
  :class:`~dynquota.operator.killswitch.KillSwitch`, the
  :class:`~dynquota.operator.apply.QuotaWriter`, the
  :class:`~dynquota.operator.companion.Companions`, the
  :class:`~dynquota.operator.wake.Waker`, the :class:`~dynquota.operator.daemons.NodeGrowth`,
  the :class:`~dynquota.operator.budget_task.BudgetTasks`, the
  :class:`~dynquota.operator.governor.Governor` (the write-rate governor);
- the :class:`~dynquota.operator.reconcile.Reconciler`, holding references to them.

Its ``on_*`` methods are the informers' event handlers: each applies the event to the cluster
view, then hands what changed to the parts that act on it (queue the namespace, read the kill
switch, wake a budget, ...), as a kube controller's event handlers enqueue keys.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from dynquota._k8s.workqueue import Outcome, WorkQueue
from dynquota.metrics import Metrics
from dynquota.operator.apply import QuotaWriter
from dynquota.operator.brake import CONFIRM
from dynquota.operator.budget_task import BudgetTasks
from dynquota.operator.budgets import Budgets
from dynquota.operator.cluster_view import ClusterView, PolicySeen
from dynquota.operator.companion import Companions
from dynquota.operator.daemons import NodeGrowth
from dynquota.operator.deleter import Deleter
from dynquota.operator.governor import Governor, TarpitStore
from dynquota.operator.guard_watch import GUARD_RECHECK, GuardWatch
from dynquota.operator.killswitch import KillSwitch, SwitchState
from dynquota.operator.policy_status import PolicyStatusWriter
from dynquota.operator.ports import (
    KUBE_SYSTEM,
    AlwaysLeading,
    BudgetStatusSink,
    EventSink,
    LeaderView,
    LimitRangeReader,
    NamespaceReader,
    PolicyStatusSink,
    QuotaStore,
)
from dynquota.operator.reconcile import Reconciler
from dynquota.operator.reporting import Reporter
from dynquota.operator.stall import StallWatch
from dynquota.operator.wake import Waker, WorkloadStore
from dynquota.operator.wake_wiring import growth_applies, status_used_units, wake_allowed
from dynquota.operator.write_failures import (
    BUDGET_WRITER,
    RECONCILE_WRITER,
    RecordingQuotas,
    WriteFailures,
)
from dynquota.operator.write_gate import PartsKnowledge, WriteGate
from dynquota.operator.write_rate import rule_for
from dynquota.policy import KILL_SWITCH, NamespaceInfo
from dynquota.policy.budget_guard import GuardSeen
from dynquota.policy.state import BUDGET
from dynquota.settings import Settings

__all__ = ["Operator"]


class Operator:
    """The parts of one operator replica, wired (see the module docs).

    Args:
        settings: the operator settings.
        quotas, events, policy_status: the I/O ports (:mod:`dynquota.operator.ports`).
        metrics: where to report (a fresh :class:`~dynquota.metrics.Metrics` if omitted).
        gate: leadership (always leading if omitted).
        clock: the cluster's time, seconds since the epoch, against which persisted stamps are
            judged (the runtime passes a :class:`~dynquota._k8s.clock.ServerClock`: a local
            wall-clock step does not move it).
        monotonic: seconds on a clock that never steps, for in-memory windows (the peak
            windows, the brake); default ``clock`` (unit tests move one fake clock).
        namespace_reader: consistent reads of ``kube-system`` confirming a kill-switch change
            seen in a watch event (``None``: the event is trusted; unit tests only).
        limit_ranges: LimitRange defaults and the companion's writes (``None``: no defaults
            known, compute keys are held).
        budget_status: QuotaBudget status writes (``None``: none; unit tests).
        workloads: lists and marks workloads, for the waker and node growth (``None``: both
            off).
        budget_guard: reads the chart's budget guard for the budgets' ``Guarded`` (``None``:
            not read).
        tarpit: the write-rate governor's FlowSchema (``None``: the governor is off; also
            off without ``settings.tarpit_flow_schema``).

    Set ``cluster.usage`` (the usage informers) before the queue runs; feed the informers'
    events to :meth:`on_namespace`, :meth:`on_quota`, :meth:`on_limit_range`,
    :meth:`on_policy`, :meth:`on_policies_synced`, :meth:`on_usage_change` and the budgets'
    to ``budgets.on_budget``.
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
        workloads: WorkloadStore | None = None,
        budget_guard: Callable[[], Awaitable[GuardSeen]] | None = None,
        tarpit: TarpitStore | None = None,
    ) -> None:
        self.settings = settings
        self.quotas = quotas
        self.metrics = metrics = metrics if metrics is not None else Metrics()
        self.gate: LeaderView = gate if gate is not None else AlwaysLeading()
        self.clock = clock
        self.queue = WorkQueue(
            self.reconcile,
            workers=settings.workers,
            coalesce=settings.coalesce_seconds,
            clock=clock,  # requeue instants are the cluster's time (Outcome.requeue_at)
        )
        self.cluster = cluster = ClusterView(settings, clock=clock, monotonic=monotonic)
        state = SwitchState()
        self.budgets = budgets = Budgets(
            settings, cluster.namespaces, cluster.governance, self.requeue_all
        )
        self.write_gate = write_gate = WriteGate(PartsKnowledge(cluster, budgets, state, self.gate))
        self.write_failures = failures = WriteFailures()
        """Refused or failing quota writes until one succeeds (the status writers' Ready)."""
        # every part writes through one: a decision waits for the watch to show our own write
        writes = RecordingQuotas(quotas, failures, RECONCILE_WRITER, cluster.wrote)
        self.reporter = reporter = Reporter(
            events,
            write_gate,
            metrics,
            clock,
            watched=cluster.watched,
            monotonic=monotonic if monotonic is not None else clock,
        )
        self.deleter = deleter = Deleter(
            writes,
            write_gate,
            state,
            metrics,
            settings,
            governance=cluster.governance,
            on_deleted=reporter.quota_deleted,
        )
        self.stall = StallWatch(settings.quota_sync_period, metrics, self._on_stall)
        self.status = PolicyStatusWriter(
            cluster,
            policy_status,
            reporter=reporter,
            write_gate=write_gate,
            leader=self.gate,
            metrics=metrics,
            stall=self.stall,
            settings=settings,
            failures=failures,
        )
        self.switch = KillSwitch(
            state,
            settings,
            deleter=deleter,
            reporter=reporter,
            write_gate=write_gate,
            quotas=writes,
            leader=self.gate,
            metrics=metrics,
            requeue_all=self.requeue_all,
            reread=lambda obj: self.on_namespace(None, obj),
            kube_system_uid=lambda: cluster.kube_system_uid,
            namespace_reader=namespace_reader,
        )
        self.writer = QuotaWriter(
            writes,
            deleter=deleter,
            reporter=reporter,
            write_gate=write_gate,
            switch=state,
            cluster=cluster,
            leader=self.gate,
            requeue=self.queue,
            metrics=metrics,
            settings=settings,
            clock=clock,
            monotonic=monotonic,
        )
        self.companions = Companions(limit_ranges, reporter=reporter, write_gate=write_gate)
        self.waker = Waker(
            workloads,
            write_gate,
            metrics,
            reporter.report_woken,
            enabled=settings.wake,
            qps=settings.wake_qps,
            allowed=lambda namespace: wake_allowed(cluster, namespace),
        )
        """Wakes the controllers a raise made room for (off without ``workloads``)."""
        self.node_growth = NodeGrowth(
            workloads if settings.node_growth and settings.wake else None,
            self.queue.add,
            lambda namespace: growth_applies(cluster, namespace),
            lambda: self.gate.is_leader,
            lambda namespace, key: status_used_units(cluster, namespace, key),
        )
        """DaemonSets' new nodes (:mod:`dynquota.operator.daemons`; off unless the wake and
        ``nodeGrowth`` are on and ``workloads`` is given)."""
        self.budget_tasks = BudgetTasks(
            budgets,
            quotas=RecordingQuotas(quotas, failures, BUDGET_WRITER, cluster.wrote),
            write_gate=write_gate,
            leader=self.gate,
            reporter=reporter,
            status=budget_status,
            metrics=metrics,
            settings=settings,
            tally=cluster.count,
            clock=clock,
            failures=failures,
            foreign=cluster.foreign,
            guard=GuardWatch(
                budget_guard,
                self.gate,
                monotonic or clock,
                min(GUARD_RECHECK, float(settings.resync_seconds)),
            )
            if budget_guard is not None
            else None,
        )
        """One serialized task per QuotaBudget (started by the runtime with the queue)."""
        self.governor = Governor(
            settings,
            store=tarpit,
            write_gate=write_gate,
            reporter=reporter,
            metrics=metrics,
            leader=self.gate,
            switch=state,
            rule_of=lambda ns: rule_for(
                cluster.governance(ns), cluster.policy_records, settings.dry_run
            ),
            exists=lambda ns: ns in cluster.namespaces,
            quota_uid=lambda ns: quota.uid if (quota := cluster.watched(ns)) else "",
            monotonic=monotonic if monotonic is not None else clock,
        )
        """The write-rate governor (started by the runtime; off without ``tarpit``)."""
        self.on_policy_spec: Callable[[], None] | None = None
        """Called after a policy's spec changed (the tenant projections' writer: a pass soon,
        not at its 30 s sweep; the runtime sets it)."""
        budgets.on_wake = self.budget_tasks.wake
        budgets.on_records = self.budget_tasks.sync
        failures.on_change = self._on_write_failure
        self.reconciler = Reconciler(
            settings,
            quotas=quotas,
            cluster=cluster,
            writer=self.writer,
            companions=self.companions,
            reporter=reporter,
            deleter=deleter,
            switch=state,
            budgets=budgets,
            stall=self.stall,
            node_growth=self.node_growth,
            queue=self.queue,
            leader=self.gate,
            metrics=metrics,
            forget=self.forget,
            clock=clock,
            monotonic=monotonic,
            # a refused write no longer wanted (its key now the budget's, or nothing to change)
            # stops holding Ready=False (README-only attack: Stalled for good)
            settled=lambda namespace: failures.succeeded(namespace, RECONCILE_WRITER),
        )

    @property
    def namespaces(self) -> Mapping[str, NamespaceInfo]:
        """The namespaces this replica knows (the cluster view's, read-only)."""
        return self.cluster.namespaces

    # -- the workqueue's handler --------------------------------------------------------------

    async def reconcile(self, namespace: str) -> Outcome:
        """Decide and apply the managed quota of ``namespace`` (:class:`Reconciler`)."""
        return await self.reconciler.reconcile(namespace)

    def requeue_all(self) -> None:
        """Queue every known namespace."""
        self.queue.add_all(list(self.cluster.namespaces))

    # -- the informers' event handlers --------------------------------------------------------

    def on_namespace(self, event_type: str | None, obj: Mapping[str, Any]) -> None:
        """A Namespace event (``ADDED``/``MODIFIED``/``DELETED``, ``None`` for a listing):
        ``kube-system``'s carries the kill switch and the brake's confirmation."""
        seen = self.cluster.on_namespace(event_type, obj)
        if seen is None:
            return
        if seen.deleted:
            self.forget(seen.name)
            self.status.mark_dirty()
            return
        if seen.name == KUBE_SYSTEM:
            annotations = seen.annotations or {}
            self.writer.observe_confirmation(annotations.get(CONFIRM))
            self.switch.observe(annotations.get(KILL_SWITCH), consistent=event_type is None)
        if seen.changed:
            self.queue.add(seen.name)
            self.status.mark_dirty()
            # the budgets its dynquota.io/budget label names now and named before look again
            # (a namespace without a policy never reaches shape)
            self.budgets.wake_labelled(seen.before, seen.after)

    def on_quota(self, event_type: str | None, obj: Mapping[str, Any]) -> None:
        """An event of a ResourceQuota named ``dynquota`` (managed or not)."""
        seen = self.cluster.on_quota(event_type, obj)
        if seen is None:
            return
        quota, namespace = seen.quota, seen.quota.namespace
        self.deleter.observe(event_type, quota)
        self.stall.observe_quota(namespace, None if seen.gone else quota, self.clock())
        if not seen.gone and self.gate.is_leader:
            before = seen.before.status_hard if seen.before is not None else None
            self.waker.observe(namespace, before, quota.status_hard, quota.resource_version)
        self.queue.add(namespace)
        # the budget it is a member of, and a budget whose mark it carries or just dropped
        # (that budget holds the slice of a namespace that left it until the mark goes)
        marks = {q.annotations.get(BUDGET) for q in (seen.before, quota) if q is not None}
        self.budgets.wake_namespace(namespace, marks)

    def on_limit_range(self, event_type: str | None, obj: Mapping[str, Any]) -> None:
        """An event of a LimitRange named ``dynquota`` (the companion, or a foreign one of that
        name): what was confirmed about it is forgotten and the namespace is decided again, so
        a companion deleted or edited by hand is restored at once, not at the next
        confirmation (a missing default refuses every pod without requests)."""
        namespace = self.cluster.on_limit_range(event_type, obj)
        if namespace is None:
            return
        self.companions.forget(namespace)
        if namespace in self.cluster.namespaces:
            self.queue.add(namespace)

    def on_policy(self, event_type: str | None, obj: Mapping[str, Any]) -> None:
        """A DynamicQuotaPolicy event: every namespace is decided again if its spec changed,
        and :attr:`on_policy_spec` is called (what the tenant projections show of it, e.g. its
        ``writeRate``, may change with no quota write)."""
        seen = self.cluster.on_policy(event_type, obj)
        if seen is PolicySeen.SPEC:
            self.requeue_all()
            if self.on_policy_spec is not None:
                self.on_policy_spec()
        if seen is not PolicySeen.NOTHING:
            self.status.mark_dirty()

    def on_policies_synced(self) -> None:
        """The policy informer applied a full list: writes held on the policies proceed (every
        namespace is queued again)."""
        if self.cluster.on_policies_synced():
            self.requeue_all()
            self.status.mark_dirty()

    def on_usage_change(self, namespace: str, resource: str) -> None:
        """The usage informers' callback: sample the peak and queue the namespace (at once if
        the change confirms a charge its last run took as phantom)."""
        self.cluster.on_usage_change(namespace, resource)
        if self.reconciler.confirms(namespace, resource):
            self.queue.add_now(namespace)
        else:
            self.queue.add(namespace)

    async def on_leadership(self, leading: bool) -> None:
        """Leadership changed: report it; a new leader catches up on everything."""
        self.metrics.leader.set(1 if leading else 0)
        if leading:
            self.waker.sweep(self.cluster.watched_quotas())  # raises made while standing by
        else:
            self.waker.reset()
        if leading:
            self.switch.on_leadership(leading)
            self.requeue_all()
            self.status.mark_dirty()

    def wake_sweep(self) -> None:
        """Wake passes for the managed quotas not seen since this replica leads."""
        if self.gate.is_leader:
            self.waker.sweep(self.cluster.watched_quotas())

    def forget(self, namespace: str) -> None:
        """``namespace`` is gone: every part forgets it."""
        self.queue.forget(namespace)
        self.budgets.forget(namespace)
        self.cluster.forget(namespace)
        self.waker.forget(namespace)
        self.node_growth.forget(namespace)
        self.stall.signals.forget(namespace)
        self.deleter.forget(namespace)
        self.reconciler.forget(namespace)
        self.companions.forget(namespace)
        self.reporter.forget(namespace)
        self.write_failures.forget(namespace)
        self.governor.forget(namespace)

    def _on_write_failure(self, namespace: str) -> None:
        """A write in ``namespace`` began or stopped failing: its budget and the policies say
        so (Ready)."""
        self.budgets.wake_namespace(namespace)
        self.status.mark_dirty()

    def _on_stall(self, stalled: bool) -> None:
        """The quota controller stalled or recovered (once recovered: decide all again)."""
        self.status.mark_dirty()
        if not stalled:
            self.requeue_all()

    async def stop_background(self) -> None:
        """Cancel the kill switch's sweep and Event tasks."""
        await self.switch.stop()
