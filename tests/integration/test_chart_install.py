"""`helm install` of the chart into the real local control plane: the objects, the operator's
least privilege (`kubectl auth can-i`), the tenant override permission (aggregated role +
ValidatingAdmissionPolicy, exercised as a namespace admin), an upgrade to two replicas, and
`helm uninstall` with its pre-delete cleanup hook.

There is no kubelet here: the operator's pods are admitted (under the `restricted` Pod Security
Standard) but never run, and the hook Job gets no pod. The hook is proven by running the Job's
own command and environment locally with a token of the hook's ServiceAccount, then reporting
the Job complete the way the job controller would, so `helm uninstall` proceeds.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kubernetes
import pytest
import yaml
from kubernetes.client.exceptions import ApiException

from dynquota.testing.controlplane import LocalControlPlane
from dynquota.testing.wait import WaitTimeoutError, wait_until

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "dynquota"
MANAGED = {"app.kubernetes.io/managed-by": "dynquota"}
PAUSE = "registry.k8s.io/pause:3.10"


@dataclass
class Release:
    name: str
    namespace: str
    fullname: str
    policy: str
    env: dict[str, str]
    cp: LocalControlPlane

    @property
    def operator(self) -> str:
        return f"system:serviceaccount:{self.namespace}:{self.fullname}"

    @property
    def cleanup(self) -> str:
        return f"system:serviceaccount:{self.namespace}:{self.fullname}-cleanup"

    def helm(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        assert self.cp.bin_dir is not None
        done = subprocess.run(
            [str(self.cp.bin_dir / "helm"), "--kubeconfig", self.cp.kubeconfig, *args],
            capture_output=True,
            text=True,
            env=self.env,
            check=False,
        )
        if check:
            assert done.returncode == 0, done.stdout + done.stderr
        return done


HOLDER = "dqtest-holder"
"""The holder of the release's Lease (the ``release`` fixture creates it): the chart's Lease
fence admits the operator's writes only from that pod."""


def as_args(user: str) -> list[str]:
    """``--as=user``; for an operator's ServiceAccount (``...-dynquota``) also the pod-name
    extra of the Lease's holder, as the holder's projected token carries it."""
    args = [f"--as={user}"]
    if user.startswith("system:serviceaccount:") and user.endswith("-dynquota"):
        args.append(f"--as-user-extra=authentication.kubernetes.io/pod-name={HOLDER}")
    return args


def can_i(cp: LocalControlPlane, user: str, *args: str) -> bool:
    """`kubectl auth can-i ... --as=user`: True for yes, False for no."""
    assert cp.bin_dir is not None
    done = subprocess.run(
        [str(cp.bin_dir / "kubectl"), f"--kubeconfig={cp.kubeconfig}", "auth", "can-i",
         *args, f"--as={user}"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    answer = done.stdout.strip()
    assert (done.returncode, answer) in ((0, "yes"), (1, "no")), done.stdout + done.stderr
    return answer == "yes"


@pytest.fixture(scope="module")
def release(
    controlplane: LocalControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Release]:
    """The chart installed with default values (its policy narrowed to this test's namespaces)
    into a fresh namespace that enforces the `restricted` Pod Security Standard."""
    tag = uuid.uuid4().hex[:6]
    name, namespace = f"dqt{tag}", f"dq-chart-{tag}"
    home = tmp_path_factory.mktemp("helm-home")
    env = {
        **os.environ,
        "HELM_CONFIG_HOME": str(home / "config"),
        "HELM_CACHE_HOME": str(home / "cache"),
        "HELM_DATA_HOME": str(home / "data"),
    }
    rel = Release(name, namespace, f"{name}-dynquota", f"{name}-default", env, controlplane)
    controlplane.kubectl("create", "namespace", namespace)
    controlplane.kubectl(
        "label", "namespace", namespace, "pod-security.kubernetes.io/enforce=restricted"
    )
    rel.helm(
        "install", name, str(CHART), "--namespace", namespace,
        "--set", f"defaultPolicy.name={rel.policy}",
        "--set-string", f"defaultPolicy.namespaceSelector.matchLabels.dqtest={tag}",
        # the policy selects on `dqtest`: guarded like a `team` label after the migration
        "--set", "governanceLabels.guardedKeys={dqtest}",
    )  # fmt: skip
    # the Lease the chart's fence takes as its parameter, held by HOLDER (as_args)
    controlplane.kubectl(
        "create", "-f", "-",
        input=json.dumps({
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": "dynquota", "namespace": namespace},
            "spec": {"holderIdentity": HOLDER, "leaseDurationSeconds": 15},
        }),
    )  # fmt: skip
    try:
        yield rel
    finally:
        if rel.helm("status", name, "-n", namespace, check=False).returncode == 0:
            rel.helm("uninstall", name, "-n", namespace, "--no-hooks", "--wait")
        controlplane.kubectl("delete", "namespace", namespace, "--wait=false")


@pytest.fixture
def core(api_client: kubernetes.client.ApiClient) -> kubernetes.client.CoreV1Api:
    return kubernetes.client.CoreV1Api(api_client)


def managed_quota(hard: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {
            "name": "dynquota",
            "labels": dict(MANAGED),
            "annotations": {"dynquota.io/last-upscale.pods": "2026-01-01T00:00:00Z"},
        },
        "spec": {"hard": hard},
    }


def create_as(cp: LocalControlPlane, user: str, namespace: str, obj: dict[str, Any]) -> None:
    cp.kubectl("create", "-n", namespace, *as_args(user), "-f", "-", input=json.dumps(obj))


# -- install ----------------------------------------------------------------------------------


def test_install_creates_every_object(release: Release, api_client: Any) -> None:
    status = json.loads(
        release.helm("status", release.name, "-n", release.namespace, "-o", "json").stdout
    )
    assert status["info"]["status"] == "deployed"
    cp, ns, full = release.cp, release.namespace, release.fullname
    names = cp.kubectl(
        "get", "deployment,service,serviceaccount,role,rolebinding", "-n", ns, "-o", "name"
    ).split()  # fmt: skip
    # Leader election is on by default (one replica too): the Lease Role comes with it.
    assert sorted(n for n in names if full in n) == [
        f"deployment.apps/{full}",
        f"role.rbac.authorization.k8s.io/{full}-leader-election",
        f"rolebinding.rbac.authorization.k8s.io/{full}-leader-election",
        f"service/{full}-metrics",
        f"serviceaccount/{full}",
    ]
    cluster = cp.kubectl(
        "get", "clusterrole,clusterrolebinding,validatingadmissionpolicy,"
        "validatingadmissionpolicybinding,dynamicquotapolicy", "-o", "name",
    ).split()  # fmt: skip
    assert sorted(n for n in cluster if release.name in n) == [
        f"clusterrole.rbac.authorization.k8s.io/{full}",
        f"clusterrole.rbac.authorization.k8s.io/{full}-tenant-override",
        f"clusterrole.rbac.authorization.k8s.io/{full}-tenant-view",
        f"clusterrolebinding.rbac.authorization.k8s.io/{full}",
        f"dynamicquotapolicy.dynquota.io/{release.policy}",
        f"validatingadmissionpolicy.admissionregistration.k8s.io/{full}-budget-guard",
        f"validatingadmissionpolicy.admissionregistration.k8s.io/{full}-governance-labels",
        f"validatingadmissionpolicy.admissionregistration.k8s.io/{full}-lease-fence",
        f"validatingadmissionpolicy.admissionregistration.k8s.io/{full}-lease-fence-wake",
        f"validatingadmissionpolicy.admissionregistration.k8s.io/{full}-managed-quota",
        f"validatingadmissionpolicy.admissionregistration.k8s.io/{full}-operator-writes",
        f"validatingadmissionpolicy.admissionregistration.k8s.io/{full}-policy-selectors",
        f"validatingadmissionpolicy.admissionregistration.k8s.io/{full}-unmanaged-quota",
        f"validatingadmissionpolicybinding.admissionregistration.k8s.io/{full}-budget-guard",
        f"validatingadmissionpolicybinding.admissionregistration.k8s.io/{full}-governance-labels",
        f"validatingadmissionpolicybinding.admissionregistration.k8s.io/{full}-lease-fence",
        f"validatingadmissionpolicybinding.admissionregistration.k8s.io/{full}-lease-fence-wake",
        f"validatingadmissionpolicybinding.admissionregistration.k8s.io/{full}-managed-quota",
        f"validatingadmissionpolicybinding.admissionregistration.k8s.io/{full}-operator-writes",
        f"validatingadmissionpolicybinding.admissionregistration.k8s.io/{full}-policy-selectors",
        f"validatingadmissionpolicybinding.admissionregistration.k8s.io/{full}-unmanaged-quota",
    ]
    # The CRD came from the chart's crds/ (or already existed: Helm then leaves it alone).
    cp.kubectl("wait", "--for=condition=Established", "crd/dynamicquotapolicies.dynquota.io")
    cp.kubectl("wait", "--for=condition=Established", "crd/quotabudgets.dynquota.io")
    vap = json.loads(
        cp.kubectl("get", "validatingadmissionpolicy", f"{full}-managed-quota", "-o", "json")
    )
    assert vap["spec"]["failurePolicy"] == "Fail"
    # Audit first: the default policy is in dry run, and the notes say how to read the plan and
    # the one value that enforces.
    policy = json.loads(cp.kubectl("get", "dqp", release.policy, "-o", "json"))
    assert policy["spec"]["dryRun"] is True
    notes = release.helm("get", "notes", release.name, "-n", ns).stdout
    assert "AUDIT ONLY: the default policy is in dry run." in notes
    assert "1 replica(s) with leader election (Lease dynquota)." in notes
    assert "     dynquota plan " in notes
    assert (
        f"     helm upgrade {release.name} <chart> -n {ns} --reuse-values "
        "--set defaultPolicy.dryRun=false\n"
    ) in notes
    # the uninstall hook's bound (210 + 10000 namespaces / 20 per second), for helm's --timeout
    assert (
        "(pre-delete hook, at most\n710 s for 10000 namespaces): give Helm that long, "
        "`helm uninstall ... --timeout 710s`."
    ) in notes


def test_operator_pod_is_admitted_under_restricted_pod_security(
    release: Release, core: kubernetes.client.CoreV1Api
) -> None:
    """The ReplicaSet controller's pod passes Pod Security admission (`restricted`)."""
    selector = "app.kubernetes.io/component=operator,app.kubernetes.io/instance=" + release.name
    pods = wait_until(
        lambda: core.list_namespaced_pod(release.namespace, label_selector=selector).items,
        "the operator pod",
    )
    assert len(pods) == 1
    assert pods[0].spec.service_account_name == release.fullname
    assert pods[0].status.phase == "Pending"  # no kubelet, no scheduler


# -- the operator's least privilege -------------------------------------------------------

OPERATOR_ALLOWED = [
    ("list", "pods", "-A"),
    ("watch", "pods", "-A"),
    ("list", "configmaps", "-A"),
    ("watch", "configmaps", "-A"),
    ("get", "resourcequotas", "-n", "any-ns"),
    ("list", "resourcequotas", "-A"),
    ("watch", "resourcequotas", "-A"),
    ("create", "resourcequotas", "-n", "any-ns"),
    ("patch", "resourcequotas/dynquota", "-n", "any-ns"),
    ("delete", "resourcequotas/dynquota", "-n", "any-ns"),
    ("get", "namespaces/kube-system"),
    ("list", "namespaces"),
    ("watch", "namespaces"),
    ("create", "events", "-n", "any-ns"),
    ("list", "dynamicquotapolicies.dynquota.io"),
    ("watch", "dynamicquotapolicies.dynquota.io"),
    ("patch", "dynamicquotapolicies.dynquota.io", "--subresource=status"),
    ("list", "quotabudgets.dynquota.io"),
    ("watch", "quotabudgets.dynquota.io"),
    ("patch", "quotabudgets.dynquota.io", "--subresource=status"),
    ("list", "customresourcedefinitions.apiextensions.k8s.io"),
    ("watch", "customresourcedefinitions.apiextensions.k8s.io"),
    ("list", "limitranges", "-n", "any-ns"),
    ("create", "limitranges", "-n", "any-ns"),
    ("patch", "limitranges/dynquota", "-n", "any-ns"),
    ("watch", "limitranges/dynquota", "-n", "any-ns"),
]

OPERATOR_DENIED = [
    ("get", "pods", "-n", "any-ns"),
    ("create", "pods", "-n", "any-ns"),
    ("update", "pods", "-n", "any-ns"),
    ("patch", "pods", "-n", "any-ns"),
    ("delete", "pods", "-n", "any-ns"),
    ("create", "pods/eviction", "-n", "any-ns"),
    ("create", "pods/exec", "-n", "any-ns"),
    ("get", "secrets", "-n", "any-ns"),
    ("list", "secrets", "-A"),
    ("watch", "secrets", "-A"),
    ("get", "configmaps", "-n", "any-ns"),
    ("create", "configmaps", "-n", "any-ns"),
    ("patch", "configmaps", "-n", "any-ns"),
    ("delete", "configmaps", "-n", "any-ns"),
    ("patch", "namespaces/kube-system"),
    ("update", "namespaces", "-n", "any-ns"),
    ("delete", "namespaces/any-ns"),
    ("patch", "resourcequotas/team-quota", "-n", "any-ns"),
    ("delete", "resourcequotas/team-quota", "-n", "any-ns"),
    ("update", "resourcequotas/dynquota", "-n", "any-ns"),
    ("patch", "resourcequotas/dynquota", "--subresource=status", "-n", "any-ns"),
    ("deletecollection", "resourcequotas", "-n", "any-ns"),
    ("patch", "limitranges/team-defaults", "-n", "any-ns"),
    ("update", "limitranges/dynquota", "-n", "any-ns"),
    ("delete", "limitranges/dynquota", "-n", "any-ns"),
    ("get", "limitranges/dynquota", "-n", "any-ns"),
    ("watch", "limitranges/team-defaults", "-n", "any-ns"),
    ("update", "dynamicquotapolicies.dynquota.io"),
    ("delete", "dynamicquotapolicies.dynquota.io"),
    # issue #23: verbs it never used
    ("patch", "events", "-n", "kube-system"),
    ("get", "dynamicquotapolicies.dynquota.io"),
    ("get", "quotabudgets.dynquota.io"),
    ("create", "quotabudgets.dynquota.io"),
    ("update", "quotabudgets.dynquota.io"),
    ("patch", "quotabudgets.dynquota.io"),
    ("delete", "quotabudgets.dynquota.io"),
    ("create", "leases.coordination.k8s.io", "-n", "any-ns"),
    ("create", "customresourcedefinitions.apiextensions.k8s.io"),
    ("create", "serviceaccounts/token", "-n", "any-ns"),
    ("create", "clusterrolebindings"),
    ("bind", "clusterroles"),
    ("escalate", "clusterroles"),
    ("impersonate", "users"),
    # issue #22: no write on admission policies or bindings (the budget guard is the chart's);
    # issue 30: get of the guard's two objects by name only
    ("list", "validatingadmissionpolicybindings.admissionregistration.k8s.io"),
    ("get", "validatingadmissionpolicies.admissionregistration.k8s.io/any-name"),
    ("create", "validatingadmissionpolicies.admissionregistration.k8s.io"),
    ("create", "validatingadmissionpolicybindings.admissionregistration.k8s.io"),
    ("patch", "validatingadmissionpolicybindings.admissionregistration.k8s.io/any-name"),
    ("delete", "validatingadmissionpolicybindings.admissionregistration.k8s.io/any-name"),
    ("update", "validatingadmissionpolicies.admissionregistration.k8s.io"),
    ("patch", "validatingadmissionpolicies.admissionregistration.k8s.io", "--subresource=status"),
    ("*", "*"),
    ("get", "nodes"),
]


@pytest.mark.parametrize("check", OPERATOR_ALLOWED, ids=" ".join)
def test_operator_is_allowed(release: Release, check: tuple[str, ...]) -> None:
    assert can_i(release.cp, release.operator, *check) is True


def test_operator_reads_the_budget_guard_by_name_only(release: Release) -> None:
    """Issue 30 (LOW-6): the budgets' Guarded=True needs the guard's two objects read; the
    token may get exactly those, no other policy nor binding, and write none."""
    guard = f"{release.fullname}-budget-guard"
    for resource in ("validatingadmissionpolicies", "validatingadmissionpolicybindings"):
        kind = f"{resource}.admissionregistration.k8s.io"
        assert can_i(release.cp, release.operator, "get", f"{kind}/{guard}") is True
        assert (
            can_i(release.cp, release.operator, "get", f"{kind}/{release.fullname}-lease-fence")
            is False
        )
        for verb in ("update", "patch", "delete"):
            assert can_i(release.cp, release.operator, verb, f"{kind}/{guard}") is False


@pytest.mark.parametrize("check", OPERATOR_DENIED, ids=" ".join)
def test_operator_is_denied(release: Release, check: tuple[str, ...]) -> None:
    assert can_i(release.cp, release.operator, *check) is False


def test_leases_only_with_leader_election_and_only_in_own_namespace(release: Release) -> None:
    cp, ns, op, chart = release.cp, release.namespace, release.operator, str(CHART)
    # The default: leader election for the one replica, rights on its own Lease only.
    assert can_i(cp, op, "create", "leases.coordination.k8s.io", "-n", ns) is True
    assert can_i(cp, op, "get", "leases.coordination.k8s.io/dynquota", "-n", ns) is True
    assert can_i(cp, op, "update", "leases.coordination.k8s.io/dynquota", "-n", ns) is True
    assert can_i(cp, op, "update", "leases.coordination.k8s.io/other", "-n", ns) is False
    assert can_i(cp, op, "delete", "leases.coordination.k8s.io/dynquota", "-n", ns) is False
    assert can_i(cp, op, "create", "leases.coordination.k8s.io", "-n", "kube-system") is False
    deployment = json.loads(
        cp.kubectl("get", "deployment", release.fullname, "-n", ns, "-o", "json")
    )
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"]["type"] == "RollingUpdate"
    # More replicas without leader election: refused, the release is left as it was.
    refused = release.helm(
        "upgrade", release.name, chart, "-n", ns, "--reuse-values",
        "--set", "leaderElection.enabled=false", "--set", "replicaCount=2", check=False,
    )  # fmt: skip
    assert refused.returncode == 1
    assert "leaderElection.enabled=false needs replicaCount 1 (got 2)" in refused.stderr
    assert can_i(cp, op, "create", "leases.coordination.k8s.io", "-n", ns) is True
    release.helm(
        "upgrade", release.name, chart, "-n", ns, "--reuse-values",
        "--set", "leaderElection.enabled=false",
    )  # fmt: skip
    try:
        assert can_i(cp, op, "create", "leases.coordination.k8s.io", "-n", ns) is False
        assert can_i(cp, op, "get", "leases.coordination.k8s.io/dynquota", "-n", ns) is False
        deployment = json.loads(
            cp.kubectl("get", "deployment", release.fullname, "-n", ns, "-o", "json")
        )
        assert deployment["spec"]["strategy"] == {"type": "Recreate"}
        wait_until(lambda: rolled_out(cp, release), "the Recreate rollout", interval=0.5)
    finally:
        release.helm(
            "upgrade", release.name, chart, "-n", ns, "--reuse-values",
            "--set", "leaderElection.enabled=true",
        )  # fmt: skip
    assert can_i(cp, op, "create", "leases.coordination.k8s.io", "-n", ns) is True
    # The upgrade that turns leader election on keeps Recreate once (the running operator
    # writes without the Lease, so the new one must not start beside it) ...
    deployment = json.loads(
        cp.kubectl("get", "deployment", release.fullname, "-n", ns, "-o", "json")
    )
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    assert container_env(deployment)["DYNQUOTA_LEADER_ELECTION"] == "true"
    wait_until(lambda: rolled_out(cp, release), "the Recreate rollout", interval=0.5)
    # ... and the next upgrade, the operator now running with the Lease, rolls.
    release.helm("upgrade", release.name, chart, "-n", ns, "--reuse-values")
    deployment = json.loads(
        cp.kubectl("get", "deployment", release.fullname, "-n", ns, "-o", "json")
    )
    assert deployment["spec"]["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
    }


def container_env(deployment: dict[str, Any]) -> dict[str, Any]:
    """The operator container's env of a Deployment (JSON), by name."""
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


def rolled_out(cp: LocalControlPlane, release: Release) -> bool:
    """The operator Deployment's controller saw its last change and one ReplicaSet has the
    one pod: true only for a finished Recreate rollout or no rollout (no kubelet here, so a
    rolling update never finishes)."""
    d = json.loads(
        cp.kubectl("get", "deployment", release.fullname, "-n", release.namespace, "-o", "json")
    )
    status = d.get("status", {})
    active = [n for n in operator_replica_sets(cp, release).values() if n > 0]
    return (
        status.get("observedGeneration") == d["metadata"]["generation"]
        and status.get("updatedReplicas") == 1
        and active == [1]
    )


def test_an_upgrade_never_switches_the_default_policys_enforcement_by_itself(
    release: Release,
) -> None:
    """`defaultPolicy.dryRun` unset: audit on install (checked above), the live value on an
    upgrade that takes the chart's defaults; an explicit value always wins."""
    cp, ns, chart = release.cp, release.namespace, str(CHART)
    tag = release.name.removeprefix("dqt")
    install_args = (
        "--set", f"defaultPolicy.name={release.policy}",
        "--set-string", f"defaultPolicy.namespaceSelector.matchLabels.dqtest={tag}",
        # the policy selects on `dqtest`: guarded like a `team` label after the migration
        "--set", "governanceLabels.guardedKeys={dqtest}",
    )  # fmt: skip

    def live_dry_run() -> object:
        policy = json.loads(cp.kubectl("get", "dynamicquotapolicy", release.policy, "-o", "json"))
        return policy["spec"]["dryRun"]

    try:
        release.helm("upgrade", release.name, chart, "-n", ns, "--reuse-values",
                     "--set", "defaultPolicy.dryRun=false")  # fmt: skip
        assert live_dry_run() is False
        # No --reuse-values, no dryRun: the chart's defaults, as a plain `helm upgrade` sends them.
        release.helm("upgrade", release.name, chart, "-n", ns, *install_args)
        assert live_dry_run() is False
        release.helm("upgrade", release.name, chart, "-n", ns, *install_args,
                     "--set", "defaultPolicy.dryRun=true")  # fmt: skip
        assert live_dry_run() is True
        release.helm("upgrade", release.name, chart, "-n", ns, *install_args)
        assert live_dry_run() is True
    finally:
        release.helm("upgrade", release.name, chart, "-n", ns, *install_args,
                     "--set", "defaultPolicy.dryRun=true")  # fmt: skip


def cleanup_allowed(release: Release) -> list[tuple[str, ...]]:
    """What `dynquota cleanup --yes --scale-down <fullname>` needs, and the hook's RBAC grants."""
    ns, deployment = release.namespace, f"deployments.apps/{release.fullname}"
    return [
        ("list", "resourcequotas", "-A"),
        ("delete", "resourcequotas/dynquota", "-n", "any-ns"),
        ("get", deployment, "-n", ns),
        ("patch", deployment, "-n", ns),
        ("list", "pods", "-n", ns),
    ]


def cleanup_denied(release: Release) -> list[tuple[str, ...]]:
    """Everything else near it stays refused to the hook."""
    ns, deployment = release.namespace, f"deployments.apps/{release.fullname}"
    return [
        ("delete", "resourcequotas/team-quota", "-n", "any-ns"),
        ("patch", "resourcequotas/dynquota", "-n", "any-ns"),
        ("create", "resourcequotas", "-n", "any-ns"),
        ("list", "pods", "-A"),
        ("list", "pods", "-n", "any-ns"),
        ("get", "pods", "-n", ns),
        ("delete", "pods", "-n", ns),
        ("patch", deployment, "-n", "any-ns"),
        ("patch", deployment, "--subresource=scale", "-n", ns),
        ("delete", deployment, "-n", ns),
        ("patch", "deployments.apps/other", "-n", ns),
        ("patch", "replicasets.apps", "-n", ns),
        ("list", "secrets", "-A"),
        ("get", "secrets", "-n", ns),
    ]


def test_cleanup_hook_account_exists_only_during_uninstall(release: Release) -> None:
    """The hook's ServiceAccount and RBAC are pre-delete hooks: absent while installed."""
    out = release.cp.kubectl("get", "serviceaccounts", "-n", release.namespace, "-o", "name")
    assert f"serviceaccount/{release.fullname}-cleanup" not in out.split()
    for check in cleanup_allowed(release):
        assert can_i(release.cp, release.cleanup, *check) is False, check


# -- the tenant override -------------------------------------------------------------------


@pytest.fixture
def tenant_ns(release: Release, namespace: str) -> str:
    """A namespace where `alice` is bound to the built-in `admin` role and the operator (by
    impersonation of its ServiceAccount) has created the managed quota pods=3."""
    cp = release.cp
    cp.kubectl("create", "rolebinding", "alice-admin", "-n", namespace,
               "--clusterrole=admin", "--user=alice")  # fmt: skip
    # The aggregation controller adds the chart's tenant rule to `admin`.
    wait_until(
        lambda: can_i(cp, "alice", "patch", "resourcequotas/dynquota", "-n", namespace),
        "alice may patch resourcequotas/dynquota (aggregated into admin)",
    )
    create_as(cp, release.operator, namespace, managed_quota({"pods": "3", "configmaps": "50"}))
    # The apiserver compiles the admission policies in the background after the install: wait
    # until a spec change is refused. A server-side dry run, so the probe never changes the
    # quota (a landed probe would make every later one a no-op, which the policy admits).
    wait_until(
        lambda: alice(
            cp, "patch", "resourcequota", "dynquota", "-n", namespace, "--type=merge",
            "--dry-run=server", "-p", '{"spec":{"hard":{"pods":"4"}}}',
        ).stderr.count("denied request: dynquota: spec of the managed quota is set") == 1,
        "the managed-quota admission policy in effect",
    )  # fmt: skip
    return namespace


def quota(core: kubernetes.client.CoreV1Api, ns: str) -> Any:
    return core.read_namespaced_resource_quota("dynquota", ns)


def kubectl_as(cp: LocalControlPlane, user: str, *args: str) -> subprocess.CompletedProcess[str]:
    """`kubectl --as=user ...`, not raising on failure."""
    assert cp.bin_dir is not None
    return subprocess.run(
        [str(cp.bin_dir / "kubectl"), f"--kubeconfig={cp.kubeconfig}", *as_args(user), *args],
        capture_output=True, text=True, check=False,
    )  # fmt: skip


def alice(cp: LocalControlPlane, *args: str) -> subprocess.CompletedProcess[str]:
    return kubectl_as(cp, "alice", *args)


POLICY_DENIED = (
    'Error from server (Forbidden): resourcequotas "dynquota" is forbidden: '
    "ValidatingAdmissionPolicy '{full}-managed-quota' with binding '{full}-managed-quota' "
    "denied request: "
)
SPEC_MESSAGE = (
    "dynquota: spec of the managed quota is set by the operator; only the annotation "
    "dynquota.io/override may be changed (dynquota.io/override=max lifts every limit to the "
    "policy maximum)."
)
ANNOTATION_MESSAGE = (
    "dynquota: only the annotation dynquota.io/override of the managed quota may be changed; "
    "the other annotations hold the operator's state."
)
LABEL_MESSAGE = (
    "dynquota: the labels of the managed quota are set by the operator; only the annotation "
    "dynquota.io/override may be changed."
)
DELETE_MESSAGE = (
    "dynquota: the managed quota cannot be deleted. To lift it, annotate it "
    "dynquota.io/override=max; to stop managing this namespace, label the namespace "
    "dynquota.io/managed=false; cluster admins can engage the kill switch, or delete it with a "
    "role of their own granting delete on resourcequotas in the namespace."
)


ADOPT_MESSAGE = (
    "dynquota: an existing ResourceQuota cannot be handed to dynquota by adding the label "
    "app.kubernetes.io/managed-by=dynquota; delete it, and dynquota creates its own managed "
    "quota dynquota in this namespace."
)
UNMANAGED_PATCH_MESSAGE = (
    "dynquota: this ResourceQuota dynquota is not managed by dynquota (it has no label "
    "app.kubernetes.io/managed-by=dynquota); dynquota's tenant role lets you change only the "
    "managed quota. Changing this one needs patch or update on resourcequotas in this "
    "namespace from a role of your own."
)
UNMANAGED_DELETE_MESSAGE = (
    "dynquota: this ResourceQuota dynquota is not managed by dynquota (it has no label "
    "app.kubernetes.io/managed-by=dynquota); dynquota's roles may delete only the managed "
    "quota. Deleting this one needs delete on resourcequotas in this namespace from a role of "
    "your own."
)


def denied(
    release: Release,
    done: subprocess.CompletedProcess[str],
    message: str,
    policy: str = "managed-quota",
) -> None:
    assert done.returncode == 1, done.stdout
    expected = POLICY_DENIED.format(full=release.fullname) + message
    if policy != "managed-quota":
        expected = expected.replace("-managed-quota", f"-{policy}")
    assert done.stderr.strip() == expected


def test_tenant_can_set_and_remove_the_override(
    release: Release, tenant_ns: str, core: kubernetes.client.CoreV1Api
) -> None:
    cp = release.cp
    done = alice(
        cp, "annotate", "resourcequota", "dynquota", "-n", tenant_ns, "dynquota.io/override=max"
    )
    assert done.returncode == 0, done.stderr
    assert quota(core, tenant_ns).metadata.annotations["dynquota.io/override"] == "max"
    # Changing its value is allowed too (the operator rejects anything but `max` with an Event).
    done = alice(cp, "annotate", "--overwrite", "resourcequota", "dynquota", "-n", tenant_ns,
                 "dynquota.io/override=MAX")  # fmt: skip
    assert done.returncode == 0, done.stderr
    done = alice(
        cp, "annotate", "resourcequota", "dynquota", "-n", tenant_ns, "dynquota.io/override-"
    )
    assert done.returncode == 0, done.stderr
    assert quota(core, tenant_ns).metadata.annotations == {
        "dynquota.io/last-upscale.pods": "2026-01-01T00:00:00Z"
    }
    # A JSON merge patch as a client library would send it.
    done = alice(cp, "patch", "resourcequota", "dynquota", "-n", tenant_ns, "--type=merge",
                 "-p", '{"metadata":{"annotations":{"dynquota.io/override":"max"}}}')  # fmt: skip
    assert done.returncode == 0, done.stderr


def test_tenant_cannot_change_spec_state_annotations_or_labels(
    release: Release, tenant_ns: str, core: kubernetes.client.CoreV1Api
) -> None:
    cp = release.cp
    before = quota(core, tenant_ns)
    patch = '{"spec":{"hard":{"pods":"1000"}}}'
    denied(
        release,
        alice(
            cp, "patch", "resourcequota", "dynquota", "-n", tenant_ns, "--type=merge", "-p", patch
        ),
        SPEC_MESSAGE,
    )
    # Adding a new tracked resource or another resource to spec.hard is a spec change too.
    patch = '{"spec":{"hard":{"secrets":"5"}}}'
    denied(
        release,
        alice(
            cp, "patch", "resourcequota", "dynquota", "-n", tenant_ns, "--type=merge", "-p", patch
        ),
        SPEC_MESSAGE,
    )
    # The operator's state annotations: change, add, remove.
    for change in (
        ["--overwrite", "dynquota.io/last-upscale.pods=2030-01-01T00:00:00Z"],
        ["dynquota.io/override-expires-at=2099-01-01T00:00:00Z"],
        ["dynquota.io/last-upscale.pods-"],
    ):
        done = alice(cp, "annotate", "resourcequota", "dynquota", "-n", tenant_ns, *change)
        denied(release, done, ANNOTATION_MESSAGE)
    # Labels: add one, or remove the managed-by label to make the quota look unmanaged.
    denied(
        release,
        alice(cp, "label", "resourcequota", "dynquota", "-n", tenant_ns, "team=x"),
        LABEL_MESSAGE,
    )
    done = alice(
        cp, "label", "resourcequota", "dynquota", "-n", tenant_ns, "app.kubernetes.io/managed-by-"
    )
    denied(release, done, LABEL_MESSAGE)
    after = quota(core, tenant_ns)
    assert after.metadata.resource_version == before.metadata.resource_version
    assert after.spec.hard == {"pods": "3", "configmaps": "50"}


def test_tenant_cannot_delete_the_quota_and_nobody_else_can_either(
    release: Release, tenant_ns: str, core: kubernetes.client.CoreV1Api
) -> None:
    cp = release.cp
    done = alice(cp, "delete", "resourcequota", "dynquota", "-n", tenant_ns)
    assert done.returncode == 1
    assert done.stderr.strip() == (
        'Error from server (Forbidden): resourcequotas "dynquota" is forbidden: User "alice" '
        f'cannot delete resource "resourcequotas" in API group "" in the namespace "{tenant_ns}"'
    )
    # A principal whose RBAC allows the delete by name only (as dynquota's own name-scoped
    # roles) is refused by the policy; a cluster admin (delete on resourcequotas without a
    # name) is not (issue #22: cleanup and the runbook's by-hand path as an admin)
    bob = f"bob-{uuid.uuid4().hex[:4]}"
    rbac = kubernetes.client.RbacAuthorizationV1Api(core.api_client)
    rbac.create_namespaced_role(
        tenant_ns, {"metadata": {"name": bob}, "rules": [
            {"apiGroups": [""], "resources": ["resourcequotas"], "resourceNames": ["dynquota"],
             "verbs": ["delete"]}]},
    )  # fmt: skip
    rbac.create_namespaced_role_binding(
        tenant_ns, {"metadata": {"name": bob},
                    "subjects": [{"kind": "User", "name": bob,
                                  "apiGroup": "rbac.authorization.k8s.io"}],
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                "name": bob}},
    )  # fmt: skip
    wait_until(
        lambda: can_i(cp, bob, "delete", "resourcequotas/dynquota", "-n", tenant_ns),
        "bob's name-scoped Role in effect",
    )
    with pytest.raises(subprocess.CalledProcessError) as refused:
        cp.kubectl("delete", "resourcequota", "dynquota", "-n", tenant_ns, f"--as={bob}")
    assert (
        refused.value.stderr.strip() == POLICY_DENIED.format(full=release.fullname) + DELETE_MESSAGE
    )
    admin = cp.kubectl("delete", "resourcequota", "dynquota", "-n", tenant_ns, "--dry-run=server")
    assert admin.strip() == (
        f'resourcequota "dynquota" deleted from {tenant_ns} namespace (server dry run)'
    )
    with pytest.raises(subprocess.CalledProcessError) as refused:
        cp.kubectl("patch", "resourcequota", "dynquota", "-n", tenant_ns, "--type=merge",
                   "-p", '{"spec":{"hard":{"pods":"7"}}}')  # fmt: skip
    assert refused.value.stderr.strip().endswith(SPEC_MESSAGE)
    assert quota(core, tenant_ns).spec.hard == {"pods": "3", "configmaps": "50"}


def test_the_operator_may_change_and_delete_the_quota(
    release: Release, tenant_ns: str, core: kubernetes.client.CoreV1Api
) -> None:
    cp = release.cp
    cp.kubectl("patch", "resourcequota", "dynquota", "-n", tenant_ns, *as_args(release.operator),
               "--type=merge", "-p",
               '{"spec":{"hard":{"pods":"5"}},"metadata":{"annotations":'
               '{"dynquota.io/last-upscale.pods":"2026-02-02T00:00:00Z"}}}')  # fmt: skip
    got = quota(core, tenant_ns)
    assert got.spec.hard == {"pods": "5", "configmaps": "50"}
    assert got.metadata.annotations["dynquota.io/last-upscale.pods"] == "2026-02-02T00:00:00Z"
    cp.kubectl("delete", "resourcequota", "dynquota", "-n", tenant_ns, *as_args(release.operator))
    with pytest.raises(ApiException) as gone:
        quota(core, tenant_ns)
    assert gone.value.status == 404


def test_rbac_name_scoped_rule_never_answers_a_request_without_a_name(
    release: Release, tenant_ns: str
) -> None:
    """What the unmanaged-quota policy relies on: the tenant's rule with
    `resourceNames: [dynquota]` grants patch on that name only, and RBAC answers a request
    without a name (what the policy's `authorizer` check sends) with no."""
    cp = release.cp
    assert can_i(cp, "alice", "patch", "resourcequotas/dynquota", "-n", tenant_ns) is True
    assert can_i(cp, "alice", "patch", "resourcequotas", "-n", tenant_ns) is False
    assert can_i(cp, "alice", "update", "resourcequotas", "-n", tenant_ns) is False
    assert can_i(cp, release.operator, "delete", "resourcequotas", "-n", tenant_ns) is False
    assert can_i(cp, release.operator, "patch", "resourcequotas", "-n", tenant_ns) is False


@pytest.fixture
def unmanaged_ns(release: Release, namespace: str) -> str:
    """A namespace where `alice` is bound to `admin` and an unlabelled ResourceQuota named
    `dynquota` (pods=3) exists: a quota of the namespace's own, not dynquota's."""
    cp = release.cp
    cp.kubectl("create", "rolebinding", "alice-admin", "-n", namespace,
               "--clusterrole=admin", "--user=alice")  # fmt: skip
    wait_until(
        lambda: can_i(cp, "alice", "patch", "resourcequotas/dynquota", "-n", namespace),
        "alice may patch resourcequotas/dynquota (aggregated into admin)",
    )
    cp.kubectl("create", "quota", "dynquota", "-n", namespace, "--hard=pods=3")
    return namespace


def test_tenant_cannot_change_an_unmanaged_quota_named_dynquota(
    release: Release, unmanaged_ns: str, core: kubernetes.client.CoreV1Api
) -> None:
    """Issue 10, case 9: the tenant role's patch on every quota named `dynquota` does not
    reach an unlabelled one (it was patched from pods=3 to 100k before)."""
    cp, ns = release.cp, unmanaged_ns
    before = quota(core, ns)
    patch = '{"spec":{"hard":{"pods":"100k"}}}'
    done = alice(cp, "patch", "resourcequota", "dynquota", "-n", ns, "--type=merge", "-p", patch)
    denied(release, done, UNMANAGED_PATCH_MESSAGE, policy="unmanaged-quota")
    # Any change at all: an annotation (the override request included) ...
    done = alice(cp, "annotate", "resourcequota", "dynquota", "-n", ns, "dynquota.io/override=max")
    denied(release, done, UNMANAGED_PATCH_MESSAGE, policy="unmanaged-quota")
    # ... an unrelated label ...
    done = alice(cp, "label", "resourcequota", "dynquota", "-n", ns, "team=x")
    denied(release, done, UNMANAGED_PATCH_MESSAGE, policy="unmanaged-quota")
    # ... and adding the managed-by label, which would hand it to the operator (refused by the
    # managed-quota policy, which sees the label on the new object).
    done = alice(
        cp, "label", "resourcequota", "dynquota", "-n", ns, "app.kubernetes.io/managed-by=dynquota"
    )
    denied(release, done, ADOPT_MESSAGE)
    # What a tenant could have changed is as it was. Not the resourceVersion: the quota
    # controller's status write (its recount, at any moment) bumps it.
    after = quota(core, ns)
    assert after.spec == before.spec
    assert after.spec.hard == {"pods": "3"}
    assert after.metadata.labels is None
    assert after.metadata.annotations == before.metadata.annotations
    assert after.metadata.finalizers == before.metadata.finalizers
    assert after.metadata.owner_references == before.metadata.owner_references


def test_dynquota_name_scoped_rights_cannot_change_or_delete_an_unmanaged_quota(
    release: Release, unmanaged_ns: str, core: kubernetes.client.CoreV1Api
) -> None:
    """The operator's own `patch, delete` on quotas named `dynquota` do not reach an
    unlabelled one either (a bug or a race in the operator cannot touch it). Two chart policies
    refuse it: the unmanaged-quota policy and the operator's own confinement (issue 23); the
    apiserver reports the first that denies, in an order of its own, so either exact message."""
    cp, ns, op, full = release.cp, unmanaged_ns, release.operator, release.fullname
    confined = (
        f'Error from server (Forbidden): resourcequotas "dynquota" is forbidden: '
        f"ValidatingAdmissionPolicy '{full}-operator-writes' with binding '{full}-operator-writes' "
        "denied request: dynquota: the operator's ServiceAccount writes only objects labelled "
        "app.kubernetes.io/managed-by=dynquota (it never adopts, unlabels or changes another's)."
    )
    unmanaged = POLICY_DENIED.format(full=full).replace("-managed-quota", "-unmanaged-quota")
    with pytest.raises(subprocess.CalledProcessError) as refused:
        cp.kubectl("patch", "resourcequota", "dynquota", "-n", ns, *as_args(op),
                   "--type=merge", "-p", '{"spec":{"hard":{"pods":"7"}}}')  # fmt: skip
    assert refused.value.stderr.strip() in (unmanaged + UNMANAGED_PATCH_MESSAGE, confined)
    with pytest.raises(subprocess.CalledProcessError) as refused:
        cp.kubectl("delete", "resourcequota", "dynquota", "-n", ns, *as_args(op))
    assert refused.value.stderr.strip() in (unmanaged + UNMANAGED_DELETE_MESSAGE, confined)
    assert quota(core, ns).spec.hard == {"pods": "3"}


def test_admins_and_namespace_wide_quota_editors_still_change_an_unmanaged_quota(
    release: Release, unmanaged_ns: str, core: kubernetes.client.CoreV1Api
) -> None:
    cp, ns = release.cp, unmanaged_ns
    # A cluster admin.
    cp.kubectl("patch", "resourcequota", "dynquota", "-n", ns, "--type=merge",
               "-p", '{"spec":{"hard":{"pods":"5"}}}')  # fmt: skip
    assert quota(core, ns).spec.hard == {"pods": "5"}
    # A user whose own Role grants patch on every quota of the namespace (no resourceNames).
    cp.kubectl("create", "role", "quota-editor", "-n", ns, "--verb=get,patch",
               "--resource=resourcequotas")  # fmt: skip
    cp.kubectl("create", "rolebinding", "bob-quota-editor", "-n", ns, "--role=quota-editor",
               "--user=bob")  # fmt: skip
    wait_until(lambda: can_i(cp, "bob", "patch", "resourcequotas", "-n", ns), "bob may patch")
    done = kubectl_as(cp, "bob", "patch", "resourcequota", "dynquota", "-n", ns,
                      "--type=merge", "-p", '{"spec":{"hard":{"pods":"6"}}}')  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert quota(core, ns).spec.hard == {"pods": "6"}
    # alice gets the same right from the same Role: now she may change it too.
    cp.kubectl("create", "rolebinding", "alice-quota-editor", "-n", ns, "--role=quota-editor",
               "--user=alice")  # fmt: skip
    wait_until(lambda: can_i(cp, "alice", "patch", "resourcequotas", "-n", ns), "alice may patch")
    done = alice(cp, "patch", "resourcequota", "dynquota", "-n", ns, "--type=merge",
                 "-p", '{"spec":{"hard":{"pods":"4"}}}')  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert quota(core, ns).spec.hard == {"pods": "4"}
    # A cluster admin may delete it (no namespace-wide delete for anyone else here).
    cp.kubectl("delete", "resourcequota", "dynquota", "-n", ns)
    with pytest.raises(ApiException) as gone:
        quota(core, ns)
    assert gone.value.status == 404


def test_tenant_keeps_the_override_and_cannot_unlabel_the_managed_quota(
    release: Release, tenant_ns: str, core: kubernetes.client.CoreV1Api
) -> None:
    """Next to the unmanaged-quota policy, the managed quota works as before: the override
    is set and removed, the managed-by label cannot be removed (by annotate, label, or a
    merge patch that rewrites both)."""
    cp = release.cp
    done = alice(
        cp, "annotate", "resourcequota", "dynquota", "-n", tenant_ns, "dynquota.io/override=max"
    )
    assert done.returncode == 0, done.stderr
    done = alice(
        cp, "annotate", "resourcequota", "dynquota", "-n", tenant_ns, "dynquota.io/override-"
    )
    assert done.returncode == 0, done.stderr
    patch = json.dumps(
        {"metadata": {"labels": {"app.kubernetes.io/managed-by": None}},
         "spec": {"hard": {"pods": "100000"}}}
    )  # fmt: skip
    done = alice(cp, "patch", "resourcequota", "dynquota", "-n", tenant_ns, "--type=merge",
                 "-p", patch)  # fmt: skip
    denied(release, done, SPEC_MESSAGE)
    done = alice(
        cp, "label", "resourcequota", "dynquota", "-n", tenant_ns, "app.kubernetes.io/managed-by-"
    )
    denied(release, done, LABEL_MESSAGE)
    got = quota(core, tenant_ns)
    assert got.metadata.labels == MANAGED
    assert got.spec.hard == {"pods": "3", "configmaps": "50"}


def test_pods_are_still_admitted_and_counted(
    release: Release, tenant_ns: str, core: kubernetes.client.CoreV1Api
) -> None:
    """The policy never sees quota status writes: admission charges pods, the quota controller
    recomputes status.used, and the fourth pod is refused by the quota, not by the policy."""
    cp = release.cp
    wait_until(lambda: (quota(core, tenant_ns).status.hard or {}).get("pods") == "3",
               "status.hard.pods == 3")  # fmt: skip
    for i in range(3):
        done = alice(cp, "run", f"p{i}", "-n", tenant_ns, f"--image={PAUSE}", "--restart=Never")
        assert done.returncode == 0, done.stderr
    done = alice(cp, "run", "p3", "-n", tenant_ns, f"--image={PAUSE}", "--restart=Never")
    assert done.returncode == 1
    assert done.stderr.strip() == (
        'Error from server (Forbidden): pods "p3" is forbidden: exceeded quota: dynquota, '
        "requested: pods=1, used: pods=3, limited: pods=3"
    )
    wait_until(
        lambda: (quota(core, tenant_ns).status.used or {}).get("pods") == "3",
        "status.used.pods == 3",
    )
    # The tenant's override still works while the quota is full.
    done = alice(
        cp, "annotate", "resourcequota", "dynquota", "-n", tenant_ns, "dynquota.io/override=max"
    )
    assert done.returncode == 0, done.stderr


def test_namespace_deletion_is_not_blocked_by_the_policy(
    release: Release, core: kubernetes.client.CoreV1Api
) -> None:
    """The namespace controller deletes the managed quota of a terminating namespace."""
    ns = f"dq-del-{uuid.uuid4().hex[:6]}"
    core.create_namespace({"metadata": {"name": ns}})
    create_as(release.cp, release.operator, ns, managed_quota({"pods": "3"}))
    core.delete_namespace(ns)

    def gone() -> bool:
        try:
            core.read_namespace(ns)
        except ApiException as e:
            if e.status == 404:
                return True
            raise
        return False

    # 90 s was exceeded once in CI (21:29, two xdist workers, cause not traced: see the stop's
    # note); the namespace controller retries with backoff while content remains. On a timeout
    # the namespace's conditions say what it waits for (content, finalizers, discovery)
    try:
        wait_until(gone, f"namespace {ns} deleted", timeout=240)
    except WaitTimeoutError as exc:
        status = core.read_namespace(ns).status
        conditions = [(c.type, c.status, c.reason, c.message) for c in status.conditions or []]
        raise WaitTimeoutError(f"{exc}; phase {status.phase}, conditions {conditions}") from exc


# -- who may change what governs a namespace (issue 23) ------------------------------------


def policy_label_message(key: str) -> str:
    """The governance-labels guard's message for a policy selector key ``key``."""
    return (
        f"dynquota: the namespace label {key} decides which DynamicQuotaPolicy governs this "
        "namespace, or whether one does; only who may update dynamicquotapolicies.dynquota.io "
        "(the cluster's quota admins) may add, change or remove it. Ask them; during an "
        "incident annotate the quota dynquota.io/override=max."
    )


BUDGET_LABEL_MESSAGE = (
    "dynquota: the namespace label dynquota.io/budget decides which QuotaBudget this namespace "
    "belongs to; only who may update quotabudgets.dynquota.io may add, change or remove it."
)


def _grant(cp: LocalControlPlane, name: str, user: str, *rules: tuple[str, str]) -> None:
    """A ClusterRole ``name`` with namespace get/patch/update/create plus ``rules`` ((verb,
    resource) pairs), bound to ``user``."""
    cp.kubectl("create", "clusterrole", name, "--verb=get,patch,update,create",
               "--resource=namespaces")  # fmt: skip
    for verb, resource in rules:
        extra = json.dumps([{"op": "add", "path": "/rules/-", "value": {
            "apiGroups": ["dynquota.io"], "resources": [resource], "verbs": [verb]}}])  # fmt: skip
        cp.kubectl("patch", "clusterrole", name, "--type=json", "-p", extra)
    cp.kubectl("create", "clusterrolebinding", name, f"--clusterrole={name}", f"--user={user}")


def test_governance_labels_are_guarded(
    release: Release, namespace: str, core: kubernetes.client.CoreV1Api
) -> None:
    """`carol` may create and patch Namespaces (a Capsule tenant owner, a GitOps repository
    tenants write to) but not edit policies or budgets. The release's policy selects on
    `dqtest` (a guarded key: governanceLabels.guardedKeys). Removing or changing that selector
    label (the opt-out of issue 23), the pilot label, dynquota.io/managed and the budget label
    are refused on UPDATE and CREATE with the guard's messages; any other label is admitted.
    `dave` (update dynamicquotapolicies) may change the selector and pilot labels, not the
    budget label; `erin` (update quotabudgets) may change the budget label."""
    cp, full = release.cp, release.fullname
    tag = release.name.removeprefix("dqt")
    suffix = uuid.uuid4().hex[:6]
    roles = {user: f"dq-{user}-{suffix}" for user in ("carol", "dave", "erin")}
    created = f"dq-created-{suffix}"
    cp.kubectl("label", "namespace", namespace, f"dqtest={tag}")
    _grant(cp, roles["carol"], "carol")
    _grant(cp, roles["dave"], "dave", ("update", "dynamicquotapolicies"))
    _grant(cp, roles["erin"], "erin", ("update", "quotabudgets"))

    def refused(user: str, message: str, *change: str) -> None:
        done = kubectl_as(cp, user, "label", "namespace", namespace, "--overwrite", *change)
        assert done.returncode == 1, done.stdout
        assert done.stderr.strip() == (
            f'Error from server (Forbidden): namespaces "{namespace}" is forbidden: '
            f"ValidatingAdmissionPolicy '{full}-governance-labels' with binding "
            f"'{full}-governance-labels' denied request: {message}"
        )

    def admitted(user: str, *change: str) -> None:
        done = kubectl_as(cp, user, "label", "namespace", namespace, "--overwrite", *change)
        assert done.returncode == 0, done.stderr

    try:
        for user in ("carol", "dave", "erin"):
            wait_until(lambda u=user: can_i(cp, u, "patch", f"namespaces/{namespace}"), "RBAC")
        assert can_i(cp, "carol", "update", "dynamicquotapolicies.dynquota.io") is False
        assert can_i(cp, "dave", "update", "quotabudgets.dynquota.io") is False
        # The policy reaches the apiserver's admission through an informer: wait for it.
        wait_until(
            lambda: kubectl_as(cp, "carol", "label", "namespace", namespace,
                               "dqtest-").returncode == 1,
            "the governance-labels policy in force",
        )  # fmt: skip
        refused("carol", policy_label_message("dqtest"), "dqtest-")  # the policy opt-out
        refused("carol", policy_label_message("dqtest"), "dqtest=other")
        refused("carol", policy_label_message("dynquota.io/pilot"), "dynquota.io/pilot=true")
        refused("carol", policy_label_message("dynquota.io/managed"), "dynquota.io/managed=false")
        refused("carol", BUDGET_LABEL_MESSAGE, "dynquota.io/budget=team-x")
        refused("dave", BUDGET_LABEL_MESSAGE, "dynquota.io/budget=team-x")
        # A merge patch as a client library sends it.
        patch = json.dumps({"metadata": {"labels": {"dqtest": None}}})
        done = kubectl_as(cp, "carol", "patch", "namespace", namespace, "-p", patch)
        assert done.returncode == 1
        assert done.stderr.strip().endswith(policy_label_message("dqtest"))
        # Creating a namespace with a guarded label is a change too.
        body = {"apiVersion": "v1", "kind": "Namespace",
                "metadata": {"name": created, "labels": {"dynquota.io/pilot": "true"}}}  # fmt: skip
        done = subprocess.run(
            [str(Path(cp.bin_dir or "") / "kubectl"), f"--kubeconfig={cp.kubeconfig}",
             "--as=carol", "create", "-f", "-"],
            input=json.dumps(body), capture_output=True, text=True, check=False, timeout=60,
        )  # fmt: skip
        assert done.returncode == 1
        assert done.stderr.strip() == (
            f'Error from server (Forbidden): error when creating "STDIN": namespaces "{created}" '
            f"is forbidden: ValidatingAdmissionPolicy '{full}-governance-labels' with binding "
            f"'{full}-governance-labels' denied request: "
            + policy_label_message("dynquota.io/pilot")
        )
        # Unguarded labels: admitted.
        admitted("carol", "team=payments")
        labels = core.read_namespace(namespace).metadata.labels
        assert labels["dqtest"] == tag
        assert labels["team"] == "payments"
        assert "dynquota.io/pilot" not in labels
        assert "dynquota.io/budget" not in labels
        # Who may update policies moves the namespace between policies, or out.
        admitted("dave", "dynquota.io/pilot=true")
        admitted("dave", "dqtest=other")
        admitted("dave", "dqtest-")
        admitted("dave", f"dqtest={tag}", "dynquota.io/pilot-", "dynquota.io/managed=false")
        admitted("dave", "dynquota.io/managed-")
        # Who may update budgets moves it between budgets.
        admitted("erin", "dynquota.io/budget=team-x")
        refused("carol", BUDGET_LABEL_MESSAGE, "dynquota.io/budget-")
        admitted("erin", "dynquota.io/budget-")
        labels = core.read_namespace(namespace).metadata.labels
        assert {k: v for k, v in labels.items() if k.startswith(("dq", "dynquota"))} == {
            "dqtest": tag
        }
    finally:
        for role in roles.values():
            cp.kubectl("delete", "clusterrolebinding,clusterrole", role, "--ignore-not-found")
        cp.kubectl("delete", "namespace", created, "--ignore-not-found", "--wait=false")


def test_governance_labels_are_guarded_through_the_namespace_subresources(
    release: Release, namespace: str, core: kubernetes.client.CoreV1Api
) -> None:
    """A ServiceAccount with only `patch namespaces/status` and `update namespaces/finalize`
    (no right on policies or budgets): the apiserver keeps label changes made through those
    subresources, so removing `dynquota.io/budget` or `dynquota.io/managed` there is refused
    with the guard's messages (before the fix both were admitted and the labels were gone); an
    unguarded label through the same subresources is admitted."""
    cp, full = release.cp, release.fullname
    suffix = uuid.uuid4().hex[:6]
    role, sa = f"dq-nsstatus-{suffix}", f"dq-nsstatus-{suffix}"
    user = f"system:serviceaccount:{namespace}:{sa}"
    cp.kubectl("label", "namespace", namespace, "dynquota.io/budget=team-x",
               "dynquota.io/managed=true")  # fmt: skip
    cp.kubectl("create", "serviceaccount", sa, "-n", namespace)
    # get: kubectl reads the subresource before it patches it
    cp.kubectl("create", "clusterrole", role, "--verb=get,patch", "--resource=namespaces/status")
    finalize_rule = {"apiGroups": [""], "resources": ["namespaces/finalize"], "verbs": ["update"]}
    extra = json.dumps([{"op": "add", "path": "/rules/-", "value": finalize_rule}])
    cp.kubectl("patch", "clusterrole", role, "--type=json", "-p", extra)
    cp.kubectl("create", "clusterrolebinding", role, f"--clusterrole={role}",
               f"--serviceaccount={namespace}:{sa}")  # fmt: skip
    prefix = (
        f'Error from server (Forbidden): namespaces "{namespace}" is forbidden: '
        f"ValidatingAdmissionPolicy '{full}-governance-labels' with binding "
        f"'{full}-governance-labels' denied request: "
    )

    def patch_status(*ops: dict[str, Any]) -> subprocess.CompletedProcess[str]:
        return kubectl_as(cp, user, "patch", "namespace", namespace, "--subresource=status",
                          "--type=json", "-p", json.dumps(list(ops)))  # fmt: skip

    def finalize(labels: dict[str, str]) -> subprocess.CompletedProcess[str]:
        body = json.loads(cp.kubectl("get", "namespace", namespace, "-o", "json"))
        body["metadata"]["labels"] = labels
        assert cp.bin_dir is not None
        return subprocess.run(
            [str(cp.bin_dir / "kubectl"), f"--kubeconfig={cp.kubeconfig}", f"--as={user}",
             "replace", "--raw", f"/api/v1/namespaces/{namespace}/finalize", "-f", "-"],
            input=json.dumps(body), capture_output=True, text=True, check=False, timeout=60,
        )  # fmt: skip

    def remove(key: str) -> dict[str, Any]:
        return {"op": "remove", "path": "/metadata/labels/" + key.replace("/", "~1")}

    try:
        wait_until(lambda: can_i(cp, user, "patch", f"namespaces/{namespace}",
                                 "--subresource=status"), "RBAC")  # fmt: skip
        assert can_i(cp, user, "patch", f"namespaces/{namespace}") is False
        # the dry run of the budget label's removal: refused once the policy is in force
        wait_until(lambda: kubectl_as(cp, user, "patch", "namespace", namespace,
                                      "--subresource=status", "--dry-run=server", "--type=json",
                                      "-p", json.dumps([remove("dynquota.io/budget")]),
                                      ).stderr.count("-governance-labels' denied") == 1,
                   "the governance-labels policy in force", timeout=30)  # fmt: skip
        done = patch_status(remove("dynquota.io/budget"))
        assert (done.returncode, done.stderr.strip()) == (1, prefix + BUDGET_LABEL_MESSAGE)
        done = patch_status(remove("dynquota.io/managed"))
        assert (done.returncode, done.stderr.strip()) == (
            1, prefix + policy_label_message("dynquota.io/managed"))  # fmt: skip
        labels = core.read_namespace(namespace).metadata.labels
        done = finalize({k: v for k, v in labels.items() if k != "dynquota.io/budget"})
        assert (done.returncode, done.stderr.strip()) == (1, prefix + BUDGET_LABEL_MESSAGE)
        done = finalize({**labels, "dynquota.io/managed": "false"})
        assert (done.returncode, done.stderr.strip()) == (
            1, prefix + policy_label_message("dynquota.io/managed"))  # fmt: skip
        labels = core.read_namespace(namespace).metadata.labels
        assert labels["dynquota.io/budget"] == "team-x"
        assert labels["dynquota.io/managed"] == "true"
        # an unguarded label through the same subresources: admitted (and kept)
        done = patch_status({"op": "add", "path": "/metadata/labels/team", "value": "a"})
        assert done.returncode == 0, done.stderr
        done = finalize({**labels, "team": "b"})
        assert done.returncode == 0, done.stderr
        labels = core.read_namespace(namespace).metadata.labels
        assert (labels["team"], labels["dynquota.io/budget"]) == ("b", "team-x")
    finally:
        cp.kubectl("delete", "clusterrolebinding,clusterrole", role, "--ignore-not-found")


def test_policies_select_only_on_guarded_keys(release: Release) -> None:
    """A DynamicQuotaPolicy whose selector uses a key that is not guarded is refused (a
    namespace editor could move namespaces out of it); dynquota.io/ keys,
    kubernetes.io/metadata.name and governanceLabels.guardedKeys are admitted."""
    cp, full = release.cp, release.fullname
    name = f"dq-sel-{uuid.uuid4().hex[:6]}"

    def create(selector: dict[str, Any]) -> subprocess.CompletedProcess[str]:
        body = {"apiVersion": "dynquota.io/v1alpha1", "kind": "DynamicQuotaPolicy",
                "metadata": {"name": name}, "spec": {"namespaceSelector": selector,
                                                     "dryRun": True}}  # fmt: skip
        return subprocess.run(
            [str(Path(cp.bin_dir or "") / "kubectl"), f"--kubeconfig={cp.kubeconfig}",
             "create", "--dry-run=server", "-f", "-"],
            input=json.dumps(body), capture_output=True, text=True, check=False, timeout=60,
        )  # fmt: skip

    wait_until(lambda: create({"matchLabels": {"team": "x"}}).returncode == 1,
               "the policy-selectors policy in force")  # fmt: skip
    done = create({"matchExpressions": [{"key": "team", "operator": "In", "values": ["x"]}]})
    assert done.stderr.strip() == (
        f'The dynamicquotapolicies "{name}" is invalid: : '
        f"ValidatingAdmissionPolicy '{full}-policy-selectors' with binding "
        f"'{full}-policy-selectors' denied request: dynquota: namespaceSelector uses the label "
        "team, which is not guarded: whoever may patch a Namespace could change which policy "
        "governs it. Select on dynquota.io/ labels (or kubernetes.io/metadata.name), or add the "
        "key to the chart value governanceLabels.guardedKeys."
    )
    for selector in (
        {"matchLabels": {"dynquota.io/tier": "gold"}},
        {
            "matchExpressions": [
                {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["a"]}
            ]
        },
        {"matchLabels": {"dqtest": "x"}},
        {},
    ):
        done = create(selector)
        assert done.returncode == 0, done.stderr


def test_a_tenants_new_namespace_joins_its_tenants_budget(release: Release) -> None:
    """governanceLabels.tenantLabel (as with Capsule): `carol` (create Namespaces, no right on
    budgets) creates a namespace with the tenant label and gets `dynquota.io/budget` from it
    (the chart's MutatingAdmissionPolicy), admitted by the guard; a create naming another
    budget is refused."""
    cp, ns, chart, full = release.cp, release.namespace, str(CHART), release.fullname
    suffix = uuid.uuid4().hex[:6]
    role, joined, other = f"dq-carol-{suffix}", f"dq-acme-{suffix}", f"dq-other-{suffix}"
    tenant = "capsule.clastix.io/tenant"
    release.helm("upgrade", release.name, chart, "-n", ns, "--reuse-values",
                 "--set", f"governanceLabels.tenantLabel={tenant}")  # fmt: skip
    _grant(cp, role, "carol")

    def create(name: str, labels: dict[str, str]) -> subprocess.CompletedProcess[str]:
        body = {"apiVersion": "v1", "kind": "Namespace",
                "metadata": {"name": name, "labels": labels}}  # fmt: skip
        return subprocess.run(
            [str(Path(cp.bin_dir or "") / "kubectl"), f"--kubeconfig={cp.kubeconfig}",
             "--as=carol", "create", "-f", "-"],
            input=json.dumps(body), capture_output=True, text=True, check=False, timeout=60,
        )  # fmt: skip

    def joined_its_budget() -> bool:
        done = create(joined, {tenant: "acme"})
        if done.returncode != 0:
            return False  # the policies are not in effect yet: refused, nothing created
        labels = json.loads(cp.kubectl("get", "namespace", joined, "-o", "json"))["metadata"]
        if labels["labels"].get("dynquota.io/budget") == "acme":
            return True
        cp.kubectl("delete", "namespace", joined, "--wait=true", "--timeout=60s")
        return False

    try:
        wait_until(lambda: can_i(cp, "carol", "create", "namespaces"), "carol RBAC")
        wait_until(joined_its_budget, "the tenant-budget policy in effect", timeout=120)
        done = create(other, {tenant: "acme", "dynquota.io/budget": "globex"})
        assert done.returncode == 1
        assert done.stderr.strip() == (
            f'Error from server (Forbidden): error when creating "STDIN": namespaces "{other}" '
            f"is forbidden: ValidatingAdmissionPolicy '{full}-governance-labels' with binding "
            f"'{full}-governance-labels' denied request: {BUDGET_LABEL_MESSAGE}"
        )
    finally:
        cp.kubectl("delete", "clusterrolebinding,clusterrole", role, "--ignore-not-found")
        cp.kubectl("delete", "namespace", joined, other, "--ignore-not-found", "--wait=false")
        release.helm("upgrade", release.name, chart, "-n", ns, "--reuse-values",
                     "--set", "governanceLabels.tenantLabel=")  # fmt: skip


GUARD_OFF_MESSAGE = (
    "governanceLabels.admissionPolicy: the guard of the budget label dynquota.io/budget must be "
    "enabled with Deny while a QuotaBudget exists (1 found): without it whoever may patch a "
    "Namespace can move it into or out of a budget. Delete the QuotaBudgets first, or keep the "
    "guard"
)


def test_the_budget_label_guard_stays_on_while_a_budget_exists(release: Release) -> None:
    """Issue 23: `helm upgrade` switching the governance-labels guard off, or to Warn, fails
    while a QuotaBudget exists (Helm lookup at render time), and leaves the release as it
    was; without budgets it may be switched (and back)."""
    cp, ns, chart = release.cp, release.namespace, str(CHART)
    name = f"dq-guard-{uuid.uuid4().hex[:6]}"
    budget = {"apiVersion": "dynquota.io/v1alpha1", "kind": "QuotaBudget",
              "metadata": {"name": name},
              "spec": {"namespaceSelector": {"matchLabels": {"dynquota.io/budget": name}},
                       "hard": {"pods": 1}}}  # fmt: skip
    # --validate=ignore: the schema of v1alpha1 changes with issue 22 (the selector goes, its
    # membership becomes the label); whichever schema is installed prunes what it does not know.
    cp.kubectl("create", "--validate=ignore", "-f", "-", input=json.dumps(budget))
    try:
        changes = ("governanceLabels.admissionPolicy.enabled=false",
                   "governanceLabels.admissionPolicy.validationActions={Warn,Audit}")  # fmt: skip
        for change in changes:
            done = release.helm("upgrade", release.name, chart, "-n", ns, "--reuse-values",
                                "--set", change, check=False)  # fmt: skip
            assert done.returncode == 1, done.stdout
            assert done.stderr.strip().endswith(GUARD_OFF_MESSAGE), done.stderr
        binding = json.loads(cp.kubectl(
            "get", "validatingadmissionpolicybinding", f"{release.fullname}-governance-labels",
            "-o", "json"))  # fmt: skip
        assert binding["spec"]["validationActions"] == ["Deny"]
    finally:
        cp.kubectl("delete", "quotabudget", name, "--ignore-not-found")
    try:
        release.helm("upgrade", release.name, chart, "-n", ns, "--reuse-values", "--set",
                     "governanceLabels.admissionPolicy.validationActions={Warn,Audit}")  # fmt: skip
    finally:
        release.helm("upgrade", release.name, chart, "-n", ns, "--reuse-values", "--set",
                     "governanceLabels.admissionPolicy.validationActions={Deny}")  # fmt: skip


BUDGET_GUARD_OFF_MESSAGE = (
    "budgetGuard.enabled: the budget guard must stay enabled while a QuotaBudget exists (1 "
    "found): without it a namespace's creates (and charging updates) are admitted before its "
    "budget's slice is enforced (a relabel into a full budget, the operator down), so the "
    "budget can be exceeded. Delete the QuotaBudgets first, or keep the guard"
)


def test_the_budget_guard_stays_on_while_a_budget_exists(release: Release) -> None:
    """`helm upgrade --set budgetGuard.enabled=false` fails while a QuotaBudget exists (Helm
    lookup at render time; before: it succeeded and removed the guard) and leaves the guard in
    place; without budgets it may be switched off (and back)."""
    cp, ns, chart, full = release.cp, release.namespace, str(CHART), release.fullname
    name = f"dq-bguard-{uuid.uuid4().hex[:6]}"
    budget = {"apiVersion": "dynquota.io/v1alpha1", "kind": "QuotaBudget",
              "metadata": {"name": name}, "spec": {"hard": {"pods": 1}}}  # fmt: skip
    guard = ("validatingadmissionpolicy,validatingadmissionpolicybinding", f"{full}-budget-guard")

    def guard_objects() -> list[str]:
        return cp.kubectl("get", guard[0], guard[1], "-o", "name", "--ignore-not-found").split()

    cp.kubectl("create", "--validate=ignore", "-f", "-", input=json.dumps(budget))
    try:
        done = release.helm("upgrade", release.name, chart, "-n", ns, "--reuse-values",
                            "--set", "budgetGuard.enabled=false", check=False)  # fmt: skip
        assert done.returncode == 1, done.stdout
        assert done.stderr.strip().endswith(BUDGET_GUARD_OFF_MESSAGE), done.stderr
        assert guard_objects() == [
            f"validatingadmissionpolicy.admissionregistration.k8s.io/{full}-budget-guard",
            f"validatingadmissionpolicybinding.admissionregistration.k8s.io/{full}-budget-guard",
        ]
    finally:
        cp.kubectl("delete", "quotabudget", name, "--ignore-not-found")
    try:
        release.helm("upgrade", release.name, chart, "-n", ns, "--reuse-values",
                     "--set", "budgetGuard.enabled=false")  # fmt: skip
        assert guard_objects() == []
    finally:
        release.helm("upgrade", release.name, chart, "-n", ns, "--reuse-values",
                     "--set", "budgetGuard.enabled=true")  # fmt: skip


def test_an_upgrade_is_refused_while_a_live_policy_selects_on_an_unguarded_key(
    release: Release,
) -> None:
    """The migration check: a live policy selecting on `dqtest` (guarded through
    governanceLabels.guardedKeys) makes an upgrade that drops that key fail, naming the
    policies and the way out; the release is left as it was."""
    cp, ns, chart = release.cp, release.namespace, str(CHART)
    name = f"dq-legacy-{uuid.uuid4().hex[:6]}"
    legacy = {"apiVersion": "dynquota.io/v1alpha1", "kind": "DynamicQuotaPolicy",
              "metadata": {"name": name},
              "spec": {"dryRun": True,
                       "namespaceSelector": {"matchLabels": {"dqtest": "x"}}}}  # fmt: skip
    cp.kubectl("create", "-f", "-", input=json.dumps(legacy))
    try:
        done = release.helm("upgrade", release.name, chart, "-n", ns, "--reuse-values",
                            "--set-json", "governanceLabels.guardedKeys=[]",
                            check=False)  # fmt: skip
        assert done.returncode == 1, done.stdout
        assert done.stderr.strip().endswith(
            "governanceLabels: DynamicQuotaPolicies (live, or the chart's defaultPolicy) select "
            f"on label keys that are not guarded: dqtest (policy {name}), dqtest (policy "
            f"{release.policy}). Whoever may patch a Namespace could change which policy "
            "governs it. Add the keys to governanceLabels.guardedKeys (then only who may update "
            "dynamicquotapolicies may change those labels), or change the selectors to "
            "dynquota.io/ keys (docs/chart.md)"
        ), done.stderr
    finally:
        cp.kubectl("delete", "dynamicquotapolicy", name, "--ignore-not-found")


# -- the budget guard on the UPDATEs that charge quota --------------------------------------


def guard_message(namespace: str, label: str, mark: str) -> str:
    """The budget guard's refusal while the quota's mark is not the namespace's label."""
    return (
        f"dynquota budget guard: namespace {namespace} is labelled dynquota.io/budget={label} "
        f"and its managed quota dynquota is not that budget's slice yet (marked {mark}); "
        "dynquota writes the slice within seconds while it runs: retry. If this lasts, check "
        f"that dynquota runs and that QuotaBudget {label} has room."
    )


def test_the_budget_guard_holds_a_service_type_change_to_load_balancer(
    release: Release,
    namespace: str,
    core: kubernetes.client.CoreV1Api,
    request: pytest.FixtureRequest,
) -> None:
    """A namespace of budget `team-a` (its managed quota marked `team-a`, enforced: 2 load
    balancers) with three ClusterIP Services, relabelled into a full budget `team-b` while no
    operator runs (the mark is still `team-a`): patching the Services to `type: LoadBalancer`
    charges services.loadbalancers, and each is refused with the guard's message (before the
    fix the guard matched CREATE only: all three admitted, 3 load balancers against a slice of
    2 still to come). An unrelated Service update (a label) is admitted; an in-place resize of
    a pod (`pods/resize`) and a bound claim's storage increase are refused too (its label
    change is admitted). Back in `team-a` (mark == label) the type change is admitted up to the
    quota, and the resize and the increase."""
    cp, full = release.cp, release.fullname
    mark = "dynquota.io/budget"
    cp.kubectl("label", "namespace", namespace, f"{mark}=team-a")
    body = managed_quota({"services": "10", "services.loadbalancers": "2"})
    body["metadata"]["annotations"] = {mark: "team-a"}
    core.create_namespaced_resource_quota(namespace, body)
    wait_until(
        lambda: (quota(core, namespace).status.hard or {}).get("services.loadbalancers") == "2",
        "the quota enforced",
    )
    names = [f"web-{i}" for i in range(3)]
    for name in names:
        core.create_namespaced_service(namespace, {
            "metadata": {"name": name},
            "spec": {"type": "ClusterIP", "ports": [{"port": 80}]}})  # fmt: skip
    core.create_namespaced_pod(namespace, {
        "metadata": {"name": "app"},
        "spec": {"containers": [{"name": "c", "image": PAUSE,
                                 "resources": {"requests": {"cpu": "100m"}}}]}})  # fmt: skip
    # a claim of an expandable class, bound by hand (no binder controller here): only a bound
    # claim's storage request may grow
    expandable = f"dq-expand-{uuid.uuid4().hex[:6]}"
    cp.kubectl("create", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
         "metadata": {"name": expandable}, "provisioner": "kubernetes.io/no-provisioner",
         "allowVolumeExpansion": True},
        {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
         "metadata": {"name": "data", "namespace": namespace},
         "spec": {"storageClassName": expandable, "accessModes": ["ReadWriteOnce"],
                  "volumeName": expandable,
                  "resources": {"requests": {"storage": "1Gi"}}}}]}))  # fmt: skip
    request.addfinalizer(
        lambda: cp.kubectl("delete", "storageclass", expandable, "--ignore-not-found")
    )
    core.patch_namespaced_persistent_volume_claim_status(
        "data", namespace, {"status": {"phase": "Bound", "accessModes": ["ReadWriteOnce"],
                                       "capacity": {"storage": "1Gi"}}})  # fmt: skip
    cp.kubectl("label", "namespace", namespace, "--overwrite", f"{mark}=team-b")
    to_lb = {"spec": {"type": "LoadBalancer"}}

    def refused(name: str, dry_run: bool = False) -> str:
        try:
            core.patch_namespaced_service(name, namespace, to_lb,
                                          dry_run="All" if dry_run else None)  # fmt: skip
        except ApiException as exc:
            return f"{exc.status} {json.loads(exc.body or '{}').get('message')}"
        return ""

    expected = (
        f"403 services \"{{name}}\" is forbidden: ValidatingAdmissionPolicy '{full}-budget-guard' "
        f"with binding '{full}-budget-guard' denied request: "
        + guard_message(namespace, "team-b", "team-a")
    )
    # the relabel reaches the guard's namespaceObject through the apiserver's informer
    wait_until(lambda: f"'{full}-budget-guard'" in refused(names[0], dry_run=True),
               "the guard holds the type change", timeout=30)  # fmt: skip
    assert [refused(name) for name in names] == [expected.format(name=n) for n in names]
    # an update that charges nothing is never evaluated: admitted
    core.patch_namespaced_service(names[0], namespace, {"metadata": {"labels": {"tier": "web"}}})
    services = core.list_namespaced_service(namespace).items
    assert sorted((s.metadata.name, s.spec.type) for s in services) == [
        (n, "ClusterIP") for n in names
    ]
    assert core.read_namespaced_service(names[0], namespace).metadata.labels == {"tier": "web"}
    # an in-place resize charges requests.cpu: refused too
    resize = json.dumps({"spec": {"containers": [
        {"name": "c", "resources": {"requests": {"cpu": "200m"}}}]}})  # fmt: skip
    with pytest.raises(subprocess.CalledProcessError) as resized:
        cp.kubectl("patch", "pod", "app", "-n", namespace, "--subresource=resize", "-p", resize)
    assert resized.value.stderr.strip() == (
        'Error from server (Forbidden): pods "app" is forbidden: ValidatingAdmissionPolicy '
        f"'{full}-budget-guard' with binding '{full}-budget-guard' denied request: "
        + guard_message(namespace, "team-b", "team-a")
    )
    # a claim's storage request that grows charges requests.storage: refused; a label is not
    grow = {"spec": {"resources": {"requests": {"storage": "2Gi"}}}}
    with pytest.raises(ApiException) as grown:
        core.patch_namespaced_persistent_volume_claim("data", namespace, grow)
    assert (grown.value.status, json.loads(grown.value.body or "{}")["message"]) == (403, (
        'persistentvolumeclaims "data" is forbidden: ValidatingAdmissionPolicy '
        f"'{full}-budget-guard' with binding '{full}-budget-guard' denied request: "
        + guard_message(namespace, "team-b", "team-a")))  # fmt: skip
    core.patch_namespaced_persistent_volume_claim(
        "data", namespace, {"metadata": {"labels": {"tier": "db"}}})  # fmt: skip
    # back in team-a (mark == label): admitted up to the quota of 2
    cp.kubectl("label", "namespace", namespace, "--overwrite", f"{mark}=team-a")
    wait_until(lambda: refused(names[0], dry_run=True) == "", "the guard admits again")
    assert [refused(name) for name in names[:2]] == ["", ""]
    cp.kubectl("patch", "pod", "app", "-n", namespace, "--subresource=resize", "-p", resize)
    core.patch_namespaced_persistent_volume_claim("data", namespace, grow)
    assert refused(names[2]) == (
        f'403 services "{names[2]}" is forbidden: exceeded quota: dynquota, requested: '
        "services.loadbalancers=1, used: services.loadbalancers=2, limited: "
        "services.loadbalancers=2"
    )


# -- uninstall with the cleanup hook ---------------------------------------------------------


def token_kubeconfig(cp: LocalControlPlane, namespace: str, sa: str, path: Path) -> Path:
    """A kubeconfig holding a TokenRequest token of ServiceAccount ``namespace/sa``."""
    token = cp.kubectl("create", "token", sa, "-n", namespace, "--duration=1h").strip()
    cluster = {"server": cp.server, "certificate-authority": str(cp.ca_file)}
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "cp", "cluster": cluster}],
        "users": [{"name": sa, "user": {"token": token}}],
        "contexts": [{"name": "sa", "context": {"cluster": "cp", "user": sa}}],
        "current-context": "sa",
    }
    path.write_text(yaml.safe_dump(config))
    return path


def job_env(job: dict[str, Any], namespace: str) -> dict[str, str]:
    """The hook container's environment, with downward-API values resolved."""
    (container,) = job["spec"]["template"]["spec"]["containers"]
    env = {}
    for item in container["env"]:
        if "valueFrom" in item:
            path = item["valueFrom"]["fieldRef"]["fieldPath"]
            assert path == "metadata.namespace", path
            env[item["name"]] = namespace
        else:
            env[item["name"]] = item["value"]
    return env


def report_job_complete(cp: LocalControlPlane, namespace: str, name: str) -> None:
    """What the job controller would write after the pod succeeded."""
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    conditions = [
        {"type": t, "status": "True", "lastProbeTime": now, "lastTransitionTime": now}
        for t in ("SuccessCriteriaMet", "Complete")
    ]
    status = {"startTime": now, "completionTime": now, "succeeded": 1, "conditions": conditions}
    cp.kubectl("patch", "job", name, "-n", namespace, "--subresource=status", "--type=merge",
               "-p", json.dumps({"status": status}))  # fmt: skip


def operator_replica_sets(cp: LocalControlPlane, release: Release) -> dict[str, int]:
    """spec.replicas of each ReplicaSet controlled by the operator Deployment, by name."""
    out = json.loads(cp.kubectl("get", "replicasets", "-n", release.namespace, "-o", "json"))
    return {
        rs["metadata"]["name"]: rs["spec"]["replicas"]
        for rs in out["items"]
        if any(
            ref["kind"] == "Deployment" and ref["name"] == release.fullname
            for ref in rs["metadata"].get("ownerReferences", [])
        )
    }


def operator_pods(core: kubernetes.client.CoreV1Api, release: Release) -> list[str]:
    """Names of the pods controlled by the operator Deployment's ReplicaSets."""
    names = operator_replica_sets(release.cp, release)
    pods: list[Any] = core.list_namespaced_pod(release.namespace).items
    return sorted(
        str(p.metadata.name)
        for p in pods
        if any(r.controller and r.name in names for r in p.metadata.owner_references or [])
    )


def test_uninstall_runs_the_cleanup_hook(
    release: Release, core: kubernetes.client.CoreV1Api, tmp_path: Path
) -> None:
    cp, ns, full = release.cp, release.namespace, release.fullname
    dynquota = Path(sys.executable).parent / "dynquota"
    probe = subprocess.run(
        [str(dynquota), "cleanup", "--help"], capture_output=True, text=True, check=False
    )
    if probe.returncode != 0:
        pytest.skip(f"`dynquota cleanup` is not implemented yet: {probe.stderr.strip()[-200:]}")
    # The hardest state to stop the operator from: an unfinished rolling update to 2 replicas
    # (a new pod template), reverted to 1 with strategy Recreate (leaderElection.enabled=false).
    # Without a kubelet the rollout never finishes, so both ReplicaSets stay active, and
    # upstream's Deployment controller then ignores `replicas` (sync.go scale(): several
    # active ReplicaSets are scaled only for RollingUpdate). A plain scale to 0 leaves every
    # pod in place; the hook must still stop them all.
    chart = str(CHART)

    def upgrade(*values: str) -> None:
        sets = [arg for value in values for arg in ("--set", value)]
        release.helm("upgrade", release.name, chart, "-n", ns, "--reuse-values", *sets)

    def active_sets() -> int:
        return len([n for n in operator_replica_sets(cp, release).values() if n > 0])

    # Earlier tests' upgrades changed the pod template and back (budgetGuard.enabled, the
    # tenant label): without a kubelet each such rolling update leaves a ReplicaSet at 1 for
    # good (upstream rolling.go reconcileOldReplicaSets: maxUnavailable 0 and no available
    # pod leave nothing to scale down). Start from one ReplicaSet: a Recreate rollout
    # (leader election off), then the one Recreate that turns it back on (docs/chart.md).
    for step in ("leaderElection.enabled=false", "leaderElection.enabled=true"):
        upgrade(step)
        # 60 s was exceeded once in CI (load ~4, two workers)
        wait_until(lambda: rolled_out(cp, release), f"one operator ReplicaSet after {step}", 180,
                   interval=0.5)  # fmt: skip
    upgrade("replicaCount=2", "podAnnotations.test-stage=rolling")
    wait_until(lambda: active_sets() == 2, "the rolling update's second ReplicaSet", interval=0.5)
    upgrade("replicaCount=1", "leaderElection.enabled=false")

    def staged() -> dict[str, int] | None:
        sets = operator_replica_sets(cp, release)
        active = {name: n for name, n in sets.items() if n > 0}
        pods = operator_pods(core, release)
        return active if len(active) == 2 and len(pods) == sum(active.values()) else None

    wait_until(staged, "two active ReplicaSets of the operator, with all their pods")
    replica_sets = operator_replica_sets(cp, release)
    # Two managed quotas; beside them an unmanaged quota named dynquota (no label) and a
    # labelled quota with another name: the hook deletes only the managed ones.
    namespaces = [f"dq-un-{uuid.uuid4().hex[:6]}" for _ in range(2)]
    for n in namespaces:
        core.create_namespace({"metadata": {"name": n}})
        create_as(cp, release.operator, n, managed_quota({"pods": "10"}))
    try:
        other = f"dq-un-{uuid.uuid4().hex[:6]}"
        core.create_namespace({"metadata": {"name": other}})
        namespaces.append(other)
        core.create_namespaced_resource_quota(
            other, {"metadata": {"name": "dynquota"}, "spec": {"hard": {"pods": "1"}}}
        )
        core.create_namespaced_resource_quota(
            namespaces[0],
            {
                "metadata": {"name": "team", "labels": dict(MANAGED)},
                "spec": {"hard": {"pods": "1"}},
            },
        )
        helm_bin = str(Path(cp.bin_dir or "") / "helm")
        # A context manager: its pipes are closed whatever happens (no ResourceWarning later).
        with subprocess.Popen(
            [helm_bin, "--kubeconfig", cp.kubeconfig, "uninstall", release.name, "-n", ns,
             "--timeout", "240s"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=release.env,
        ) as uninstall:  # fmt: skip
            try:
                job = wait_until(
                    lambda: job_or_none(cp, ns, f"{full}-cleanup"), "the hook Job", timeout=60
                )
                # The hook's RBAC exists now, before anything of the release is deleted. The
                # apiserver authorizes from informer caches: wait until every rule the command
                # needs is in effect (a pod of the Job would start later still).
                allowed = cleanup_allowed(release)
                wait_until(
                    lambda: all(can_i(cp, release.cleanup, *check) for check in allowed),
                    f"the hook's RBAC in effect: {allowed}",
                    timeout=30,
                )
                for check in cleanup_denied(release):
                    assert can_i(cp, release.cleanup, *check) is False, check
                (container,) = job["spec"]["template"]["spec"]["containers"]
                kubeconfig = token_kubeconfig(cp, ns, f"{full}-cleanup", tmp_path / "kubeconfig")
                env = {**os.environ, **job_env(job, ns), "KUBECONFIG": str(kubeconfig)}
                command = [str(dynquota), *container["command"][1:]]
                # Longer than the command's own deadline (--timeout, 120 s by default), so a
                # failure shows the command's error, not a kill.
                ran = subprocess.run(
                    command, capture_output=True, text=True, env=env, timeout=200, check=False
                )
                assert ran.returncode == 0, ran.stdout + ran.stderr
                # It stopped every operator pod, of both ReplicaSets, before deleting anything.
                deployment = json.loads(
                    cp.kubectl("get", "deployment", full, "-n", ns, "-o", "json")
                )
                assert deployment["spec"]["replicas"] == 0
                assert deployment["spec"]["strategy"] == {
                    "type": "RollingUpdate",
                    "rollingUpdate": {"maxSurge": 0, "maxUnavailable": "100%"},
                }
                assert operator_pods(core, release) == []
                # Every ReplicaSet at 0: the staged ones, and the one the controller may create
                # (at 0) for the reverted template once the hook's patch makes it RollingUpdate.
                after = operator_replica_sets(cp, release)
                assert set(replica_sets) <= set(after)
                assert after == dict.fromkeys(after, 0)
                report_job_complete(cp, ns, f"{full}-cleanup")
                out, err = uninstall.communicate(timeout=240)
            finally:
                if uninstall.poll() is None:
                    uninstall.kill()
        assert uninstall.returncode == 0, out + err
        assert out.strip() == f'release "{release.name}" uninstalled'
        for n in namespaces[:2]:
            assert [q.metadata.name for q in core.list_namespaced_resource_quota(n).items] == (
                ["team"] if n == namespaces[0] else []
            )
        assert [q.metadata.name for q in core.list_namespaced_resource_quota(other).items] == [
            "dynquota"
        ]
        # The release is gone, hook objects included; the CRD stays (Helm never deletes CRDs).
        left = cp.kubectl("get", "all,serviceaccounts,roles,rolebindings", "-n", ns, "-o", "name")
        assert [x for x in left.split() if full in x] == []
        left = cp.kubectl(
            "get", "clusterroles,clusterrolebindings,validatingadmissionpolicies", "-o", "name"
        )
        assert [x for x in left.split() if full in x] == []
        cp.kubectl("get", "crd", "dynamicquotapolicies.dynquota.io")
    finally:
        for n in namespaces:
            core.delete_namespace(n)


def job_or_none(cp: LocalControlPlane, namespace: str, name: str) -> dict[str, Any] | None:
    out = cp.kubectl("get", "jobs", "-n", namespace, "-o", "json")
    for item in json.loads(out)["items"]:
        if item["metadata"]["name"] == name:
            found: dict[str, Any] = item
            return found
    return None
