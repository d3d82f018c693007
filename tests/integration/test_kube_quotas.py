"""Conditional writes of the managed quota (dynquota.kube.quotas) on the real apiserver."""

from __future__ import annotations

import pytest
from kubernetes_asyncio import client

from dynquota._k8s.errors import ConflictError
from dynquota.kube.quotas import QuotaClient, QuotaSnapshot
from dynquota.testing.wait import async_wait_until


async def _settled(quotas: QuotaClient, namespace: str, pods: str) -> QuotaSnapshot:
    """The quota once the quota controller has copied ``spec.hard`` to ``status.hard`` (it
    writes nothing more until something changes), read by a GET made for the next write."""

    async def check() -> QuotaSnapshot | None:
        snapshot = await quotas.get(namespace)
        assert snapshot is not None
        return snapshot if snapshot.status_hard.get("pods") == pods else None

    return await async_wait_until(check, f"status.hard pods={pods}", timeout=60)


async def test_patch_with_a_stale_resource_version_conflicts_and_the_current_one_applies(
    async_api_client: client.ApiClient, namespace: str
) -> None:
    quotas = QuotaClient(async_api_client)
    created = await quotas.create(namespace, {"pods": "5"}, {})
    current = await _settled(quotas, namespace, "5")
    assert current.resource_version != created.resource_version  # the controller wrote status
    patched = await quotas.patch(
        namespace, {"spec": {"hard": {"pods": "6"}}}, current.resource_version
    )
    assert patched.spec_hard == {"pods": "6"}
    with pytest.raises(ConflictError) as conflict:
        await quotas.patch(namespace, {"spec": {"hard": {"pods": "7"}}}, current.resource_version)
    assert conflict.value.status == 409
    after = await quotas.get(namespace)
    assert after is not None
    assert after.spec_hard == {"pods": "6"}  # the stale write changed nothing
    # without a resourceVersion the patch is unconditional
    assert (await quotas.patch(namespace, {"spec": {"hard": {"pods": "8"}}})).spec_hard == {
        "pods": "8"
    }


async def test_delete_with_the_uid_of_a_replaced_quota_keeps_the_new_one(
    async_api_client: client.ApiClient, namespace: str
) -> None:
    quotas = QuotaClient(async_api_client)
    old = await quotas.create(namespace, {"pods": "5"}, {})
    assert await quotas.delete(namespace, old.uid) is True
    await async_wait_until(lambda: _gone(quotas, namespace), "the old quota is gone", timeout=30)
    new = await quotas.create(namespace, {"pods": "9"}, {})
    assert new.uid != old.uid
    assert await quotas.delete(namespace, old.uid) is False  # 409 on the uid precondition
    kept = await quotas.get(namespace)
    assert kept is not None
    assert kept.uid == new.uid
    assert kept.spec_hard == {"pods": "9"}
    assert await quotas.delete(namespace, new.uid) is True


async def _gone(quotas: QuotaClient, namespace: str) -> bool:
    return await quotas.get(namespace) is None


async def test_list_managed_narrows_to_a_label_selector(
    async_api_client: client.ApiClient, namespace: str
) -> None:
    """``list_managed(label_selector)`` is a LIST with both selectors: the managed quota that
    also carries ``dynquota.io/budget=<name>`` (what a budget's pass lists), not the others."""
    quotas = QuotaClient(async_api_client)
    await quotas.create(namespace, {"pods": "5"}, {})
    budget = f"b-{namespace}"
    assert [q.namespace for q in await quotas.list_managed(f"dynquota.io/budget={budget}")] == []
    await quotas.patch(namespace, {"metadata": {"labels": {"dynquota.io/budget": budget}}})
    own = await quotas.list_managed(f"dynquota.io/budget={budget}")
    assert [(q.namespace, q.labels["dynquota.io/budget"]) for q in own] == [(namespace, budget)]
    assert namespace in {q.namespace for q in await quotas.list_managed()}
