"""Namespaces and DynamicQuotaPolicies as the operator reads them, and policy status (I/O).

Objects are returned as decoded JSON dicts (camelCase keys). The only write here is the
policy's ``status`` subresource (a JSON merge-patch with ``fieldManager=dynquota``).
Failures are raised as :mod:`dynquota._k8s.errors` types.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kubernetes_asyncio import client

from dynquota._k8s.paginate import ListPage, paginate
from dynquota._k8s.request import ApiCallObserver, call_api
from dynquota.kube.quotas import FIELD_MANAGER
from dynquota.names import GROUP, PLURAL, VERSION

__all__ = ["ClusterClient"]

_MERGE_PATCH = "application/merge-patch+json"


class ClusterClient:
    """Reads Namespaces and policies; writes policy status.

    Args:
        api_client: a configured kubernetes_asyncio ``ApiClient`` (not closed here).
        observer: hears ``(verb, resource, status)`` after every call.
    """

    def __init__(
        self, api_client: client.ApiClient, observer: ApiCallObserver | None = None
    ) -> None:
        self._core: Any = client.CoreV1Api(api_client)
        self._custom: Any = client.CustomObjectsApi(api_client)
        self._sanitize = api_client.sanitize_for_serialization
        self._observer = observer

    async def read_namespace(self, name: str) -> dict[str, Any]:
        """The Namespace ``name``, read consistently (a GET without ``resourceVersion``: a
        quorum read from etcd, never the watch cache). Raises ``NotFoundError``, other
        ``ApiError``, ``TransportError``."""
        model = await call_api(
            "get",
            "namespaces",
            lambda t: self._core.read_namespace(name, _request_timeout=t),
            self._observer,
        )
        result: dict[str, Any] = self._sanitize(model)
        return result

    async def limit_range_defaults(self, namespace: str) -> frozenset[str]:
        """The compute quota keys a LimitRange of ``namespace`` gives every container a
        default for (type ``Container``): ``defaultRequest.cpu`` covers ``requests.cpu`` and
        ``cpu``, ``default.cpu`` covers ``limits.cpu`` (likewise memory). One LIST of
        ``limitranges`` in the namespace (RBAC: ``list`` on ``limitranges``; nothing else is
        read). Raises ``ApiError``, ``TransportError``."""
        model = await call_api(
            "list",
            "limitranges",
            lambda t: self._core.list_namespaced_limit_range(namespace, _request_timeout=t),
            self._observer,
        )
        covered: set[str] = set()
        for item in self._sanitize(model).get("items") or []:
            for limit in (item.get("spec") or {}).get("limits") or []:
                if limit.get("type") != "Container":
                    continue
                for name in limit.get("defaultRequest") or {}:
                    covered.update({name, f"requests.{name}"})
                for name in limit.get("default") or {}:
                    covered.add(f"limits.{name}")
        return frozenset(covered)

    async def list_namespaces(self, page_size: int = 500) -> list[dict[str, Any]]:
        """Every Namespace (paginated by ``page_size``).

        A consistent read: no ``resourceVersion`` is sent (never ``resourceVersion=0``, which
        may be served from a stale watch cache); later pages continue the first one's snapshot.
        Raises ``ApiError`` (``GoneError`` if a continue token expired), ``TransportError``.
        """
        items: list[dict[str, Any]] = []

        async def fetch(token: str | None) -> ListPage:
            model = await call_api(
                "list",
                "namespaces",
                lambda t: self._core.list_namespace(
                    limit=page_size, _continue=token, _request_timeout=t
                ),
                self._observer,
            )
            return ListPage.from_model(model, self._sanitize)

        async for page in paginate(fetch):
            items.extend(page.items)
        return items

    async def list_policies(self) -> list[dict[str, Any]]:
        """Every DynamicQuotaPolicy, read consistently (no ``resourceVersion`` sent: never
        ``resourceVersion=0``). Raises ``NotFoundError`` when the CRD is not installed (or not
        served yet after an apiserver restart), other ``ApiError``, ``TransportError``."""
        answer = await call_api(
            "list",
            PLURAL,
            lambda t: self._custom.list_cluster_custom_object(
                GROUP, VERSION, PLURAL, _request_timeout=t
            ),
            self._observer,
        )
        return list(answer.get("items") or [])

    async def patch_policy_status(self, name: str, status: Mapping[str, Any]) -> None:
        """Merge-patch ``status`` of policy ``name`` (the status subresource)."""
        await call_api(
            "patch",
            f"{PLURAL}/status",
            lambda t: self._custom.patch_cluster_custom_object_status(
                GROUP,
                VERSION,
                PLURAL,
                name,
                {"status": dict(status)},
                field_manager=FIELD_MANAGER,
                _content_type=_MERGE_PATCH,
                _request_timeout=t,
            ),
            self._observer,
        )
