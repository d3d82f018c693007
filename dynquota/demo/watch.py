"""What the demo shows while it runs: the live table, the operator's decisions, the history
of each ``hard``, the operator's wakes (its ``Woken`` Events), the points of the picture and
the closing summary.

:class:`DemoWatch` is the watching half of :class:`dynquota.demo.scenario.Demo`; it reads the
cluster with the sync ``kubernetes`` client (:class:`~dynquota.testing.operator.OperatorCluster`)
and the in-process operator's own view.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from kubernetes.client.exceptions import ApiException

from dynquota.demo.picture import Sample
from dynquota.policy import Decision
from dynquota.quantity import parse_quantity
from dynquota.testing.operator import OperatorCluster, OperatorThread

__all__ = ["HELM", "LABEL", "NAMESPACES", "RUNAWAY", "WEB", "DemoWatch", "Show", "Timing"]

WEB, RUNAWAY, HELM = "demo-web", "demo-runaway", "demo-helm"
NAMESPACES = (WEB, RUNAWAY, HELM)
LABEL = {"dynquota.io/demo": "true"}


@dataclass
class Timing:
    """Cooldowns and sizes of one demo run (``fast`` shortens every wait for tests)."""

    up: int = 10
    down: int = 30
    ttl: int = 30
    pods_max: int = 150
    cms_max: int = 300
    burst: int = 200
    web_replicas: int = 40
    secrets_max: int = 40

    @classmethod
    def fast(cls) -> Timing:
        """About half the run time: 4 s cooldowns, smaller runaway cap and burst."""
        return cls(
            up=4,
            down=12,
            ttl=12,
            pods_max=60,
            cms_max=150,
            burst=100,
            web_replicas=20,
            secrets_max=28,
        )


@dataclass
class Show:
    """Terminal output: timestamped lines and the live table."""

    start: float = field(default_factory=time.monotonic)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def line(self, who: str, text: str) -> None:
        with self.lock:
            print(f"[{time.monotonic() - self.start:6.1f}s] {who:8} {text}", flush=True)

    def table(self, rows: list[tuple[str, str, str, str, str]]) -> None:
        header = ("NAMESPACE", "RESOURCE", "USAGE", "HARD", "LAST ACTION")
        widths = [max(len(r[i]) for r in [header, *rows]) for i in range(4)]
        with self.lock:
            for row in [header, *rows]:
                cells = [c.ljust(widths[i]) for i, c in enumerate(row[:4])]
                print("    " + "  ".join(cells) + "  " + row[4][:90], flush=True)


class DemoWatch:
    """The demo's view of one run against a started control plane (the base of
    :class:`dynquota.demo.scenario.Demo`)."""

    def __init__(self, cluster: OperatorCluster, timing: Timing, show: Show) -> None:
        self.c = cluster
        self.t = timing
        self.show = show
        self.op: OperatorThread | None = None
        self.history: dict[tuple[str, str], list[str]] = {}
        self.wakes = 0
        self._woken: set[str] = set()
        self._stop = threading.Event()
        self._last_table: list[tuple[str, str, str, str, str]] = []

    # -- the operator's view -------------------------------------------------------------------

    def on_decision(self, namespace: str, decision: Decision) -> None:
        if namespace not in NAMESPACES:
            return
        if decision.action != "nothing":
            text = "; ".join(decision.reasons or decision.notes)
            if not text:  # no resize: only dynquota's annotations change (e.g. the tenant line)
                keys = sorted({*decision.set_annotations, *decision.remove_annotations})
                text = "annotations only: " + ", ".join(keys)
            self.show.line("operator", f"{decision.action} {namespace}: {text}")

    def rows(self) -> list[tuple[str, str, str, str, str]]:
        rows = []
        views = self.op.runtime.operator.reporter.views if self.op and self.op.runtime else {}
        for ns in NAMESPACES:
            hard = self.c.hard(ns) or {}
            view = views.get(ns)
            for resource in ("pods", "configmaps"):
                usage = str(view.usage.get(resource, "-")) if view else "-"
                action = ""
                if view is not None and view.action:
                    reasons = [r for r in view.reasons if r.split(" ")[1:2] == [resource]]
                    if reasons:
                        action = f"{view.action}: {reasons[0]}"
                    elif view.action == "delete":
                        action = f"delete: {(view.reasons or ('',))[0]}"
                rows.append((ns, resource, usage, hard.get(resource, "-"), action))
        return rows

    def print_table(self, force: bool = False) -> None:
        rows = self.rows()
        if force or rows != self._last_table:
            self._last_table = rows
            self.show.table(rows)

    # -- background: history, wakes, table -------------------------------------------------------

    def watch(self) -> None:
        """Record every hard value, say what the operator woke, print the table."""
        last_print = 0.0
        while not self._stop.is_set():
            try:
                for ns in NAMESPACES:
                    hard = self.c.hard(ns) or {}
                    for resource in ("pods", "configmaps"):
                        value = hard.get(resource, "none")
                        series = self.history.setdefault((ns, resource), [])
                        if not series or series[-1] != value:
                            series.append(value)
                    self.report_wakes(ns)
                if time.monotonic() - last_print >= 5:
                    last_print = time.monotonic()
                    self.print_table()
            except (ApiException, OSError) as exc:  # keep watching; the demo goes on
                self.show.line("demo", f"(watch: {exc})")
            self._stop.wait(0.3)

    def sampled(self, ns: str, resource: str) -> int:
        """The last hard of ``resource`` in ``ns`` the watch thread recorded (0: none yet)."""
        series = self.history.get((ns, resource)) or ["0"]
        return int(series[-1]) if series[-1].isdigit() else 0

    def report_wakes(self, ns: str) -> None:
        """Print each new ``Woken`` Event of ``ns``: the operator woke the ReplicaSets the quota
        refused after a raise (the ReplicaSet controller's backoff is not woken by a quota
        change; docs/operator.md)."""
        for event in self.c.events(ns, "Woken"):
            uid = str(event.metadata.uid)
            if uid in self._woken:
                continue
            self._woken.add(uid)
            self.wakes += 1
            self.show.line("demo", f"dynquota woke {ns}: {event.message}")

    def observe_series(self) -> Sample:
        """The demo namespaces' hard and usage, overrides and the kill switch now (one point
        of the picture; raises ``ApiException`` when a read fails)."""
        hard: dict[tuple[str, str], int] = {}
        usage: dict[tuple[str, str], int] = {}
        overrides = set()
        views = self.op.runtime.operator.reporter.views if self.op and self.op.runtime else {}
        for ns in NAMESPACES:
            quota = self.c.quota(ns)
            if quota is not None:
                for resource, value in (quota.spec.hard or {}).items():
                    hard[(ns, resource)] = int(parse_quantity(value).value)
                if "dynquota.io/override" in (quota.metadata.annotations or {}):
                    overrides.add(ns)
            view = views.get(ns)
            for resource, count in (view.usage if view is not None else {}).items():
                usage[(ns, resource)] = count
        system = self.c.core.read_namespace("kube-system").metadata.annotations or {}
        engaged = system.get("dynquota.io/kill-switch", "").lower() == "true"
        return Sample(0.0, hard, usage, frozenset(overrides), engaged)

    def pods(self, ns: str) -> int:
        """Pods in ``ns`` now (any phase)."""
        return len(self.c.core.list_namespaced_pod(ns).items)

    def summary(self, started: float) -> None:
        print("\n== summary", flush=True)
        for (ns, resource), series in sorted(self.history.items()):
            if len(series) > 1 or series != ["none"]:
                print(f"    {ns:14} {resource:10} hard: {' -> '.join(series)}")
        if self.op is not None and self.op.runtime is not None:
            m = self.op.runtime.metrics.registry
            writes = {
                v: int(m.get_sample_value("dynquota_quota_writes_total", {"verb": v}) or 0)
                for v in ("create", "patch", "delete")
            }
            decisions = self.op.runtime.operator.queue.runs
            print(
                f"    quota writes: {writes} for {decisions} decisions "
                "(a decision that changes nothing writes nothing)"
            )
            events = sum(
                sample.value
                for metric in m.collect()
                if metric.name == "dynquota_events"
                for sample in metric.samples
                if sample.name == "dynquota_events_total"
            )
            print(f"    Events posted: {int(events)}")
        print(f"    wakes by dynquota (Woken Events): {self.wakes}")
        print(f"    runaway: {self.pods(RUNAWAY)} pods now (asked for 100000)")
        print(f"    total time: {time.monotonic() - started:.0f} s", flush=True)
