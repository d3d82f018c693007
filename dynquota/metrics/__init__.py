"""Prometheus metrics of the operator (prometheus-client), served on ``/metrics``.

Every metric lives on the registry given to :class:`Metrics` (a fresh one by default), so
several operators can run in one process (tests) without clashing. Names and labels:

========================================== ======= =====================================
name                                        type    labels
========================================== ======= =====================================
dynquota_usage                              gauge   namespace, resource (U, a count)
dynquota_tally                              gauge   namespace, resource (informer count)
dynquota_hard                               gauge   namespace, resource (spec.hard)
dynquota_target                             gauge   namespace, resource (T(U))
dynquota_maximum                            gauge   namespace, resource (the policy maximum)
dynquota_drift                              gauge   namespace, resource (tally - status.used)
dynquota_usage_above_maximum                gauge   namespace, resource (1 when U > maximum)
dynquota_exhaustion_seconds                 gauge   namespace, resource, limit (hard/maximum):
                                                    seconds until usage reaches it on its
                                                    recent trend (0: there; no series: not
                                                    growing or > 7 days; dynquota.policy.
                                                    forecast)
dynquota_resizes_total                      counter direction (up/down), reason
dynquota_quota_writes_total                 counter verb (create/patch/delete)
dynquota_quota_deletions_total              counter cause (kill-switch/unmanaged/dry-run)
dynquota_wakes_total                        counter kind (ReplicaSet, StatefulSet, DaemonSet, Job)
dynquota_overrides_active                   gauge   namespace (1 while its override is active;
                                                    no series otherwise)
dynquota_kill_switch_engaged                gauge   -
dynquota_kill_switch_state                  gauge   state (engaged/released/unknown: 1 for
                                                    the current one; unknown: nothing written)
dynquota_leader                             gauge   - (1 when this replica may write)
dynquota_frozen_namespaces                  gauge   - (matched by an invalid policy)
dynquota_managed_namespaces                 gauge   -
dynquota_quota_controller_stalled           gauge   signal (copy: spec.hard not copied into
                                                    status.hard; recount: status.used apart
                                                    from the objects): 1 while it shows a
                                                    stalled quota controller
dynquota_reconcile_duration_seconds         histo   -
dynquota_reconciles_total                   counter result (ok/dry-run/retry/invalid/standby/
                                                    held)
dynquota_workqueue_depth                    gauge   -
dynquota_watch_restarts_total               counter resource (informer retries after errors)
dynquota_relists_total                      counter resource (full relists after 410 Gone)
dynquota_watch_cycles_total                 counter resource
dynquota_informer_synced                    gauge   resource
dynquota_informer_objects                   gauge   resource
dynquota_api_requests_total                 counter verb, resource, code
dynquota_api_errors_total                   counter verb, resource, code (code 0: no answer;
                                                    404 not counted: see below)
dynquota_api_not_found_total                counter verb, resource (404: expected, e.g. a
                                                    namespace without its quota yet)
dynquota_api_conflicts_total                counter verb, resource
dynquota_events_total                       counter reason
dynquota_writes_held_total                  counter reason (policies-unknown,
                                                    informers-not-synced, informers-stale,
                                                    kill-switch-unknown,
                                                    kill-switch-release-unconfirmed,
                                                    lease-not-held, unmanage-brake,
                                                    tarpit-unknown)
dynquota_tarpitted                          gauge   namespace, enforcement (enforced: listed
                                                    in the tarpit FlowSchema; dry-run:
                                                    decided, not written): 1 while the
                                                    namespace is in the APF tarpit (no
                                                    series otherwise)
dynquota_quota_write_conflicts_total        counter outcome (retried/gave-up)
dynquota_build_info                         gauge   version, python_version,
                                                    python_implementation, kopf_version,
                                                    kubernetes_asyncio_version,
                                                    pydantic_version,
                                                    prometheus_client_version (value 1)
process_*, python_info, python_gc_*         -       prometheus-client's process, platform
                                                    and GC collectors
========================================== ======= =====================================

Every per-namespace series (``dynquota_usage`` ... ``dynquota_overrides_active``: the gauges
with a ``namespace`` label) also carries ``enforcement`` (``enforced``, ``dry-run``,
``unknown``), set per namespace with :meth:`Metrics.set_enforcement`
(:class:`dynquota.metrics.fleet.EnforcementLabels`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.aiohttp import make_aiohttp_handler
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from dynquota import __version__
from dynquota.metrics.fleet import EnforcementLabels, FleetRegistry, register_build_and_process

__all__ = ["InformerCollector", "Metrics", "MetricsServer"]

_NR = ("namespace", "resource")


class Metrics:
    """The operator's metrics on ``registry`` (a new :class:`~dynquota.metrics.fleet.
    FleetRegistry` if omitted), with ``dynquota_build_info`` and the process collectors."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else FleetRegistry()
        r = self.registry
        register_build_and_process(r, __version__)
        # per-namespace gauges: exported by `self._enforcement` with the `enforcement` label
        n = None
        self.usage = Gauge("dynquota_usage", "Usage U = max(tally, status.used)", _NR, registry=n)
        self.tally = Gauge("dynquota_tally", "Objects counted by the informers", _NR, registry=n)
        self.hard = Gauge(
            "dynquota_hard",
            "spec.hard of the managed quota (simulated in dry run)",
            _NR,
            registry=n,
        )
        self.target = Gauge("dynquota_target", "Target T(U) from the profile", _NR, registry=n)
        self.maximum = Gauge(
            "dynquota_maximum", "Maximum of the governing policy's profile", _NR, registry=n
        )
        self.drift = Gauge("dynquota_drift", "Informer tally minus status.used", _NR, registry=n)
        self.above_maximum = Gauge(
            "dynquota_usage_above_maximum", "1 when usage exceeds the maximum", _NR, registry=n
        )
        self.exhaustion = Gauge(
            "dynquota_exhaustion_seconds",
            "Seconds until usage reaches the limit (hard, maximum) on its recent trend",
            (*_NR, "limit"),
            registry=n,
        )
        self.usage_unknown = Gauge(
            "dynquota_usage_unknown",
            "1 while a status-driven key of the managed quota has no status.used (held at its "
            "hard; removed with KeyNotCounted if it stays so)",
            _NR,
            registry=n,
        )
        self.resizes = Counter(
            "dynquota_resizes", "Changes of spec.hard", ("direction", "reason"), registry=r
        )
        self.quota_writes = Counter(
            "dynquota_quota_writes", "Writes of managed quotas", ("verb",), registry=r
        )
        self.quota_deletions = Counter(
            "dynquota_quota_deletions",
            "Managed quotas deleted by dynquota (kill switch, namespace no longer managed, "
            "released by dry run)",
            ("cause",),
            registry=r,
        )
        self.wakes = Counter(
            "dynquota_wakes",
            "Workloads woken after a raise their controller's creates were refused before "
            "(the wake mark set)",
            ("kind",),
            registry=r,
        )
        self.overrides_active = Gauge(
            "dynquota_overrides_active",
            "1 per namespace whose managed quota is under a tenant override (no series otherwise)",
            ("namespace",),
            registry=n,
        )
        self._enforcement = EnforcementLabels(
            (self.usage, self.tally, self.hard, self.target, self.maximum, self.drift,
             self.above_maximum, self.exhaustion, self.usage_unknown, self.overrides_active)
        )  # fmt: skip
        r.register(self._enforcement)
        self.kill_switch = Gauge(
            "dynquota_kill_switch_engaged", "1 while the kill switch is engaged", registry=r
        )
        self.kill_switch_state = Gauge(
            "dynquota_kill_switch_state",
            "1 for the kill switch's current state (engaged, released, unknown)",
            ("state",),
            registry=r,
        )
        self.kill_switch_state.labels("unknown").set(1)
        self.tarpitted = Gauge(
            "dynquota_tarpitted",
            "1 per namespace in the write-rate governor's APF tarpit (no series otherwise)",
            ("namespace", "enforcement"),
            registry=r,
        )
        self.leader = Gauge("dynquota_leader", "1 while this replica may write", registry=r)
        self.frozen = Gauge(
            "dynquota_frozen_namespaces", "Namespaces matched by an invalid policy", registry=r
        )
        self.managed = Gauge(
            "dynquota_managed_namespaces", "Namespaces governed by a policy", registry=r
        )
        self.quota_controller_stalled = Gauge(
            "dynquota_quota_controller_stalled",
            "1 while the signal (copy, recount) shows a stalled quota controller",
            ("signal",),
            registry=r,
        )
        for signal in ("copy", "recount"):
            self.quota_controller_stalled.labels(signal).set(0)
        self.reconcile_seconds = Histogram(
            "dynquota_reconcile_duration_seconds",
            "Time of one namespace decision, including its writes",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
            registry=r,
        )
        self.reconciles = Counter(
            "dynquota_reconciles", "Namespace decisions by result", ("result",), registry=r
        )
        self.queue_depth = Gauge(
            "dynquota_workqueue_depth", "Namespaces queued or in progress", registry=r
        )
        self.api_requests = Counter(
            "dynquota_api_requests",
            "API requests made by the operator",
            ("verb", "resource", "code"),
            registry=r,
        )
        self.api_errors = Counter(
            "dynquota_api_errors",
            "API requests that failed (code 0: no answer)",
            ("verb", "resource", "code"),
            registry=r,
        )
        self.api_not_found = Counter(
            "dynquota_api_not_found",
            "404 answers (expected: reads of a quota not created yet, deletes of one gone)",
            ("verb", "resource"),
            registry=r,
        )
        self.api_conflicts = Counter(
            "dynquota_api_conflicts", "409 Conflict answers", ("verb", "resource"), registry=r
        )
        self.events = Counter("dynquota_events", "Events posted", ("reason",), registry=r)
        self.writes_held = Counter(
            "dynquota_writes_held",
            "Managed-quota writes held for want of positive knowledge (policies listed, "
            "informers synced and healthy, kill switch read, Lease valid)",
            ("reason",),
            registry=r,
        )
        self.write_conflicts = Counter(
            "dynquota_quota_write_conflicts",
            "409 Conflicts on conditional managed-quota writes (retried: read and decided "
            "again; gave-up: backed off after the last retry)",
            ("outcome",),
            registry=r,
        )

        bk = ("budget", "resource")
        self.budget_hard = Gauge(
            "dynquota_budget_hard", "A QuotaBudget's hard per key (base unit)", bk, registry=r
        )
        self.budget_granted = Gauge(
            "dynquota_budget_granted",
            "Sum over a budget's namespaces of max(spec.hard, status.hard, status.used) after "
            "its last pass (base unit)",
            bk,
            registry=r,
        )
        self.budget_used = Gauge(
            "dynquota_budget_used",
            "Sum of a budget's namespaces' status.used (base unit)",
            bk,
            registry=r,
        )
        self.budget_rebalances = Counter(
            "dynquota_budget_rebalances",
            "Budget passes that wrote slices",
            ("budget",),
            registry=r,
        )

    def before_collect(self, hook: Callable[[], None]) -> None:
        """Call ``hook`` before the per-namespace gauges are collected (a scrape, a test's
        read of the registry), in the collecting thread: their writer may defer setting them
        until they are read (:meth:`dynquota.operator.key_series.KeySeries.settle_for_collect`)."""
        self._enforcement.before_collect.append(hook)

    def set_enforcement(self, namespace: str, mode: str) -> None:
        """Label every per-namespace series of ``namespace`` with ``enforcement=mode``:
        ``enforced`` (its managed quota is written) or ``dry-run`` (decided against a
        simulated quota; ``dynquota_hard`` is then the simulated hard). Until it is called a
        namespace's series say ``unknown``. Raises ``ValueError`` for another mode."""
        self._enforcement.set(namespace, mode)

    def enforcement(self, namespace: str) -> str:
        """The ``enforcement`` label the series of ``namespace`` carry."""
        return self._enforcement.mode(namespace)

    def forget_enforcement(self, namespace: str) -> None:
        """Drop the ``enforcement`` mode of ``namespace`` when none of its series is left."""
        self._enforcement.forget_if_unused(namespace)

    def forget_budget(self, budget: str) -> None:
        """Remove the series of a deleted QuotaBudget."""
        for gauge in (self.budget_hard, self.budget_granted, self.budget_used):
            for labels in [s.labels for m in gauge.collect() for s in m.samples]:
                if labels.get("budget") == budget:
                    with contextlib.suppress(KeyError):
                        gauge.remove(budget, labels["resource"])
        with contextlib.suppress(KeyError):
            self.budget_rebalances.remove(budget)

    def observe_api(self, verb: str, resource: str, status: int) -> None:
        """Count one API call (an :data:`~dynquota._k8s.request.ApiCallObserver`).

        ``status``: the HTTP code, 200 on success, 0 without an answer. A 404 (an expected
        not-found read or delete) counts in ``dynquota_api_not_found_total``, not as an error.
        """
        code = str(status)
        self.api_requests.labels(verb, resource, code).inc()
        if status == 404:
            self.api_not_found.labels(verb, resource).inc()
        elif status != 200:
            self.api_errors.labels(verb, resource, code).inc()
        if status == 409:
            self.api_conflicts.labels(verb, resource).inc()
        if resource == "resourcequotas" and status == 200 and verb in ("create", "patch", "delete"):
            self.quota_writes.labels(verb).inc()

    def forget_namespace(self, namespace: str, resources: Iterable[str]) -> None:
        """Remove the per-namespace series of ``namespace`` (deleted or unmanaged) for the
        quota keys ``resources``. Values of the per-key gauges are in each key's base unit
        (objects, cores, bytes)."""
        resources = tuple(resources)
        gauges = (self.usage, self.tally, self.hard, self.target, self.maximum, self.drift)
        for gauge in (*gauges, self.usage_unknown):
            for resource in resources:
                with contextlib.suppress(KeyError):
                    gauge.remove(namespace, resource)
        for resource in resources:
            with contextlib.suppress(KeyError):
                self.above_maximum.remove(namespace, resource)
            for limit in ("hard", "maximum"):
                with contextlib.suppress(KeyError):
                    self.exhaustion.remove(namespace, resource, limit)
        self._enforcement.forget_if_unused(namespace)


class InformerCollector(Collector):
    """Exports the informers' own counters at scrape time.

    ``stats`` returns ``{resource: {"restarts", "relists", "watch_cycles", "synced",
    "objects", ...}}`` (:meth:`dynquota.kube.informer.UsageWatcher.stats`).
    """

    def __init__(self, stats: Callable[[], Mapping[str, Mapping[str, Any]]]) -> None:
        self._stats = stats

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        """Yield the metric families (called by the registry)."""
        families: dict[str, CounterMetricFamily | GaugeMetricFamily] = {
            "restarts": CounterMetricFamily(
                "dynquota_watch_restarts",
                "Informer list/watch retries after errors",
                labels=["resource"],
            ),
            "relists": CounterMetricFamily(
                "dynquota_relists", "Informer full relists after 410 Gone", labels=["resource"]
            ),
            "watch_cycles": CounterMetricFamily(
                "dynquota_watch_cycles", "Informer watch cycles completed", labels=["resource"]
            ),
            "synced": GaugeMetricFamily(
                "dynquota_informer_synced", "1 once the first list is applied", labels=["resource"]
            ),
            "objects": GaugeMetricFamily(
                "dynquota_informer_objects", "Objects held by the tally", labels=["resource"]
            ),
        }
        for resource, stats in self._stats().items():
            for key, family in families.items():
                family.add_metric([resource], float(stats.get(key) or 0))
        yield from families.values()


class MetricsServer:
    """``GET /metrics`` on ``host:port`` with aiohttp (port 0: a free port, see ``port``).

    The handler is prometheus-client's own (``prometheus_client.aiohttp``): the text format,
    or OpenMetrics when the scraper asks for it (``Accept``), gzip when it accepts it, and
    ``name[]`` filters, as every prometheus-client exporter answers.
    """

    def __init__(self, metrics: Metrics, host: str = "0.0.0.0", port: int = 8080) -> None:
        self._metrics = metrics
        self._host = host
        self.port = port
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        """Start serving. Raises ``OSError`` if the port is taken."""
        app = web.Application()
        app.router.add_get("/metrics", make_aiohttp_handler(self._metrics.registry))
        self._runner = web.AppRunner(app, handle_signals=False, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self._host, self.port)
        await site.start()
        if self.port == 0 and site._server is not None:
            sockets = getattr(site._server, "sockets", None) or []
            if sockets:
                self.port = int(sockets[0].getsockname()[1])

    async def stop(self) -> None:
        """Stop serving; idempotent."""
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
