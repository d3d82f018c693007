"""Operator benchmarks on a real local control plane (``make bench``; figures printed).

1. API cost of a 1,000-pod burst in one namespace: decisions, quota writes, reads; then quota
   writes over a steady state (``DYNQUOTA_BENCH_STEADY_SECONDS``, default 120; the
   documented figure uses 600).
2. Reaction time: from a threshold crossing or a cooldown expiry to the new limit in
   ``spec.hard`` (the operator's share) and in ``status.hard`` (copied by the quota
   controller; what admission enforces), p50/p99 over ``DYNQUOTA_BENCH_REACTION_SAMPLES``
   (default 60) steps.
3. Scale: 2,000 namespaces (``DYNQUOTA_BENCH_NAMESPACES``): initial reconcile time and memory
   of an operator process, then kill switch on and off: time to re-create every quota.

The operator runs with the chart's RBAC (ServiceAccount token), in-process for 1-2 and as a
``dynquota run`` child process for 3 (so its memory is its own).
"""

from __future__ import annotations

import os
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from figures import QuotaWatch, percentile, pooled_cluster, report  # same directory
from kubernetes.client.exceptions import ApiException

from dynquota.policy import parse_time
from dynquota.testing.operator import (
    OPERATOR_NS,
    OperatorCluster,
    OperatorThread,
    operator_settings,
)
from dynquota.testing.wait import wait_until

STEADY_SECONDS = int(os.environ.get("DYNQUOTA_BENCH_STEADY_SECONDS", "120"))
REACTION_SAMPLES = int(os.environ.get("DYNQUOTA_BENCH_REACTION_SAMPLES", "60"))
SCALE_NAMESPACES = int(os.environ.get("DYNQUOTA_BENCH_NAMESPACES", "2000"))
COOLDOWN = 2  # seconds, upscale cooldown of the reaction benchmark


@pytest.fixture(scope="module")
def bench_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorCluster]:
    with pooled_cluster(tmp_path_factory.mktemp("bench")) as c:
        yield c


def profile(**overrides: Any) -> dict[str, Any]:
    values = {
        "bufferPercent": 40,
        "minimum": 10,
        "maximum": 5000,
        "upscaleCooldown": "2s",
        "downscaleCooldown": "1h",
    }
    values.update(overrides)
    return values


def create_pods_parallel(c: OperatorCluster, ns: str, count: int, workers: int = 16) -> int:
    """Create ``count`` pods with ``workers`` threads; returns how many were admitted."""

    def one(i: int) -> bool:
        try:
            c.create_pod(ns, f"burst-{i}")
        except ApiException as exc:
            if exc.status == 403:
                return False
            raise
        return True

    with ThreadPoolExecutor(workers) as pool:
        return sum(pool.map(one, range(count)))


@pytest.mark.timeout(STEADY_SECONDS + 300)
def test_api_cost_of_a_1000_pod_burst(bench_cluster: OperatorCluster) -> None:
    c = bench_cluster
    label = {"bench": "burst"}
    roomy = c.new_namespace(label)
    c.policy("bench-burst", label, pods=profile(minimum=1500), configmaps=profile(minimum=50))
    op = OperatorThread(operator_settings(c, resync_seconds=30, coalesce_seconds=0.1)).start()
    try:
        c.wait_hard(roomy, {"pods": "1500", "configmaps": "50"})
        op.idle()
        runs0, writes0 = op.runtime.operator.queue.runs, op.writes()  # type: ignore[union-attr]
        gets0 = op.sample(
            "dynquota_api_requests_total",
            {"verb": "get", "resource": "resourcequotas", "code": "200"},
        )
        started = time.monotonic()
        admitted = create_pods_parallel(c, roomy, 1000)
        burst_seconds = time.monotonic() - started
        wait_until(
            lambda: (c.quota(roomy).status.used or {}).get("pods") in ("1000", "1k"),
            "status.used 1000",
        )
        time.sleep(1)
        op.idle()
        decisions = op.runtime.operator.queue.runs - runs0  # type: ignore[union-attr]
        writes = op.writes() - writes0
        gets = (
            op.sample(
                "dynquota_api_requests_total",
                {"verb": "get", "resource": "resourcequotas", "code": "200"},
            )
            - gets0
        )
        assert admitted == 1000
        assert writes == 0  # T(1000) = 1400 <= 1500: within the buffer, nothing to do

        # a runaway burst of 1,000 pods: every step is one decision with one write
        runaway = c.new_namespace(label)
        c.policy(
            "bench-runaway", {"bench": "runaway"}, pods=profile(), configmaps=profile(minimum=50)
        )
        c.core.patch_namespace(runaway, {"metadata": {"labels": {"bench": "runaway"}}})
        c.wait_hard(runaway, {"pods": "10", "configmaps": "50"})
        op.idle()
        runs1, writes1 = op.runtime.operator.queue.runs, op.writes()  # type: ignore[union-attr]
        ups1 = op.sample("dynquota_resizes_total", {"direction": "up", "reason": "upscale"})
        created, sequence = 0, [10]
        step_started = time.monotonic()
        while True:
            created += c.fill_pods(runaway, limit=1000 - created)
            if created >= 1000:
                break
            wait_until(lambda: int((c.hard(runaway) or {})["pods"]) > sequence[-1], "next step", 30)
            sequence.append(int((c.hard(runaway) or {})["pods"]))
            # admission reads status.hard: fill only once the quota controller copied it
            wait_until(
                lambda: (c.quota(runaway).status.hard or {}).get("pods") == str(sequence[-1]),
                "status.hard",
                30,
            )
        runaway_seconds = time.monotonic() - step_started
        time.sleep(3)  # one more cooldown: usage 1000 may still call for a step
        op.idle()
        final = int((c.hard(runaway) or {})["pods"])
        if final != sequence[-1]:
            sequence.append(final)
        runaway_decisions = op.runtime.operator.queue.runs - runs1  # type: ignore[union-attr]
        runaway_writes = op.writes() - writes1
        # steps counted by the operator (the polling above can miss a step that lands while
        # it fills): one write each; at most one more per step rewrites only the tenant line
        # (dynquota.io/message) when the runaway reaches its limit inside a cooldown
        steps = op.sample("dynquota_resizes_total", {"direction": "up", "reason": "upscale"}) - ups1
        assert steps >= len(sequence) - 1
        assert steps <= runaway_writes <= 2 * steps

        # steady state: nothing changes, nothing is written
        writes2, runs2 = op.writes(), op.runtime.operator.queue.runs  # type: ignore[union-attr]
        time.sleep(STEADY_SECONDS)
        steady_writes = op.writes() - writes2
        steady_decisions = op.runtime.operator.queue.runs - runs2  # type: ignore[union-attr]
        assert steady_writes == 0
        report(
            "API cost: 1,000-pod burst in one namespace",
            [
                f"within the buffer (minimum 1500): 1000 pods in {burst_seconds:.1f} s "
                f"(16 threads) -> {decisions} decisions, {writes:.0f} quota writes, "
                f"{gets:.0f} quota GETs",
                f"runaway (buffer 40%, cooldown 2 s): 1000 pods in {runaway_seconds:.0f} s, "
                f"{steps:.0f} steps -> {runaway_decisions} decisions, "
                f"{runaway_writes:.0f} quota writes ({steps:.0f} steps, "
                f"{runaway_writes - steps:.0f} tenant-line rewrites at the limit)",
                "hard: " + " -> ".join(map(str, sequence)),
                f"steady state {STEADY_SECONDS} s (resync every 30 s, quota controller "
                f"resync 10 s): {steady_decisions} decisions, {steady_writes:.0f} writes",
            ],
        )
    finally:
        op.stop()


@pytest.mark.timeout(REACTION_SAMPLES * 10 + 120)
def test_reaction_time(bench_cluster: OperatorCluster) -> None:
    c = bench_cluster
    label = {"bench": "reaction"}
    ns = c.new_namespace(label)
    c.policy(
        "bench-reaction",
        label,
        pods=profile(minimum=100, upscaleCooldown=f"{COOLDOWN}s"),
        configmaps=profile(minimum=50),
    )
    op = OperatorThread(operator_settings(c, resync_seconds=30, coalesce_seconds=0.1)).start()
    watch = QuotaWatch(c, ns)
    crossing_spec: list[float] = []
    crossing_status: list[float] = []
    expiry_spec: list[float] = []
    expiry_status: list[float] = []
    try:
        c.wait_hard(ns, {"pods": "100", "configmaps": "50"})
        # fill to just below the threshold: T(U) = ceil(1.4 U) > 100 first at U = 72
        for i in range(71):
            c.create_pod(ns, f"base-{i}")
        wait_until(lambda: (c.quota(ns).status.used or {}).get("pods") == "71", "71 used")
        for sample in range(REACTION_SAMPLES):
            quota = c.quota(ns)
            hard = quota.spec.hard["pods"]
            last_up = parse_time(quota.metadata.annotations["dynquota.io/last-upscale.pods"])
            by_expiry = sample % 2 == 1
            if by_expiry:
                # the crossing happens while the cooldown runs: the trigger is its end
                assert time.time() < last_up + COOLDOWN, "the previous step was observed late"
                c.create_pod(ns, f"s-{sample}")
                trigger = float(last_up + COOLDOWN)
            else:
                ready = last_up + COOLDOWN + 0.2
                wait_until(lambda r=ready: time.time() >= r, "cooldown over", 5)
                c.create_pod(ns, f"s-{sample}")
                trigger = time.time()
            new = wait_until(
                lambda h=int(hard): next(
                    (v for v in watch.first_times("pods") if int(v) > h), None
                ),
                "spec change",
                10,
            )
            wait_until(lambda n=new: n in watch.first_times("pods", "status"), "status change", 10)
            spec_delay = watch.first_times("pods")[new] - trigger
            status_delay = watch.first_times("pods", "status")[new] - trigger
            (expiry_spec if by_expiry else crossing_spec).append(spec_delay)
            (expiry_status if by_expiry else crossing_status).append(status_delay)
        lines = []
        for name, spec, status in (
            ("threshold crossing", crossing_spec, crossing_status),
            ("cooldown expiry", expiry_spec, expiry_status),
        ):
            spec_ms = (statistics.median(spec) * 1000, percentile(spec, 99) * 1000)
            status_ms = (statistics.median(status) * 1000, percentile(status, 99) * 1000)
            lines.append(
                f"{name}: n={len(spec)}; operator share (to spec.hard) p50 {spec_ms[0]:.0f} ms, "
                f"p99 {spec_ms[1]:.0f} ms; enforced (status.hard) p50 {status_ms[0]:.0f} ms, "
                f"p99 {status_ms[1]:.0f} ms"
            )
        report("Reaction time (coalescing window 0.1 s; timers fire at the exact instant)", lines)
        assert percentile(crossing_spec + expiry_spec, 99) < 1.0
    finally:
        watch.stop()
        op.stop()


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


@pytest.mark.timeout(1800)
def test_scale_2000_namespaces(bench_cluster: OperatorCluster, tmp_path: Path) -> None:
    c = bench_cluster
    label = {"bench": "scale"}
    c.policy("bench-scale", label, pods=profile(), configmaps=profile(minimum=50))
    names = [f"scale-{i:05d}" for i in range(SCALE_NAMESPACES)]
    started = time.monotonic()

    def create(name: str) -> None:
        c.core.create_namespace({"metadata": {"name": name, "labels": label}})

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(create, names))
    created_in = time.monotonic() - started

    def count() -> int:
        quotas = c.core.list_resource_quota_for_all_namespaces(
            label_selector="app.kubernetes.io/managed-by=dynquota"
        ).items
        return sum(1 for q in quotas if q.metadata.namespace.startswith("scale-"))

    env = dict(os.environ, PYTHONUNBUFFERED="1")
    log = (tmp_path / "operator.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "dynquota.cli", "run", "--kubeconfig", c.sa_kubeconfig,
         "--namespace", OPERATOR_NS, "--metrics-port", "0", "--probe-port", "0",
         "--kill-switch-delete-qps", "200", "--log-level", "WARNING"],
        stdout=log, stderr=subprocess.STDOUT, env=env,
    )  # fmt: skip
    try:
        t0 = time.monotonic()
        wait_until(lambda: count() == SCALE_NAMESPACES, "every quota created", 600, interval=1)
        initial = time.monotonic() - t0
        time.sleep(5)
        rss = _rss_kib(proc.pid)
        c.kill_switch("true")
        t1 = time.monotonic()
        wait_until(lambda: count() == 0, "every quota deleted", 600, interval=1)
        deleted = time.monotonic() - t1
        c.kill_switch(None)
        t2 = time.monotonic()
        wait_until(lambda: count() == SCALE_NAMESPACES, "every quota re-created", 600, interval=1)
        recreated = time.monotonic() - t2
        time.sleep(2)
        rss_after = _rss_kib(proc.pid)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
    report(
        f"Scale: {SCALE_NAMESPACES} namespaces",
        [
            f"namespaces created by the bench in {created_in:.0f} s (16 threads)",
            f"operator start -> {SCALE_NAMESPACES} quotas created: {initial:.1f} s",
            f"operator RSS after the initial reconcile: {rss / 1024:.0f} MiB; "
            f"after the kill switch cycle: {rss_after / 1024:.0f} MiB",
            f"kill switch on -> every quota deleted: {deleted:.1f} s (client-side limit 200/s)",
            f"kill switch off -> every quota re-created: {recreated:.1f} s",
        ],
    )
