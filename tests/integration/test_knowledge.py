"""Knowledge that converges (issue 24): what the operator knows of its policies and budgets
comes from informers with replace-on-relist semantics, so a deletion missed in a watch gap is
noticed at the next relist — on the real apiserver, with etcd compacted past the gap.

v0.2 fed the policies from kopf event handlers: kopf re-lists without a DELETED for what
vanished, so the deleted policy kept governing until a restart.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from dynquota.operator.runtime import Runtime
from dynquota.testing.operator import OperatorCluster, OperatorThread
from dynquota.testing.wait import wait_until

pytestmark = pytest.mark.integration

StartOperator = Callable[..., OperatorThread]


def profile(minimum: int, maximum: int) -> dict[str, Any]:
    return {
        "bufferPercent": 40,
        "minimum": minimum,
        "maximum": maximum,
        "upscaleCooldown": "2s",
        "downscaleCooldown": "1h",
    }


def test_a_policy_deleted_in_a_watch_gap_stops_governing_within_one_relist(
    op_cluster: OperatorCluster, scope: dict[str, str], start_operator: StartOperator
) -> None:
    c = op_cluster
    ns = c.new_namespace(scope)
    c.create_pods(ns, 5)
    c.policy("p-gap-wide", scope, priority=0, pods=profile(minimum=10, maximum=100))
    c.policy("p-gap-capped", scope, priority=10, pods=profile(minimum=2, maximum=6))
    op = start_operator()
    # 5 pods + 40 % = 7, capped at the maximum of 6 (configmaps: the default profile's minimum)
    c.wait_hard(ns, {"pods": "6", "configmaps": "50"})
    runtime: Runtime | None = op.runtime
    assert runtime is not None
    policies = runtime.objects.informers["dynamicquotapolicies"]
    assert (policies.lists, policies.relists) == (1, 0)
    rv_before = int(policies.resource_version or 0)

    # the watch gap: the policy informer is down (it keeps its store and resourceVersion)
    # while the capped policy is deleted and etcd compacted past it; the apiserver restarts so
    # its watch cache forgets the history too
    op.call(runtime.objects.stop)
    c.delete_policy("p-gap-capped")
    revision = c.cp.compact_etcd()
    assert revision > rv_before
    c.cp.restart_apiserver()
    assert sorted(policies.objects) == ["p-gap-capped", "p-gap-wide"]  # stale until resumed
    assert c.hard(ns) == {"pods": "6", "configmaps": "50"}

    async def resume() -> None:
        runtime.objects.start()

    op.call(resume)
    # the watch from the old resourceVersion answers 410: one relist, which lacks the capped
    # policy, deletes it from the store with a DELETED's effect; the wide one governs
    c.wait_hard(ns, {"pods": "10", "configmaps": "50"}, timeout=60)
    wait_until(lambda: policies.lists == 2, "the relist counted", timeout=10)
    assert policies.relists == 1
    assert sorted(policies.objects) == ["p-gap-wide"]
    assert int(policies.resource_version or 0) >= revision
    quota = c.quota(ns)
    assert quota is not None
    assert quota.metadata.annotations["dynquota.io/policy"] == "p-gap-wide"


def test_a_quota_and_a_namespace_deleted_in_a_watch_gap_are_noticed_within_one_relist(
    op_cluster: OperatorCluster, scope: dict[str, str], start_operator: StartOperator
) -> None:
    """Namespaces and the quotas named dynquota come from the same informers: a managed quota
    a cluster admin deleted while the watch was down past compaction is re-created at the
    relist (v0.2, on kopf: at the next resync, 600 s), and a namespace deleted then is
    forgotten (v0.2: kept until a restart)."""
    c = op_cluster
    ns, gone = c.new_namespace(scope), c.new_namespace(scope)
    c.create_pods(ns, 5)
    c.policy("p-gap-quota", scope, pods=profile(minimum=10, maximum=100))
    op = start_operator()
    hard = {"pods": "10", "configmaps": "50"}
    c.wait_hard(ns, hard)
    c.wait_hard(gone, hard)
    runtime: Runtime | None = op.runtime
    assert runtime is not None
    quotas = runtime.objects.informers["resourcequotas"]
    namespaces = runtime.objects.informers["namespaces"]
    assert (quotas.relists, namespaces.relists) == (0, 0)
    uid = c.quota(ns).metadata.uid
    rv_before = int(namespaces.resource_version or 0)

    async def watched() -> Any:
        return runtime.operator.cluster.current(ns)

    # the precondition: the operator's own watch shows the quota it created, counted (else a
    # decision reads it with a GET, and any run in the gap - the usage informers keep going and
    # relist after the restart - re-creates it before the relist this test is about)
    wait_until(
        lambda: (
            (q := op.call(watched)) is not None
            and q.uid == uid
            and q.used_counts().get("pods") == 5
        ),
        "the operator's watch shows the quota and its status.used",
        timeout=30,
    )

    op.call(runtime.objects.stop)
    c.core.delete_namespaced_resource_quota("dynquota", ns)
    c.delete_namespace(gone)
    wait_until(lambda: _absent(c, gone), f"namespace {gone} gone", timeout=60)
    revision = c.cp.compact_etcd()
    assert revision > rv_before
    c.cp.restart_apiserver()
    assert c.quota(ns) is None
    assert gone in runtime.operator.namespaces  # stale until resumed

    async def resume() -> None:
        runtime.objects.start()

    op.call(resume)
    recreated = c.wait_hard(ns, hard, timeout=60)
    assert recreated.metadata.uid != uid
    wait_until(lambda: gone not in runtime.operator.namespaces, f"{gone} forgotten", timeout=30)
    assert (quotas.relists, namespaces.relists) == (1, 1)
    assert f"{gone}/dynquota" not in quotas.objects
    assert gone not in namespaces.objects


def _absent(c: OperatorCluster, name: str) -> bool:
    try:
        c.core.read_namespace(name)
    except Exception as exc:  # ApiException
        return getattr(exc, "status", None) == 404
    return False
