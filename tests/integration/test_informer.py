"""Metadata informers against the real local control plane.

The tallies must equal the quota controller's ``status.used`` at rest (after its resync) and
what a direct list shows, through bursts, deletions, terminal phases, stuck-terminating pods,
an apiserver restart, a forced ``410 Gone`` and 500 namespaces. Fixtures create and delete
objects with the official sync client (an independent path from the code under test).
"""

from __future__ import annotations

import asyncio
import itertools
import os
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import kubernetes
import kubernetes_asyncio
import pytest
from kubernetes.client.exceptions import ApiException

from dynquota._k8s.backoff import Backoff
from dynquota.kube.informer import UsageWatcher
from dynquota.quantity import parse_quantity
from dynquota.testing.controlplane import LocalControlPlane
from dynquota.testing.wait import WaitTimeoutError, async_wait_until, wait_until

PAUSE = "registry.k8s.io/pause:3.10"
WATCH_TIMEOUT = 10  # seconds: short, so watch cycles happen during the tests
WORKERS = 16

T = TypeVar("T")


# -- fixture helpers (sync client, run in threads) ------------------------------------------


def retrying(
    call: Callable[[], T], ok_statuses: Iterable[int] = (), timeout: float = 90
) -> T | None:
    """Run ``call`` until it succeeds; transport errors and 5xx/429 are retried (the
    apiserver may be restarting). An ApiException whose status is in ``ok_statuses`` counts
    as done (e.g. 409 on a create that went through before the connection dropped)."""
    result: list[T | None] = []

    def attempt() -> bool:
        try:
            result.append(call())
        except ApiException as exc:
            if exc.status in ok_statuses:
                result.append(None)
            elif exc.status not in (0, 429, 500, 502, 503, 504):
                raise
        except Exception:  # urllib3 connection errors while the apiserver restarts
            return False
        return bool(result)

    wait_until(attempt, "a call while the apiserver may be restarting", timeout, interval=0.2)
    return result[0]


def parallel(fn: Callable[[T], object], items: Iterable[T], workers: int = WORKERS) -> None:
    with ThreadPoolExecutor(max_workers=workers) as pool:
        for _ in pool.map(fn, items):
            pass


def configmap(name: str, size: int = 0) -> dict[str, Any]:
    return {"metadata": {"name": name}, "data": {"d": "x" * size} if size else {}}


def pod(name: str, node: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": PAUSE}]}
    if node:
        spec["nodeName"] = node
    return {"metadata": {"name": name}, "spec": spec}


def create_configmap(core: kubernetes.client.CoreV1Api, ns: str, name: str) -> None:
    retrying(lambda: core.create_namespaced_config_map(ns, configmap(name)), ok_statuses=(409,))


def create_pod(
    core: kubernetes.client.CoreV1Api, ns: str, name: str, node: str | None = None
) -> None:
    retrying(lambda: core.create_namespaced_pod(ns, pod(name, node)), ok_statuses=(409,))


def delete_configmap(core: kubernetes.client.CoreV1Api, ns: str, name: str) -> None:
    retrying(lambda: core.delete_namespaced_config_map(name, ns), ok_statuses=(404,))


def delete_pod(
    core: kubernetes.client.CoreV1Api, ns: str, name: str, grace: int | None = None
) -> None:
    retrying(
        lambda: core.delete_namespaced_pod(name, ns, grace_period_seconds=grace),
        ok_statuses=(404,),
    )


def set_phase(core: kubernetes.client.CoreV1Api, ns: str, name: str, phase: str) -> None:
    core.patch_namespaced_pod_status(name, ns, {"status": {"phase": phase}})


def make_quota(core: kubernetes.client.CoreV1Api, ns: str) -> None:
    hard = {"pods": "99999", "configmaps": "99999"}  # not "100k": the server canonicalises
    core.create_namespaced_resource_quota(ns, {"metadata": {"name": "q"}, "spec": {"hard": hard}})
    wait_until(
        lambda: core.read_namespaced_resource_quota("q", ns).status.hard == hard,
        f"status.hard of quota q in {ns}",
    )


def quota_used(core: kubernetes.client.CoreV1Api, ns: str) -> dict[str, int]:
    used = core.read_namespaced_resource_quota("q", ns).status.used or {}
    return {key: int(parse_quantity(value).value) for key, value in used.items()}


def wait_root_ca(core: kubernetes.client.CoreV1Api, ns: str) -> None:
    def present() -> bool:
        try:
            core.read_namespaced_config_map("kube-root-ca.crt", ns)
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise
        return True

    wait_until(present, f"kube-root-ca.crt in {ns}", timeout=60)


def listed_counts(core: kubernetes.client.CoreV1Api, ns: str) -> dict[str, int]:
    """What the quota should count, from full objects: an independent computation."""
    pods = core.list_namespaced_pod(ns).items
    now = time.time()
    counted = 0
    for item in pods:
        if item.status.phase in ("Succeeded", "Failed"):
            continue
        meta = item.metadata
        deleted, grace = meta.deletion_timestamp, meta.deletion_grace_period_seconds
        if deleted is not None and grace is not None and now > deleted.timestamp() + grace:
            continue
        counted += 1
    return {"pods": counted, "configmaps": len(core.list_namespaced_config_map(ns).items)}


async def converge(
    watcher: UsageWatcher,
    core: kubernetes.client.CoreV1Api,
    ns: str,
    expected: dict[str, int],
    timeout: float = 60,
) -> None:
    """Wait until the tally and the quota's status.used both equal ``expected``."""
    seen: dict[str, Any] = {}

    async def equal() -> bool:
        seen["used"] = await asyncio.to_thread(quota_used, core, ns)
        seen["tally"] = watcher.usages(ns)
        return seen["tally"] == expected and seen["used"] == expected

    try:
        await async_wait_until(equal, f"{ns} to count {expected}", timeout, interval=0.25)
    except WaitTimeoutError as exc:
        raise WaitTimeoutError(
            f"{exc}; tally {seen.get('tally')}, status.used {seen.get('used')}; "
            f"informers: {watcher.stats()}"
        ) from None


# -- fixtures ----------------------------------------------------------------------------


class Changes:
    """Records on_change notifications."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def __call__(self, namespace: str, resource: str) -> None:
        self.calls.append((namespace, resource))

    def namespaces(self) -> set[str]:
        return {ns for ns, _ in self.calls}


@pytest.fixture
def core(api_client: kubernetes.client.ApiClient) -> kubernetes.client.CoreV1Api:
    return kubernetes.client.CoreV1Api(api_client)


@pytest.fixture
def changes() -> Changes:
    return Changes()


@pytest.fixture
async def watcher(
    async_api_client: kubernetes_asyncio.client.ApiClient, changes: Changes
) -> AsyncIterator[UsageWatcher]:
    usage = UsageWatcher.for_cluster(
        async_api_client,
        on_change=changes,
        watch_timeout=WATCH_TIMEOUT,
        backoff=lambda: Backoff(initial=0.1, maximum=2.0),
    )
    async with usage:
        await usage.wait_synced(timeout=60)
        yield usage


@pytest.fixture
def node(core: kubernetes.client.CoreV1Api) -> Iterator[str]:
    """A Node object with no kubelet behind it: pods bound to it stay Terminating."""
    name = f"n-{uuid.uuid4().hex[:8]}"
    core.create_node({"metadata": {"name": name}})
    yield name
    core.delete_node(name)


# -- tests -------------------------------------------------------------------------------


async def test_counts_match_quota_through_bursts_phases_and_grace(
    core: kubernetes.client.CoreV1Api,
    namespace: str,
    node: str,
    watcher: UsageWatcher,
    changes: Changes,
) -> None:
    ns = namespace
    await asyncio.to_thread(make_quota, core, ns)
    await asyncio.to_thread(wait_root_ca, core, ns)
    await converge(watcher, core, ns, {"pods": 0, "configmaps": 1})

    # 300 ConfigMaps + 100 pods created in parallel.
    cm_names = [f"cm-{i}" for i in range(300)]
    pod_names = [f"p-{i}" for i in range(100)]
    creates: list[Callable[[], None]] = [
        *(lambda n=n: create_configmap(core, ns, n) for n in cm_names),
        *(lambda n=n: create_pod(core, ns, n) for n in pod_names),
    ]
    await asyncio.to_thread(parallel, lambda call: call(), creates)
    await converge(watcher, core, ns, {"pods": 100, "configmaps": 301})
    assert ns in changes.namespaces()

    # Delete half of each (unbound pods go at once, even with a grace period).
    deletes: list[Callable[[], None]] = [
        *(lambda n=n: delete_configmap(core, ns, n) for n in cm_names[:150]),
        *(lambda n=n: delete_pod(core, ns, n, grace=30) for n in pod_names[:50]),
    ]
    await asyncio.to_thread(parallel, lambda call: call(), deletes)
    await converge(watcher, core, ns, {"pods": 50, "configmaps": 151})

    # 20 pods to Succeeded and 10 to Failed through the status subresource: they leave the
    # field selector (DELETED events) and the quota stops charging them.
    phases = [(n, "Succeeded") for n in pod_names[50:70]] + [
        (n, "Failed") for n in pod_names[70:80]
    ]
    await asyncio.to_thread(parallel, lambda item: set_phase(core, ns, *item), phases)
    await converge(watcher, core, ns, {"pods": 20, "configmaps": 151})
    assert len(core.list_namespaced_pod(ns).items) == 50  # terminal pods still exist

    # Pods bound to a Node, deleted with a grace period: they keep counting until
    # deletionTimestamp + grace (= request time + 2 * grace), like the quota.
    grace = 5
    bound = [f"b-{i}" for i in range(10)]
    try:
        await asyncio.to_thread(parallel, lambda n: create_pod(core, ns, n, node), bound)
        await converge(watcher, core, ns, {"pods": 30, "configmaps": 151})
        await asyncio.to_thread(parallel, lambda n: delete_pod(core, ns, n, grace=grace), bound)
        terminating = [
            item.metadata
            for item in core.list_namespaced_pod(ns).items
            if item.metadata.deletion_timestamp is not None
        ]
        assert len(terminating) == 10
        assert all(m.deletion_grace_period_seconds == grace for m in terminating)
        expiries = [m.deletion_timestamp.timestamp() + grace for m in terminating]

        def expiry_seen() -> float | None:
            return watcher.next_expiry(ns)

        await asyncio.to_thread(
            wait_until, lambda: expiry_seen() == min(expiries), "next_expiry", 30
        )
        if time.time() < min(expiries) - 0.5:
            assert watcher.usages(ns) == {"pods": 30, "configmaps": 151}
        await converge(watcher, core, ns, {"pods": 20, "configmaps": 151}, timeout=60)
        assert time.time() > max(expiries)
        assert watcher.next_expiry(ns) is None
        # Still there, stuck terminating: the count dropped because the grace passed.
        still = [
            item for item in core.list_namespaced_pod(ns).items if item.metadata.deletion_timestamp
        ]
        assert len(still) == 10
        assert listed_counts(core, ns) == {"pods": 20, "configmaps": 151}
        tally = watcher.tally("pods")
        assert all((ns, m.uid) in tally for m in terminating)
    finally:
        await asyncio.to_thread(parallel, lambda n: delete_pod(core, ns, n, grace=0), bound)
    await converge(watcher, core, ns, {"pods": 20, "configmaps": 151})
    assert watcher.stats()["pods"]["relists"] == 0


async def test_counts_converge_across_apiserver_restart_mid_burst(
    controlplane: LocalControlPlane,
    core: kubernetes.client.CoreV1Api,
    namespace: str,
    watcher: UsageWatcher,
) -> None:
    ns = namespace
    await asyncio.to_thread(make_quota, core, ns)
    await asyncio.to_thread(wait_root_ca, core, ns)
    stop = threading.Event()
    created: list[str] = []

    def burst(worker: int) -> None:
        for i in itertools.count():
            if stop.is_set():
                return
            name = f"w{worker}-{i}"
            if i % 2:
                create_pod(core, ns, name)
            else:
                create_configmap(core, ns, name)
            created.append(name)
            if i % 5 == 4:  # delete one of our earlier objects now and then
                victim = f"w{worker}-{i - 3}"
                if (i - 3) % 2:
                    delete_pod(core, ns, victim)
                else:
                    delete_configmap(core, ns, victim)

    loop = asyncio.get_running_loop()
    pool = ThreadPoolExecutor(max_workers=4)
    workers = [loop.run_in_executor(pool, burst, w) for w in range(4)]
    try:
        await asyncio.to_thread(
            wait_until, lambda: watcher.usage(ns, "configmaps") >= 40, "burst under way", 60
        )
        restarts_before = sum(s["restarts"] + s["relists"] for s in watcher.stats().values())
        await asyncio.to_thread(controlplane.stop_apiserver)
        # Let the informers notice (their watches break; reconnects are refused) ...
        await asyncio.to_thread(
            wait_until,
            lambda: sum(s["restarts"] for s in watcher.stats().values()) > restarts_before,
            "informers see the apiserver gone",
            30,
        )
        # blocks the event loop until /readyz: the informers resume only afterwards
        controlplane.start_apiserver()
        at_restart = len(created)
        await asyncio.to_thread(
            wait_until,
            lambda: len(created) >= at_restart + 80,
            "burst continues after the restart",
            90,
        )
    finally:
        stop.set()
        await asyncio.gather(*workers)
        pool.shutdown()
    expected = await asyncio.to_thread(listed_counts, core, ns)
    assert expected["configmaps"] > 40
    await converge(watcher, core, ns, expected, timeout=90)
    assert expected == await asyncio.to_thread(listed_counts, core, ns)
    restarts_after = sum(s["restarts"] + s["relists"] for s in watcher.stats().values())
    assert restarts_after > restarts_before
    assert watcher.synced


async def test_410_gone_relists_and_forgets_objects_deleted_during_the_gap(
    controlplane: LocalControlPlane,
    core: kubernetes.client.CoreV1Api,
    namespace: str,
    watcher: UsageWatcher,
    changes: Changes,
) -> None:
    ns = namespace
    await asyncio.to_thread(make_quota, core, ns)
    await asyncio.to_thread(wait_root_ca, core, ns)
    names = [f"a-{i}" for i in range(10)]
    await asyncio.to_thread(parallel, lambda n: create_configmap(core, ns, n), names)
    await asyncio.to_thread(parallel, lambda n: create_pod(core, ns, n), names[:4])
    await converge(watcher, core, ns, {"pods": 4, "configmaps": 11})
    gone_uids = {
        item.metadata.uid
        for item in core.list_namespaced_config_map(ns).items
        if item.metadata.name in names[:5]
    }
    assert len(gone_uids) == 5
    cms = watcher.informers["configmaps"]
    rv_before = cms.resource_version
    assert rv_before is not None

    # Drop the informers' connections; they keep their tallies and resourceVersions.
    await watcher.stop()
    await asyncio.to_thread(parallel, lambda n: delete_configmap(core, ns, n), names[:5])
    await asyncio.to_thread(parallel, lambda n: delete_pod(core, ns, n), names[:2])
    await asyncio.to_thread(
        parallel, lambda n: create_configmap(core, ns, n), ["b-0", "b-1", "b-2"]
    )
    revision = await asyncio.to_thread(controlplane.compact_etcd)
    assert revision > int(rv_before)
    await asyncio.to_thread(controlplane.stop_apiserver)  # the watch cache forgets history
    # blocks the event loop until /readyz, so the tally below is still the stale one
    controlplane.start_apiserver()
    changes.calls.clear()
    assert watcher.usages(ns) == {"pods": 4, "configmaps": 11}  # stale until resumed

    watcher.start()
    await asyncio.to_thread(
        wait_until, lambda: cms.relists >= 1 and cms.lists >= 2, "configmaps relist after 410", 60
    )
    await converge(watcher, core, ns, {"pods": 2, "configmaps": 9})
    assert not any((ns, uid) in cms.tally for uid in gone_uids)
    assert int(cms.resource_version or 0) >= revision
    assert "410" in (cms.last_error or "") or "Expired" in (cms.last_error or "")
    assert watcher.informers["pods"].relists >= 1
    assert (ns, "configmaps") in changes.calls
    assert (ns, "pods") in changes.calls


async def test_watch_cycles_complete_on_a_quiet_cluster(
    async_api_client: kubernetes_asyncio.client.ApiClient,
) -> None:
    timeout = 3
    watcher = UsageWatcher.for_cluster(async_api_client, watch_timeout=timeout)
    async with watcher:
        await watcher.wait_synced(timeout=60)
        seen: dict[str, list[float]] = {resource: [] for resource in watcher.informers}

        def sample() -> bool:
            """Record each new completed cycle; healthy at every sample; 3 cycles each."""
            for resource, informer in watcher.informers.items():
                cycle = informer.last_watch_cycle
                if cycle is not None and (not seen[resource] or seen[resource][-1] != cycle):
                    seen[resource].append(cycle)
            assert watcher.healthy(margin=2.0), watcher.stats()
            return all(len(cycles) >= 3 for cycles in seen.values())

        await async_wait_until(sample, "3 watch cycles per informer", 4 * (timeout + 1))
        for resource, cycles in seen.items():
            assert len(cycles) >= 3, (resource, cycles)
            gaps = [b - a for a, b in itertools.pairwise(cycles)]
            assert max(gaps) <= timeout + 2.0, (resource, gaps)
            assert watcher.informers[resource].restarts == 0


NAMESPACES = int(os.environ.get("DYNQUOTA_IT_NAMESPACES", "500"))


async def test_many_namespaces_sync(
    core: kubernetes.client.CoreV1Api, watcher: UsageWatcher
) -> None:
    run = uuid.uuid4().hex[:6]
    names = [f"m-{run}-{i}" for i in range(NAMESPACES)]
    label = {"dynquota-test": f"many-{run}"}

    def populate(ns: str) -> None:
        retrying(lambda: core.create_namespace({"metadata": {"name": ns, "labels": label}}))
        for i in range(2):
            create_configmap(core, ns, f"c{i}")

        # The ServiceAccount admission plugin refuses pods until `default` exists.
        def created() -> bool:
            try:
                core.create_namespaced_pod(ns, pod("p0"))
            except ApiException as exc:
                if exc.status == 403:
                    return False
                if exc.status != 409:
                    raise
            return True

        wait_until(created, f"pod p0 admitted in {ns}", timeout=120, interval=0.5)

    try:
        await asyncio.to_thread(parallel, populate, names)
        await asyncio.to_thread(parallel, lambda ns: wait_root_ca(core, ns), names)
        expected = {ns: {"pods": 1, "configmaps": 3} for ns in names}

        def synced() -> bool:
            return all(watcher.usages(ns) == expected[ns] for ns in names)

        await asyncio.to_thread(wait_until, synced, f"{NAMESPACES} namespaces counted", 120)
        # A fresh informer gets the same from its paginated initial list.
        async with UsageWatcher(
            [informer.source for informer in watcher.informers.values()], page_size=100
        ) as fresh:
            await fresh.wait_synced(timeout=120)
            assert {ns: fresh.usages(ns) for ns in names} == expected
            assert fresh.informers["configmaps"].lists == 1
        sample = names[:: max(1, NAMESPACES // 20)]
        listed = await asyncio.to_thread(lambda: {ns: listed_counts(core, ns) for ns in sample})
        assert listed == {ns: expected[ns] for ns in sample}
    finally:
        await asyncio.to_thread(
            parallel, lambda ns: retrying(lambda: core.delete_namespace(ns), (404,)), names
        )
