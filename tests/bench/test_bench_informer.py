"""Benchmark: memory, bytes and event throughput of the metadata informers (marker ``bench``).

    make bench   # or: .venv/bin/pytest -m bench -s tests/bench/test_bench_informer.py

Populates the local control plane with ``DYNQUOTA_BENCH_CONFIGMAPS`` ConfigMaps (default
20,000; mixed sizes, 10 % ~50 KB) and ``DYNQUOTA_BENCH_PODS`` pods (default 20,000) across
``DYNQUOTA_BENCH_NAMESPACES`` namespaces (default 1,000), ``DYNQUOTA_BENCH_CONCURRENCY``
requests in flight (default 48), from a separate process while a UsageWatcher absorbs the
burst. Then, each in a fresh process: (a) dynquota's metadata tallies, (b) a full-object
store (raw dicts keyed by uid, what a kopf ``@kopf.index`` keeping bodies holds). Prints a
table and ratios; asserts only correctness (counts), never wall time.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import kubernetes_asyncio
import pytest

from dynquota.kube.informer import (
    CONFIGMAPS_WATCH,
    PODS_WATCH,
    KubeMetadataSource,
    MetadataInformer,
    UsageWatcher,
    WatchedResource,
)
from dynquota.testing.controlplane import LocalControlPlane
from dynquota.usage import ResourceTally

PROBE = Path(__file__).with_name("bench_informer_probe.py")
N_NAMESPACES = int(os.environ.get("DYNQUOTA_BENCH_NAMESPACES", "1000"))
N_CONFIGMAPS = int(os.environ.get("DYNQUOTA_BENCH_CONFIGMAPS", "20000"))
N_PODS = int(os.environ.get("DYNQUOTA_BENCH_PODS", "20000"))
CONCURRENCY = int(os.environ.get("DYNQUOTA_BENCH_CONCURRENCY", "48"))


def probe(*args: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, str(PROBE), *args], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def kib(n: float) -> str:
    return f"{n / 1024:,.0f} KiB"


@pytest.mark.timeout(7200)
async def test_bench_informer(
    controlplane: LocalControlPlane, async_api_client: kubernetes_asyncio.client.ApiClient
) -> None:
    prefix = f"bench-{uuid.uuid4().hex[:6]}"
    watcher = UsageWatcher.for_cluster(async_api_client, watch_timeout=60)
    async with watcher:
        await watcher.wait_synced(timeout=120)
        before = {r: len(i.tally) for r, i in watcher.informers.items()}
        events_before = sum(i.events for i in watcher.informers.values())

        # -- burst: created by another process while the watcher absorbs it --------------
        started = time.monotonic()
        populate = await asyncio.to_thread(
            probe,
            "populate",
            controlplane.kubeconfig,
            prefix,
            str(N_NAMESPACES),
            str(N_CONFIGMAPS),
            str(N_PODS),
            str(CONCURRENCY),
        )
        created_at = time.monotonic()
        ours = [f"{prefix}-{i}" for i in range(N_NAMESPACES)]

        def counted() -> tuple[int, int]:
            return (
                sum(watcher.usage(ns, "configmaps") for ns in ours),
                sum(watcher.usage(ns, "pods") for ns in ours),
            )

        deadline = time.monotonic() + 600
        # each namespace also gets kube-root-ca.crt from the root-ca publisher
        while counted() != (N_CONFIGMAPS + N_NAMESPACES, N_PODS):
            assert time.monotonic() < deadline, counted()
            await asyncio.sleep(0.05)
        caught_up = time.monotonic()
        burst_events = sum(i.events for i in watcher.informers.values()) - events_before
        live = {
            "events": burst_events,
            "burst_seconds": round(created_at - started, 1),
            "lag_after_last_create_s": round(caught_up - created_at, 2),
            "events_per_s": round(burst_events / (caught_up - started), 1),
        }
        assert {r: len(i.tally) for r, i in watcher.informers.items()} == {
            "pods": before["pods"] + N_PODS,
            "configmaps": before["configmaps"] + N_CONFIGMAPS + N_NAMESPACES,
        }

    # -- CPU-bound absorption: decode + tally of real metadata events, no network -------
    lines: dict[str, list[bytes]] = {}
    for watched in (PODS_WATCH, CONFIGMAPS_WATCH):
        source = KubeMetadataSource(async_api_client, watched)
        found = lines[watched.resource] = []
        token = None
        while True:
            page = await source.list_page(500, token)
            found.extend(
                json.dumps({"type": "ADDED", "object": item}).encode() + b"\n"
                for item in page.items
            )
            token = page.continue_token
            if not token:
                break
    replayed = 0
    replay_bytes = 0
    t0 = time.perf_counter()
    for watched in (PODS_WATCH, CONFIGMAPS_WATCH):
        informer = MetadataInformer(NoSource(watched), ResourceTally(watched.resource))
        for line in lines[watched.resource]:
            informer._handle(json.loads(line))
        replayed += informer.events
        replay_bytes += sum(len(line) for line in lines[watched.resource])
    cpu_seconds = time.perf_counter() - t0
    avg_line = replay_bytes / replayed

    # -- memory and bytes: fresh processes ---------------------------------------------
    metadata = await asyncio.to_thread(probe, "metadata", controlplane.kubeconfig)
    full = await asyncio.to_thread(probe, "full", controlplane.kubeconfig)
    assert metadata["objects"] == full["objects"]

    objects = metadata["objects"]
    rows = [
        ("objects held", f"{objects:,}", f"{full['objects']:,}", ""),
        (
            "retained (tracemalloc)",
            kib(metadata["retained_bytes"]),
            kib(full["retained_bytes"]),
            f"{full['retained_bytes'] / metadata['retained_bytes']:.1f}x",
        ),
        (
            "retained per object",
            f"{metadata['retained_bytes'] / objects:,.0f} B",
            f"{full['retained_bytes'] / objects:,.0f} B",
            "",
        ),
        (
            "tally structures (deep sizeof)",
            kib(metadata["tally_structure_bytes"]),
            "",
            f"{metadata['tally_structure_bytes'] / objects:,.0f} B/object",
        ),
        (
            "tracemalloc peak",
            kib(metadata["peak_bytes"]),
            kib(full["peak_bytes"]),
            f"{full['peak_bytes'] / metadata['peak_bytes']:.1f}x",
        ),
        (
            "RSS delta",
            kib(metadata["rss_delta_bytes"]),
            kib(full["rss_delta_bytes"]),
            f"{full['rss_delta_bytes'] / max(1, metadata['rss_delta_bytes']):.1f}x",
        ),
        (
            "initial list, JSON bytes",
            kib(metadata["list_bytes"]),
            kib(full["list_bytes"]),
            f"{full['list_bytes'] / metadata['list_bytes']:.1f}x",
        ),
        (
            "initial list, gzip-1 estimate",
            kib(metadata["list_gzip_estimate_bytes"]),
            kib(full["list_gzip_estimate_bytes"]),
            f"{full['list_gzip_estimate_bytes'] / metadata['list_gzip_estimate_bytes']:.1f}x",
        ),
        ("list+decode seconds", str(metadata["seconds"]), str(full["seconds"]), ""),
    ]
    print()
    print(
        f"informer benchmark: {N_CONFIGMAPS:,} ConfigMaps + {N_PODS:,} pods in "
        f"{N_NAMESPACES:,} namespaces (+ cluster objects)"
    )
    print(f"{'':32}{'metadata tallies':>20}{'full objects':>20}{'full/meta':>12}")
    for name, a, b, ratio in rows:
        print(f"{name:32}{a:>20}{b:>20}{ratio:>12}")
    print(f"populate: {populate}")
    print(f"live burst absorbed by the watcher: {live}")
    print(
        f"decode+tally, CPU only: {replayed:,} events in {cpu_seconds:.2f} s = "
        f"{replayed / cpu_seconds:,.0f} events/s (avg event line {avg_line:,.0f} B)"
    )
    assert metadata["tally_structure_bytes"] / objects <= 300
    assert full["retained_bytes"] >= 10 * metadata["retained_bytes"]


class NoSource:
    """Only carries ``watched`` for the CPU-bound replay; never lists or watches."""

    def __init__(self, watched: WatchedResource) -> None:
        self.watched = watched

    async def list_page(self, limit: int, continue_token: str | None) -> Any:
        raise NotImplementedError

    def watch(self, resource_version: str, timeout_seconds: int) -> Any:
        raise NotImplementedError
