"""Harness of the admission benchmark: naive vs upstream vs dynquota conflict policies.

One scenario: K evaluator instances (each with its own accessor: informer + caches, like K
apiserver replicas) admit ``requests`` widget creates spread round-robin over ``namespaces``
namespaces, each with one quota on ``count/widgets.example.com`` whose room is
``room_percent`` of the creates it receives. Creates arrive in waves of ``wave_size`` every
``wave_interval`` seconds (1,000 in 40 waves over about 0.2 s by default: a busy burst, as
when controllers scale up), each to a namespace in turn and to an instance picked at random
(seeded), and each waits for its verdict.

Counted per scenario: status writes attempted and conflicts (from the accessors), verdicts by
kind, spurious denials (a namespace admitted fewer than ``min(room, creates)``),
over-admissions (more than ``room``), charge errors (``status.used`` at the end differs from
what was admitted), and p50/p99 latency of a verdict.
"""

from __future__ import annotations

import asyncio
import random
import statistics
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import kubernetes_asyncio
from kubernetes_asyncio.client.exceptions import ApiException

from dynquota.admission import (
    AdmissionAttributes,
    AdmissionError,
    CachingQuotaAccessor,
    ConflictPolicy,
    Evaluator,
    GroupResource,
    InMemoryQuotaAccessor,
    InMemoryQuotaServer,
    KubernetesQuotaAccessor,
    QuotaConflictError,
    QuotaForbiddenError,
    QuotaTimeoutError,
)

KEY = "count/widgets.example.com"
WIDGETS = GroupResource("example.com", "widgets")


@dataclass(frozen=True)
class Scenario:
    backend: str
    policy: ConflictPolicy
    instances: int
    room_percent: int
    look_aside: bool = True
    requests: int = 1000
    namespaces: int = 10
    wave_size: int = 25
    wave_interval: float = 0.005
    seed: int = 67761
    label: str = ""


@dataclass
class Result:
    scenario: Scenario
    writes: int = 0
    conflicts: int = 0
    live_lists: int = 0
    admitted: int = 0
    exceeded: int = 0
    denied_conflict: int = 0
    denied_timeout: int = 0
    denied_other: int = 0
    spurious: int = 0
    over_admissions: int = 0
    charge_errors: int = 0
    latencies_ms: list[float] = field(default_factory=list)
    wall_s: float = 0.0

    @property
    def p50(self) -> float:
        return statistics.median(self.latencies_ms)

    @property
    def p99(self) -> float:
        ordered = sorted(self.latencies_ms)
        return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


class Backend(Protocol):
    name: str

    def namespace_names(self, n: int) -> list[str]:
        """The ``n`` namespaces a scenario uses."""

    async def prepare(self, namespaces: list[str], room: int) -> None:
        """Fresh quota ``q`` (hard = used room, used = 0) in every namespace."""

    async def accessors(self, k: int, look_aside: bool) -> list[CachingQuotaAccessor]:
        """K started, synced accessors."""

    async def release(self, accessors: list[CachingQuotaAccessor]) -> None:
        """Stop them."""

    async def used(self, namespace: str) -> int:
        """``status.used`` of our key as stored."""


class MemoryBackend:
    """The in-memory server with apiserver-like latencies and a lagging informer."""

    name = "memory"

    def namespace_names(self, n: int) -> list[str]:
        return [f"bench-{i}" for i in range(n)]

    def __init__(
        self, write_latency: float = 0.002, list_latency: float = 0.002, informer_lag: float = 0.01
    ) -> None:
        self.write_latency = write_latency
        self.list_latency = list_latency
        self.informer_lag = informer_lag
        self.server = InMemoryQuotaServer()

    async def prepare(self, namespaces: list[str], room: int) -> None:
        self.server = InMemoryQuotaServer(
            write_latency=self.write_latency, list_latency=self.list_latency
        )
        for ns in namespaces:
            self.server.create(ns, "q", {KEY: room})

    async def accessors(self, k: int, look_aside: bool) -> list[CachingQuotaAccessor]:
        return [
            InMemoryQuotaAccessor(
                self.server, informer_lag=self.informer_lag, look_aside=look_aside
            )
            for _ in range(k)
        ]

    async def release(self, accessors: list[CachingQuotaAccessor]) -> None:
        for a in accessors:
            assert isinstance(a, InMemoryQuotaAccessor)
            a.close()

    async def used(self, namespace: str) -> int:
        return self.server.get(namespace, "q").used[KEY].ceil()


class ApiserverBackend:
    """The real kube-apiserver through KubernetesQuotaAccessor, one client per instance."""

    name = "apiserver"

    def __init__(
        self, clients: list[Any], namespaces: list[str], informer_lag: float = 0.0
    ) -> None:
        self.informer_lag = informer_lag
        self.clients = clients
        self.core = kubernetes_asyncio.client.CoreV1Api(clients[0])
        self.namespaces = namespaces

    def namespace_names(self, n: int) -> list[str]:
        assert n <= len(self.namespaces)
        return self.namespaces[:n]

    async def prepare(self, namespaces: list[str], room: int) -> None:
        await asyncio.gather(*(self._fresh_quota(ns, room) for ns in namespaces))

    async def _fresh_quota(self, ns: str, room: int) -> None:
        try:
            await self.core.delete_namespaced_resource_quota("q", ns)
        except ApiException as e:
            if e.status != 404:
                raise
        hard = {KEY: str(room)}
        await self.core.create_namespaced_resource_quota(
            ns, {"metadata": {"name": "q"}, "spec": {"hard": hard}}
        )
        for _ in range(50):  # the quota controller may write status meanwhile
            q = await self.core.read_namespaced_resource_quota("q", ns)
            body = {
                "metadata": {
                    "name": "q",
                    "namespace": ns,
                    "resourceVersion": q.metadata.resource_version,
                },
                "spec": {"hard": hard},
                "status": {"hard": hard, "used": {KEY: "0"}},
            }
            try:
                await self.core.replace_namespaced_resource_quota_status("q", ns, body)
                return
            except ApiException as e:
                if e.status != 409:
                    raise
        raise AssertionError(f"could not initialise quota q in {ns}")

    async def accessors(self, k: int, look_aside: bool) -> list[CachingQuotaAccessor]:
        made = [
            KubernetesQuotaAccessor(c, look_aside=look_aside, informer_lag=self.informer_lag)
            for c in self.clients[:k]
        ]
        await asyncio.gather(*(a.start() for a in made))
        return list(made)

    async def release(self, accessors: list[CachingQuotaAccessor]) -> None:
        for a in accessors:
            assert isinstance(a, KubernetesQuotaAccessor)
            await a.stop()

    async def used(self, namespace: str) -> int:
        q = await self.core.read_namespaced_resource_quota("q", namespace)
        return int((q.status.used or {}).get(KEY, "0"))


async def in_waves(one: Callable[[int], Awaitable[None]], s: Scenario) -> None:
    """Starts ``one(i)`` for each of the ``s.requests``, pausing ``s.wave_interval`` after
    each ``s.wave_size`` of them, and waits for all (this benchmark and
    ``admission_replicas``)."""
    tasks = []
    for i in range(s.requests):
        tasks.append(asyncio.ensure_future(one(i)))
        if (i + 1) % s.wave_size == 0 and s.wave_interval:
            await asyncio.sleep(s.wave_interval)
    await asyncio.gather(*tasks)


async def run(scenario: Scenario, backend: Backend) -> Result:
    """Run one scenario on a backend and measure it."""
    s = scenario
    namespaces = backend.namespace_names(s.namespaces)
    per_ns = s.requests // s.namespaces
    room = per_ns * s.room_percent // 100
    await backend.prepare(namespaces, room)
    accessors = await backend.accessors(s.instances, s.look_aside)
    evaluators = [Evaluator(a, policy=s.policy) for a in accessors]
    result = Result(scenario=s)
    admitted = dict.fromkeys(namespaces, 0)
    loop = asyncio.get_running_loop()

    pick = random.Random(s.seed)
    instance_of = [pick.randrange(s.instances) for _ in range(s.requests)]

    async def one(i: int) -> None:
        ns = namespaces[i % s.namespaces]
        attrs = AdmissionAttributes(namespace=ns, resource=WIDGETS, object={}, name=f"w-{i}")
        start = loop.time()
        try:
            await evaluators[instance_of[i]].evaluate(attrs)
        except QuotaForbiddenError:
            result.exceeded += 1
        except QuotaConflictError:
            result.denied_conflict += 1
        except QuotaTimeoutError:
            result.denied_timeout += 1
        except AdmissionError:
            result.denied_other += 1
        else:
            admitted[ns] += 1
            result.admitted += 1
        finally:
            result.latencies_ms.append((loop.time() - start) * 1000)

    started = time.monotonic()
    try:
        await in_waves(one, s)
    finally:
        result.wall_s = time.monotonic() - started
        for ev in evaluators:
            await ev.close()
        await backend.release(accessors)

    result.writes = sum(a.stats.status_writes for a in accessors)
    result.conflicts = sum(a.stats.conflicts for a in accessors)
    result.live_lists = sum(a.stats.live_lists for a in accessors)
    for ns in namespaces:
        result.spurious += max(0, min(room, per_ns) - admitted[ns])
        result.over_admissions += max(0, admitted[ns] - room)
        result.charge_errors += abs(await backend.used(ns) - admitted[ns])
    return result


HEADER = (
    "| backend | policy | K | room | status writes | conflicts | admitted | exceeded "
    "| spurious denials (409 / timeout / other) | over-admissions | charge errors "
    "| p50 ms | p99 ms |\n"
    "|---|---|---|---|---|---|---|---|---|---|---|---|---|"
)


def row(r: Result) -> str:
    s = r.scenario
    denied = f"{r.spurious} ({r.denied_conflict} / {r.denied_timeout} / {r.denied_other})"
    return (
        f"| {s.backend} | {s.policy.name} | {s.instances} | {s.room_percent}% | {r.writes} "
        f"| {r.conflicts} | {r.admitted} | {r.exceeded} | {denied} | {r.over_admissions} "
        f"| {r.charge_errors} | {r.p50:.0f} | {r.p99:.0f} |"
    )


LOOK_ASIDE_HEADER = (
    "| backend | policy | look-aside | status writes | conflicts | spurious denials "
    "| p50 ms | p99 ms |\n|---|---|---|---|---|---|---|---|"
)


def look_aside_row(r: Result) -> str:
    s = r.scenario
    return (
        f"| {s.backend} | {s.policy.name} | {'on' if s.look_aside else 'off'} | {r.writes} "
        f"| {r.conflicts} | {r.spurious} | {r.p50:.0f} | {r.p99:.0f} |"
    )


async def run_all(
    scenarios: list[Scenario],
    backend: Backend,
    report: Callable[[Result], Awaitable[None] | None] | None = None,
) -> list[Result]:
    """Run scenarios one after another."""
    results = []
    for s in scenarios:
        r = await run(s, backend)
        results.append(r)
        if report is not None:
            maybe = report(r)
            if maybe is not None:
                await maybe
    return results
