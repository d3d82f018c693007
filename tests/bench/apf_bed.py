"""The bed of the API Priority and Fairness benchmark (``test_apf_bench.py``): a control plane
whose components have their own identities, three namespaces, one tenant ServiceAccount
acting in two of them, tarpit objects applied and proven in effect, and the readings each run
takes (APF counters from ``/metrics``, CPU of kube-apiserver and etcd, load average).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import kubernetes
import yaml
from kubernetes.client.exceptions import ApiException

from dynquota.testing.apf import FlowCounts, flow_counts
from dynquota.testing.apfload import Target
from dynquota.testing.controlplane import LocalControlPlane
from dynquota.testing.rbac import bind_cluster_role
from dynquota.testing.wait import wait_until

CHURN_NS = "apf-churn"
QUIET_NS = "apf-quiet"
OTHER_NS = "apf-other"
"""Another tenant's namespace (its Deployment in the kube-controller-manager part)."""
SA_NS, SA_NAME = "apf-ci", "ci"
SA_USER = f"system:serviceaccount:{SA_NS}:{SA_NAME}"
TARPIT = "dynquota-bench-tarpit"
"""Name of the tarpit PriorityLevelConfiguration and of the FlowSchema catching the churn."""
PRECEDENCE = 1000
"""The tarpit FlowSchema's, where the chart puts it: after every system schema
(kube-system-service-accounts is 900), before the tenants' (service-accounts 9000,
global-default 9900)."""
AUTHENTICATED = [{"kind": "Group", "group": {"name": "system:authenticated"}}]
"""The tarpit's subjects: anyone; the schemas matched first keep the system's requests out."""
TIMEOUT = 30
"""Seconds per API call of the bed (the admin's, exempt from APF)."""


@dataclass
class Bed:
    """The control plane, an admin client (official sync client) and the tenant's target."""

    cp: LocalControlPlane
    api: kubernetes.client.ApiClient
    tenant: Target

    def apply(self, objects: Sequence[Mapping[str, Any]]) -> None:
        """Create or replace ``objects`` as admin (kubectl apply)."""
        self.cp.kubectl(
            "apply", "--request-timeout=30s", "-f", "-", input=yaml.safe_dump_all(objects)
        )

    def delete(self, kind: str, *names: str) -> None:
        """Delete cluster-scoped objects ``names`` of ``kind`` if they exist."""
        if names:
            self.cp.kubectl("delete", kind, *names, "--ignore-not-found", "--request-timeout=30s")

    def flow_counts(self) -> dict[tuple[str, str], FlowCounts]:
        """The apiserver's APF counters now, per (flow_schema, priority_level)."""
        return flow_counts(self.cp.kubectl("get", "--raw", "/metrics", "--request-timeout=30s"))

    def schema_of_write(self, namespace: str, token: str | None = None) -> str:
        """The FlowSchema the apiserver matches a ConfigMap create in ``namespace`` by the
        tenant (or by ``token``'s user) to: a dry-run create, whose answer (a 403 too: APF
        classifies before authorization) carries ``X-Kubernetes-PF-FlowSchema-UID``."""
        config = kubernetes.client.Configuration()
        config.host = self.tenant.server
        config.ssl_ca_cert = self.tenant.ca_file
        config.api_key = {"authorization": f"Bearer {token or self.tenant.token}"}
        with kubernetes.client.ApiClient(config) as api:
            core: Any = kubernetes.client.CoreV1Api(api)
            try:
                _, _, headers = core.create_namespaced_config_map_with_http_info(
                    namespace,
                    {"metadata": {"generateName": "probe-"}},
                    dry_run="All",
                    _request_timeout=TIMEOUT,
                )
            except ApiException as exc:  # 429 from a tarpit, 403: classified all the same
                headers = exc.headers or {}
        uid = headers.get("X-Kubernetes-PF-FlowSchema-UID", "")
        flow: Any = kubernetes.client.FlowcontrolApiserverV1Api(self.api)
        schemas = flow.list_flow_schema(_request_timeout=TIMEOUT).items
        return next((s.metadata.name for s in schemas if s.metadata.uid == uid), f"uid {uid}")

    def await_schema(self, namespace: str, schema: str, token: str | None = None) -> None:
        """Wait (30 s at most) until writes in ``namespace`` by the tenant (or ``token``'s
        user) match ``schema``: the apiserver reads FlowSchemas from an informer, so a change
        takes a moment."""
        wait_until(
            lambda: self.schema_of_write(namespace, token) == schema,
            f"writes in {namespace} matched by FlowSchema {schema}",
            timeout=30,
            interval=0.2,
        )

    def component_token(self, name: str) -> str:
        """The bearer token component ``name`` (``kube-controller-manager``, ...) runs with."""
        with open(self.cp.component_kubeconfig(name)) as config:
            token: str = yaml.safe_load(config)["users"][0]["user"]["token"]
        return token

    def sweep(self, *namespaces: str) -> None:
        """Delete the benchmark's ConfigMaps (label ``dynquota-bench``) in ``namespaces``."""
        core: Any = kubernetes.client.CoreV1Api(self.api)
        for ns in namespaces:
            core.delete_collection_namespaced_config_map(
                ns, label_selector="dynquota-bench", _request_timeout=TIMEOUT
            )

    def cpu_seconds(self) -> float:
        """CPU seconds (user + system) kube-apiserver and etcd have used so far."""
        ticks = os.sysconf("SC_CLK_TCK")
        total = 0.0
        for name in ("kube-apiserver", "etcd"):
            with open(f"/proc/{self.cp.pid(name)}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / ticks  # utime, stime
        return total


def load_average() -> str:
    """The 1-, 5- and 15-minute load averages (as ``uptime`` prints them)."""
    return " ".join(f"{v:.1f}" for v in os.getloadavg())


@contextmanager
def apf_bed(**control_plane: Any) -> Iterator[Bed]:
    """A private control plane (components with their own identities, no nodes unless
    ``control_plane`` says otherwise: more ``LocalControlPlane`` arguments), the namespaces,
    and the tenant: ServiceAccount ``apf-ci/ci`` with ``edit`` in the churn, quiet and other
    namespaces and a 2-hour TokenRequest token."""
    with LocalControlPlane(component_identities=True, **control_plane) as cp:
        api = kubernetes.config.new_client_from_config(config_file=cp.kubeconfig)  # type: ignore[no-untyped-call]
        try:
            core: Any = kubernetes.client.CoreV1Api(api)
            for ns in (SA_NS, CHURN_NS, QUIET_NS, OTHER_NS):
                core.create_namespace({"metadata": {"name": ns}}, _request_timeout=TIMEOUT)
            core.create_namespaced_service_account(
                SA_NS, {"metadata": {"name": SA_NAME}}, _request_timeout=TIMEOUT
            )
            for ns in (CHURN_NS, QUIET_NS, OTHER_NS):
                bind_cluster_role(api, ns, SA_USER, "edit")
            token = core.create_namespaced_service_account_token(
                SA_NAME, SA_NS, {"spec": {"expirationSeconds": 7200}}, _request_timeout=TIMEOUT
            ).status.token
            bed = Bed(cp, api, Target(cp.server, str(cp.ca_file), token))
            # RBAC is read from an informer too: wait until the tenant may write
            bed.await_schema(CHURN_NS, "service-accounts")
            yield bed
        finally:
            api.close()


def tarpit_counts(
    before: Mapping[tuple[str, str], FlowCounts], after: Mapping[tuple[str, str], FlowCounts]
) -> dict[str, FlowCounts]:
    """Per flow_schema, the requests dispatched and rejected between two readings (schemas
    with none left out)."""
    out: dict[str, FlowCounts] = {}
    for key, now in after.items():
        delta = now - before.get(key, FlowCounts())
        if delta.dispatched or delta.rejected:
            out[key[0]] = delta
    return out


def describe(counts: Mapping[str, FlowCounts], schemas: Sequence[str]) -> str:
    """``schema d/r`` (dispatched/rejected) for ``schemas``, e.g. ``service-accounts 512/0``."""
    parts = []
    for schema in schemas:
        c = counts.get(schema, FlowCounts())
        parts.append(f"{schema} {c.dispatched:.0f}/{c.rejected:.0f}")
    return ", ".join(parts)
