"""RBAC for the tests and the demo: a tenant made by binding one of Kubernetes' aggregated
ClusterRoles (``admin``, ``edit``, ``view``) in one namespace, as a platform team does."""

from __future__ import annotations

from typing import Any

import kubernetes

__all__ = ["bind_cluster_role"]


def bind_cluster_role(api: Any, namespace: str, user: str, role: str) -> None:
    """Create the RoleBinding ``<user>-<role>`` in ``namespace`` granting the User ``user``
    the ClusterRole ``role`` there (``api``: a sync ``kubernetes`` ApiClient; 30 s timeout).

    Raises ``kubernetes.client.exceptions.ApiException`` as the apiserver answers (409 if the
    binding exists)."""
    rbac: Any = kubernetes.client.RbacAuthorizationV1Api(api)
    rbac.create_namespaced_role_binding(
        namespace,
        {
            "metadata": {"name": f"{user}-{role}"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                        "name": role},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                          "name": user}],
        },
        _request_timeout=30,
    )  # fmt: skip
