"""Reading and writing quota documents for admission, with the caches kube-apiserver uses.

Port of kubernetes/kubernetes ``staging/src/k8s.io/apiserver/pkg/admission/plugin/
resourcequota/resource_access.go`` (``QuotaAccessor``, ``quotaAccessor.GetQuotas``,
``UpdateQuotaStatus``, ``checkCache``):

* an informer (list+watch) is the normal source of quotas;
* the **look-aside cache** (LRU, 100 entries) holds the quotas this process wrote. Informers
  lag behind writes, and evaluating the next batch against the informer's older copy would
  only produce a 409 Conflict. A cached copy wins while its resourceVersion is newer, compared
  as integers (etcd revisions are monotonic); once the informer has caught up, the cached
  entry is dropped. Upstream measured 22 writes with 12 conflicts before, 15 with 0 after.
* the **live-lookup cache** (LRU, 100 namespaces, 30 s TTL) answers only while the informer
  has **not synced** (as kube-apiserver v1.37.2: a synced informer that holds no quota for a
  namespace is believed, so a namespace without quota costs no list): one live list per
  namespace, shared by concurrent callers through a singleflight, so a cold start neither
  admits unmetered nor floods the apiserver with identical lists (upstream #22422).

Implementations subclass :class:`CachingQuotaAccessor` and supply the informer view, the live
list and the status write.
"""

from __future__ import annotations

import asyncio
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from cachetools import LRUCache, TTLCache

from .errors import QuotaConflictError
from .types import ResourceQuota

__all__ = [
    "AccessorStats",
    "CachingQuotaAccessor",
    "InformerLag",
    "LiveQuotaAccessor",
    "QuotaAccessor",
    "compare_resource_versions",
]


@runtime_checkable
class QuotaAccessor(Protocol):
    """Where the evaluator reads and writes quotas (upstream ``QuotaAccessor``)."""

    async def get_quotas(self, namespace: str) -> list[ResourceQuota]:
        """Every quota of ``namespace``, possibly from caches.

        Raises:
            QuotaAccessError: the quotas could not be read.
        """
        ...

    async def update_quota_status(self, quota: ResourceQuota) -> ResourceQuota:
        """Write ``quota.used`` (and ``hard``) to ``resourcequotas/status``, conditional on
        ``quota.resource_version``; return the stored quota with its new resourceVersion.

        Raises:
            QuotaConflictError: the resourceVersion is no longer current (409).
            QuotaAccessError: any other failure.
        """
        ...


@runtime_checkable
class LiveQuotaAccessor(QuotaAccessor, Protocol):
    """An accessor that can also read the current quotas past every cache."""

    async def get_quotas_live(self, namespace: str) -> list[ResourceQuota]:
        """Every quota of ``namespace`` as stored now (one list call).

        Raises:
            QuotaAccessError: the quotas could not be read.
        """
        ...


def _rv(text: str) -> int | None:
    try:
        return int(text)
    except ValueError:
        return None


def compare_resource_versions(a: str, b: str) -> int | None:
    """-1, 0 or 1 comparing two resourceVersions as integers; None if either is not one.

    Upstream ``storage.APIObjectVersioner.CompareResourceVersion``. resourceVersions are
    opaque in the API contract, but kube-apiserver's are etcd revisions.
    """
    x, y = _rv(a), _rv(b)
    if x is None or y is None:
        return None
    return (x > y) - (x < y)


@dataclass
class AccessorStats:
    """Counters of one accessor (all counts since creation).

    Attributes:
        status_writes: status writes attempted.
        conflicts: status writes answered 409 Conflict.
        write_errors: status writes that failed otherwise.
        live_lists: list calls made past the informer (informer not synced yet, re-reads).
        look_aside_hits: reads where this process's own newer write replaced the informer's
            copy.
        live_cache_hits: reads answered from the live-lookup cache.
    """

    status_writes: int = 0
    conflicts: int = 0
    write_errors: int = 0
    live_lists: int = 0
    look_aside_hits: int = 0
    live_cache_hits: int = 0


class CachingQuotaAccessor(ABC):
    """Informer + look-aside cache + live-lookup cache with singleflight.

    Args:
        look_aside: keep the look-aside cache of written quotas (switch off to measure it).
        look_aside_size: entries of the look-aside LRU (upstream 100).
        live_lookup_size: namespaces in the live-lookup LRU (upstream 100).
        live_ttl: seconds a live lookup is reused (upstream 30).
        timer: monotonic clock in seconds for the TTL (injectable for tests).
    """

    def __init__(
        self,
        *,
        look_aside: bool = True,
        look_aside_size: int = 100,
        live_lookup_size: int = 100,
        live_ttl: float = 30.0,
        timer: Callable[[], float] = time.monotonic,
    ) -> None:
        self.stats = AccessorStats()
        self._look_aside_enabled = look_aside
        self._look_aside: LRUCache[str, ResourceQuota] = LRUCache(maxsize=look_aside_size)
        self._live: TTLCache[str, list[ResourceQuota]] = TTLCache(
            maxsize=live_lookup_size, ttl=live_ttl, timer=timer
        )
        self._inflight: dict[str, asyncio.Future[list[ResourceQuota]]] = {}

    # --- to implement ---------------------------------------------------------------------

    @property
    @abstractmethod
    def informer_synced(self) -> bool:
        """Whether the informer has completed its initial list."""

    @abstractmethod
    def informer_quotas(self, namespace: str) -> list[ResourceQuota]:
        """The informer's current copies of ``namespace``'s quotas (no I/O)."""

    @abstractmethod
    async def list_quotas(self, namespace: str) -> list[ResourceQuota]:
        """List ``namespace``'s quotas from the API (one call).

        Raises:
            QuotaAccessError: the list failed.
        """

    @abstractmethod
    async def write_quota_status(self, quota: ResourceQuota) -> ResourceQuota:
        """One conditional ``resourcequotas/status`` write; returns the stored quota.

        Raises:
            QuotaConflictError: 409.
            QuotaAccessError: any other failure.
        """

    # --- QuotaAccessor --------------------------------------------------------------------

    async def get_quotas(self, namespace: str) -> list[ResourceQuota]:
        """Quotas of ``namespace``: informer, else live lookup; then the look-aside overlay.

        Upstream ``quotaAccessor.GetQuotas`` (v1.37.2). The live lookup is used only while
        the informer has not synced (a synced informer with no quota for the namespace is
        believed: no list); it is cached for ``live_ttl`` and shared by concurrent callers.

        Raises:
            QuotaAccessError: a needed live list failed.
        """
        if self.informer_synced:
            items = self.informer_quotas(namespace)
        else:
            cached = self._live.get(namespace)
            if cached is not None:
                self.stats.live_cache_hits += 1
                items = cached
            else:
                items = await self._singleflight_list(namespace)
        return [self._check_cache(q) for q in items]

    async def get_quotas_live(self, namespace: str) -> list[ResourceQuota]:
        """Quotas of ``namespace`` as stored now (one list), refreshing the live-lookup cache.

        Raises:
            QuotaAccessError: the list failed.
        """
        items = await self._list_counted(namespace)
        self._live[namespace] = items
        return [self._check_cache(q) for q in items]

    async def update_quota_status(self, quota: ResourceQuota) -> ResourceQuota:
        """Write the status; on success remember the result in the look-aside cache.

        Upstream ``quotaAccessor.UpdateQuotaStatus``.

        Raises:
            QuotaConflictError: 409 (counted in ``stats.conflicts``).
            QuotaAccessError: any other failure (counted in ``stats.write_errors``).
        """
        self.stats.status_writes += 1
        try:
            stored = await self.write_quota_status(quota)
        except QuotaConflictError:
            self.stats.conflicts += 1
            raise
        except Exception:
            self.stats.write_errors += 1
            raise
        if self._look_aside_enabled:
            self._look_aside[stored.key] = stored
        return stored

    def cached_writes(self) -> dict[str, str]:
        """The look-aside cache: ``namespace/name`` -> resourceVersion of this process's last
        write (for inspection; reading counts as a use for the LRU order)."""
        return {key: self._look_aside[key].resource_version for key in list(self._look_aside)}

    # --- internals ------------------------------------------------------------------------

    def _check_cache(self, quota: ResourceQuota) -> ResourceQuota:
        """The newer of ``quota`` and this process's last write of it (upstream ``checkCache``).

        A cached entry that is not newer (or not comparable) is dropped.
        """
        cached = self._look_aside.get(quota.key)
        if cached is None:
            return quota
        order = compare_resource_versions(quota.resource_version, cached.resource_version)
        if order is None or order >= 0:
            self._look_aside.pop(quota.key, None)
            return quota
        self.stats.look_aside_hits += 1
        return cached

    async def _list_counted(self, namespace: str) -> list[ResourceQuota]:
        self.stats.live_lists += 1
        return await self.list_quotas(namespace)

    async def _singleflight_list(self, namespace: str) -> list[ResourceQuota]:
        future = self._inflight.get(namespace)
        if future is None:
            future = asyncio.ensure_future(self._live_lookup(namespace))
            self._inflight[namespace] = future
            future.add_done_callback(lambda f: self._lookup_done(namespace, f))
        # shield: one caller giving up must not cancel the lookup the others wait for.
        return await asyncio.shield(future)

    async def _live_lookup(self, namespace: str) -> list[ResourceQuota]:
        items = await self._list_counted(namespace)
        self._live[namespace] = items
        return items

    def _lookup_done(self, namespace: str, future: asyncio.Future[list[ResourceQuota]]) -> None:
        if self._inflight.get(namespace) is future:
            del self._inflight[namespace]
        if not future.cancelled():
            future.exception()  # retrieved: every waiter already received it


class InformerLag:
    """Holds informer events back ``seconds`` before they are applied: an informer that lags
    behind the store, as a real one does, for tests and benchmarks (``seconds <= 0``: none).

    :meth:`call` runs ``callback`` after ``seconds`` (at once when there is no lag or no
    running event loop); :meth:`cancel` drops the callbacks still held.
    """

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._held: set[asyncio.TimerHandle] = set()

    def call(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` once the lag has passed."""
        if self.seconds <= 0:
            callback()
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            callback()
            return
        handle: asyncio.TimerHandle | None = None

        def fire() -> None:
            assert handle is not None
            self._held.discard(handle)
            callback()

        handle = loop.call_later(self.seconds, fire)
        self._held.add(handle)

    def cancel(self) -> None:
        """Drop every callback still held."""
        for handle in self._held:
            handle.cancel()
        self._held.clear()
