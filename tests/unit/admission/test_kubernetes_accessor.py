"""The admission accessor's informer (``QuotaInformer``) on the shared reflector: list,
watch, relist on 410 by status code or by reason alone, backoff on other errors.

The I/O is faked at the reflector's own adapter boundary (``ListerWatcher``), with the
scripted source of the metadata informer's tests."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest

from dynquota._k8s.backoff import Backoff
from dynquota._k8s.errors import TransportError
from dynquota.admission.kubernetes_accessor import QuotaInformer
from dynquota.testing.wait import async_wait_until

from ..kube.test_informer import FakeSource, page


def quota(ns: str, name: str, rv: str, used: str = "1") -> dict[str, Any]:
    return {
        "metadata": {"namespace": ns, "name": name, "resourceVersion": rv},
        "spec": {"hard": {"pods": "10"}},
        "status": {"hard": {"pods": "10"}, "used": {"pods": used}},
    }


@contextlib.asynccontextmanager
async def informing(informer: QuotaInformer) -> AsyncIterator[None]:
    """Run ``informer`` for the block."""
    task = asyncio.create_task(informer.run())
    try:
        yield
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


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
async def test_an_expired_watch_relists_and_replaces_the_store(status: dict[str, Any]) -> None:
    script = FakeSource()
    script.lists.append([page([quota("a", "q1", "5"), quota("a", "q2", "6")], "6")])
    script.watches.append(
        [
            {"type": "MODIFIED", "object": quota("a", "q1", "7", used="2")},
            {"type": "ERROR", "object": status},
        ]
    )
    script.lists.append([page([quota("a", "q1", "9")], "9")])  # q2 deleted meanwhile
    informer = QuotaInformer(script, backoff=Backoff(initial=0.001, maximum=0.005))
    async with informing(informer):
        await async_wait_until(lambda: informer.lists == 2, "relist", timeout=5)
    assert names(informer, "a") == {"q1": "9"}
    assert (informer.relists, informer.restarts) == (1, 0)
    # the ERROR's Status never became a resourceVersion
    assert [rv for rv, _ in script.watch_calls] == ["6", "9"]


async def test_other_errors_back_off_and_resume_without_relisting() -> None:
    script = FakeSource()
    script.lists.append(TransportError("connection refused"))
    script.lists.append([page([quota("a", "q1", "5")], "5")])
    script.watches.append([{"type": "ERROR", "object": {"kind": "Status", "code": 500}}])
    script.watches.append([{"type": "DELETED", "object": quota("a", "q1", "8")}])
    informer = QuotaInformer(script, backoff=Backoff(initial=0.001, maximum=0.005))
    async with informing(informer):
        await async_wait_until(lambda: informer.events == 1, "the DELETED event", timeout=5)
    assert names(informer, "a") == {}
    assert (informer.lists, informer.relists, informer.restarts) == (1, 0, 2)
    assert [rv for rv, _ in script.watch_calls] == ["5", "5"]


async def test_informer_lag_holds_events_back() -> None:
    informer = QuotaInformer(FakeSource(), informer_lag=30.0)
    informer.replace([informer.convert(quota("a", "q1", "5"))])
    informer.apply("MODIFIED", quota("a", "q1", "6", used="3"))
    assert names(informer, "a") == {"q1": "5"}  # still held
    informer.informer_lag.cancel()
