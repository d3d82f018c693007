"""The baseline of the scale benchmark: what a platform engineer would write with kopf alone.

    kopf run --standalone --all-namespaces tests/bench/kopf_baseline.py

``@kopf.on.event`` on pods and ConfigMaps (kopf delivers full objects), counting per namespace
in a dict: the uids of the pods not in a terminal phase (the quota's ``pods``) and of every
ConfigMap. No quota is written: this is the watching half only, the part whose memory and CPU
the benchmark compares with dynquota's metadata-only informers.

Every second it writes ``$KOPF_BASELINE_STATS`` (JSON): events handled, objects counted,
process RSS and CPU seconds (the benchmark reads RSS/CPU itself too, from ``/proc``).
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import kopf

PODS: defaultdict[str, set[str]] = defaultdict(set)
CONFIGMAPS: defaultdict[str, set[str]] = defaultdict(set)
EVENTS = {"pods": 0, "configmaps": 0}
TERMINAL = ("Succeeded", "Failed")


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    settings.posting.enabled = False  # no k8s Events from the framework's own logging
    settings.watching.server_timeout = 300


@kopf.on.event("", "v1", "pods")
def pod_event(event: dict[str, Any], body: kopf.Body, **_: Any) -> None:
    EVENTS["pods"] += 1
    ns, uid = body.metadata.namespace or "", body.metadata.uid or ""
    phase = (body.get("status") or {}).get("phase")
    if event["type"] == "DELETED" or phase in TERMINAL:
        PODS[ns].discard(uid)
    else:
        PODS[ns].add(uid)


@kopf.on.event("", "v1", "configmaps")
def configmap_event(event: dict[str, Any], body: kopf.Body, **_: Any) -> None:
    EVENTS["configmaps"] += 1
    ns, uid = body.metadata.namespace or "", body.metadata.uid or ""
    if event["type"] == "DELETED":
        CONFIGMAPS[ns].discard(uid)
    else:
        CONFIGMAPS[ns].add(uid)


def _rss_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def _write(path: str, stats: dict[str, float]) -> None:
    with open(f"{path}.tmp", "w") as out:
        out.write(json.dumps(stats))
    os.replace(f"{path}.tmp", path)


@kopf.daemon("", "v1", "namespaces", field="metadata.name", value="kube-system")
async def report(stopped: kopf.DaemonStopped, **_: Any) -> None:
    """Writes the stats file every second (a daemon on one object: kopf's own timer idiom)."""
    path = os.environ.get("KOPF_BASELINE_STATS")
    while path and not stopped:
        times = os.times()
        stats = {
            "t": time.time(),
            "events": sum(EVENTS.values()),
            "pods": sum(len(s) for s in PODS.values()),
            "configmaps": sum(len(s) for s in CONFIGMAPS.values()),
            "rss": _rss_bytes(),
            "cpu": times.user + times.system,
        }
        _write(path, stats)
        await asyncio.sleep(1)
