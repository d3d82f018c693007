"""The admission benchmark's real baseline: K kube-apiserver replicas on one etcd.

kube-apiserver's own ResourceQuota admission (v1.37.2, the cached control plane binaries)
under the admission benchmark's workload: ``requests`` ConfigMap creates over ``namespaces``
fresh namespaces, each with one ``count/configmaps`` quota whose room is ``room_percent`` of
the creates it receives, in waves of ``wave_size`` every ``wave_interval`` seconds, each
create sent to a replica picked at random (seeded per run). The replicas are the control
plane's kube-apiserver command line started again on other ``--secure-port`` values, each
with its own audit log (Metadata level, only ``resourcequotas/status`` writes), from which
the quota status writes of the admission plugin (user ``system:apiserver``) and their 409s
are counted.

Columns as :mod:`admission_bench` (``Result``): status writes, conflicts, admitted, exceeded,
spurious denials (409 / timeout / other), over-admissions, charge errors (``status.used``
read right after the run minus the creates admitted), p50/p99 latency of an answer.
"""

from __future__ import annotations

import asyncio
import random
import statistics
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kubernetes_asyncio
import yaml
from admission_bench import Result, Scenario, in_waves
from kubernetes_asyncio.client.exceptions import ApiException

from dynquota.admission import UPSTREAM
from dynquota.testing import processes
from dynquota.testing.audit import AuditLog
from dynquota.testing.components import apiserver_args, audit_args
from dynquota.testing.controlplane import LocalControlPlane

COUNT_KEY = "count/configmaps"

STATUS_AUDIT_POLICY: dict[str, object] = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived"],
    "rules": [
        {
            "level": "Metadata",
            "resources": [{"group": "", "resources": ["resourcequotas/status"]}],
            "verbs": ["update", "patch"],
        },
        {"level": "None"},
    ],
}


@dataclass
class Replica:
    """One extra kube-apiserver on the control plane's etcd."""

    port: int
    proc: Any
    audit: AuditLog
    client: Any = None  # kubernetes_asyncio ApiClient


class Replicas:
    """Start, address and stop ``count`` extra kube-apiservers (same flags, own port and
    audit log) on ``cp``'s etcd and certificates."""

    def __init__(self, cp: LocalControlPlane, count: int) -> None:
        self.cp = cp
        self.count = count
        self.replicas: list[Replica] = []

    async def start(self, ready_timeout: float = 120.0) -> list[Replica]:
        cp = self.cp
        assert cp.workdir is not None
        assert cp.bin_dir is not None
        base = cp.workdir / "replicas"
        base.mkdir(exist_ok=True)
        policy = base / "audit-policy.yaml"
        policy.write_text(yaml.safe_dump(STATUS_AUDIT_POLICY))
        for i in range(self.count):
            port = processes.free_port()
            audit_path = base / f"audit-{i}.log"
            argv = [
                str(cp.bin_dir / "kube-apiserver"),
                *apiserver_args(
                    cp.etcd_url, port, cp.workdir / "pki", audit_args(policy, audit_path)
                ),
            ]
            with (base / f"kube-apiserver-{i}.log").open("wb") as log:
                proc = processes.spawn(argv, log)  # the child keeps its own descriptor
            self.replicas.append(Replica(port, proc, AuditLog(audit_path)))
        for r in self.replicas:
            r.client = await self._client(r.port)
        deadline = time.monotonic() + ready_timeout
        for r in self.replicas:
            await self._wait_ready(r, deadline)
        return self.replicas

    async def _client(self, port: int) -> Any:
        client = await kubernetes_asyncio.config.new_client_from_config(
            config_file=self.cp.kubeconfig
        )
        client.configuration.host = f"https://127.0.0.1:{port}"
        return client

    async def _wait_ready(self, r: Replica, deadline: float) -> None:
        core = kubernetes_asyncio.client.CoreV1Api(r.client)
        while True:
            if r.proc.poll() is not None:
                raise RuntimeError(f"kube-apiserver replica on port {r.port} exited")
            try:
                await core.list_namespace(limit=1, _request_timeout=5)
                return
            except Exception:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.5)

    async def stop(self) -> None:
        for r in self.replicas:
            if r.client is not None:
                await r.client.close()
            processes.stop(r.proc)
        self.replicas.clear()


async def _fresh_namespaces(core: Any, n: int, room: int) -> list[str]:
    """``n`` new namespaces, each with quota ``q`` on ``count/configmaps`` allowing ``room``
    creates beyond the ConfigMaps already there (``kube-root-ca.crt``), its status synced by
    the quota controller before the run starts."""
    suffix = uuid.uuid4().hex[:6]
    names = [f"rb-{i}-{suffix}" for i in range(n)]

    async def one(ns: str) -> None:
        await core.create_namespace({"metadata": {"name": ns}})
        for _ in range(300):  # the root CA publisher adds kube-root-ca.crt
            if (await core.list_namespaced_config_map(ns)).items:
                break
            await asyncio.sleep(0.05)
        base = len((await core.list_namespaced_config_map(ns)).items)
        hard = {COUNT_KEY: str(base + room)}
        await core.create_namespaced_resource_quota(
            ns, {"metadata": {"name": "q"}, "spec": {"hard": hard}}
        )
        for _ in range(600):  # until the quota controller has written status
            q = await core.read_namespaced_resource_quota("q", ns)
            used = (q.status.used or {}) if q.status else {}
            if used.get(COUNT_KEY) == str(base):
                return
            await asyncio.sleep(0.05)
        raise AssertionError(f"quota q in {ns} never got status.used")

    await asyncio.gather(*(one(ns) for ns in names))
    return names


async def run_replicas(
    scenario: Scenario, replicas: Sequence[Replica], admin: Any, run_index: int
) -> Result:
    """One run of the workload on the first ``scenario.instances`` replicas."""
    s = scenario
    use = list(replicas[: s.instances])
    core_admin = kubernetes_asyncio.client.CoreV1Api(admin)
    per_ns = s.requests // s.namespaces
    room = per_ns * s.room_percent // 100
    namespaces = await _fresh_namespaces(core_admin, s.namespaces, room)
    base = {ns: 1 for ns in namespaces}  # kube-root-ca.crt
    for r in use:
        r.audit.read_new()  # skip what came before
    cores = [kubernetes_asyncio.client.CoreV1Api(r.client) for r in use]
    result = Result(scenario=s)
    admitted = dict.fromkeys(namespaces, 0)
    loop = asyncio.get_running_loop()
    pick = random.Random(s.seed + run_index)
    replica_of = [pick.randrange(len(use)) for _ in range(s.requests)]

    async def one(i: int) -> None:
        ns = namespaces[i % s.namespaces]
        body = {"metadata": {"name": f"cm-{i}"}, "data": {"i": str(i)}}
        start = loop.time()
        try:
            await cores[replica_of[i]].create_namespaced_config_map(ns, body)
        except ApiException as e:
            if e.status == 403:
                result.exceeded += 1
            elif e.status == 409:
                result.denied_conflict += 1
            elif e.status in (500, 504) and "timed out" in str(e.body):
                result.denied_timeout += 1
            else:
                result.denied_other += 1
        else:
            admitted[ns] += 1
            result.admitted += 1
        finally:
            result.latencies_ms.append((loop.time() - start) * 1000)

    started = time.monotonic()
    await in_waves(one, s)
    result.wall_s = time.monotonic() - started

    for ns in namespaces:
        q = await core_admin.read_namespaced_resource_quota("q", ns)
        used = int((q.status.used or {}).get(COUNT_KEY, "0")) - base[ns]
        result.spurious += max(0, min(room, per_ns) - admitted[ns])
        result.over_admissions += max(0, admitted[ns] - room)
        result.charge_errors += abs(used - admitted[ns])
    await asyncio.sleep(1.0)  # blocking audit mode: written as each request completes
    mine = set(namespaces)
    for r in use:
        for rec in r.audit.read_new():
            if (
                rec.resource == "resourcequotas"
                and rec.subresource == "status"
                and rec.user == "system:apiserver"
                and rec.namespace in mine
            ):
                result.writes += 1
                result.conflicts += rec.code == 409
    await asyncio.gather(*(core_admin.delete_namespace(ns) for ns in namespaces))
    return result


def replica_scenario(k: int, room: int) -> Scenario:
    """The workload of the admission bench, labelled as real replicas."""
    return Scenario(backend="kube-apiserver x K", policy=UPSTREAM, instances=k, room_percent=room)


def distribution(values: Sequence[float]) -> str:
    """``median [min-max] (v1, v2, ...)`` of a per-run count."""
    ordered = sorted(values)
    runs = ", ".join(f"{v:g}" for v in values)
    return f"{statistics.median(ordered):g} [{ordered[0]:g}-{ordered[-1]:g}] ({runs})"


DIST_HEADER = (
    "| backend | policy | K | room | runs | status writes | conflicts | admitted "
    "| spurious denials | of which 409 | over-admissions | charge errors | p50 ms | p99 ms |\n"
    "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
)


def dist_row(label: str, policy: str, results: Sequence[Result]) -> str:
    """One line summarising runs of one configuration: each count as
    ``median [min-max] (per run)``."""
    s = results[0].scenario

    def d(attr: str) -> str:
        return distribution([float(getattr(r, attr)) for r in results])

    p50 = distribution([round(r.p50) for r in results])
    p99 = distribution([round(r.p99) for r in results])
    return (
        f"| {label} | {policy} | {s.instances} | {s.room_percent}% | {len(results)} "
        f"| {d('writes')} | {d('conflicts')} | {d('admitted')} | {d('spurious')} "
        f"| {d('denied_conflict')} | {d('over_admissions')} | {d('charge_errors')} "
        f"| {p50} | {p99} |"
    )


def write_report(path: Path, text: str) -> None:
    """Keep the printed tables in a file too (``-s`` output is easy to lose)."""
    path.write_text(text)
