"""The per-key metric series of each governed namespace (a part of the
:class:`~dynquota.operator.reporting.Reporter`, built alone in tests).

``dynquota_usage``, ``_tally``, ``_hard``, ``_target``, ``_maximum``, ``_drift``,
``_usage_above_maximum``, ``_exhaustion_seconds`` and ``_usage_unknown`` of a namespace are
functions of what its last decision looked at. A decision records that (:meth:`KeySeries.report`:
a dictionary store) and the series are set from it when they are read: when the registry
collects them (a scrape, a test reading the registry: :meth:`KeySeries.settle_for_collect`),
or before anything else changes them (a write's hard, a removal). Under churn a busy
namespace is decided several times a second and scraped every 15-60 s; setting its ~16 series
and fitting its forecasts at every decision was a third of the decision's CPU (issue 25,
docs/performance.md). What a scrape reads is what setting them at every decision gave.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final, NamedTuple

from prometheus_client import Gauge

from dynquota.kube.quotas import QuotaSnapshot
from dynquota.metrics import Metrics
from dynquota.operator.ports import NamespaceView
from dynquota.policy import Governance, resource_order, target, unit_for

__all__ = ["SETTLE_WAIT", "KeySeries", "UsageReport"]

SETTLE_WAIT: Final = 5.0
"""Seconds a collect in another thread waits for the event loop to set the pending series."""


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


class UsageReport(NamedTuple):
    """What the decision of a managed namespace looked at: its policy's governance, the counts
    per key (the tally, ``status.used`` and the usage ``U`` sized from) and the managed quota
    (``None``: none). Kept, not copied: the reporter does not change them afterwards."""

    governance: Governance
    tally: Mapping[str, int]
    status_used: Mapping[str, int]
    usage: Mapping[str, int]
    current: QuotaSnapshot | None
    dry_run: bool = False
    """Decided against a simulated quota: ``dynquota_hard`` is its hard (set apart)."""


def _inputs(resource: str) -> tuple[int, tuple[str, ...]]:
    """The key, among a namespace's series children, of what ``resource``'s series were last
    set from (``k[1][0]`` is the resource, as for its series)."""
    return (0, (resource, "inputs"))


class KeySeries:
    """The per-key series of every governed namespace, set when read.

    Args:
        metrics: the replica's metrics (its per-namespace gauges; :meth:`settle_for_collect`
            is hooked to their collect).
        view: the view of a namespace (its forecasts: ``dynquota_exhaustion_seconds``).
        monotonic: the clock of the views' trends (seconds; a read is a look at them).
    """

    def __init__(
        self,
        metrics: Metrics,
        view: Callable[[str], NamespaceView],
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.metrics = metrics
        self._view = view
        self._monotonic = monotonic
        self._metric_keys: dict[str, set[str]] = {}
        """Per namespace, the quota keys it has per-key metric series for."""
        # ns -> (gauge, labels after the namespace) -> [its child, the value last set]: a
        # namespace has about 16 series, most set to the value they hold (labels() and set()
        # take a lock each); every removal of a series goes through this class
        self._children: dict[str, dict[tuple[int, tuple[str, ...]], Any]] = {}
        # ns -> what its last report looked at (_last), and the same when the series are not
        # set from it yet (_due)
        self._last: dict[str, UsageReport] = {}
        self._due: dict[str, UsageReport] = {}
        # namespaces with a forecast series: every read looks at them again (growth that
        # stopped brings no decision, and only new samples flatten a trend)
        self._forecasting: set[str] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        metrics.before_collect(self.settle_for_collect)

    def governed(self, namespace: str) -> bool:
        """``namespace`` has per-key series (or a report due to set them)."""
        return namespace in self._metric_keys or namespace in self._due

    def report(self, namespace: str, report: UsageReport) -> None:
        """What the decision of a managed ``namespace`` looked at: its series are set from the
        last of these when read."""
        if self._loop is None:
            self._loop = _running_loop()
        self._due[namespace] = self._last[namespace] = report

    def wrote(self, namespace: str, quota: QuotaSnapshot) -> None:
        """The managed quota of ``namespace`` is ``quota`` after a write: its series show it
        (its hard, the keys it holds without a count) until the next report. The watch event
        of our own write need not bring a decision that reports it."""
        last = self._last.get(namespace)
        if last is not None:
            self._due[namespace] = self._last[namespace] = last._replace(current=quota)

    def settle(self, namespace: str | None = None) -> None:
        """Set the series of ``namespace`` (``None``: of every namespace) from its last
        :meth:`report`, if not done yet."""
        if namespace is None:
            for ns in self._forecasting:
                last = self._last.get(ns)
                if last is not None:
                    self._due.setdefault(ns, last)
            due, self._due = self._due, {}
            for ns, report in due.items():
                self._set_usage_series(ns, report)
        else:
            pending = self._due.pop(namespace, None)
            if pending is not None:
                self._set_usage_series(namespace, pending)

    def settle_for_collect(self) -> None:
        """:meth:`settle` every namespace, on the event loop the reports came from: called by
        the registry's collect, which a test or the demo may run in another thread (it waits
        up to :data:`SETTLE_WAIT` seconds for the loop; past that the series are collected as
        they stand)."""
        if not self._due and not self._forecasting:
            return
        loop = self._loop
        if loop is None or not loop.is_running() or _running_loop() is loop:
            self.settle()
            return
        done = threading.Event()

        def settle() -> None:
            try:
                self.settle()
            finally:
                done.set()

        try:
            loop.call_soon_threadsafe(settle)
        except RuntimeError:  # closed meanwhile: nothing mutates the series any more
            self.settle()
            return
        done.wait(SETTLE_WAIT)

    def set_hard(self, namespace: str, hard: Mapping[str, int]) -> None:
        """Set ``dynquota_hard`` of ``namespace`` per key (the key's units): a dry run's
        simulated quota (its last report's series first: they hold the real quota's)."""
        self.settle(namespace)
        for resource, value in hard.items():
            self._set(self.metrics.hard, namespace, unit_for(resource).base(value), resource)

    def remove_hard(self, namespace: str, keys: Iterable[str]) -> None:
        """Remove ``dynquota_hard`` of ``namespace`` (its quota was deleted) for the keys it
        has series for (``keys`` when none were recorded)."""
        self.settle(namespace)
        children = self._children.get(namespace, {})
        for resource in self._metric_keys.get(namespace, keys):
            self._drop(self.metrics.hard, namespace, resource)
            children.pop(_inputs(resource), None)  # its key's series are set again

    def forget(self, namespace: str, unknown: Iterable[str] | None = None) -> None:
        """Remove every per-key series of ``namespace`` (no policy governs it now), with its
        ``enforcement`` label; ``unknown``: the keys whose series to remove when none were
        recorded for it. A report not set yet is dropped."""
        self._due.pop(namespace, None)
        self._last.pop(namespace, None)
        self._forecasting.discard(namespace)
        keys = self._metric_keys.pop(namespace, unknown)
        if keys is not None:
            self._forget_series(namespace, keys)
        else:
            self.metrics.forget_enforcement(namespace)
        self._children.pop(namespace, None)

    def _set_usage_series(self, namespace: str, report: UsageReport) -> None:
        governance, tally, status_used, usage, current, dry_run = report
        m = self.metrics
        view = self._view(namespace)
        now = self._monotonic()
        keys = resource_order(governance.profiles)
        stale = self._metric_keys.get(namespace, set()) - set(keys)
        if stale:
            self._forget_series(namespace, stale)
        self._metric_keys[namespace] = set(keys)
        children = self._children.setdefault(namespace, {})
        forecasting = False
        for resource in keys:
            profile = governance.profiles[resource]
            hard = current.hard_int(resource) if current is not None else None
            if resource in usage:
                # a read is a look: usage unchanged since the last decision is what flattens
                # a trend that stopped growing (else its forecast stays until the next event)
                view.observe_trend(resource, usage[resource], profile.maximum, current, now)
            exhaustion = {limit: view.forecast(resource, limit) for limit in ("hard", "maximum")}
            if resource in usage and any(left is not None for left in exhaustion.values()):
                forecasting = True
            # every series of the key is a function of these: under churn most decisions
            # change one key, and each _set is a dictionary walk (kept with the series: a
            # removal of one of them drops it)
            inputs = (
                profile,
                hard,
                dry_run,
                usage.get(resource),
                tally.get(resource),
                status_used.get(resource),
                exhaustion["hard"],
                exhaustion["maximum"],
            )
            if children.get(_inputs(resource)) == inputs:
                continue
            children[_inputs(resource)] = inputs
            unit = unit_for(resource)
            if dry_run:
                pass  # its hard is the simulated quota's (set_hard)
            elif hard is not None:
                self._set(m.hard, namespace, unit.base(hard), resource)
            else:
                self._drop(m.hard, namespace, resource)  # (e.g. removed with KeyNotCounted)
            self._set(m.maximum, namespace, unit.base(profile.maximum), resource)
            if resource not in usage and hard is not None:
                # in the quota but not counted: held (docs/metrics.md)
                self._set(m.usage_unknown, namespace, 1, resource)
            else:
                self._drop(m.usage_unknown, namespace, resource)
            if resource not in usage:
                # not counted (no status.used: dry run, kill switch, a new quota, a stalled
                # quota controller) or not in the quota: no usage, target or forecast to show
                for gauge in (m.usage, m.target, m.above_maximum, m.tally, m.drift):
                    self._drop(gauge, namespace, resource)
                for limit in exhaustion:
                    self._drop(m.exhaustion, namespace, resource, limit)
                continue
            used = usage[resource]
            self._set(m.usage, namespace, unit.base(used), resource)
            self._set(
                m.target, namespace, unit.base(target(used, profile, unit.granularity)), resource
            )
            self._set(m.above_maximum, namespace, 1 if used > profile.maximum else 0, resource)
            for limit, left in exhaustion.items():
                if left is not None:
                    self._set(m.exhaustion, namespace, left, resource, limit)
                else:
                    self._drop(m.exhaustion, namespace, resource, limit)
            if resource in tally:
                self._set(m.tally, namespace, tally[resource], resource)
            else:
                self._drop(m.tally, namespace, resource)
            if resource in tally and resource in status_used:
                self._set(m.drift, namespace, tally[resource] - status_used[resource], resource)
            # (else the last drift stays: a dry run keeps every series, docs/metrics.md)
        if forecasting:
            self._forecasting.add(namespace)
        else:
            self._forecasting.discard(namespace)

    def _drop(self, gauge: Gauge, namespace: str, *labels: str) -> None:
        """Remove the series of ``gauge`` for ``(namespace, *labels)`` if this class set it
        (a remove of one never set costs prometheus-client two environment lookups)."""
        children = self._children.get(namespace)
        if children is not None and children.pop((id(gauge), labels), None) is not None:
            with contextlib.suppress(KeyError):
                gauge.remove(namespace, *labels)

    def _set(self, gauge: Gauge, namespace: str, value: float, *labels: str) -> None:
        """Set the series of ``gauge`` for ``(namespace, *labels)`` to ``value`` (made on
        first use; nothing is done when it holds that value)."""
        children = self._children.setdefault(namespace, {})
        entry = children.get((id(gauge), labels))
        if entry is None:
            entry = children[(id(gauge), labels)] = [gauge.labels(namespace, *labels), None]
        if entry[1] != value:
            entry[0].set(value)
            entry[1] = value

    def _forget_series(self, namespace: str, resources: Iterable[str]) -> None:
        """Remove the per-key series of ``namespace`` for ``resources``."""
        resources = tuple(resources)
        children = self._children.get(namespace)
        if children is not None:
            for key in [k for k in children if k[1][0] in resources]:
                del children[key]
            if not children:
                del self._children[namespace]
        self.metrics.forget_namespace(namespace, resources)
