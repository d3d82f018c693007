"""Legitimate growth never waits on the throttle (issue 26): a Deployment growing into its
quota fills each raise within seconds, because the operator wakes the ReplicaSet the quota
refused — on the real apiserver with the real ReplicaSet controller.

Before (issue 26, measured as a new user would): the raise to 56 was filled after 75.6 s and
the raise to 79 never (56 of 60 pods after 900 s): the ReplicaSet controller backs off per
object after each refusal and no quota change re-queues it.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from dynquota.testing.growth import daemon_set, deployment, grow, job
from dynquota.testing.operator import OperatorCluster, OperatorThread
from dynquota.testing.wait import wait_until

pytestmark = pytest.mark.integration

StartOperator = Callable[..., OperatorThread]
REPLICAS = 60
PROFILE = {"bufferPercent": 40, "minimum": 10, "maximum": 100, "upscaleCooldown": "10s",
           "downscaleCooldown": "1h"}  # fmt: skip


def test_a_deployment_fills_every_raise_within_seconds(
    op_cluster: OperatorCluster, scope: dict[str, str], start_operator: StartOperator
) -> None:
    """The issue's case: 60 replicas, pods buffer 40 %, minimum 10, maximum 100, upscale
    cooldown 10 s. The quota grows 10 -> 14 -> 20 -> 28 -> 40 -> 56 -> 79; each raise is
    filled within 5 s and all 60 pods exist (without the wake: 56 after 900 s)."""
    c = op_cluster
    ns = c.new_namespace(scope)
    c.policy("p-wake", scope, pods=PROFILE)
    op = start_operator()
    c.wait_hard(ns, {"pods": "10", "configmaps": "50"})
    run = grow(c, ns, REPLICAS, timeout=240, start_hard=10)
    woke = op.sample("dynquota_wakes_total", {"kind": "ReplicaSet"})
    print(
        f"\nmeasured: raises {[h for _, h in run.raises]}, fill delays (s) "
        f"{[round(d, 2) for d in run.delays]}, pods {run.pods}/{REPLICAS} after "
        f"{run.seconds:.1f} s, wakes {woke:.0f}"
    )
    assert run.pods == REPLICAS
    assert [h for _, h in run.raises] == [14, 20, 28, 40, 56, 79]
    assert run.unfilled == []
    # every raise filled within 5 s (issue 26: p99 over the run; here the max of every raise)
    assert max(run.delays) <= 5.0, run.delays
    assert woke >= 1
    event = c.wait_event(ns, "Woken", contains="workload(s) whose pod creates")
    assert "ReplicaSet/web-" in event.message


def test_nothing_is_woken_at_rest(
    op_cluster: OperatorCluster, scope: dict[str, str], start_operator: StartOperator
) -> None:
    """A Deployment inside its quota: no raise finds a refused ReplicaSet, no wake is written
    (0 writes at rest)."""
    c = op_cluster
    ns = c.new_namespace(scope)
    c.policy("p-rest", scope, pods=PROFILE)
    op = start_operator()
    c.wait_hard(ns, {"pods": "10", "configmaps": "50"})
    c.apps.create_namespaced_deployment(ns, deployment("calm", 3), _request_timeout=30)
    wait_until(
        lambda: len(c.core.list_namespaced_pod(ns, _request_timeout=30).items) == 3, "3 pods"
    )
    op.idle()
    rs = c.apps.list_namespaced_replica_set(ns, _request_timeout=30).items
    assert [r.metadata.annotations or {} for r in rs] == [
        {k: v for k, v in (r.metadata.annotations or {}).items() if k != "dynquota.io/wake"}
        for r in rs
    ]
    assert op.sample("dynquota_wakes_total", {"kind": "ReplicaSet"}) == 0


def test_a_raise_left_unwoken_by_a_previous_operator_is_woken_at_start(
    op_cluster: OperatorCluster, scope: dict[str, str], start_operator: StartOperator
) -> None:
    """README-only attack: an operator killed between a raise and its wake left the
    ReplicaSet to its backoff (14 of 100 pods for 5 minutes, through restarts). Here the first
    operator does not wake (DYNQUOTA_WAKE=false): after a raise its ReplicaSet waits in its
    backoff, refused, with room; it stops, the policy's cooldown becomes 1 h (so the next
    operator makes no raise of its own), and the next operator wakes the ReplicaSet at start,
    from its first sight of the quota.

    Which raise is left unfilled depends on the controller's backoff (CI under load: the raise
    to 28 stayed unfilled for 180 s; here the raise to 40 after 20 s), so any raise will do.
    The ReplicaSet's own backoff may end in the seconds between the stop and the next
    operator's first sight: that run tested nothing and raises ReplicaSetBackoffRaceError,
    which ``make test`` reruns; a ReplicaSet left waiting with room fails as any defect."""
    c = op_cluster
    ns = c.new_namespace(scope)
    name = "p-unwoken"
    c.policy(name, scope, pods=PROFILE)
    first = start_operator(wake=False)
    c.wait_hard(ns, {"pods": "10", "configmaps": "50"})
    c.apps.create_namespaced_deployment(ns, deployment("web", REPLICAS), _request_timeout=30)
    stuck: list[float] = []

    def in_backoff() -> bool:
        hard = int(_status_pods(c, ns) or "0")
        short = hard > 10 and _pods(c, ns) < hard and _refused(c, ns)
        stuck.append(time.monotonic()) if short else stuck.clear()
        return bool(stuck) and stuck[-1] - stuck[0] >= UNFILLED_FOR

    wait_until(in_backoff, "a raise unfilled, the ReplicaSet refused (in its backoff)", 180)
    first.stop()
    hard = int(_status_pods(c, ns) or "0")
    c.custom.patch_cluster_custom_object(
        "dynquota.io", "v1alpha1", "dynamicquotapolicies", name,
        {"spec": {"resources": {"pods": PROFILE | {"upscaleCooldown": "1h"}}}},
    )  # fmt: skip
    before = _pods(c, ns)
    started = time.monotonic()
    op = start_operator()
    want = min(hard, REPLICAS)
    wait_until(lambda: _pods(c, ns) >= want, f"{want} pods after the next start", timeout=20)
    seconds = time.monotonic() - started
    woke = op.sample("dynquota_wakes_total", {"kind": "ReplicaSet"})
    print(f"\nmeasured: {before} -> {want} pods {seconds:.1f} s after the operator's start")
    if woke == 0:  # a broken wake fails every rerun: within 20 s its pods stay short
        raise ReplicaSetBackoffRaceError(
            f"the ReplicaSet filled {before} -> {want} pods on its own before the first sight"
        )
    c.wait_event(ns, "Woken", contains="after a restart or a leader change")


def test_a_statefulset_and_a_job_fill_every_raise_within_seconds(
    node_cluster: OperatorCluster, node_scope: dict[str, str], start_node_operator: StartOperator
) -> None:
    """The other controllers with a per-object backoff: a StatefulSet (Parallel) and a Job
    of 15 pods each grow into one quota (10 -> 14 -> 20 -> 28 -> 40); both are woken after
    each raise and every raise is filled within 5 s (the Job controller syncs 1 s after an
    update). On the kwok cluster (the job controller runs there), their pods selecting no
    node: Pending, charged, never completed."""
    c, scope, start_operator = node_cluster, node_scope, start_node_operator
    ns = c.new_namespace(scope)
    c.policy("p-kinds", scope, pods=PROFILE)
    op = start_operator()
    c.wait_hard(ns, {"pods": "10", "configmaps": "50"})
    c.batch.create_namespaced_job(ns, job("batch", 15, pending=True), _request_timeout=30)
    run = grow(c, ns, 15, timeout=180, start_hard=10, kind="StatefulSet", expect=30, pending=True)
    woke = {k: op.sample("dynquota_wakes_total", {"kind": k}) for k in ("StatefulSet", "Job")}
    print(
        f"\nmeasured: raises {[h for _, h in run.raises]}, fill delays (s) "
        f"{[round(d, 2) for d in run.delays]}, pods {run.pods}/30 after {run.seconds:.1f} s, "
        f"wakes {woke}"
    )
    assert run.pods == 30
    assert [h for _, h in run.raises] == [14, 20, 28, 40]
    assert run.unfilled == []
    assert max(run.delays) <= 5.0, run.delays
    assert woke["StatefulSet"] >= 1, woke
    assert woke["Job"] >= 1, woke
    sts = c.apps.read_namespaced_stateful_set("web", ns, _request_timeout=30)
    assert "dynquota.io/wake" in (sts.metadata.annotations or {})
    assert sts.spec.replicas == 15  # the mark changed nothing else


def test_a_policy_with_wake_false_wakes_nothing(
    op_cluster: OperatorCluster, scope: dict[str, str], start_operator: StartOperator
) -> None:
    """``spec.wake: false``: the raise is made, nothing is marked."""
    c = op_cluster
    ns = c.new_namespace(scope)
    c.policy("p-no-wake", scope, pods=PROFILE, extra_spec={"wake": False})
    assert c.get_policy("p-no-wake")["spec"]["wake"] is False
    op = start_operator()
    c.wait_hard(ns, {"pods": "10", "configmaps": "50"})
    c.apps.create_namespaced_deployment(ns, deployment("web", 20), _request_timeout=30)
    wait_until(lambda: int(_status_pods(c, ns) or "0") >= 14, "the raise to 14", timeout=60)
    wait_until(lambda: _refused(c, ns) or _pods(c, ns) >= 14, "a refusal seen", timeout=30)
    op.idle()
    assert op.sample("dynquota_wakes_total", {"kind": "ReplicaSet"}) == 0
    for rs in c.apps.list_namespaced_replica_set(ns, _request_timeout=30).items:
        assert "dynquota.io/wake" not in (rs.metadata.annotations or {})


def test_a_daemonset_refused_a_pod_is_woken_after_the_raise(
    node_cluster: OperatorCluster, node_scope: dict[str, str], start_node_operator: StartOperator
) -> None:
    """A DaemonSet on the kwok nodes, its namespace sized to 1 pod: the DaemonSet controller
    is refused the other nodes' pods; each raise (1 -> 2 -> 3 ...) is woken and filled within
    5 s until every node that should run its pod has one."""
    c = node_cluster
    ns = c.new_namespace(node_scope)
    profile = PROFILE | {"minimum": 1, "upscaleCooldown": "5s"}
    c.policy("p-daemons", node_scope, pods=profile)
    op = start_node_operator()
    c.wait_hard(ns, {"pods": "1", "configmaps": "50"})
    c.apps.create_namespaced_daemon_set(ns, daemon_set("agent"), _request_timeout=30)

    def status() -> tuple[int, int]:
        ds = c.apps.read_namespaced_daemon_set_status("agent", ns, _request_timeout=30).status
        return ds.desired_number_scheduled or 0, ds.current_number_scheduled or 0

    wait_until(lambda: status()[0] >= 2, "the DaemonSet wants 2+ pods", timeout=30)
    wait_until(lambda: status()[1] >= status()[0], "a pod on every node", timeout=120)
    desired, current = status()
    woke = op.sample("dynquota_wakes_total", {"kind": "DaemonSet"})
    print(f"\nmeasured: DaemonSet {current}/{desired} pods, {woke:.0f} wakes")
    assert current == desired
    assert woke >= 1
    c.wait_event(ns, "Woken", contains="DaemonSet/agent")


UNFILLED_FOR = 5.0
"""Seconds a raise stays unfilled, the ReplicaSet refused, before the first operator stops."""


class ReplicaSetBackoffRaceError(AssertionError):
    """The ReplicaSet controller's own backoff ended before the operator's first sight of the
    quota: there was nothing left to wake, the run tested nothing (``make test`` reruns it)."""


def _refused(c: OperatorCluster, ns: str) -> bool:
    for rs in c.apps.list_namespaced_replica_set(ns, _request_timeout=30).items:
        for cond in (rs.status and rs.status.conditions) or []:
            if cond.type == "ReplicaFailure" and cond.reason == "FailedCreate":
                return True
    return False


def _status_pods(c: OperatorCluster, ns: str) -> str | None:
    quota = c.quota(ns)
    return ((quota.status and quota.status.hard) or {}).get("pods") if quota else None


def _pods(c: OperatorCluster, ns: str) -> int:
    return len(c.core.list_namespaced_pod(ns, _request_timeout=30).items)
