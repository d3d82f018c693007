"""Node growth against the steps alone, in one process (issue 26): a DaemonSet on 10 kwok
nodes, its namespace sized by pods buffer 40 %, minimum 10, maximum 100, upscale cooldown
10 min (production-like: no step in the run), then 20 nodes added at once (10 -> 30 within one
cooldown). Run once with ``DYNQUOTA_NODE_GROWTH=false`` and once with the rule on, each on a
control plane of its own; printed: per new node, seconds from the Node's creation to its
DaemonSet pod's (1 s resolution: both are creationTimestamps), and the pods after the wait.

``make bench`` (or ``pytest -m bench -s tests/bench/test_node_growth_bench.py``); each run
waits ``DYNQUOTA_NODE_BENCH_WAIT`` seconds (default 60) for the new nodes' pods.
"""

from __future__ import annotations

import os
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

import kubernetes
import pytest

from dynquota.testing.controlplane import LocalControlPlane
from dynquota.testing.growth import daemon_set, node_pod_delays
from dynquota.testing.operator import (
    OperatorCluster,
    OperatorThread,
    install_operator,
    operator_settings,
)
from dynquota.testing.wait import wait_until

pytestmark = [pytest.mark.bench, pytest.mark.timeout(900)]

WAIT = float(os.environ.get("DYNQUOTA_NODE_BENCH_WAIT", "60"))
SCOPE = {"dq-bench": "node-growth"}
PROFILE = {"bufferPercent": 40, "minimum": 10, "maximum": 100, "upscaleCooldown": "10m",
           "downscaleCooldown": "1h"}  # fmt: skip


@dataclass
class Run:
    delays: dict[str, float]
    pods: int
    wanted: int
    hard: str


def one_run(workdir: Path, node_growth: bool) -> Run:
    with LocalControlPlane(resource_quota_sync_period=10, nodes=10, client_qps=100) as cp:
        kubeconfig = install_operator(cp, workdir)
        api = kubernetes.config.new_client_from_config(config_file=cp.kubeconfig)
        c = OperatorCluster(cp, api, kubeconfig)
        ns = c.new_namespace(SCOPE)
        c.policy("p-bench", SCOPE, pods=PROFILE)
        op = OperatorThread(operator_settings(c, node_growth=node_growth)).start()
        try:
            c.wait_hard(ns, {"pods": "10", "configmaps": "50"})
            c.apps.create_namespaced_daemon_set(ns, daemon_set("agent"), _request_timeout=30)

            def scheduled() -> int:
                ds = c.apps.read_namespaced_daemon_set_status("agent", ns, _request_timeout=30)
                return ds.status.current_number_scheduled or 0

            wait_until(lambda: scheduled() == 10, "a pod on each of the 10 nodes", timeout=60)
            time.sleep(1.0)  # creationTimestamps have 1 s resolution: the nodes come after it
            added = set(cp.add_nodes(20))
            deadline = time.monotonic() + WAIT
            while time.monotonic() < deadline and scheduled() < 30:
                time.sleep(0.5)  # the sampling interval of a measurement
            delays = node_pod_delays(c, ns, added)
            hard = c.quota(ns).spec.hard["pods"]
            return Run(delays, scheduled(), 30, hard)
        finally:
            op.stop()
            api.close()


def test_each_new_nodes_daemonset_pod_within_15_s(tmp_path_factory: pytest.TempPathFactory) -> None:
    off = one_run(tmp_path_factory.mktemp("steps"), node_growth=False)
    on = one_run(tmp_path_factory.mktemp("growth"), node_growth=True)
    for name, run in (("steps alone", off), ("node growth", on)):
        values = sorted(run.delays.values())
        p50 = statistics.median(values) if values else float("nan")
        print(
            f"\n{name}: {run.pods}/{run.wanted} pods after {WAIT:.0f} s, hard pods {run.hard}; "
            f"{len(values)}/20 new nodes with their pod, Node -> pod p50 {p50:.0f} s, max "
            f"{values[-1] if values else float('nan'):.0f} s"
        )
    assert on.pods == 30
    assert len(on.delays) == 20
    assert max(on.delays.values()) <= 15.0, on.delays
    assert on.hard == "30"
    assert off.pods < 30  # the steps alone wait for the 10 min cooldown
