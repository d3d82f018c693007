"""Pod-bound ServiceAccount tokens and the chart's Lease fence, for the test bed (sync client).

A real replica authenticates with its pod's projected token, which the apiserver binds to the
pod: the request's user info carries ``authentication.kubernetes.io/pod-name``. The test bed's
in-process operators get the same through a TokenRequest with a ``boundObjectRef`` to a Pod
object of their ``pod_name`` (:func:`pod_kubeconfig`), so the chart's server-side Lease fence
(``templates/lease-fence-policy.yaml``, :func:`dynquota.testing.chart.render_lease_fence`)
judges them as it would a pod.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Final

from kubernetes.client.exceptions import ApiException

from dynquota.testing.controlplane import LocalControlPlane
from dynquota.testing.credentials import write_kubeconfig

__all__ = [
    "PAUSE",
    "pod_kubeconfig",
    "service_account_token",
]

PAUSE: Final = "registry.k8s.io/pause:3.10"


def service_account_token(core: Any, account: str, namespace: str, pod: Any = None) -> str:
    """A TokenRequest token (6 h) of ServiceAccount ``namespace/account``; bound to ``pod``
    (a ``V1Pod``) when given, so the apiserver puts its name in the user info.
    Raises ``ApiException``."""
    spec: dict[str, Any] = {"expirationSeconds": 6 * 3600}
    if pod is not None:
        spec["boundObjectRef"] = {
            "kind": "Pod",
            "apiVersion": "v1",
            "name": pod.metadata.name,
            "uid": pod.metadata.uid,
        }
    answer = core.create_namespaced_service_account_token(
        account, namespace, {"spec": spec}, _request_timeout=30
    )
    token: str = answer.status.token
    return token


def pod_kubeconfig(
    cp: LocalControlPlane,
    core: Any,
    directory: Path,
    account: tuple[str, str],
    pod_name: str,
) -> str:
    """The path of a kubeconfig (in ``directory``) authenticating as ServiceAccount
    ``account`` (``(namespace, name)``) with a token bound to the Pod ``pod_name`` in that
    namespace, created if missing (a pause container; Pending is enough).
    Raises ``ApiException``."""
    namespace, name = account
    body = {
        "metadata": {"name": pod_name, "labels": {"app.kubernetes.io/name": "dynquota-test"}},
        "spec": {
            "serviceAccountName": name,
            "automountServiceAccountToken": False,
            "containers": [{"name": "operator", "image": PAUSE}],
        },
    }
    try:
        pod = core.create_namespaced_pod(namespace, body, _request_timeout=30)
    except ApiException as exc:
        if exc.status != 409:
            raise
        pod = core.read_namespaced_pod(pod_name, namespace, _request_timeout=30)
    token = service_account_token(core, name, namespace, pod)
    return write_kubeconfig(
        directory / f"{pod_name}.kubeconfig",
        server=cp.server,
        ca_file=cp.ca_file,
        user=name,
        token=token,
        context="op",
    )
