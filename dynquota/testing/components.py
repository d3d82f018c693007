"""The local control plane's components: where their binaries come from, and the command
lines and configuration they run with (pure, apart from finding the binaries).

:class:`dynquota.testing.controlplane.LocalControlPlane` starts them; keeping their flags here
lets a reader see every component's configuration in one place.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dynquota.testing.processes import build_assets

__all__ = [
    "ADMIN_USER",
    "ASSETS_ENV",
    "BINARIES",
    "COMPONENT_USERS",
    "CONTROLLERS",
    "KWOK_ASSETS_ENV",
    "NODE_CONTROLLERS",
    "NODE_PREFIX",
    "ControlPlaneError",
    "apiserver_args",
    "audit_args",
    "controller_manager_args",
    "etcd_args",
    "find_binaries",
    "find_kwok",
    "kwok_args",
    "kwok_nodes",
    "kwok_rbac",
]

BINARIES = (
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kubectl",
    "helm",
)
ASSETS_ENV = "DYNQUOTA_CONTROLPLANE_ASSETS"
CONTROLLERS = (
    "resourcequota-controller",
    "replicaset-controller",
    "deployment-controller",
    # the wake's StatefulSets (issue 26): their pods stay Pending without nodes, charged all the
    # same (the job controller runs with nodes only: tests that stand in for it patch Job status)
    "statefulset-controller",
    "namespace-controller",
    "serviceaccount-controller",
    "serviceaccount-token-controller",
    "root-ca-certificate-publisher-controller",
    "garbage-collector-controller",
    "pod-garbage-collector-controller",
    # aggregates the chart's tenant ClusterRole into admin/edit
    "clusterrole-aggregation-controller",
)
# Added with nodes: a DaemonSet gets a pod per node, Jobs run to completion and are cleaned up,
# a silent node is marked NotReady/Unknown and tainted, and its pods are evicted after their
# tolerationSeconds.
NODE_CONTROLLERS = (
    "daemonset-controller",
    "job-controller",
    "ttl-after-finished-controller",
    "node-lifecycle-controller",
    "taint-eviction-controller",
)
ADMIN_USER = "dynquota-admin"
# The components' own identities (``LocalControlPlane(component_identities=True)``, the default):
# user and groups of each one's static token, as a kubeadm cluster gives them client
# certificates, so API Priority and Fairness classifies them as on a real cluster (FlowSchemas
# `kube-controller-manager` and `kube-scheduler` at precedence 800; the controllers' own
# ServiceAccounts in kube-system, `kube-system-service-accounts` at 900; kubelets, simulated by
# kwok, `system-node-high`/`system-nodes` at 400/500) and none of them is exempt
# (system:masters) from it. The bootstrap RBAC policy binds the first two; kwok (one process
# for every simulated kubelet, so it cannot be one `system:node:<name>` for the Node
# authorizer) gets :func:`kwok_rbac`.
COMPONENT_USERS: dict[str, tuple[str, tuple[str, ...]]] = {
    "kube-controller-manager": ("system:kube-controller-manager", ()),
    "kube-scheduler": ("system:kube-scheduler", ()),
    "kwok": ("system:kwok", ("system:nodes",)),
}

# --- simulated nodes (kwok) ------------------------------------------------------------------
KWOK_ASSETS_ENV = "DYNQUOTA_KWOK_ASSETS"
# kwok manages the Nodes carrying this annotation; removing it makes a node fall silent.
KWOK_NODE_ANNOTATION = ("kwok.x-k8s.io/node", "fake")
NODE_PREFIX = "kwok-node-"
# Pod IPs kwok hands out: far from the Service range (10.0.0.0/24), room for millions of pods.
KWOK_POD_CIDR = "10.64.0.0/10"


class ControlPlaneError(RuntimeError):
    """A component failed to build, start or become ready; the message names it and its log."""


def find_binaries() -> Path:
    """Return the directory holding the control-plane binaries, building them when missing.

    Uses ``$DYNQUOTA_CONTROLPLANE_ASSETS`` when it holds every binary; otherwise runs
    ``hack/controlplane/build.sh`` from this source tree (a cold build takes tens of minutes).

    Raises:
        ControlPlaneError: no binaries and no build script, or the build failed.
    """
    missing = f"control-plane binaries not found: set {ASSETS_ENV} to a directory holding "
    missing += ", ".join(BINARIES)
    return build_assets("controlplane", ControlPlaneError, ASSETS_ENV, _has_binaries, missing)


def _has_binaries(directory: Path) -> bool:
    return all(os.access(directory / b, os.X_OK) for b in BINARIES)


def find_kwok() -> Path:
    """Return the directory holding ``kwok`` and ``stages.yaml``, building them when missing.

    Uses ``$DYNQUOTA_KWOK_ASSETS`` when it holds both; otherwise runs ``hack/kwok/build.sh``
    (``go install sigs.k8s.io/kwok/cmd/kwok@<version>``, a few minutes cold).

    Raises:
        ControlPlaneError: no kwok and no build script, or the build failed.
    """
    return build_assets(
        "kwok",
        ControlPlaneError,
        KWOK_ASSETS_ENV,
        lambda d: os.access(d / "kwok", os.X_OK) and (d / "stages.yaml").exists(),
        f"kwok not found: set {KWOK_ASSETS_ENV} to a directory holding kwok and stages.yaml",
    )


def etcd_args(data_dir: Path, client_url: str, peer_url: str) -> list[str]:
    """etcd's flags: one member on loopback, data in ``data_dir``."""
    return [
        "--name=default",
        f"--data-dir={data_dir}",
        f"--listen-client-urls={client_url}",
        f"--advertise-client-urls={client_url}",
        f"--listen-peer-urls={peer_url}",
        f"--initial-advertise-peer-urls={peer_url}",
        f"--initial-cluster=default={peer_url}",
        # test data only: losing it on a crash is fine, and fsync dominates on CI disks
        "--unsafe-no-fsync",
        "--log-level=warn",
    ]


def apiserver_args(etcd_url: str, port: int, pki: Path, extra: Sequence[str]) -> list[str]:
    """kube-apiserver's flags: on 127.0.0.1:``port``, certificates and tokens in ``pki``,
    authorization ``Node,RBAC``, then ``extra`` (audit flags, a test's own)."""
    return [
        f"--etcd-servers={etcd_url}",
        "--bind-address=127.0.0.1",
        "--advertise-address=127.0.0.1",
        f"--secure-port={port}",
        f"--tls-cert-file={pki / 'apiserver.crt'}",
        f"--tls-private-key-file={pki / 'apiserver.key'}",
        f"--client-ca-file={pki / 'ca.crt'}",
        f"--token-auth-file={pki / 'tokens.csv'}",
        "--authorization-mode=Node,RBAC",
        "--service-cluster-ip-range=10.0.0.0/24",
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
        f"--service-account-key-file={pki / 'sa.pub'}",
        f"--service-account-signing-key-file={pki / 'sa.key'}",
        "--endpoint-reconciler-type=none",
        "--profiling=false",
        *extra,
    ]


def controller_manager_args(
    kubeconfig: str,
    pki: Path,
    quota_sync_period: int,
    node_grace_period: int | None,
    client_qps: int | None,
    service_account_credentials: bool,
) -> list[str]:
    """kube-controller-manager's flags: :data:`CONTROLLERS`, with ``node_grace_period``
    (seconds; None without nodes) also :data:`NODE_CONTROLLERS`; ``client_qps`` (burst twice
    that; None keeps the defaults); ``service_account_credentials``: each controller acts as
    its own ServiceAccount in kube-system (``system:serviceaccount:kube-system:<controller>``,
    tokens from the TokenRequest API), as kubeadm runs it; the kubeconfig's user then only
    makes those tokens and runs the shared informers."""
    node_args = []
    controllers: tuple[str, ...] = CONTROLLERS
    if node_grace_period is not None:
        controllers += NODE_CONTROLLERS
        node_args = [
            f"--node-monitor-grace-period={node_grace_period}s",
            "--node-monitor-period=2s",
        ]
    rate_args = []
    if client_qps is not None:
        rate_args = [f"--kube-api-qps={client_qps}", f"--kube-api-burst={2 * client_qps}"]
    return [
        f"--kubeconfig={kubeconfig}",
        f"--controllers={','.join(controllers)}",
        "--leader-elect=false",
        "--secure-port=0",
        f"--resource-quota-sync-period={quota_sync_period}s",
        f"--service-account-private-key-file={pki / 'sa.key'}",
        f"--root-ca-file={pki / 'ca.crt'}",
        f"--use-service-account-credentials={str(service_account_credentials).lower()}",
        *node_args,
        *rate_args,
    ]


def audit_args(policy: Path, log_path: Path) -> list[str]:
    """kube-apiserver's audit flags: ``policy`` (a YAML file), JSON lines to ``log_path``."""
    return [
        f"--audit-policy-file={policy}",
        f"--audit-log-path={log_path}",
        "--audit-log-format=json",
        # written as each request completes: readers see it at once
        "--audit-log-mode=blocking",
        "--audit-log-maxbackup=0",
        "--audit-log-maxsize=0",
    ]


def kwok_args(
    kubeconfig: str, kwok_dir: Path, manage: str, lease_seconds: int, port: int
) -> list[str]:
    """kwok's flags: the Nodes it manages (``manage``, default: those with the annotation),
    pod IPs from :data:`KWOK_POD_CIDR`, node Leases of ``lease_seconds``."""
    key, value = KWOK_NODE_ANNOTATION
    return [
        f"--kubeconfig={kubeconfig}",
        f"--config={kwok_dir / 'stages.yaml'}",
        "--manage-all-nodes=false",
        manage or f"--manage-nodes-with-annotation-selector={key}={value}",
        f"--cidr={KWOK_POD_CIDR}",
        "--node-ip=10.0.1.1",
        f"--node-lease-duration-seconds={lease_seconds}",
        f"--server-address=127.0.0.1:{port}",
    ]


def kwok_rbac() -> dict[str, Any]:
    """A ``v1`` List: the ClusterRole kwok ships for its controller (the core rules of
    ``kustomize/rbac/role.yaml`` in ``sigs.k8s.io/kwok`` v0.8.0: events, nodes, node and pod
    status, pods, leases) and its binding to kwok's user (:data:`COMPONENT_USERS`). Not the
    kubelet's ``system:node`` role: kwok lists every node's Lease, which a kubelet never does."""
    name = "dynquota-testbed:kwok"
    core = ""
    rules = [
        ([core], ["events"], ["create", "delete", "get", "list", "patch", "update", "watch"]),
        ([core], ["nodes"], ["get", "list", "watch"]),
        ([core], ["nodes/status", "pods/status"], ["patch", "update"]),
        ([core], ["pods"], ["delete", "get", "list", "patch", "update", "watch"]),
        (
            ["coordination.k8s.io"],
            ["leases"],
            ["create", "get", "list", "patch", "update", "watch"],
        ),
    ]
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": name},
        "rules": [
            {"apiGroups": groups, "resources": resources, "verbs": verbs}
            for groups, resources, verbs in rules
        ],
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
        "subjects": [
            {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "User",
                "name": COMPONENT_USERS["kwok"][0],
            }
        ],
    }
    return {"apiVersion": "v1", "kind": "List", "items": [role, binding]}


def kwok_nodes(names: Sequence[str], pods: int, losable: bool) -> dict[str, Any]:
    """A ``v1`` List of Nodes ``names`` (cpu 32, memory 256Gi, ``pods`` allocatable), managed
    by the shared kwok unless ``losable`` (then each is left to a kwok of its own)."""
    key, value = KWOK_NODE_ANNOTATION
    resources = {"cpu": "32", "memory": "256Gi", "pods": str(pods)}
    items = [
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                # a losable node is left to its own kwok, not the shared one's selector
                "annotations": {} if losable else {key: value},
                "labels": {"kubernetes.io/hostname": name, "type": "kwok"},
            },
            # kwok's node-initialize stage keeps allocatable/capacity given at create
            "status": {"allocatable": resources, "capacity": resources},
        }
        for name in names
    ]
    return {"apiVersion": "v1", "kind": "List", "items": items}
