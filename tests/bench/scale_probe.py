"""Helper processes of the scale benchmark (tests/bench/test_scale_bench.py).

    python tests/bench/scale_probe.py operator KUBECONFIG STATS REACTION_NS
    python tests/bench/scale_probe.py populate KUBECONFIG PREFIX NAMESPACES PODS CMS NODE CONC

``operator``: dynquota's operator (``dynquota.operator.runtime.run``, production defaults:
coalescing 0.1 s, 4 workers), as its own process so its RSS and CPU are its own. Every second
it writes STATS (JSON): RSS, CPU seconds, watch events received, objects held, informers
synced, decisions, the CPU seconds spent inside them (each reconcile's own steps on the
event loop's thread, :func:`cpu_timed`), quota writes, and the reaction samples of
REACTION_NS: seconds from the tally change an event caused (the informer's ``on_change``) to
the quota patch being sent, and where that time went (a GET of the quota on the path or not;
the rest).

``populate``: NAMESPACES namespaces PREFIX-i, then PODS pods bound to NODE (``spec.nodeName``:
no scheduler, no kubelet; they stay Pending and count) and CONFIGMAPS small ConfigMaps,
round-robin, at most CONC requests in flight. Prints one JSON line with timings.
"""

from __future__ import annotations

import asyncio
import cProfile
import functools
import gc
import json
import os
import sys
import time
import types
import uuid
from collections.abc import Coroutine, Generator, Iterator
from typing import Any

import kubernetes_asyncio
from bench_informer_probe import create_namespaces, create_retrying, rss_bytes  # same directory
from prometheus_client import Counter, generate_latest

from dynquota._k8s.workqueue import Outcome
from dynquota.operator.runtime import Runtime, run
from dynquota.settings import Settings

SCRAPE_SECONDS = float(os.environ.get("DYNQUOTA_SCALE_SCRAPE_SECONDS", "15"))
"""Seconds between two scrapes of the operator's metrics (Prometheus' default interval is 60 s,
the chart's ServiceMonitor says 30 s: 15 s is a busy scraper)."""


def _total(counter: Counter) -> float:
    """Sum of a counter's ``_total`` samples over all label values (one family collected, not
    the registry: the probe's own CPU is counted as the operator's)."""
    return sum(
        sample.value
        for family in counter.collect()
        for sample in family.samples
        if sample.name.endswith("_total")
    )


@types.coroutine
def cpu_timed(
    coro: Coroutine[Any, Any, Outcome], spent: list[float]
) -> Generator[Any, Any, Outcome]:
    """Drive ``coro`` as the task would, adding the CPU time of the event loop's thread spent in
    each of its steps to ``spent[0]`` (seconds): what one decision costs, without the other
    tasks that run while it awaits the apiserver."""
    value: Any = None
    error: BaseException | None = None
    while True:
        started = time.thread_time()
        try:
            yielded = coro.send(value) if error is None else coro.throw(error)
        except StopIteration as stop:
            spent[0] += time.thread_time() - started
            result: Outcome = stop.value
            return result
        except BaseException:
            spent[0] += time.thread_time() - started
            raise
        spent[0] += time.thread_time() - started
        try:
            value, error = (yield yielded), None
        except BaseException as exc:  # cancellation, the reconcile's own timeout
            value, error = None, exc


def time_decisions(runtime: Runtime, spent: list[float]) -> None:
    """Add the CPU seconds of every reconcile (:func:`cpu_timed`) to ``spent[0]``."""
    reconciler = runtime.operator.reconciler
    reconcile = reconciler.reconcile

    async def timed(namespace: str) -> Outcome:
        return await cpu_timed(reconcile(namespace), spent)

    reconciler.reconcile = timed  # type: ignore[method-assign]


def time_phases(runtime: Runtime, buckets: dict[str, float]) -> None:
    """Add the loop thread's CPU seconds spent in each named step of a decision to
    ``buckets`` (``DYNQUOTA_SCALE_PHASES=1``: where the decision's CPU goes, unprofiled; the
    wrappers cost about a microsecond each)."""
    from dynquota.kube import quotas as quotas_module
    from dynquota.operator import reconcile as reconcile_module
    from dynquota.operator.ports import NamespaceView

    reconciler: Any = runtime.operator.reconciler

    def sync(owner: Any, name: str, label: str) -> None:
        original = getattr(owner, name)
        buckets.setdefault(label, 0.0)

        def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.thread_time()
            try:
                return original(*args, **kwargs)
            finally:
                buckets[label] += time.thread_time() - started

        setattr(owner, name, timed)

    def coroutine(owner: Any, name: str, label: str) -> None:
        original = getattr(owner, name)
        buckets.setdefault(label, 0.0)

        async def timed(*args: Any, **kwargs: Any) -> Any:
            spent = [0.0]
            try:
                return await cpu_timed(original(*args, **kwargs), spent)
            finally:
                buckets[label] += spent[0]

        setattr(owner, name, timed)

    for name in ("decide_namespace", "observe", "apply_decision"):
        sync(reconcile_module, name, name)
    sync(NamespaceView, "observe_trend", "observe_trend")
    # how often a decision's inputs repeat the namespace's last ones (a memo's hit rate)
    last: dict[str, Any] = {}
    timed_decide = reconcile_module.decide_namespace
    buckets.setdefault("repeats", 0.0)

    def decide_namespace(
        namespace: str, governance: Any, observed: Any, quota: Any, **kw: Any
    ) -> Any:
        replica = kw.get("replica")
        inputs = (
            governance,
            dict(observed.usage),
            quota,
            kw.get("kill_switch"),
            int(kw["now"]),
            dict(replica.peak) if replica is not None else None,
            kw.get("current").resource_version if kw.get("current") is not None else None,
        )
        if last.get(namespace) == inputs:
            buckets["repeats"] += 1e-3  # printed per decision in ms: the hit rate
        last[namespace] = inputs
        return timed_decide(namespace, governance, observed, quota, **kw)

    reconcile_module.decide_namespace = decide_namespace  # type: ignore[assignment]
    sync(quotas_module.QuotaSnapshot, "used_counts", "used_counts")
    sync(quotas_module.QuotaSnapshot, "uncharged", "uncharged")
    sync(reconciler.reporter, "report_usage", "report_usage")
    sync(reconciler.reporter, "view", "view")
    coroutine(reconciler.reporter, "report_decision", "report_decision")
    coroutine(reconciler.companions, "missing_defaults", "missing_defaults")
    coroutine(reconciler.writer, "apply", "writer.apply")
    sync(reconciler.budgets, "shape", "budgets.shape")
    sync(reconciler.budgets, "budgeted", "budgets.budgeted")
    for name in ("tally", "governance", "current", "watched", "read_status_used"):
        sync(reconciler.cluster, name, f"cluster.{name}")
    sync(type(reconciler.cluster.peaks), "observe", "peaks.observe")
    sync(type(reconciler.cluster.peaks), "peak", "peaks.peak")
    sync(reconciler.stall, "observe_usage", "stall.observe_usage")
    coroutine(reconciler, "_reconcile", "_reconcile")
    for name in ("_next_look", "_phantom", "_uncounted_since", "_quota_for_decision", "_decide"):
        sync(reconciler, name, name)


def instrument(
    runtime: Runtime, reaction_ns: str, reactions: list[float], phases: list[list[float]]
) -> None:
    """Time each crossing in ``reaction_ns`` from its first signal to the patch it causes.

    The signal is whichever reaches the operator first: the pod's tally change (its metadata
    watch) or the quota's ``status.used`` going up (admission's charge, seen by the quota
    watch); under churn the busy pod watch often lags the quota watch. A signal counts only
    if it shows more pods than the last patch saw, so the late twin of a crossing already
    answered does not start the next sample's clock.
    """
    pending: dict[str, float] = {}
    seen = {"patched": -1, "status_used": 0}  # pods: at the last patch; the last status.used
    pods_informer = runtime.watcher.informers.get("pods")

    def pods_now(status_used: int = 0) -> int:
        tally = runtime.watcher.usage(reaction_ns, "pods") if pods_informer else 0
        return max(tally, status_used)

    def signal(count: int) -> None:
        if count > seen["patched"]:
            pending.setdefault(reaction_ns, time.perf_counter())

    for informer in runtime.watcher.informers.values():
        original = informer.on_change
        if original is None:
            continue

        def on_change(namespace: str, resource: str, original: Any = original) -> None:
            if namespace == reaction_ns and resource == "pods":
                signal(pods_now())
            original(namespace, resource)

        informer.on_change = on_change
    operator_ = runtime.operator
    on_quota = operator_.on_quota

    def timed_on_quota(event_type: str | None, obj: Any) -> None:
        meta = obj.get("metadata") or {}
        if meta.get("namespace") == reaction_ns:
            used = ((obj.get("status") or {}).get("used") or {}).get("pods")
            if used is not None and used.isdigit():
                seen["status_used"] = int(used)
                signal(int(used))
        on_quota(event_type, obj)

    operator_.on_quota = timed_on_quota  # type: ignore[method-assign]
    quotas: Any = operator_.quotas
    patch, get = quotas.patch, quotas.get
    got: dict[str, float] = {}  # the reaction namespace's last GET: its start and end

    async def timed_get(namespace: str) -> Any:
        if namespace != reaction_ns:
            return await get(namespace)
        got["start"] = time.perf_counter()
        try:
            return await get(namespace)
        finally:
            got["end"] = time.perf_counter()

    async def timed_patch(namespace: str, body: Any, *args: Any, **kwargs: Any) -> Any:
        if namespace == reaction_ns:
            started = pending.pop(namespace, None)
            if started is not None:
                now = time.perf_counter()
                reactions.append(now - started)
                # where the time went: the GET of the quota, if one was made after the signal
                # (a quiet namespace decides from the watched quota: none), and the rest
                begin = got.get("start", 0.0)
                get_seconds = got["end"] - begin if begin >= started else 0.0
                phases.append([get_seconds, now - started - get_seconds])
            seen["patched"] = pods_now(seen["status_used"])
        return await patch(namespace, body, *args, **kwargs)

    quotas.get, quotas.patch = timed_get, timed_patch


def write_stats(path: str, stats: dict[str, Any]) -> None:
    with open(f"{path}.tmp", "w") as out:
        out.write(json.dumps(stats))
    os.replace(f"{path}.tmp", path)


async def operator(kubeconfig: str, stats_path: str, reaction_ns: str) -> None:
    settings = Settings(
        kubeconfig=kubeconfig,
        namespace="dynquota-system",
        metrics_port=0,
        probe_port=0,
        pod_name=f"bench-{uuid.uuid4().hex[:6]}",
    )
    reactions: list[float] = []
    phases: list[list[float]] = []
    holder: list[Runtime] = []
    decision_cpu = [0.0]
    decision_phases: dict[str, float] = {}
    gc_cpu = [0.0, 0.0]  # seconds of the loop thread's CPU in the cyclic GC; a start mark
    scrapes = [0.0, 0.0]  # scrapes made, the loop thread's CPU seconds in them

    def on_gc(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            gc_cpu[1] = time.thread_time()
        else:
            gc_cpu[0] += time.thread_time() - gc_cpu[1]

    gc.callbacks.append(on_gc)

    def got(runtime: Runtime) -> None:
        holder.append(runtime)
        instrument(runtime, reaction_ns, reactions, phases)
        if os.environ.get("DYNQUOTA_SCALE_PHASES"):
            time_phases(runtime, decision_phases)
        time_decisions(runtime, decision_cpu)

    stop = asyncio.Event()

    async def report() -> None:
        while True:
            await asyncio.sleep(1)
            if not holder:
                continue
            runtime = holder[0]
            informers = runtime.watcher.stats()
            times = os.times()
            stats = {
                "t": time.time(),
                "rss": rss_bytes(),
                "cpu": times.user + times.system,
                "events": sum(s["events"] for s in informers.values()),
                "objects": sum(s["objects"] for s in informers.values()),
                "synced": all(s["synced"] for s in informers.values()),
                "ready": runtime.ready.is_set(),
                "decisions": _total(runtime.metrics.reconciles),
                "decision_cpu": decision_cpu[0],
                "scrapes": scrapes[0],
                "scrape_cpu": scrapes[1],
                "decision_phases": decision_phases,
                "gc_cpu": gc_cpu[0],
                "gc_counts": gc.get_count(),
                "gc_tracked": len(gc.get_objects())
                if os.environ.get("DYNQUOTA_SCALE_GC_COUNT")
                else -1,
                "writes": _total(runtime.metrics.quota_writes),
                "reactions": reactions,
                "phases": phases,
            }
            write_stats(stats_path, stats)

    profile_path = os.environ.get("DYNQUOTA_SCALE_PROFILE")  # a cProfile dump, every 10 s
    background: list[asyncio.Task[None]] = []  # held: a task nobody holds may be collected
    if profile_path:
        profiler = cProfile.Profile(time.thread_time)  # CPU, not wall: the machine is shared
        profiler.enable()

        async def dump() -> None:
            while True:
                await asyncio.sleep(10)
                profiler.dump_stats(profile_path)  # (it stops the profiler: start it again)
                profiler.enable()

        background.append(asyncio.create_task(dump()))

    async def scrape() -> None:
        """A Prometheus scrape every SCRAPE seconds, as the ``/metrics`` handler serves it (on
        the event loop): the per-key series a decision defers are set then (its CPU is the
        operator's, counted per 1,000 events, not per decision)."""
        while True:
            await asyncio.sleep(SCRAPE_SECONDS)
            if holder:
                started = time.thread_time()
                generate_latest(holder[0].metrics.registry)
                scrapes[0] += 1
                scrapes[1] += time.thread_time() - started

    background.append(asyncio.create_task(scrape()))
    reporter = asyncio.create_task(report())
    try:
        await run(settings, stop_flag=stop, on_runtime=got)
    finally:
        reporter.cancel()


async def populate(
    kubeconfig: str, prefix: str, namespaces: int, pods: int, configmaps: int, node: str, conc: int
) -> dict[str, Any]:
    api = await kubernetes_asyncio.config.new_client_from_config(config_file=kubeconfig)
    api.configuration.connection_pool_maxsize = conc
    async with api:
        core = kubernetes_asyncio.client.CoreV1Api(api)
        gate = asyncio.Semaphore(conc)
        names = [f"{prefix}-{i}" for i in range(namespaces)]

        create = functools.partial(create_retrying, gate)
        started = time.monotonic()
        await create_namespaces(create, core, names, prefix)
        namespaces_done = time.monotonic()

        def objects() -> Iterator[Coroutine[Any, Any, None]]:
            for i in range(max(pods, configmaps)):
                ns = names[i % namespaces]
                if i < pods:
                    body = {
                        "metadata": {"name": f"p-{i}", "labels": {"app": f"a{i % 7}"}},
                        "spec": {
                            "nodeName": node,
                            "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}],
                        },
                    }
                    yield create(core.create_namespaced_pod, ns, body)
                if i < configmaps:
                    body = {"metadata": {"name": f"cm-{i}"}, "data": {"k": f"value-{i}"}}
                    yield create(core.create_namespaced_config_map, ns, body)

        # bounded in-flight set: never 150,000 coroutines at once
        running: set[asyncio.Task[None]] = set()
        for work in objects():
            running.add(asyncio.ensure_future(work))
            if len(running) >= conc * 4:
                done, running = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    task.result()
        for task in asyncio.as_completed(running):
            await task
        done_at = time.monotonic()
        return {
            "namespaces_seconds": round(namespaces_done - started, 1),
            "objects_seconds": round(done_at - namespaces_done, 1),
            "objects_per_second": round((pods + configmaps) / (done_at - namespaces_done), 1),
        }


if __name__ == "__main__":
    if sys.argv[1] == "operator":
        asyncio.run(operator(*sys.argv[2:5]))
    else:
        kube, prefix, n_ns, n_pods, n_cms, node, conc = sys.argv[2:9]
        result = asyncio.run(
            populate(kube, prefix, int(n_ns), int(n_pods), int(n_cms), node, int(conc))
        )
        print(json.dumps(result))
