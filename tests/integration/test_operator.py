"""The operator on a real control plane: each sizing rule with exact values.

The operator runs in-process (a thread) as the ServiceAccount bound to the chart's ClusterRole;
the tests act as cluster admin through the official sync client and observe only the API:
the managed quota's spec.hard/status.hard, its annotations, Events, and the operator's metrics.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from dynquota.policy import parse_time
from dynquota.testing.operator import MANAGED_LABELS, OperatorCluster, OperatorThread
from dynquota.testing.wait import wait_until

StartOperator = Callable[..., OperatorThread]


def profile(
    buffer: int = 40,
    minimum: int = 10,
    maximum: int = 100,
    up: str = "2s",
    down: str = "1h",
) -> dict[str, Any]:
    return {
        "bufferPercent": buffer,
        "minimum": minimum,
        "maximum": maximum,
        "upscaleCooldown": up,
        "downscaleCooldown": down,
    }


CONFIGMAPS = profile(minimum=20, maximum=200)


def test_quota_is_created_at_target(
    op_cluster: OperatorCluster, scope: dict[str, str], start_operator: StartOperator
) -> None:
    ns = op_cluster.new_namespace(scope)
    op_cluster.create_pods(ns, 14)
    op_cluster.policy("p-create", scope, pods=profile(), configmaps=CONFIGMAPS)
    op = start_operator()
    quota = op_cluster.wait_hard(ns, {"pods": "20", "configmaps": "20"})
    assert quota.metadata.labels == MANAGED_LABELS
    ann = quota.metadata.annotations
    assert ann["dynquota.io/hard.pods"] == "20"
    assert ann["dynquota.io/policy"] == "p-create"
    assert ann["dynquota.io/last-upscale.pods"] == ann["dynquota.io/last-change.pods"]
    assert abs(parse_time(ann["dynquota.io/last-upscale.pods"]) - time.time()) < 30
    managers = {f.manager for f in quota.metadata.managed_fields}
    assert "dynquota" in managers
    event = op_cluster.wait_event(ns, "Resized")
    assert event.message == (
        "create pods 20: usage 14, buffer 40%; "
        "create configmaps 20: usage 1, buffer 40%, at minimum 20"
    )
    assert event.involved_object.kind == "ResourceQuota"
    assert event.involved_object.name == "dynquota"
    assert op.sample("dynquota_quota_writes_total", {"verb": "create"}) >= 1
    # the policy reports what it governs
    wait_until(
        lambda: (op_cluster.get_policy("p-create").get("status") or {}).get("namespaces") == 1,
        "policy status namespaces == 1",
    )
    status = op_cluster.get_policy("p-create")["status"]
    assert status["conditions"][0]["type"] == "Valid"
    assert status["conditions"][0]["status"] == "True"


def test_operator_writes_nothing_on_pods_configmaps_and_namespaces(
    op_cluster: OperatorCluster, scope: dict[str, str], start_operator: StartOperator
) -> None:
    ns = op_cluster.new_namespace(scope)
    op_cluster.create_pods(ns, 3)
    op_cluster.core.create_namespaced_config_map(ns, {"metadata": {"name": "cm"}})
    op_cluster.policy("p-fields", scope, pods=profile(), configmaps=CONFIGMAPS)
    start_operator()
    op_cluster.wait_hard(ns, {"pods": "10", "configmaps": "20"})
    # the operator's own identity never manages fields of these objects
    namespace = op_cluster.core.read_namespace(ns)
    assert not namespace.metadata.finalizers
    assert not [a for a in (namespace.metadata.annotations or {}) if "kopf" in a]
    assert namespace.spec.finalizers == ["kubernetes"]
    objects: list[Any] = [namespace, op_cluster.core.read_namespace("kube-system")]
    objects += op_cluster.core.list_namespaced_pod(ns).items
    objects += op_cluster.core.list_namespaced_config_map(ns).items
    for obj in objects:
        managers = {f.manager for f in obj.metadata.managed_fields or []}
        assert "dynquota" not in managers, (obj.metadata.name, managers)
        assert not any(m.startswith(("kopf", "python")) for m in managers), managers
        assert not obj.metadata.finalizers


def test_upscale_only_after_cooldown_and_runaway_exact_sequence(
    op_cluster: OperatorCluster, scope: dict[str, str], start_operator: StartOperator
) -> None:
    """The test itself is the runaway: it creates pods until the quota refuses one, after
    every step. H grows by the buffer once per cooldown, up to the maximum."""
    ns = op_cluster.new_namespace(scope)
    op_cluster.policy("p-runaway", scope, pods=profile(maximum=60, up="4s"), configmaps=CONFIGMAPS)
    start_operator()
    expected = ["10", "14", "20", "28", "40", "56", "60"]
    seen: list[str] = []
    stamps: list[int] = []
    for index, value in enumerate(expected):
        quota = op_cluster.wait_hard(ns, {"pods": value, "configmaps": "20"}, timeout=30)
        seen.append(value)
        stamps.append(parse_time(quota.metadata.annotations["dynquota.io/last-upscale.pods"]))
        changed_at = time.time()
        created = op_cluster.fill_pods(ns)
        assert created == int(value) - (int(expected[index - 1]) if index else 0)
        if index + 1 < len(expected):
            # no step before the cooldown ends: still the same H a moment before
            deadline = changed_at + 2
            wait_until(lambda d=deadline: time.time() >= d, "2 s")
            assert op_cluster.hard(ns) == {"pods": value, "configmaps": "20"}
    assert seen == expected
    gaps = [b - a for a, b in itertools.pairwise(stamps)]
    assert all(gap >= 4 for gap in gaps), gaps
    # at the maximum: pressure stays, H does not move
    time.sleep(5)  # the cooldown passes: a decision runs and must not change anything
    assert op_cluster.hard(ns) == {"pods": "60", "configmaps": "20"}
    with pytest.raises(ApiException) as refused:
        op_cluster.create_pod(ns)
    assert refused.value.status == 403
