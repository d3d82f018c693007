"""A runaway born with its namespace ends at the maximum (issue 27, part 4), on the real
apiserver, seed-independent: 10 namespaces, each with a runaway creating pods from the moment
it exists, are created in the same second as 40 others, so the quota controller lags behind
the operator's creates. Until the quota controller copies ``spec.hard`` into ``status.hard``
creates are admitted uncharged. Before: a 15-minute soak saw pods hard 10 -> 57 -> 158 -> 201
-> 203 within 4 s against a maximum of 120, 18 patches for one namespace in 3 s."""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import kubernetes
import pytest
from kubernetes.client.exceptions import ApiException

from dynquota.testing.operator import PAUSE, OperatorCluster, OperatorThread
from dynquota.testing.quotaaudit import upstream_race_explains
from dynquota.testing.wait import wait_until

pytestmark = pytest.mark.integration

MAXIMUM = 4  # below what gets in before the quota controller enforces the quota (6-10 pods)
PROFILE = {"bufferPercent": 40, "minimum": 2, "maximum": MAXIMUM, "upscaleCooldown": "2s",
           "downscaleCooldown": "1h"}  # fmt: skip
RUNAWAYS, OTHERS = 10, 40
RUN_FOR = 25.0  # seconds each runaway keeps creating


ADMISSION_LAG = 0.5
"""Seconds after this test's watch sees ``status.hard`` during which kube-apiserver's quota
admission may still read the quota from its own informer without it (an uncharged create
started then is the apiserver's lag, not dynquota's: 1 pod in 2 of 4 loaded runs)."""


@dataclass
class Seen:
    """One namespace's managed quota as a watch saw it (client receipt times, monotonic)."""

    hards: list[int] = field(default_factory=list)
    enforced_at: float | None = None  # the first event with status.hard.pods
    writes_before: int = 0  # spec or dynquota annotations changed before enforced_at
    last: tuple[Any, ...] | None = None


@dataclass
class Runaway:
    """A runaway's creates: (request start, ok) each."""

    ns: str
    born: float = 0.0
    creates: list[tuple[float, bool]] = field(default_factory=list)


def _watch(
    c: OperatorCluster, names: set[str], seen: dict[str, Seen], stop: threading.Event, rv: str
) -> None:
    """Every event of the managed quotas from ``rv`` on (resumed from the last one seen)."""
    api = kubernetes.config.new_client_from_config(config_file=c.cp.kubeconfig)
    core = kubernetes.client.CoreV1Api(api)
    w = kubernetes.watch.Watch()
    try:
        while not stop.is_set():
            for event in w.stream(
                core.list_resource_quota_for_all_namespaces,
                field_selector="metadata.name=dynquota",
                resource_version=rv,
                timeout_seconds=3,
                _request_timeout=15,
            ):
                now = time.monotonic()
                q = event["object"]
                rv = q.metadata.resource_version
                ns = q.metadata.namespace
                if ns not in names:
                    continue
                s = seen.setdefault(ns, Seen())
                hard = int((q.spec.hard or {}).get("pods", "0"))
                s.hards.append(hard)
                notes = dict(q.metadata.annotations or {})
                notes.pop("dynquota.io/message", None)
                state = (dict(q.spec.hard or {}), notes)
                if s.enforced_at is None:
                    if "pods" in ((q.status and q.status.hard) or {}):
                        s.enforced_at = now
                    elif s.last is not None and state != s.last:
                        s.writes_before += 1
                s.last = state
                if stop.is_set():
                    break
    finally:
        w.stop()
        api.close()


def _run(c: OperatorCluster, r: Runaway, labels: dict[str, str]) -> None:
    api = kubernetes.config.new_client_from_config(config_file=c.cp.kubeconfig)
    core = kubernetes.client.CoreV1Api(api)
    try:
        core.create_namespace({"metadata": {"name": r.ns, "labels": labels}}, _request_timeout=30)
        r.born = time.monotonic()
        end = r.born + RUN_FOR
        while time.monotonic() < end:
            started = time.monotonic()
            pod = {"metadata": {"name": f"p-{uuid.uuid4().hex[:8]}"},
                   "spec": {"containers": [{"name": "c", "image": PAUSE}]}}  # fmt: skip
            try:
                core.create_namespaced_pod(r.ns, pod, _request_timeout=30)
                r.creates.append((started, True))
            except ApiException as exc:
                # refused by quota, or the ServiceAccount is not there yet: a runaway retries
                if exc.status not in (403, 409):
                    raise
                r.creates.append((started, False))
                time.sleep(0.05)  # a runaway's retry pace, not a synchronisation
    finally:
        api.close()


def test_runaways_born_with_their_namespaces_end_at_the_maximum(
    op_cluster: OperatorCluster,
    scope: dict[str, str],
    start_operator: Callable[..., OperatorThread],
) -> None:
    c = op_cluster
    c.policy("p-runaway", scope, pods=PROFILE)
    op = start_operator()
    tag = uuid.uuid4().hex[:6]
    runaways = [Runaway(f"run-{tag}-{i}") for i in range(RUNAWAYS)]
    others = [f"other-{tag}-{i}" for i in range(OTHERS)]
    names = {r.ns for r in runaways}
    seen: dict[str, Seen] = {}
    stop = threading.Event()
    rv = c.core.list_resource_quota_for_all_namespaces(
        field_selector="metadata.name=dynquota", _request_timeout=30
    ).metadata.resource_version
    watcher = threading.Thread(target=_watch, args=(c, names, seen, stop, rv), daemon=True)
    watcher.start()
    # an exact bound fails when the quota controller lowered status.used under the runaway's
    # creates (kubernetes#123434: admitted past hard): make test reruns that case only
    explained = contextlib.ExitStack()
    for r in runaways:
        explained.enter_context(upstream_race_explains(c.cp.audit_log_path, r.ns, ["pods"]))
    try:
        with ThreadPoolExecutor(RUNAWAYS + 8) as pool:
            jobs = [pool.submit(_run, c, r, scope) for r in runaways]
            jobs += [pool.submit(lambda n=n: c.core.create_namespace(
                {"metadata": {"name": n, "labels": scope}}, _request_timeout=30))
                for n in others]  # fmt: skip
            for job in jobs:
                job.result()

        def at_maximum() -> bool:
            return all((c.hard(r.ns) or {}).get("pods") == str(MAXIMUM) for r in runaways)

        wait_until(at_maximum, f"every runaway's pods hard at {MAXIMUM}", timeout=60)
        op.idle()
    finally:
        stop.set()
        watcher.join(timeout=20)
    lines = []
    with explained:
        _check(c, runaways, seen, lines)
    print("\nmeasured:\n  " + "\n  ".join(lines))


def _check(
    c: OperatorCluster, runaways: list[Runaway], seen: dict[str, Seen], lines: list[str]
) -> None:
    for r in runaways:
        s = seen[r.ns]
        assert s.enforced_at is not None, r.ns
        before = sum(1 for t, ok in r.creates if ok and t < s.enforced_at + ADMISSION_LAG)
        pods = len(c.core.list_namespaced_pod(r.ns, _request_timeout=30).items)
        lines.append(f"{r.ns}: enforced {s.enforced_at - r.born:.2f} s after its namespace, "
                     f"{before} pods admitted before, {pods} in all, hards seen "
                     f"{sorted(set(s.hards))}, writes before it {s.writes_before}")  # fmt: skip
        # never past the maximum, and ends there
        assert max(s.hards) <= MAXIMUM, lines[-1]
        assert (c.hard(r.ns) or {}).get("pods") == str(MAXIMUM)
        # after status.hard first existed nothing was admitted beyond max(before, maximum)
        assert pods <= max(before, MAXIMUM), lines[-1]
        # no write per event while unenforced (the soak's namespace had 18 in 3 s)
        assert s.writes_before <= 1, lines[-1]
