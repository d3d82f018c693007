"""List+watch of one collection into a store: the one reflector (I/O).

Follows client-go's ``Reflector.ListAndWatch`` (kubernetes/kubernetes
``staging/src/k8s.io/client-go/tools/cache/reflector.go``):

1. **List**, paginated (``limit``/``continue``, :func:`~dynquota._k8s.paginate.paginate`),
   without ``resourceVersion``, so the list is a consistent read; the store is *replaced* by
   its result (objects missing from it vanish).
2. **Watch** from the list's ``resourceVersion`` with ``allowWatchBookmarks=true`` and a
   finite ``timeoutSeconds``. When the server ends the stream (a completed *watch cycle*),
   the next watch resumes from the last resourceVersion seen, bookmarks included.
3. ``410 Gone`` — as an HTTP status, or as a watch ``ERROR`` event with code 410 or reason
   ``Expired``/``Gone`` — means the resourceVersion was compacted away: relist and replace
   (at once the first time, then with backoff while it repeats). An ``ERROR`` event's
   ``Status`` never reaches the store.
4. Connection errors, timeouts and other API errors back off exponentially with jitter
   (:class:`~dynquota._k8s.backoff.Backoff`) and resume from the last resourceVersion.

A :class:`Reflector` subclass is the store: it says how to keep a listed object
(:meth:`Reflector.convert`, called page by page, so a list never holds raw pages),
how to swap in a full list (:meth:`Reflector.replace`) and how to apply one event
(:meth:`Reflector.apply`). The I/O sits behind :class:`ListerWatcher`; :class:`Collection`
is the one for a real cluster (raw JSON over a collection path, any ``Accept``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import AsyncGenerator, Callable, Mapping
from dataclasses import KW_ONLY, dataclass, field
from typing import Any, Final, Generic, Protocol, TypeVar

import aiohttp

from dynquota._k8s import timeouts
from dynquota._k8s.backoff import Backoff
from dynquota._k8s.errors import GoneError, KubeError, TransportError, error_from_status
from dynquota._k8s.paginate import ListPage, paginate
from dynquota._k8s.request import TRANSPORT_ERRORS, open_get
from dynquota._k8s.watch import ADDED, BOOKMARK, DELETED, ERROR, MODIFIED, json_lines

__all__ = ["JSON", "Collection", "ListerWatcher", "Reflector"]

log = logging.getLogger(__name__)

JSON: Final = "application/json"
_STORE_EVENTS: Final = frozenset({ADDED, MODIFIED, DELETED})

T = TypeVar("T")


class ListerWatcher(Protocol):
    """Where a reflector gets its pages and watch events (the I/O adapter boundary)."""

    async def list_page(self, limit: int, continue_token: str | None) -> ListPage:
        """Fetch one list page of at most ``limit`` items.

        Raises :class:`~dynquota._k8s.errors.GoneError` when ``continue_token`` expired,
        other :class:`~dynquota._k8s.errors.ApiError` / ``TransportError`` on failure.
        """
        ...

    def watch(
        self, resource_version: str, timeout_seconds: int
    ) -> AsyncGenerator[dict[str, Any], None]:
        """Watch from ``resource_version``; yields decoded events ``{"type", "object"}``.

        Ends when the server ends the stream (after about ``timeout_seconds``). Raises
        :class:`~dynquota._k8s.errors.GoneError` if the server answers 410,
        ``ApiError``/``TransportError`` on other failures (also mid-stream). ``ERROR``
        events are yielded as they are, for the reflector to judge.
        """
        ...


@dataclass(eq=False)
class Collection:
    """:class:`ListerWatcher` of one collection path over a kubernetes_asyncio ``ApiClient``.

    Args:
        api_client: the ``ApiClient`` (host, credentials; not closed here).
        path: the collection, e.g. ``/api/v1/pods`` or ``/api/v1/namespaces/NS/resourcequotas``.
        field_selector: sent with both list and watch, or ``None``.
        label_selector: likewise (``labelSelector``), or ``None``.
        list_accept, watch_accept: ``Accept`` headers (default ``application/json``; a
            ``PartialObjectMetadata`` one asks for metadata only).
        request_timeout, connect_timeout: seconds, override :mod:`dynquota._k8s.timeouts` for a
            list page (a short call: 10 s total, 3 s connect) and the watch's connect.
        read_margin: seconds a watch may stay silent beyond its ``timeoutSeconds`` (default
            30) before the connection is deemed dead.
        on_date: called with every response's ``Date`` header (or ``None``) as it arrives
            (:meth:`dynquota._k8s.clock.ServerClock.observe_date`), or ``None``.

    ``bytes_received`` counts response body bytes after decompression (list pages and watch
    lines). Read-only: it only sends GETs.
    """

    api_client: Any
    path: str
    _: KW_ONLY
    field_selector: str | None = None
    label_selector: str | None = None
    list_accept: str = JSON
    watch_accept: str = JSON
    request_timeout: float | None = None
    connect_timeout: float | None = None
    read_margin: float | None = None
    on_date: Callable[[str | None], None] | None = None
    bytes_received: int = field(default=0, init=False)

    def _selector(self) -> list[tuple[str, str]]:
        query = [("fieldSelector", self.field_selector)] if self.field_selector else []
        return query + ([("labelSelector", self.label_selector)] if self.label_selector else [])

    def _list_timeout(self) -> aiohttp.ClientTimeout:
        total = timeouts.REQUEST_TIMEOUT if self.request_timeout is None else self.request_timeout
        connect = timeouts.CONNECT_TIMEOUT if self.connect_timeout is None else self.connect_timeout
        return aiohttp.ClientTimeout(total=total, sock_connect=min(connect, total))

    def _watch_timeout(self, timeout_seconds: int) -> aiohttp.ClientTimeout:
        default = timeouts.watch_timeout(timeout_seconds)
        return aiohttp.ClientTimeout(
            total=None,
            sock_connect=default.sock_connect
            if self.connect_timeout is None
            else self.connect_timeout,
            sock_read=default.sock_read
            if self.read_margin is None
            else timeout_seconds + self.read_margin,
        )

    def _dated(self, response: aiohttp.ClientResponse) -> None:
        if self.on_date is not None:
            self.on_date(response.headers.get("Date"))

    def _count(self, n: int) -> None:
        self.bytes_received += n

    async def list_page(self, limit: int, continue_token: str | None) -> ListPage:
        """Fetch one page; see :meth:`ListerWatcher.list_page`."""
        query = [("limit", str(limit)), *self._selector()]
        if continue_token:
            query.append(("continue", continue_token))
        response = await open_get(
            self.api_client, self.path, query, self.list_accept, self._list_timeout()
        )
        self._dated(response)
        try:
            body = await response.read()
        except TRANSPORT_ERRORS as exc:
            raise TransportError(f"reading list of {self.path}: {exc!r}") from exc
        finally:
            response.release()
        self._count(len(body))
        try:
            decoded = json.loads(body)
        except ValueError as exc:
            raise TransportError(f"list of {self.path}: malformed JSON") from exc
        return ListPage.from_body(decoded, self.path, size=len(body))

    async def list_all(self, page_size: int = 500) -> list[dict[str, Any]]:
        """Every item of the collection (a consistent, paginated read); raises as
        :meth:`list_page` does."""
        items: list[dict[str, Any]] = []
        async for page in paginate(lambda token: self.list_page(page_size, token)):
            items.extend(page.items)
        return items

    async def watch(
        self, resource_version: str, timeout_seconds: int
    ) -> AsyncGenerator[dict[str, Any], None]:
        """Stream watch events; see :meth:`ListerWatcher.watch`."""
        query = [
            ("watch", "true"),
            ("allowWatchBookmarks", "true"),
            ("resourceVersion", resource_version),
            ("timeoutSeconds", str(timeout_seconds)),
            *self._selector(),
        ]
        response = await open_get(
            self.api_client,
            self.path,
            query,
            self.watch_accept,
            self._watch_timeout(timeout_seconds),
        )
        self._dated(response)
        async with contextlib.aclosing(json_lines(response, self.path, self._count)) as events:
            async for event in events:
                yield event


@dataclass(eq=False)
class Reflector(Generic[T]):
    """List+watch one :class:`ListerWatcher` into the store this subclass keeps.

    Subclasses implement :meth:`convert`, :meth:`replace` and :meth:`apply` (and may
    override :meth:`listed`). Run :meth:`run` as a task (it loops until cancelled). Health
    and metrics, all plain attributes (times are seconds since the epoch from ``clock``,
    counters are ints):

    - ``synced`` — the first full list has been applied (stays true across relists; the
      previous store serves until a relist completes); :meth:`wait_synced` awaits it.
    - ``synced_at`` — when the last full list was applied.
    - ``last_heard`` — when the server last sent anything (list page or watch line).
    - ``last_watch_cycle`` — when a watch last ended normally at its ``timeoutSeconds``.
    - ``last_attempt_end`` — when a list or watch attempt last ended, in success or error (the
      loop's own progress, for :meth:`alive`).
    - ``resource_version`` — where the next watch resumes.
    - ``lists`` (full lists applied), ``relists`` (lists forced by 410 Gone/Expired),
      ``restarts`` (list/watch retries after other errors), ``watch_cycles``, ``events``
      (ADDED/MODIFIED/DELETED received), ``bookmarks``, ``last_error`` (text or ``None``).

    ``name`` labels log lines; ``watch_timeout`` is the watch's ``timeoutSeconds``;
    ``page_size`` the list ``limit`` (both >= 1, else ``ValueError``); ``backoff`` paces
    retries; ``clock`` gives the times.
    """

    source: ListerWatcher
    _: KW_ONLY
    name: str
    watch_timeout: int = 300
    page_size: int = 500
    backoff: Backoff = field(default_factory=Backoff)
    clock: Callable[[], float] = time.time
    resource_version: str | None = field(default=None, init=False)
    synced: bool = field(default=False, init=False)
    synced_at: float | None = field(default=None, init=False)
    last_heard: float | None = field(default=None, init=False)
    last_watch_cycle: float | None = field(default=None, init=False)
    last_attempt_end: float | None = field(default=None, init=False)
    lists: int = field(default=0, init=False)
    relists: int = field(default=0, init=False)
    restarts: int = field(default=0, init=False)
    watch_cycles: int = field(default=0, init=False)
    events: int = field(default=0, init=False)
    bookmarks: int = field(default=0, init=False)
    last_error: str | None = field(default=None, init=False)
    _synced_event: asyncio.Event = field(default_factory=asyncio.Event, init=False, repr=False)
    _gone_streak: int = field(default=0, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.watch_timeout < 1 or self.page_size < 1:
            raise ValueError("watch_timeout and page_size must be >= 1")

    # -- the store (subclasses) ---------------------------------------------------------------

    def convert(self, obj: Mapping[str, Any]) -> T | None:
        """What to keep of one listed object (``None``: skip it)."""
        raise NotImplementedError

    def replace(self, items: list[T]) -> None:
        """Replace the whole store by a full list's converted ``items``."""
        raise NotImplementedError

    def apply(self, event_type: str, obj: Mapping[str, Any]) -> None:
        """Apply one ``ADDED``/``MODIFIED``/``DELETED`` event about ``obj``."""
        raise NotImplementedError

    def listed(self) -> None:
        """Called after a full list was applied and the reflector's state updated."""

    # -- public -------------------------------------------------------------------------------

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

    def alive(self, now: float, margin: float) -> bool:
        """Liveness: whether the loop made progress — a list or watch attempt ended, in
        success or in error — within ``watch_timeout + margin`` seconds before ``now``.

        Unlike :meth:`healthy` (fresh data, which guards shrinking writes), an unreachable
        apiserver keeps this true: the loop is retrying, and a restart would not help (it
        would only lose in-memory peak history). A watch that hangs without data ends at its
        socket read timeout (``timeoutSeconds`` + the read margin), so only a loop stuck in
        our own code makes this false. True before the first attempt ended."""
        ends = [t for t in (self.last_attempt_end, self.synced_at) if t is not None]
        return not ends or now - max(ends) <= self.watch_timeout + margin

    async def run(self) -> None:
        """List, then watch for ever; relist on 410, back off on other errors.

        Returns never; cancel the task to stop. Run again after a cancel, it resumes
        watching from ``resource_version`` (no list). Unexpected exceptions (bugs) propagate.
        """
        need_list = self.resource_version is None
        while True:
            try:
                if need_list:
                    await self.list_once()
                    need_list = False
                await self.watch_once()
                self.last_attempt_end = self.clock()
            except GoneError as exc:
                self.last_attempt_end = self.clock()
                need_list = True
                self.relists += 1
                self.last_error = str(exc)
                log.info("%s: %s; relisting", self.name, exc)
                if self._gone_streak:
                    await asyncio.sleep(self.backoff.next_delay())
                self._gone_streak += 1
            except KubeError as exc:
                self.last_attempt_end = self.clock()
                self.restarts += 1
                self.last_error = str(exc)
                delay = self.backoff.next_delay()
                log.warning(
                    "%s: %s; retrying in %.1f s (failure %d)",
                    self.name,
                    exc,
                    delay,
                    self.backoff.failures,
                )
                await asyncio.sleep(delay)

    async def list_once(self) -> None:
        """One full paginated list, converted page by page, then :meth:`replace`.

        Raises ``GoneError`` (an expired continue token), other ``KubeError``.
        """
        items: list[T] = []
        page: ListPage | None = None
        async for page in paginate(lambda token: self.source.list_page(self.page_size, token)):
            self.last_heard = self.clock()
            for obj in page.items:
                item = self.convert(obj)
                if item is not None:
                    items.append(item)
        if page is None or not page.resource_version:
            raise TransportError(f"list of {self.name} carried no resourceVersion")
        self.replace(items)
        del items
        self.resource_version = page.resource_version
        self.lists += 1
        self.mark_synced()
        self._succeeded()
        self.listed()

    def mark_synced(self) -> None:
        """Record that the store holds a complete view now (``synced``, ``synced_at``)."""
        self.synced_at = self.clock()
        self.synced = True
        self._synced_event.set()

    async def watch_once(self) -> None:
        """One watch cycle from ``resource_version`` (set by a list first).

        Returns when the server ends the stream. Raises ``GoneError`` (HTTP 410 or an
        ``ERROR`` event saying so), other ``KubeError``; ``RuntimeError`` before any list.
        """
        if self.resource_version is None:
            raise RuntimeError(f"{self.name}: watch before the first list")
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

    # -- internals ----------------------------------------------------------------------------

    def _succeeded(self) -> None:
        self.backoff.reset()
        self._gone_streak = 0

    def _handle(self, event: Mapping[str, Any]) -> None:
        event_type = event.get("type")
        obj = event.get("object")
        if not isinstance(obj, Mapping):
            raise TransportError(f"{self.name}: watch event without object: {event_type!r}")
        if event_type == ERROR:
            raise error_from_status(obj)
        metadata = obj.get("metadata")
        resource_version = (
            metadata.get("resourceVersion") if isinstance(metadata, Mapping) else None
        )
        if event_type == BOOKMARK:
            self.bookmarks += 1
        elif event_type in _STORE_EVENTS:
            self.events += 1
            self.apply(str(event_type), obj)
        else:
            log.warning("%s: unknown watch event type %r ignored", self.name, event_type)
        if isinstance(resource_version, str) and resource_version:
            self.resource_version = resource_version
