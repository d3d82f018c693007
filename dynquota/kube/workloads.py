"""The workloads a raise wakes: list a namespace's ReplicaSets, StatefulSets, DaemonSets or
Jobs, set the wake mark on one (I/O).

Only ``list`` (one namespace at a time, when a raise is enforced: nothing is watched, nothing
kept) and a JSON merge-patch of one annotation, conditional on the resourceVersion just listed;
the chart's ``<fullname>-operator-writes`` policy refuses any other change by the operator's
token (docs/chart.md). Failures are raised as :mod:`dynquota._k8s.errors` types.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kubernetes_asyncio import client

from dynquota._k8s.request import ApiCallObserver, call_json
from dynquota.kube.quotas import FIELD_MANAGER
from dynquota.policy.wake import WorkloadKind, wake_patch

__all__ = ["RESOURCES", "WorkloadClient"]

_MERGE_PATCH = "application/merge-patch+json"

RESOURCES: dict[WorkloadKind, str] = {
    "ReplicaSet": "replicasets",
    "StatefulSet": "statefulsets",
    "DaemonSet": "daemonsets",
    "Job": "jobs",
}
"""The plural resource of each kind (apps/v1, Jobs batch/v1): metrics and RBAC name them so."""


class WorkloadClient:
    """Workloads as the waker reads and marks them.

    Args:
        api_client: a configured kubernetes_asyncio ``ApiClient`` (not closed here).
        observer: hears ``(verb, resource, status)`` after every call.
    """

    def __init__(self, api_client: client.ApiClient, observer: ApiCallObserver | None = None):
        # Any: the generated stubs know neither _content_type nor _preload_content's raw answer
        self._apps: Any = client.AppsV1Api(api_client)
        self._batch: Any = client.BatchV1Api(api_client)
        self._observer = observer

    def _calls(self, kind: WorkloadKind) -> tuple[Any, Any, Any]:
        """The generated (namespaced list, cluster-wide list, patch) methods of ``kind``."""
        if kind == "ReplicaSet":
            return (self._apps.list_namespaced_replica_set,
                    self._apps.list_replica_set_for_all_namespaces,
                    self._apps.patch_namespaced_replica_set)  # fmt: skip
        if kind == "StatefulSet":
            return (self._apps.list_namespaced_stateful_set,
                    self._apps.list_stateful_set_for_all_namespaces,
                    self._apps.patch_namespaced_stateful_set)  # fmt: skip
        if kind == "DaemonSet":
            return (self._apps.list_namespaced_daemon_set,
                    self._apps.list_daemon_set_for_all_namespaces,
                    self._apps.patch_namespaced_daemon_set)  # fmt: skip
        return (self._batch.list_namespaced_job, self._batch.list_job_for_all_namespaces,
                self._batch.patch_namespaced_job)  # fmt: skip

    async def list_workloads(
        self,
        kind: WorkloadKind,
        namespace: str,
        keep: Callable[[dict[str, Any]], bool] | None = None,
    ) -> list[dict[str, Any]]:
        """The objects of ``kind`` in ``namespace`` as decoded JSON, those ``keep`` accepts
        (default: all). A namespace: one page (more than 500 of a kind: woken in the first
        500). ``""``: every namespace, in pages of 500 (only what ``keep`` accepts is held).

        Raises: ``ApiError`` (``GoneError`` when the continue token expired), ``TransportError``."""
        one, every, _ = self._calls(kind)
        kept: list[dict[str, Any]] = []
        token: str | None = None
        while True:
            if namespace:
                call: Any = lambda t: one(  # noqa: E731
                    namespace, limit=500, _request_timeout=t, _preload_content=False
                )
            else:
                call = lambda t, c=token: every(  # noqa: E731
                    limit=500, _continue=c, _request_timeout=t, _preload_content=False
                )
            body = await call_json("list", RESOURCES[kind], call, self._observer)
            items = body.get("items") if isinstance(body, dict) else None
            kept += [i for i in items or [] if isinstance(i, dict) and (keep is None or keep(i))]
            meta = body.get("metadata") if isinstance(body, dict) else None
            token = (meta or {}).get("continue") or None
            if namespace or not token:
                return kept

    async def wake_workload(
        self, kind: WorkloadKind, namespace: str, name: str, stamp: str, resource_version: str
    ) -> None:
        """Set the wake mark of ``kind`` ``namespace/name`` to ``stamp``, conditional on
        ``resource_version``.

        Raises: ``ConflictError`` (it changed since: its controller was re-queued by that
        change), ``NotFoundError``, ``ForbiddenError`` (the chart's policy refused it: a
        mutating webhook changed more than the mark), other ``ApiError``, ``TransportError``."""
        _, _, patch_call = self._calls(kind)
        await call_json(
            "patch",
            RESOURCES[kind],
            lambda t: patch_call(
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
