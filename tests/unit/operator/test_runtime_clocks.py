"""The runtime's clocks: the informers' freshness never follows a re-anchoring of the cluster
clock (a step back would make a dead watch look fresh, and a shrink go ahead on stale usage)."""

from __future__ import annotations

from email.utils import formatdate

from kubernetes_asyncio import client

from dynquota.operator.runtime import Runtime
from dynquota.settings import Settings


async def test_informer_freshness_ignores_a_reanchoring_of_the_cluster_clock() -> None:
    api = client.ApiClient(client.Configuration(host="https://127.0.0.1:1"))
    try:
        runtime = Runtime(Settings(), api)
        before = (runtime.watcher.clock(), runtime.objects.clock())
        # the apiserver's Date says one hour earlier: the cluster clock steps back
        runtime.clock.observe_date(formatdate(runtime.clock() - 3600, usegmt=True))
        assert runtime.clock.reanchors == 1
        after = (runtime.watcher.clock(), runtime.objects.clock())
        assert all(a >= b for a, b in zip(after, before, strict=True)), (before, after)
        assert runtime.clock() < before[0] - 3000
    finally:
        await api.close()
