"""The Helm chart rendered by the real `helm` (lint, template, values schema) and every rendered
object accepted by the real apiserver (server-side dry run)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from dynquota import __version__
from dynquota.policy.models import DEFAULT_PROFILES
from dynquota.settings import Settings
from dynquota.testing.controlplane import LocalControlPlane, find_binaries

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "dynquota"
CI_VALUES = sorted((CHART / "ci").glob("*.yaml"))
RELEASE, NS = "dq", "dynquota-system"


@pytest.fixture(scope="module")
def helm() -> Path:
    """The helm binary built with the control plane (no cluster needed for these)."""
    return find_binaries() / "helm"


def run_helm(helm: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(helm), *args], capture_output=True, text=True, check=False)


def render(helm: Path, *args: str, namespace: str = NS) -> list[dict[str, Any]]:
    """`helm template` the chart; the parsed objects, hooks included."""
    done = run_helm(helm, "template", RELEASE, str(CHART), "--namespace", namespace, *args)
    assert done.returncode == 0, done.stderr
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


def one(objs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [
        o for o in objs if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)
    ]
    assert len(found) == 1, f"{kind}/{name}: {[o['metadata']['name'] for o in found]}"
    return found[0]


def kinds(objs: list[dict[str, Any]]) -> list[str]:
    return sorted(f"{o['kind']}/{o['metadata']['name']}" for o in objs)


def container_env(deployment: dict[str, Any]) -> dict[str, Any]:
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


def settings_from(deployment: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> Settings:
    """The operator's Settings as the container would build them from the rendered env."""
    for name, value in container_env(deployment).items():
        if isinstance(value, dict):  # downward API
            value = {"metadata.namespace": NS, "metadata.name": "dq-dynquota-abc12"}[
                value["fieldRef"]["fieldPath"]
            ]
        monkeypatch.setenv(name, value)
    return Settings()


def lease_rules(lease: str) -> list[dict[str, Any]]:
    """The leader-election Role's rules for the Lease named ``lease``."""
    return [
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "resourceNames": [lease],
            "verbs": ["get", "update", "patch"],
        },
    ]


# -- lint and values files ----------------------------------------------------------------


def test_ci_values_files_cover_the_four_scenarios() -> None:
    assert [p.name for p in CI_VALUES] == [
        "dry-run-values.yaml",
        "leader-election-values.yaml",
        "monitoring-values.yaml",
        "write-rate-values.yaml",
    ]


@pytest.mark.parametrize("values", [None, *CI_VALUES], ids=lambda v: v.name if v else "default")
def test_helm_lint_strict(helm: Path, values: Path | None) -> None:
    args = ["lint", "--strict", str(CHART)] + (["--values", str(values)] if values else [])
    done = run_helm(helm, *args)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 chart(s) linted, 0 chart(s) failed" in done.stdout


def test_invalid_values_are_rejected_by_the_schema(helm: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad-values.yaml"
    bad.write_text(
        yaml.safe_dump(
            {
                "replicas": 2,  # typo of replicaCount
                "operator": {"dryrun": True, "logFormat": "xml"},
                "defaultPolicy": {
                    "resources": {"secrets": {"minimum": 1}, "pods": {"bufferPercent": 1001}}
                },
                "replicaCount": 0,
            }
        )
    )
    done = run_helm(helm, "template", RELEASE, str(CHART), "--values", str(bad))
    assert done.returncode == 1
    lines = sorted(
        line.strip() for line in done.stderr.splitlines() if line.strip().startswith("- ")
    )
    assert lines == [
        "- at '': additional properties 'replicas' not allowed",
        "- at '/defaultPolicy/resources': additional properties 'secrets' not allowed",
        "- at '/defaultPolicy/resources': validation failed",
        "- at '/defaultPolicy/resources/pods/bufferPercent': maximum: got 1,001, want 1,000",
        "- at '/operator': additional properties 'dryrun' not allowed",
        "- at '/operator': validation failed",
        "- at '/operator/logFormat': value must be one of 'json', 'text'",
        "- at '/replicaCount': minimum: got 0, want 1",
    ], done.stderr


# -- what the default values render ---------------------------------------------------------


def test_default_render_objects(helm: Path) -> None:
    objs = render(helm)
    assert kinds(objs) == [
        "ClusterRole/dq-dynquota",
        "ClusterRole/dq-dynquota-cleanup",
        "ClusterRole/dq-dynquota-tenant-override",
        "ClusterRole/dq-dynquota-tenant-view",
        "ClusterRoleBinding/dq-dynquota",
        "ClusterRoleBinding/dq-dynquota-cleanup",
        "Deployment/dq-dynquota",
        "DynamicQuotaPolicy/default",
        "Job/dq-dynquota-cleanup",
        "Pod/dq-dynquota-test-metrics",
        "Role/dq-dynquota-cleanup",
        "Role/dq-dynquota-leader-election",
        "RoleBinding/dq-dynquota-cleanup",
        "RoleBinding/dq-dynquota-leader-election",
        "Service/dq-dynquota-metrics",
        "ServiceAccount/dq-dynquota",
        "ServiceAccount/dq-dynquota-cleanup",
        "ValidatingAdmissionPolicy/dq-dynquota-budget-guard",
        "ValidatingAdmissionPolicy/dq-dynquota-governance-labels",
        "ValidatingAdmissionPolicy/dq-dynquota-lease-fence",
        "ValidatingAdmissionPolicy/dq-dynquota-lease-fence-wake",
        "ValidatingAdmissionPolicy/dq-dynquota-managed-quota",
        "ValidatingAdmissionPolicy/dq-dynquota-operator-writes",
        "ValidatingAdmissionPolicy/dq-dynquota-policy-selectors",
        "ValidatingAdmissionPolicy/dq-dynquota-unmanaged-quota",
        "ValidatingAdmissionPolicyBinding/dq-dynquota-budget-guard",
        "ValidatingAdmissionPolicyBinding/dq-dynquota-governance-labels",
        "ValidatingAdmissionPolicyBinding/dq-dynquota-lease-fence",
        "ValidatingAdmissionPolicyBinding/dq-dynquota-lease-fence-wake",
        "ValidatingAdmissionPolicyBinding/dq-dynquota-managed-quota",
        "ValidatingAdmissionPolicyBinding/dq-dynquota-operator-writes",
        "ValidatingAdmissionPolicyBinding/dq-dynquota-policy-selectors",
        "ValidatingAdmissionPolicyBinding/dq-dynquota-unmanaged-quota",
    ]


def test_default_deployment(helm: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    deployment = one(render(helm), "Deployment")
    spec = deployment["spec"]
    assert spec["replicas"] == 1
    # Leader election is on for one replica too, so the new pod may start beside the old one.
    assert spec["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
    }
    pod = spec["template"]["spec"]
    assert pod["serviceAccountName"] == "dq-dynquota"
    assert pod["securityContext"] == {
        "runAsNonRoot": True,
        "runAsUser": 65532,
        "runAsGroup": 65532,
        "fsGroup": 65532,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    (container,) = pod["containers"]
    assert container["image"] == f"ghcr.io/dynquota/dynquota:{__version__}"
    assert "command" not in container  # the image's ENTRYPOINT: dynquota run
    assert "args" not in container
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "runAsUser": 65532,
        "runAsGroup": 65532,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"] == {"path": "/healthz", "port": "http-probes"}
    assert container["startupProbe"]["failureThreshold"] == 60
    assert {p["name"]: p["containerPort"] for p in container["ports"]} == {
        "http-metrics": 8080,
        "http-probes": 8081,
    }
    assert container["resources"] == {
        "requests": {"cpu": "100m", "memory": "128Mi"},
        "limits": {"memory": "512Mi"},
    }
    assert container_env(deployment) == {
        "DYNQUOTA_NAMESPACE": {"fieldRef": {"fieldPath": "metadata.namespace"}},
        "DYNQUOTA_POD_NAME": {"fieldRef": {"fieldPath": "metadata.name"}},
        "DYNQUOTA_DRY_RUN": "false",
        "DYNQUOTA_METRICS_PORT": "8080",
        "DYNQUOTA_PROBE_PORT": "8081",
        "DYNQUOTA_OVERRIDE_TTL": "168h",
        "DYNQUOTA_QUOTA_SYNC_PERIOD": "5m",
        "DYNQUOTA_TENANT_HELP_URL": "",
        "DYNQUOTA_LEADER_ELECTION": "true",
        "DYNQUOTA_LEASE_NAME": "dynquota",
        "DYNQUOTA_LEASE_DURATION_SECONDS": "15",
        "DYNQUOTA_LEASE_RENEW_DEADLINE_SECONDS": "10",
        "DYNQUOTA_LEASE_RETRY_PERIOD_SECONDS": "2",
        "DYNQUOTA_WATCH_TIMEOUT_SECONDS": "300",
        "DYNQUOTA_LIVENESS_MARGIN_SECONDS": "60",
        "DYNQUOTA_KILL_SWITCH_DELETE_QPS": "20",
        "DYNQUOTA_WAKE": "true",
        "DYNQUOTA_WAKE_QPS": "20",
        "DYNQUOTA_NODE_GROWTH": "true",
        "DYNQUOTA_UNMANAGE_BRAKE_SHARE": "0.5",
        "DYNQUOTA_UNMANAGE_BRAKE_WINDOW_SECONDS": "600",
        "DYNQUOTA_EXCLUDE_NAMESPACES": "",
        "DYNQUOTA_INCLUDE_NAMESPACES": "",
        "DYNQUOTA_BUDGET_GUARD_KINDS": (
            "pods,configmaps,secrets,services,persistentvolumeclaims,replicationcontrollers,"
            "resourceclaims.resource.k8s.io"
        ),
        "DYNQUOTA_BUDGET_GUARD_NAME": "dq-dynquota-budget-guard",
        "DYNQUOTA_GUARDED_LABEL_PREFIXES": "dynquota.io/",
        "DYNQUOTA_GUARDED_LABEL_KEYS": "",
        "DYNQUOTA_TARPIT_FLOW_SCHEMA": "",
        "DYNQUOTA_TARPIT_RESOURCES": "pods,configmaps",
        "DYNQUOTA_WORKERS": "4",
        "DYNQUOTA_RESYNC_SECONDS": "600",
        "DYNQUOTA_LOG_LEVEL": "INFO",
        "DYNQUOTA_LOG_FORMAT": "json",
    }
    # The operator accepts exactly this environment.
    settings = settings_from(deployment, monkeypatch)
    assert settings.namespace == NS
    assert settings.pod_name == "dq-dynquota-abc12"
    assert settings.dry_run is False
    assert settings.leader_election is True
    assert settings.lease_name == "dynquota"
    assert (
        settings.lease_duration_seconds,
        settings.lease_renew_deadline_seconds,
        settings.lease_retry_period_seconds,
    ) == (15, 10, 2)
    assert settings.override_ttl == 7 * 24 * 3600
    assert (settings.metrics_port, settings.probe_port) == (8080, 8081)
    assert settings.exclude_namespaces == []
    assert settings.kill_switch_delete_qps == 20.0
    assert settings.log_format == "json"


def test_default_policy_is_the_built_in_profiles_in_dry_run(helm: Path) -> None:
    """Audit first: the default policy selects every namespace and enforces none."""
    policy = one(render(helm), "DynamicQuotaPolicy")
    assert policy["apiVersion"] == "dynquota.io/v1alpha1"
    assert policy["spec"] == {
        "priority": 0,
        "dryRun": True,
        "namespaceSelector": {},
        "resources": {name: p.to_crd() for name, p in DEFAULT_PROFILES.items()},
    }


def test_operator_cluster_role_is_least_privilege(helm: Path) -> None:
    objs = render(helm)
    role = one(objs, "ClusterRole", "dq-dynquota")
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["pods", "configmaps"], "verbs": ["list", "watch"]},
        {
            "apiGroups": [""],
            "resources": ["resourcequotas"],
            "verbs": ["get", "list", "watch", "create"],
        },
        {
            "apiGroups": [""],
            "resources": ["resourcequotas"],
            "resourceNames": ["dynquota"],
            "verbs": ["patch", "delete"],
        },
        # issue #12: LimitRange defaults before a compute key is added; list only
        {"apiGroups": [""], "resources": ["limitranges"], "verbs": ["list"]},
        {
            "apiGroups": [""],
            "resources": ["limitranges"],
            "resourceNames": ["dynquota"],
            "verbs": ["watch"],
        },
        # the companion LimitRange (rbac.companionLimitRanges): create, patch by name, no delete
        {"apiGroups": [""], "resources": ["limitranges"], "verbs": ["create"]},
        {
            "apiGroups": [""],
            "resources": ["limitranges"],
            "resourceNames": ["dynquota"],
            "verbs": ["patch"],
        },
        # issue #28: the tenant projection AppliedDynamicQuota `dynquota`: no get, watch, patch
        {
            "apiGroups": ["dynquota.io"],
            "resources": ["applieddynamicquotas"],
            "verbs": ["list", "create"],
        },
        {
            "apiGroups": ["dynquota.io"],
            "resources": ["applieddynamicquotas"],
            "resourceNames": ["dynquota"],
            "verbs": ["update", "delete"],
        },
        {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get", "list", "watch"]},
        # issue #23: Events are created, never patched (where: the operator-writes policy)
        {"apiGroups": [""], "resources": ["events"], "verbs": ["create"]},
        # issue #23: no get (the informers list and watch)
        {
            "apiGroups": ["dynquota.io"],
            "resources": ["dynamicquotapolicies"],
            "verbs": ["list", "watch"],
        },
        {
            "apiGroups": ["dynquota.io"],
            "resources": ["dynamicquotapolicies/status"],
            "verbs": ["patch"],
        },
        {
            "apiGroups": ["dynquota.io"],
            "resources": ["quotabudgets"],
            "verbs": ["list", "watch"],
        },
        {
            "apiGroups": ["dynquota.io"],
            "resources": ["quotabudgets/status"],
            "verbs": ["patch"],
        },
        # issue #26: the wake lists workloads and patches their wake mark (the policy pins it)
        {
            "apiGroups": ["apps"],
            "resources": ["replicasets", "statefulsets", "daemonsets"],
            "verbs": ["list", "patch"],
        },
        {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["list", "patch"]},
        # issue #26: node growth reads when each Node was created
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["list", "watch"]},
        # issue #22: no write on admission policies (the budget guard is the chart's); issue
        # 30: get of the guard's two objects by name, for a budget's Guarded
        {
            "apiGroups": ["admissionregistration.k8s.io"],
            "resources": ["validatingadmissionpolicies", "validatingadmissionpolicybindings"],
            "resourceNames": ["dq-dynquota-budget-guard"],
            "verbs": ["get"],
        },
        {
            "apiGroups": ["apiextensions.k8s.io"],
            "resources": ["customresourcedefinitions"],
            "verbs": ["list", "watch"],
        },
    ]
    binding = one(objs, "ClusterRoleBinding", "dq-dynquota")
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "dq-dynquota", "namespace": NS}
    ]
    # Leader election is on by default, also for one replica: Lease rights in the release
    # namespace, on its own Lease only (create cannot be limited by name).
    lease_role = one(objs, "Role", "dq-dynquota-leader-election")
    assert lease_role["metadata"]["namespace"] == NS
    assert lease_role["rules"] == lease_rules("dynquota")
    lease_binding = one(objs, "RoleBinding", "dq-dynquota-leader-election")
    assert lease_binding["metadata"]["namespace"] == NS
    assert lease_binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": "dq-dynquota-leader-election",
    }
    assert lease_binding["subjects"] == binding["subjects"]
    # the wake off drops its rule and its Lease fence, and nothing else
    off = render(helm, "--set", "operator.wake.enabled=false")
    rules = one(off, "ClusterRole", "dq-dynquota")
    assert rules["rules"] == role["rules"][:-5] + role["rules"][-2:]
    # node growth off drops the nodes rule, and its env says so
    no_growth = render(helm, "--set", "operator.nodeGrowth.enabled=false")
    rules_no_growth = one(no_growth, "ClusterRole", "dq-dynquota")["rules"]
    assert rules_no_growth == role["rules"][:-3] + role["rules"][-2:]
    env = one(no_growth, "Deployment", "dq-dynquota")["spec"]["template"]["spec"]["containers"][0][
        "env"
    ]
    assert {"name": "DYNQUOTA_NODE_GROWTH", "value": "false"} in env
    assert [k for k in kinds(off) if "lease-fence" in k] == [
        "ValidatingAdmissionPolicy/dq-dynquota-lease-fence",
        "ValidatingAdmissionPolicyBinding/dq-dynquota-lease-fence",
    ]
    # crdScanning off drops the CRD rule and nothing else.
    rules = one(render(helm, "--set", "rbac.crdScanning=false"), "ClusterRole", "dq-dynquota")
    assert rules["rules"] == role["rules"][:-1]
    # companionLimitRanges off drops the two LimitRange write rules and nothing else.
    rules = one(
        render(helm, "--set", "rbac.companionLimitRanges=false"), "ClusterRole", "dq-dynquota"
    )
    assert rules["rules"] == role["rules"][:5] + role["rules"][7:]
    # budgetGuard off drops the guard's read and nothing else (issue 30)
    rules = one(render(helm, "--set", "budgetGuard.enabled=false"), "ClusterRole", "dq-dynquota")
    assert rules["rules"] == role["rules"][:-2] + role["rules"][-1:]
    # budgetAdmissionPolicies is accepted and ignored either way (issue #22)
    for value in ("true", "false"):
        rules = one(
            render(helm, "--set", f"rbac.budgetAdmissionPolicies={value}"),
            "ClusterRole",
            "dq-dynquota",
        )
        assert rules["rules"] == role["rules"]


def test_tenant_role_aggregates_to_admin_and_edit(helm: Path) -> None:
    role = one(render(helm), "ClusterRole", "dq-dynquota-tenant-override")
    labels = role["metadata"]["labels"]
    assert labels["rbac.authorization.k8s.io/aggregate-to-admin"] == "true"
    assert labels["rbac.authorization.k8s.io/aggregate-to-edit"] == "true"
    assert role["rules"] == [
        {
            "apiGroups": [""],
            "resources": ["resourcequotas"],
            "resourceNames": ["dynquota"],
            "verbs": ["get", "patch"],
        }
    ]


def test_admission_policy_matches_the_main_resource_only(helm: Path) -> None:
    objs = render(helm)
    vap = one(objs, "ValidatingAdmissionPolicy", "dq-dynquota-managed-quota")
    assert vap["apiVersion"] == "admissionregistration.k8s.io/v1"
    constraints = vap["spec"]["matchConstraints"]
    assert constraints["resourceRules"] == [
        {
            "apiGroups": [""],
            "apiVersions": ["v1"],
            "resources": ["resourcequotas"],  # never resourcequotas/status
            "resourceNames": ["dynquota"],
            "operations": ["UPDATE", "DELETE"],
        }
    ]
    assert constraints["objectSelector"] == {
        "matchLabels": {"app.kubernetes.io/managed-by": "dynquota"}
    }
    assert vap["spec"]["matchConditions"] == [
        {
            "name": "not-exempt",
            "expression": '!(request.userInfo.username in ["system:serviceaccount:'
            f'{NS}:dq-dynquota","system:serviceaccount:{NS}:dq-dynquota-cleanup"])',
        }
    ]
    binding = one(objs, "ValidatingAdmissionPolicyBinding", "dq-dynquota-managed-quota")
    assert binding["spec"] == {
        "policyName": "dq-dynquota-managed-quota",
        "validationActions": ["Deny"],
    }
    # Its complement: quotas named dynquota without the label, for everyone (no exemption),
    # with the same validation actions.
    unmanaged = one(objs, "ValidatingAdmissionPolicy", "dq-dynquota-unmanaged-quota")
    assert unmanaged["spec"]["matchConstraints"] == {"resourceRules": constraints["resourceRules"]}
    assert [c["name"] for c in unmanaged["spec"]["matchConditions"]] == ["unmanaged"]
    binding = one(objs, "ValidatingAdmissionPolicyBinding", "dq-dynquota-unmanaged-quota")
    assert binding["spec"] == {
        "policyName": "dq-dynquota-unmanaged-quota",
        "validationActions": ["Deny"],
    }
    # Extra exemptions from values; cleanup off drops the hook's account.
    vap = one(
        render(
            helm,
            "--set",
            "cleanupOnUninstall.enabled=false",
            "--set",
            "tenantOverride.admissionPolicy.exemptUsers={gitops}",
            "--set",
            "tenantOverride.admissionPolicy.exemptGroups={platform-admins}",
        ),
        "ValidatingAdmissionPolicy",
        "dq-dynquota-managed-quota",
    )
    assert vap["spec"]["matchConditions"][0]["expression"] == (
        f'!(request.userInfo.username in ["system:serviceaccount:{NS}:dq-dynquota","gitops"])'
        ' && !("platform-admins" in request.userInfo.groups)'
    )


def test_cleanup_hook(helm: Path) -> None:
    objs = render(helm)
    job = one(objs, "Job")
    assert job["metadata"]["annotations"] == {
        "helm.sh/hook": "pre-delete",
        "helm.sh/hook-weight": "0",
        "helm.sh/hook-delete-policy": "before-hook-creation,hook-succeeded",
    }
    pod = job["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "dq-dynquota-cleanup"
    (container,) = pod["containers"]
    assert container["command"] == [
        "dynquota", "cleanup", "--yes", "--scale-down", "dq-dynquota", "--qps", "20"
    ]  # fmt: skip
    assert [e["name"] for e in container["env"]] == [
        "DYNQUOTA_NAMESPACE", "DYNQUOTA_LOG_LEVEL", "DYNQUOTA_LOG_FORMAT"
    ]  # fmt: skip
    # 120 s to stop the operator + 30 s margin + 60 s to start + ceil(10000 namespaces / 20)
    assert job["spec"]["activeDeadlineSeconds"] == 710
    for kind in ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"):
        hook = one(objs, kind, "dq-dynquota-cleanup")
        assert hook["metadata"]["annotations"]["helm.sh/hook"] == "pre-delete"
        assert hook["metadata"]["annotations"]["helm.sh/hook-weight"] == "-10"
    assert one(objs, "ClusterRole", "dq-dynquota-cleanup")["rules"] == [
        {"apiGroups": [""], "resources": ["resourcequotas"], "verbs": ["list"]},
        {
            "apiGroups": [""],
            "resources": ["resourcequotas"],
            "resourceNames": ["dynquota"],
            "verbs": ["delete"],
        },
        # the tenant projections go with the quotas (issue #28)
        {"apiGroups": ["dynquota.io"], "resources": ["applieddynamicquotas"], "verbs": ["list"]},
        {
            "apiGroups": ["dynquota.io"],
            "resources": ["applieddynamicquotas"],
            "resourceNames": ["dynquota"],
            "verbs": ["delete"],
        },
    ]
    assert one(objs, "Role", "dq-dynquota-cleanup")["rules"] == [
        {
            "apiGroups": ["apps"],
            "resources": ["deployments"],
            "resourceNames": ["dq-dynquota"],
            "verbs": ["get", "patch"],
        },
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]},
    ]
    off = render(helm, "--set", "cleanupOnUninstall.enabled=false")
    assert [k for k in kinds(off) if "cleanup" in k] == []


@pytest.mark.parametrize(
    ("values", "qps", "deadline"),
    [
        (["--set", "cleanupOnUninstall.deleteQPS=200"], "200", 210 + 50),
        (["--set", "cleanupOnUninstall.deleteQPS=200",
          "--set", "cleanupOnUninstall.maxNamespaces=50001"], "200", 210 + 251),
        (["--set-json", "operator.killSwitchDeleteQPS=7.5"], "7.5", 210 + 1334),
        (["--set", "cleanupOnUninstall.activeDeadlineSeconds=900"], "20", 900),
    ],
)  # fmt: skip
def test_cleanup_hook_deadline_follows_the_rate_and_the_count(
    helm: Path, values: list[str], qps: str, deadline: int
) -> None:
    job = one(render(helm, *values), "Job")
    (container,) = job["spec"]["template"]["spec"]["containers"]
    assert container["command"][-2:] == ["--qps", qps]
    assert job["spec"]["activeDeadlineSeconds"] == deadline


# -- the ci/ scenarios ------------------------------------------------------------------------


def test_two_replicas_turn_on_leader_election(helm: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    objs = render(helm, "--values", str(CHART / "ci" / "leader-election-values.yaml"))
    deployment = one(objs, "Deployment")
    assert deployment["spec"]["replicas"] == 2
    assert deployment["spec"]["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
    }
    env = container_env(deployment)
    assert env["DYNQUOTA_LEADER_ELECTION"] == "true"
    assert env["DYNQUOTA_LEASE_NAME"] == "dynquota-ci"
    settings = settings_from(deployment, monkeypatch)
    assert settings.leader_election is True
    assert settings.lease_name == "dynquota-ci"
    assert (
        settings.lease_duration_seconds,
        settings.lease_renew_deadline_seconds,
        settings.lease_retry_period_seconds,
    ) == (15, 10, 2)
    role = one(objs, "Role", "dq-dynquota-leader-election")
    assert role["metadata"]["namespace"] == NS
    assert role["rules"] == lease_rules("dynquota-ci")
    assert one(objs, "RoleBinding", "dq-dynquota-leader-election")["roleRef"]["name"] == (
        "dq-dynquota-leader-election"
    )
    assert one(objs, "PodDisruptionBudget")["spec"]["minAvailable"] == 1


def test_leader_election_off_for_one_replica(helm: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    objs = render(
        helm,
        "--values",
        str(CHART / "ci" / "monitoring-values.yaml"),
        "--set",
        "leaderElection.enabled=false",
    )
    deployment = one(objs, "Deployment")
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    env = container_env(deployment)
    assert env["DYNQUOTA_LEADER_ELECTION"] == "false"
    assert [name for name in env if name.startswith("DYNQUOTA_LEASE_")] == []
    assert settings_from(deployment, monkeypatch).leader_election is False
    # No Lease rights at all, and no alert about a leader that is never elected.
    assert [o["kind"] for o in objs if "leader" in o["metadata"]["name"]] == []
    alerts = [r["alert"] for r in one(objs, "PrometheusRule")["spec"]["groups"][0]["rules"]]
    assert "DynquotaNoLeader" not in alerts
    assert len(alerts) == 9


def test_leader_election_off_with_two_replicas_is_refused(helm: Path) -> None:
    done = run_helm(
        helm, "template", RELEASE, str(CHART),
        "--set", "leaderElection.enabled=false", "--set", "replicaCount=2",
    )  # fmt: skip
    assert done.returncode == 1
    assert (
        "leaderElection.enabled=false needs replicaCount 1 (got 2): more replicas without leader"
        " election would all write"
    ) in done.stderr, done.stderr


def test_leader_election_through_extra_env_is_refused(helm: Path) -> None:
    done = run_helm(
        helm, "template", RELEASE, str(CHART),
        "--set", "operator.extraEnv[0].name=DYNQUOTA_LEADER_ELECTION",
        "--set-string", "operator.extraEnv[0].value=false",
    )  # fmt: skip
    assert done.returncode == 1
    assert (
        "operator.extraEnv sets DYNQUOTA_LEADER_ELECTION: set leaderElection.enabled instead"
    ) in done.stderr, done.stderr


def test_monitoring_values_render_service_monitor_and_alerts(helm: Path) -> None:
    objs = render(helm, "--values", str(CHART / "ci" / "monitoring-values.yaml"))
    monitor = one(objs, "ServiceMonitor")
    assert monitor["metadata"]["labels"]["release"] == "prometheus"
    assert monitor["spec"]["selector"]["matchLabels"] == {
        "app.kubernetes.io/name": "dynquota",
        "app.kubernetes.io/instance": RELEASE,
        "app.kubernetes.io/component": "metrics",
    }
    service = one(objs, "Service")
    for key, value in monitor["spec"]["selector"]["matchLabels"].items():
        assert service["metadata"]["labels"][key] == value
    assert monitor["spec"]["endpoints"] == [
        {
            "port": "http-metrics",
            "path": "/metrics",
            "honorLabels": True,
            "interval": "15s",
            "scrapeTimeout": "10s",
        }
    ]
    rule = one(objs, "PrometheusRule")
    (group,) = rule["spec"]["groups"]
    alerts = {r["alert"]: r for r in group["rules"]}
    # Leader election is on by default, so DynquotaNoLeader is there for one replica too.
    assert sorted(alerts) == [
        "DynquotaAbsent",
        "DynquotaKillSwitchEngaged",
        "DynquotaNamespaceAtMaximum",
        "DynquotaNamespaceThrottled",
        "DynquotaNoLeader",
        "DynquotaOverrideHeldLong",
        "DynquotaPolicyInvalid",
        "DynquotaQuotaControllerStalled",
        "DynquotaReconcileErrors",
        "DynquotaUsageDrift",
    ]
    assert alerts["DynquotaQuotaControllerStalled"]["expr"] == (
        "max by (signal) (dynquota_quota_controller_stalled"
        f'{{namespace="{NS}", service="dq-dynquota-metrics"}}) > 0'
    )
    assert alerts["DynquotaQuotaControllerStalled"]["for"] == "5m"
    assert alerts["DynquotaNoLeader"]["expr"] == (
        f'max(dynquota_leader{{namespace="{NS}", service="dq-dynquota-metrics"}}) < 1'
    )
    assert alerts["DynquotaAbsent"]["expr"] == (
        f'absent(up{{namespace="{NS}", service="dq-dynquota-metrics"}} == 1)'
    )
    assert alerts["DynquotaKillSwitchEngaged"]["expr"] == (
        f'max(dynquota_kill_switch_engaged{{namespace="{NS}", service="dq-dynquota-metrics"}}) == 1'
    )
    for alert in alerts.values():
        assert alert["labels"]["team"] == "platform"
        assert alert["labels"]["severity"] in ("critical", "warning", "info")
        assert alert["annotations"]["runbook_url"].startswith(
            "https://github.com/dynquota/dynquota/blob/main/docs/runbook.md#"
        )
    assert [r["alert"] for r in group["rules"]][-1] == "DynquotaNoLeader"
    # The Grafana dashboard, for the sidecar: the chart's JSON file, unchanged.
    dashboard = one(objs, "ConfigMap", "dq-dynquota-dashboard")
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert dashboard["metadata"]["annotations"] == {"grafana_folder": "Kubernetes"}
    assert dashboard["metadata"]["namespace"] == NS
    assert json.loads(dashboard["data"]["dynquota.json"]) == json.loads(
        (CHART / "dashboards" / "dynquota.json").read_text()
    )


def test_dry_run_values(helm: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    objs = render(helm, "--values", str(CHART / "ci" / "dry-run-values.yaml"))
    deployment = one(objs, "Deployment")
    settings = settings_from(deployment, monkeypatch)
    assert settings.dry_run is True
    assert settings.exclude_namespaces == ["monitoring", "ingress-nginx"]
    assert settings.log_format == "text"
    policy = one(objs, "DynamicQuotaPolicy")
    assert policy["spec"]["dryRun"] is True
    assert policy["spec"]["namespaceSelector"] == {
        "matchExpressions": [{"key": "dynquota.io/tier", "operator": "NotIn", "values": ["system"]}]
    }
    assert [k for k in kinds(objs) if "cleanup" in k] == []


def test_tenant_help_url_reaches_the_settings(helm: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    url = "https://wiki.example.com/quotas"
    deployment = one(render(helm, "--set", f"operator.tenantHelpURL={url}"), "Deployment")
    assert settings_from(deployment, monkeypatch).tenant_help_url == url


# -- every rendered object is accepted by the real apiserver --------------------------------


@pytest.fixture(scope="module")
def release_namespace(controlplane: LocalControlPlane) -> Iterator[str]:
    """A namespace enforcing the `restricted` Pod Security Standard, with the CRD installed."""
    name = "chart-render-dryrun"
    controlplane.kubectl("create", "namespace", name)
    controlplane.kubectl(
        "label", "namespace", name, "pod-security.kubernetes.io/enforce=restricted"
    )
    controlplane.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(ROOT / "crds"))
    controlplane.kubectl(
        "wait", "--for=condition=Established", "crd/dynamicquotapolicies.dynquota.io"
    )
    yield name
    controlplane.kubectl("delete", "namespace", name, "--wait=false")


@pytest.mark.parametrize("values", [None, *CI_VALUES], ids=lambda v: v.name if v else "default")
def test_server_side_dry_run_accepts_every_object(
    helm: Path, controlplane: LocalControlPlane, release_namespace: str, values: Path | None
) -> None:
    args = ["--values", str(values)] if values else []
    objs = render(helm, *args, namespace=release_namespace)
    # The Prometheus Operator's CRDs are not installed here: check those two kinds by shape.
    monitoring = [o for o in objs if o["apiVersion"].startswith("monitoring.coreos.com/")]
    objs = [o for o in objs if o not in monitoring]
    out = controlplane.kubectl(
        "apply", "--dry-run=server", "-o", "name", "-f", "-",
        input=yaml.safe_dump_all(objs),
    )  # fmt: skip
    assert len(out.split()) == len(objs)
    # The pods of the Deployment and the hook Job meet `restricted` too: Pod Security admission
    # checks a Pod made of each template (the dry run above checked the test Pod itself). The
    # ServiceAccounts were not persisted by the dry run, so these use `default`.
    for obj in objs:
        if obj["kind"] in ("Deployment", "Job"):
            pod = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": f"psa-{obj['metadata']['name']}",
                    "namespace": release_namespace,
                },
                "spec": {**obj["spec"]["template"]["spec"], "serviceAccountName": "default"},
            }
            controlplane.kubectl("create", "--dry-run=server", "-f", "-", input=yaml.safe_dump(pod))
    assert {o["kind"] for o in monitoring} <= {"ServiceMonitor", "PrometheusRule"}


def test_alerts_without_a_service_monitor(helm: Path) -> None:
    """Without the ServiceMonitor nothing says which `up` series is the operator's, so
    DynquotaAbsent is left out (it would fire forever); with `selector` every alert uses the
    admin's own matchers instead of the ServiceMonitor's labels, and DynquotaAbsent is back."""
    objs = render(helm, "--set", "metrics.prometheusRule.enabled=true")
    alerts = {r["alert"]: r for r in one(objs, "PrometheusRule")["spec"]["groups"][0]["rules"]}
    assert "DynquotaAbsent" not in alerts
    assert sorted(alerts) == [
        "DynquotaKillSwitchEngaged",
        "DynquotaNamespaceAtMaximum",
        "DynquotaNamespaceThrottled",
        "DynquotaNoLeader",
        "DynquotaOverrideHeldLong",
        "DynquotaPolicyInvalid",
        "DynquotaQuotaControllerStalled",
        "DynquotaReconcileErrors",
        "DynquotaUsageDrift",
    ]
    objs = render(
        helm,
        "--set", "metrics.prometheusRule.enabled=true",
        "--set-string", 'metrics.prometheusRule.selector=job="dynquota"',
        "--set", "metrics.prometheusRule.runbookBaseURL=https://wiki.example.com/dynquota",
    )  # fmt: skip
    alerts = {r["alert"]: r for r in one(objs, "PrometheusRule")["spec"]["groups"][0]["rules"]}
    assert alerts["DynquotaAbsent"]["expr"] == 'absent(up{job="dynquota"} == 1)'
    assert alerts["DynquotaUsageDrift"]["expr"] == (
        'max by (namespace, resource) (abs(dynquota_drift{job="dynquota"})) > 0'
    )
    assert alerts["DynquotaAbsent"]["annotations"]["runbook_url"] == (
        "https://wiki.example.com/dynquota#the-operator-is-down"
    )
    for alert in alerts.values():
        assert "service=" not in alert["expr"]
    # A selector on `namespace` would miss every per-namespace series: refused by the schema.
    done = run_helm(
        helm, "template", RELEASE, str(CHART),
        "--set-string", 'metrics.prometheusRule.selector=namespace="dynquota-system"',
    )  # fmt: skip
    assert done.returncode == 1
    assert "- at '/metrics/prometheusRule/selector': " in done.stderr, done.stderr


def test_governance_labels_policy_render(helm: Path) -> None:
    """Issue 23: the Namespace guard maps each guarded key to one right; the guarded keys come
    from governanceLabels (prefixes, exact keys); policies may select only on them."""
    objs = render(helm)
    vap = one(objs, "ValidatingAdmissionPolicy", "dq-dynquota-governance-labels")
    assert vap["spec"]["failurePolicy"] == "Fail"
    assert vap["spec"]["matchConstraints"]["resourceRules"] == [
        {
            "apiGroups": [""],
            "apiVersions": ["v1"],
            # label changes through these subresources are kept by the apiserver
            "resources": ["namespaces", "namespaces/status", "namespaces/finalize"],
            "operations": ["CREATE", "UPDATE"],
        }
    ]
    variables = {v["name"]: v["expression"] for v in vap["spec"]["variables"]}
    assert variables["changed"] == (
        'variables.new.filter(k, (k.startsWith("dynquota.io/"))\n'
        "  && variables.old[?k].orValue('!absent') != variables.new[k])\n"
        '+ variables.old.filter(k, (k.startsWith("dynquota.io/")) && !(k in variables.new))'
    )
    budget, policies = vap["spec"]["validations"]
    assert budget["expression"] == (
        "!variables.budgetChanged "
        "|| authorizer.group('dynquota.io').resource('quotabudgets').check('update').allowed()"
    )
    assert policies["expression"] == (
        "size(variables.policyKeys) == 0 || authorizer.group('dynquota.io')"
        ".resource('dynamicquotapolicies').check('update').allowed()"
    )
    assert "dq-dynquota-tenant-budget" not in " ".join(kinds(objs))
    selectors = one(objs, "ValidatingAdmissionPolicy", "dq-dynquota-policy-selectors")
    assert selectors["spec"]["matchConstraints"]["resourceRules"] == [
        {
            "apiGroups": ["dynquota.io"],
            "apiVersions": ["*"],
            "resources": ["dynamicquotapolicies"],
            "operations": ["CREATE", "UPDATE"],
        }
    ]
    # Extra keys (the migration of a `team` selector) and the tenant label's mutation.
    more = render(helm, "--set", "governanceLabels.guardedKeys={team}",
                  "--set", "governanceLabels.tenantLabel=capsule.clastix.io/tenant")  # fmt: skip
    vap = one(more, "ValidatingAdmissionPolicy", "dq-dynquota-governance-labels")
    variables = {v["name"]: v["expression"] for v in vap["spec"]["variables"]}
    assert '(k.startsWith("dynquota.io/") || k in ["team"])' in variables["changed"]
    assert variables["tenantBudget"] == (
        "request.operation == 'CREATE' "
        "&& variables.new[?\"capsule.clastix.io/tenant\"].orValue('!absent')\n"
        "  == variables.new[?'dynquota.io/budget'].orValue('!none')"
    )
    mutating = one(more, "MutatingAdmissionPolicy", "dq-dynquota-tenant-budget")
    assert mutating["spec"]["failurePolicy"] == "Ignore"
    assert mutating["spec"]["matchConstraints"]["resourceRules"][0]["operations"] == ["CREATE"]
    one(more, "MutatingAdmissionPolicyBinding", "dq-dynquota-tenant-budget")
    # Off, or observing only: no objects, or the binding's actions.
    off = render(helm, "--set", "governanceLabels.admissionPolicy.enabled=false")
    assert [k for k in kinds(off) if "governance" in k or "selectors" in k] == []
    warn = render(helm, "--set", "governanceLabels.admissionPolicy.validationActions={Warn,Audit}")
    binding = one(warn, "ValidatingAdmissionPolicyBinding", "dq-dynquota-governance-labels")
    assert binding["spec"]["validationActions"] == ["Warn", "Audit"]


def test_budget_guard_render(helm: Path) -> None:
    """The budget guard (issue #22): one policy and binding, failing open, CREATE of the
    kinds in budgetGuard.kinds grouped by API group, the operator told the same list."""
    objs = render(helm)
    policy = one(objs, "ValidatingAdmissionPolicy", "dq-dynquota-budget-guard")["spec"]
    assert policy["failurePolicy"] == "Ignore"
    assert policy["paramKind"] == {"apiVersion": "v1", "kind": "ResourceQuota"}
    assert policy["matchConstraints"]["resourceRules"] == [
        {
            "apiGroups": [""],
            "apiVersions": ["*"],
            "resources": [
                "configmaps", "persistentvolumeclaims", "pods", "replicationcontrollers",
                "secrets", "services",
            ],
            "operations": ["CREATE"],
        },
        {
            "apiGroups": ["resource.k8s.io"],
            "apiVersions": ["*"],
            "resources": ["resourceclaims"],
            "operations": ["CREATE"],
        },
        {
            "apiGroups": [""],
            "apiVersions": ["*"],
            "resources": ["persistentvolumeclaims", "pods/resize", "services"],
            "operations": ["UPDATE"],
        },
    ]  # fmt: skip
    # only the updates that charge quota reach the validations
    (condition,) = policy["matchConditions"]
    assert condition["name"] == "create-or-charging-update"
    assert condition["expression"].startswith("request.operation == 'CREATE' || (")
    binding = one(objs, "ValidatingAdmissionPolicyBinding", "dq-dynquota-budget-guard")["spec"]
    assert binding["paramRef"] == {"name": "dynquota", "parameterNotFoundAction": "Allow"}
    assert binding["validationActions"] == ["Deny"]
    assert binding["matchResources"]["namespaceSelector"]["matchExpressions"] == [
        {"key": "dynquota.io/budget", "operator": "Exists"},
        {
            "key": "kubernetes.io/metadata.name",
            "operator": "NotIn",
            "values": ["kube-system", "kube-public", "kube-node-lease", NS],
        },
    ]
    env = {
        e["name"]: e.get("value")
        for e in one(objs, "Deployment")["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    assert env["DYNQUOTA_BUDGET_GUARD_KINDS"] == (
        "pods,configmaps,secrets,services,persistentvolumeclaims,replicationcontrollers,"
        "resourceclaims.resource.k8s.io"
    )
    extra = render(helm, "--set", "budgetGuard.kinds={pods,deployments.apps}")
    rules = one(extra, "ValidatingAdmissionPolicy", "dq-dynquota-budget-guard")["spec"][
        "matchConstraints"
    ]["resourceRules"]
    assert [(r["apiGroups"], r["resources"], r["operations"]) for r in rules] == [
        ([""], ["pods"], ["CREATE"]),
        (["apps"], ["deployments"], ["CREATE"]),
        ([""], ["pods/resize"], ["UPDATE"]),
    ]
    off = render(helm, "--set", "budgetGuard.enabled=false")
    assert "ValidatingAdmissionPolicy/dq-dynquota-budget-guard" not in kinds(off)
    env = {
        e["name"]: e.get("value")
        for e in one(off, "Deployment")["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    assert env["DYNQUOTA_BUDGET_GUARD_KINDS"] == ""
    assert env["DYNQUOTA_BUDGET_GUARD_NAME"] == ""
    role = one(off, "ClusterRole", "dq-dynquota")
    assert [r for r in role["rules"] if "admissionregistration.k8s.io" in r["apiGroups"]] == []


def test_default_policy_on_an_unguarded_key_is_refused(helm: Path) -> None:
    """The chart's own policy selecting on a key that is not guarded fails the render, with
    the way out; guarding the key (the migration) renders."""
    done = run_helm(helm, "template", "dq", str(CHART), "--namespace", NS,
                    "--set", "defaultPolicy.namespaceSelector.matchLabels.team=a")  # fmt: skip
    assert done.returncode == 1
    assert (
        "governanceLabels: DynamicQuotaPolicies (live, or the chart's defaultPolicy) select on "
        "label keys that are not guarded: team (policy default). Whoever may patch a Namespace "
        "could change which policy governs it. Add the keys to governanceLabels.guardedKeys"
    ) in done.stderr, done.stderr
    render(helm, "--set", "defaultPolicy.namespaceSelector.matchLabels.team=a",
           "--set", "governanceLabels.guardedKeys={team}")  # fmt: skip
    render(helm, "--set", "defaultPolicy.namespaceSelector.matchLabels.dynquota\\.io/tier=a")


def test_operator_writes_policy_render(helm: Path) -> None:
    """Issue 23: the operator-confinement policy matches only the operator's requests, fails
    closed (only the operator can meet it), always denies, and lists every namespace the
    operator never writes in: system, release and operator.excludeNamespaces."""
    objs = render(helm, "--set", "operator.excludeNamespaces={legacy,kube-system}")
    vap = one(objs, "ValidatingAdmissionPolicy", "dq-dynquota-operator-writes")
    assert vap["spec"]["failurePolicy"] == "Fail"
    assert vap["spec"]["matchConditions"] == [
        {
            "name": "operator-only",
            "expression": f'request.userInfo.username == "system:serviceaccount:{NS}:dq-dynquota"',
        }
    ]
    assert vap["spec"]["matchConstraints"]["resourceRules"] == [
        {
            "apiGroups": [""],
            "apiVersions": ["v1"],
            "resources": ["resourcequotas", "limitranges", "events"],
            "operations": ["CREATE", "UPDATE", "DELETE"],
        },
        {
            "apiGroups": ["apps"],
            "apiVersions": ["*"],
            "resources": ["replicasets", "statefulsets", "daemonsets"],
            "operations": ["CREATE", "UPDATE", "DELETE"],
        },
        {
            "apiGroups": ["batch"],
            "apiVersions": ["*"],
            "resources": ["jobs"],
            "operations": ["CREATE", "UPDATE", "DELETE"],
        },
        {
            "apiGroups": ["dynquota.io"],
            "apiVersions": ["*"],
            "resources": ["applieddynamicquotas"],
            "operations": ["CREATE", "UPDATE", "DELETE"],
        },
    ]
    variables = {v["name"]: v["expression"] for v in vap["spec"]["variables"]}
    assert json.loads(variables["forbidden"]) == [
        "kube-system", "kube-public", "kube-node-lease", NS, "legacy"
    ]  # fmt: skip
    assert json.loads(variables["included"]) == []
    assert len(vap["spec"]["validations"]) == 8  # the eighth: AppliedDynamicQuota (issue 28)
    binding = one(objs, "ValidatingAdmissionPolicyBinding", "dq-dynquota-operator-writes")
    assert binding["spec"] == {
        "policyName": "dq-dynquota-operator-writes",
        "validationActions": ["Deny"],
    }
    include = render(helm, "--set", "operator.includeNamespaces={a,b}")
    vap = one(include, "ValidatingAdmissionPolicy", "dq-dynquota-operator-writes")
    variables = {v["name"]: v["expression"] for v in vap["spec"]["variables"]}
    assert json.loads(variables["included"]) == ["a", "b"]
    off = render(helm, "--set", "operatorPolicy.enabled=false")
    assert [k for k in kinds(off) if "operator-writes" in k] == []


def test_lease_fence_rendered_with_leader_election_only(helm: Path) -> None:
    objs = render(helm)
    policy = one(objs, "ValidatingAdmissionPolicy", "dq-dynquota-lease-fence")
    spec = policy["spec"]
    assert spec["paramKind"] == {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease"}
    assert spec["failurePolicy"] == "Ignore"  # never refuses anyone when it cannot judge
    assert spec["matchConstraints"]["objectSelector"] == {
        "matchLabels": {"app.kubernetes.io/managed-by": "dynquota"}
    }
    excluded = [r["resources"] for r in spec["matchConstraints"]["excludeResourceRules"]]
    assert excluded == [["leases"], ["resourcequotas/status"]]
    assert spec["matchConditions"][0]["expression"] == (
        f'request.userInfo.username == "system:serviceaccount:{NS}:dq-dynquota"'
    )
    binding = one(objs, "ValidatingAdmissionPolicyBinding", "dq-dynquota-lease-fence")
    assert binding["spec"]["paramRef"] == {
        "name": "dynquota",
        "namespace": NS,
        "parameterNotFoundAction": "Allow",  # no Lease, no holder: never fail closed
    }
    assert binding["spec"]["validationActions"] == ["Deny"]
    off = render(helm, "--set", "leaderElection.enabled=false")
    assert [o for o in off if "lease-fence" in o["metadata"]["name"]] == []


def test_v0_2_opt_out_values_are_accepted_and_change_nothing(helm: Path) -> None:
    """v0.2's `optOut.admissionPolicy.*` in a values file (or carried by --reuse-values)
    renders exactly what the chart renders without them: governanceLabels guards the label."""
    plain = render(helm)
    old = render(
        helm,
        "--set", "optOut.admissionPolicy.enabled=false",
        "--set-json", 'optOut.admissionPolicy.validationActions=["Warn","Audit"]',
    )  # fmt: skip
    assert old == plain
    assert one(plain, "ValidatingAdmissionPolicyBinding", "dq-dynquota-governance-labels")["spec"][
        "validationActions"
    ] == ["Deny"]


def test_write_rate_tarpit_render(helm: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 32: off by default (no APF object, no verb on FlowSchemas); on, the level lends and
    borrows nothing, the tarpit has no rules at rest, the bypass sits one precedence earlier,
    the operator may get and patch that one FlowSchema, and its policy judges FlowSchemas."""
    default = render(helm)
    assert [o for o in default if o["apiVersion"].startswith("flowcontrol.")] == []
    role = one(default, "ClusterRole", "dq-dynquota")
    assert all("flowschemas" not in r["resources"] for r in role["rules"])

    objs = render(helm, "--values", str(CHART / "ci" / "write-rate-values.yaml"))
    limited = one(objs, "PriorityLevelConfiguration", "dq-dynquota-tarpit")["spec"]["limited"]
    assert limited == {
        "nominalConcurrencyShares": 2,
        "lendablePercent": 0,
        "borrowingLimitPercent": 0,
        "limitResponse": {
            "type": "Queue",
            "queuing": {"queues": 1, "handSize": 1, "queueLengthLimit": 5},
        },
    }
    tarpit = one(objs, "FlowSchema", "dq-dynquota-tarpit")["spec"]
    assert "rules" not in tarpit
    assert (tarpit["matchingPrecedence"], tarpit["distinguisherMethod"]) == (
        1000,
        {"type": "ByNamespace"},
    )
    bypass = one(objs, "FlowSchema", "dq-dynquota-tarpit-bypass")["spec"]
    assert (bypass["matchingPrecedence"], bypass["priorityLevelConfiguration"]) == (
        999,
        {"name": "workload-low"},
    )
    (rule,) = bypass["rules"]
    assert rule["subjects"] == [
        {"kind": "ServiceAccount", "serviceAccount": {"name": "dq-dynquota", "namespace": NS}}
    ]
    assert rule["resourceRules"][0]["resources"] == ["pods", "configmaps", "secrets"]
    admins = one(objs, "FlowSchema", "dq-dynquota-tarpit-bypass-admins")["spec"]
    assert admins["priorityLevelConfiguration"] == {"name": "global-default"}
    assert admins["rules"][0]["subjects"] == [
        {"kind": "Group", "group": {"name": "platform-admins"}}
    ]
    role = one(objs, "ClusterRole", "dq-dynquota")
    flow_rules = [r for r in role["rules"] if "flowschemas" in r["resources"]]
    assert flow_rules == [
        {
            "apiGroups": ["flowcontrol.apiserver.k8s.io"],
            "resources": ["flowschemas"],
            "resourceNames": ["dq-dynquota-tarpit"],
            "verbs": ["get", "patch"],
        }
    ]
    policy = one(objs, "ValidatingAdmissionPolicy", "dq-dynquota-operator-writes")["spec"]
    assert {
        "apiGroups": ["flowcontrol.apiserver.k8s.io"],
        "apiVersions": ["*"],
        "resources": ["flowschemas"],
        "operations": ["CREATE", "UPDATE", "DELETE"],
    } in policy["matchConstraints"]["resourceRules"]
    (tarpit_rule,) = [v for v in policy["validations"] if "flowschemas" in v["expression"]]
    assert '["pods","configmaps","secrets"]' in tarpit_rule["expression"]
    # the governor: the FlowSchema's name and the resources, in the order the policy compares
    settings = settings_from(one(objs, "Deployment"), monkeypatch)
    assert settings.tarpit_flow_schema == "dq-dynquota-tarpit"
    assert settings.tarpit_resources == ["pods", "configmaps", "secrets"]
    assert settings_from(one(default, "Deployment"), monkeypatch).tarpit_flow_schema == ""


@pytest.mark.parametrize(
    "group",
    [
        "system:authenticated",
        "system:unauthenticated",
        "system:serviceaccounts",
        "system:serviceaccounts:team-a",
    ],
)
def test_a_bypass_group_that_holds_tenants_is_refused(helm: Path, group: str) -> None:
    """MED-4: such a group sent every tenant's writes to the bypass schema: the tarpit held
    nothing while the Events, the metric and the tenant's status said it did."""
    done = run_helm(
        helm, "template", RELEASE, str(CHART),
        "--set", "writeRate.enabled=true", "--set", f"writeRate.bypassGroups={{{group}}}",
    )  # fmt: skip
    assert done.returncode == 1
    assert (
        f'writeRate.bypassGroups: "{group}" holds tenants (every authenticated or anonymous '
        "user, or every ServiceAccount of the cluster or of a namespace): their writes would "
        "bypass the tarpit"
    ) in done.stderr, done.stderr
    admins = render(helm, "--set", "writeRate.enabled=true",
                    "--set", "writeRate.bypassGroups={platform-admins}")  # fmt: skip
    assert one(admins, "FlowSchema", f"{RELEASE}-dynquota-tarpit-bypass-admins")
