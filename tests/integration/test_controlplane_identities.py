"""The test bed's components act as their own, non-exempt users, and API Priority and Fairness
classifies them as on a kubeadm cluster (issue 32): read from the apiserver's request log, which
names each request's client and FlowSchema at ``--v=3``, and from its APF metrics."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator

import pytest

from dynquota.testing.apf import flow_counts, request_flows
from dynquota.testing.controlplane import LocalControlPlane
from dynquota.testing.wait import wait_until

# Where each component's requests may land (every other schema, `exempt` above all, is a
# finding): its own schema (for the controller manager also its controllers'), leader
# election's, the health probes'.
ALLOWED = {
    "kube-controller-manager": {
        "kube-controller-manager",
        "kube-system-service-accounts",
        "system-leader-election",
        "probes",
    },
    "kube-scheduler": {"kube-scheduler", "system-leader-election", "probes"},
    "kwok": {"system-node-high", "system-nodes"},
}
CONTROLLER_SA = "kube-controller-manager:system:serviceaccount:kube-system:"


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalControlPlane]:
    with LocalControlPlane(nodes=1, extra_apiserver_args=["--v=3"]) as cp:
        yield cp


def running_pods(cp: LocalControlPlane, ns: str) -> int:
    pods = json.loads(cp.kubectl("get", "pods", "-n", ns, "-o", "json"))["items"]
    return sum(p.get("status", {}).get("phase") == "Running" for p in pods)


def test_components_are_classified_as_on_a_real_cluster(cluster: LocalControlPlane) -> None:
    # a Deployment whose pods run: the deployment and replicaset controllers, the scheduler
    # and kwok (the kubelets) all act
    cluster.kubectl("create", "namespace", "ident")
    cluster.kubectl("create", "deployment", "web", "-n", "ident", "--image=pause", "--replicas=2")
    wait_until(lambda: running_pods(cluster, "ident") == 2, "2 pods Running in ident")

    flows = request_flows((cluster.log_dir / "kube-apiserver.log").read_text().splitlines())
    by_component: dict[str, Counter[str]] = {}
    for (client, schema), count in flows.items():
        component = "kube-controller-manager" if client.startswith(CONTROLLER_SA) else client
        component = component.split(":", 1)[0]
        by_component.setdefault(component, Counter())[schema] += count
    for component, allowed in ALLOWED.items():
        seen = by_component.get(component, Counter())
        assert seen, f"no request of {component} in the request log"
        assert set(seen) <= allowed, (component, seen)
    # each controller acts as its own ServiceAccount (kube-system-service-accounts, 900), the
    # controller manager's own user (token requests, shared informers) as itself (800)
    controllers = {c for (c, s) in flows if c.startswith(CONTROLLER_SA)}
    assert f"{CONTROLLER_SA}replicaset-controller" in controllers
    assert f"{CONTROLLER_SA}deployment-controller" in controllers
    assert {s for (c, s) in flows if c in controllers} <= {
        "kube-system-service-accounts",
        "system-leader-election",
    }
    assert by_component["kube-controller-manager"]["kube-controller-manager"] > 0
    assert by_component["kube-scheduler"]["kube-scheduler"] > 0
    # the same from the metrics (per schema only): each component's schema dispatched requests
    counts = {
        fs: c for (fs, _), c in flow_counts(cluster.kubectl("get", "--raw", "/metrics")).items()
    }
    for schema in ("kube-controller-manager", "kube-scheduler", "kube-system-service-accounts"):
        assert counts[schema].dispatched > 0, schema
    assert counts["system-node-high"].dispatched + counts["system-nodes"].dispatched > 0


def test_admin_stays_exempt(cluster: LocalControlPlane) -> None:
    """The admin kubeconfig (the tests' fixtures) stays in system:masters: exempt."""
    before = flow_counts(cluster.kubectl("get", "--raw", "/metrics"))[("exempt", "exempt")]
    cluster.kubectl("get", "namespaces")
    after = flow_counts(cluster.kubectl("get", "--raw", "/metrics"))[("exempt", "exempt")]
    assert after.dispatched > before.dispatched
    whoami = json.loads(cluster.kubectl("auth", "whoami", "-o", "json"))
    assert "system:masters" in whoami["status"]["userInfo"]["groups"]
