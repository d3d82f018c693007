"""Chaos soak (``make soak``; not part of ``make test``): two operator replicas, 200 namespaces
with churning pods and ConfigMaps, random faults, the invariant checker every second.

    .venv/bin/python tests/soak/soak.py --seconds 1800      # make soak SOAK_SECONDS=1800

Faults, one at a time with quiet gaps between them, chosen at random (``--seed``): Toxiproxy's
latency 2 s, connection resets, refused connections, half-open hang and 4 KB/s bandwidth (on
every replica's path, or the leader's only), 429 from API Priority and Fairness, etcd paused
(up to 30 s), a kube-apiserver restart, an etcd compaction, and ``kill -9`` of the leader
(restarted after a while). After each fault, each namespace's convergence time is measured
(until it is where its stamped cooldowns permit). The table at the end: faults by kind,
invariant violations (must be 0; the exit code is 1 otherwise), convergence p50/p99/max,
writes per decision, operator RSS at start and end.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

from kubernetes.client.exceptions import ApiException

from dynquota.testing.faultbed import FaultBed
from dynquota.testing.invariants import INVARIANTS, percentile
from dynquota.testing.toxiproxy import TRANSPORT_FAULTS
from dynquota.testing.wait import wait_until

PODS = {
    "bufferPercent": 40,
    "minimum": 10,
    "maximum": 60,
    "upscaleCooldown": "10s",
    "downscaleCooldown": "2m",
}
CONFIGMAPS = {**PODS, "minimum": 20, "maximum": 80, "upscaleCooldown": "5s"}
GOLD = {**PODS, "maximum": 120, "upscaleCooldown": "5s"}
FAULTS = (*TRANSPORT_FAULTS, "429", "etcd-pause", "apiserver-restart", "etcd-compaction", "kill-9")


def log(message: str) -> None:
    print(time.strftime("%H:%M:%S ") + message, flush=True)


class Churn:
    """Pods and ConfigMaps created and deleted at random in every namespace (a thread), and
    a few runaways filling their quota."""

    def __init__(self, bed: FaultBed, namespaces: list[str], rng: random.Random) -> None:
        self.bed = bed
        self.core: Any = bed.cluster.core
        self.namespaces = namespaces
        self.runaways = namespaces[:5]
        self.rng = rng
        self.ops = Counter[str]()
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._churn, name="churn", daemon=True),
            threading.Thread(target=self._runaway, name="runaway", daemon=True),
        ]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(90)

    def _call(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> None:
        try:
            fn(*args, _request_timeout=10, **kwargs)
            self.ops[what] += 1
        except ApiException as exc:
            self.ops[f"{what} {exc.status}"] += 1
        except Exception:  # timeouts and refused connections during apiserver faults
            self.ops[f"{what} error"] += 1
            self._stop.wait(0.5)

    def _churn(self) -> None:
        while not self._stop.is_set():
            ns = self.rng.choice(self.namespaces)
            roll = self.rng.random()
            if roll < 0.35:
                self._call("pod create", self.core.create_namespaced_pod, ns, _pod())
            elif roll < 0.6:
                self._delete_one(ns, "pod")
            elif roll < 0.8:
                self._call("cm create", self.core.create_namespaced_config_map, ns, _configmap())
            else:
                self._delete_one(ns, "cm")
            self._stop.wait(0.1)

    def _delete_one(self, ns: str, kind: str) -> None:
        try:
            if kind == "pod":
                items = self.core.list_namespaced_pod(ns, _request_timeout=10).items
            else:
                items = [
                    c
                    for c in self.core.list_namespaced_config_map(ns, _request_timeout=10).items
                    if c.metadata.name != "kube-root-ca.crt"
                ]
        except Exception:
            self.ops[f"{kind} list error"] += 1
            self._stop.wait(0.5)
            return
        if not items:
            return
        name = self.rng.choice(items).metadata.name
        if kind == "pod":
            self._call(
                "pod delete",
                self.core.delete_namespaced_pod,
                name,
                ns,
                grace_period_seconds=0,
            )
        else:
            self._call("cm delete", self.core.delete_namespaced_config_map, name, ns)

    def _runaway(self) -> None:
        while not self._stop.is_set():
            for ns in self.runaways:
                for _ in range(200):
                    try:
                        self.core.create_namespaced_pod(ns, _pod(), _request_timeout=10)
                        self.ops["runaway pod"] += 1
                    except Exception:
                        break
            self._stop.wait(2)
            # a runaway that reached its maximum is reset now and then, to keep climbing
            if self.rng.random() < 0.1:
                ns = self.rng.choice(self.runaways)
                with contextlib.suppress(Exception):
                    self.core.delete_collection_namespaced_pod(
                        ns, grace_period_seconds=0, _request_timeout=30
                    )


def _pod() -> dict[str, Any]:
    return {
        "metadata": {"name": f"p-{uuid.uuid4().hex[:10]}"},
        "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]},
    }


def _configmap() -> dict[str, Any]:
    return {"metadata": {"name": f"cm-{uuid.uuid4().hex[:10]}"}, "data": {"k": "v"}}


class Soak:
    def __init__(self, bed: FaultBed, seconds: float, namespaces: int, seed: int) -> None:
        self.bed = bed
        self.seconds = seconds
        self.count = namespaces
        self.rng = random.Random(seed)
        self.convergence: list[float] = []
        self.unconverged_after: list[str] = []
        self.rss: dict[str, list[int | None]] = {}
        self.restarts = Counter[str]()

    def setup(self) -> list[str]:
        cluster = self.bed.cluster
        label = {"soak": "1"}
        namespaces = []
        for i in range(self.count):
            labels = {**label, "tier": "gold"} if i % 10 == 0 else label
            namespaces.append(cluster.new_namespace(labels))
        cluster.policy("soak", label, pods=PODS, configmaps=CONFIGMAPS)
        cluster.policy("soak-gold", {"tier": "gold"}, pods=GOLD, configmaps=CONFIGMAPS, priority=10)
        self.bed.start_replicas()
        log(f"{self.count} namespaces, 2 policies, replicas up; waiting for every quota")
        self.bed.checker.wait_converged(300)
        return namespaces

    def run(self) -> None:
        namespaces = self.setup()
        churn = Churn(self.bed, namespaces, self.rng)
        for replica in self.bed.replicas.values():
            self.rss[replica.name] = [replica.rss_kib(), None]
        churn.start()
        end = time.monotonic() + self.seconds
        try:
            while time.monotonic() < end:
                self._quiet(self.rng.uniform(10, 25), end)
                if time.monotonic() >= end:
                    break
                kind = self.rng.choice(FAULTS)
                seconds = min(self.rng.uniform(8, 30), max(1.0, end - time.monotonic()))
                try:
                    self._inject(kind, seconds)
                except Exception as exc:  # e.g. no leader to kill: reported, the soak goes on
                    log(f"  fault {kind} not injected: {exc!r}")
                self._restart_exited()
                self._measure_convergence(kind)
        finally:
            churn.stop()
        for replica in self.bed.replicas.values():
            self.rss[replica.name][1] = replica.rss_kib()
        self.bed.checker.check_audit()
        self.churn_ops = churn.ops

    def _restart_exited(self) -> None:
        # what a Deployment would do for a replica that exited (the checker reports it)
        for replica in self.bed.replicas.values():
            if replica.pid is None:
                log(f"  restarting {replica.name} (exited: {replica.exited_unexpectedly()})")
                replica.start()
                self.restarts[replica.name] += 1

    def _quiet(self, seconds: float, end: float) -> None:
        deadline = min(time.monotonic() + seconds, end)
        wait_until(lambda: time.monotonic() >= deadline, "quiet", timeout=seconds + 5)

    def _hold(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        wait_until(lambda: time.monotonic() >= deadline, "fault", timeout=seconds + 5)

    def _inject(self, kind: str, seconds: float) -> None:
        bed = self.bed
        if kind in TRANSPORT_FAULTS:
            only_leader = self.rng.random() < 0.5
            holder = bed.lease_holder()
            targets = [holder] if only_leader and holder in bed.replicas else None
            log(f"fault {kind} for {seconds:.0f} s on {targets or 'every path'}")
            with bed.transport(kind, replicas=targets):  # type: ignore[arg-type]
                self._hold(seconds)
        elif kind == "429":
            log(f"fault 429 for {seconds:.0f} s")
            with bed.throttled(noise_threads=2):
                self._hold(seconds)
        elif kind == "etcd-pause":
            log(f"fault etcd paused for {seconds:.0f} s")
            with bed.etcd_paused():
                self._hold(seconds)
        elif kind == "apiserver-restart":
            log("fault kube-apiserver restart")
            bed.restart_apiserver()
        elif kind == "etcd-compaction":
            log("fault etcd compaction")
            bed.compact_etcd()
        elif kind == "kill-9":
            index = bed.checker.note_fault("kill-9", time.time())
            try:
                killed = bed.kill_leader()
                log(f"fault kill -9 of the leader {killed.name}; restart in {seconds:.0f} s")
                self._hold(seconds)
                killed.start()
                self.restarts[killed.name] += 1
            finally:
                bed.checker.end_fault(index)

    def _measure_convergence(self, kind: str) -> None:
        """Per governed namespace, the seconds from the fault's end until it is where its
        stamps permit; a namespace created now is included (a replica that stopped deciding
        shows up here)."""
        began = time.monotonic()
        with contextlib.suppress(Exception):
            self.bed.cluster.new_namespace({"soak": "1"})
        limit = 2 * self.bed.resync_seconds + 60
        pending: set[str] | None = None
        while time.monotonic() - began < limit:
            try:
                now_unconverged = set(self.bed.checker.unconverged())
            except Exception:
                time.sleep(0.5)
                continue
            elapsed = time.monotonic() - began
            if pending is None:
                last = self.bed.checker.last
                pending = set(last.governing) if last is not None else set()
                pending |= now_unconverged
            done = pending - now_unconverged
            self.convergence.extend(elapsed for _ in done)
            pending -= done
            if not pending:
                break
            time.sleep(0.5)
        if pending:
            self.unconverged_after.append(f"{kind}: {sorted(pending)[:5]}")
            self.convergence.extend(float("inf") for _ in pending)
        log(f"  converged after {time.monotonic() - began:.1f} s")

    def table(self) -> str:
        checker = self.bed.checker
        attempts, ok = checker.operator_writes()
        by_kind = Counter(v.invariant for v in checker.violations)
        finite = [c for c in self.convergence if c != float("inf")]
        rows = [
            ("chaos duration", f"{self.seconds:.0f} s"),
            ("namespaces", str(self.count)),
            ("checker samples (failed)", f"{checker.samples} ({checker.failed_samples})"),
        ]
        rows += [(f"faults: {k}", str(v)) for k, v in sorted(self.bed.fault_counts.items())]
        rows += [(f"violations: {name}", str(by_kind.get(name, 0))) for name in INVARIANTS]
        rows += [
            ("violations: total", str(len(checker.violations))),
            ("convergence p50 / p99 / max", _p(finite, self.convergence)),
            ("faults not converged within 2 x resync + 60 s", str(len(self.unconverged_after))),
            ("quota write requests (audit) / successful", f"{attempts} / {ok}"),
            ("writes per decision (requests per successful write)", f"{attempts / max(ok, 1):.3f}"),
            ("liveness red seconds", str(dict(checker.red_seconds) or 0)),
        ]
        for name, (start, end) in self.rss.items():
            rows.append(
                (f"RSS {name} start / end (restarts)", f"{_mib(start)} / {_mib(end)} "
                 f"({self.restarts.get(name, 0)})")
            )  # fmt: skip
        width = max(len(k) for k, _ in rows)
        return "\n".join(f"| {k.ljust(width)} | {v} |" for k, v in rows)


def _p(finite: list[float], all_values: list[float]) -> str:
    if not all_values:
        return "-"
    return (
        f"{percentile(all_values, 0.5):.1f} s / {percentile(all_values, 0.99):.1f} s / "
        f"{max(finite) if finite else float('nan'):.1f} s (n={len(all_values)})"
    )


def _mib(kib: int | None) -> str:
    return "-" if kib is None else f"{kib / 1024:.0f} MiB"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--seconds", type=float, default=float(os.environ.get("SOAK_SECONDS", 1800))
    )
    parser.add_argument("--namespaces", type=int, default=200)
    parser.add_argument("--seed", type=int, default=int(time.time()))
    parser.add_argument("--resync-seconds", type=int, default=30)
    parser.add_argument("--workdir", type=Path, default=None)
    args = parser.parse_args()
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="dynquota-soak-"))
    log(f"soak: {args.seconds:.0f} s, seed {args.seed}, logs in {workdir}")
    with FaultBed(workdir, resync_seconds=args.resync_seconds, watch_timeout_seconds=60) as bed:
        soak = Soak(bed, args.seconds, args.namespaces, args.seed)
        soak.run()
        bed.checker.stop()
        print(soak.table())
        for violation in bed.checker.violations[:50]:
            print(violation)
        for line in soak.unconverged_after:
            print(f"not converged after {line}")
        print(f"churn: {dict(soak.churn_ops)}")
        return 1 if bed.checker.violations else 0


if __name__ == "__main__":
    sys.exit(main())
