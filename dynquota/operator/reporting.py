"""The reporter: metrics, Events, warn-once and the per-namespace view (a part of
:class:`~dynquota.operator.assembly.Operator`, built alone in tests).

Events are posted only when the write gate lets an Event go (the Lease). A Warning whose cause
lasts is posted at most once an hour per ``(namespace or object, reason, cause)``
(:meth:`Reporter.warn_once`). The reporter owns the per-namespace
:class:`~dynquota.operator.ports.NamespaceView` (``plan``, the demo, tests), the per-key metric
series of each namespace and the active-override gauge.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Final

from cachetools import TTLCache

from dynquota.kube.events import EventType, ObjectRef
from dynquota.kube.quotas import MANAGED_QUOTA_NAME, QuotaSnapshot
from dynquota.metrics import Metrics
from dynquota.names import EventReason
from dynquota.operator.key_series import KeySeries, UsageReport
from dynquota.operator.ports import WARNING_TTL, EventSink, NamespaceView
from dynquota.operator.write_gate import EVENT, WriteGate
from dynquota.policy import (
    OVERRIDE,
    OVERRIDE_GRANTED_AT,
    RECURRING_REASONS,
    TRACKED_RESOURCES,
    Decision,
    Governance,
    QuotaState,
    resource_order,
    target,
    unit_for,
)
from dynquota.policy.decide import reject_unmanaged_override
from dynquota.quantity import QuantityError, parse_quantity

__all__ = ["NEW_VALUE_AFTER", "Reporter"]

log = logging.getLogger("dynquota.operator")

NEW_VALUE_AFTER: Final = 60.0
"""Seconds after a recurring Warning before one about a different written value is posted."""


class Reporter:
    """Metrics, Events and the per-namespace view.

    Args:
        events: where Events are posted.
        write_gate: asked before every Event (:data:`~dynquota.operator.write_gate.EVENT`).
        metrics: the replica's metrics.
        clock: the cluster's time, seconds since the epoch (the views' ``at``; the warn-once
            cache's hour).
        watched: the managed quota of a namespace as its watch delivered it last (the uid
            of the ``Woken`` Event's object).
        monotonic: the clock of the views' trends (seconds that never step; default
            ``time.monotonic``): a read of the series looks at them.
    """

    def __init__(
        self,
        events: EventSink,
        write_gate: WriteGate,
        metrics: Metrics,
        clock: Callable[[], float],
        *,
        watched: Callable[[str], QuotaSnapshot | None],
        monotonic: Callable[[], float] | None = None,
    ) -> None:
        self.events = events
        self.write_gate = write_gate
        self.metrics = metrics
        self.clock = clock
        self.watched = watched
        self.views: dict[str, NamespaceView] = {}
        self.series = KeySeries(metrics, self.view, monotonic or time.monotonic)
        """The per-key series of each namespace, set when read."""
        self._overrides: set[str] = set()
        # keyed by (namespace or object, reason, cause): never by message, which carries usage
        # and tenant text
        self._warned: TTLCache[tuple[str, str, str], tuple[str, float]] = TTLCache(
            maxsize=20000, ttl=WARNING_TTL, timer=clock
        )
        self.on_decision: Callable[[str, Decision], None] | None = None
        """Called with every decision reported (the demo's table)."""
        self.on_reported: Callable[[str, QuotaSnapshot | None], None] | None = None
        """Called with the managed quota after every decision reported, and with a foreign one
        (:meth:`report_foreign`) (the tenant projection's writer,
        :mod:`dynquota.operator.applied`; the runtime sets it)."""

    def view(self, namespace: str) -> NamespaceView:
        """The view of ``namespace`` (made empty on first use)."""
        view = self.views.get(namespace)
        if view is None:
            view = self.views[namespace] = NamespaceView()
        return view

    def forget(self, namespace: str) -> None:
        """``namespace`` was deleted: its view and metric series go."""
        self.views.pop(namespace, None)
        self.not_governed(namespace, TRACKED_RESOURCES)

    def not_governed(self, namespace: str, unknown: Iterable[str] | None = None) -> None:
        """No policy governs ``namespace`` now (unmanaged, excluded, being deleted): its
        per-namespace series go at once, with their ``enforcement`` label; its view stays.
        ``unknown``: the keys whose series to remove when none were recorded for it. Cheap
        when it has none (dictionary lookups)."""
        if namespace in self._overrides:
            self._overrides.discard(namespace)
            with contextlib.suppress(KeyError):
                self.metrics.overrides_active.remove(namespace)
        self.series.forget(namespace, unknown)

    def quota_deleted(self, namespace: str, why: str) -> None:
        """dynquota deleted the managed quota of ``namespace`` (``why``): the view says so and
        its hard series go."""
        view = self.record_view(namespace, "delete", (why,))
        view.hard = {}
        self.series.remove_hard(namespace, TRACKED_RESOURCES)

    # -- reporting -------------------------------------------------------------------------------

    def report_usage(
        self,
        namespace: str,
        governance: Governance,
        tally: Mapping[str, int],
        status_used: Mapping[str, int],
        usage: Mapping[str, int],
        current: QuotaSnapshot | None,
        *,
        dry_run: bool = False,
    ) -> None:
        """Record what ``namespace``'s usage is in its view (``dry_run``: decided against a
        simulated quota); its per-key gauges, in each key's base unit (objects, cores,
        bytes), are set from these when next read
        (:class:`~dynquota.operator.key_series.KeySeries`)."""
        if governance.kind != "managed" and self.series.governed(namespace):
            # (only the series set from here need removing: none for a namespace not in it)
            self.not_governed(namespace)
        view = self.view(namespace)
        view.usage = dict(usage)
        view.tally = dict(tally)
        view.status_used = dict(status_used)
        view.target = {
            r: target(usage[r], p, unit_for(r).granularity)
            for r, p in governance.profiles.items()
            if r in usage
        }
        if governance.kind == "managed":
            looked = UsageReport(
                governance, view.tally, view.status_used, view.usage, current, dry_run
            )
            self.series.report(namespace, looked)

    async def report_decision(
        self,
        namespace: str,
        governance: Governance,
        decision: Decision,
        quota: QuotaSnapshot | None,
        simulated: QuotaState | None,
    ) -> None:
        """Log, count and post ``decision`` for ``namespace`` and record it in the view:
        ``quota`` is the managed quota afterwards (``None``: none), ``simulated`` the one a
        dry run keeps in memory (its hard and override are reported instead)."""
        # the per-namespace series say whether their hard is enforced or a dry run's (a
        # namespace no policy governs has none: report_usage removed them)
        if governance.kind == "managed":
            self.metrics.set_enforcement(namespace, "dry-run" if decision.dry_run else "enforced")
        if decision.action == "delete" and not decision.dry_run:
            pass  # logged, and its hard series removed, by the deleter
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
                    old_q, new_q = parse_quantity(change.old), parse_quantity(change.new)
                    direction = "up" if new_q > old_q else "down"
                    self.metrics.resizes.labels(direction, change.kind).inc()
            if quota is not None and governance.kind == "managed" and decision.action != "nothing":
                self.series.wrote(namespace, quota)
        elif governance.kind == "managed":
            # the simulated quota's hard (a decision that changes nothing carries none: the
            # series went when the enforced quota was released, and must not stay away)
            simulated_hard = simulated.hard if simulated is not None else {}
            hard: dict[str, int] = {}
            for resource in resource_order(governance.profiles):
                value = decision.hard.get(resource)
                if value is None and resource in simulated_hard:
                    value = unit_for(resource).units(simulated_hard[resource])
                if value is not None:
                    hard[resource] = value
            self.series.set_hard(namespace, hard)
        active = quota is not None and OVERRIDE_GRANTED_AT in quota.annotations
        if decision.dry_run:
            active = simulated is not None and (OVERRIDE_GRANTED_AT in simulated.annotations)
        if active:
            self._overrides.add(namespace)
            self.metrics.overrides_active.labels(namespace).set(1)
        elif namespace in self._overrides:
            self._overrides.discard(namespace)
            with contextlib.suppress(KeyError):
                self.metrics.overrides_active.remove(namespace)
        ref = ObjectRef.quota(namespace, MANAGED_QUOTA_NAME, quota.uid if quota else "")
        for event in decision.events:
            if event.type != "Warning":
                await self.emit(ref, event.type, event.reason, event.message)
            elif event.reason in RECURRING_REASONS:
                await self.warn_once(
                    ref,
                    event.reason,
                    event.message,
                    key=namespace,
                    cause=event.cause,
                    value=event.value,
                )
            else:
                await self.warn(ref, event.reason, event.message)
        view = self.record_view(namespace, decision.action, decision.reasons or decision.notes)
        view.dry_run = decision.dry_run
        view.governance = f"{governance.kind}: {governance.reason}"
        if decision.dry_run:
            view.hard = {
                r: unit_for(r).units(v)
                for r, v in (simulated.hard.items() if simulated else ())
                if r in governance.profiles or r in TRACKED_RESOURCES
            }
        elif quota is not None:
            keys = resource_order(set(governance.profiles) | set(TRACKED_RESOURCES))
            view.hard = {r: v for r in keys if (v := quota.hard_int(r)) is not None}
        else:
            view.hard = {}
        if self.on_decision is not None:
            self.on_decision(namespace, decision)
        if self.on_reported is not None:
            self.on_reported(namespace, quota)

    def record_view(self, namespace: str, action: str, reasons: Iterable[str]) -> NamespaceView:
        """Record ``action`` and its ``reasons`` in the view of ``namespace`` (a ``nothing``
        keeps the last action shown); returns the view."""
        view = self.view(namespace)
        if action != "nothing" or not view.action:
            view.action = action
            view.reasons = tuple(reasons)
            view.at = self.clock()
        return view

    async def report_foreign(self, quota: QuotaSnapshot) -> None:
        """A quota named ``dynquota`` without the managed-by label: left alone, said once an
        hour (with a rejected override request on it), and handed to :attr:`on_reported` (the
        tenant's view says the quota is not dynquota's)."""
        ref = ObjectRef.quota(quota.namespace, quota.name, quota.uid)
        await self.warn_once(
            ref,
            EventReason.FOREIGN_QUOTA,
            f"a ResourceQuota named {MANAGED_QUOTA_NAME} without the label "
            "app.kubernetes.io/managed-by=dynquota exists: dynquota leaves it alone and does not "
            "manage this namespace",
            key=quota.namespace,
        )
        request = quota.annotations.get(OVERRIDE)
        if request is not None:
            event = reject_unmanaged_override(quota.name, request)
            await self.warn_once(ref, event.reason, event.message, key=quota.namespace)
        if self.on_reported is not None:
            self.on_reported(quota.namespace, quota)

    async def report_woken(self, namespace: str, names: list[str], why: str) -> None:
        """The waker's Event (:mod:`dynquota.operator.wake`): a Normal ``Woken`` on the managed
        quota naming the workloads marked (``"Kind/name"``) and the raise."""
        quota = self.watched(namespace)
        shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
        await self.emit(
            ObjectRef.quota(namespace, MANAGED_QUOTA_NAME, quota.uid if quota else ""),
            "Normal",
            EventReason.WOKEN,
            f"woke {len(names)} workload(s) whose pod creates this quota refused ({shown}): "
            f"the raise {why} made room, so they retry now instead of at the end of their "
            "controller's backoff",
        )

    async def emit(self, ref: ObjectRef, type_: EventType, reason: str, message: str) -> None:
        """Post an Event (when the write gate lets one go), counted by reason."""
        if not self.write_gate.may(EVENT):
            return
        if await self.events.emit(ref, type_, reason, message):
            self.metrics.events.labels(reason).inc()

    async def warn(
        self, ref: ObjectRef, reason: str, message: str, *, logged: bool = False
    ) -> None:
        """Log a Warning at WARNING (unless the caller ``logged`` it already) and post it as
        an Event (leader only)."""
        if not self.write_gate.may(EVENT):
            return
        if not logged:
            where = f"{ref.namespace}/{ref.name}" if ref.namespace else ref.name
            log.warning("%s on %s %s: %s", reason, ref.kind, where, message)
        await self.emit(ref, "Warning", reason, message)

    async def warn_once(
        self,
        ref: ObjectRef,
        reason: str,
        message: str,
        key: str,
        *,
        cause: str = "",
        value: str = "",
        logged: bool = False,
    ) -> None:
        """:meth:`warn`, unless a Warning with this ``reason`` about this ``cause`` and this
        ``value`` was posted for ``key`` within the last hour (Warnings that recur while their
        cause lasts).

        Keyed on ``(key, reason, cause)``, never on ``message``: a message changes with usage
        and with what a tenant writes, and a tenant-chosen key would let the cache grow. The
        entry holds a digest of the last ``value`` (e.g. an invalid annotation's text) and when
        it was posted: a different value is reported once :data:`NEW_VALUE_AFTER` seconds have
        passed (a typo corrected into another is answered; a tenant cycling values gets at
        most one Warning a minute), one bounded entry per key all the same.
        """
        if not self.write_gate.may(EVENT):
            return
        cache_key = (key, reason, cause)
        digest = hashlib.sha256(value.encode()).hexdigest()[:16]
        seen = self._warned.get(cache_key)
        now = self.clock()
        if seen is not None and (seen[0] == digest or now - seen[1] < NEW_VALUE_AFTER):
            return
        self._warned[cache_key] = (digest, now)
        await self.warn(ref, reason, message, logged=logged)
