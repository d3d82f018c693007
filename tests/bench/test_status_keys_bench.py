"""Status-driven keys (issue #12) on a real local control plane (``make bench``; figures printed).

1. Reaction time of ``secrets`` (sized from the quota's ``status.used``) beside the
   tally-driven ``pods`` (the baseline), one namespace, samples interleaved so both see the
   same load:
   - growth: from the create that crosses the threshold (the clock starts before the call:
     quota admission charges ``status.used`` inside it) to the new ``spec.hard`` seen by a
     watch, as ``test_operator_bench.py::test_reaction_time`` times ``pods``;
   - shrink: from the last of the deletions returning to the downscale seen by the watch,
     with a 1 s ``downscaleCooldown`` (the peak over that window keeps the old usage for 1 s
     after the decrease is seen, so 1 s of every shrink figure is the window itself).
   With kube-controller-manager's ``--resource-quota-sync-period`` at the test bed's 10 s and
   at its default 5 minutes (``DYNQUOTA_BENCH_QUOTA_SYNC_PERIODS``, default ``10,300``).
   Samples: ``DYNQUOTA_BENCH_KEY_SAMPLES`` (default 30) per key and direction.
2. API cost of a 1,000-Secret burst: within the buffer (0 writes), then a runaway (one quota
   write per step, plus at most one ``dynquota.io/message`` write per step when the runaway
   hits its limit inside a cooldown), then quota writes at rest
   (``DYNQUOTA_BENCH_KEY_REST_SECONDS``, default 60).

Gates (issue #12): growth p99 of ``secrets`` within 2x of ``pods`` in the same run; one write
per step; 0 writes at rest. The operator runs in-process with the chart's RBAC (it has no verb
on Secrets).
"""

from __future__ import annotations

import math
import os
import statistics
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from figures import QuotaWatch, percentile, pooled_cluster, report, stored_count  # same directory
from kubernetes.client.exceptions import ApiException

from dynquota.policy import parse_time
from dynquota.testing.operator import (
    OperatorCluster,
    OperatorThread,
    fill,
    operator_settings,
)
from dynquota.testing.wait import wait_until

pytestmark = pytest.mark.bench

SAMPLES = int(os.environ.get("DYNQUOTA_BENCH_KEY_SAMPLES", "30"))
REST_SECONDS = int(os.environ.get("DYNQUOTA_BENCH_KEY_REST_SECONDS", "60"))
SYNC_PERIODS = [
    int(s) for s in os.environ.get("DYNQUOTA_BENCH_QUOTA_SYNC_PERIODS", "10,300").split(",") if s
]
BUFFER = 40  # percent
PREFILL = 71  # objects of each key before the samples: T(71) = 100
DELETE = 1  # object deleted per shrink sample: T drops by 1 or 2, one downscale
KEYS = ("pods", "secrets")


def target(used: int, minimum: int = 10, maximum: int = 5000) -> int:
    """T(U) of docs/quota-keys.md for a count key with the benchmark's buffer."""
    return min(maximum, max(minimum, math.ceil(used * (100 + BUFFER) / 100)))


def profile(**overrides: Any) -> dict[str, Any]:
    values: dict[str, Any] = {
        "bufferPercent": BUFFER,
        "minimum": 10,
        "maximum": 5000,
        "upscaleCooldown": "2s",
        "downscaleCooldown": "1h",
    }
    values.update(overrides)
    return values


def create_secret(c: OperatorCluster, ns: str, name: str | None = None) -> None:
    c.core.create_namespaced_secret(
        ns, {"metadata": {"name": name or f"s-{uuid.uuid4().hex[:8]}"}, "stringData": {"k": "v"}}
    )


class Objects:
    """The pods or Secrets the benchmark made in one namespace, by name (creation order)."""

    def __init__(self, c: OperatorCluster, ns: str, key: str) -> None:
        self.c, self.ns, self.key = c, ns, key
        self.names: list[str] = []

    def create(self) -> None:
        name = f"{self.key[:1]}-{uuid.uuid4().hex[:8]}"
        if self.key == "pods":
            self.c.create_pod(self.ns, name)
        else:
            create_secret(self.c, self.ns, name)
        self.names.append(name)

    def delete(self, count: int) -> None:
        for _ in range(count):
            name = self.names.pop()
            if self.key == "pods":
                self.c.core.delete_namespaced_pod(name, self.ns, grace_period_seconds=0)
            else:
                self.c.core.delete_namespaced_secret(name, self.ns)


def used(c: OperatorCluster, ns: str, key: str) -> int | None:
    quota = c.quota(ns)
    value = ((quota and quota.status and quota.status.used) or {}).get(key)
    return None if value is None else stored_count(value)


@pytest.mark.parametrize("sync_period", SYNC_PERIODS)
@pytest.mark.timeout(SAMPLES * 30 + 300)
def test_status_key_reaction_time(sync_period: int, tmp_path: Path) -> None:
    with pooled_cluster(tmp_path, sync_period) as c:
        label = {"bench": "keys-reaction"}
        ns = c.new_namespace()
        objects = {key: Objects(c, ns, key) for key in KEYS}
        for key in KEYS:
            for _ in range(PREFILL):
                objects[key].create()
        c.policy(
            "bench-keys-reaction",
            label,
            pods=profile(downscaleCooldown="1s"),
            secrets=profile(downscaleCooldown="1s"),
        )
        op = OperatorThread(
            operator_settings(
                c, resync_seconds=30, coalesce_seconds=0.1, quota_sync_period=sync_period
            )
        ).start()
        c.core.patch_namespace(ns, {"metadata": {"labels": label}})
        watch = QuotaWatch(c, ns)
        growth: dict[str, list[float]] = {key: [] for key in KEYS}
        shrink: dict[str, list[float]] = {key: [] for key in KEYS}
        try:
            # written at T(0) = 10, raised to usage at once, T(71) = 100 after the cooldown
            c.wait_hard(ns, {"pods": "100", "configmaps": "50", "secrets": "100"}, timeout=120)
            assert used(c, ns, "secrets") == PREFILL
            for sample in range(SAMPLES):
                for key in KEYS:
                    # each create crosses the threshold: T(U + 1) > T(U) = hard
                    count = len(objects[key].names) + 1
                    quota = c.quota(ns)
                    last = quota.metadata.annotations[f"dynquota.io/last-upscale.{key}"]
                    ready = _epoch(last) + 2 + 0.2  # the upscale cooldown is over
                    wait_until(lambda r=ready: time.time() >= r, "cooldown over", 10)
                    started = time.time()
                    objects[key].create()
                    at = wait_until(
                        lambda k=key, n=count, s=started: watch.first(k, target(n), s),
                        f"{key} grows to {target(count)} (sample {sample})",
                        30,
                    )
                    growth[key].append(at - started)
            for sample in range(SAMPLES):
                for key in KEYS:
                    count = len(objects[key].names) - DELETE
                    objects[key].delete(DELETE)
                    done = time.time()
                    at = wait_until(
                        lambda k=key, n=count, d=done: watch.first(k, target(n), d),
                        f"{key} shrinks to {target(count)} (sample {sample})",
                        sync_period + 60,
                    )
                    shrink[key].append(at - done)
        finally:
            watch.stop()
            op.stop()
        lines = [
            f"kube-controller-manager --resource-quota-sync-period={sync_period}s; "
            f"coalescing 0.1 s; upscale cooldown 2 s, downscale cooldown 1 s; "
            f"load average {os.getloadavg()[0]:.1f} (2 cores)"
        ]
        for name, values in (("growth", growth), ("shrink", shrink)):
            for key in KEYS:
                source = "tally, baseline" if key == "pods" else "status.used"
                ms = [v * 1000 for v in values[key]]
                lines.append(
                    f"{name} {key:8} ({source}): n={len(ms)} p50 {statistics.median(ms):.0f} ms, "
                    f"p99 {percentile(ms, 99):.0f} ms, max {max(ms):.0f} ms"
                )
        report(f"Status-driven keys: reaction time (sync period {sync_period} s)", lines)
        pods_p99 = percentile(growth["pods"], 99)
        secrets_p99 = percentile(growth["secrets"], 99)
        assert secrets_p99 <= 2 * pods_p99, (secrets_p99, pods_p99)


def _epoch(text: str) -> float:
    return float(parse_time(text))


def fill_secrets(c: OperatorCluster, ns: str, limit: int) -> int:
    """Create Secrets until the quota refuses one (403 exceeded quota); returns how many."""
    return fill(lambda: create_secret(c, ns), limit)


def create_secrets_parallel(c: OperatorCluster, ns: str, count: int, workers: int = 16) -> int:
    def one(_: int) -> bool:
        try:
            create_secret(c, ns)
        except ApiException as exc:
            if exc.status == 403:
                return False
            raise
        return True

    with ThreadPoolExecutor(workers) as pool:
        return sum(pool.map(one, range(count)))


def secrets_hard(c: OperatorCluster, ns: str, part: str = "spec") -> int:
    """spec.hard (or status.hard) of ``secrets`` in the managed quota of ``ns``; 0 if unset."""
    quota = c.quota(ns)
    hard = (quota.spec.hard if part == "spec" else quota.status.hard) or {}
    return stored_count(hard.get("secrets", "0"))


def _wait_used(c: OperatorCluster, ns: str, key: str, value: int) -> Callable[[], bool]:
    return lambda: used(c, ns, key) == value


@pytest.mark.timeout(REST_SECONDS + 600)
def test_api_cost_of_a_1000_secret_burst(tmp_path: Path) -> None:
    with pooled_cluster(tmp_path, 10) as c:
        label = {"bench": "keys-burst"}
        roomy = c.new_namespace(label)
        c.policy("bench-keys-burst", label, secrets=profile(minimum=1500))
        op = OperatorThread(operator_settings(c, resync_seconds=30, coalesce_seconds=0.1)).start()
        try:
            c.wait_hard(roomy, {"pods": "10", "configmaps": "50", "secrets": "1500"})
            op.idle()
            runs0, writes0 = op.runtime.operator.queue.runs, op.writes()  # type: ignore[union-attr]
            started = time.monotonic()
            admitted = create_secrets_parallel(c, roomy, 1000)
            burst_seconds = time.monotonic() - started
            wait_until(_wait_used(c, roomy, "secrets", 1000), "status.used 1000", 60)
            time.sleep(1)  # a late decision would show here
            op.idle()
            decisions = op.runtime.operator.queue.runs - runs0  # type: ignore[union-attr]
            writes = op.writes() - writes0
            assert admitted == 1000
            assert writes == 0  # T(1000) = 1400 <= 1500: within the buffer, nothing to do

            # a runaway minting 1,000 Secrets: every step is one decision with one write
            runaway = c.new_namespace()
            watch = QuotaWatch(c, runaway)
            c.policy("bench-keys-runaway", {"bench": "keys-runaway"}, secrets=profile())
            c.core.patch_namespace(runaway, {"metadata": {"labels": {"bench": "keys-runaway"}}})
            c.wait_hard(runaway, {"pods": "10", "configmaps": "50", "secrets": "10"})
            op.idle()
            runs1, writes1 = op.runtime.operator.queue.runs, op.writes()  # type: ignore[union-attr]
            mark = len(watch.seen)
            assert mark > 0
            assert stored_count(watch.seen[-1].spec["secrets"]) == 10
            created = 0
            step_started = time.monotonic()
            while True:
                created += fill_secrets(c, runaway, limit=1000 - created)
                if created >= 1000:
                    break
                # refused at hard = usage: wait for the next step past it, then for the quota
                # controller to copy it into status.hard (what admission reads)
                wait_until(lambda n=created: secrets_hard(c, runaway) > n, "next step", 30)
                wait_until(
                    lambda n=created: secrets_hard(c, runaway, "status") > n, "status.hard", 30
                )
            runaway_seconds = time.monotonic() - step_started
            time.sleep(3)  # one more cooldown: usage 1000 may still call for a step
            op.idle()
            assert secrets_hard(c, runaway) == target(1000)
            # every write the quota went through, as its watch saw them: a step changes
            # spec.hard; any other write changes only annotations (the quota controller's
            # status updates change neither)
            sequence, other_writes, other_keys = [10], 0, set()
            for i in range(mark, len(watch.seen)):
                hard, annotations = watch.seen[i].spec, watch.seen[i].annotations
                previous = watch.seen[i - 1].annotations
                value = stored_count(hard["secrets"])
                if value != sequence[-1]:
                    sequence.append(value)
                elif annotations != previous:
                    other_writes += 1
                    other_keys |= {
                        k
                        for k in annotations.keys() | previous.keys()
                        if annotations.get(k) != previous.get(k)
                    }
            assert sequence == sorted(sequence), sequence
            assert sequence[-1] == target(1000), sequence
            runaway_decisions = op.runtime.operator.queue.runs - runs1  # type: ignore[union-attr]
            runaway_writes = op.writes() - writes1
            steps = len(sequence) - 1
            # every write is seen (no write without a change), one per step; the others only
            # rewrite the tenant line when the runaway hits its limit inside a cooldown
            assert runaway_writes == steps + other_writes
            assert other_keys <= {"dynquota.io/message"}, other_keys
            assert other_writes <= steps

            # at rest: the quota controller recounts every 10 s; nothing is written
            writes2, runs2 = op.writes(), op.runtime.operator.queue.runs  # type: ignore[union-attr]
            time.sleep(REST_SECONDS)
            rest_writes = op.writes() - writes2
            rest_decisions = op.runtime.operator.queue.runs - runs2  # type: ignore[union-attr]
            assert rest_writes == 0
        finally:
            if watch is not None:
                watch.stop()
            op.stop()
        report(
            "Status-driven keys: API cost of a 1,000-Secret burst",
            [
                f"within the buffer (minimum 1500): 1000 Secrets in {burst_seconds:.1f} s "
                f"(16 threads) -> {decisions} decisions, {writes:.0f} quota writes",
                f"runaway (buffer 40%, cooldown 2 s): 1000 Secrets in {runaway_seconds:.0f} s, "
                f"{steps} steps -> {runaway_decisions} decisions, {runaway_writes:.0f} quota "
                f"writes: {steps} steps (one write each) + {other_writes} tenant-line writes "
                f"({', '.join(sorted(other_keys)) or '-'}: at the limit inside a cooldown)",
                "hard: " + " -> ".join(map(str, sequence)),
                f"at rest {REST_SECONDS} s (resync every 30 s, quota controller sync 10 s): "
                f"{rest_decisions} decisions, {rest_writes:.0f} writes",
                f"load average {os.getloadavg()[0]:.1f} (2 cores)",
            ],
        )
