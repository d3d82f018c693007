"""Issue 16 on the real control plane: dry run is a way back (enforce -> dry run -> enforce),
a tenant at the limit is told what to do (and where they can see it), and per-policy
override rules.

The operator runs in-process as the chart's ServiceAccount (see test_operator.py).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from dynquota.names import GROUP, PLURAL, VERSION
from dynquota.testing.operator import OperatorCluster, OperatorThread
from dynquota.testing.wait import wait_until

StartOperator = Callable[..., OperatorThread]

PODS = {
    "bufferPercent": 40,
    "minimum": 10,
    "maximum": 50,
    "upscaleCooldown": "2s",
    "downscaleCooldown": "1h",
}
CONFIGMAPS = {**PODS, "minimum": 20, "maximum": 200}


def patch_policy(op_cluster: OperatorCluster, name: str, spec: dict[str, Any]) -> None:
    op_cluster.custom.patch_cluster_custom_object(GROUP, VERSION, PLURAL, name, {"spec": spec})


def test_enforce_dry_run_enforce_round_trip(
    op_cluster: OperatorCluster, scope: dict[str, str], start_operator: StartOperator
) -> None:
    ns = op_cluster.new_namespace(scope)
    op_cluster.create_pods(ns, 14)
    op_cluster.policy("p-way-back", scope, pods=PODS, configmaps=CONFIGMAPS)
    op = start_operator()
    op_cluster.wait_hard(ns, {"pods": "20", "configmaps": "20"})

    # dry run: the quota is released, nothing is enforced
    patch_policy(op_cluster, "p-way-back", {"dryRun": True})
    wait_until(lambda: op_cluster.quota(ns) is None, "the managed quota released")
    event = op_cluster.wait_event(ns, "QuotaReleased")
    assert event.type == "Normal"
    assert event.involved_object.kind == "ResourceQuota"
    assert event.message == (
        "policy p-way-back is in dry run (spec.dryRun): dynquota enforces nothing in this "
        "namespace: the managed ResourceQuota dynquota was released (deleted); it would set "
        "configmaps=20, pods=20. Leaving dry run creates it again from current usage"
    )
    assert op.sample("dynquota_quota_deletions_total", {"cause": "dry-run"}) == 1
    op_cluster.create_pods(ns, 10)  # 24 pods: past the old hard 20, admitted
    op.idle()
    assert op_cluster.quota(ns) is None  # it only simulates now

    # enforce again: created from current usage (T(24) = 34), never below it
    patch_policy(op_cluster, "p-way-back", {"dryRun": False})
    quota = op_cluster.wait_hard(ns, {"pods": "34", "configmaps": "20"})
    assert quota.metadata.annotations["dynquota.io/hard.pods"] == "34"
    # and the tenant override is honoured
    op_cluster.core.patch_namespaced_resource_quota(
        "dynquota", ns, {"metadata": {"annotations": {"dynquota.io/override": "max"}}}
    )
    op_cluster.wait_hard(ns, {"pods": "50", "configmaps": "200"})
    op_cluster.wait_event(ns, "OverrideGranted")
    wait_until(
        lambda: op.sample("dynquota_overrides_active", {"namespace": ns}) == 1,
        "overrides_active{namespace} 1",
    )


def test_tenant_at_the_limit_sees_the_line_and_the_warning(
    op_cluster: OperatorCluster, scope: dict[str, str], start_operator: StartOperator
) -> None:
    ns = op_cluster.new_namespace(scope)
    slow = {**PODS, "upscaleCooldown": "1h"}  # stays at the limit for the whole test
    op_cluster.policy("p-at-limit", scope, pods=slow, configmaps=CONFIGMAPS)
    op = start_operator(tenant_help_url="https://wiki.example.com/quotas", override_ttl="72h")
    op_cluster.wait_hard(ns, {"pods": "10", "configmaps": "20"})
    with op_cluster.race_explains(ns, "pods"):
        assert op_cluster.fill_pods(ns) == 10
        event = op_cluster.wait_event(ns, "QuotaAtLimit")
        assert event.type == "Warning"
        assert event.involved_object.kind == "ResourceQuota"
        line = wait_until(
            lambda: (op_cluster.quota(ns).metadata.annotations or {}).get("dynquota.io/message"),
            "the tenant line",
        )
        written, content = line.split(": ", 1)
        assert content == event.message
        assert written <= event.message.split("next automatic raise at ")[1][:20]
        raise_at = op_cluster.quota(ns).metadata.annotations["dynquota.io/last-upscale.pods"]
        assert event.message.startswith(
            "pods at its limit (used 10 of hard 10): next automatic raise at "
        )
        assert event.message.endswith(
            f"; for more room now: kubectl -n {ns} annotate resourcequota dynquota "
            "dynquota.io/override=max (every resource to its policy maximum for 72h). "
            "Help: https://wiki.example.com/quotas"
        )
        assert raise_at < event.message.split("next automatic raise at ")[1][:20]
        # no storm and no write at rest: later decisions neither post nor write again
        op.idle()
        writes = op.writes()
        op_cluster.core.patch_namespaced_resource_quota(  # an event that makes it decide again
            "dynquota", ns, {"metadata": {"annotations": {"example.com/touch": "1"}}}
        )
        op.idle()
        assert op.writes() == writes
        assert len(op_cluster.events(ns, "QuotaAtLimit")) == 1
        # Where a tenant sees it (kubectl 1.37, measured here; docs/tenants.md quotes it):
        describe = op_cluster.cp.kubectl("describe", "resourcequota", "dynquota", "-n", ns)
        assert "dynquota.io/message" not in describe  # describe quota shows neither annotations
        assert "QuotaAtLimit" not in describe  # ... nor Events
        events = op_cluster.cp.kubectl("get", "events", "-n", ns)
        assert "QuotaAtLimit" in events
        assert "kubectl -n" in events
        yaml = op_cluster.cp.kubectl("get", "resourcequota", "dynquota", "-n", ns, "-o", "yaml")
        assert "dynquota.io/message" in yaml
        described = op_cluster.cp.kubectl("describe", "namespace", ns)
        assert re.search(r"\n\s*pods\s+10\s+10\n", described)  # Used/Hard of the quota...
        assert "QuotaAtLimit" not in described  # ... but not its Events


def test_policy_that_disallows_the_override_refuses_it(
    op_cluster: OperatorCluster, scope: dict[str, str], start_operator: StartOperator
) -> None:
    ns = op_cluster.new_namespace(scope)
    op_cluster.policy("p-no-override", scope, pods=PODS, configmaps=CONFIGMAPS)
    patch_policy(op_cluster, "p-no-override", {"override": {"allowed": False}})
    start_operator()
    op_cluster.wait_hard(ns, {"pods": "10", "configmaps": "20"})
    op_cluster.core.patch_namespaced_resource_quota(
        "dynquota", ns, {"metadata": {"annotations": {"dynquota.io/override": "max"}}}
    )
    event = op_cluster.wait_event(ns, "OverrideRejected")
    assert event.message == (
        "dynquota.io/override=max not granted: policy p-no-override does not allow overrides "
        "(spec.override.allowed: false); ask the platform team"
    )
    assert op_cluster.hard(ns) == {"pods": "10", "configmaps": "20"}
