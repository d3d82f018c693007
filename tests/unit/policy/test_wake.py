"""Which controllers a raise wakes (issue 26): the keys pods are charged to, the raises of
status.hard, a ReplicaSet refused by its quota, and the patch that wakes it."""

from __future__ import annotations

from typing import Any

import pytest

from dynquota.policy.wake import (
    WAKE_ANNOTATION,
    WorkloadKind,
    charged_by_pods,
    raised_keys,
    refused_replica_set,
    short_workload,
    wake_patch,
)


@pytest.mark.parametrize(
    ("key", "charged"),
    [
        ("pods", True), ("count/pods", True), ("cpu", True), ("memory", True),
        ("requests.cpu", True), ("limits.memory", True), ("requests.ephemeral-storage", True),
        ("hugepages-2Mi", True), ("requests.nvidia.com/gpu", True),
        ("requests.storage", False), ("configmaps", False), ("count/deployments.apps", False),
        ("services", False), ("persistentvolumeclaims", False),
        ("gold.storageclass.storage.k8s.io/requests.storage", False),
    ],
)  # fmt: skip
def test_keys_pods_are_charged_to(key: str, charged: bool) -> None:
    assert charged_by_pods(key) is charged


def test_raised_keys_compare_quantities() -> None:
    before = {"pods": "10", "requests.cpu": "2", "configmaps": "50", "memory": "1Gi"}
    after = {"pods": "14", "requests.cpu": "2000m", "configmaps": "40", "memory": "1025Mi",
             "count/pods": "9"}  # fmt: skip
    # 2 == 2000m, configmaps shrank, count/pods was unlimited (no raise), memory grew
    assert raised_keys(before, after) == {"pods", "memory"}
    assert raised_keys({"pods": "x"}, {"pods": "12"}) == set()


def rs(wanted: int, have: int, *conditions: dict[str, Any]) -> dict[str, Any]:
    return {
        "metadata": {"name": "web-1", "resourceVersion": "7"},
        "spec": {"replicas": wanted},
        "status": {"replicas": have, "conditions": list(conditions)},
    }


FAILED = {"type": "ReplicaFailure", "status": "True", "reason": "FailedCreate",
          "message": 'pods "web-1-x" is forbidden: exceeded quota: dynquota'}  # fmt: skip


def test_a_refused_replica_set_wants_more_and_says_failed_create() -> None:
    assert refused_replica_set(rs(60, 56, FAILED)) is True
    assert refused_replica_set(rs(60, 60, FAILED)) is False  # has what it wants
    assert refused_replica_set(rs(60, 56)) is False  # no refusal said
    assert refused_replica_set(rs(60, 56, FAILED | {"status": "False"})) is False
    assert refused_replica_set(rs(60, 56, FAILED | {"reason": "FailedDelete"})) is False
    assert refused_replica_set({"metadata": {}}) is False


def test_the_wake_patch_sets_only_the_mark_conditionally() -> None:
    assert wake_patch("1234", "7") == {
        "metadata": {"annotations": {WAKE_ANNOTATION: "1234"}, "resourceVersion": "7"}
    }


@pytest.mark.parametrize(
    ("kind", "obj", "short"),
    [
        # StatefulSet: pods created (status.replicas) below spec.replicas (default 1)
        ("StatefulSet", {"spec": {"replicas": 3}, "status": {"replicas": 1}}, True),
        ("StatefulSet", {"spec": {"replicas": 3}, "status": {"replicas": 3}}, False),
        ("StatefulSet", {"spec": {}, "status": {}}, True),
        ("StatefulSet", {"spec": {"replicas": 0}, "status": {}}, False),
        # DaemonSet: nodes with its pod below the nodes that should run it
        ("DaemonSet", {"status": {"desiredNumberScheduled": 30, "currentNumberScheduled": 10}},
         True),
        ("DaemonSet", {"status": {"desiredNumberScheduled": 3, "currentNumberScheduled": 3}},
         False),
        ("DaemonSet", {"status": {}}, False),
        # Job: active below parallelism, capped by the completions left
        ("Job", {"spec": {"parallelism": 4}, "status": {"active": 2}}, True),
        ("Job", {"spec": {}, "status": {}}, True),
        ("Job", {"spec": {"parallelism": 4, "completions": 5}, "status": {"active": 2,
                                                                           "succeeded": 3}},
         False),
        ("Job", {"spec": {"parallelism": 4, "suspend": True}, "status": {}}, False),
        ("Job", {"spec": {"parallelism": 4},
                 "status": {"conditions": [{"type": "Failed", "status": "True"}]}}, False),
        ("Job", {"spec": {"parallelism": 4},
                 "status": {"conditions": [{"type": "Complete", "status": "False"}]}}, True),
        # malformed counts are not short
        ("StatefulSet", {"spec": {"replicas": "3"}, "status": {"replicas": 1}}, False),
    ],
)  # fmt: skip
def test_a_workload_short_of_pods(kind: WorkloadKind, obj: dict[str, Any], short: bool) -> None:
    assert short_workload(kind, obj) is short
