"""Namespaces and DynamicQuotaPolicies as the operator reads them, and policy status (I/O).

Objects are returned as decoded JSON dicts (camelCase keys). The writes here are the
policy's ``status`` subresource and the companion LimitRange ``dynquota`` (create, and a
JSON merge-patch conditional on its resourceVersion), all with ``fieldManager=dynquota``.
Failures are raised as :mod:`dynquota._k8s.errors` types.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kubernetes_asyncio import client

from dynquota._k8s.paginate import ListPage, paginate
from dynquota._k8s.request import ApiCallObserver, call_api
from dynquota.kube.quotas import FIELD_MANAGER
from dynquota.names import (
    BUDGET_PLURAL,
    GROUP,
    MANAGED_BY_LABEL,
    MANAGED_BY_VALUE,
    MANAGED_LIMIT_RANGE_NAME,
    PLURAL,
    VERSION,
)

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

    async def list_limit_ranges(self, namespace: str) -> list[dict[str, Any]]:
        """Every LimitRange of ``namespace`` as decoded JSON: one consistent LIST (RBAC:
        ``list`` on ``limitranges``; nothing else is read). Raises ``ApiError``,
        ``TransportError``."""
        model = await call_api(
            "list",
            "limitranges",
            lambda t: self._core.list_namespaced_limit_range(namespace, _request_timeout=t),
            self._observer,
        )
        return list(self._sanitize(model).get("items") or [])

    async def create_limit_range(self, namespace: str, item: Mapping[str, Any]) -> None:
        """Create the companion LimitRange :data:`MANAGED_LIMIT_RANGE_NAME` with the
        managed-by label and ``spec.limits = [item]``. Raises ``ConflictError`` (409
        AlreadyExists), other ``ApiError``, ``TransportError``."""
        body = {
            "apiVersion": "v1",
            "kind": "LimitRange",
            "metadata": {
                "name": MANAGED_LIMIT_RANGE_NAME,
                "namespace": namespace,
                "labels": {MANAGED_BY_LABEL: MANAGED_BY_VALUE},
            },
            "spec": {"limits": [dict(item)]},
        }
        await call_api(
            "create",
            "limitranges",
            lambda t: self._core.create_namespaced_limit_range(
                namespace, body, field_manager=FIELD_MANAGER, _request_timeout=t
            ),
            self._observer,
        )

    async def patch_limit_range(
        self, namespace: str, item: Mapping[str, Any], resource_version: str
    ) -> None:
        """Set ``spec.limits = [item]`` on the companion LimitRange, conditional on
        ``resource_version`` (a JSON merge-patch carrying ``metadata.resourceVersion``: 409 if
        it changed since it was read). Raises ``ConflictError``, ``NotFoundError``, other
        ``ApiError``, ``TransportError``."""
        body = {
            "metadata": {"resourceVersion": resource_version},
            "spec": {"limits": [dict(item)]},
        }
        await call_api(
            "patch",
            "limitranges",
            lambda t: self._core.patch_namespaced_limit_range(
                MANAGED_LIMIT_RANGE_NAME,
                namespace,
                body,
                field_manager=FIELD_MANAGER,
                _content_type=_MERGE_PATCH,
                _request_timeout=t,
            ),
            self._observer,
        )

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

    async def list_budgets(self) -> list[dict[str, Any]]:
        """Every QuotaBudget, read consistently (no ``resourceVersion`` sent). Raises
        ``NotFoundError`` when its CRD is not installed, other ``ApiError``,
        ``TransportError``."""
        answer = await call_api(
            "list",
            BUDGET_PLURAL,
            lambda t: self._custom.list_cluster_custom_object(
                GROUP, VERSION, BUDGET_PLURAL, _request_timeout=t
            ),
            self._observer,
        )
        return list(answer.get("items") or [])

    async def patch_budget_status(self, name: str, status: Mapping[str, Any]) -> None:
        """Merge-patch ``status`` of QuotaBudget ``name`` (the status subresource; a map
        entry set to ``None`` is removed). Raises ``ApiError``, ``TransportError``."""
        await call_api(
            "patch",
            f"{BUDGET_PLURAL}/status",
            lambda t: self._custom.patch_cluster_custom_object_status(
                GROUP,
                VERSION,
                BUDGET_PLURAL,
                name,
                {"status": dict(status)},
                field_manager=FIELD_MANAGER,
                _content_type=_MERGE_PATCH,
                _request_timeout=t,
            ),
            self._observer,
        )
