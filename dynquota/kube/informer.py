"""Metadata-only informers: cluster-wide list+watch of pods and ConfigMaps into tallies (I/O).

Each :class:`MetadataInformer` keeps one :class:`~dynquota.usage.ResourceTally` equal to what
the quota controller counts, without ever holding an object:

1. **List**, cluster-wide and paginated (``limit``/``continue``), with
   ``Accept: application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1``: the server
   sends ``metadata`` only. No ``resourceVersion`` is sent, so the list is a consistent read;
   the tally is *replaced* by its result (objects missing from it vanish).
2. **Watch** from the list's ``resourceVersion`` with
   ``Accept: application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1``,
   ``allowWatchBookmarks=true`` and a finite ``timeoutSeconds``. When the server ends the
   stream (a completed *watch cycle*), the next watch resumes from the last resourceVersion
   seen, bookmarks included.
3. ``410 Gone`` / reason ``Expired`` — as an HTTP status or as a watch ``ERROR`` event —
   means the resourceVersion was compacted away: relist and replace. An ``ERROR`` event's
   ``Status`` never reaches the tally.
4. Connection errors, timeouts and other API errors back off exponentially with jitter and
   resume from the last resourceVersion.

Pods are watched with the field selector ``status.phase!=Succeeded,status.phase!=Failed``, so
a pod turning terminal arrives as DELETED; ConfigMaps are watched without one. Nothing is ever
written. A change to a namespace's tally (an object came or went, or a pod began terminating)
is reported through ``on_change(namespace, resource)``; events that change no entry are not.

HTTP goes through kubernetes_asyncio's ``ApiClient.call_api`` (its generated list methods and
its ``Watch`` helper force their own ``Accept`` header and build model objects, so they cannot
ask for metadata only); the JSON lines of the watch stream are decoded here.

The I/O sits behind :class:`MetadataSource` (:class:`KubeMetadataSource` for a real cluster),
so the informer logic is unit-tested against a fake source.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import AsyncGenerator, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Final, Protocol

import aiohttp
from kubernetes_asyncio import client as k8s_client

from dynquota.kube import timeouts
from dynquota.kube.backoff import Backoff
from dynquota.kube.errors import (
    GoneError,
    KubeError,
    TransportError,
    error_from_response,
    error_from_status,
)
from dynquota.usage import (
    ADDED,
    CONFIGMAPS,
    DELETED,
    INDEFINITE,
    MODIFIED,
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
]

log = logging.getLogger(__name__)

METADATA_LIST_ACCEPT: Final = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"
"""``Accept`` header asking for a ``PartialObjectMetadataList`` (list requests)."""
METADATA_WATCH_ACCEPT: Final = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"
"""``Accept`` header asking for ``PartialObjectMetadata`` objects (watch requests)."""

BOOKMARK: Final = "BOOKMARK"
ERROR: Final = "ERROR"
_TALLY_EVENTS: Final = frozenset({ADDED, MODIFIED, DELETED})

ChangeCallback = Callable[[str, str], None]
"""``on_change(namespace, resource)``: the tally of ``resource`` in ``namespace`` changed."""


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


@dataclass
class ListPage:
    """One page of a metadata-only list.

    ``items`` are decoded ``PartialObjectMetadata`` dicts (``{"metadata": {...}}``),
    ``resource_version`` the list's ``metadata.resourceVersion``, ``continue_token`` the
    token for the next page (``None`` on the last page), ``size`` the body length in bytes.
    """

    items: list[dict[str, Any]]
    resource_version: str
    continue_token: str | None
    size: int = 0


class MetadataSource(Protocol):
    """Where an informer gets its pages and watch events (the I/O adapter boundary)."""

    @property
    def watched(self) -> WatchedResource:
        """The collection this source lists and watches."""
        ...

    async def list_page(self, limit: int, continue_token: str | None) -> ListPage:
        """Fetch one list page of at most ``limit`` items.

        Raises :class:`~dynquota.kube.errors.GoneError` when ``continue_token`` expired,
        other :class:`~dynquota.kube.errors.ApiError` / ``TransportError`` on failure.
        """
        ...

    def watch(
        self, resource_version: str, timeout_seconds: int
    ) -> AsyncGenerator[dict[str, Any], None]:
        """Watch from ``resource_version``; yields decoded events ``{"type", "object"}``.

        Ends when the server ends the stream (after about ``timeout_seconds``). Raises
        :class:`~dynquota.kube.errors.GoneError` if the server answers 410,
        ``ApiError``/``TransportError`` on other failures (also mid-stream). ``ERROR``
        events are yielded as they are, for the informer to judge.
        """
        ...


_TRANSPORT_ERRORS: Final = (aiohttp.ClientError, asyncio.TimeoutError, OSError, ValueError)


class KubeMetadataSource:
    """:class:`MetadataSource` over a kubernetes_asyncio ``ApiClient`` (read-only GETs).

    Timeouts default to :mod:`dynquota.kube.timeouts`: a list page is a short call (10 s total,
    3 s connect), a watch may stay silent for ``timeout_seconds + 30`` seconds before the
    connection is deemed dead; ``request_timeout``/``connect_timeout``/``read_margin``
    (seconds) override them.
    ``bytes_received`` counts response body bytes after decompression (list pages and watch
    lines).
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
        self._api = api_client
        self._watched = watched
        self._request_timeout = request_timeout
        self._connect_timeout = connect_timeout
        self._read_margin = read_margin
        self.bytes_received = 0

    @property
    def watched(self) -> WatchedResource:
        """The collection this source lists and watches."""
        return self._watched

    def _selector(self) -> list[tuple[str, str]]:
        selector = self._watched.field_selector
        return [("fieldSelector", selector)] if selector else []

    def _list_timeout(self) -> aiohttp.ClientTimeout:
        total = timeouts.REQUEST_TIMEOUT if self._request_timeout is None else self._request_timeout
        connect = (
            timeouts.CONNECT_TIMEOUT if self._connect_timeout is None else self._connect_timeout
        )
        return aiohttp.ClientTimeout(total=total, sock_connect=min(connect, total))

    def _watch_timeout(self, timeout_seconds: int) -> aiohttp.ClientTimeout:
        default = timeouts.watch_timeout(timeout_seconds)
        return aiohttp.ClientTimeout(
            total=None,
            sock_connect=default.sock_connect
            if self._connect_timeout is None
            else self._connect_timeout,
            sock_read=default.sock_read
            if self._read_margin is None
            else timeout_seconds + self._read_margin,
        )

    async def _get(
        self, query: list[tuple[str, str]], accept: str, timeout: aiohttp.ClientTimeout
    ) -> aiohttp.ClientResponse:
        try:
            # the total (lists) also bounds what the ClientTimeout does not cover (credentials)
            async with asyncio.timeout(timeouts.deadline(timeout)):
                response: aiohttp.ClientResponse = await self._api.call_api(
                    self._watched.path,
                    "GET",
                    query_params=query,
                    header_params={"Accept": accept},
                    auth_settings=["BearerToken"],
                    _preload_content=False,
                    _request_timeout=timeout,
                )
        except _TRANSPORT_ERRORS as exc:
            raise TransportError(f"GET {self._watched.path}: {exc!r}") from exc
        except k8s_client.ApiException as exc:  # raised only for requests it could not build
            raise TransportError(f"GET {self._watched.path}: {exc}") from exc
        if response.status != 200:
            try:
                body = await response.read()
            except _TRANSPORT_ERRORS:
                body = b""
            finally:
                response.release()
            raise error_from_response(response.status, body)
        return response

    async def list_page(self, limit: int, continue_token: str | None) -> ListPage:
        """Fetch one page; see :meth:`MetadataSource.list_page`."""
        query = [("limit", str(limit)), *self._selector()]
        if continue_token:
            query.append(("continue", continue_token))
        response = await self._get(
            query,
            METADATA_LIST_ACCEPT,
            self._list_timeout(),
        )
        try:
            body = await response.read()
        except _TRANSPORT_ERRORS as exc:
            raise TransportError(f"reading list of {self._watched.path}: {exc!r}") from exc
        finally:
            response.release()
        self.bytes_received += len(body)
        try:
            decoded = json.loads(body)
        except ValueError as exc:
            raise TransportError(f"list of {self._watched.path}: malformed JSON") from exc
        items = decoded.get("items") if isinstance(decoded, dict) else None
        if items is None and isinstance(decoded, dict) and "metadata" in decoded:
            items = []  # an empty list may come as "items": null
        if not isinstance(items, list):
            raise TransportError(f"list of {self._watched.path}: not a list")
        metadata = decoded.get("metadata") or {}
        return ListPage(
            items=items,
            resource_version=str(metadata.get("resourceVersion") or ""),
            continue_token=metadata.get("continue") or None,
            size=len(body),
        )

    async def watch(
        self, resource_version: str, timeout_seconds: int
    ) -> AsyncGenerator[dict[str, Any], None]:
        """Stream watch events; see :meth:`MetadataSource.watch`."""
        query = [
            ("watch", "true"),
            ("allowWatchBookmarks", "true"),
            ("resourceVersion", resource_version),
            ("timeoutSeconds", str(timeout_seconds)),
            *self._selector(),
        ]
        response = await self._get(
            query,
            METADATA_WATCH_ACCEPT,
            self._watch_timeout(timeout_seconds),
        )
        finished = False
        try:
            while True:
                try:
                    line = await response.content.readline()
                except _TRANSPORT_ERRORS as exc:
                    raise TransportError(f"watch of {self._watched.path}: {exc!r}") from exc
                if not line:
                    finished = True
                    return
                self.bytes_received += len(line)
                if line.isspace():
                    continue
                try:
                    event = json.loads(line)
                except ValueError as exc:
                    raise TransportError(f"watch of {self._watched.path}: malformed JSON") from exc
                if not isinstance(event, dict):
                    raise TransportError(f"watch of {self._watched.path}: not an event")
                yield event
        finally:
            if finished:
                response.release()
            else:
                response.close()  # abandon the stream: never hand a half-read connection back


class MetadataInformer:
    """List+watch one :class:`MetadataSource` into one :class:`~dynquota.usage.ResourceTally`.

    Run :meth:`run` as a task (it loops until cancelled). Health and metrics, all plain
    attributes (times are seconds since the epoch from ``clock``, counters are ints):

    - ``synced`` — the first full list has been applied (stays true across relists; the
      previous tally serves until a relist completes); :meth:`wait_synced` awaits it.
    - ``synced_at`` — when the last full list was applied.
    - ``last_heard`` — when the server last sent anything (list page or watch line).
    - ``last_watch_cycle`` — when a watch last ended normally at its ``timeoutSeconds``.
    - ``resource_version`` — where the next watch resumes.
    - ``lists`` (full lists applied), ``relists`` (lists forced by 410 Gone/Expired),
      ``restarts`` (list/watch retries after other errors), ``watch_cycles``, ``events``
      (ADDED/MODIFIED/DELETED received), ``bookmarks``, ``last_error`` (text or ``None``).

    ``watch_timeout`` is the watch's ``timeoutSeconds``; ``page_size`` the list ``limit``.
    """

    def __init__(
        self,
        source: MetadataSource,
        tally: ResourceTally,
        *,
        on_change: ChangeCallback | None = None,
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
        if watch_timeout < 1 or page_size < 1:
            raise ValueError("watch_timeout and page_size must be >= 1")
        self.source = source
        self.tally = tally
        self.resource = source.watched.resource
        self.on_change = on_change
        self.watch_timeout = watch_timeout
        self.page_size = page_size
        self.backoff = backoff if backoff is not None else Backoff()
        self.clock = clock
        self.resource_version: str | None = None
        self.synced = False
        self.synced_at: float | None = None
        self.last_heard: float | None = None
        self.last_watch_cycle: float | None = None
        self.lists = 0
        self.relists = 0
        self.restarts = 0
        self.watch_cycles = 0
        self.events = 0
        self.bookmarks = 0
        self.last_error: str | None = None
        self._synced_event = asyncio.Event()
        self._gone_streak = 0

    # -- public -------------------------------------------------------------------------

    async def wait_synced(self, timeout: float | None = None) -> None:
        """Wait until the first full list is applied; raises ``TimeoutError`` after
        ``timeout`` seconds (``None``: wait for ever)."""
        async with asyncio.timeout(timeout):
            await self._synced_event.wait()

    def healthy(self, now: float, margin: float) -> bool:
        """Whether a watch cycle (or a full list) completed within ``watch_timeout + margin``
        seconds before ``now``. False before the first sync."""
        if not self.synced:
            return False
        reference = max(self.last_watch_cycle or 0.0, self.synced_at or 0.0)
        return now - reference <= self.watch_timeout + margin

    async def run(self) -> None:
        """List, then watch for ever; relist on 410, back off on other errors.

        Returns never; cancel the task to stop. Run again after a cancel, it resumes
        watching from ``resource_version`` (no list). Unexpected exceptions (bugs) propagate.
        """
        need_list = self.resource_version is None
        while True:
            try:
                if need_list:
                    await self._list()
                    need_list = False
                await self._watch_cycle()
            except GoneError as exc:
                need_list = True
                self.relists += 1
                self.last_error = str(exc)
                log.info("%s: %s; relisting", self.resource, exc)
                if self._gone_streak:
                    await asyncio.sleep(self.backoff.next_delay())
                self._gone_streak += 1
            except KubeError as exc:
                self.restarts += 1
                self.last_error = str(exc)
                delay = self.backoff.next_delay()
                log.warning(
                    "%s: %s; retrying in %.1f s (failure %d)",
                    self.resource,
                    exc,
                    delay,
                    self.backoff.failures,
                )
                await asyncio.sleep(delay)

    # -- internals ----------------------------------------------------------------------

    def _succeeded(self) -> None:
        self.backoff.reset()
        self._gone_streak = 0

    def _entry(self, obj: Mapping[str, Any]) -> Entry | None:
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

    def _notify(self, namespaces: Iterable[str]) -> None:
        if self.on_change is None:
            return
        for namespace in namespaces:
            try:
                self.on_change(namespace, self.resource)
            except Exception:
                log.exception("%s: on_change(%r) failed", self.resource, namespace)

    async def _list(self) -> None:
        entries: list[Entry] = []
        token: str | None = None
        while True:
            page = await self.source.list_page(self.page_size, token)
            self.last_heard = self.clock()
            for item in page.items:
                entry = self._entry(item)
                if entry is not None:
                    entries.append(entry)
            token = page.continue_token
            if not token:
                break
        if not page.resource_version:
            raise TransportError(f"list of {self.resource} carried no resourceVersion")
        changed = self.tally.replace(entries)
        del entries
        self.resource_version = page.resource_version
        self.lists += 1
        self.synced_at = self.clock()
        self.synced = True
        self._synced_event.set()
        self._succeeded()
        log.info(
            "%s: listed %d objects in %d namespaces at resourceVersion %s",
            self.resource,
            len(self.tally),
            len(self.tally.namespaces()),
            self.resource_version,
        )
        self._notify(sorted(changed))

    async def _watch_cycle(self) -> None:
        assert self.resource_version is not None
        heard = False
        async with contextlib.aclosing(
            self.source.watch(self.resource_version, self.watch_timeout)
        ) as stream:
            async for event in stream:
                self.last_heard = self.clock()
                if not heard:
                    heard = True
                    self._succeeded()
                self._handle(event)
        self.watch_cycles += 1
        self.last_watch_cycle = self.clock()
        self._succeeded()

    def _handle(self, event: Mapping[str, Any]) -> None:
        event_type = event.get("type")
        obj = event.get("object")
        if not isinstance(obj, Mapping):
            raise TransportError(f"{self.resource}: watch event without object: {event_type!r}")
        if event_type == ERROR:
            raise error_from_status(obj)
        metadata = obj.get("metadata")
        resource_version = (
            metadata.get("resourceVersion") if isinstance(metadata, Mapping) else None
        )
        if event_type == BOOKMARK:
            self.bookmarks += 1
        elif event_type in _TALLY_EVENTS:
            self.events += 1
            entry = self._entry(obj)
            if entry is not None and self.tally.apply(
                event_type, entry.namespace, entry.uid, entry.expiry
            ):
                self._notify((entry.namespace,))
        else:
            log.warning("%s: unknown watch event type %r ignored", self.resource, event_type)
        if isinstance(resource_version, str) and resource_version:
            self.resource_version = resource_version


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
