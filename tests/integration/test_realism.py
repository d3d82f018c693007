"""The test bed behaves like a cluster with kubelets, and dynquota counts what the quota counts.

``node_cluster`` runs kube-scheduler and kwok with a few simulated nodes: pods are bound and
become Running, a Job's pods complete, a node can be lost. Each test checks dynquota's own
tally (the ``dynquota_tally`` metric, from its metadata-only watches) against the real quota
controller's ``status.used`` at the moments that matter.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable
from typing import Any

import kubernetes
import pytest
from kubernetes.client.exceptions import ApiException

from dynquota.testing.audit import AuditLog
from dynquota.testing.operator import PAUSE, OperatorCluster, OperatorThread
from dynquota.testing.quotaaudit import QuotaLedger, refused_at
from dynquota.testing.wait import wait_until

StartOperator = Callable[..., OperatorThread]


def profile(
    buffer: int = 40, minimum: int = 10, maximum: int = 100, up: str = "2s"
) -> dict[str, Any]:
    return {
        "bufferPercent": buffer,
        "minimum": minimum,
        "maximum": maximum,
        "upscaleCooldown": up,
        "downscaleCooldown": "1h",
    }


CONFIGMAPS = profile(minimum=20, maximum=200)


def deployment(name: str, replicas: int, **strategy: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "replicas": replicas,
        "selector": {"matchLabels": {"app": name}},
        "template": {
            "metadata": {"labels": {"app": name}},
            "spec": {"containers": [{"name": "c", "image": PAUSE}]},
        },
    }
    if strategy:
        spec["strategy"] = {"type": "RollingUpdate", "rollingUpdate": strategy}
    return {"metadata": {"name": name}, "spec": spec}


def pod_phases(c: OperatorCluster, ns: str) -> dict[str, str]:
    return {p.metadata.name: p.status.phase for p in c.core.list_namespaced_pod(ns).items}


def used_pods(c: OperatorCluster, ns: str) -> int | None:
    quota = c.quota(ns)
    used = (quota and quota.status and quota.status.used) or {}
    return int(used["pods"]) if "pods" in used else None


def tally(op: OperatorThread, ns: str) -> float:
    return op.sample("dynquota_tally", {"namespace": ns, "resource": "pods"})


# -- the test bed itself ------------------------------------------------------------------------


def test_deployment_pods_run_on_kwok_nodes_and_a_job_completes(
    node_cluster: OperatorCluster, node_scope: dict[str, str]
) -> None:
    c = node_cluster
    ns = c.new_namespace(node_scope)
    nodes = set(c.cp.node_names())
    assert len(nodes) >= 3
    assert nodes <= c.cp.ready_nodes()
    c.apps.create_namespaced_deployment(ns, deployment("web", 4))
    pods = wait_until(
        lambda: (
            (items := c.core.list_namespaced_pod(ns).items)
            and len(items) == 4
            and all(p.status.phase == "Running" and p.status.pod_ip for p in items)
            and items
        ),
        "4 Running pods with IPs",
    )
    assert {p.spec.node_name for p in pods} <= nodes  # bound by kube-scheduler
    wait_until(
        lambda: c.apps.read_namespaced_deployment("web", ns).status.available_replicas == 4,
        "Deployment available",
    )
    batch: Any = kubernetes.client.BatchV1Api(c.api)
    batch.create_namespaced_job(
        ns,
        {
            "metadata": {"name": "once"},
            "spec": {
                "completions": 3,
                "parallelism": 3,
                "template": {
                    "spec": {
                        "restartPolicy": "Never",
                        "containers": [{"name": "c", "image": PAUSE}],
                    }
                },
            },
        },
    )
    job = wait_until(
        lambda: (j := batch.read_namespaced_job("once", ns)).status.succeeded == 3 and j,
        "Job succeeded 3",
    )
    assert any(cond.type == "Complete" and cond.status == "True" for cond in job.status.conditions)


# -- counting like the quota controller ------------------------------------------------------


def test_completed_job_pods_stop_counting_exactly_when_status_used_says_so(
    node_cluster: OperatorCluster, node_scope: dict[str, str], start_node_operator: StartOperator
) -> None:
    c = node_cluster
    ns = c.new_namespace(node_scope)
    c.policy("p-jobs", node_scope, pods=profile(), configmaps=CONFIGMAPS)
    op = start_node_operator()
    c.wait_hard(ns, {"pods": "10", "configmaps": "20"})
    c.apps.create_namespaced_deployment(ns, deployment("web", 2))
    wait_until(lambda: used_pods(c, ns) == 2 and tally(op, ns) == 2, "2 pods counted by both")
    batch: Any = kubernetes.client.BatchV1Api(c.api)
    batch.create_namespaced_job(
        ns,
        {
            "metadata": {"name": "batch"},
            "spec": {
                "completions": 6,
                "parallelism": 6,
                "template": {
                    "spec": {
                        "restartPolicy": "Never",
                        "containers": [{"name": "c", "image": PAUSE}],
                    }
                },
            },
        },
    )
    wait_until(
        lambda: (batch.read_namespaced_job("batch", ns).status.succeeded or 0) == 6, "Job done"
    )
    phases = pod_phases(c, ns)
    assert sorted(phases.values()) == ["Running"] * 2 + ["Succeeded"] * 6
    # The 6 Succeeded pods still exist, and neither counts them: both say 2 at rest.
    wait_until(lambda: used_pods(c, ns) == 2, "status.used pods == 2")
    wait_until(lambda: tally(op, ns) == 2, "dynquota tally pods == 2")
    assert op.sample("dynquota_drift", {"namespace": ns, "resource": "pods"}) == 0
    assert c.hard(ns) == {"pods": "10", "configmaps": "20"}


def test_lost_node_pods_stuck_terminating_stop_counting_after_their_grace(
    node_cluster: OperatorCluster, node_scope: dict[str, str], start_node_operator: StartOperator
) -> None:
    """A node falls silent; node-lifecycle taints it, taint-eviction deletes its pods after
    their tolerationSeconds (5 s), nobody confirms, so they stay Terminating; both dynquota and
    the quota controller stop charging them once deletionTimestamp + grace has passed."""
    c = node_cluster
    cp = c.cp
    (lost,) = cp.add_nodes(1, losable=True)
    other = cp.node_names()[0]
    ns = c.new_namespace(node_scope)
    c.policy("p-lost", node_scope, pods=profile(), configmaps=CONFIGMAPS)
    op = start_node_operator()
    c.wait_hard(ns, {"pods": "10", "configmaps": "20"})
    tolerations = [
        {"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 5}
        for key in ("node.kubernetes.io/unreachable", "node.kubernetes.io/not-ready")
    ]
    try:
        for i in range(5):
            on_lost = i < 3
            c.core.create_namespaced_pod(
                ns,
                {
                    "metadata": {"name": f"p-{i}"},
                    "spec": {
                        "nodeSelector": {"kubernetes.io/hostname": lost if on_lost else other},
                        "tolerations": tolerations,
                        "terminationGracePeriodSeconds": 5,
                        "containers": [{"name": "c", "image": PAUSE}],
                    },
                },
            )
        wait_until(lambda: list(pod_phases(c, ns).values()) == ["Running"] * 5, "5 pods Running")
        wait_until(lambda: tally(op, ns) == 5 and used_pods(c, ns) == 5, "5 counted by both")
        cp.lose_node(lost)
        # the taint, then the eviction: deletionTimestamp set, and the pods stay
        wait_until(
            lambda: (
                sum(
                    1
                    for p in c.core.list_namespaced_pod(ns).items
                    if p.metadata.deletion_timestamp is not None
                )
                == 3
            ),
            "3 pods Terminating",
            timeout=90,
        )
        node = c.core.read_node(lost)
        assert {(t.key, t.effect) for t in node.spec.taints or []} >= {
            ("node.kubernetes.io/unreachable", "NoExecute")
        }
        # after the grace, both stop charging them; the pods are still there
        wait_until(lambda: tally(op, ns) == 2, "dynquota tally pods == 2", timeout=60)
        wait_until(lambda: used_pods(c, ns) == 2, "status.used pods == 2", timeout=30)
        assert len(c.core.list_namespaced_pod(ns).items) == 5
        assert op.sample("dynquota_drift", {"namespace": ns, "resource": "pods"}) == 0
    finally:
        for p in c.core.list_namespaced_pod(ns).items:
            with contextlib.suppress(ApiException):
                c.core.delete_namespaced_pod(p.metadata.name, ns, grace_period_seconds=0)
        with contextlib.suppress(ApiException):
            c.core.delete_node(lost)


@pytest.mark.timeout(240)
def test_rolling_update_with_max_surge_under_a_tight_quota_completes(
    node_cluster: OperatorCluster, node_scope: dict[str, str], start_node_operator: StartOperator
) -> None:
    """10 replicas running, then the policy: hard T(10) = 14 (the 40 % buffer). A rollout with
    maxSurge 3 keeps its ReplicaSets' replicas at most 13, so it completes inside that room,
    with no quota change.

    What Kubernetes bounds is the ReplicaSets' ``spec.replicas`` (at most 13), not the pods: a
    scaled-down pod stays, Terminating and still charged to the quota (until removed or
    deletionTimestamp + grace has passed), until kwok removes it, while its replacement is
    created. The quota, not the Deployment, caps those: every admission charge stays within
    14 (audit log), and a create it refuses was refused with the quota full at 14, never by
    a lower hard; the ReplicaSet retries it, and the rollout completes."""
    c = node_cluster
    ns = c.new_namespace(node_scope)
    c.apps.create_namespaced_deployment(ns, deployment("web", 10, maxSurge=3, maxUnavailable=0))
    wait_until(
        lambda: c.apps.read_namespaced_deployment("web", ns).status.available_replicas == 10,
        "10 available",
    )
    c.policy("p-roll", node_scope, pods=profile(up="1h"), configmaps=CONFIGMAPS)
    start_node_operator()
    c.wait_hard(ns, {"pods": "14", "configmaps": "20"})
    audit = AuditLog(c.cp.audit_log_path)
    c.apps.patch_namespaced_deployment(
        "web",
        ns,
        {"spec": {"template": {"metadata": {"annotations": {"rollout": uuid.uuid4().hex}}}}},
    )
    peak = {"replicas": 0, "pods": 0, "terminating": 0}

    def rolled() -> bool:
        pods = c.core.list_namespaced_pod(ns).items
        replicasets = c.apps.list_namespaced_replica_set(ns).items
        peak["replicas"] = max(peak["replicas"], sum(rs.spec.replicas for rs in replicasets))
        peak["pods"] = max(peak["pods"], len(pods))
        terminating = sum(1 for p in pods if p.metadata.deletion_timestamp is not None)
        peak["terminating"] = max(peak["terminating"], terminating)
        d = c.apps.read_namespaced_deployment("web", ns)
        s = d.status
        return bool(
            s.observed_generation == d.metadata.generation
            and s.updated_replicas == 10
            and s.available_replicas == 10
            and (s.replicas or 0) == 10
        )

    wait_until(rolled, "rollout complete", timeout=120)
    assert peak["replicas"] <= 13, peak
    replicasets = c.apps.list_namespaced_replica_set(ns).items
    assert sorted(rs.status.replicas for rs in replicasets) == [0, 10]
    # hard never changed: every status the quota had during the rollout says 14 (dynquota may
    # write state, e.g. the QuotaAtLimit record when Terminating pods fill the quota)
    assert c.hard(ns) == {"pods": "14", "configmaps": "20"}
    ledger = QuotaLedger(audit.read_new(), ns)
    assert [w.hard for w in ledger.writes] == [14] * len(ledger.writes)
    assert [e for e in c.events(ns, "Resized") if "->" in (e.message or "")] == []
    assert ledger.over_hard() == [], ledger.describe()
    refusals = [refused_at(c.message) for c in ledger.refused()]
    assert all(r == (14, 14) for r in refusals), (refusals, peak)
