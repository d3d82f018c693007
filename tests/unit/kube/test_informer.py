"""MetadataInformer / UsageWatcher logic against a scripted fake MetadataSource.

The fake stands at our own adapter boundary (dynquota.kube.informer.MetadataSource); the real
KubeMetadataSource is exercised by tests/integration/test_informer*.py.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncGenerator, Iterator
from typing import Any

import pytest

from dynquota._k8s.backoff import Backoff
from dynquota._k8s.errors import ApiError, GoneError, TransportError
from dynquota.kube.informer import (
    CONFIGMAPS_WATCH,
    PODS_WATCH,
    ListPage,
    MetadataInformer,
    UsageWatcher,
    WatchedResource,
)
from dynquota.testing.wait import async_wait_until
from dynquota.usage import INDEFINITE, Entry, ResourceTally

T0 = 1_800_000_000.0  # 2027-01-15T08:00:00Z


def meta(ns: str, uid: str, rv: str = "1", **extra: Any) -> dict[str, Any]:
    return {
        "metadata": {
            "namespace": ns,
            "name": f"n-{uid}",
            "uid": uid,
            "resourceVersion": rv,
            **extra,
        }
    }


def event(kind: str, obj: dict[str, Any]) -> dict[str, Any]:
    return {"type": kind, "object": obj}


def bookmark(rv: str) -> dict[str, Any]:
    return {
        "type": "BOOKMARK",
        "object": {"kind": "PartialObjectMetadata", "metadata": {"resourceVersion": rv}},
    }


def status_error(code: int, reason: str) -> dict[str, Any]:
    return {
        "type": "ERROR",
        "object": {
            "kind": "Status",
            "status": "Failure",
            "code": code,
            "reason": reason,
            "message": "m",
        },
    }


END = "END"  # the server ends the watch normally (timeoutSeconds reached)


class FakeSource:
    """Scripted MetadataSource: each list/watch call consumes the next script.

    ``lists``: each item is a list of ListPage (one full paginated list) or an exception.
    ``watches``: each item is a list of events / exceptions / END; a script without END keeps
    the stream open (it blocks until cancelled). Calls beyond the scripts block.
    """

    def __init__(self, watched: WatchedResource = CONFIGMAPS_WATCH) -> None:
        self._watched = watched
        self.lists: deque[list[ListPage] | BaseException] = deque()
        self.watches: deque[list[Any]] = deque()
        self.list_calls: list[tuple[int, str | None]] = []
        self.watch_calls: list[tuple[str, int]] = []
        self._pages: Iterator[ListPage] | None = None
        self.open_watches = 0

    @property
    def watched(self) -> WatchedResource:
        return self._watched

    async def list_page(self, limit: int, continue_token: str | None) -> ListPage:
        self.list_calls.append((limit, continue_token))
        if continue_token is None:
            if not self.lists:
                await asyncio.Event().wait()
            script = self.lists.popleft()
            if isinstance(script, BaseException):
                raise script
            self._pages = iter(script)
        assert self._pages is not None
        page = next(self._pages)
        if isinstance(page, BaseException):
            raise page
        return page

    async def watch(
        self, resource_version: str, timeout_seconds: int
    ) -> AsyncGenerator[dict[str, Any], None]:
        self.watch_calls.append((resource_version, timeout_seconds))
        self.open_watches += 1
        try:
            if not self.watches:
                await asyncio.Event().wait()
            for item in self.watches.popleft():
                if item == END:
                    return
                if isinstance(item, BaseException):
                    raise item
                yield item
            await asyncio.Event().wait()
        finally:
            self.open_watches -= 1


def page(items: list[dict[str, Any]], rv: str, cont: str | None = None) -> ListPage:
    return ListPage(items=items, resource_version=rv, continue_token=cont)


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def __call__(self, namespace: str, resource: str) -> None:
        self.calls.append((namespace, resource))


class Clock:
    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def fast_backoff() -> Backoff:
    return Backoff(initial=0.001, maximum=0.005)


def make(source: FakeSource, **kwargs: Any) -> tuple[MetadataInformer, Recorder]:
    recorder = Recorder()
    informer = MetadataInformer(
        source,
        ResourceTally(source.watched.resource),
        on_change=recorder,
        watch_timeout=kwargs.pop("watch_timeout", 30),
        page_size=kwargs.pop("page_size", 2),
        backoff=fast_backoff(),
        **kwargs,
    )
    return informer, recorder


@pytest.fixture
async def running() -> AsyncGenerator[list[asyncio.Task[None]], None]:
    tasks: list[asyncio.Task[None]] = []
    yield tasks
    for task in tasks:
        task.cancel()
    for task in tasks:
        with pytest.raises(asyncio.CancelledError):
            await task


def start(tasks: list[asyncio.Task[None]], informer: MetadataInformer) -> None:
    tasks.append(asyncio.create_task(informer.run()))


async def test_paginated_list_syncs_and_notifies(running: list[asyncio.Task[None]]) -> None:
    source = FakeSource()
    source.lists.append(
        [
            page([meta("a", "u1"), meta("a", "u2")], "10", cont="tok1"),
            page([meta("b", "u3")], "10", cont=None),
        ]
    )
    informer, recorder = make(source)
    assert informer.synced is False
    start(running, informer)
    await informer.wait_synced(timeout=5)
    assert informer.synced is True
    assert source.list_calls == [(2, None), (2, "tok1")]
    assert informer.tally.usages(T0) == {"a": 2, "b": 1}
    assert informer.resource_version == "10"
    assert informer.lists == 1
    assert informer.relists == 0
    assert sorted(recorder.calls) == [("a", "configmaps"), ("b", "configmaps")]
    await async_wait_until(lambda: source.watch_calls, "watch started", timeout=5)
    assert source.watch_calls == [("10", 30)]


async def test_watch_events_update_tally_and_resume(running: list[asyncio.Task[None]]) -> None:
    source = FakeSource()
    source.lists.append([page([meta("a", "u1")], "10")])
    source.watches.append(
        [
            event("ADDED", meta("a", "u2", "11")),
            event("ADDED", meta("a", "u2", "11")),  # duplicate: no change, no notification
            event("MODIFIED", meta("a", "u1", "12", labels={"x": "y"})),  # no count change
            event("ADDED", meta("b", "u3", "13")),
            event("DELETED", meta("a", "u1", "14")),
            event("DELETED", meta("a", "nope", "15")),  # unknown uid: harmless
            bookmark("20"),
            END,
        ]
    )
    source.watches.append([event("ADDED", meta("c", "u4", "21"))])
    clock = Clock()
    informer, recorder = make(source, clock=clock)
    start(running, informer)
    await async_wait_until(lambda: informer.tally.usage("c", T0), "second watch applied", timeout=5)
    assert informer.tally.usages(T0) == {"a": 1, "b": 1, "c": 1}
    assert recorder.calls == [
        ("a", "configmaps"),
        ("a", "configmaps"),
        ("b", "configmaps"),
        ("a", "configmaps"),
        ("c", "configmaps"),
    ]
    assert source.watch_calls == [("10", 30), ("20", 30)]  # resumed from the bookmark
    assert informer.resource_version == "21"
    assert informer.watch_cycles == 1
    assert informer.last_watch_cycle == T0
    assert informer.events == 7
    assert informer.bookmarks == 1
    assert informer.restarts == 0
    assert informer.relists == 0


async def test_error_event_410_relists_and_replaces(running: list[asyncio.Task[None]]) -> None:
    source = FakeSource()
    source.lists.append([page([meta("a", "u1"), meta("a", "u2"), meta("b", "u3")], "10")])
    source.watches.append([event("ADDED", meta("a", "u9", "11")), status_error(410, "Expired")])
    # While disconnected: u2 and all of b were deleted, c created.
    source.lists.append([page([meta("a", "u1"), meta("a", "u9"), meta("c", "u5")], "50")])
    informer, recorder = make(source)
    start(running, informer)
    await async_wait_until(
        lambda: informer.relists == 1 and informer.lists == 2, "relist", timeout=5
    )
    assert informer.tally.usages(T0) == {"a": 2, "c": 1}
    assert ("b", "u3") not in informer.tally
    assert informer.resource_version == "50"
    assert informer.restarts == 0
    assert informer.last_error == "410 Expired: m"
    # initial list: a, b; watch: a; relist: a (u2 gone), b (emptied), c (new)
    assert recorder.calls == [
        ("a", "configmaps"),
        ("b", "configmaps"),
        ("a", "configmaps"),
        ("a", "configmaps"),
        ("b", "configmaps"),
        ("c", "configmaps"),
    ]
    await async_wait_until(lambda: len(source.watch_calls) == 2, "watch after relist", timeout=5)
    assert source.watch_calls[1] == ("50", 30)


async def test_http_410_on_watch_relists(running: list[asyncio.Task[None]]) -> None:
    source = FakeSource()
    source.lists.append([page([meta("a", "u1")], "10")])
    source.watches.append([GoneError(410, "Gone", "too old resource version")])
    source.lists.append([page([], "60")])
    informer, recorder = make(source)
    start(running, informer)
    await async_wait_until(lambda: informer.lists == 2, "relist", timeout=5)
    assert informer.tally.usages(T0) == {}
    assert informer.relists == 1
    assert recorder.calls == [("a", "configmaps"), ("a", "configmaps")]


async def test_expired_continue_token_restarts_list(running: list[asyncio.Task[None]]) -> None:
    source = FakeSource()
    source.lists.append(
        [
            page([meta("a", "u1"), meta("a", "u2")], "10", cont="tok"),
            GoneError(410, "Expired", "continue expired"),
        ]
    )
    source.lists.append([page([meta("a", "u1")], "30")])
    informer, _ = make(source)
    start(running, informer)
    await informer.wait_synced(timeout=5)
    assert source.list_calls == [(2, None), (2, "tok"), (2, None)]
    assert informer.tally.usages(T0) == {"a": 1}
    assert informer.resource_version == "30"
    assert informer.lists == 1
    assert informer.relists == 1


async def test_connection_error_resumes_from_last_rv(running: list[asyncio.Task[None]]) -> None:
    source = FakeSource()
    source.lists.append([page([meta("a", "u1")], "10")])
    source.watches.append(
        [event("ADDED", meta("a", "u2", "11")), TransportError("connection reset")]
    )
    source.watches.append([ApiError(503, "ServiceUnavailable", "apiserver restarting")])
    source.watches.append([status_error(500, "InternalError")])
    source.watches.append([event("ADDED", meta("a", "u3", "12"))])
    informer, _ = make(source)
    start(running, informer)
    await async_wait_until(lambda: informer.tally.usage("a", T0) == 3, "u3 applied", timeout=5)
    assert source.watch_calls == [("10", 30), ("11", 30), ("11", 30), ("11", 30)]
    assert informer.restarts == 3
    assert informer.relists == 0
    assert informer.lists == 1
    assert informer.backoff.failures == 0  # reset once events flowed again
    assert informer.last_error == "500 InternalError: m"


async def test_error_status_never_reaches_tally(running: list[asyncio.Task[None]]) -> None:
    source = FakeSource()
    source.lists.append([page([meta("a", "u1")], "10")])
    # A Status that happens to carry metadata must not be counted as an object.
    error = status_error(410, "Gone")
    error["object"]["metadata"] = {"namespace": "a", "uid": "status-uid", "resourceVersion": "99"}
    source.watches.append([error])
    informer, _ = make(source)
    start(running, informer)
    await async_wait_until(lambda: informer.relists == 1, "relist requested", timeout=5)
    assert ("a", "status-uid") not in informer.tally
    assert informer.resource_version == "10"


async def test_terminating_pod_counts_until_grace_passes(running: list[asyncio.Task[None]]) -> None:
    source = FakeSource(PODS_WATCH)
    source.lists.append([page([meta("a", "p1"), meta("a", "p2")], "10")])
    # p1 deleted at T0 with grace 30: deletionTimestamp T0+30, expiry T0+60
    source.watches.append(
        [
            event(
                "MODIFIED",
                meta(
                    "a",
                    "p1",
                    "11",
                    deletionTimestamp="2027-01-15T08:00:30Z",
                    deletionGracePeriodSeconds=30,
                ),
            )
        ]
    )
    informer, recorder = make(source)
    start(running, informer)
    await async_wait_until(
        lambda: informer.tally.next_expiry("a", T0), "terminating pod seen", timeout=5
    )
    assert informer.tally.next_expiry("a", T0) == T0 + 60
    assert informer.tally.usage("a", T0 + 60) == 2
    assert informer.tally.usage("a", T0 + 61) == 1
    assert recorder.calls == [("a", "pods"), ("a", "pods")]


async def test_objects_without_uid_or_namespace_are_ignored(
    running: list[asyncio.Task[None]],
) -> None:
    source = FakeSource()
    source.lists.append(
        [
            page(
                [meta("a", "u1"), {"metadata": {"name": "x", "namespace": "a"}}, {"kind": "?"}],
                "10",
            )
        ]
    )
    source.watches.append(
        [event("ADDED", {"metadata": {"namespace": "a"}}), event("ADDED", meta("a", "u2", "12"))]
    )
    informer, _ = make(source)
    start(running, informer)
    await async_wait_until(lambda: informer.tally.usage("a", T0) == 2, "u2 applied", timeout=5)
    assert len(informer.tally) == 2
    assert informer.resource_version == "12"


async def test_malformed_deletion_timestamp_keeps_counting(
    running: list[asyncio.Task[None]],
) -> None:
    source = FakeSource(PODS_WATCH)
    source.lists.append(
        [page([meta("a", "p1", deletionTimestamp="garbage", deletionGracePeriodSeconds=1)], "10")]
    )
    informer, _ = make(source)
    start(running, informer)
    await informer.wait_synced(timeout=5)
    assert list(informer.tally.entries()) == [("a", "p1", INDEFINITE)]


async def test_callback_failure_does_not_stop_informer(running: list[asyncio.Task[None]]) -> None:
    def explode(namespace: str, resource: str) -> None:
        raise RuntimeError("boom")

    source = FakeSource()
    source.lists.append([page([meta("a", "u1")], "10")])
    source.watches.append([event("ADDED", meta("b", "u2", "11"))])
    informer = MetadataInformer(
        source, ResourceTally("configmaps"), on_change=explode, backoff=fast_backoff()
    )
    start(running, informer)
    await async_wait_until(lambda: informer.tally.usage("b", T0), "u2 applied", timeout=5)
    assert informer.restarts == 0


async def test_healthy_tracks_watch_cycles(running: list[asyncio.Task[None]]) -> None:
    clock = Clock()
    source = FakeSource()
    source.lists.append([page([], "10")])
    source.watches.append([bookmark("11"), END])
    informer, _ = make(source, clock=clock, watch_timeout=30)
    assert informer.healthy(T0, margin=10) is False
    start(running, informer)
    await async_wait_until(lambda: informer.watch_cycles == 1, "one watch cycle", timeout=5)
    assert informer.last_watch_cycle == T0
    assert informer.last_heard == T0
    assert informer.healthy(T0 + 40, margin=10) is True
    assert informer.healthy(T0 + 40.5, margin=10) is False


def test_mismatched_tally_rejected() -> None:
    with pytest.raises(ValueError, match="tally counts 'pods' but the source watches 'configmaps'"):
        MetadataInformer(FakeSource(), ResourceTally("pods"))


async def test_usage_watcher_combines_resources() -> None:
    pods, configmaps = FakeSource(PODS_WATCH), FakeSource(CONFIGMAPS_WATCH)
    pods.lists.append(
        [
            page(
                [
                    meta("a", "p1"),
                    meta(
                        "a",
                        "p2",
                        deletionTimestamp="2027-01-15T08:00:05Z",
                        deletionGracePeriodSeconds=5,
                    ),
                ],
                "10",
            )
        ]
    )
    configmaps.lists.append([page([meta("a", "c1"), meta("b", "c2")], "20")])
    recorder = Recorder()
    clock = Clock()
    watcher = UsageWatcher(
        [pods, configmaps], on_change=recorder, watch_timeout=30, backoff=fast_backoff, clock=clock
    )
    assert watcher.synced is False
    async with watcher:
        await watcher.wait_synced(timeout=5)
        assert watcher.synced is True
        assert watcher.usages("a") == {"pods": 2, "configmaps": 1}
        assert watcher.usages("b") == {"pods": 0, "configmaps": 1}
        assert watcher.usage("a", "pods", now=T0 + 11) == 1
        assert watcher.next_expiry("a") == T0 + 10
        assert watcher.next_expiry("b") is None
        assert watcher.namespaces() == {"a", "b"}
        assert watcher.healthy(margin=0) is True
        assert watcher.healthy(now=T0 + 31, margin=0) is False
        # liveness: no attempt ended for 31 s > 30 s (the watch's own bound): stuck
        assert watcher.alive(margin=0) is True
        assert watcher.alive(now=T0 + 31, margin=0) is False
        stats = watcher.stats()
        assert stats["pods"]["objects"] == 2
        assert stats["configmaps"]["resource_version"] == "20"
        assert sorted(recorder.calls) == [("a", "configmaps"), ("a", "pods"), ("b", "configmaps")]
        await async_wait_until(
            lambda: pods.open_watches == 1 and configmaps.open_watches == 1, "watching", timeout=5
        )
    assert pods.open_watches == 0
    assert configmaps.open_watches == 0


async def test_usage_watcher_surfaces_crashed_informer() -> None:
    source = FakeSource()
    source.lists.append(RuntimeError("bug"))
    watcher = UsageWatcher([source], backoff=fast_backoff)
    async with watcher:
        with pytest.raises(RuntimeError, match="bug"):
            await watcher.wait_synced(timeout=5)
        assert watcher.healthy() is False


async def test_usage_watcher_wait_synced_times_out() -> None:
    watcher = UsageWatcher([FakeSource()], backoff=fast_backoff)
    async with watcher:
        with pytest.raises(TimeoutError):
            await watcher.wait_synced(timeout=0.05)


def test_usage_watcher_rejects_duplicate_resources() -> None:
    with pytest.raises(ValueError, match="two sources for 'configmaps'"):
        UsageWatcher([FakeSource(), FakeSource()])


async def test_rerun_after_cancel_resumes_without_list() -> None:
    source = FakeSource()
    source.lists.append([page([meta("a", "u1")], "10")])
    source.watches.append([event("ADDED", meta("a", "u2", "11"))])
    source.watches.append([event("ADDED", meta("a", "u3", "12"))])
    watcher = UsageWatcher([source], backoff=fast_backoff)
    async with watcher:
        await async_wait_until(lambda: watcher.usage("a", "configmaps") == 2, "u2", timeout=5)
    assert source.open_watches == 0
    async with watcher:
        await async_wait_until(lambda: watcher.usage("a", "configmaps") == 3, "u3", timeout=5)
    assert source.list_calls == [(500, None)]
    assert source.watch_calls == [("10", 300), ("11", 300)]


async def test_usage_watcher_stays_alive_while_the_apiserver_is_unreachable() -> None:
    """Every failed attempt is progress for liveness (restarting would not help), while
    ``healthy`` (fresh data, the guard of shrinking writes) turns false; a loop that stops
    ending attempts (here: a watch that never answers) is not alive."""
    clock = Clock()

    class Slow(FakeSource):
        """Each list or watch call takes 20 s of the clock."""

        async def list_page(self, limit: int, continue_token: str | None) -> ListPage:
            clock.now += 20
            return await super().list_page(limit, continue_token)

        def watch(self, resource_version: str, timeout_seconds: int) -> Any:
            clock.now += 20
            return super().watch(resource_version, timeout_seconds)

    source = Slow()
    source.lists.append([page([meta("a", "p1")], "10")])  # synced at T0 + 20
    # the apiserver goes away: three watches fail (T0 + 40, 60, 80), the fourth hangs
    source.watches.extend([TransportError("connection refused")] for _ in range(3))
    watcher = UsageWatcher([source], watch_timeout=30, backoff=fast_backoff, clock=clock)
    async with watcher:
        await async_wait_until(lambda: len(source.watch_calls) == 4, "4th watch", timeout=5)
        assert clock.now == T0 + 100
        assert watcher.alive(margin=0) is True  # the last attempt ended at T0 + 80
        assert watcher.healthy(margin=0) is False  # the last data came at T0 + 20
        assert watcher.alive(now=T0 + 111, margin=0) is False  # the 4th watch hangs


def test_on_write_hears_watch_events_that_add_or_remove_an_object() -> None:
    """The write-rate governor's counts: an ``ADDED`` or ``DELETED`` that changed the tally,
    never a duplicate, an update or a list."""
    writes: list[tuple[str, str, str]] = []
    informer, _ = make(FakeSource(), on_write=lambda ns, r, t: writes.append((ns, r, t)))
    informer.replace([Entry("a", "u0", INDEFINITE)])
    informer.listed()
    informer.apply("ADDED", meta("a", "u1"))
    informer.apply("ADDED", meta("a", "u1"))  # a duplicate changes nothing
    informer.apply("MODIFIED", meta("a", "u1", rv="2"))
    informer.apply("DELETED", meta("a", "u1", rv="3"))
    informer.apply("DELETED", meta("a", "u9"))  # unknown: nothing
    assert writes == [("a", "configmaps", "ADDED"), ("a", "configmaps", "DELETED")]
