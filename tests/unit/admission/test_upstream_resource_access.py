"""Ports of kube-apiserver v1.37.2's ``resource_access_test.go`` (the quota accessor).

Each test is named after the upstream test (and table case) whose behaviour it checks,
through the library's public API. Upstream sets ``hasSynced`` to false in both tests: live
lookups happen only before the informer has synced.
"""

from __future__ import annotations

import asyncio

import pytest

from dynquota.admission import CachingQuotaAccessor, ResourceQuota
from dynquota.quantity import parse_quantity


def _quota(ns: str = "foo", rv: str = "1") -> ResourceQuota:
    return ResourceQuota(
        namespace=ns, name="foo", resource_version=rv, hard={"pods": parse_quantity("1")}
    )


class _Unsynced(CachingQuotaAccessor):
    """An informer that never syncs; the live list answers from ``stored`` after ``delay``."""

    def __init__(self, stored: list[ResourceQuota], delay: float = 0.0, **kw: object) -> None:
        super().__init__(**kw)  # type: ignore[arg-type]
        self.stored = stored
        self.delay = delay
        self.lists: dict[str, int] = {}

    @property
    def informer_synced(self) -> bool:
        return False

    def informer_quotas(self, namespace: str) -> list[ResourceQuota]:
        raise AssertionError("an unsynced informer is never read")

    async def list_quotas(self, namespace: str) -> list[ResourceQuota]:
        self.lists[namespace] = self.lists.get(namespace, 0) + 1
        await asyncio.sleep(self.delay)
        return [q for q in self.stored if q.namespace == namespace]

    async def write_quota_status(self, quota: ResourceQuota) -> ResourceQuota:
        raise AssertionError("not written here")


@pytest.mark.parametrize(
    ("case", "cached_fresh", "client_has", "namespace", "found"),
    [
        ("object is found via cache", True, False, "foo", True),
        ("object is outdated and not found with client", False, False, "foo", False),
        ("object is outdated but is found with client", False, True, "foo", True),
        ("object does not exist in cache and is not found with client", True, False, "", False),
        ("object does not exist in cache and is found with client", None, True, "foo", True),
    ],
)
async def test_TestLRUCacheLookup(  # noqa: N802
    case: str, cached_fresh: bool | None, client_has: bool, namespace: str, found: bool
) -> None:
    now = [100.0]
    acc = _Unsynced([_quota()] if client_has else [], timer=lambda: now[0], live_lookup_size=1)
    if cached_fresh is not None:
        # prime the live-lookup cache with one list of "foo", then let it age (or not)
        acc.stored = [_quota()]
        await acc.get_quotas("foo")
        acc.stored = [_quota()] if client_has else []
        now[0] += 10.0 if cached_fresh else 31.0
    quotas = await acc.get_quotas(namespace)
    assert [q.key for q in quotas] == (["foo/foo"] if found else []), case


async def test_TestGetQuotas() -> None:  # noqa: N802
    """Concurrent callers share one list per namespace (#22422); a dropped entry lists again."""
    acc = _Unsynced([_quota("test-a"), _quota("test-b")], delay=0.05)
    results = await asyncio.gather(
        *(acc.get_quotas(ns) for _ in range(10) for ns in ("test-a", "test-b"))
    )
    assert [[q.namespace for q in r] for r in results] == [["test-a"], ["test-b"]] * 10
    assert acc.lists == {"test-a": 1, "test-b": 1}
    acc._live.pop("test-a")  # upstream: liveLookupCache.Remove
    assert [q.namespace for q in await acc.get_quotas("test-a")] == ["test-a"]
    assert acc.lists == {"test-a": 2, "test-b": 1}
