"""Operator fixtures: a private control plane with the chart's RBAC, and in-process operators.

The operator manages every namespace of the cluster it runs against, so its tests get their
own control plane (``op_cluster``, session-scoped) instead of the shared one: no other test's
namespaces or policies can meet it. The operator authenticates as the ServiceAccount
``dynquota-system/dynquota`` bound to the chart's ClusterRole through a TokenRequest token
(:func:`dynquota.testing.operator.install_operator`), never as cluster admin.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import kubernetes
import pytest
from kubernetes.client.exceptions import ApiException

from dynquota.testing.audit import QUOTA_AUDIT_POLICY
from dynquota.testing.controlplane import LocalControlPlane
from dynquota.testing.operator import (
    GROUP,
    PLURAL,
    VERSION,
    OperatorCluster,
    OperatorThread,
    install_operator,
    operator_settings,
)


@pytest.fixture(scope="session")
def op_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorCluster]:
    """A private control plane with the CRD, the chart's RBAC and an operator kubeconfig; its
    audit log records every quota charge and recount (:data:`QUOTA_AUDIT_POLICY`), which tells
    an upstream admission race from a dynquota failure (``upstream_race_explains``)."""
    with LocalControlPlane(
        resource_quota_sync_period=10, audit=True, audit_policy=QUOTA_AUDIT_POLICY
    ) as cp:
        kubeconfig = install_operator(cp, tmp_path_factory.mktemp("operator"))
        api = kubernetes.config.new_client_from_config(config_file=cp.kubeconfig)
        yield OperatorCluster(cp, api, kubeconfig)
        api.close()


def _operators(cluster: OperatorCluster) -> Iterator[Callable[..., OperatorThread]]:
    """Yield ``start(**settings)``, which runs an operator on ``cluster``; every operator it
    started is stopped afterwards."""
    running: list[OperatorThread] = []

    def start(**overrides: Any) -> OperatorThread:
        op = OperatorThread(operator_settings(cluster, **overrides))
        running.append(op)
        return op.start()

    yield start
    for op in running:
        with contextlib.suppress(AssertionError):
            op.stop()


@pytest.fixture
def start_operator(op_cluster: OperatorCluster) -> Iterator[Callable[..., OperatorThread]]:
    """``start_operator(**settings)`` runs an operator; every one is stopped after the test."""
    yield from _operators(op_cluster)


@pytest.fixture
def scope(op_cluster: OperatorCluster) -> Iterator[dict[str, str]]:
    """A label unique to this test, for its policies' selectors and its namespaces. After the
    test: the kill switch is released, every policy and the labelled namespaces deleted."""
    label = {"dq-test": uuid.uuid4().hex[:10]}
    yield label
    with contextlib.suppress(ApiException):
        op_cluster.kill_switch(None)
    for policy in op_cluster.custom.list_cluster_custom_object(GROUP, VERSION, PLURAL)["items"]:
        op_cluster.delete_policy(policy["metadata"]["name"])
    selector = ",".join(f"{k}={v}" for k, v in label.items())
    for ns in op_cluster.core.list_namespace(label_selector=selector).items:
        op_cluster.delete_namespace(ns.metadata.name)


# -- a cluster with a scheduler and kwok nodes (realism and runaway tests) ----------------------
NODES = 3  # small on purpose: every node costs kwok work and Lease writes


@pytest.fixture(scope="session")
def node_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorCluster]:
    """A private control plane with kube-scheduler and ``NODES`` kwok nodes (110 pods each),
    the CRD, the chart's RBAC and an operator kubeconfig; its audit log records every quota
    charge and recount and every pod/ConfigMap create (:data:`QUOTA_AUDIT_POLICY`). A node
    falls silent 12 s after kwok stops renewing its Lease (renewed every ~2 s), so a lost node
    is staged in seconds."""
    with LocalControlPlane(
        resource_quota_sync_period=10,
        nodes=NODES,
        node_lease_seconds=8,
        node_monitor_grace_period=12,
        audit=True,
        audit_policy=QUOTA_AUDIT_POLICY,
    ) as cp:
        kubeconfig = install_operator(cp, tmp_path_factory.mktemp("nodes"))
        api = kubernetes.config.new_client_from_config(config_file=cp.kubeconfig)
        yield OperatorCluster(cp, api, kubeconfig)
        api.close()


@pytest.fixture
def start_node_operator(node_cluster: OperatorCluster) -> Iterator[Callable[..., OperatorThread]]:
    """``start_node_operator(**settings)`` runs an operator on ``node_cluster``; stopped after."""
    yield from _operators(node_cluster)


@pytest.fixture
def node_scope(node_cluster: OperatorCluster) -> Iterator[dict[str, str]]:
    """Like ``scope`` on ``node_cluster``: a unique label; after the test every policy and the
    labelled namespaces are deleted."""
    label = {"dq-test": uuid.uuid4().hex[:10]}
    yield label
    c = node_cluster
    for policy in c.custom.list_cluster_custom_object(GROUP, VERSION, PLURAL)["items"]:
        c.delete_policy(policy["metadata"]["name"])
    selector = ",".join(f"{k}={v}" for k, v in label.items())
    for ns in c.core.list_namespace(label_selector=selector).items:
        c.delete_namespace(ns.metadata.name)


@pytest.fixture(scope="module")
def kwok_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorCluster]:
    """A control plane of the module's own with kube-scheduler and 2 kwok nodes (the node
    growth tests add nodes: the shared ``node_cluster`` must keep its count)."""
    with LocalControlPlane(resource_quota_sync_period=10, nodes=2) as cp:
        kubeconfig = install_operator(cp, tmp_path_factory.mktemp("kwok"))
        api = kubernetes.config.new_client_from_config(config_file=cp.kubeconfig)
        yield OperatorCluster(cp, api, kubeconfig)
        api.close()
