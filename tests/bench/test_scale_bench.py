"""Scale benchmark: ``make bench-scale`` (marker ``scale``; not in ``make test``/``make bench``).

Two runs, each on its own local control plane, each with a plain-kopf baseline
(``kopf_baseline.py``: ``@kopf.on.event`` on pods and ConfigMaps, counting per namespace in a
dict) running beside dynquota's operator (``scale_probe.py operator``), both sampled at the
same moments from ``/proc``:

(a) memory and sync: ``DYNQUOTA_SCALE_OBJECTS`` objects (default 150,000: half pods bound to an
    unmanaged Node, half ConfigMaps including each namespace's ``kube-root-ca.crt``) across
    ``DYNQUOTA_SCALE_NAMESPACES`` namespaces (2,000), created while both watch. Then a fresh
    pair: initial sync time, RSS, bytes retained per watched object (tracemalloc over
    dynquota's informers, ``bench_informer_probe.py metadata``), writes at rest.
(b) churn: ``DYNQUOTA_SCALE_NODES`` kwok nodes (100) of ``DYNQUOTA_SCALE_NODE_PODS``
    allocatable pods (500), ``DYNQUOTA_SCALE_CHURN_NAMESPACES`` namespaces (200), about
    ``DYNQUOTA_SCALE_CHURN_PODS`` pod lifecycles (20,000: Deployments, a rollout, a scale-up,
    Jobs completing, deletions) and ``DYNQUOTA_SCALE_CHURN_CONFIGMAPS`` ConfigMaps (10,000),
    with the controller manager's and scheduler's client QPS at ``DYNQUOTA_SCALE_QPS`` (500,
    burst twice that). CPU seconds per 1,000 watch events, decisions and writes per second,
    reaction (tally change -> quota patch sent, measured inside the operator process) on an
    idle apiserver and under churn, writes at rest.

``DYNQUOTA_SCALE_RUNS`` (``a,b``) selects the runs. Gates (asserted after the table is
printed): at most 120 B retained per watched object and RSS under 250 MiB (a); reaction p99
under 50 ms on an idle apiserver, one write per decision that changes hard, 0 writes at rest,
CPU per decision under 0.5 ms (the reconcile's own steps on the event loop's thread, timed in
the operator's process) and CPU per 1,000 watch events at most a third of the kopf baseline's
in the same run (b). Everything else is reported.
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import kubernetes
import pytest
from figures import percentile, report  # same directory
from kubernetes.client.exceptions import ApiException

from dynquota.policy import parse_time
from dynquota.testing.controlplane import LocalControlPlane
from dynquota.testing.operator import PAUSE, OperatorCluster, install_operator
from dynquota.testing.wait import wait_until

pytestmark = pytest.mark.scale

HERE = Path(__file__).parent


def knob(name: str, default: int) -> int:
    return int(os.environ.get(f"DYNQUOTA_SCALE_{name}", str(default)))


RUNS = os.environ.get("DYNQUOTA_SCALE_RUNS", "a,b").split(",")
OBJECTS = knob("OBJECTS", 150_000)
NAMESPACES = knob("NAMESPACES", 2_000)
NODES = knob("NODES", 100)
NODE_PODS = knob("NODE_PODS", 500)
CHURN_NAMESPACES = knob("CHURN_NAMESPACES", 200)
CHURN_PODS = knob("CHURN_PODS", 20_000)
CHURN_CONFIGMAPS = knob("CHURN_CONFIGMAPS", 10_000)
QPS = knob("QPS", 500)
CONCURRENCY = knob("CONCURRENCY", 32)
REST_SECONDS = knob("REST_SECONDS", 60)
REACTION_SAMPLES = knob("REACTION_SAMPLES", 20)
MAX_BYTES_PER_OBJECT = 120
MAX_RSS_MIB = 250
MAX_IDLE_REACTION_P99_MS = 50
MAX_DECISION_CPU_MS = 0.5
SCRAPE_SECONDS = float(os.environ.get("DYNQUOTA_SCALE_SCRAPE_SECONDS", "15"))  # scale_probe's
MAX_CPU_SHARE_OF_KOPF = 1 / 3


def mib(n: float) -> str:
    return f"{n / 2**20:,.0f} MiB"


# -- processes ------------------------------------------------------------------------------


@dataclass
class Proc:
    """A child process (dynquota or the kopf baseline) with its stats file and /proc figures."""

    name: str
    popen: subprocess.Popen[bytes]
    stats_path: Path
    log_path: Path
    marks: dict[str, dict[str, float]] = field(default_factory=dict)
    started: float = field(default_factory=time.monotonic)

    def stats(self) -> dict[str, Any]:
        try:
            result: dict[str, Any] = json.loads(self.stats_path.read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return {}
        return result

    def proc(self) -> dict[str, float]:
        """RSS, peak RSS (VmHWM) in bytes and CPU seconds, from /proc (now)."""
        pid = self.popen.pid
        status = Path(f"/proc/{pid}/status").read_text().splitlines()
        values = {
            line.split(":")[0]: int(line.split()[1]) * 1024
            for line in status
            if line.startswith(("VmRSS:", "VmHWM:"))
        }
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        ticks = os.sysconf("SC_CLK_TCK")
        cpu = (int(fields[11]) + int(fields[12])) / ticks  # utime + stime
        return {"rss": values["VmRSS"], "peak": values["VmHWM"], "cpu": cpu}

    def mark(self, label: str) -> dict[str, float]:
        """Record /proc figures and the stats file's counters under ``label``."""
        figures = self.proc()
        stats = self.stats()
        for key in (
            "events",
            "decisions",
            "decision_cpu",
            "gc_cpu",
            "writes",
            "objects",
            "scrapes",
            "scrape_cpu",
        ):
            if key in stats:
                figures[key] = float(stats[key])
        figures["t"] = time.monotonic()
        for phase, seconds in (stats.get("decision_phases") or {}).items():
            figures[f"phase:{phase}"] = float(seconds)
        self.marks[label] = figures
        return figures

    def alive(self) -> bool:
        return self.popen.poll() is None

    def stop(self) -> None:
        if self.alive():
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(30)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(10)


def decision_phases(d0: dict[str, float], d1: dict[str, float], decisions: float) -> list[str]:
    """Lines of the decision's CPU by step (ms per decision, nested steps counted in their
    callers too), when the probe timed them (``DYNQUOTA_SCALE_PHASES=1``)."""
    steps = {
        key.removeprefix("phase:"): (d1[key] - d0.get(key, 0.0)) / max(decisions, 1) * 1e3
        for key in d1
        if key.startswith("phase:")
    }
    if not steps:
        return []
    ranked = sorted(steps.items(), key=lambda item: -item[1])
    return [
        "decision CPU by step (ms per decision, nested in their callers): "
        + ", ".join(f"{name} {value:.3f}" for name, value in ranked)
    ]


def start_dynquota(kubeconfig: str, workdir: Path, reaction_ns: str = "") -> Proc:
    name = f"dynquota-{uuid.uuid4().hex[:4]}"
    stats, log = workdir / f"{name}.json", workdir / f"{name}.log"
    with log.open("wb") as out:
        popen = subprocess.Popen(
            [sys.executable, str(HERE / "scale_probe.py"), "operator", kubeconfig, str(stats),
             reaction_ns or "-"],
            stdout=out, stderr=subprocess.STDOUT,
            env=dict(os.environ, PYTHONUNBUFFERED="1", DYNQUOTA_LOG_LEVEL="WARNING"),
        )  # fmt: skip
    return Proc(name, popen, stats, log)


def start_kopf(kubeconfig: str, workdir: Path) -> Proc:
    name = f"kopf-{uuid.uuid4().hex[:4]}"
    stats, log = workdir / f"{name}.json", workdir / f"{name}.log"
    with log.open("wb") as out:
        popen = subprocess.Popen(
            [sys.executable, "-m", "kopf", "run", "--standalone", "--all-namespaces", "--quiet",
             str(HERE / "kopf_baseline.py")],
            stdout=out, stderr=subprocess.STDOUT,
            env=dict(os.environ, KUBECONFIG=kubeconfig, KOPF_BASELINE_STATS=str(stats)),
        )  # fmt: skip
    return Proc(name, popen, stats, log)


@pytest.fixture
def procs() -> Iterator[list[Proc]]:
    running: list[Proc] = []
    yield running
    for p in running:
        p.stop()


def wait_counted(p: Proc, objects: int, timeout: float) -> float:
    """Wait until ``p`` counts ``objects`` (dynquota: its informers synced and holding them;
    kopf: pods + ConfigMaps in its dicts); returns the seconds waited."""
    started = time.monotonic()

    def check() -> bool:
        assert p.alive(), p.log_path.read_text()[-3000:]
        s = p.stats()
        if "synced" in s:
            return bool(s["synced"] and s["objects"] >= objects)
        return bool(s and s["pods"] + s["configmaps"] >= objects)

    wait_until(check, f"{p.name} counting {objects}", timeout=timeout, interval=0.5)
    return time.monotonic() - started


def cluster(cp: LocalControlPlane, workdir: Path) -> OperatorCluster:
    kubeconfig = install_operator(cp, workdir)
    configuration = kubernetes.client.Configuration()
    kubernetes.config.load_kube_config(
        config_file=cp.kubeconfig, client_configuration=configuration
    )
    configuration.connection_pool_maxsize = 64
    return OperatorCluster(cp, kubernetes.client.ApiClient(configuration), kubeconfig)


def profile(minimum: int, maximum: int, up: str = "10s") -> dict[str, Any]:
    return {
        "bufferPercent": 40,
        "minimum": minimum,
        "maximum": maximum,
        "upscaleCooldown": up,
        "downscaleCooldown": "1h",
    }


def comparison(d: dict[str, float], k: dict[str, float], what: str) -> str:
    ratio = k["rss"] / d["rss"] if d["rss"] else float("nan")
    return (
        f"{what}: dynquota RSS {mib(d['rss'])} (peak {mib(d['peak'])}), "
        f"kopf RSS {mib(k['rss'])} (peak {mib(k['peak'])}); kopf/dynquota {ratio:.1f}x"
    )


# -- run (a): memory and initial sync -------------------------------------------------------


@pytest.mark.timeout(4 * 3600)
@pytest.mark.skipif("a" not in RUNS, reason="DYNQUOTA_SCALE_RUNS excludes a")
def test_scale_a_memory_and_sync(tmp_path: Path, procs: list[Proc]) -> None:
    pods = OBJECTS // 2
    configmaps = OBJECTS - pods - NAMESPACES  # every namespace has kube-root-ca.crt too
    prefix = "scale-a"
    with LocalControlPlane(resource_quota_sync_period=300) as cp:
        c = cluster(cp, tmp_path)
        cp.kubectl(
            "create", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "Node",
                                                   "metadata": {"name": "bench-node"}})
        )  # fmt: skip
        base = len(c.core.list_config_map_for_all_namespaces().items) + len(
            c.core.list_pod_for_all_namespaces().items
        )
        d1, k1 = start_dynquota(c.sa_kubeconfig, tmp_path), start_kopf(cp.kubeconfig, tmp_path)
        procs += [d1, k1]
        wait_counted(d1, base, 120)
        wait_counted(k1, base, 120)
        d_empty, k_empty = d1.mark("empty"), k1.mark("empty")

        started = time.monotonic()
        done = subprocess.run(
            [sys.executable, str(HERE / "scale_probe.py"), "populate", cp.kubeconfig, prefix,
             str(NAMESPACES), str(pods), str(configmaps), "bench-node", str(CONCURRENCY)],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
        populate = json.loads(done.stdout.strip().splitlines()[-1])
        total = base + OBJECTS
        wait_counted(d1, total, 600)
        wait_counted(k1, total, 1800)
        burst_seconds = time.monotonic() - started
        d_burst, k_burst = d1.mark("burst"), k1.mark("burst")
        # kopf's per-object workers exit after their idle timeout (5 s): sample again later
        wait_until(lambda: time.monotonic() > started + burst_seconds + 30, "30 s", 60)
        d_after, k_after = d1.mark("after"), k1.mark("after")

        # a policy over every namespace: the live operator creates each quota
        label = {"bench": prefix}
        c.policy("scale-a", label, pods=profile(10, 100_000), configmaps=profile(20, 100_000))

        def quotas() -> int:
            items = c.core.list_resource_quota_for_all_namespaces(
                label_selector="app.kubernetes.io/managed-by=dynquota"
            ).items
            return len(items)

        t0 = time.monotonic()
        wait_until(lambda: quotas() == NAMESPACES, "every quota created", 1800, interval=2)
        create_seconds = time.monotonic() - t0
        d1.stop()
        k1.stop()

        # a fresh pair over the full cluster: initial sync and resting memory
        d2, k2 = start_dynquota(c.sa_kubeconfig, tmp_path), start_kopf(cp.kubeconfig, tmp_path)
        procs += [d2, k2]
        d_sync = wait_counted(d2, total, 600)
        wait_until(lambda: d2.stats().get("ready"), "dynquota ready", 600, interval=0.5)
        d_ready = time.monotonic() - d2.started
        k_sync = wait_counted(k2, total, 1800)
        d_synced, k_synced = d2.mark("synced"), k2.mark("synced")
        writes0 = d2.stats()["writes"]
        rest_until = time.monotonic() + REST_SECONDS
        wait_until(lambda: time.monotonic() > rest_until, "rest", REST_SECONDS + 10)
        d_rest, k_rest = d2.mark("rest"), k2.mark("rest")
        rest_writes = d2.stats()["writes"] - writes0

        probe = subprocess.run(
            [sys.executable, str(HERE / "bench_informer_probe.py"), "metadata", c.sa_kubeconfig],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        assert probe.returncode == 0, probe.stderr[-3000:]
        retained = json.loads(probe.stdout.strip().splitlines()[-1])
        per_object = retained["retained_bytes"] / retained["objects"]
        rss_per_object = (d_rest["rss"] - d_empty["rss"]) / OBJECTS

        def cpu_per_k(p: dict[str, float], q: dict[str, float], events: float) -> str:
            return f"{(q['cpu'] - p['cpu']) / events * 1000:.2f}" if events else "n/a"

        d_events = d_burst["events"] - d_empty["events"]
        k_events = k1.stats().get("events", 0) - (k_empty.get("events") or 0)
        report(
            f"Scale run (a): {OBJECTS:,} objects ({pods:,} pods bound to an unmanaged Node, "
            f"{configmaps + NAMESPACES:,} ConfigMaps) in {NAMESPACES:,} namespaces",
            [
                f"populate: namespaces {populate['namespaces_seconds']} s, objects "
                f"{populate['objects_seconds']} s ({populate['objects_per_second']}/s, "
                f"{CONCURRENCY} in flight); both counting all of them {burst_seconds:.0f} s "
                "after the start",
                f"empty cluster: {comparison(d_empty, k_empty, 'at start')}",
                comparison(d_burst, k_burst, "burst absorbed (sampled when both counted all)"),
                comparison(d_after, k_after, "30 s later (kopf's idle workers gone)"),
                f"CPU during the burst: dynquota {d_burst['cpu'] - d_empty['cpu']:.0f} s for "
                f"{d_events:,.0f} watch events ({cpu_per_k(d_empty, d_burst, d_events)} s per "
                f"1,000); kopf {k_burst['cpu'] - k_empty['cpu']:.0f} s for {k_events:,.0f} "
                f"events ({cpu_per_k(k_empty, k_burst, k_events)} s per 1,000)",
                f"policy over {NAMESPACES:,} namespaces: every quota created in "
                f"{create_seconds:.0f} s",
                f"fresh start: dynquota informers synced in {d_sync:.1f} s (ready "
                f"{d_ready:.1f} s), kopf counted everything in {k_sync:.1f} s",
                comparison(d_synced, k_synced, "just synced"),
                comparison(d_rest, k_rest, f"after {REST_SECONDS} s at rest"),
                f"retained by dynquota's informers (tracemalloc, {retained['objects']:,} "
                f"objects): {retained['retained_bytes'] / 2**20:.1f} MiB = {per_object:.0f} B "
                f"per object (gate <= {MAX_BYTES_PER_OBJECT}); RSS growth over the empty "
                f"cluster {rss_per_object:.0f} B per object",
                f"writes at rest ({REST_SECONDS} s, fixed point): {rest_writes:.0f}",
                "largest allocation sites retained (tracemalloc, bytes / blocks):",
                *(
                    f"  {t['bytes'] / 2**20:.1f} MiB / {t['count']:,} {t['where']}"
                    for t in retained.get("top", [])
                ),
            ],
        )
        assert per_object <= MAX_BYTES_PER_OBJECT
        assert d_rest["rss"] < MAX_RSS_MIB * 2**20
        assert d_synced["peak"] < MAX_RSS_MIB * 2**20
        assert rest_writes == 0
        c.api.close()


# -- run (b): churn on kwok nodes ---------------------------------------------------------


class Reaction:
    """Threshold crossings in one namespace: each creates one pod once the upscale cooldown
    (2 s) is over; the operator's reaction is timed inside its process (``scale_probe.py``)."""

    def __init__(self, c: OperatorCluster, ns: str, d: Proc) -> None:
        self.c, self.ns, self.d = c, ns, d
        self.created = 0
        self.writes = 0.0
        self.phases: list[list[float]] = []

    def setup(self) -> None:
        self.c.wait_hard(self.ns, {"pods": "100", "configmaps": "100"}, timeout=120)
        for _ in range(71):  # T(71) = 100: one more pod crosses
            self.pod()
        wait_until(lambda: (self.c.quota(self.ns).status.used or {}).get("pods") == "71", "71")
        self.sample()  # primes the operator-side timer; not kept

    def pod(self) -> None:
        self.c.create_pod(self.ns, f"r-{self.created}")
        self.created += 1

    def sample(self) -> None:
        quota = self.c.quota(self.ns)
        hard = int(quota.spec.hard["pods"])
        last = parse_time(quota.metadata.annotations["dynquota.io/last-upscale.pods"])
        wait_until(lambda: time.time() >= last + 2.2, "cooldown over", 10)
        before = len(self.d.stats()["reactions"])
        self.pod()
        wait_until(lambda: int((self.c.hard(self.ns) or {})["pods"]) > hard, "step", 30)
        wait_until(lambda: len(self.d.stats()["reactions"]) > before, "timed", 10)
        # the crossing's pod must fit the new hard before the next one
        wait_until(
            lambda: (
                (self.c.quota(self.ns).status.hard or {}).get("pods")
                == (self.c.hard(self.ns) or {})["pods"]
            ),
            "status.hard",
            30,
        )

    def run(self, samples: int) -> list[float]:
        start = len(self.d.stats()["reactions"])
        for _ in range(samples):
            self.sample()
        # a stats snapshot taken after the last step (the file is rewritten every second)
        after = time.time() + 0.5
        wait_until(lambda: self.d.stats()["t"] > after, "fresh stats", 10)
        stats = self.d.stats()
        reactions = stats["reactions"][start:]
        self.phases = [[float(x) for x in p] for p in stats.get("phases", [])[start:]]
        self.writes += len(reactions)  # quota patches sent in this namespace
        return [float(r) for r in reactions]

    def phases_text(self) -> str:
        """p50/p99 of where the last :meth:`run`'s reactions went (milliseconds)."""
        if not self.phases:
            return "n/a"
        gets = [g for g, _ in self.phases if g > 0]
        rest = [r for _, r in self.phases]
        text = f"a GET of the quota on the path in {len(gets)} of {len(self.phases)}"
        if gets:
            text += f" (p50 {statistics.median(gets) * 1000:.1f} ms)"
        return (
            f"{text}; the rest (queue, decide) p50 {statistics.median(rest) * 1000:.1f} / "
            f"p99 {percentile(rest, 99) * 1000:.1f} ms"
        )


def churn(c: OperatorCluster, namespaces: list[str], pods: int, configmaps: int) -> dict[str, int]:
    """Deployments (create, rollout, scale-up, delete), Jobs completing, ConfigMaps created
    and half deleted, in every namespace in parallel. Returns the pod lifecycles started."""
    per_ns = max(4, pods // len(namespaces))
    replicas = max(1, per_ns // 5)  # create R, rollout R, scale to 2R (+R), Job R, delete 2R
    cms = configmaps // len(namespaces)
    batch: Any = kubernetes.client.BatchV1Api(c.api)
    counted = {"pods": 0, "configmaps": 0}
    lock = threading.Lock()

    def retry(call: Callable[[], Any]) -> Any:
        for _ in range(50):
            try:
                return call()
            except ApiException as exc:
                if exc.status not in (409, 429, 500, 503, 504):
                    raise
            time.sleep(0.5)
        return call()

    def available(ns: str, n: int) -> Callable[[], bool]:
        def check() -> bool:
            d = c.apps.read_namespaced_deployment("web", ns)
            s = d.status
            return bool(
                s.observed_generation == d.metadata.generation
                and s.updated_replicas == n
                and s.available_replicas == n
                and (s.replicas or 0) == n
            )

        return check

    def one(ns: str) -> None:
        body = {
            "metadata": {"name": "web"},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {
                    "metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [{"name": "c", "image": PAUSE}]},
                },
            },
        }
        retry(lambda: c.apps.create_namespaced_deployment(ns, body))
        for i in range(cms):
            retry(
                lambda i=i: c.core.create_namespaced_config_map(ns, {"metadata": {"name": f"c{i}"}})
            )
        wait_until(available(ns, replicas), f"{ns} web available", 900, interval=1)
        patch = {"spec": {"template": {"metadata": {"annotations": {"rev": "2"}}}}}
        retry(lambda: c.apps.patch_namespaced_deployment("web", ns, patch))
        wait_until(available(ns, replicas), f"{ns} rollout", 900, interval=1)
        retry(
            lambda: c.apps.patch_namespaced_deployment_scale(
                "web", ns, {"spec": {"replicas": 2 * replicas}}
            )
        )
        job = {
            "metadata": {"name": "batch"},
            "spec": {
                "completions": replicas,
                "parallelism": max(1, replicas // 2),
                "ttlSecondsAfterFinished": 30,
                "template": {
                    "spec": {
                        "restartPolicy": "Never",
                        "containers": [{"name": "c", "image": PAUSE}],
                    }
                },
            },
        }
        retry(lambda: batch.create_namespaced_job(ns, job))
        wait_until(available(ns, 2 * replicas), f"{ns} scaled", 900, interval=1)
        wait_until(
            lambda: (batch.read_namespaced_job("batch", ns).status.succeeded or 0) >= replicas,
            f"{ns} job",
            900,
            interval=1,
        )
        for i in range(0, cms, 2):
            retry(lambda i=i: c.core.delete_namespaced_config_map(f"c{i}", ns))
        retry(
            lambda: c.apps.delete_namespaced_deployment("web", ns, propagation_policy="Background")
        )
        wait_until(
            lambda: not [p for p in c.core.list_namespaced_pod(ns, label_selector="app=web").items],
            f"{ns} pods gone",
            900,
            interval=1,
        )
        with lock:
            counted["pods"] += 5 * replicas
            counted["configmaps"] += cms

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(one, namespaces))
    return counted


@pytest.mark.timeout(4 * 3600)
@pytest.mark.skipif("b" not in RUNS, reason="DYNQUOTA_SCALE_RUNS excludes b")
def test_scale_b_churn(tmp_path: Path, procs: list[Proc]) -> None:
    with LocalControlPlane(
        resource_quota_sync_period=30, nodes=NODES, node_pods=NODE_PODS, client_qps=QPS
    ) as cp:
        c = cluster(cp, tmp_path)
        label = {"bench": "churn"}
        c.policy("churn", label, pods=profile(80, 10_000), configmaps=profile(100, 10_000))
        c.policy("reaction", {"bench": "reaction"}, pods=profile(100, 10_000, "2s"),
                 configmaps=profile(100, 10_000))  # fmt: skip
        reaction_ns = c.new_namespace({"bench": "reaction"})
        names = [f"churn-{i}" for i in range(CHURN_NAMESPACES)]
        for name in names:
            c.core.create_namespace({"metadata": {"name": name, "labels": label}})
        d, k = (
            start_dynquota(c.sa_kubeconfig, tmp_path, reaction_ns),
            start_kopf(cp.kubeconfig, tmp_path),
        )
        procs += [d, k]
        wait_until(lambda: d.stats().get("ready"), "dynquota ready", 300, interval=0.5)
        wait_until(lambda: k.stats().get("events"), "kopf running", 300, interval=0.5)
        for ns in names:
            c.wait_hard(ns, {"pods": "80", "configmaps": "100"}, timeout=300)
        r = Reaction(c, reaction_ns, d)
        r.setup()
        idle = r.run(REACTION_SAMPLES)
        idle_phases = r.phases_text()
        d0, k0 = d.mark("start"), k.mark("start")
        k_events0 = k.stats()["events"]

        results: dict[str, Any] = {}
        worker = threading.Thread(
            target=lambda: results.update(churn(c, names, CHURN_PODS, CHURN_CONFIGMAPS)),
            daemon=True,
        )
        started = time.monotonic()
        worker.start()
        busy: list[float] = []
        while worker.is_alive() and len(busy) < REACTION_SAMPLES:
            busy += r.run(1)
        worker.join()
        churn_seconds = time.monotonic() - started
        assert results, "churn failed (see the traceback above)"
        d1, k1 = d.mark("churned"), k.mark("churned")
        k_events = k.stats()["events"] - k_events0

        writes0 = d.stats()["writes"]
        rest_until = time.monotonic() + REST_SECONDS
        wait_until(lambda: time.monotonic() > rest_until, "rest", REST_SECONDS + 10)
        rest_writes = d.stats()["writes"] - writes0
        d2, k2 = d.mark("rest"), k.mark("rest")

        events = d1["events"] - d0["events"]
        decisions = d1["decisions"] - d0["decisions"]
        writes = d1["writes"] - d0["writes"]
        cpu_per_decision_ms = (d1["decision_cpu"] - d0["decision_cpu"]) / max(decisions, 1) * 1e3
        scrapes = d1["scrapes"] - d0["scrapes"]
        scrape_ms = (d1["scrape_cpu"] - d0["scrape_cpu"]) / max(scrapes, 1) * 1e3
        per_event = (d1["cpu"] - d0["cpu"]) / max(events, 1) * 1000
        kopf_per_event = (k1["cpu"] - k0["cpu"]) / max(k_events, 1) * 1000

        def ms(values: list[float]) -> str:
            if not values:
                return "n/a"
            return (
                f"p50 {statistics.median(values) * 1000:.1f} ms, "
                f"p99 {percentile(values, 99) * 1000:.1f} ms (n={len(values)})"
            )

        report(
            f"Scale run (b): churn on {NODES} kwok nodes x {NODE_PODS} pods, "
            f"{CHURN_NAMESPACES} namespaces, controller-manager/scheduler QPS {QPS} "
            f"(burst {2 * QPS})",
            [
                f"{results['pods']:,} pod lifecycles and {results['configmaps']:,} ConfigMaps "
                f"in {churn_seconds:.0f} s",
                f"dynquota: {events:,.0f} watch events, CPU {d1['cpu'] - d0['cpu']:.1f} s = "
                f"{per_event:.2f} s per 1,000 events; "
                f"{decisions / churn_seconds:.1f} decisions/s, {writes / churn_seconds:.2f} "
                f"writes/s ({decisions:,.0f} decisions, {writes:,.0f} writes)",
                f"kopf baseline: {k_events:,.0f} events, CPU {k1['cpu'] - k0['cpu']:.1f} s = "
                f"{kopf_per_event:.2f} s per 1,000 events",
                f"CPU per 1,000 events: dynquota {per_event:.2f} s, kopf {kopf_per_event:.2f} s: "
                f"dynquota/kopf {per_event / max(kopf_per_event, 1e-9):.2f} "
                f"(gate <= {MAX_CPU_SHARE_OF_KOPF:.2f})",
                f"CPU per decision (the reconcile's own steps): {cpu_per_decision_ms:.3f} ms "
                f"(gate < {MAX_DECISION_CPU_MS} ms); cyclic GC: "
                f"{d1['gc_cpu'] - d0['gc_cpu']:.2f} s of dynquota's CPU under churn",
                f"scrapes of /metrics under churn (every {SCRAPE_SECONDS:.0f} s, in dynquota's "
                f"CPU): {scrapes:.0f}, {scrape_ms:.1f} ms each (the per-key series a decision "
                "leaves to them)",
                comparison(d1, k1, "end of churn"),
                comparison(d2, k2, f"after {REST_SECONDS} s at rest"),
                f"reaction (tally change -> patch sent, in the operator) idle: {ms(idle)}; "
                f"under churn: {ms(busy)}",
                f"idle reaction by phase: {idle_phases}",
                f"reaction namespace: {len(idle) + len(busy) + 1} crossings, {r.writes:.0f} writes",
                f"writes at rest ({REST_SECONDS} s): {rest_writes:.0f}",
                *decision_phases(d0, d1, decisions),
            ],
        )
        assert rest_writes == 0
        assert r.writes == len(idle) + len(busy)
        assert cpu_per_decision_ms < MAX_DECISION_CPU_MS
        assert per_event <= MAX_CPU_SHARE_OF_KOPF * kopf_per_event
        assert percentile(idle, 99) * 1000 < MAX_IDLE_REACTION_P99_MS
        c.api.close()
