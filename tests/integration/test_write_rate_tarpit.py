"""The chart's APF tarpit (issue 32, ``writeRate.enabled``) on the real apiserver: the rules the
operator writes (``dynquota.policy.churn.tarpit_rules``, patched as the operator's token) send
a tenant's writes in a held namespace to the tarpit, and never the operator's own writes, an
administrators' group's, nor kube-controller-manager's (its controllers act as their
ServiceAccounts, matched by ``kube-system-service-accounts`` at 900 first: the test bed's
default identities)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kubernetes
import pytest
from kubernetes.client.exceptions import ApiException

from dynquota.policy.churn import tarpit_rules
from dynquota.testing.apf import flow_counts
from dynquota.testing.chart import helm
from dynquota.testing.controlplane import LocalControlPlane
from dynquota.testing.podtoken import service_account_token
from dynquota.testing.rbac import bind_cluster_role
from dynquota.testing.wait import wait_until

CHART = Path(__file__).resolve().parents[2] / "helm" / "dynquota"
TIMEOUT = 10  # seconds, every API call
TENANT_SA = "ci"


@dataclass
class Bed:
    cp: LocalControlPlane
    full: str  # the release's full name
    release_ns: str
    tenant: str  # the namespace put in the tarpit
    admin: kubernetes.client.ApiClient
    tokens: dict[str, str]  # "operator", "tenant"
    release: str = ""
    home: Path = Path()  # helm's config, cache and data

    def client(self, who: str, headers: dict[str, str] | None = None) -> Any:
        """A sync client as ``who`` (``admin`` or a key of ``tokens``), sending ``headers``."""
        config = kubernetes.client.Configuration()
        config.host = self.cp.server
        config.ssl_ca_cert = str(self.cp.ca_file)
        token = self.cp.admin_token if who == "admin" else self.tokens[who]
        config.api_key = {"authorization": f"Bearer {token}"}
        api = kubernetes.client.ApiClient(config)
        for name, value in (headers or {}).items():
            api.set_default_header(name, value)
        return api


@pytest.fixture(scope="module")
def bed(controlplane: LocalControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bed]:
    cp = controlplane
    tag = uuid.uuid4().hex[:6]
    release, release_ns, tenant = f"dqt{tag}", f"dq-tarpit-{tag}", f"dq-held-{tag}"
    home = tmp_path_factory.mktemp("helm-home")
    for name in (release_ns, tenant):
        cp.kubectl("create", "namespace", name)
    helm(cp, home, "install", release, str(CHART), "--namespace", release_ns,
          "--set", "writeRate.enabled=true", "--set", "writeRate.bypassGroups={platform-admins}",
          "--set", f"defaultPolicy.name={release}-default")  # fmt: skip
    admin = kubernetes.config.new_client_from_config(config_file=cp.kubeconfig)  # type: ignore[no-untyped-call]
    core: Any = kubernetes.client.CoreV1Api(admin)
    full = f"{release}-dynquota"
    core.create_namespaced_service_account(tenant, {"metadata": {"name": TENANT_SA}},
                                           _request_timeout=TIMEOUT)  # fmt: skip
    bind_cluster_role(admin, tenant, f"system:serviceaccount:{tenant}:{TENANT_SA}", "edit")
    tokens = {
        "operator": service_account_token(core, full, release_ns),
        "tenant": service_account_token(core, TENANT_SA, tenant),
    }
    try:
        yield Bed(cp, full, release_ns, tenant, admin, tokens, release, home)
    finally:
        helm(cp, home, "uninstall", release, "-n", release_ns, "--no-hooks", "--wait")
        for name in (release_ns, tenant):
            cp.kubectl("delete", "namespace", name, "--wait=false")
        admin.close()


def schema_of_write(b: Bed, who: str, headers: dict[str, str] | None = None) -> str:
    """The FlowSchema a dry-run ConfigMap create in the held namespace is matched by (APF
    classifies before authorization: a 403 answer carries it too)."""
    with b.client(who, headers) as api:
        core: Any = kubernetes.client.CoreV1Api(api)
        try:
            _, _, answer = core.create_namespaced_config_map_with_http_info(
                b.tenant, {"metadata": {"generateName": "probe-"}}, dry_run="All",
                _request_timeout=TIMEOUT,
            )  # fmt: skip
        except ApiException as exc:
            answer = exc.headers or {}
    uid = answer.get("X-Kubernetes-PF-FlowSchema-UID", "")
    flow: Any = kubernetes.client.FlowcontrolApiserverV1Api(b.admin)
    schemas = flow.list_flow_schema(_request_timeout=TIMEOUT).items
    return next((s.metadata.name for s in schemas if s.metadata.uid == uid), f"uid {uid!r}")


def test_tarpit_holds_the_tenant_only(bed: Bed) -> None:
    b = bed
    # at rest: no rules, nobody's request is matched by the tarpit
    assert schema_of_write(b, "tenant") == "service-accounts"
    # the operator's token lists the namespace, with the rules the governor computes
    with b.client("operator") as api:
        flow: Any = kubernetes.client.FlowcontrolApiserverV1Api(api)
        rules = tarpit_rules([b.tenant, "kube-system"], ["pods", "configmaps"], b.release_ns)
        flow.patch_flow_schema(f"{b.full}-tarpit", {"spec": {"rules": rules}},
                               _request_timeout=TIMEOUT)  # fmt: skip
    wait_until(lambda: schema_of_write(b, "tenant") == f"{b.full}-tarpit",
               "the tenant's writes in the held namespace matched by the tarpit")  # fmt: skip
    assert schema_of_write(b, "operator") == f"{b.full}-tarpit-bypass"
    admin_group = {"Impersonate-User": "alice", "Impersonate-Group": "platform-admins"}
    assert schema_of_write(b, "admin", admin_group) == f"{b.full}-tarpit-bypass-admins"
    assert schema_of_write(b, "admin") == "exempt"

    # kube-controller-manager's writes in the held namespace are matched earlier
    before = flow_counts(b.cp.kubectl("get", "--raw", "/metrics"))
    b.cp.kubectl("create", "deployment", "web", "-n", b.tenant, "--image=pause", "--replicas=5")
    wait_until(
        lambda: len(b.cp.kubectl("get", "pods", "-n", b.tenant, "-o", "name").split()) == 5,
        "5 pods created by the ReplicaSet controller in the held namespace",
    )
    after = flow_counts(b.cp.kubectl("get", "--raw", "/metrics"))

    def grew(schema: str) -> float:
        return sum(
            (c.dispatched + c.rejected)
            - (before[k].dispatched + before[k].rejected if k in before else 0)
            for k, c in after.items()
            if k[0] == schema
        )

    assert grew("kube-system-service-accounts") >= 6  # the ReplicaSet and its 5 pods at least
    assert grew(f"{b.full}-tarpit") == 0


def test_a_helm_upgrade_keeps_the_rules_and_a_forced_one_resets_them(bed: Bed) -> None:
    """What a `helm upgrade` mid-incident does to the namespaces the operator listed (measured
    here: helm 3's three-way merge leaves a field no manifest sets; `--force` replaces the
    object with the chart's, rules-less): the governor re-reads the FlowSchema every 10 s while
    it holds a namespace and writes the rules again (test_write_rate_governor.py)."""
    b = bed
    name = f"{b.full}-tarpit"
    rules = tarpit_rules([b.tenant], ["pods", "configmaps"], b.release_ns)
    with b.client("operator") as api:
        flow: Any = kubernetes.client.FlowcontrolApiserverV1Api(api)
        flow.patch_flow_schema(name, {"spec": {"rules": rules}}, _request_timeout=TIMEOUT)

    def listed() -> list[str]:
        admin: Any = kubernetes.client.FlowcontrolApiserverV1Api(b.admin)
        schema = admin.read_flow_schema(name, _request_timeout=TIMEOUT)
        return sorted(
            ns
            for rule in schema.spec.rules or []
            for resource in rule.resource_rules or []
            for ns in resource.namespaces or []
        )

    assert listed() == [b.tenant]
    common = ["--namespace", b.release_ns, "--reuse-values"]
    helm(b.cp, b.home, "upgrade", b.release, str(CHART), *common)
    assert listed() == [b.tenant]  # kept
    helm(b.cp, b.home, "upgrade", b.release, str(CHART), *common, "--force")
    assert listed() == []  # replaced by the chart's: no rules
