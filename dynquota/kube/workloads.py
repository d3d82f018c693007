"""The workloads a raise wakes: list a namespace's ReplicaSets, set the wake mark on one (I/O).

Only ``list`` (one namespace at a time, when a raise is enforced where a create was refused:
nothing is watched, nothing kept) and a JSON merge-patch of one annotation, conditional on the
resourceVersion just listed; the chart's ``<fullname>-operator-writes`` policy refuses any
other change by the operator's token (docs/chart.md). Failures are raised as
:mod:`dynquota._k8s.errors` types.
"""

from __future__ import annotations

from typing import Any

from kubernetes_asyncio import client

from dynquota._k8s.request import ApiCallObserver, call_json
from dynquota.kube.quotas import FIELD_MANAGER
from dynquota.policy.wake import wake_patch

__all__ = ["WorkloadClient"]

_MERGE_PATCH = "application/merge-patch+json"


class WorkloadClient:
    """ReplicaSets as the waker reads and marks them.

    Args:
        api_client: a configured kubernetes_asyncio ``ApiClient`` (not closed here).
        observer: hears ``(verb, resource, status)`` after every call.
    """

    def __init__(self, api_client: client.ApiClient, observer: ApiCallObserver | None = None):
        # Any: the generated stubs know neither _content_type nor _preload_content's raw answer
        self._apps: Any = client.AppsV1Api(api_client)
        self._observer = observer

    async def list_replica_sets(self, namespace: str) -> list[dict[str, Any]]:
        """Every ReplicaSet of ``namespace`` as decoded JSON (one page: a namespace with more
        than 500 ReplicaSets is woken in its first 500).

        Raises: ``ApiError``, ``TransportError``."""
        body = await call_json(
            "list",
            "replicasets",
            lambda t: self._apps.list_namespaced_replica_set(
                namespace, limit=500, _request_timeout=t, _preload_content=False
            ),
            self._observer,
        )
        items = body.get("items") if isinstance(body, dict) else None
        return [i for i in items or [] if isinstance(i, dict)]

    async def wake_replica_set(
        self, namespace: str, name: str, stamp: str, resource_version: str
    ) -> None:
        """Set the wake mark of ReplicaSet ``namespace/name`` to ``stamp``, conditional on
        ``resource_version``.

        Raises: ``ConflictError`` (it changed since: its controller was re-queued by that
        change), ``NotFoundError``, other ``ApiError``, ``TransportError``."""
        await call_json(
            "patch",
            "replicasets",
            lambda t: self._apps.patch_namespaced_replica_set(
                name,
                namespace,
                wake_patch(stamp, resource_version),
                field_manager=FIELD_MANAGER,
                _content_type=_MERGE_PATCH,
                _request_timeout=t,
                _preload_content=False,
            ),
            self._observer,
        )
