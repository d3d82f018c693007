"""ObjectInformer: replace on relist, resourceVersion order, tombstones, the synced signal.

The fake stands at our own I/O boundary (:class:`dynquota._k8s.reflector.ListerWatcher`); the
real Collection is exercised by tests/integration/test_informer.py.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncGenerator
from typing import Any

import pytest

from dynquota._k8s.backoff import Backoff
from dynquota._k8s.errors import GoneError, NotFoundError
from dynquota._k8s.paginate import ListPage
from dynquota._k8s.store import ObjectInformer
from dynquota.testing.wait import async_wait_until


def obj(name: str, rv: int, spec: int = 0) -> dict[str, Any]:
    return {"metadata": {"name": name, "resourceVersion": str(rv)}, "spec": {"max": spec}}


def page(rv: int, *items: dict[str, Any]) -> ListPage:
    return ListPage(list(items), str(rv), None)


class Source:
    """Scripted lists (a page or an exception each) and watches (events; ``"END"`` ends the
    stream, a script without it stays open until cancelled)."""

    def __init__(self) -> None:
        self.lists: asyncio.Queue[ListPage | BaseException] = asyncio.Queue()
        self.watches: deque[list[Any]] = deque()
        self.watch_calls: list[str] = []

    def script(self, *lists: ListPage | BaseException) -> None:
        for item in lists:
            self.lists.put_nowait(item)

    async def list_page(self, limit: int, continue_token: str | None) -> ListPage:
        item = await self.lists.get()  # waits for the test to script the next list
        if isinstance(item, BaseException):
            raise item
        return item

    async def watch(
        self, resource_version: str, timeout_seconds: int
    ) -> AsyncGenerator[dict[str, Any], None]:
        self.watch_calls.append(resource_version)
        if not self.watches:
            await asyncio.Event().wait()
        for item in self.watches.popleft():
            if item == "END":
                return
            if isinstance(item, BaseException):
                raise item
            yield item
        await asyncio.Event().wait()


class Seen:
    def __init__(self) -> None:
        self.events: list[tuple[str | None, str, str]] = []
        self.synced = 0

    def __call__(self, event_type: str | None, o: Any) -> None:
        meta = o["metadata"]
        self.events.append((event_type, meta["name"], meta.get("resourceVersion", "")))

    def on_synced(self) -> None:
        self.synced += 1


def informer(source: Source, seen: Seen, **kwargs: Any) -> ObjectInformer:
    return ObjectInformer(
        source,
        name="policies",
        on_event=seen,
        on_synced=seen.on_synced,
        backoff=Backoff(initial=0.001, maximum=0.001),
        **kwargs,
    )


async def test_a_deletion_missed_in_a_watch_gap_is_deleted_by_the_relist() -> None:
    source, seen = Source(), Seen()
    source.script(page(10, obj("a", 5), obj("b", 6)), page(30, obj("b", 6)))
    # the watch resumes after a gap: its resourceVersion was compacted away (410)
    source.watches.append([GoneError("too old resource version: 10 (20)")])
    inf = informer(source, seen)
    task = asyncio.create_task(inf.run())
    try:
        await async_wait_until(lambda: inf.lists == 2, "the relist", timeout=5)
    finally:
        task.cancel()
    assert seen.events == [(None, "a", "5"), (None, "b", "6"), ("DELETED", "a", "5")]
    assert sorted(inf.objects) == ["b"]
    assert seen.synced == 2
    assert inf.relists == 1


async def test_the_start_up_list_is_never_applied_over_a_newer_event() -> None:
    # v0.2: a separate start-up LIST (rv 10) handed to the handlers after the watch had
    # delivered newer events reverted an edit, resurrected a deleted policy and forgot a created
    # one. One stream lists, then watches from the list's resourceVersion: the list comes first.
    source, seen = Source(), Seen()
    source.script(page(10, obj("edited", 5, spec=1), obj("deleted", 6)))
    source.watches.append(
        [
            {"type": "MODIFIED", "object": obj("edited", 11, spec=2)},
            {"type": "DELETED", "object": obj("deleted", 12)},
            {"type": "ADDED", "object": obj("created", 13)},
            "END",
        ]
    )
    inf = informer(source, seen)
    task = asyncio.create_task(inf.run())
    try:
        await async_wait_until(lambda: inf.watch_cycles == 1, "the watch cycle", timeout=5)
    finally:
        task.cancel()
    assert seen.synced == 1
    assert {k: (v["metadata"]["resourceVersion"], v["spec"]) for k, v in inf.objects.items()} == {
        "edited": ("11", {"max": 2}),
        "created": ("13", {"max": 0}),
    }
    assert source.watch_calls[0] == "10"


def test_events_not_newer_than_the_store_or_the_tombstone_change_nothing() -> None:
    seen = Seen()
    inf = informer(Source(), seen)
    inf.replace([obj("a", 10, spec=1)])
    inf.apply("MODIFIED", obj("a", 9, spec=7))  # older: dropped
    inf.apply("MODIFIED", obj("a", 10, spec=7))  # same: dropped
    inf.apply("DELETED", obj("a", 12))
    inf.apply("ADDED", obj("a", 11, spec=7))  # older than the tombstone: no resurrection
    inf.apply("DELETED", obj("never", 13))  # never held: nothing to tell
    assert seen.events == [(None, "a", "10"), ("DELETED", "a", "12")]
    assert inf.objects == {}
    assert inf.stale == 3
    inf.apply("ADDED", obj("a", 14, spec=3))  # re-created later: applied
    assert seen.events[-1] == ("ADDED", "a", "14")
    # an unchanged object in a relist is not passed on again; a changed one is
    inf.replace([obj("a", 14, spec=3), obj("b", 15)])
    assert seen.events[-1] == (None, "b", "15")
    assert len(seen.events) == 4


async def test_a_collection_not_served_counts_as_empty_only_when_allowed() -> None:
    allowed = False
    source, seen = Source(), Seen()
    source.script(NotFoundError("404"))
    inf = informer(source, seen, absent_ok=lambda: allowed)
    task = asyncio.create_task(inf.run())
    try:
        await async_wait_until(lambda: inf.restarts == 1, "the first 404", timeout=5)
        assert (inf.synced, seen.synced) == (False, 0)  # not allowed: not synced
        allowed = True
        source.script(NotFoundError("404"), page(20, obj("x", 19)))
        await async_wait_until(lambda: inf.lists == 1, "the real list", timeout=5)
    finally:
        task.cancel()
    assert seen.synced == 2  # the empty one, then the real list
    assert inf.absent is False
    assert seen.events == [(None, "x", "19")]


async def test_a_404_after_a_successful_list_keeps_the_store() -> None:
    """A list that once succeeded and then answers 404 (an apiserver restarted, not serving the
    CRD yet) is an error: nothing is deleted (v0.3 review: every budget was taken as deleted
    and its members released)."""
    source, seen = Source(), Seen()
    source.script(page(20, obj("x", 19)), NotFoundError("404"))
    source.watches.append([GoneError("too old resource version: 20 (30)")])  # then a relist
    inf = informer(source, seen, absent_ok=lambda: True)
    task = asyncio.create_task(inf.run())
    try:
        await async_wait_until(lambda: source.lists.empty() and inf.restarts >= 1, "the 404")
    finally:
        task.cancel()
    assert list(inf.objects) == ["x"]
    assert (inf.absent, seen.synced) == (False, 1)
    assert seen.events == [(None, "x", "19")]


@pytest.mark.parametrize("rv", ["", "abc"])
def test_an_unordered_resource_version_is_always_applied(rv: str) -> None:
    seen = Seen()
    inf = informer(Source(), seen)
    inf.replace([obj("a", 10)])
    o = obj("a", 0)
    o["metadata"]["resourceVersion"] = rv
    inf.apply("MODIFIED", o)
    assert seen.events[-1] == ("MODIFIED", "a", rv)


def test_the_store_keeps_no_managed_fields() -> None:
    seen = Seen()
    inf = informer(Source(), seen)
    fields = [{"manager": "kubectl", "fieldsV1": {"f:metadata": {}}}]
    listed = obj("a", 10)
    listed["metadata"]["managedFields"] = fields
    inf.replace([inf.convert(listed) or {}])
    watched = obj("b", 11)
    watched["metadata"]["managedFields"] = fields
    inf.apply("ADDED", watched)
    assert inf.objects == {"a": obj("a", 10), "b": obj("b", 11)}
    assert watched["metadata"]["managedFields"] == fields  # the event itself is not changed
