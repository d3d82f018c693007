"""The local control plane is a real cluster: quota admission, quota controller, workloads."""

from __future__ import annotations

import uuid

import kubernetes
import pytest
from kubernetes.client.exceptions import ApiException

from dynquota.testing.wait import wait_until

PAUSE = "registry.k8s.io/pause:3.10"


def pod(name: str) -> dict[str, object]:
    return {
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "c", "image": PAUSE}]},
    }


def make_quota(core: kubernetes.client.CoreV1Api, ns: str, hard: dict[str, str]) -> None:
    core.create_namespaced_resource_quota(ns, {"metadata": {"name": "q"}, "spec": {"hard": hard}})
    # Admission ignores a quota until the quota controller has filled status.hard (upstream
    # generic.Matches reads status.hard; see tests/integration/test_new_namespace.py): wait
    # for it, or the third pod would be admitted.
    wait_until(
        lambda: core.read_namespaced_resource_quota("q", ns).status.hard == hard,
        f"status.hard of quota q in {ns}",
    )


def test_quota_admission_refuses_the_third_pod(
    api_client: kubernetes.client.ApiClient, namespace: str
) -> None:
    core = kubernetes.client.CoreV1Api(api_client)
    make_quota(core, namespace, {"pods": "2"})
    core.create_namespaced_pod(namespace, pod("p1"))
    core.create_namespaced_pod(namespace, pod("p2"))
    with pytest.raises(ApiException) as refused:
        core.create_namespaced_pod(namespace, pod("p3"))
    assert refused.value.status == 403
    assert "exceeded quota: q, requested: pods=1, used: pods=2, limited: pods=2" in str(
        refused.value.body
    )
    # status.used is written by the real quota controller.
    wait_until(
        lambda: (
            (core.read_namespaced_resource_quota("q", namespace).status.used or {}).get("pods")
            == "2"
        ),
        "status.used.pods == 2",
    )


def test_replicaset_controller_is_stopped_by_the_quota(
    api_client: kubernetes.client.ApiClient, namespace: str
) -> None:
    core = kubernetes.client.CoreV1Api(api_client)
    apps = kubernetes.client.AppsV1Api(api_client)
    make_quota(core, namespace, {"pods": "3"})
    labels = {"app": "web"}
    apps.create_namespaced_deployment(
        namespace,
        {
            "metadata": {"name": "web"},
            "spec": {
                "replicas": 5,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {"containers": [{"name": "c", "image": PAUSE}]},
                },
            },
        },
    )

    def failed_create_event() -> str | None:
        for ev in core.list_namespaced_event(namespace).items:
            if ev.reason == "FailedCreate" and "exceeded quota" in (ev.message or ""):
                return str(ev.message)
        return None

    message = wait_until(failed_create_event, "a FailedCreate event naming the quota")
    assert "limited: pods=3" in message
    wait_until(
        lambda: len(core.list_namespaced_pod(namespace).items) == 3, "3 pods created by the RS"
    )
    assert len(core.list_namespaced_pod(namespace).items) == 3


def test_namespace_gets_root_ca_and_deletion_completes(
    api_client: kubernetes.client.ApiClient,
) -> None:
    core = kubernetes.client.CoreV1Api(api_client)
    name = f"t-{uuid.uuid4().hex[:10]}"
    core.create_namespace({"metadata": {"name": name}})
    cm = wait_until(
        lambda: next(
            (
                c
                for c in core.list_namespaced_config_map(name).items
                if c.metadata.name == "kube-root-ca.crt"
            ),
            None,
        ),
        f"kube-root-ca.crt in {name}",
    )
    assert "BEGIN CERTIFICATE" in cm.data["ca.crt"]
    core.create_namespaced_config_map(name, {"metadata": {"name": "x"}, "data": {"k": "v"}})
    core.delete_namespace(name)

    def gone() -> bool:
        try:
            core.read_namespace(name)
        except ApiException as e:
            if e.status == 404:
                return True
            raise
        return False

    wait_until(gone, f"namespace {name} deleted by the namespace controller", timeout=120)
