"""Issue 23: what a leaked operator token can and cannot do, tried row by row AS that token.

The chart is installed with ``helm install`` (its RBAC and admission policies in force) and a
TokenRequest token of its ServiceAccount is what every row uses: the real apiserver's RBAC
and ValidatingAdmissionPolicies answer. Each row of :data:`ROWS` is a row of SECURITY.md's
table ("What a leaked operator token can do"), with the same id and the same enforcing layer
(``tests/unit/test_security_table.py`` checks that they match); the outcome is asserted
exactly: admitted, or the apiserver's exact status and message.

Layers: ``RBAC`` (the ClusterRole has no such verb), ``policy`` (the chart's
``<fullname>-operator-writes``, ``templates/operator-policy.yaml``, or another chart policy
the row names), ``nothing`` (the token may do it: SECURITY.md says what bounds the harm).

``rbac.budgetAdmissionPolicies=false``: until issue 22 drops the operator's rule on
``admissionregistration.k8s.io`` (then the value is accepted and ignored), the default grants
it; the rows on admission objects test the ClusterRole without it.
"""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kubernetes
import pytest
from kubernetes.client.exceptions import ApiException

from dynquota.policy.churn import tarpit_rules
from dynquota.testing.chart import helm
from dynquota.testing.controlplane import LocalControlPlane
from dynquota.testing.podtoken import pod_kubeconfig
from dynquota.testing.wait import wait_until

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "dynquota"
MANAGED = {"app.kubernetes.io/managed-by": "dynquota"}
PAUSE = "registry.k8s.io/pause:3.10"
TIMEOUT = 10  # seconds, every API call
HOLDER = "dqm-leader"  # the pod whose bound token is the leaked one; it holds the Lease


@dataclass
class Bed:
    """The installed release and the clients: ``admin`` (cluster admin) and ``token`` (the
    operator's ServiceAccount token), both official sync clients."""

    cp: LocalControlPlane
    release: str
    namespace: str  # the release namespace
    tenant: str  # a namespace the operator may manage (has a managed quota)
    excluded: str  # a namespace in operator.excludeNamespaces
    optout: str  # a namespace labelled dynquota.io/managed=false
    admin: kubernetes.client.ApiClient
    token: kubernetes.client.ApiClient

    @property
    def full(self) -> str:
        return f"{self.release}-dynquota"

    @property
    def user(self) -> str:
        return f"system:serviceaccount:{self.namespace}:{self.full}"

    def core(self, as_token: bool = True) -> Any:
        return kubernetes.client.CoreV1Api(self.token if as_token else self.admin)

    def custom(self, as_token: bool = True) -> Any:
        return kubernetes.client.CustomObjectsApi(self.token if as_token else self.admin)

    def admission(self, as_token: bool = True) -> Any:
        return kubernetes.client.AdmissionregistrationV1Api(self.token if as_token else self.admin)


@pytest.fixture(scope="module")
def bed(controlplane: LocalControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bed]:
    """The chart installed (defaults, but ``operator.excludeNamespaces`` holds one namespace
    and the admission-policy rule of issue 22 is off) and a token of its ServiceAccount."""
    cp = controlplane
    tag = uuid.uuid4().hex[:6]
    release, ns = f"dqm{tag}", f"dq-matrix-{tag}"
    tenant, excluded, optout = f"dq-tenant-{tag}", f"dq-excluded-{tag}", f"dq-optout-{tag}"
    home = tmp_path_factory.mktemp("helm-home")
    for name in (ns, tenant, excluded, optout):
        cp.kubectl("create", "namespace", name)
    cp.kubectl("label", "namespace", optout, "dynquota.io/managed=false")
    helm(cp, home, "install", release, str(CHART), "--namespace", ns,
          "--set", "rbac.budgetAdmissionPolicies=false", "--set", "writeRate.enabled=true",
          "--set", f"defaultPolicy.name={release}-default",
          "--set", f"operator.excludeNamespaces={{{excluded}}}")  # fmt: skip
    full = f"{release}-dynquota"
    admin = kubernetes.config.new_client_from_config(config_file=cp.kubeconfig)  # type: ignore[no-untyped-call]
    # The token of the leader's pod (bound to it, as a replica's projected token is) and the
    # Lease it holds: the chart's Lease fence (templates/lease-fence-policy.yaml) admits the
    # token's writes to dynquota's objects only from the holder, so every row meets the other
    # layers as a leaked leader token would.
    path = pod_kubeconfig(cp, kubernetes.client.CoreV1Api(admin),
                          tmp_path_factory.mktemp("token"), (ns, full), HOLDER)  # fmt: skip
    cp.kubectl("create", "-f", "-", input=json.dumps({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "dynquota", "namespace": ns},
        "spec": {"holderIdentity": HOLDER, "leaseDurationSeconds": 15}}))  # fmt: skip
    as_token = kubernetes.config.new_client_from_config(config_file=path)  # type: ignore[no-untyped-call]
    b = Bed(cp, release, ns, tenant, excluded, optout, admin, as_token)
    # The tenant namespace's managed quota, as the operator created it (through the token).
    b.core().create_namespaced_resource_quota(tenant, quota("dynquota", {"pods": "10"}),
                                              _request_timeout=TIMEOUT)  # fmt: skip
    # The policies reach the apiserver's admission through an informer: wait until the
    # operator-writes policy refuses (a kube-system quota, dry run: nothing is stored).
    wait_until(lambda: _refused_in_kube_system(b), "the operator-writes policy in force")
    try:
        yield b
    finally:
        helm(cp, home, "uninstall", release, "-n", ns, "--no-hooks", "--wait")
        for name in (ns, tenant, excluded, optout):
            cp.kubectl("delete", "namespace", name, "--wait=false")
        admin.close()
        as_token.close()


def _refused_in_kube_system(b: Bed) -> bool:
    try:
        b.core().create_namespaced_resource_quota(
            "kube-system", quota("dynquota", {"pods": "0"}), dry_run="All",
            _request_timeout=TIMEOUT,
        )  # fmt: skip
    except ApiException as exc:
        return exc.status == 403 and "operator-writes" in str(exc.body)
    return False


def quota(name: str, hard: dict[str, str], labels: dict[str, str] | None = None) -> dict[str, Any]:
    """A ResourceQuota body, labelled managed-by=dynquota unless ``labels`` says otherwise."""
    return {"metadata": {"name": name, "labels": MANAGED if labels is None else labels},
            "spec": {"hard": hard}}  # fmt: skip


def limit_range(name: str, item: dict[str, Any] | None = None) -> dict[str, Any]:
    """A labelled LimitRange with one Container ``item`` (default: ``max cpu: 1m``)."""
    item = {"type": "Container", "max": {"cpu": "1m"}} if item is None else item
    return {"metadata": {"name": name, "labels": MANAGED}, "spec": {"limits": [item]}}


def event(namespace: str, involved: dict[str, str]) -> dict[str, Any]:
    return {"metadata": {"name": f"e.{uuid.uuid4().hex[:12]}", "namespace": namespace},
            "involvedObject": involved, "reason": "Forged", "message": "forged", "type": "Normal",
            "source": {"component": "dynquota"}}  # fmt: skip


def deny_all_policy(name: str) -> dict[str, Any]:
    """What issue 23 created with the token: a labelled policy refusing every create."""
    return {"metadata": {"name": name, "labels": MANAGED},
            "spec": {"failurePolicy": "Fail",
                     "matchConstraints": {"resourceRules": [{
                         "apiGroups": ["*"], "apiVersions": ["*"], "resources": ["*"],
                         "operations": ["CREATE"]}]},
                     "validations": [{"expression": "false"}]}}  # fmt: skip


# -- the rows ------------------------------------------------------------------------------------

ADMITTED = None
POLICY = (
    "{kind} \"{name}\" is forbidden: ValidatingAdmissionPolicy '{full}-operator-writes' with "
    "binding '{full}-operator-writes' denied request: dynquota: "
)
WHO = "the operator's ServiceAccount "
NAME = WHO + "writes only the ResourceQuota and the LimitRange named dynquota."
LABEL = (
    WHO + "writes only objects labelled app.kubernetes.io/managed-by=dynquota (it never adopts, "
    "unlabels or changes another's)."
)
WHERE = (
    WHO + "never writes a ResourceQuota or LimitRange in kube-system, kube-public, "
    "kube-node-lease, its release namespace or operator.excludeNamespaces (nor outside "
    "operator.includeNamespaces when set)."
)
OPTED_OUT = (
    WHO + "never creates or updates a ResourceQuota or LimitRange in a namespace labelled "
    "dynquota.io/managed=false (it only removes its quota there)."
)
DEFAULTS_ONLY = (
    WHO + "writes a LimitRange with defaults only (default, defaultRequest): never max, min or "
    "maxLimitRequestRatio."
)
EVENTS = (
    WHO + "posts Events only about the managed ResourceQuota or LimitRange dynquota in a "
    "namespace it may manage, or about a Namespace, a DynamicQuotaPolicy or a QuotaBudget in "
    "the namespace default."
)


WAKE_ONLY = (
    WHO + "changes nothing on a ReplicaSet, StatefulSet, DaemonSet or Job but the annotation "
    "dynquota.io/wake (at most 64 "
    "characters), only in a namespace it may manage (never its spec, labels, owner references, "
    "finalizers or other annotations; never a create or a delete)."
)


APPLIED = (
    WHO + "writes only the AppliedDynamicQuota named dynquota, labelled "
    "app.kubernetes.io/managed-by=dynquota, in a namespace it may manage and not opted out with "
    "dynquota.io/managed=false."
)


def applied(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    """An AppliedDynamicQuota saying a false maximum, labelled unless ``labels`` says otherwise."""
    return {"apiVersion": "dynquota.io/v1alpha1", "kind": "AppliedDynamicQuota",
            "metadata": {"name": name, "labels": MANAGED if labels is None else labels},
            "status": {"state": "Enforced", "policy": {"name": "forged", "resources": {
                "pods": {"maximum": "100000"}}}}}  # fmt: skip


WAKE_MARK = {"metadata": {"annotations": {"dynquota.io/wake": "1"}}}


def rbac(verb: str, resource: str, group: str = "", namespace: str | None = None,
         name: str | None = None, kind: str | None = None) -> str:  # fmt: skip
    """The RBAC authorizer's exact message for the token."""
    what = f'{kind or resource} "{name}"' if name else (kind or resource)
    where = f'in the namespace "{namespace}"' if namespace else "at the cluster scope"
    return (f'{what} is forbidden: User "{{user}}" cannot {verb} resource "{resource}" in API '
            f'group "{group}" {where}')  # fmt: skip


@dataclass(frozen=True)
class Row:
    """One row of SECURITY.md's table: ``id``, the enforcing ``layer`` (``RBAC``,
    ``policy``, ``nothing``), the ``attempt`` (as the token; may prepare as admin), and the
    ``outcome``: ``None`` (admitted) or the exact 403 message, ``{user}``, ``{full}``,
    ``{tenant}``, ``{namespace}`` and ``{excluded}`` filled in."""

    id: str
    layer: str
    attempt: Callable[[Bed], object]
    outcome: str | None


def _delete_in_excluded(b: Bed) -> None:
    """The admin leaves a managed quota in the excluded namespace (as one enforced before
    operator.excludeNamespaces took the namespace out); the token deletes it."""
    with contextlib.suppress(ApiException):
        b.core(as_token=False).create_namespaced_resource_quota(
            b.excluded, quota("dynquota", {"pods": "10"}), _request_timeout=TIMEOUT
        )
    b.core().delete_namespaced_resource_quota("dynquota", b.excluded, _request_timeout=TIMEOUT)


def rbac_api(b: Bed) -> Any:
    """The token's RBAC API (``Any``: the body is a plain dict, not a generated model)."""
    return kubernetes.client.RbacAuthorizationV1Api(b.token)


def coordination(b: Bed) -> Any:
    """The token's coordination.k8s.io API (Leases)."""
    return kubernetes.client.CoordinationV1Api(b.token)


def _foreign_policy(b: Bed) -> str:
    name = f"third-party-{uuid.uuid4().hex[:6]}"
    body = deny_all_policy(name)
    body["metadata"]["labels"] = {"team": "security"}
    body["spec"]["validations"] = [{"expression": "true"}]
    b.admission(as_token=False).create_validating_admission_policy(body, _request_timeout=TIMEOUT)
    return name


def _foreign_binding(b: Bed) -> str:
    policy = _foreign_policy(b)
    b.admission(as_token=False).create_validating_admission_policy_binding(
        {"metadata": {"name": policy}, "spec": {"policyName": policy,
                                                "validationActions": ["Deny"]}},
        _request_timeout=TIMEOUT,
    )  # fmt: skip
    return policy


def _budget_status_write(b: Bed) -> None:
    """A QuotaBudget (created as admin, deleted after: a live budget changes what the chart's
    upgrades accept), its status forged as the token."""
    name = f"dq-matrix-{uuid.uuid4().hex[:6]}"
    admin = b.custom(as_token=False)
    admin.create_cluster_custom_object(
        "dynquota.io", "v1alpha1", "quotabudgets",
        {"apiVersion": "dynquota.io/v1alpha1", "kind": "QuotaBudget", "metadata": {"name": name},
         "spec": {"hard": {"pods": 1}}}, _request_timeout=TIMEOUT,
    )  # fmt: skip
    try:
        b.custom().patch_cluster_custom_object_status(
            "dynquota.io", "v1alpha1", "quotabudgets", name,
            {"status": {"namespaceCount": 0, "granted": {"pods": "100"}}},
            _request_timeout=TIMEOUT,
        )  # fmt: skip
    finally:
        admin.delete_cluster_custom_object("dynquota.io", "v1alpha1", "quotabudgets", name,
                                           _request_timeout=TIMEOUT)  # fmt: skip


def _lease_take(b: Bed) -> None:
    """Take the Lease as the token (holder ``mallory``), then give it back as admin: the later
    rows write as its holder again."""
    coordination(b).patch_namespaced_lease("dynquota", b.namespace,
                                           {"spec": {"holderIdentity": "mallory"}},
                                           _request_timeout=TIMEOUT)  # fmt: skip
    kubernetes.client.CoordinationV1Api(b.admin).patch_namespaced_lease(
        "dynquota", b.namespace, {"spec": {"holderIdentity": HOLDER}}, _request_timeout=TIMEOUT
    )


def apps(b: Bed) -> Any:
    """The token's apps/v1 API (ReplicaSets)."""
    return kubernetes.client.AppsV1Api(b.token)


def _replica_set(b: Bed, namespace: str | None = None) -> str:
    """The ReplicaSet ``web`` (0 replicas, so no pods) in ``namespace`` (default: the tenant
    namespace), created as admin if missing; its name."""
    template = {"metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "c", "image": PAUSE}]}}  # fmt: skip
    body = {"metadata": {"name": "web", "labels": {"app": "web"}},
            "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "web"}},
                     "template": template}}  # fmt: skip
    with contextlib.suppress(ApiException):
        kubernetes.client.AppsV1Api(b.admin).create_namespaced_replica_set(
            namespace or b.tenant, body, _request_timeout=TIMEOUT
        )
    return "web"


def batch(b: Bed) -> Any:
    """The token's batch/v1 API (Jobs)."""
    return kubernetes.client.BatchV1Api(b.token)


def _workload(b: Bed, kind: str) -> str:
    """The ``kind`` (StatefulSet, DaemonSet, Job) ``web`` in the tenant namespace, creating no
    pod (0 replicas; the test bed has no node for a DaemonSet; a suspended Job), created as
    admin if missing; its name."""
    labels = {"app": "web"}
    template = {"metadata": {"labels": labels},
                "spec": {"containers": [{"name": "c", "image": PAUSE}]}}  # fmt: skip
    meta = {"name": "web", "labels": labels}
    apps_admin = kubernetes.client.AppsV1Api(b.admin)
    with contextlib.suppress(ApiException):
        if kind == "StatefulSet":
            apps_admin.create_namespaced_stateful_set(b.tenant, {
                "metadata": meta, "spec": {"replicas": 0, "serviceName": "web",
                "selector": {"matchLabels": labels}, "template": template}},
                _request_timeout=TIMEOUT)  # fmt: skip
        elif kind == "DaemonSet":
            apps_admin.create_namespaced_daemon_set(b.tenant, {
                "metadata": meta,
                "spec": {"selector": {"matchLabels": labels}, "template": template}},
                _request_timeout=TIMEOUT)  # fmt: skip
        else:
            job_template = {"metadata": {"labels": labels},
                            "spec": {**template["spec"], "restartPolicy": "Never"}}  # fmt: skip
            kubernetes.client.BatchV1Api(b.admin).create_namespaced_job(b.tenant, {
                "metadata": {"name": "web"},
                "spec": {"suspend": True, "template": job_template}},
                _request_timeout=TIMEOUT)  # fmt: skip
    return "web"


def _a_node(b: Bed) -> str:
    """The Node ``dq-node`` (no kubelet: it only exists), created as admin if missing."""
    with contextlib.suppress(ApiException):
        kubernetes.client.CoreV1Api(b.admin).create_node(
            {"metadata": {"name": "dq-node"}}, _request_timeout=TIMEOUT
        )
    return "dq-node"


def _managed_quota_in_tenant(b: Bed) -> Any:
    return b.core().read_namespaced_resource_quota("dynquota", b.tenant, _request_timeout=TIMEOUT)


TARPIT = (
    WHO + "changes only the namespace lists of the tarpit FlowSchema's rules (writes of the "
    "chart's writeRate.resources by system:authenticated), never in kube-system, kube-public, "
    "kube-node-lease, its release namespace or operator.excludeNamespaces; nothing else of it, "
    "and no other FlowSchema."
)
FLOWCONTROL = "flowcontrol.apiserver.k8s.io"


def flow(b: Bed) -> Any:
    return kubernetes.client.FlowcontrolApiserverV1Api(b.token)


def _tarpit(b: Bed, spec: dict[str, Any]) -> object:
    """Patch the chart's tarpit FlowSchema (issue 32) as the token."""
    return flow(b).patch_flow_schema(f"{b.full}-tarpit", {"spec": spec}, _request_timeout=TIMEOUT)


def _tarpit_rules(b: Bed, namespaces: list[str], resources: list[str] | None = None) -> object:
    """The rules the operator writes (dynquota.policy.churn.tarpit_rules), namespaces and
    resources as given (the pure function would drop a system namespace or a lease)."""
    (rule,) = tarpit_rules([b.tenant], ["pods", "configmaps"], b.namespace)
    rule["resourceRules"][0]["namespaces"] = namespaces
    if resources is not None:
        rule["resourceRules"][0]["resources"] = resources
    return _tarpit(b, {"rules": [rule]})


TARPIT_DENIED = POLICY.format(kind=f"flowschemas.{FLOWCONTROL}", name="{full}-tarpit",
                              full="{full}") + TARPIT  # fmt: skip


# fmt: off
ROWS = [
    # -- admission objects: no verb at all (the chart installs every policy dynquota needs)
    Row("admission-policy-create", "RBAC",
        lambda b: b.admission().create_validating_admission_policy(
            deny_all_policy("dynquota-deny-all"), _request_timeout=TIMEOUT),
        rbac("create", "validatingadmissionpolicies", "admissionregistration.k8s.io",
             kind="validatingadmissionpolicies.admissionregistration.k8s.io")),
    Row("admission-policy-delete-foreign", "RBAC",
        lambda b: b.admission().delete_validating_admission_policy(
            _foreign_policy(b), _request_timeout=TIMEOUT),
        "FOREIGN_POLICY"),
    Row("admission-binding-delete-foreign", "RBAC",
        lambda b: b.admission().delete_validating_admission_policy_binding(
            _foreign_binding(b), _request_timeout=TIMEOUT),
        "FOREIGN_BINDING"),
    Row("admission-policy-delete-chart-guard", "RBAC",
        lambda b: b.admission().delete_validating_admission_policy(
            f"{b.full}-managed-quota", _request_timeout=TIMEOUT),
        rbac("delete", "validatingadmissionpolicies", "admissionregistration.k8s.io",
             name="{full}-managed-quota",
             kind="validatingadmissionpolicies.admissionregistration.k8s.io")),
    # -- quotas and LimitRanges: RBAC cannot pin name, label or namespace of a create
    Row("quota-kube-system", "policy",
        lambda b: b.core().create_namespaced_resource_quota(
            "kube-system", quota("dynquota", {"pods": "0"}), _request_timeout=TIMEOUT),
        POLICY.format(kind="resourcequotas", name="dynquota", full="{full}") + WHERE),
    Row("quota-release-namespace", "policy",
        lambda b: b.core().create_namespaced_resource_quota(
            b.namespace, quota("dynquota", {"pods": "0"}), _request_timeout=TIMEOUT),
        POLICY.format(kind="resourcequotas", name="dynquota", full="{full}") + WHERE),
    Row("quota-excluded-namespace", "policy",
        lambda b: b.core().create_namespaced_resource_quota(
            b.excluded, quota("dynquota", {"pods": "0"}), _request_timeout=TIMEOUT),
        POLICY.format(kind="resourcequotas", name="dynquota", full="{full}") + WHERE),
    Row("quota-foreign-name", "policy",
        lambda b: b.core().create_namespaced_resource_quota(
            b.tenant, quota("team-quota", {"pods": "0"}), _request_timeout=TIMEOUT),
        POLICY.format(kind="resourcequotas", name="team-quota", full="{full}") + NAME),
    Row("quota-unlabelled", "policy",
        lambda b: b.core().create_namespaced_resource_quota(
            "default", quota("dynquota", {"pods": "0"}, {}), _request_timeout=TIMEOUT),
        "UNLABELLED"),
    Row("quota-unlabel-managed", "policy",
        lambda b: b.core().patch_namespaced_resource_quota(
            "dynquota", b.tenant, {"metadata": {"labels": {"app.kubernetes.io/managed-by": None}}},
            _request_timeout=TIMEOUT),
        POLICY.format(kind="resourcequotas", name="dynquota", full="{full}") + LABEL),
    Row("quota-opted-out-namespace", "policy",
        lambda b: b.core().create_namespaced_resource_quota(
            b.optout, quota("dynquota", {"pods": "0"}), _request_timeout=TIMEOUT),
        POLICY.format(kind="resourcequotas", name="dynquota", full="{full}") + OPTED_OUT),
    Row("quota-patch-foreign", "RBAC",
        lambda b: b.core().patch_namespaced_resource_quota(
            "team-quota", b.tenant, {"spec": {"hard": {"pods": "0"}}}, _request_timeout=TIMEOUT),
        rbac("patch", "resourcequotas", namespace="{tenant}", name="team-quota")),
    Row("limitrange-kube-system", "policy",
        lambda b: b.core().create_namespaced_limit_range(
            "kube-system", limit_range("dynquota"), _request_timeout=TIMEOUT),
        POLICY.format(kind="limitranges", name="dynquota", full="{full}") + WHERE),
    Row("limitrange-foreign-name", "policy",
        lambda b: b.core().create_namespaced_limit_range(
            "default", limit_range("cpu-max"), _request_timeout=TIMEOUT),
        POLICY.format(kind="limitranges", name="cpu-max", full="{full}") + NAME),
    Row("limitrange-max", "policy",
        lambda b: b.core().create_namespaced_limit_range(
            b.tenant, limit_range("dynquota"), _request_timeout=TIMEOUT),
        POLICY.format(kind="limitranges", name="dynquota", full="{full}") + DEFAULTS_ONLY),
    Row("limitrange-opted-out-namespace", "policy",
        lambda b: b.core().create_namespaced_limit_range(
            b.optout, limit_range("dynquota", {"type": "Container",
                                              "defaultRequest": {"cpu": "100m"}}),
            _request_timeout=TIMEOUT),
        POLICY.format(kind="limitranges", name="dynquota", full="{full}") + OPTED_OUT),
    Row("limitrange-defaults", "nothing",
        lambda b: b.core().create_namespaced_limit_range(
            b.tenant, limit_range("dynquota", {"type": "Container",
                                              "defaultRequest": {"cpu": "100m"},
                                              "default": {"cpu": "1"}}),
            _request_timeout=TIMEOUT),
        ADMITTED),
    Row("limitrange-delete", "RBAC",
        lambda b: b.core().delete_namespaced_limit_range(
            "dynquota", b.tenant, _request_timeout=TIMEOUT),
        rbac("delete", "limitranges", namespace="{tenant}", name="dynquota")),
    # -- Events: only where dynquota's go
    Row("event-kube-system", "policy",
        lambda b: b.core().create_namespaced_event("kube-system", event(
            "kube-system", {"apiVersion": "v1", "kind": "Pod", "name": "x",
                            "namespace": "kube-system"}), _request_timeout=TIMEOUT),
        "EVENT"),
    Row("event-foreign-object", "policy",
        lambda b: b.core().create_namespaced_event(b.tenant, event(
            b.tenant, {"apiVersion": "v1", "kind": "Pod", "name": "web",
                       "namespace": b.tenant}), _request_timeout=TIMEOUT),
        "EVENT"),
    Row("event-wrong-apiversion", "policy",
        lambda b: b.core().create_namespaced_event(b.tenant, event(
            b.tenant, {"apiVersion": "dynquota.io/v1alpha1", "kind": "ResourceQuota",
                       "name": "dynquota", "namespace": b.tenant}), _request_timeout=TIMEOUT),
        "EVENT"),
    # -- everything else the operator has no verb on
    Row("secret-read", "RBAC",
        lambda b: b.core().list_namespaced_secret(b.tenant, _request_timeout=TIMEOUT),
        rbac("list", "secrets", namespace="{tenant}")),
    Row("namespace-patch", "RBAC",
        lambda b: b.core().patch_namespace(
            "kube-system", {"metadata": {"annotations": {"dynquota.io/kill-switch": "true"}}},
            _request_timeout=TIMEOUT),
        rbac("patch", "namespaces", namespace="kube-system", name="kube-system")),
    Row("pod-create", "RBAC",
        lambda b: b.core().create_namespaced_pod(
            b.tenant, {"metadata": {"name": "x"},
                       "spec": {"containers": [{"name": "c", "image": PAUSE}]}},
            _request_timeout=TIMEOUT),
        rbac("create", "pods", namespace="{tenant}")),
    Row("policy-write", "RBAC",
        lambda b: b.custom().patch_cluster_custom_object(
            "dynquota.io", "v1alpha1", "dynamicquotapolicies", f"{b.release}-default",
            {"spec": {"priority": 1}}, _request_timeout=TIMEOUT),
        rbac("patch", "dynamicquotapolicies", "dynquota.io", name="{release}-default",
             kind="dynamicquotapolicies.dynquota.io")),
    Row("budget-create", "RBAC",
        lambda b: b.custom().create_cluster_custom_object(
            "dynquota.io", "v1alpha1", "quotabudgets",
            {"apiVersion": "dynquota.io/v1alpha1", "kind": "QuotaBudget",
             "metadata": {"name": "x"}, "spec": {"hard": {"pods": "1"}}},
            _request_timeout=TIMEOUT),
        rbac("create", "quotabudgets", "dynquota.io", kind="quotabudgets.dynquota.io")),
    Row("rolebinding-create", "RBAC",
        lambda b: rbac_api(b).create_cluster_role_binding(
            {"metadata": {"name": "x"}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io",
             "kind": "ClusterRole", "name": "cluster-admin"},
             "subjects": [{"kind": "User", "name": "mallory"}]}, _request_timeout=TIMEOUT),
        rbac("create", "clusterrolebindings", "rbac.authorization.k8s.io",
             kind="clusterrolebindings.rbac.authorization.k8s.io")),
    Row("lease-node-heartbeat", "RBAC",
        lambda b: coordination(b).create_namespaced_lease("kube-node-lease", {
            "metadata": {"name": "node-1"}, "spec": {"holderIdentity": "node-1"}},
            _request_timeout=TIMEOUT),
        rbac("create", "leases", "coordination.k8s.io", namespace="kube-node-lease",
             kind="leases.coordination.k8s.io")),
    # -- what the token may do: no layer bounds it (SECURITY.md: the mitigation)
    Row("applied-kube-system", "policy",
        lambda b: b.custom().create_namespaced_custom_object(
            "dynquota.io", "v1alpha1", "kube-system", "applieddynamicquotas",
            applied("dynquota"), _request_timeout=TIMEOUT),
        POLICY.format(kind="applieddynamicquotas.dynquota.io", name="dynquota",
                      full="{full}") + APPLIED),
    Row("applied-foreign-name", "policy",
        lambda b: b.custom().create_namespaced_custom_object(
            "dynquota.io", "v1alpha1", b.tenant, "applieddynamicquotas",
            applied("team-view"), _request_timeout=TIMEOUT),
        "APPLIED_NAME"),
    Row("applied-unlabelled", "policy",
        lambda b: b.custom().create_namespaced_custom_object(
            "dynquota.io", "v1alpha1", b.tenant, "applieddynamicquotas",
            applied("dynquota", {}), _request_timeout=TIMEOUT),
        POLICY.format(kind="applieddynamicquotas.dynquota.io", name="dynquota",
                      full="{full}") + APPLIED),
    Row("applied-forged", "nothing",
        lambda b: b.custom().create_namespaced_custom_object(
            "dynquota.io", "v1alpha1", b.tenant, "applieddynamicquotas",
            applied("dynquota"), _request_timeout=TIMEOUT),
        ADMITTED),
    Row("lease-take", "nothing", _lease_take, ADMITTED),
    Row("quota-pods-zero-managed", "nothing",
        lambda b: b.core().patch_namespaced_resource_quota(
            "dynquota", b.tenant, {"spec": {"hard": {"pods": "0"}}}, _request_timeout=TIMEOUT),
        ADMITTED),
    Row("event-managed-quota", "nothing",
        lambda b: b.core().create_namespaced_event(b.tenant, event(
            b.tenant, {"apiVersion": "v1", "kind": "ResourceQuota", "name": "dynquota",
                       "namespace": b.tenant}), _request_timeout=TIMEOUT),
        ADMITTED),
    Row("configmap-read", "nothing",
        lambda b: b.core().list_config_map_for_all_namespaces(_request_timeout=TIMEOUT),
        ADMITTED),
    Row("policy-status-write", "nothing",
        lambda b: b.custom().patch_cluster_custom_object_status(
            "dynquota.io", "v1alpha1", "dynamicquotapolicies", f"{b.release}-default",
            {"status": {"namespaces": 0}}, _request_timeout=TIMEOUT),
        ADMITTED),
    Row("budget-status-write", "nothing",
        _budget_status_write,
        ADMITTED),
    Row("quota-delete-managed", "nothing",
        lambda b: b.core().delete_namespaced_resource_quota(
            "dynquota", b.tenant, _request_timeout=TIMEOUT),
        ADMITTED),
    Row("quota-delete-excluded-namespace", "nothing", _delete_in_excluded, ADMITTED),
    # the wake (issue 26): only the annotation dynquota.io/wake on a ReplicaSet
    Row("replicaset-wake-mark", "nothing",
        lambda b: apps(b).patch_namespaced_replica_set(
            _replica_set(b), b.tenant, {"metadata": {"annotations": {"dynquota.io/wake": "1"}}},
            _request_timeout=TIMEOUT),
        ADMITTED),
    Row("replicaset-list-templates", "nothing",
        lambda b: apps(b).list_namespaced_replica_set(b.tenant, _request_timeout=TIMEOUT),
        ADMITTED),
    Row("replicaset-scale", "policy",
        lambda b: apps(b).patch_namespaced_replica_set(
            _replica_set(b), b.tenant, {"spec": {"replicas": 5}}, _request_timeout=TIMEOUT),
        POLICY.format(kind="replicasets.apps", name="web", full="{full}") + WAKE_ONLY),
    Row("replicaset-template", "policy",
        lambda b: apps(b).patch_namespaced_replica_set(
            _replica_set(b), b.tenant,
            {"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "evil"}]}}}},
            _request_timeout=TIMEOUT),
        POLICY.format(kind="replicasets.apps", name="web", full="{full}") + WAKE_ONLY),
    Row("replicaset-other-annotation", "policy",
        lambda b: apps(b).patch_namespaced_replica_set(
            _replica_set(b), b.tenant,
            {"metadata": {"annotations": {"dynquota.io/wake": "2", "team": "x"}}},
            _request_timeout=TIMEOUT),
        POLICY.format(kind="replicasets.apps", name="web", full="{full}") + WAKE_ONLY),
    Row("replicaset-wake-kube-system", "policy",
        lambda b: apps(b).patch_namespaced_replica_set(
            _replica_set(b, "kube-system"), "kube-system",
            {"metadata": {"annotations": {"dynquota.io/wake": "1"}}}, _request_timeout=TIMEOUT),
        POLICY.format(kind="replicasets.apps", name="web", full="{full}") + WAKE_ONLY),
    Row("replicaset-wake-opted-out", "policy",
        lambda b: apps(b).patch_namespaced_replica_set(
            _replica_set(b, b.optout), b.optout,
            {"metadata": {"annotations": {"dynquota.io/wake": "1"}}}, _request_timeout=TIMEOUT),
        POLICY.format(kind="replicasets.apps", name="web", full="{full}") + WAKE_ONLY),
    Row("replicaset-wake-long-value", "policy",
        lambda b: apps(b).patch_namespaced_replica_set(
            _replica_set(b), b.tenant,
            {"metadata": {"annotations": {"dynquota.io/wake": "x" * 65}}},
            _request_timeout=TIMEOUT),
        POLICY.format(kind="replicasets.apps", name="web", full="{full}") + WAKE_ONLY),
    Row("replicaset-delete", "RBAC",
        lambda b: apps(b).delete_namespaced_replica_set(
            _replica_set(b), b.tenant, _request_timeout=TIMEOUT),
        rbac("delete", "replicasets", "apps", namespace="{tenant}", name="web",
             kind="replicasets.apps")),
    # the same wake mark on the other kinds the quota refuses pods to
    Row("statefulset-wake-mark", "nothing",
        lambda b: apps(b).patch_namespaced_stateful_set(
            _workload(b, "StatefulSet"), b.tenant, WAKE_MARK, _request_timeout=TIMEOUT),
        ADMITTED),
    Row("statefulset-scale", "policy",
        lambda b: apps(b).patch_namespaced_stateful_set(
            _workload(b, "StatefulSet"), b.tenant, {"spec": {"replicas": 5}},
            _request_timeout=TIMEOUT),
        POLICY.format(kind="statefulsets.apps", name="web", full="{full}") + WAKE_ONLY),
    Row("daemonset-wake-mark", "nothing",
        lambda b: apps(b).patch_namespaced_daemon_set(
            _workload(b, "DaemonSet"), b.tenant, WAKE_MARK, _request_timeout=TIMEOUT),
        ADMITTED),
    Row("daemonset-template", "policy",
        lambda b: apps(b).patch_namespaced_daemon_set(
            _workload(b, "DaemonSet"), b.tenant,
            {"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "evil"}]}}}},
            _request_timeout=TIMEOUT),
        POLICY.format(kind="daemonsets.apps", name="web", full="{full}") + WAKE_ONLY),
    Row("job-wake-mark", "nothing",
        lambda b: batch(b).patch_namespaced_job(
            _workload(b, "Job"), b.tenant, WAKE_MARK, _request_timeout=TIMEOUT),
        ADMITTED),
    Row("job-resume", "policy",
        lambda b: batch(b).patch_namespaced_job(
            _workload(b, "Job"), b.tenant, {"spec": {"suspend": False}},
            _request_timeout=TIMEOUT),
        POLICY.format(kind="jobs.batch", name="web", full="{full}") + WAKE_ONLY),
    Row("job-delete", "RBAC",
        lambda b: batch(b).delete_namespaced_job(
            _workload(b, "Job"), b.tenant, _request_timeout=TIMEOUT),
        rbac("delete", "jobs", "batch", namespace="{tenant}", name="web", kind="jobs.batch")),
    # node growth (issue 26): when each Node was created; nothing written to Nodes
    Row("node-list", "nothing",
        lambda b: b.core().list_node(_request_timeout=TIMEOUT),
        ADMITTED),
    Row("node-cordon", "RBAC",
        lambda b: b.core().patch_node(
            _a_node(b), {"spec": {"unschedulable": True}}, _request_timeout=TIMEOUT),
        rbac("patch", "nodes", name="dq-node", kind="nodes")),
    # the write-rate governor's tarpit (issue 32, writeRate.enabled)
    Row("flowschema-tarpit-namespaces", "nothing",
        lambda b: _tarpit_rules(b, [b.tenant]), ADMITTED),
    Row("flowschema-tarpit-kube-system", "policy",
        lambda b: _tarpit_rules(b, ["kube-system"]), TARPIT_DENIED),
    Row("flowschema-tarpit-release-namespace", "policy",
        lambda b: _tarpit_rules(b, [b.namespace]), TARPIT_DENIED),
    Row("flowschema-tarpit-all-namespaces", "policy",
        lambda b: _tarpit_rules(b, ["*"]), TARPIT_DENIED),
    Row("flowschema-tarpit-leases", "policy",
        lambda b: _tarpit_rules(b, [b.tenant], ["leases"]), TARPIT_DENIED),
    Row("flowschema-tarpit-precedence", "policy",
        lambda b: _tarpit(b, {"matchingPrecedence": 100}), TARPIT_DENIED),
    Row("flowschema-create", "RBAC",
        lambda b: flow(b).create_flow_schema(
            {"metadata": {"name": "x"}, "spec": {
                "priorityLevelConfiguration": {"name": f"{b.full}-tarpit"},
                "matchingPrecedence": 2, "rules": [{
                    "subjects": [{"kind": "Group", "group": {"name": "system:authenticated"}}],
                    "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}]}]}},
            _request_timeout=TIMEOUT),
        rbac("create", "flowschemas", FLOWCONTROL, kind=f"flowschemas.{FLOWCONTROL}")),
    Row("flowschema-patch-builtin", "RBAC",
        lambda b: flow(b).patch_flow_schema(
            "kube-controller-manager", {"spec": {"matchingPrecedence": 9500}},
            _request_timeout=TIMEOUT),
        rbac("patch", "flowschemas", FLOWCONTROL, name="kube-controller-manager",
             kind=f"flowschemas.{FLOWCONTROL}")),
    Row("prioritylevel-patch", "RBAC",
        lambda b: flow(b).patch_priority_level_configuration(
            f"{b.full}-tarpit", {"spec": {"limited": {"nominalConcurrencyShares": 0}}},
            _request_timeout=TIMEOUT),
        rbac("patch", "prioritylevelconfigurations", FLOWCONTROL, name="{full}-tarpit",
             kind=f"prioritylevelconfigurations.{FLOWCONTROL}")),
    Row("workloads-list-templates", "nothing",
        lambda b: (apps(b).list_stateful_set_for_all_namespaces(_request_timeout=TIMEOUT),
                   apps(b).list_daemon_set_for_all_namespaces(_request_timeout=TIMEOUT),
                   batch(b).list_job_for_all_namespaces(_request_timeout=TIMEOUT)),
        ADMITTED),
]
# fmt: on


def _expected(b: Bed, row: Row) -> str | None:
    if row.outcome is None:
        return None
    special = {
        "FOREIGN_POLICY": rbac("delete", "validatingadmissionpolicies",
                               "admissionregistration.k8s.io", name="{name}",
                               kind="validatingadmissionpolicies.admissionregistration.k8s.io"),
        "FOREIGN_BINDING": rbac("delete", "validatingadmissionpolicybindings",
                                "admissionregistration.k8s.io", name="{name}",
                                kind="validatingadmissionpolicybindings.admissionregistration.k8s.io"),
        "UNLABELLED": POLICY.format(kind="resourcequotas", name="dynquota", full="{full}") + LABEL,
        "APPLIED_NAME": POLICY.format(kind="applieddynamicquotas.dynquota.io", name="team-view",
                                      full="{full}") + APPLIED,
        "EVENT": POLICY.format(kind="events", name="{event}", full="{full}") + EVENTS,
    }  # fmt: skip
    text = special.get(row.outcome, row.outcome)
    return (
        text.replace("{user}", b.user)
        .replace("{release}", b.release)
        .replace("{full}", b.full)
        .replace("{tenant}", b.tenant)
        .replace("{namespace}", b.namespace)
        .replace("{excluded}", b.excluded)
    )


@pytest.mark.parametrize("row", ROWS, ids=[r.id for r in ROWS])
def test_leaked_token_row(bed: Bed, row: Row) -> None:
    """The row's attempt, as the operator's token, has exactly the row's outcome."""
    expected = _expected(bed, row)
    if expected is None:
        row.attempt(bed)
        return
    with pytest.raises(ApiException) as refused:
        row.attempt(bed)
    assert refused.value.status == 403, refused.value.body
    message = json.loads(refused.value.body or "{}")["message"]
    if "{name}" in expected or "{event}" in expected:  # a generated name: compare around it
        head, tail = expected.split("{name}" if "{name}" in expected else "{event}")
        assert message.startswith(head), message
        assert message.endswith(tail), message
        return
    assert message == expected
