"""What the operator benchmarks share: printing their tables, the percentile they report, a
control plane whose admin client can run many requests at once, and a timestamped watch of one
managed quota (imported from the same directory)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple

import kubernetes
from kubernetes.client.exceptions import ApiException

from dynquota.testing.controlplane import LocalControlPlane
from dynquota.testing.operator import OperatorCluster, install_operator


def report(title: str, lines: list[str]) -> None:
    """Print one table: ``== title`` then the lines, indented (flushed: long runs)."""
    print(f"\n== {title}", flush=True)
    for line in lines:
        print(f"   {line}", flush=True)


def percentile(values: list[float], p: float) -> float:
    """The ``p`` percentile (0..100) of ``values``: the value at rank ``round(p% of n-1)``."""
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(p / 100 * (len(ordered) - 1))))
    return ordered[index]


@contextmanager
def pooled_cluster(
    workdir: Path, resource_quota_sync_period: int = 10
) -> Iterator[OperatorCluster]:
    """A private control plane with the operator installed and an admin client pooling 32
    connections (the benchmarks create from up to 16 threads)."""
    with LocalControlPlane(resource_quota_sync_period=resource_quota_sync_period) as cp:
        kubeconfig = install_operator(cp, workdir)
        configuration = kubernetes.client.Configuration()
        kubernetes.config.load_kube_config(
            config_file=cp.kubeconfig, client_configuration=configuration
        )
        configuration.connection_pool_maxsize = 32
        api = kubernetes.client.ApiClient(configuration)
        try:
            yield OperatorCluster(cp, api, kubeconfig)
        finally:
            api.close()


class Seen(NamedTuple):
    """One version of a watched quota: when it arrived (epoch s), its spec.hard, status.hard
    and annotations."""

    at: float
    spec: dict[str, str]
    status: dict[str, str]
    annotations: dict[str, str]


def stored_count(text: str) -> int:
    """An object count as the apiserver stores it (``1k`` for 1000)."""
    return int(text[:-1]) * 1000 if text.endswith("k") else int(text)


class QuotaWatch:
    """Every version of one namespace's managed quota (:class:`Seen`), timestamped by a watch
    thread that resumes from the last resourceVersion (no change missed) and lists again
    after 410 Gone."""

    def __init__(self, c: OperatorCluster, ns: str) -> None:
        self.seen: list[Seen] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._c, self._ns = c, ns
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        w = kubernetes.watch.Watch()
        version: str | None = None
        while not self._stop.is_set():
            resume = {"resource_version": version} if version else {}
            try:
                for event in w.stream(
                    self._c.core.list_namespaced_resource_quota,
                    self._ns,
                    field_selector="metadata.name=dynquota",
                    timeout_seconds=5,
                    **resume,
                ):
                    obj = event["object"]
                    version = obj.metadata.resource_version
                    status = (obj.status and obj.status.hard) or {}
                    seen = Seen(
                        time.time(),
                        dict(obj.spec.hard or {}),
                        dict(status),
                        dict(obj.metadata.annotations or {}),
                    )
                    with self._lock:
                        self.seen.append(seen)
                    if self._stop.is_set():
                        break
            except ApiException as exc:
                if exc.status != 410:
                    raise
                version = None  # expired: list again

    def first_times(self, key: str, part: str = "spec") -> dict[str, float]:
        """``{value text: when first seen}`` of ``spec.hard[key]`` (``part="status"``:
        ``status.hard[key]``)."""
        times: dict[str, float] = {}
        with self._lock:
            for seen in self.seen:
                value = getattr(seen, part).get(key)
                if value is not None:
                    times.setdefault(value, seen.at)
        return times

    def versions(self) -> list[Seen]:
        """Every version seen so far, in arrival order (a copy)."""
        with self._lock:
            return list(self.seen)

    def first(self, key: str, value: int, after: float) -> float | None:
        """When spec.hard[key] was first seen equal to ``value`` after ``after`` (epoch s)."""
        with self._lock:
            for seen in self.seen:
                if seen.at >= after and key in seen.spec and stored_count(seen.spec[key]) == value:
                    return seen.at
        return None

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
