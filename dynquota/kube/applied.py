"""The namespaced ``AppliedDynamicQuota`` objects named ``dynquota`` (I/O; issue 28, part 3).

Read by tenants (``kubectl dynquota status``) and written by the operator: create, replace
conditional on the resourceVersion last seen (a PUT carrying ``metadata.resourceVersion``:
409 if it changed), delete with a uid precondition, and one labelled LIST of all of them.
Every object carries the managed-by label (the chart's Lease fence and operator-writes policy
judge the operator's writes by it). Objects are decoded JSON dicts; failures are
:mod:`dynquota._k8s.errors` types; every call has the short timeout of
:mod:`dynquota._k8s.timeouts`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from kubernetes_asyncio import client

from dynquota._k8s.errors import NotFoundError
from dynquota._k8s.paginate import ListPage, paginate
from dynquota._k8s.request import ApiCallObserver, call_api
from dynquota.names import (
    API_VERSION,
    APPLIED_KIND,
    APPLIED_NAME,
    APPLIED_PLURAL,
    GROUP,
    MANAGED_BY_LABEL,
    MANAGED_BY_SELECTOR,
    MANAGED_BY_VALUE,
    VERSION,
)

__all__ = ["AppliedClient", "AppliedObject", "applied_body"]

FIELD_MANAGER: Final = "dynquota"


@dataclass(frozen=True)
class AppliedObject:
    """One stored ``AppliedDynamicQuota``: where, its identity and its ``status``."""

    namespace: str
    uid: str
    resource_version: str
    status: Mapping[str, Any] = field(default_factory=dict)
    managed: bool = True

    @classmethod
    def from_object(cls, obj: Mapping[str, Any]) -> AppliedObject:
        meta = obj.get("metadata") or {}
        return cls(
            namespace=str(meta.get("namespace") or ""),
            uid=str(meta.get("uid") or ""),
            resource_version=str(meta.get("resourceVersion") or ""),
            status=dict(obj.get("status") or {}),
            managed=(meta.get("labels") or {}).get(MANAGED_BY_LABEL) == MANAGED_BY_VALUE,
        )


def applied_body(
    namespace: str, status: Mapping[str, Any], resource_version: str | None = None
) -> dict[str, Any]:
    """The whole object: name :data:`~dynquota.names.APPLIED_NAME`, the managed-by label,
    ``status`` (and ``resource_version`` for a conditional replace). Pure."""
    meta: dict[str, Any] = {
        "name": APPLIED_NAME,
        "namespace": namespace,
        "labels": {MANAGED_BY_LABEL: MANAGED_BY_VALUE},
    }
    if resource_version:
        meta["resourceVersion"] = resource_version
    return {
        "apiVersion": API_VERSION,
        "kind": APPLIED_KIND,
        "metadata": meta,
        "status": dict(status),
    }


class AppliedClient:
    """The operator's and the CLI's road to ``AppliedDynamicQuota`` objects.

    Args:
        api_client: a configured kubernetes_asyncio ``ApiClient`` (not closed here).
        observer: hears ``(verb, resource, status)`` after every call.
    """

    def __init__(
        self, api_client: client.ApiClient, observer: ApiCallObserver | None = None
    ) -> None:
        self._custom: Any = client.CustomObjectsApi(api_client)
        self._observer = observer

    async def get(self, namespace: str) -> dict[str, Any] | None:
        """The object ``dynquota`` of ``namespace`` as stored, or ``None`` (404: none, or the
        CRD is not installed). Raises ``ForbiddenError`` and other ``ApiError``,
        ``TransportError``."""
        try:
            answer = await call_api(
                "get",
                APPLIED_PLURAL,
                lambda t: self._custom.get_namespaced_custom_object(
                    GROUP, VERSION, namespace, APPLIED_PLURAL, APPLIED_NAME, _request_timeout=t
                ),
                self._observer,
            )
        except NotFoundError:
            return None
        return dict(answer)

    async def list_managed(self, page_size: int = 500) -> list[AppliedObject]:
        """Every labelled object named ``dynquota`` in the cluster (a consistent, paginated
        read). Raises ``NotFoundError`` when the CRD is not installed, ``ApiError``,
        ``TransportError``."""
        found: list[AppliedObject] = []

        async def fetch(token: str | None) -> ListPage:
            answer = await call_api(
                "list",
                APPLIED_PLURAL,
                lambda t: self._custom.list_cluster_custom_object(
                    GROUP,
                    VERSION,
                    APPLIED_PLURAL,
                    label_selector=MANAGED_BY_SELECTOR,
                    field_selector=f"metadata.name={APPLIED_NAME}",
                    limit=page_size,
                    _continue=token,
                    _request_timeout=t,
                ),
                self._observer,
            )
            return ListPage.from_body(answer, APPLIED_PLURAL)

        async for page in paginate(fetch):
            found.extend(AppliedObject.from_object(item) for item in page.items)
        return found

    async def create(self, namespace: str, status: Mapping[str, Any]) -> AppliedObject:
        """Create the object with ``status``. Raises ``ConflictError`` (409 AlreadyExists),
        other ``ApiError``, ``TransportError``."""
        answer = await call_api(
            "create",
            APPLIED_PLURAL,
            lambda t: self._custom.create_namespaced_custom_object(
                GROUP,
                VERSION,
                namespace,
                APPLIED_PLURAL,
                applied_body(namespace, status),
                field_manager=FIELD_MANAGER,
                _request_timeout=t,
            ),
            self._observer,
        )
        return AppliedObject.from_object(answer)

    async def replace(
        self, namespace: str, status: Mapping[str, Any], resource_version: str
    ) -> AppliedObject:
        """Replace the object, conditional on ``resource_version``. Raises ``ConflictError``
        (409: changed since), ``NotFoundError``, other ``ApiError``, ``TransportError``."""
        answer = await call_api(
            "update",
            APPLIED_PLURAL,
            lambda t: self._custom.replace_namespaced_custom_object(
                GROUP,
                VERSION,
                namespace,
                APPLIED_PLURAL,
                APPLIED_NAME,
                applied_body(namespace, status, resource_version),
                field_manager=FIELD_MANAGER,
                _request_timeout=t,
            ),
            self._observer,
        )
        return AppliedObject.from_object(answer)

    async def delete(self, namespace: str, uid: str) -> bool:
        """Delete the object whose uid is ``uid`` (a precondition: 409 if it was replaced by
        another). Returns ``False`` if it was already gone. Raises ``ConflictError``, other
        ``ApiError``, ``TransportError``."""
        try:
            await call_api(
                "delete",
                APPLIED_PLURAL,
                lambda t: self._custom.delete_namespaced_custom_object(
                    GROUP,
                    VERSION,
                    namespace,
                    APPLIED_PLURAL,
                    APPLIED_NAME,
                    body={"preconditions": {"uid": uid}} if uid else None,
                    _request_timeout=t,
                ),
                self._observer,
            )
        except NotFoundError:
            return False
        return True
