"""The Kubernetes quota accessor: a ResourceQuota informer and ``resourcequotas/status`` writes.

Port of ``quotaAccessor`` (kubernetes/kubernetes ``staging/src/k8s.io/apiserver/pkg/
admission/plugin/resourcequota/resource_access.go``) over kubernetes_asyncio. The informer
is :class:`QuotaInformer`, a :class:`~dynquota._k8s.reflector.Reflector` of ResourceQuotas
(all namespaces, or one): paginated list, watch with bookmarks from the list's
resourceVersion, resumed from the last seen resourceVersion, a relist on ``410 Gone`` (by
status code or by an ``Expired``/``Gone`` reason in a watch ``ERROR`` event), backoff with
jitter on other errors. Status writes send the whole object with its resourceVersion, so the
apiserver refuses a stale one with 409 Conflict.

Every request has a timeout from :mod:`dynquota._k8s.timeouts`: lists and writes 10 s in
total (3 s connect), watches a socket-read timeout of their ``timeoutSeconds`` + 30 s and no
total. This module imports only :mod:`dynquota._k8s` and :mod:`dynquota.quantity` (through
the package), never the operator's layers.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping
from typing import Any

import aiohttp
from kubernetes_asyncio import client

from dynquota._k8s import timeouts
from dynquota._k8s.errors import ApiError, ConflictError, KubeError, TransportError
from dynquota._k8s.reflector import Collection, ListerWatcher, Reflector
from dynquota._k8s.request import call_json
from dynquota._k8s.watch import DELETED

from .accessor import CachingQuotaAccessor, InformerLag
from .errors import InvalidObjectError, QuotaAccessError, QuotaConflictError
from .types import ResourceQuota

__all__ = ["KubernetesQuotaAccessor", "QuotaInformer"]


def _quota(obj: Mapping[str, Any]) -> ResourceQuota:
    item = dict(obj)
    item.setdefault("apiVersion", "v1")  # list items carry no apiVersion/kind
    item.setdefault("kind", "ResourceQuota")
    return ResourceQuota.from_object(item)


def _access_error(exc: KubeError, what: str) -> QuotaAccessError:
    """The admission error of a failed request: 409 is :class:`QuotaConflictError`."""
    if isinstance(exc, ConflictError):
        return QuotaConflictError(exc.message)
    if isinstance(exc, ApiError):
        return QuotaAccessError(
            f"{what}: {exc.status} {exc.reason}: {exc.message}", exc.status, exc.reason
        )
    return QuotaAccessError(f"{what}: {exc}", 0)


class QuotaInformer(Reflector[ResourceQuota]):
    """ResourceQuotas by namespace and name, kept by list+watch of ``source``.

    ``informer_lag`` (seconds, 0: none) holds each watch event back before it is applied,
    for tests and benchmarks that need a lagging informer (an
    :class:`~dynquota.admission.accessor.InformerLag`). Other arguments: see
    :class:`~dynquota._k8s.reflector.Reflector`.
    """

    def __init__(self, source: ListerWatcher, *, informer_lag: float = 0.0, **options: Any) -> None:
        super().__init__(source, name="resourcequotas", **options)
        self.informer_lag = InformerLag(informer_lag)
        self.store: dict[str, dict[str, ResourceQuota]] = {}

    def convert(self, obj: Mapping[str, Any]) -> ResourceQuota:
        """The quota of one listed object.

        Raises ``TransportError`` for one that cannot be measured (the reflector retries with
        backoff: a quota is never dropped from the store, which would admit too much).
        """
        try:
            return _quota(obj)
        except InvalidObjectError as exc:
            raise TransportError(f"resourcequotas: {exc}") from exc

    def replace(self, items: list[ResourceQuota]) -> None:
        """Swap in a full list."""
        store: dict[str, dict[str, ResourceQuota]] = {}
        for quota in items:
            store.setdefault(quota.namespace, {})[quota.name] = quota
        self.store = store

    def apply(self, event_type: str, obj: Mapping[str, Any]) -> None:
        """Apply one event, after ``informer_lag`` seconds if set."""
        quota = self.convert(obj)
        self.informer_lag.call(lambda: self._apply(event_type, quota))

    def _apply(self, event_type: str, quota: ResourceQuota) -> None:
        names = self.store.setdefault(quota.namespace, {})
        if event_type == DELETED:
            names.pop(quota.name, None)
        else:
            names[quota.name] = quota


class KubernetesQuotaAccessor(CachingQuotaAccessor):
    """Quotas of a real cluster for the evaluator.

    Needs RBAC ``list``/``watch`` on ``resourcequotas`` and ``update`` on
    ``resourcequotas/status``. Call :meth:`start` (starts the informer) and :meth:`stop`.

    Args:
        api_client: a kubernetes_asyncio ``ApiClient``.
        namespace: watch one namespace only (default: all namespaces).
        watch_timeout: seconds of one watch request before it is renewed.
        request_timeout: seconds in total for one list page or write (default 10, see
            :mod:`dynquota._k8s.timeouts`).
        page_size: list page size (``limit``).
        informer_lag: seconds to hold back each watch event before the informer applies it
            (0: at once); for tests and benchmarks that need a lagging informer.
        **cache_options: see :class:`CachingQuotaAccessor`.

    ``informer`` is the :class:`QuotaInformer` (its counters: ``lists``, ``relists``,
    ``restarts``, ...).
    """

    def __init__(
        self,
        api_client: Any,
        *,
        namespace: str | None = None,
        watch_timeout: int = 300,
        request_timeout: float | None = None,
        page_size: int = 500,
        informer_lag: float = 0.0,
        **cache_options: Any,
    ) -> None:
        super().__init__(**cache_options)
        self._api_client = api_client
        self._api: Any = client.CoreV1Api(api_client)
        self._request_timeout = request_timeout
        self._page_size = page_size
        path = (
            "/api/v1/resourcequotas"
            if namespace is None
            else f"/api/v1/namespaces/{namespace}/resourcequotas"
        )
        self.informer = QuotaInformer(
            self._collection(path),
            informer_lag=informer_lag,
            watch_timeout=watch_timeout,
            page_size=page_size,
        )
        self._task: asyncio.Task[None] | None = None

    def _collection(self, path: str) -> Collection:
        return Collection(self._api_client, path, request_timeout=self._request_timeout)

    # --- lifecycle ------------------------------------------------------------------------

    async def start(self, sync_timeout: float | None = 60.0) -> None:
        """Start the informer; wait (up to ``sync_timeout`` seconds, None: don't) for its
        first list. Until it has synced, reads use live lookups.

        Raises:
            TimeoutError: not synced within ``sync_timeout``.
        """
        if self._task is None:
            self._task = asyncio.ensure_future(self.informer.run())
        if sync_timeout is not None:
            await self.informer.wait_synced(sync_timeout)

    async def stop(self) -> None:
        """Stop the informer (its cache is kept, and stops following the cluster)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        self.informer.informer_lag.cancel()

    # --- informer -------------------------------------------------------------------------

    @property
    def informer_synced(self) -> bool:
        """Whether the informer's first list has completed."""
        return self.informer.synced

    def informer_quotas(self, namespace: str) -> list[ResourceQuota]:
        """The informer's copies of ``namespace``'s quotas."""
        return list(self.informer.store.get(namespace, {}).values())

    # --- API calls ------------------------------------------------------------------------

    async def list_quotas(self, namespace: str) -> list[ResourceQuota]:
        """One live (consistent, paginated) list of ``namespace``'s quotas.

        Raises:
            QuotaAccessError: the API answered an error or could not be reached.
        """
        what = f"listing resourcequotas in {namespace}"
        collection = self._collection(f"/api/v1/namespaces/{namespace}/resourcequotas")
        try:
            items = await collection.list_all(self._page_size)
        except KubeError as exc:
            raise _access_error(exc, what) from exc
        return [_quota(item) for item in items]

    async def write_quota_status(self, quota: ResourceQuota) -> ResourceQuota:
        """PUT ``resourcequotas/status`` with ``metadata.resourceVersion`` as precondition.

        Raises:
            QuotaConflictError: 409, the resourceVersion is stale.
            QuotaAccessError: any other error (``status`` is the HTTP code, 0 if none).
        """
        timeout = self._short_timeout()
        try:
            obj = await call_json(
                "update",
                "resourcequotas/status",
                lambda t: self._api.replace_namespaced_resource_quota_status(
                    quota.name,
                    quota.namespace,
                    quota.to_object(),
                    _preload_content=False,
                    _request_timeout=t,
                ),
                timeout=timeout,
            )
        except KubeError as exc:
            raise _access_error(exc, f"writing status of quota {quota.key}") from exc
        return ResourceQuota.from_object(obj)

    def _short_timeout(self) -> aiohttp.ClientTimeout:
        if self._request_timeout is None:
            return timeouts.short_timeout()
        return aiohttp.ClientTimeout(
            total=self._request_timeout,
            sock_connect=min(timeouts.CONNECT_TIMEOUT, self._request_timeout),
        )
