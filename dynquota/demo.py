"""``dynquota demo``: the operator on a real local control plane and a real workload.

Starts etcd, kube-apiserver, kube-controller-manager, kube-scheduler and three kwok-simulated
nodes (:mod:`dynquota.testing.controlplane`; pods are scheduled and run),
installs the CRD, the chart's RBAC and a demo policy with short cooldowns (up 10 s, down 30 s),
runs the operator in-process as the chart's ServiceAccount, and drives:

1. ``demo-web``: a Deployment scaled 5 -> 40 (pods made by the real ReplicaSet controller);
2. ``demo-runaway``: a Deployment with ``replicas: 100000``, throttled one step per cooldown up
   to the maximum, then scaled to 0 and sized down after the window;
3. ``demo-helm``: a burst of 200 ConfigMaps like a Helm install: denied at the quota, the
   tenant requests the override, the burst completes, the override expires (30 s TTL);
4. the kill switch on (every managed quota deleted) and off (re-created).

The ReplicaSet controller backs off exponentially after quota denials and is not woken by a
quota change, so after each upscale the demo *nudges* the ReplicaSets of that namespace (it
touches an annotation, which makes the controller sync at once) and says so. The demo prints a
live table and a closing summary, writes a picture of each namespace's hard and usage over time
(:mod:`dynquota.demo_picture`, with matplotlib when installed) and prints its path, and stops
everything it started.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import kubernetes
from kubernetes.client.exceptions import ApiException

from dynquota.demo_picture import Sample, SeriesRecorder, default_picture_path, write_picture
from dynquota.policy import Decision
from dynquota.quantity import parse_quantity
from dynquota.settings import Settings
from dynquota.testing.controlplane import ControlPlaneError, LocalControlPlane
from dynquota.testing.operator import (
    PAUSE,
    OperatorCluster,
    OperatorThread,
    install_operator,
    operator_settings,
)
from dynquota.testing.wait import WaitTimeoutError, wait_until

__all__ = ["main"]

WEB, RUNAWAY, HELM = "demo-web", "demo-runaway", "demo-helm"
NAMESPACES = (WEB, RUNAWAY, HELM)
LABEL = {"dynquota.io/demo": "true"}
NUDGE = "demo.dynquota.io/nudge"
DEMO_NODES = 3  # kwok nodes of 110 pods: room for every demo pod
PICTURE_PANELS = (
    (WEB, "pods", "a normal scale-up, in buffer steps"),
    (RUNAWAY, "pods", "a runaway throttled to one step per cooldown, then sized down"),
    (HELM, "configmaps", "a burst denied, the tenant override, its expiry"),
)


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

    @classmethod
    def fast(cls) -> Timing:
        """About half the run time: 4 s cooldowns, smaller runaway cap and burst."""
        return cls(up=4, down=12, ttl=12, pods_max=60, cms_max=150, burst=100, web_replicas=20)


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


class Demo:
    """One demo run against a started control plane."""

    def __init__(self, cluster: OperatorCluster, timing: Timing, show: Show) -> None:
        self.c = cluster
        self.t = timing
        self.show = show
        self.op: OperatorThread | None = None
        self.history: dict[tuple[str, str], list[str]] = {}
        self.nudges = 0
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
        views = self.op.runtime.operator.views if self.op and self.op.runtime else {}
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

    # -- background: history, nudges, table ------------------------------------------------------

    def watch(self) -> None:
        """Record every hard value, nudge ReplicaSets after an upscale, print the table."""
        seen: dict[str, str] = {}
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
                    pods = hard.get("pods", "none")
                    if seen.get(ns) not in (None, pods) and pods != "none":
                        self.nudge(ns)
                    seen[ns] = pods
                if time.monotonic() - last_print >= 5:
                    last_print = time.monotonic()
                    self.print_table()
            except (ApiException, OSError) as exc:  # keep watching; the demo goes on
                self.show.line("demo", f"(watch: {exc})")
            self._stop.wait(0.3)

    def nudge(self, ns: str) -> None:
        for rs in self.c.apps.list_namespaced_replica_set(ns).items:
            if not rs.spec.replicas:
                continue
            self.nudges += 1
            with contextlib.suppress(ApiException):
                self.c.apps.patch_namespaced_replica_set(
                    rs.metadata.name, ns, {"metadata": {"annotations": {NUDGE: str(self.nudges)}}}
                )
            self.show.line(
                "demo",
                f"nudged ReplicaSet {ns}/{rs.metadata.name} (the ReplicaSet controller backs "
                "off after quota denials and is not woken by a quota change)",
            )

    def observe_series(self) -> Sample:
        """The demo namespaces' hard and usage, overrides and the kill switch now (one point
        of the picture; raises ``ApiException`` when a read fails)."""
        hard: dict[tuple[str, str], int] = {}
        usage: dict[tuple[str, str], int] = {}
        overrides = set()
        views = self.op.runtime.operator.views if self.op and self.op.runtime else {}
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

    # -- scenario ---------------------------------------------------------------------------------

    def deployment(self, ns: str, name: str, replicas: int) -> None:
        labels = {"app": name}
        self.c.apps.create_namespaced_deployment(
            ns,
            {
                "metadata": {"name": name},
                "spec": {
                    "replicas": replicas,
                    "selector": {"matchLabels": labels},
                    "template": {
                        "metadata": {"labels": labels},
                        "spec": {
                            "containers": [{"name": "app", "image": PAUSE}],
                            "terminationGracePeriodSeconds": 0,
                        },
                    },
                },
            },
        )

    def scale(self, ns: str, name: str, replicas: int) -> None:
        self.c.apps.patch_namespaced_deployment_scale(name, ns, {"spec": {"replicas": replicas}})

    def pods(self, ns: str) -> int:
        return len(self.c.core.list_namespaced_pod(ns).items)

    def run(self, start_operator: Callable[[Settings], OperatorThread]) -> None:
        t = self.t
        for ns in NAMESPACES:
            self.c.core.create_namespace({"metadata": {"name": ns, "labels": LABEL}})
        self.c.policy(
            "demo",
            LABEL,
            pods={
                "bufferPercent": 40,
                "minimum": 10,
                "maximum": t.pods_max,
                "upscaleCooldown": f"{t.up}s",
                "downscaleCooldown": f"{t.down}s",
            },
            configmaps={
                "bufferPercent": 40,
                "minimum": 50,
                "maximum": t.cms_max,
                "upscaleCooldown": f"{t.up}s",
                "downscaleCooldown": f"{t.down}s",
            },
        )
        self.show.line(
            "demo",
            f"policy 'demo': buffer 40%, pods 10..{t.pods_max}, configmaps 50..{t.cms_max}, "
            f"upscale cooldown {t.up}s, downscale window {t.down}s, override TTL {t.ttl}s",
        )
        self.op = start_operator(
            operator_settings(self.c, override_ttl=f"{t.ttl}s", resync_seconds=30)
        )
        assert self.op.runtime is not None
        self.op.runtime.operator.on_decision = self.on_decision
        self.show.line(
            "demo", "operator running in-process as ServiceAccount dynquota-system/dynquota"
        )
        for ns in NAMESPACES:
            self.c.wait_hard(ns, {"pods": "10", "configmaps": "50"})
        watcher = threading.Thread(target=self.watch, name="demo-watch", daemon=True)
        watcher.start()
        try:
            self._workloads()
        finally:
            self._stop.set()
            watcher.join(10)

    def _workloads(self) -> None:
        t = self.t
        self.show.line("demo", f"1. {WEB}: Deployment web with 5 replicas")
        self.deployment(WEB, "web", 5)
        wait_until(lambda: self.pods(WEB) == 5, "5 web pods", timeout=60)
        self.show.line(
            "demo",
            f"2. {RUNAWAY}: Deployment runaway with replicas: 100000 (a controller gone wild)",
        )
        self.deployment(RUNAWAY, "runaway", 100_000)
        self.show.line("demo", f"1. {WEB}: scaling web 5 -> {t.web_replicas}")
        self.scale(WEB, "web", t.web_replicas)
        wait_until(
            lambda: self.pods(WEB) == t.web_replicas,
            f"{t.web_replicas} web pods",
            timeout=12 * t.up,
        )
        self.show.line(
            "demo", f"1. {WEB}: all {t.web_replicas} pods created, in steps of one cooldown"
        )
        self.print_table(force=True)
        wait_until(
            lambda: (self.c.hard(RUNAWAY) or {}).get("pods") == str(t.pods_max),
            f"runaway at the maximum {t.pods_max}",
            timeout=14 * t.up,
        )
        wait_until(lambda: self.pods(RUNAWAY) >= t.pods_max, "runaway pods at the cap", 60)
        self.show.line(
            "demo",
            f"2. {RUNAWAY}: throttled to {self.pods(RUNAWAY)} pods instead of 100000: "
            + " -> ".join(self.history.get((RUNAWAY, "pods"), [])),
        )
        self.scale(RUNAWAY, "runaway", 0)
        self.show.line(
            "demo", f"2. {RUNAWAY}: scaled to 0; the quota follows after the {t.down}s window"
        )
        self.helm_burst()
        wait_until(
            lambda: (self.c.hard(RUNAWAY) or {}).get("pods") == "10",
            "runaway sized down",
            timeout=4 * t.down + 30,
        )
        self.show.line("demo", f"2. {RUNAWAY}: sized down to the minimum after the window")
        self.print_table(force=True)
        self.kill_switch()

    def helm_burst(self) -> None:
        t = self.t
        self.show.line("demo", f"3. {HELM}: burst of {t.burst} ConfigMaps, like a Helm install")
        created, denied_at = 0, None
        for i in range(t.burst):
            try:
                self.c.core.create_namespaced_config_map(
                    HELM, {"metadata": {"name": f"release-cm-{i}"}, "data": {"i": str(i)}}
                )
                created += 1
            except ApiException as exc:
                if exc.status == 403 and "exceeded quota" in str(exc.body):
                    denied_at = i
                    break
                raise
        self.show.line(
            "demo",
            f"3. {HELM}: {created} created, then 403 exceeded quota (nothing retries a "
            "denied ConfigMap create: the install fails)",
        )
        if denied_at is None:
            return
        self.show.line("tenant", f"dynquota override {HELM}  (dynquota.io/override=max)")
        self.c.core.patch_namespaced_resource_quota(
            "dynquota", HELM, {"metadata": {"annotations": {"dynquota.io/override": "max"}}}
        )
        wait_until(
            lambda: (self.c.hard(HELM) or {}).get("configmaps") == str(t.cms_max),
            "override granted",
            timeout=30,
        )
        for i in range(denied_at, t.burst):
            self.c.core.create_namespaced_config_map(
                HELM, {"metadata": {"name": f"release-cm-{i}"}, "data": {"i": str(i)}}
            )
        self.show.line(
            "demo",
            f"3. {HELM}: install re-run, all {t.burst} ConfigMaps created under the override",
        )
        self.print_table(force=True)
        self.show.line("demo", f"4. {HELM}: waiting for the override to expire ({t.ttl}s TTL)")
        wait_until(
            lambda: "dynquota.io/override" not in self.c.annotations(HELM),
            "override expired",
            timeout=t.ttl + 30,
        )
        self.show.line("demo", f"4. {HELM}: override expired, configmaps sized from the peak usage")

    def kill_switch(self) -> None:
        self.show.line("admin", "dynquota kill-switch on  (dynquota.io/kill-switch=true)")
        self.c.kill_switch("true")
        wait_until(
            lambda: all(self.c.quota(ns) is None for ns in NAMESPACES),
            "managed quotas deleted",
            timeout=30,
        )
        self.show.line("demo", "5. every managed quota deleted; none is created while engaged")
        self.print_table(force=True)
        # Stay engaged for one cooldown: shows that nothing comes back (and in the picture).
        time.sleep(self.t.up)
        back = [ns for ns in NAMESPACES if self.c.quota(ns) is not None]
        self.show.line("demo", f"5. engaged for {self.t.up}s: managed quotas re-created: {back}")
        self.show.line("admin", "dynquota kill-switch off")
        self.c.kill_switch(None)
        wait_until(
            lambda: all(self.c.quota(ns) is not None for ns in NAMESPACES),
            "managed quotas re-created",
            timeout=30,
        )
        time.sleep(1)
        self.show.line("demo", "5. quotas re-created from current usage")
        self.print_table(force=True)

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
        print(f"    ReplicaSet nudges: {self.nudges}")
        print(f"    runaway: {self.pods(RUNAWAY)} pods now (asked for 100000)")
        print(f"    total time: {time.monotonic() - started:.0f} s", flush=True)


def main(fast: bool = False, picture: Path | None = None) -> int:
    """Run the demo; returns the exit code (0 on success). The picture of hard and usage over
    time goes to ``picture`` (default :func:`~dynquota.demo_picture.default_picture_path`)."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    # the operator runs in a thread here, where kopf cannot install signal handlers: expected
    logging.getLogger("kopf._core.reactor.running").setLevel(logging.ERROR)
    show = Show()
    timing = Timing.fast() if fast else Timing()
    started = time.monotonic()
    print(
        "dynquota demo: a local control plane (etcd, kube-apiserver, kube-controller-manager, "
        f"kube-scheduler and {DEMO_NODES} kwok-simulated nodes: pods run), the operator, a real "
        "workload.",
        flush=True,
    )
    running: list[OperatorThread] = []

    def start_operator(settings: Settings) -> OperatorThread:
        op = OperatorThread(settings)
        running.append(op)
        return op.start()

    try:
        with LocalControlPlane(resource_quota_sync_period=5, nodes=DEMO_NODES) as cp:
            show.line("demo", f"control plane up at {cp.server} (logs: {cp.log_dir})")
            with tempfile.TemporaryDirectory(prefix="dynquota-demo-") as tmp:
                kubeconfig = install_operator(cp, Path(tmp))
                show.line("demo", "CRD, chart RBAC and operator ServiceAccount installed")
                api: Any = kubernetes.config.new_client_from_config(config_file=cp.kubeconfig)  # type: ignore[no-untyped-call]
                demo = Demo(OperatorCluster(cp, api, kubeconfig), timing, show)
                recorder = SeriesRecorder(demo.observe_series).start()
                try:
                    demo.run(start_operator)
                    demo.summary(started)
                    recorder.stop()
                    where = picture or default_picture_path()
                    print(
                        "    " + write_picture(recorder.samples, PICTURE_PANELS, where), flush=True
                    )
                finally:
                    recorder.stop()
                    for op in running:
                        with contextlib.suppress(Exception):
                            op.stop()
                    api.close()
    except ControlPlaneError as exc:
        print(f"dynquota demo: the control plane failed: {exc}", file=sys.stderr)
        return 1
    except WaitTimeoutError as exc:
        print(f"dynquota demo: a step did not complete: {exc}", file=sys.stderr)
        return 1
    print("everything stopped: control plane, operator, temporary files.", flush=True)
    return 0
