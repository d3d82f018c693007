"""The Kubernetes quota accessor: a ResourceQuota informer and ``resourcequotas/status`` writes.

Port of ``quotaAccessor`` (kubernetes/kubernetes ``staging/src/k8s.io/apiserver/pkg/
admission/plugin/resourcequota/resource_access.go``) over kubernetes_asyncio. The informer
is a plain list+watch of ResourceQuotas (all namespaces, or one): paginated list, watch with
bookmarks from the list's resourceVersion, resumed from the last seen resourceVersion, and a
relist on ``410 Gone``/``Expired``. Status writes send the whole object with its
resourceVersion, so the apiserver refuses a stale one with 409 Conflict.

Every request has a timeout from :mod:`dynquota.kube.timeouts` (a leaf module depending only
on aiohttp): lists and writes 10 s in total (3 s connect), watches a socket-read timeout of
their ``timeoutSeconds`` + 30 s and no total.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from typing import Any

import aiohttp
from kubernetes_asyncio import client

from dynquota.kube import timeouts

from .accessor import CachingQuotaAccessor
from .errors import QuotaAccessError, QuotaConflictError
from .types import ResourceQuota

__all__ = ["KubernetesQuotaAccessor"]

log = logging.getLogger(__name__)


class _ExpiredError(Exception):
    """The watch's resourceVersion is too old (410 Gone): relist."""


async def _error_from(resp: Any, what: str) -> QuotaAccessError:
    text = await resp.text()
    message, reason = text.strip(), ""
    with contextlib.suppress(ValueError):
        status = json.loads(text)
        message = str(status.get("message", message))
        reason = str(status.get("reason", ""))
    if resp.status == 409:
        return QuotaConflictError(message)
    return QuotaAccessError(f"{what}: {resp.status} {reason}: {message}", resp.status, reason)


class KubernetesQuotaAccessor(CachingQuotaAccessor):
    """Quotas of a real cluster for the evaluator.

    Needs RBAC ``list``/``watch`` on ``resourcequotas`` and ``update`` on
    ``resourcequotas/status``. Call :meth:`start` (starts the informer) and :meth:`stop`.

    Args:
        api_client: a kubernetes_asyncio ``ApiClient``.
        namespace: watch one namespace only (default: all namespaces).
        watch_timeout: seconds of one watch request before it is renewed.
        request_timeout: seconds in total for one list page or write (default 10, see
            :mod:`dynquota.kube.timeouts`).
        page_size: list page size (``limit``).
        informer_lag: seconds to hold back each watch event before the informer applies it
            (0: at once); for tests and benchmarks that need a lagging informer.
        **cache_options: see :class:`CachingQuotaAccessor`.
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
        self._api: Any = client.CoreV1Api(api_client)
        self._namespace = namespace
        self._watch_timeout = watch_timeout
        self._request_timeout = request_timeout
        self._page_size = page_size
        self._informer_lag = informer_lag
        self._delayed: set[asyncio.TimerHandle] = set()
        self._store: dict[str, dict[str, ResourceQuota]] = {}
        self._synced = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.relists = 0

    # --- lifecycle ------------------------------------------------------------------------

    async def start(self, sync_timeout: float | None = 60.0) -> None:
        """Start the informer; wait (up to ``sync_timeout`` seconds, None: don't) for its
        first list. Until it has synced, reads use live lookups.

        Raises:
            TimeoutError: not synced within ``sync_timeout``.
        """
        if self._task is None:
            self._task = asyncio.ensure_future(self._run())
        if sync_timeout is not None:
            await asyncio.wait_for(self._synced.wait(), sync_timeout)

    async def stop(self) -> None:
        """Stop the informer (its cache is kept, and stops following the cluster)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        for handle in self._delayed:
            handle.cancel()
        self._delayed.clear()

    # --- informer -------------------------------------------------------------------------

    @property
    def informer_synced(self) -> bool:
        """Whether the informer's first list has completed."""
        return self._synced.is_set()

    def informer_quotas(self, namespace: str) -> list[ResourceQuota]:
        """The informer's copies of ``namespace``'s quotas."""
        return list(self._store.get(namespace, {}).values())

    async def _run(self) -> None:
        backoff = 0.5
        while True:
            try:
                rv = await self._relist()
                self._synced.set()
                backoff = 0.5
                while True:
                    rv = await self._watch(rv)
            except asyncio.CancelledError:
                raise
            except _ExpiredError:
                log.info("resourcequota watch expired; relisting")
            except Exception as e:
                log.warning("resourcequota informer failed (%s); retrying in %.1f s", e, backoff)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 30.0)

    def _short_timeout(self) -> aiohttp.ClientTimeout:
        if self._request_timeout is None:
            return timeouts.short_timeout()
        return aiohttp.ClientTimeout(
            total=self._request_timeout,
            sock_connect=min(timeouts.CONNECT_TIMEOUT, self._request_timeout),
        )

    def _list_call(self, **kwargs: Any) -> Any:
        timeout = kwargs.pop("_request_timeout", None) or self._short_timeout()
        if self._namespace is None:
            return self._api.list_resource_quota_for_all_namespaces(
                _preload_content=False, _request_timeout=timeout, **kwargs
            )
        return self._api.list_namespaced_resource_quota(
            self._namespace, _preload_content=False, _request_timeout=timeout, **kwargs
        )

    async def _relist(self) -> str:
        self.relists += 1
        store: dict[str, dict[str, ResourceQuota]] = {}
        token: str | None = None
        while True:
            kwargs: dict[str, Any] = {"limit": self._page_size}
            if token:
                kwargs["_continue"] = token
            resp = await self._list_call(**kwargs)
            async with resp:
                if resp.status != 200:
                    if resp.status == 410:
                        raise _ExpiredError()
                    raise await _error_from(resp, "listing resourcequotas")
                page = await resp.json()
            for item in page.get("items") or ():
                item.setdefault("apiVersion", "v1")
                item.setdefault("kind", "ResourceQuota")
                q = ResourceQuota.from_object(item)
                store.setdefault(q.namespace, {})[q.name] = q
            meta = page.get("metadata") or {}
            token = meta.get("continue") or None
            if not token:
                self._store = store
                return str(meta.get("resourceVersion", ""))

    async def _watch(self, rv: str) -> str:
        resp = await self._list_call(
            watch=True,
            resource_version=rv,
            allow_watch_bookmarks=True,
            timeout_seconds=self._watch_timeout,
            _request_timeout=timeouts.watch_timeout(self._watch_timeout),
        )
        async with resp:
            if resp.status != 200:
                if resp.status == 410:
                    raise _ExpiredError()
                raise await _error_from(resp, "watching resourcequotas")
            async for line in resp.content:
                if not line.strip():
                    continue
                event = json.loads(line)
                kind, obj = event.get("type"), event.get("object") or {}
                if kind == "ERROR":
                    if obj.get("code") == 410:
                        raise _ExpiredError()
                    raise QuotaAccessError(
                        f"watching resourcequotas: {obj.get('message')}",
                        int(obj.get("code") or 0),
                        str(obj.get("reason") or ""),
                    )
                rv = str((obj.get("metadata") or {}).get("resourceVersion", rv))
                if kind == "BOOKMARK":
                    continue
                self._deliver(str(kind), ResourceQuota.from_object(obj))
        return rv

    def _deliver(self, kind: str, quota: ResourceQuota) -> None:
        if self._informer_lag <= 0:
            self._apply(kind, quota)
            return
        handle: asyncio.TimerHandle | None = None

        def later() -> None:
            assert handle is not None
            self._delayed.discard(handle)
            self._apply(kind, quota)

        handle = asyncio.get_running_loop().call_later(self._informer_lag, later)
        self._delayed.add(handle)

    def _apply(self, kind: str, quota: ResourceQuota) -> None:
        names = self._store.setdefault(quota.namespace, {})
        if kind == "DELETED":
            names.pop(quota.name, None)
        else:
            names[quota.name] = quota

    # --- API calls ------------------------------------------------------------------------

    async def list_quotas(self, namespace: str) -> list[ResourceQuota]:
        """One live list of ``namespace``'s quotas.

        Raises:
            QuotaAccessError: the API answered an error or could not be reached.
        """
        try:
            timeout = self._short_timeout()
            async with asyncio.timeout(timeouts.deadline(timeout)):
                resp = await self._api.list_namespaced_resource_quota(
                    namespace, _preload_content=False, _request_timeout=timeout
                )
                async with resp:
                    if resp.status != 200:
                        raise await _error_from(resp, f"listing resourcequotas in {namespace}")
                    page = await resp.json()
        except (aiohttp.ClientError, TimeoutError) as e:
            raise QuotaAccessError(f"listing resourcequotas in {namespace}: {e}", 0) from e
        out = []
        for item in page.get("items") or ():
            item.setdefault("apiVersion", "v1")
            item.setdefault("kind", "ResourceQuota")
            out.append(ResourceQuota.from_object(item))
        return out

    async def write_quota_status(self, quota: ResourceQuota) -> ResourceQuota:
        """PUT ``resourcequotas/status`` with ``metadata.resourceVersion`` as precondition.

        Raises:
            QuotaConflictError: 409, the resourceVersion is stale.
            QuotaAccessError: any other error (``status`` is the HTTP code, 0 if none).
        """
        try:
            timeout = self._short_timeout()
            async with asyncio.timeout(timeouts.deadline(timeout)):
                resp = await self._api.replace_namespaced_resource_quota_status(
                    quota.name,
                    quota.namespace,
                    quota.to_object(),
                    _preload_content=False,
                    _request_timeout=timeout,
                )
                async with resp:
                    if resp.status != 200:
                        raise await _error_from(resp, f"writing status of quota {quota.key}")
                    obj = await resp.json()
        except (aiohttp.ClientError, TimeoutError) as e:
            raise QuotaAccessError(f"writing status of quota {quota.key}: {e}", 0) from e
        return ResourceQuota.from_object(obj)
