"""The admission accessor's informer (``QuotaInformer``) on the shared reflector: list,
watch, relist on 410 by status code or by reason alone, backoff on other errors.

The I/O is faked at the reflector's own adapter boundary (``ListerWatcher``)."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncGenerator
from typing import Any

import pytest

from dynquota._k8s.backoff import Backoff
from dynquota._k8s.errors import TransportError
from dynquota._k8s.paginate import ListPage
from dynquota.admission.kubernetes_accessor import QuotaInformer
from dynquota.testing.wait import async_wait_until


def quota(ns: str, name: str, rv: str, used: str = "1") -> dict[str, Any]:
    return {
        "metadata": {"namespace": ns, "name": name, "resourceVersion": rv},
        "spec": {"hard": {"pods": "10"}},
        "status": {"hard": {"pods": "10"}, "used": {"pods": used}},
    }


class Script:
    """Each list call returns the next page (or raises it); each watch yields the next
    script of events (then blocks, like an open stream)."""

    def __init__(self) -> None:
        self.lists: deque[ListPage | BaseException] = deque()
        self.watches: deque[list[dict[str, Any]]] = deque()
        self.watch_calls: list[str] = []

    async def list_page(self, limit: int, continue_token: str | None) -> ListPage:
        if not self.lists:
            await asyncio.Event().wait()
        page = self.lists.popleft()
        if isinstance(page, BaseException):
            raise page
        return page

    async def watch(
        self, resource_version: str, timeout_seconds: int
    ) -> AsyncGenerator[dict[str, Any], None]:
        self.watch_calls.append(resource_version)
        events = self.watches.popleft() if self.watches else []
        for event in events:
            yield event
        await asyncio.Event().wait()


@pytest.fixture
async def running() -> AsyncGenerator[list[asyncio.Task[None]], None]:
    tasks: list[asyncio.Task[None]] = []
    yield tasks
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def names(informer: QuotaInformer, ns: str) -> dict[str, str]:
    return {q.name: q.resource_version for q in informer.store.get(ns, {}).values()}


@pytest.mark.parametrize(
    "status",
    [
        {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old"},
        {"kind": "Status", "reason": "Expired", "message": "too old"},  # reason only
        {"kind": "Status", "code": 410, "reason": "Gone", "message": "gone"},
    ],
)
async def test_an_expired_watch_relists_and_replaces_the_store(
    running: list[asyncio.Task[None]], status: dict[str, Any]
) -> None:
    script = Script()
    script.lists.append(ListPage([quota("a", "q1", "5"), quota("a", "q2", "6")], "6", None))
    script.watches.append(
        [
            {"type": "MODIFIED", "object": quota("a", "q1", "7", used="2")},
            {"type": "ERROR", "object": status},
        ]
    )
    script.lists.append(ListPage([quota("a", "q1", "9")], "9", None))  # q2 deleted meanwhile
    informer = QuotaInformer(script, backoff=Backoff(initial=0.001, maximum=0.005))
    running.append(asyncio.create_task(informer.run()))

    await async_wait_until(lambda: informer.lists == 2, "relist", timeout=5)
    assert names(informer, "a") == {"q1": "9"}
    assert (informer.relists, informer.restarts) == (1, 0)
    assert script.watch_calls == ["6", "9"]  # the ERROR's Status never became a resourceVersion


async def test_other_errors_back_off_and_resume_without_relisting(
    running: list[asyncio.Task[None]],
) -> None:
    script = Script()
    script.lists.append(TransportError("connection refused"))
    script.lists.append(ListPage([quota("a", "q1", "5")], "5", None))
    script.watches.append([{"type": "ERROR", "object": {"kind": "Status", "code": 500}}])
    script.watches.append([{"type": "DELETED", "object": quota("a", "q1", "8")}])
    informer = QuotaInformer(script, backoff=Backoff(initial=0.001, maximum=0.005))
    running.append(asyncio.create_task(informer.run()))

    await async_wait_until(lambda: informer.events == 1, "the DELETED event", timeout=5)
    assert names(informer, "a") == {}
    assert (informer.lists, informer.relists, informer.restarts) == (1, 0, 2)
    assert script.watch_calls == ["5", "5"]


async def test_informer_lag_holds_events_back() -> None:
    script = Script()
    informer = QuotaInformer(script, informer_lag=30.0)
    informer.replace([informer.convert(quota("a", "q1", "5"))])
    informer.apply("MODIFIED", quota("a", "q1", "6", used="3"))
    assert names(informer, "a") == {"q1": "5"}  # still held
    informer.informer_lag.cancel()
