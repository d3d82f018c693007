"""The brake on mass un-management (issue 24, case 5) on the real apiserver: deleting the
DynamicQuotaPolicy CRD deletes every policy, which un-manages every namespace; v0.2 removed
every managed quota within 8 s. With the brake, deletions beyond the share are held until an
admin confirms on ``kube-system`` (where the confirmation outlives the CRD)."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable

import pytest
from kubernetes.client.exceptions import ApiException

from dynquota.testing.chart import CRD
from dynquota.testing.operator import GROUP, PLURAL, OperatorCluster, OperatorThread
from dynquota.testing.wait import wait_until

pytestmark = pytest.mark.integration

StartOperator = Callable[..., OperatorThread]
CONFIRM = "dynquota.io/confirm-unmanage"
PODS = {
    "bufferPercent": 40,
    "minimum": 10,
    "maximum": 100,
    "upscaleCooldown": "2s",
    "downscaleCooldown": "1h",
}


def with_quota(c: OperatorCluster, namespaces: list[str]) -> list[str]:
    return [ns for ns in namespaces if c.quota(ns) is not None]


def managed_namespaces(c: OperatorCluster) -> set[str]:
    """Every namespace with a managed quota ``dynquota``, cluster-wide."""
    quotas = c.core.list_resource_quota_for_all_namespaces(
        label_selector="app.kubernetes.io/managed-by=dynquota",
        field_selector="metadata.name=dynquota",
        _request_timeout=30,
    ).items
    return {q.metadata.namespace for q in quotas}


def _active(c: OperatorCluster, name: str) -> bool:
    """Whether namespace ``name`` exists and is not being deleted."""
    try:
        ns = c.core.read_namespace(name, _request_timeout=30)
    except ApiException as exc:
        if exc.status == 404:
            return False
        raise
    return ns.metadata.deletion_timestamp is None


def held(op: OperatorThread) -> float:
    return op.sample("dynquota_writes_held_total", {"reason": "unmanage-brake"})


def test_the_crd_deleted_is_held_by_the_brake_then_released_by_the_confirmation(
    op_cluster: OperatorCluster, scope: dict[str, str], start_operator: StartOperator
) -> None:
    c = op_cluster
    namespaces = sorted(c.new_namespace(scope) for _ in range(4))
    c.policy("p-brake", scope, pods=PODS)
    op = start_operator(unmanage_brake_share=0.5)
    wait_until(lambda: with_quota(c, namespaces) == namespaces, "four managed quotas")
    try:
        # The share is of every namespace with a managed quota on this control plane (other
        # tests' too: CI), and deleting the CRD un-manages them all.
        before = managed_namespaces(c)
        c.cp.kubectl("delete", "crd", f"{PLURAL}.{GROUP}", "--wait=true", "--timeout=60s")
        # at most half may go (2 <= 0.5 * 4 when only these four exist); the rest are held
        wait_until(lambda: held(op) >= 4, "the brake holding, retried", timeout=120)
        left = with_quota(c, namespaces)
        # a quota gone with its namespace (an earlier test's, being deleted: CI) is not the
        # operator's delete
        gone = {ns for ns in before - managed_namespaces(c) if _active(c, ns)}
        assert len(gone) <= len(before) // 2, (sorted(before), sorted(gone))
        assert left, "none of the four held"
        event = c.wait_event("default", "UnmanageHeld")
        assert event.involved_object.kind == "Namespace"
        assert event.involved_object.name == "kube-system"
        assert re.match(r"holding the deletion of managed quotas \([1-9]\d* so far, e\.g\. in ",
                        event.message), event.message  # fmt: skip
        # the admin confirms (a time not before the hold began)
        now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        c.core.patch_namespace("kube-system", {"metadata": {"annotations": {CONFIRM: now}}})
        wait_until(lambda: with_quota(c, namespaces) == [], "the held deletions", timeout=90)
    finally:
        c.core.patch_namespace("kube-system", {"metadata": {"annotations": {CONFIRM: None}}})
        c.cp.kubectl("apply", "-f", str(CRD))
        c.cp.kubectl("wait", "--for=condition=Established", f"crd/{PLURAL}.{GROUP}",
                     "--timeout=60s")  # fmt: skip
