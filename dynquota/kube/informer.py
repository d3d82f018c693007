"""Metadata-only informers: cluster-wide list+watch of pods and ConfigMaps into tallies (I/O).

Each :class:`MetadataInformer` is a :class:`~dynquota._k8s.reflector.Reflector` (list,
watch with bookmarks, relist and replace on ``410 Gone``/``Expired``, backoff with jitter)
whose store is one :class:`~dynquota.usage.ResourceTally` equal to what the quota controller
counts, without ever holding an object: each listed object is reduced to an
:class:`~dynquota.usage.Entry` (namespace, uid, charge expiry) page by page, and the tally is
*replaced* by a full list's entries.

Lists and watches ask for metadata only:
``Accept: application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1`` (lists) and
``application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1`` (watches); no
``resourceVersion`` is sent with a list, so it is a consistent read.

Pods are watched with the field selector ``status.phase!=Succeeded,status.phase!=Failed``, so
a pod turning terminal arrives as DELETED; ConfigMaps are watched without one. Nothing is ever
written. A change to a namespace's tally (an object came or went, or a pod began terminating)
is reported through ``on_change(namespace, resource)``; events that change no entry are not.
A watch event that adds or removes an entry (``ADDED``, ``DELETED``; not a list, whose changes
are not writes seen) is also reported through ``on_write(namespace, resource, event_type)``:
the write-rate governor's churn counts (:mod:`dynquota.operator.governor`).

The I/O sits behind :class:`MetadataSource` (:class:`KubeMetadataSource` for a real cluster),
so the informer logic is unit-tested against a fake source.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Final, Protocol

from kubernetes_asyncio import client as k8s_client

from dynquota._k8s.backoff import Backoff
from dynquota._k8s.paginate import ListPage
from dynquota._k8s.reflector import Collection, ListerWatcher, Reflector
from dynquota.usage import (
    CONFIGMAPS,
    INDEFINITE,
    POD_FIELD_SELECTOR,
    PODS,
    Entry,
    ResourceTally,
    charge,
)

__all__ = [
    "CONFIGMAPS_WATCH",
    "METADATA_LIST_ACCEPT",
    "METADATA_WATCH_ACCEPT",
    "PODS_WATCH",
    "ChangeCallback",
    "KubeMetadataSource",
    "ListPage",
    "MetadataInformer",
    "MetadataSource",
    "UsageWatcher",
    "WatchedResource",
    "WriteCallback",
]

log = logging.getLogger(__name__)

METADATA_LIST_ACCEPT: Final = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"
"""``Accept`` header asking for a ``PartialObjectMetadataList`` (list requests)."""
METADATA_WATCH_ACCEPT: Final = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"
"""``Accept`` header asking for ``PartialObjectMetadata`` objects (watch requests)."""

ChangeCallback = Callable[[str, str], None]
"""``on_change(namespace, resource)``: the tally of ``resource`` in ``namespace`` changed."""
WriteCallback = Callable[[str, str, str], None]
"""``on_write(namespace, resource, event_type)``: a watch event (``ADDED`` or ``DELETED``)
added or removed an object of ``resource`` in ``namespace``."""


@dataclass(frozen=True)
class WatchedResource:
    """A cluster-wide collection to count: quota key, API path and optional field selector."""

    resource: str
    """Quota key and API resource name (``pods``, ``configmaps``)."""
    path: str
    """Cluster-wide collection path, e.g. ``/api/v1/pods``."""
    field_selector: str | None = None
    """Field selector sent with both list and watch, or ``None``."""


PODS_WATCH: Final = WatchedResource(PODS, "/api/v1/pods", POD_FIELD_SELECTOR)
"""Non-terminal pods in every namespace."""
CONFIGMAPS_WATCH: Final = WatchedResource(CONFIGMAPS, "/api/v1/configmaps")
"""Every ConfigMap in every namespace."""


class MetadataSource(ListerWatcher, Protocol):
    """A :class:`~dynquota._k8s.reflector.ListerWatcher` that says what it watches."""

    @property
    def watched(self) -> WatchedResource:
        """The collection this source lists and watches."""
        ...


class KubeMetadataSource(Collection):
    """:class:`MetadataSource` over a kubernetes_asyncio ``ApiClient`` (read-only GETs):
    a metadata-only :class:`~dynquota._k8s.reflector.Collection` of ``watched.path``.

    Timeouts default to :mod:`dynquota._k8s.timeouts`: a list page is a short call (10 s
    total, 3 s connect), a watch may stay silent for ``timeout_seconds + 30`` seconds before
    the connection is deemed dead; ``request_timeout``/``connect_timeout``/``read_margin``
    (seconds) override them. ``bytes_received`` counts response body bytes after
    decompression (list pages and watch lines).
    """

    def __init__(
        self,
        api_client: k8s_client.ApiClient,
        watched: WatchedResource,
        *,
        request_timeout: float | None = None,
        connect_timeout: float | None = None,
        read_margin: float | None = None,
    ) -> None:
        super().__init__(
            api_client,
            watched.path,
            field_selector=watched.field_selector,
            list_accept=METADATA_LIST_ACCEPT,
            watch_accept=METADATA_WATCH_ACCEPT,
            request_timeout=request_timeout,
            connect_timeout=connect_timeout,
            read_margin=read_margin,
        )
        self._watched = watched

    @property
    def watched(self) -> WatchedResource:
        """The collection this source lists and watches."""
        return self._watched


class MetadataInformer(Reflector[Entry]):
    """List+watch one :class:`MetadataSource` into one :class:`~dynquota.usage.ResourceTally`.

    Run :meth:`run` as a task (it loops until cancelled). Health and metrics are the
    reflector's (:class:`~dynquota._k8s.reflector.Reflector`: ``synced``, ``lists``,
    ``relists``, ``restarts``, ``watch_cycles``, ``events``, ``bookmarks``, ...).
    ``watch_timeout`` is the watch's ``timeoutSeconds``; ``page_size`` the list ``limit``.
    Raises ``ValueError`` when ``tally`` counts another resource than ``source`` watches.
    """

    def __init__(
        self,
        source: MetadataSource,
        tally: ResourceTally,
        *,
        on_change: ChangeCallback | None = None,
        on_write: WriteCallback | None = None,
        watch_timeout: int = 300,
        page_size: int = 500,
        backoff: Backoff | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if tally.resource != source.watched.resource:
            raise ValueError(
                f"tally counts {tally.resource!r} but the source watches "
                f"{source.watched.resource!r}"
            )
        super().__init__(
            source,
            name=source.watched.resource,
            watch_timeout=watch_timeout,
            page_size=page_size,
            backoff=backoff if backoff is not None else Backoff(),
            clock=clock,
        )
        self.tally = tally
        self.resource = source.watched.resource
        self.on_change = on_change
        self.on_write = on_write
        self._changed: set[str] = set()

    # -- the store ----------------------------------------------------------------------------

    def convert(self, obj: Mapping[str, Any]) -> Entry | None:
        """The tally entry of one object, or ``None`` (logged) without namespace or uid."""
        metadata = obj.get("metadata")
        if not isinstance(metadata, Mapping):
            log.warning("%s: object without metadata ignored", self.resource)
            return None
        namespace = metadata.get("namespace")
        uid = metadata.get("uid")
        if not isinstance(namespace, str) or not isinstance(uid, str) or not namespace or not uid:
            log.warning("%s: object without namespace or uid ignored", self.resource)
            return None
        try:
            expiry = charge(self.resource, obj)
        except ValueError as exc:  # malformed deletionTimestamp: keep charging (conservative)
            log.warning("%s %s/%s: %s", self.resource, namespace, metadata.get("name"), exc)
            expiry = INDEFINITE
        return Entry(namespace, uid, expiry)

    def replace(self, items: list[Entry]) -> None:
        """Replace the tally; the namespaces it changed are notified by :meth:`listed`."""
        self._changed = self.tally.replace(items)

    def listed(self) -> None:
        """Log the list and notify every namespace whose count it changed."""
        changed, self._changed = self._changed, set()
        log.info(
            "%s: listed %d objects in %d namespaces at resourceVersion %s",
            self.resource,
            len(self.tally),
            len(self.tally.namespaces()),
            self.resource_version,
        )
        self._notify(sorted(changed))

    def apply(self, event_type: str, obj: Mapping[str, Any]) -> None:
        """Apply one event to the tally; notify its namespace if its count changed."""
        entry = self.convert(obj)
        if entry is not None and self.tally.apply(
            event_type, entry.namespace, entry.uid, entry.expiry
        ):
            if self.on_write is not None and event_type in ("ADDED", "DELETED"):
                try:
                    self.on_write(entry.namespace, self.resource, event_type)
                except Exception:
                    log.exception("%s: on_write(%r) failed", self.resource, entry.namespace)
            self._notify((entry.namespace,))

    def _notify(self, namespaces: Iterable[str]) -> None:
        if self.on_change is None:
            return
        for namespace in namespaces:
            try:
                self.on_change(namespace, self.resource)
            except Exception:
                log.exception("%s: on_change(%r) failed", self.resource, namespace)


class UsageWatcher:
    """Usage of every tracked resource: one :class:`MetadataInformer` per source.

    Build it with :meth:`for_cluster` (pods with the phase field selector, ConfigMaps) or
    from explicit sources. ``on_change(namespace, resource)`` is called on every tally
    change; an ``asyncio.Queue``'s ``put_nowait`` wrapped in a lambda works as well.
    Use as ``async with watcher:`` (or :meth:`start` / :meth:`stop`).
    """

    def __init__(
        self,
        sources: Sequence[MetadataSource],
        *,
        on_change: ChangeCallback | None = None,
        on_write: WriteCallback | None = None,
        watch_timeout: int = 300,
        page_size: int = 500,
        backoff: Callable[[], Backoff] = Backoff,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.clock = clock
        self.informers: dict[str, MetadataInformer] = {}
        for source in sources:
            resource = source.watched.resource
            if resource in self.informers:
                raise ValueError(f"two sources for {resource!r}")
            self.informers[resource] = MetadataInformer(
                source,
                ResourceTally(resource),
                on_change=on_change,
                on_write=on_write,
                watch_timeout=watch_timeout,
                page_size=page_size,
                backoff=backoff(),
                clock=clock,
            )
        self._tasks: list[asyncio.Task[None]] = []

    @classmethod
    def for_cluster(
        cls,
        api_client: k8s_client.ApiClient,
        *,
        resources: Sequence[WatchedResource] = (PODS_WATCH, CONFIGMAPS_WATCH),
        **kwargs: Any,
    ) -> UsageWatcher:
        """Watch ``resources`` (default: pods and ConfigMaps) through ``api_client``.

        ``kwargs`` go to the constructor (``on_change``, ``watch_timeout``, ...).
        """
        sources = [KubeMetadataSource(api_client, watched) for watched in resources]
        return cls(sources, **kwargs)

    async def __aenter__(self) -> UsageWatcher:
        self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.stop()

    def start(self) -> None:
        """Start one task per informer (idempotent)."""
        if self._tasks:
            return
        self._tasks = [
            asyncio.create_task(informer.run(), name=f"dynquota-informer-{resource}")
            for resource, informer in self.informers.items()
        ]

    async def stop(self) -> None:
        """Cancel the informer tasks and wait for them to end.

        A task that had already died is logged, not raised (:meth:`wait_synced` and
        :meth:`healthy` report it while running).
        """
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        results = await asyncio.gather(*tasks, return_exceptions=True)
        for task, result in zip(tasks, results, strict=True):
            if isinstance(result, Exception):
                log.error("informer task %s had died: %r", task.get_name(), result)

    @property
    def synced(self) -> bool:
        """Whether every informer has applied its first full list."""
        return all(informer.synced for informer in self.informers.values())

    async def wait_synced(self, timeout: float | None = None) -> None:
        """Wait until every informer is synced; ``TimeoutError`` after ``timeout`` seconds.

        Raises what killed an informer task if one ended before syncing.
        """
        async with asyncio.timeout(timeout):
            while not self.synced:
                for task in self._tasks:
                    if task.done():
                        task.result()
                        raise RuntimeError(f"informer task {task.get_name()} ended")
                waiters = [
                    asyncio.ensure_future(informer.wait_synced())
                    for informer in self.informers.values()
                    if not informer.synced
                ]
                try:
                    await asyncio.wait(
                        [*waiters, *self._tasks], return_when=asyncio.FIRST_COMPLETED
                    )
                finally:
                    for waiter in waiters:
                        waiter.cancel()

    def healthy(self, now: float | None = None, margin: float = 60.0) -> bool:
        """Liveness: every informer task alive and healthy (see
        :meth:`MetadataInformer.healthy`); ``now`` defaults to the clock."""
        when = self.clock() if now is None else now
        if any(task.done() for task in self._tasks):
            return False
        return all(informer.healthy(when, margin) for informer in self.informers.values())

    def alive(self, now: float | None = None, margin: float = 60.0) -> bool:
        """Liveness: every informer task alive and its loop making progress (see
        :meth:`~dynquota._k8s.reflector.Reflector.alive`: an unreachable apiserver keeps it
        true); ``now`` defaults to the clock."""
        when = self.clock() if now is None else now
        if any(task.done() for task in self._tasks):
            return False
        return all(informer.alive(when, margin) for informer in self.informers.values())

    def tally(self, resource: str) -> ResourceTally:
        """The live tally of ``resource`` (``KeyError`` if not watched)."""
        return self.informers[resource].tally

    def usage(self, namespace: str, resource: str, now: float | None = None) -> int:
        """Count of ``resource`` the quota charges in ``namespace`` at ``now``."""
        when = self.clock() if now is None else now
        return self.informers[resource].tally.usage(namespace, when)

    def usages(self, namespace: str, now: float | None = None) -> dict[str, int]:
        """``{resource: count}`` for every watched resource in ``namespace``."""
        when = self.clock() if now is None else now
        return {
            resource: informer.tally.usage(namespace, when)
            for resource, informer in self.informers.items()
        }

    def next_expiry(self, namespace: str, now: float | None = None) -> float | None:
        """Earliest instant (seconds since the epoch) after which a count in ``namespace``
        drops without any event (a terminating pod's grace passing), or ``None``."""
        when = self.clock() if now is None else now
        pending = [
            expiry
            for informer in self.informers.values()
            if (expiry := informer.tally.next_expiry(namespace, when)) is not None
        ]
        return min(pending) if pending else None

    def namespaces(self) -> set[str]:
        """Namespaces holding at least one watched object."""
        found: set[str] = set()
        for informer in self.informers.values():
            found.update(informer.tally.namespaces())
        return found

    def stats(self) -> dict[str, dict[str, Any]]:
        """Counters and times per resource, for metrics and ``dynquota plan``."""
        return {
            resource: {
                "synced": informer.synced,
                "resource_version": informer.resource_version,
                "objects": len(informer.tally),
                "lists": informer.lists,
                "relists": informer.relists,
                "restarts": informer.restarts,
                "watch_cycles": informer.watch_cycles,
                "events": informer.events,
                "bookmarks": informer.bookmarks,
                "last_heard": informer.last_heard,
                "last_watch_cycle": informer.last_watch_cycle,
                "last_error": informer.last_error,
            }
            for resource, informer in self.informers.items()
        }
