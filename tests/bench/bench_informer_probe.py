"""Helper processes of the informer benchmark (tests/bench/test_bench_informer.py).

    python tests/bench/bench_informer_probe.py metadata KUBECONFIG
    python tests/bench/bench_informer_probe.py full KUBECONFIG
    python tests/bench/bench_informer_probe.py populate KUBECONFIG PREFIX NS CMS PODS CONC

``populate``: create NS namespaces named PREFIX-i (and wait for their ``default``
ServiceAccount), then CMS ConfigMaps of mixed sizes (70 % ~200 B, 20 % ~5 KB, 10 % ~50 KB
like Helm release records) and PODS pods spread round-robin over them, with at most CONC
requests in flight. Prints one JSON line with timings.

``metadata``: dynquota's UsageWatcher (metadata-only list+watch of pods and ConfigMaps) until
synced; retained = the tallies (plus the watcher's small fixed state).
``full``: the baseline an operator gets from a kopf ``@kopf.index`` that keeps bodies (kopf
keeps raw dicts): a paginated full-object list of the same pods (same field selector) and
ConfigMaps through the same kubernetes_asyncio ApiClient, each decoded object kept in a dict
keyed by uid.

Prints one JSON line: objects, retained bytes (tracemalloc, after gc), tracemalloc peak,
RSS delta (VmRSS; includes freed-but-not-returned arena memory), list body bytes and a
gzip (level 1, the apiserver's) estimate of them, seconds, and (metadata mode) the 12 largest
allocation sites still retained after the sync (tracemalloc, by line).
"""

from __future__ import annotations

import asyncio
import base64
import functools
import gc
import itertools
import json
import random
import sys
import time
import tracemalloc
import zlib
from typing import Any

import aiohttp
import kubernetes_asyncio

from dynquota.kube.informer import (
    CONFIGMAPS_WATCH,
    PODS_WATCH,
    KubeMetadataSource,
    UsageWatcher,
    WatchedResource,
)
from dynquota.usage import ResourceTally


def tally_bytes(tally: ResourceTally) -> int:
    """Deep size of a tally's own structures (dicts, sets, slots objects, strings)."""
    namespaces = tally._namespaces
    total = sys.getsizeof(tally) + sys.getsizeof(namespaces)
    for name, entries in namespaces.items():
        total += sys.getsizeof(name) + sys.getsizeof(entries)
        total += sys.getsizeof(entries.indefinite)
        total += sum(sys.getsizeof(uid) for uid in entries.indefinite)  # values: None
        if entries.terminating is not None:
            total += sys.getsizeof(entries.terminating)
            total += sum(sys.getsizeof(u) + 24 for u in entries.terminating)
    return total


def rss_bytes() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


class Bytes:
    def __init__(self) -> None:
        self.raw = 0
        self.gzip = 0

    def add(self, body: bytes) -> None:
        self.raw += len(body)
        self.gzip += len(zlib.compress(body, 1)) + 18  # gzip header/trailer


async def full_list(
    api: kubernetes_asyncio.client.ApiClient,
    watched: WatchedResource,
    store: dict[str, dict[str, Any]],
    counter: Bytes,
) -> None:
    token: str | None = None
    while True:
        query = [("limit", "500")]
        if watched.field_selector:
            query.append(("fieldSelector", watched.field_selector))
        if token:
            query.append(("continue", token))
        response = await api.call_api(
            watched.path,
            "GET",
            query_params=query,
            header_params={"Accept": "application/json"},
            auth_settings=["BearerToken"],
            _preload_content=False,
            _request_timeout=aiohttp.ClientTimeout(total=120),
        )
        assert response.status == 200, response.status
        body = await response.read()
        response.release()
        counter.add(body)
        decoded = json.loads(body)
        del body
        for item in decoded.get("items") or []:
            store[item["metadata"]["uid"]] = item
        token = decoded["metadata"].get("continue")
        del decoded
        if not token:
            return


async def main(mode: str, kubeconfig: str) -> dict[str, Any]:
    api = await kubernetes_asyncio.config.new_client_from_config(config_file=kubeconfig)
    async with api:
        counter = Bytes()
        gc.collect()
        rss0 = rss_bytes()
        tracemalloc.start()
        base, _ = tracemalloc.get_traced_memory()
        started = time.monotonic()
        if mode == "metadata":
            sources = [KubeMetadataSource(api, w) for w in (PODS_WATCH, CONFIGMAPS_WATCH)]
            watcher = UsageWatcher(sources, watch_timeout=300)
            async with watcher:
                await watcher.wait_synced(timeout=600)
                seconds = time.monotonic() - started
                objects = sum(len(i.tally) for i in watcher.informers.values())
                gc.collect()
                current, peak = tracemalloc.get_traced_memory()
                # where the retained bytes are: the largest allocation sites
                top = [
                    {"where": str(stat.traceback[0]), "bytes": stat.size, "count": stat.count}
                    for stat in tracemalloc.take_snapshot().statistics("lineno")[:12]
                ]
                rss1 = rss_bytes()
                list_bytes = sum(s.bytes_received for s in sources)
                structures = sum(tally_bytes(i.tally) for i in watcher.informers.values())
            # gzip estimate of the metadata list: list again, outside the measurement
            tracemalloc.stop()
            for source in sources:
                token = None
                while True:
                    response = await api.call_api(
                        source.watched.path,
                        "GET",
                        query_params=[("limit", "500")]
                        + (
                            [("fieldSelector", source.watched.field_selector)]
                            if source.watched.field_selector
                            else []
                        )
                        + ([("continue", token)] if token else []),
                        header_params={
                            "Accept": "application/json;as=PartialObjectMetadataList;"
                            "g=meta.k8s.io;v=v1"
                        },
                        auth_settings=["BearerToken"],
                        _preload_content=False,
                    )
                    body = await response.read()
                    response.release()
                    counter.add(body)
                    token = json.loads(body)["metadata"].get("continue")
                    if not token:
                        break
        else:
            store: dict[str, dict[str, Any]] = {}
            for watched in (PODS_WATCH, CONFIGMAPS_WATCH):
                await full_list(api, watched, store, counter)
            seconds = time.monotonic() - started
            objects = len(store)
            gc.collect()
            current, peak = tracemalloc.get_traced_memory()
            rss1 = rss_bytes()
            list_bytes = counter.raw
            tracemalloc.stop()
            structures = 0
            top = []
        return {
            "mode": mode,
            "objects": objects,
            "retained_bytes": current - base,
            "tally_structure_bytes": structures,
            "peak_bytes": peak - base,
            "top": top,
            "rss_delta_bytes": rss1 - rss0,
            "list_bytes": list_bytes,
            "list_gzip_estimate_bytes": counter.gzip,
            "seconds": round(seconds, 2),
        }


async def create_retrying(gate: asyncio.Semaphore, call: Any, *args: Any) -> None:
    """``call(*args)`` under ``gate``, with a 60 s request timeout: a 409 means done; 403 (the
    ServiceAccount ``default`` not there yet), 429 and 5xx are retried every 0.5 s, 100 times at
    most; any other error raises."""
    async with gate:
        for attempt in range(100):
            try:
                await call(*args, _request_timeout=60)
                return
            except kubernetes_asyncio.client.ApiException as exc:
                if exc.status == 409:
                    return
                if exc.status not in (403, 429, 500, 503, 504) or attempt == 99:
                    raise
            await asyncio.sleep(0.5)


async def create_namespaces(create: Any, core: Any, names: list[str], prefix: str) -> None:
    """Create the namespaces ``names`` labelled ``bench=prefix`` with ``create`` (a
    :func:`create_retrying` bound to its gate), all at once."""
    labels = {"bench": prefix}
    await asyncio.gather(
        *(create(core.create_namespace, {"metadata": {"name": n, "labels": labels}}) for n in names)
    )


def configmap_size(i: int) -> int:
    return 50_000 if i % 10 == 0 else 5_000 if i % 10 in (1, 2) else 200


async def populate(
    kubeconfig: str, prefix: str, namespaces: int, configmaps: int, pods: int, concurrency: int
) -> dict[str, Any]:
    api = await kubernetes_asyncio.config.new_client_from_config(config_file=kubeconfig)
    api.configuration.connection_pool_maxsize = concurrency
    async with api:
        core = kubernetes_asyncio.client.CoreV1Api(api)
        gate = asyncio.Semaphore(concurrency)
        names = [f"{prefix}-{i}" for i in range(namespaces)]

        create = functools.partial(create_retrying, gate)
        started = time.monotonic()
        await create_namespaces(create, core, names, prefix)
        namespaces_done = time.monotonic()
        noise = base64.b64encode(random.Random(7).randbytes(60_000)).decode()
        cm_work = []
        for i in range(configmaps):
            size = configmap_size(i)
            offset = i % 1000
            body = {"metadata": {"name": f"cm-{i}"}, "data": {"d": noise[offset : offset + size]}}
            cm_work.append(create(core.create_namespaced_config_map, names[i % namespaces], body))
        pod_work = []
        for i in range(pods):
            body = {
                "metadata": {"name": f"p-{i}", "labels": {"app": f"a{i % 7}"}},
                "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]},
            }
            pod_work.append(create(core.create_namespaced_pod, names[i % namespaces], body))
        work = [c for pair in itertools.zip_longest(cm_work, pod_work) for c in pair if c]
        await asyncio.gather(*work)
        done = time.monotonic()
        return {
            "namespaces_seconds": round(namespaces_done - started, 1),
            "objects_seconds": round(done - namespaces_done, 1),
            "objects_per_second": round((configmaps + pods) / (done - namespaces_done), 1),
        }


if __name__ == "__main__":
    if sys.argv[1] == "populate":
        prefix, *counts = sys.argv[3:]
        n_ns, n_cm, n_pod, conc = (int(c) for c in counts)
        result = asyncio.run(populate(sys.argv[2], prefix, n_ns, n_cm, n_pod, conc))
    else:
        result = asyncio.run(main(sys.argv[1], sys.argv[2]))
    print(json.dumps(result))
