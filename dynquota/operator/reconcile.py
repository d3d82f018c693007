"""The operator's state and its per-namespace reconcile (no kopf in here).

:class:`Operator` holds what the watches told it (namespaces, policies, the kill switch, the
managed quotas' ``status.used``), the peak windows, and the workqueue. Its
:meth:`Operator.reconcile` is the one decision per namespace: read the managed quota, compute
usage ``U = max(tally, status.used)`` and peaks, call the pure
:func:`dynquota.policy.decide`, and apply the :class:`~dynquota.policy.Decision` with one
create, JSON merge-patch or delete. It talks to the cluster only through the small ports
below (:class:`QuotaStore`, :class:`EventSink`, :class:`UsageView`, :class:`PolicyStatusSink`),
so unit tests fake them at that boundary.

Every write (quotas, companion LimitRanges, Events, statuses) asks the one client-side write
gate first (:mod:`dynquota.operator.write_gate`); the chart's Lease fence refuses, server-side,
any write from a replica that does not hold the Lease.

Fault safety (``docs/operator.md``): a managed-quota write needs positive knowledge — the
policies and budgets listed since start, the usage informers synced, the kill switch read, and
the Lease valid for the whole write (``gate.can_write``); a write that shrinks
(:attr:`~dynquota.policy.Decision.shrinks`) also needs every informer fresh now. Otherwise the
decision is *held*: nothing is written, the reason is logged and counted in
``dynquota_writes_held_total{reason}``, and the namespace is retried with backoff. The kill
switch is the exception on purpose: its sweep needs only a consistent read of ``kube-system``
showing it engaged, and the Lease.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Mapping
from typing import Any

from dynquota._k8s.errors import ForbiddenError, KubeError
from dynquota._k8s.workqueue import Outcome
from dynquota.kube.events import ObjectRef
from dynquota.kube.quotas import QuotaSnapshot
from dynquota.names import (
    MANAGED_BY_LABEL,
    MANAGED_BY_VALUE,
    MANAGED_LIMIT_RANGE_NAME,
    EventReason,
)
from dynquota.operator.apply import QuotaWriter
from dynquota.operator.budget_task import BudgetTasks
from dynquota.operator.decision import decide_args
from dynquota.operator.ports import (
    CONFLICT_RETRIES,
    RECONCILE_TIMEOUT,
    NamespaceView,
    ReconcileResult,
)
from dynquota.operator.write_gate import LIMIT_RANGE
from dynquota.policy import (
    OVERRIDE,
    TRACKED_RESOURCES,
    Decision,
    Governance,
    QuotaState,
    apply_decision,
    decide,
    observed_usage,
    resource_order,
    unit_for,
)
from dynquota.policy.limitrange import ContainerDefaults, limit_range_covers, owned_limit_range

__all__ = [
    "Operator",
]

log = logging.getLogger("dynquota.operator")


class Operator(QuotaWriter):
    """State and reconcile loop of one operator replica.

    Built in layers, one concern a module (``docs/architecture.md``): construct it with the
    arguments of :class:`~dynquota.operator.cache.OperatorCache`; set :attr:`usage` before the
    queue runs and feed the watches with :meth:`on_namespace`, :meth:`on_quota`,
    :meth:`on_policy`, :meth:`on_usage_change`.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.budget_tasks = BudgetTasks(self, self.budgets)
        """One serialized task per QuotaBudget (started by the runtime with the queue)."""

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
            self.metrics.reconciles.labels(result).inc()
            self.metrics.queue_depth.set(len(self.queue))

    async def _reconcile(self, namespace: str) -> tuple[Outcome, ReconcileResult]:
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
                EventReason.MANAGED_LABEL_IGNORED,
                governance.warning,
                key=namespace,
                value=governance.warning,
            )
        dry_run = self.settings.dry_run or governance.dry_run
        result: ReconcileResult
        # The first event of a quiet namespace decides from the quota its watch just delivered
        # (no GET on the reaction path); every other attempt reads it afresh. Either way a patch
        # is conditional on the resourceVersion decided from, so it never overwrites a change it
        # has not seen (409: read again); anything but a patch is decided again from a GET.
        watched = self._watched.get(namespace) if self.queue.leading(namespace) else None
        for attempt in range(CONFLICT_RETRIES + 1 + (watched is not None)):
            from_watch = attempt == 0 and watched is not None
            current = watched if from_watch else await self.quotas.get(namespace)
            # Decide on what is known now: the policies may have been listed (or changed)
            # during the read (CI: an operator starting deleted three quotas as "no policy
            # matches", decided before its policy list landed, written after it).
            latest = self.governance(namespace)
            if latest is None or latest.kind == "excluded":
                return Outcome(requeue_at=self.clock()), "retry"
            governance, dry_run = latest, self.settings.dry_run or latest.dry_run
            if current is not None and not current.managed:
                await self._report_foreign(current)
                return Outcome(), "ok"
            now = self.clock()
            missing = await self._missing_defaults(namespace, governance, current, dry_run)
            decision = self._decide(namespace, governance, current, now, dry_run, missing)
            if from_watch and (decision.dry_run or decision.action not in ("patch", "nothing")):
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
            self.lineage.saw(namespace, written)
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
        missing_defaults: frozenset[str] = frozenset(),
    ) -> Decision:
        """Usage, peaks and :func:`~dynquota.policy.decide` for ``current`` (reports usage)."""
        status_used = current.used_counts() if current is not None else {}
        if current is not None:
            self._status_used[namespace] = status_used
        tally = {
            r: self.usage.usage(namespace, r, now) if self.usage else 0 for r in TRACKED_RESOURCES
        }
        keys = resource_order(set(TRACKED_RESOURCES) | set(governance.profiles))
        self.stall.observe_usage(namespace, current, tally, status_used, now)
        phantom = self._phantom(namespace, tally, status_used, now)
        usage = observed_usage(tally, status_used, keys, phantom)
        peak: dict[str, int] = {}
        steady = self.monotonic()  # peak windows: in memory, on a clock that never steps
        view = self.views.setdefault(namespace, NamespaceView())
        view.exhaustion = {}
        for resource in keys:
            if resource not in usage:
                continue  # usage unknown: held, no peak sample
            self.peaks.observe(namespace, resource, usage[resource], steady)
            profile = governance.profiles.get(resource)
            if profile is not None:
                found = self.peaks.peak(namespace, resource, steady, profile.downscale_cooldown)
                peak[resource] = usage[resource] if found is None else found
                self._forecast(view, resource, usage[resource], profile.maximum, current, steady)
        decision = decide(
            governance=governance,
            usage=usage,
            peak=peak,
            quota=self._quota_for_decision(namespace, current, dry_run),
            kill_switch=self.kill_switch,
            now=now,
            started_at=self.started_at,
            previously_managed=namespace in self._deleted_by_others
            or (current is None and self._deleted_unseen(namespace)),
            namespace=namespace,
            help_url=self.settings.tenant_help_url,
            uncounted_since=self._uncounted_since(namespace, current, now),
            missing_defaults=missing_defaults,
            budgeted=self.budgets.budgeted(namespace),
            daemon_floor=self.node_growth.floor(namespace) if self.node_growth else None,
            charged={k: status_used[k] for k in phantom},
            unenforced=current.unenforced() if current is not None and not dry_run else frozenset(),
            born_at=self.lineage.born_at(self.namespaces.get(namespace)),
            hard_before=self.lineage.hard_before(namespace, governance, dry_run, current),
            uncharged=current.uncharged(tally) if current is not None and not dry_run else None,
            stalled=self.stall.stalled,
            exhaustion={r: t for (r, limit), t in view.exhaustion.items() if limit == "maximum"},
            **decide_args(self.settings),
        )
        self._report_usage(namespace, governance, tally, status_used, usage, current)
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

    async def _missing_defaults(
        self,
        namespace: str,
        governance: Governance,
        current: QuotaSnapshot | None,
        dry_run: bool = False,
    ) -> frozenset[str]:
        """Keys of the policy that force pods to declare a resource (the compute trap), are not
        in the quota yet, and have no LimitRange default in ``namespace``.

        One LIST of its LimitRanges, only when there is such a key to add or the policy's
        companion LimitRange is not known to be in place; that same read creates or patches
        the companion (:meth:`_ensure_companion`). Raises ``KubeError``."""
        if governance.kind != "managed":
            return frozenset()
        hard = current.spec_hard if current is not None else {}
        trapped = frozenset(
            k for k in governance.profiles if k not in hard and unit_for(k).info.compute_trap
        )
        defaults = governance.container_defaults
        in_place = self._companions.get(namespace) == defaults
        if not trapped and (not defaults.wanted or in_place or dry_run):
            return frozenset()
        if self.limit_ranges is None:
            return trapped
        items = await self.limit_ranges.list_limit_ranges(namespace)
        covered = limit_range_covers(items)
        if defaults.wanted and await self._ensure_companion(namespace, defaults, items, dry_run):
            covered |= defaults.covers()
        return trapped - covered

    async def _ensure_companion(
        self,
        namespace: str,
        defaults: ContainerDefaults,
        items: list[dict[str, Any]],
        dry_run: bool,
    ) -> bool:
        """Make the companion LimitRange ``dynquota`` of ``namespace`` hold exactly
        ``defaults`` (``items``: the namespace's LimitRanges, just listed): create it, or patch
        it conditionally on the resourceVersion read. Never writes one without the managed-by
        label (Warning ``ForeignLimitRange``), nor in dry run, nor while a quota write would be
        held (policies not listed, kill switch unknown or engaged, Lease). Returns whether
        ours is in place with ``defaults`` now. Raises ``KubeError`` (409 when it changed
        since the LIST: retried with the reconcile)."""
        assert self.limit_ranges is not None
        found, owned = owned_limit_range(items)
        if found is not None and not owned:
            await self._warn_once(
                ObjectRef(
                    "v1",
                    "LimitRange",
                    MANAGED_LIMIT_RANGE_NAME,
                    namespace,
                    str((found.get("metadata") or {}).get("uid") or ""),
                ),
                EventReason.FOREIGN_LIMIT_RANGE,
                f"a LimitRange {MANAGED_LIMIT_RANGE_NAME} without the label {MANAGED_BY_LABEL}="
                f"{MANAGED_BY_VALUE} exists, so dynquota leaves it alone and does not manage "
                "the defaults its policy asks for; rename it or add the label to hand it over",
                key=namespace,
            )
            return False
        if found is not None and defaults.matches((found.get("spec") or {}).get("limits")):
            self._companions[namespace] = defaults
            return True
        if dry_run or not self._may_write_companion():
            return False
        item = defaults.limits_item()
        version = str(((found or {}).get("metadata") or {}).get("resourceVersion") or "")
        if found is not None and not version:
            return False  # no precondition possible: never write blind
        try:
            if found is None:
                await self.limit_ranges.create_limit_range(namespace, item)
            else:
                await self.limit_ranges.patch_limit_range(namespace, item, version)
        except ForbiddenError as exc:
            # no RBAC (rbac.companionLimitRanges=false) or the namespace terminates: the
            # compute keys stay held (NeedsDefaultRequests); the quota itself goes on
            log.warning(
                "cannot write LimitRange %s/%s: %s", namespace, MANAGED_LIMIT_RANGE_NAME, exc
            )
            return False
        log.info(
            "%s LimitRange %s/%s: %s",
            "created" if found is None else "patched",
            namespace,
            MANAGED_LIMIT_RANGE_NAME,
            item,
        )
        self._companions[namespace] = defaults
        return True

    def _may_write_companion(self) -> bool:
        """Whether the write gate lets a companion LimitRange be written now."""
        return self.write_gate.may(LIMIT_RANGE)

    def _deleted_unseen(self, namespace: str) -> bool:
        """Whether the managed quota of ``namespace``, which a read just found absent, was
        deleted by someone else although its DELETED event has not arrived yet: the watch
        still holds it, dynquota is not deleting it, and no rule of dynquota's would
        (:meth:`_ours`). So a re-creation decided before that event is reported as one
        (``QuotaRecreated``), not as a first create (seen in CI under load)."""
        watched = self._watched.get(namespace)
        return (
            watched is not None
            and watched.managed
            and namespace not in self._own_deletes
            and not self._ours(watched)
        )

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
            if self.usage is not None:
                expiry = self.usage.next_expiry(namespace, now)
                if expiry is not None:
                    candidates.append(math.floor(expiry) + 1.0)
            steady = self.monotonic()
            for resource, profile in governance.profiles.items():
                drop = self.peaks.peak_expiry(
                    namespace, resource, steady, profile.downscale_cooldown
                )
                if drop is not None:  # monotonic instant -> the cluster's time
                    candidates.append(now + (drop - steady))
        future = [c for c in candidates if c > now]
        return min(future) if future else (now + 1.0 if candidates else None)
