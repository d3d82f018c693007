"""The admission evaluator over the Kubernetes accessor, against a real apiserver.

The charged key is ``count/widgets.example.com``: no such resource exists, so the quota
controller has no evaluator for it and keeps whatever ``status.used`` says (shown first),
while it recomputes keys it can count (``configmaps``) and would overwrite charges there.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import kubernetes
import kubernetes_asyncio
import pytest

from dynquota.admission import (
    DYNQUOTA,
    UPSTREAM,
    AdmissionAttributes,
    AdmissionError,
    Evaluator,
    GroupResource,
    KubernetesQuotaAccessor,
    QuotaConflictError,
    QuotaForbiddenError,
)
from dynquota.testing.controlplane import LocalControlPlane
from dynquota.testing.wait import wait_until

KEY = "count/widgets.example.com"
WIDGETS = GroupResource("example.com", "widgets")


def create_quota(
    core: kubernetes.client.CoreV1Api, ns: str, hard: dict[str, str], used: dict[str, str]
) -> None:
    """Create quota ``q``, wait for the controller's status, then set ``used`` for our key."""
    core.create_namespaced_resource_quota(ns, {"metadata": {"name": "q"}, "spec": {"hard": hard}})
    wait_until(
        lambda: (core.read_namespaced_resource_quota("q", ns).status.hard or {}) == hard,
        f"status.hard of quota q in {ns}",
    )

    def write_used() -> bool:
        q = core.read_namespaced_resource_quota("q", ns)
        q.status.used = {**(q.status.used or {}), **used}
        try:
            core.replace_namespaced_resource_quota_status("q", ns, q)
        except kubernetes.client.exceptions.ApiException as e:
            if e.status == 409:  # the controller wrote meanwhile
                return False
            raise
        return True

    wait_until(write_used, "status.used written")


def status_used(core: kubernetes.client.CoreV1Api, ns: str) -> dict[str, str]:
    return dict(core.read_namespaced_resource_quota("q", ns).status.used or {})


def widget(ns: str, i: int) -> AdmissionAttributes:
    return AdmissionAttributes(namespace=ns, resource=WIDGETS, object={}, name=f"w-{i}")


@pytest.fixture
async def clients(controlplane: LocalControlPlane) -> AsyncIterator[list[Any]]:
    """Five independent kubernetes_asyncio clients (five "apiserver replicas")."""
    made = [
        await kubernetes_asyncio.config.new_client_from_config(config_file=controlplane.kubeconfig)
        for _ in range(5)
    ]
    yield made
    for c in made:
        await c.close()


def test_quota_controller_keeps_used_of_a_key_it_cannot_count(
    api_client: kubernetes.client.ApiClient, namespace: str
) -> None:
    core = kubernetes.client.CoreV1Api(api_client)
    create_quota(core, namespace, {KEY: "150", "configmaps": "100"}, {KEY: "7", "configmaps": "9"})
    # A spec change makes the controller recompute the status now.
    core.patch_namespaced_resource_quota(
        "q", namespace, {"spec": {"hard": {KEY: "150", "configmaps": "101"}}}
    )
    wait_until(
        lambda: (
            core.read_namespaced_resource_quota("q", namespace).status.hard.get("configmaps")
            == "101"
        ),
        "the controller copied the new spec.hard",
    )
    # configmaps was recounted (kube-root-ca.crt), the widgets charge was left alone.
    wait_until(
        lambda: status_used(core, namespace) == {KEY: "7", "configmaps": "1"},
        "status.used after the controller's sync",
    )


async def test_five_evaluators_admit_exactly_the_room_of_the_quota(
    api_client: kubernetes.client.ApiClient, namespace: str, clients: list[Any]
) -> None:
    core = kubernetes.client.CoreV1Api(api_client)
    create_quota(core, namespace, {KEY: "150"}, {KEY: "0"})
    accessors = [KubernetesQuotaAccessor(c) for c in clients]
    await asyncio.gather(*(a.start() for a in accessors))
    evaluators = [Evaluator(a, policy=DYNQUOTA) for a in accessors]

    async def attempt(i: int) -> AdmissionError | None:
        try:
            await evaluators[i % 5].evaluate(widget(namespace, i))
        except AdmissionError as e:
            return e
        return None

    try:
        results = await asyncio.gather(*(attempt(i) for i in range(200)))
    finally:
        for ev in evaluators:
            await ev.close()
        for a in accessors:
            await a.stop()

    admitted = [r for r in results if r is None]
    denied = [r for r in results if r is not None]
    assert len(admitted) == 150
    assert len(denied) == 50
    assert all(isinstance(r, QuotaForbiddenError) for r in denied), {repr(r) for r in denied}
    assert all("exceeded quota: q, requested: " + KEY + "=1" in str(r) for r in denied)
    assert not any(getattr(r, "status", None) == 409 for r in results)
    conflicts = sum(a.stats.conflicts for a in accessors)
    writes = sum(a.stats.status_writes for a in accessors)
    print(f"\n5 evaluators, 200 creates, room 150: {writes} status writes, {conflicts} conflicts")
    assert status_used(core, namespace) == {KEY: "150"}


async def test_after_a_conflict_the_quota_is_re_read_live(
    api_client: kubernetes.client.ApiClient, namespace: str, async_api_client: Any
) -> None:
    core = kubernetes.client.CoreV1Api(api_client)
    create_quota(core, namespace, {KEY: "100"}, {KEY: "0"})
    accessor = KubernetesQuotaAccessor(async_api_client, namespace=namespace)
    await accessor.start()
    await accessor.stop()  # the informer's copy now lags behind every later write

    def foreign_write(value: str) -> None:
        q = core.read_namespaced_resource_quota("q", namespace)
        q.status.used = {KEY: value}
        core.replace_namespaced_resource_quota_status("q", namespace, q)

    async with Evaluator(accessor, policy=DYNQUOTA) as ev:
        await ev.evaluate(widget(namespace, 1))  # from the informer copy; no conflict
        assert (accessor.stats.conflicts, accessor.stats.live_lists) == (0, 0)
        foreign_write("5")  # another replica charged 4 more
        await ev.evaluate(widget(namespace, 2))
    # the second write conflicted once, one live list fetched the current quota, then it fit
    assert (accessor.stats.conflicts, accessor.stats.live_lists) == (1, 1)
    assert ev.stats.live_rereads == 1
    assert status_used(core, namespace) == {KEY: "6"}

    # The upstream policy re-reads through the caches: the same stale copy every time.
    foreign_write("10")
    async with Evaluator(accessor, policy=UPSTREAM) as ev:
        with pytest.raises(QuotaConflictError) as refused:
            await ev.evaluate(widget(namespace, 3))
    assert refused.value.status == 409
    assert accessor.stats.conflicts == 1 + 4
    assert status_used(core, namespace) == {KEY: "10"}
