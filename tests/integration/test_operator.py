"""The operator on a real control plane: each sizing rule with exact values.

The operator runs in-process (a thread) as the ServiceAccount bound to the chart's ClusterRole;
the tests act as cluster admin through the official sync client and observe only the API:
the managed quota's spec.hard/status.hard, its annotations, Events, and the operator's metrics.
"""

from __future__ import annotations

import base64
import itertools
import json
import re
import time
import urllib.request
import uuid
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
    op = start_operator()
    expected = ["10", "14", "20", "28", "40", "56", "60"]
    with op_cluster.race_explains(ns, "pods"):
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
        # at the maximum: pressure stays, H does not move. Wait for a decision taken after the
        # last cooldown ended (the resync, every 10 s, guarantees one) and check it changed nothing.
        cooldown_end = stamps[-1] + 4
        wait_until(lambda: time.time() >= cooldown_end, "the last cooldown ends", timeout=10)
        decided = op.sample("dynquota_reconciles_total", {"result": "ok"})
        wait_until(
            lambda: op.sample("dynquota_reconciles_total", {"result": "ok"}) > decided,
            "a decision after the cooldown",
            timeout=30,
        )
        assert op_cluster.hard(ns) == {"pods": "60", "configmaps": "20"}
        with pytest.raises(ApiException) as refused:
            op_cluster.create_pod(ns)
        assert refused.value.status == 403


def test_downscale_only_after_the_stabilisation_window(
    op_cluster: OperatorCluster, scope: dict[str, str], start_operator: StartOperator
) -> None:
    ns = op_cluster.new_namespace(scope)
    op_cluster.create_pods(ns, 20)
    op_cluster.policy("p-down", scope, pods=profile(down="8s"), configmaps=CONFIGMAPS)
    start_operator()
    quota = op_cluster.wait_hard(ns, {"pods": "28", "configmaps": "20"})
    created = parse_time(quota.metadata.annotations["dynquota.io/last-change.pods"])
    op_cluster.delete_pods(ns, 18)
    dropped = time.time()
    # the peak (20) stays in the 8 s window: no change a good while after the drop
    wait_until(lambda: time.time() >= dropped + 5, "5 s after the drop")
    assert op_cluster.hard(ns) == {"pods": "28", "configmaps": "20"}
    quota = op_cluster.wait_hard(ns, {"pods": "10", "configmaps": "20"}, timeout=30)
    changed = parse_time(quota.metadata.annotations["dynquota.io/last-change.pods"])
    assert changed >= int(dropped) + 8
    assert changed >= created + 8
    # a downscale does not stamp lastUpscale
    assert parse_time(quota.metadata.annotations["dynquota.io/last-upscale.pods"]) == created
    # The 18 deletes are separate requests: when the informer sees them spread over more than
    # one coalescing window, an intermediate peak (e.g. 18 -> T = 26) gives one more step, a
    # downscale cooldown earlier. Whatever the steps, they chain from 28 and end at T(2) = 10.
    wait_until(
        lambda: any("->10:" in (e.message or "") for e in op_cluster.events(ns, "Resized")),
        "the Resized Event of the last downscale",
    )
    downs = sorted(
        (e for e in op_cluster.events(ns, "Resized") if e.message.startswith("downscale")),
        key=lambda e: e.metadata.creation_timestamp,
    )
    step = re.compile(r"downscale pods (\d+)->(\d+): peak (\d+) over 8s, buffer 40%.*")
    pairs = []
    for event in downs:
        match = step.fullmatch(event.message)
        assert match, event.message
        pairs.append((int(match.group(1)), int(match.group(2))))
    assert [a for a, _ in pairs] == [28, *[b for _, b in pairs][:-1]], pairs
    last_from = pairs[-1][0]
    # Under load the informer may see the last deletes late, so the window's peak at the last
    # step is 2 or a little above; any peak p with ceil(1.4 p) <= 10 ends at 10, and the message
    # says "at minimum" exactly when the buffer alone would give less than 10.
    last_peak = int(step.fullmatch(downs[-1].message).group(3))  # type: ignore[union-attr]
    assert 2 <= last_peak <= 7, downs[-1].message
    suffix = ", at minimum 10" if -(-last_peak * 140 // 100) < 10 else ""
    assert downs[-1].message == (
        f"downscale pods {last_from}->10: peak {last_peak} over 8s, buffer 40%{suffix}"
    )


def test_a_namespace_above_the_maximum_at_install_is_held_at_usage_and_reported(
    op_cluster: OperatorCluster, scope: dict[str, str], start_operator: StartOperator
) -> None:
    """v0.2, never below usage: 30 pods before install, maximum 25 -> hard 30 (not 25, which
    would refuse every create, replacements included); no growth; reported."""
    ns = op_cluster.new_namespace(scope)
    op_cluster.create_pods(ns, 30)
    op_cluster.policy("p-max", scope, pods=profile(maximum=25), configmaps=CONFIGMAPS)
    op = start_operator()
    quota = op_cluster.wait_hard(ns, {"pods": "30", "configmaps": "20"})
    assert quota.metadata.annotations["dynquota.io/hard.pods"] == "30"
    event = op_cluster.wait_event(ns, "UsageAboveMaximum")
    assert event.type == "Warning"
    assert event.message == "usage of pods 30 is above the maximum 25 of policy p-max"
    wait_until(
        lambda: (
            op.sample("dynquota_usage_above_maximum", {"namespace": ns, "resource": "pods"}) == 1
        ),
        "usage_above_maximum metric",
    )
    assert op.sample("dynquota_usage", {"namespace": ns, "resource": "pods"}) == 30
    assert op.sample("dynquota_hard", {"namespace": ns, "resource": "pods"}) == 30
    # enforced: a 31st pod is refused, but a deleted pod's replacement is admitted
    with pytest.raises(ApiException) as refused:
        op_cluster.create_pod(ns)
    assert refused.value.status == 403
    assert "exceeded quota: dynquota" in str(refused.value.body)
    op_cluster.delete_pods(ns, 1)
    wait_until(
        lambda: (op_cluster.quota(ns).status.used or {}).get("pods") == "29", "status.used 29"
    )
    op_cluster.create_pod(ns)  # the replacement fits


def test_override_raises_to_maximum_then_expires_back_to_sizing(
    op_cluster: OperatorCluster, scope: dict[str, str], start_operator: StartOperator
) -> None:
    ns = op_cluster.new_namespace(scope)
    op_cluster.create_pods(ns, 3)
    op_cluster.policy("p-override", scope, pods=profile(maximum=50), configmaps=CONFIGMAPS)
    op = start_operator(override_ttl="8s")
    op_cluster.wait_hard(ns, {"pods": "10", "configmaps": "20"})
    op_cluster.core.patch_namespaced_resource_quota(
        "dynquota", ns, {"metadata": {"annotations": {"dynquota.io/override": "max"}}}
    )
    quota = op_cluster.wait_hard(ns, {"pods": "50", "configmaps": "200"})
    ann = quota.metadata.annotations
    granted = parse_time(ann["dynquota.io/override-granted-at"])
    assert parse_time(ann["dynquota.io/override-expires-at"]) == granted + 8
    event = op_cluster.wait_event(ns, "OverrideGranted")
    assert event.message.startswith("override granted until ")
    assert event.message.endswith(": pods 10->50, configmaps 20->200")
    wait_until(
        lambda: op.sample("dynquota_overrides_active", {"namespace": ns}) == 1,
        "overrides_active 1",
    )
    # the limit is really lifted: 40 pods fit
    op_cluster.create_pods(ns, 40)
    # expiry: back to T(peak) — the 43 pods are the peak now
    quota = op_cluster.wait_hard(ns, {"pods": "50", "configmaps": "20"}, timeout=30)
    ann = quota.metadata.annotations
    assert "dynquota.io/override" not in ann
    assert "dynquota.io/override-granted-at" not in ann
    assert "dynquota.io/override-expires-at" not in ann
    expired = op_cluster.wait_event(ns, "OverrideExpired")
    assert "override expired at" in expired.message
    assert "override-expired configmaps 200->20" in expired.message
    wait_until(
        lambda: op.sample("dynquota_overrides_active", {"namespace": ns}) == 0,
        "overrides_active 0",
    )
    # a new request after expiry is granted again
    op_cluster.delete_pods(ns, 43)
    op_cluster.core.patch_namespaced_resource_quota(
        "dynquota", ns, {"metadata": {"annotations": {"dynquota.io/override": "MAX"}}}
    )
    op_cluster.wait_hard(ns, {"pods": "50", "configmaps": "200"})
    wait_until(lambda: len(op_cluster.events(ns, "OverrideGranted")) == 2, "second grant")


def test_malformed_override_is_rejected_with_a_warning_and_no_change(
    op_cluster: OperatorCluster, scope: dict[str, str], start_operator: StartOperator
) -> None:
    ns = op_cluster.new_namespace(scope)
    op_cluster.policy("p-bad-override", scope, pods=profile(), configmaps=CONFIGMAPS)
    op = start_operator()
    before = op_cluster.wait_hard(ns, {"pods": "10", "configmaps": "20"})
    op.idle()
    writes = op.writes()
    op_cluster.core.patch_namespaced_resource_quota(
        "dynquota", ns, {"metadata": {"annotations": {"dynquota.io/override": "forever"}}}
    )
    event = op_cluster.wait_event(ns, "OverrideRejected")
    assert event.type == "Warning"
    assert event.message == (
        "dynquota.io/override='forever' is not a valid request (the only value is max); ignored"
    )
    op.idle()
    after = op_cluster.quota(ns)
    assert after.spec.hard == before.spec.hard
    assert {k: v for k, v in after.metadata.annotations.items() if k != "dynquota.io/override"} == (
        before.metadata.annotations
    )
    assert op.writes() == writes


def test_deleted_quota_is_recreated_and_direct_edits_are_reverted(
    op_cluster: OperatorCluster, scope: dict[str, str], start_operator: StartOperator
) -> None:
    ns = op_cluster.new_namespace(scope)
    op_cluster.create_pods(ns, 14)
    op_cluster.policy("p-revert", scope, pods=profile(), configmaps=CONFIGMAPS)
    start_operator()
    first = op_cluster.wait_hard(ns, {"pods": "20", "configmaps": "20"})
    op_cluster.core.delete_namespaced_resource_quota("dynquota", ns)
    second = op_cluster.wait_hard(ns, {"pods": "20", "configmaps": "20"})
    assert second.metadata.uid != first.metadata.uid
    recreated = op_cluster.wait_event(ns, "QuotaRecreated")
    assert recreated.type == "Warning"
    assert recreated.message.startswith(
        "the managed quota was deleted and is re-created (its state is lost, cooldowns restart; "
        "to stop dynquota managing this namespace, label it dynquota.io/managed=false): "
        "create pods 20: usage 14, buffer 40%"
    )
    stamps = {k: v for k, v in second.metadata.annotations.items() if "last-" in k}
    op_cluster.core.patch_namespaced_resource_quota(
        "dynquota", ns, {"spec": {"hard": {"pods": "500", "secrets": "5"}}}
    )
    third = op_cluster.wait_hard(ns, {"pods": "20", "configmaps": "20"})
    assert third.metadata.uid == second.metadata.uid
    # a revert stamps nothing
    assert {k: v for k, v in third.metadata.annotations.items() if "last-" in k} == stamps
    reverted = op_cluster.wait_event(ns, "ManualEditReverted")
    assert reverted.type == "Warning"
    assert reverted.message == (
        "spec.hard was edited directly: pods edited to 500, restored to 20; secrets set to 5, "
        "removed (not tracked by dynquota). dynquota sizes this quota: change its "
        "DynamicQuotaPolicy, or request dynquota.io/override=max"
    )


def test_namespaces_labelled_managed_false_are_skipped(
    op_cluster: OperatorCluster, scope: dict[str, str], start_operator: StartOperator
) -> None:
    skipped = op_cluster.new_namespace({**scope, "dynquota.io/managed": "false"})
    managed = op_cluster.new_namespace(scope)
    op_cluster.policy("p-optout", scope, pods=profile(), configmaps=CONFIGMAPS)
    op = start_operator()
    op_cluster.wait_hard(managed, {"pods": "10", "configmaps": "20"})
    op.idle()
    assert op_cluster.quota(skipped) is None
    op_cluster.core.patch_namespace(
        managed, {"metadata": {"labels": {"dynquota.io/managed": "False"}}}
    )
    wait_until(lambda: op_cluster.quota(managed) is None, "managed quota removed")
    # reported on the Namespace object (stored in `default`, like client-go's recorder)
    removed = wait_until(
        lambda: next(
            (
                e
                for e in op_cluster.events("default", "QuotaRemoved")
                if e.involved_object.kind == "Namespace" and e.involved_object.name == managed
            ),
            None,
        ),
        "QuotaRemoved on the Namespace",
    )
    assert removed.type == "Warning"
    assert removed.message == (
        "the managed ResourceQuota dynquota was deleted: "
        "namespace labelled dynquota.io/managed=false; who may update "
        "dynamicquotapolicies.dynquota.io can restore it (the namespace's labels, or a policy "
        "selecting it)"
    )


def test_kill_switch_removes_managed_quotas_only_and_release_recreates_them(
    op_cluster: OperatorCluster, scope: dict[str, str], start_operator: StartOperator
) -> None:
    a = op_cluster.new_namespace(scope)
    b = op_cluster.new_namespace(scope)
    op_cluster.core.create_namespaced_resource_quota(
        a, {"metadata": {"name": "team-limits"}, "spec": {"hard": {"pods": "100"}}}
    )
    op_cluster.policy("p-kill", scope, pods=profile(), configmaps=CONFIGMAPS)
    op = start_operator()
    op_cluster.wait_hard(a, {"pods": "10", "configmaps": "20"})
    op_cluster.wait_hard(b, {"pods": "10", "configmaps": "20"})
    unmanaged = op_cluster.quota(a, "team-limits")
    op_cluster.kill_switch("True")
    wait_until(
        lambda: op_cluster.quota(a) is None and op_cluster.quota(b) is None,
        "managed quotas deleted",
    )
    kept = op_cluster.quota(a, "team-limits")
    assert kept.metadata.uid == unmanaged.metadata.uid
    assert kept.spec.hard == {"pods": "100"}
    engaged = op_cluster.wait_event("default", "KillSwitchEngaged")
    assert engaged.involved_object.kind == "Namespace"
    assert engaged.involved_object.name == "kube-system"
    assert op.sample("dynquota_kill_switch_engaged") == 1

    # nothing is created while engaged, even for a new namespace and after a resync
    def decisions() -> float:
        return sum(
            op.sample("dynquota_reconciles_total", {"result": r})
            for r in ("ok", "dry-run", "retry", "invalid", "standby")
        )

    decided = decisions()
    c = op_cluster.new_namespace(scope)
    # the new namespace and then a resync (every 10 s) are decided: at least 2 more decisions
    wait_until(lambda: decisions() >= decided + 2, "decisions while engaged", timeout=30)
    op.idle()
    assert [op_cluster.quota(n) for n in (a, b, c)] == [None, None, None]
    op_cluster.kill_switch(None)
    for ns in (a, b, c):
        op_cluster.wait_hard(ns, {"pods": "10", "configmaps": "20"})
    op_cluster.wait_event("default", "KillSwitchReleased")
    assert op.sample("dynquota_kill_switch_engaged") == 0


def test_kill_switch_engaged_while_the_operator_is_down(
    op_cluster: OperatorCluster, scope: dict[str, str], start_operator: StartOperator
) -> None:
    ns = op_cluster.new_namespace(scope)
    op_cluster.policy("p-kill-down", scope, pods=profile(), configmaps=CONFIGMAPS)
    first = start_operator()
    op_cluster.wait_hard(ns, {"pods": "10", "configmaps": "20"})
    first.stop()
    op_cluster.kill_switch("true")
    fresh = op_cluster.new_namespace(scope)
    op = start_operator()
    wait_until(lambda: op_cluster.quota(ns) is None, "managed quota deleted at start-up")
    op.idle()
    assert op_cluster.quota(fresh) is None
    assert op.sample("dynquota_quota_writes_total", {"verb": "create"}) == 0
    # (earlier tests' terminating namespaces may hold managed quotas too: >= 1 delete)
    assert op.sample("dynquota_quota_writes_total", {"verb": "delete"}) >= 1
    op_cluster.kill_switch("false")
    op_cluster.wait_hard(fresh, {"pods": "10", "configmaps": "20"})


def test_restart_at_the_fixed_point_writes_nothing(
    op_cluster: OperatorCluster, scope: dict[str, str], start_operator: StartOperator
) -> None:
    namespaces = [op_cluster.new_namespace(scope) for _ in range(3)]
    op_cluster.create_pods(namespaces[0], 14)
    op_cluster.policy("p-restart", scope, pods=profile(), configmaps=CONFIGMAPS)
    first = start_operator()
    op_cluster.wait_hard(namespaces[0], {"pods": "20", "configmaps": "20"})
    for ns in namespaces[1:]:
        op_cluster.wait_hard(ns, {"pods": "10", "configmaps": "20"})
    first.idle()
    first.stop()
    events_before = {ns: len(op_cluster.events(ns)) for ns in namespaces}
    second = start_operator(resync_seconds=2)
    # every namespace is decided at start and again by two resyncs
    runs = second.runtime.operator.queue.runs  # type: ignore[union-attr]
    wait_until(
        lambda: second.runtime.operator.queue.runs >= runs + 2 * len(namespaces),  # type: ignore[union-attr]
        "two resyncs",
        timeout=20,
    )
    second.idle()
    assert second.writes() == 0
    assert {ns: len(op_cluster.events(ns)) for ns in namespaces} == events_before


def _etcd_put(op_cluster: OperatorCluster, key: str, value: dict[str, Any]) -> None:
    """Write an object straight into etcd, past every apiserver check (a stored-anyway spec:
    an old CRD, a schema change, a direct etcd write)."""
    body = json.dumps(
        {
            "key": base64.b64encode(key.encode()).decode(),
            "value": base64.b64encode(json.dumps(value).encode()).decode(),
        }
    ).encode()
    request = urllib.request.Request(
        f"{op_cluster.cp.etcd_url}/v3/kv/put",
        data=body,
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        assert answer.status == 200


def test_invalid_policy_is_refused_by_the_apiserver_and_frozen_by_the_operator(
    op_cluster: OperatorCluster, scope: dict[str, str], start_operator: StartOperator
) -> None:
    ns = op_cluster.new_namespace(scope)
    op_cluster.create_pods(ns, 14)
    op_cluster.policy("p-good", scope, pods=profile(), configmaps=CONFIGMAPS)
    op = start_operator()
    op_cluster.wait_hard(ns, {"pods": "20", "configmaps": "20"})
    bad_spec = {
        "namespaceSelector": {"matchLabels": scope},
        "priority": 10,
        "resources": {"count/nodes": {"maximum": 3}, "pods": profile(minimum=1, maximum=2)},
    }
    # 1. the apiserver refuses it (CRD CEL rule on the keys of resources)
    with pytest.raises(ApiException) as refused:
        op_cluster.custom.create_cluster_custom_object(
            "dynquota.io",
            "v1alpha1",
            "dynamicquotapolicies",
            {
                "apiVersion": "dynquota.io/v1alpha1",
                "kind": "DynamicQuotaPolicy",
                "metadata": {"name": "p-typo"},
                "spec": bad_spec,
            },
        )
    assert refused.value.status == 422
    assert "must be a ResourceQuota key the Kubernetes quota system counts" in str(
        refused.value.body
    )
    # 2. stored anyway: the operator reports Valid=False and freezes the namespace
    _etcd_put(
        op_cluster,
        "/registry/dynquota.io/dynamicquotapolicies/p-typo",
        {
            "apiVersion": "dynquota.io/v1alpha1",
            "kind": "DynamicQuotaPolicy",
            "metadata": {
                "name": "p-typo",
                "uid": str(uuid.uuid4()),
                "generation": 1,
                "creationTimestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            },
            "spec": bad_spec,
        },
    )

    def invalid_condition() -> dict[str, Any] | None:
        status = op_cluster.get_policy("p-typo").get("status") or {}
        return next((c for c in status.get("conditions") or [] if c["status"] == "False"), None)

    condition = wait_until(invalid_condition, "Valid=False on p-typo")
    assert condition["type"] == "Valid"
    assert condition["reason"] == "InvalidSpec"
    assert "'count/nodes': 'nodes' is cluster-scoped" in condition["message"]
    wait_until(lambda: op.sample("dynquota_frozen_namespaces") == 1, "one frozen namespace")
    wait_until(
        lambda: (op_cluster.get_policy("p-typo").get("status") or {}).get("frozenNamespaces") == 1,
        "status.frozenNamespaces 1 on p-typo",
    )
    # a Warning on the policy (cluster-scoped: stored in `default`)
    uid = op_cluster.get_policy("p-typo")["metadata"]["uid"]  # not an earlier test's p-typo
    event = wait_until(
        lambda: next(
            (
                e
                for e in op_cluster.events("default", "PolicyInvalid")
                if e.involved_object.kind == "DynamicQuotaPolicy"
                and e.involved_object.name == "p-typo"
                and e.involved_object.uid == uid
            ),
            None,
        ),
        "PolicyInvalid on p-typo",
    )
    assert event.type == "Warning"
    assert "'count/nodes': 'nodes' is cluster-scoped" in event.message
    assert event.message.endswith(
        "; it freezes 1 namespaces (their managed quota is left as it is) until it is fixed"
    )
    # frozen: neither the invalid policy's maximum 2 nor pressure moves the quota
    with op_cluster.race_explains(ns, "pods"):
        assert op_cluster.fill_pods(ns) == 6
    deadline = time.time() + 5  # 2.5 upscale cooldowns
    wait_until(lambda: time.time() >= deadline, "5 s")
    op.idle()
    assert op_cluster.hard(ns) == {"pods": "20", "configmaps": "20"}
    # fixed (deleted): p-good governs again and the pending upscale happens
    op_cluster.delete_policy("p-typo")
    op_cluster.wait_hard(ns, {"pods": "28", "configmaps": "20"})
    wait_until(lambda: op.sample("dynquota_frozen_namespaces") == 0, "nothing frozen")


def test_dry_run_policy_reports_and_writes_nothing(
    op_cluster: OperatorCluster, scope: dict[str, str], start_operator: StartOperator
) -> None:
    ns = op_cluster.new_namespace(scope)
    op_cluster.create_pods(ns, 14)
    op_cluster.policy("p-dry", scope, pods=profile(), configmaps=CONFIGMAPS, dry_run=True)
    op = start_operator()
    event = op_cluster.wait_event(ns, "Resized")
    assert event.message == (
        "(dry run) create pods 20: usage 14, buffer 40%; "
        "create configmaps 20: usage 1, buffer 40%, at minimum 20"
    )
    wait_until(
        lambda: op.sample("dynquota_hard", {"namespace": ns, "resource": "pods"}) == 20,
        "simulated hard in the metrics",
    )
    op.idle()
    assert op_cluster.quota(ns) is None
    assert op.writes() == 0
