"""The uninstall cleanup at scale: `dynquota cleanup --yes` over 5,000 managed namespaces on a
private local control plane (`-m bench`, not in `make test`; `make bench-cleanup`).

Prints, per run: the time to create the bed, the cleanup's wall time, deletes per second and
failures; asserts exact counts (every managed quota deleted, every foreign quota untouched).
Runs (each on a fresh set of managed quotas in the same namespaces):

- ``qps=20``: the chart's default rate (``operator.killSwitchDeleteQPS``): the rate must hold,
  the time must be ``count / 20`` plus a little, well inside the derived deadline;
- ``qps=500``: what parallel deletes reach when the rate limit is raised
  (``cleanupOnUninstall.deleteQPS``);
- ``qps=500, concurrency=1``: the same without parallelism: one delete at a time is bound by
  the request latency.

Knobs: ``DYNQUOTA_CLEANUP_BENCH_NAMESPACES`` (default 5000), ``DYNQUOTA_CLEANUP_BENCH_RUNS``
(comma list of ``qps[:concurrency]``, default ``20,500,500:1``).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import kubernetes_asyncio
import pytest

from dynquota.kube.cleanup import deadline_for
from dynquota.testing.controlplane import LocalControlPlane

pytestmark = pytest.mark.timeout(3600)

COUNT = int(os.environ.get("DYNQUOTA_CLEANUP_BENCH_NAMESPACES", "5000"))
RUNS = os.environ.get("DYNQUOTA_CLEANUP_BENCH_RUNS", "20,500,500:1")
MANAGED = {"app.kubernetes.io/managed-by": "dynquota"}
PREFIX = "dq-bench"


def _quota(name: str, labels: dict[str, str] | None) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": labels or {}}, "spec": {"hard": {"pods": "10"}}}


async def _each(kubeconfig: str, fn: Any, parallel: int = 32) -> None:
    async with await kubernetes_asyncio.config.new_client_from_config(
        config_file=kubeconfig
    ) as api:
        core: Any = kubernetes_asyncio.client.CoreV1Api(api)
        gate = asyncio.Semaphore(parallel)

        async def one(i: int) -> None:
            async with gate:
                await fn(core, f"{PREFIX}-{i:05d}", i)

        await asyncio.gather(*(one(i) for i in range(COUNT)))


async def _make_namespace(core: Any, ns: str, i: int) -> None:
    await core.create_namespace({"metadata": {"name": ns}})
    if i % 50 == 0:  # foreign quotas: a labelled one of another name, an unlabelled dynquota
        await core.create_namespaced_resource_quota(ns, _quota("team", MANAGED))
    if i % 50 == 25:
        await core.create_namespaced_resource_quota(ns, _quota("dynquota", None))


async def _make_managed(core: Any, ns: str, i: int) -> None:
    if i % 50 != 25:
        await core.create_namespaced_resource_quota(ns, _quota("dynquota", MANAGED))


async def _census(kubeconfig: str) -> tuple[int, int, int]:
    """(managed quotas, labelled quotas named team, unlabelled quotas named dynquota)."""
    async with await kubernetes_asyncio.config.new_client_from_config(
        config_file=kubeconfig
    ) as api:
        core: Any = kubernetes_asyncio.client.CoreV1Api(api)
        managed = team = foreign = 0
        token = None
        while True:
            page = await core.list_resource_quota_for_all_namespaces(
                limit=1000, _continue=token, _request_timeout=60
            )
            for q in page.items:
                labelled = (q.metadata.labels or {}).get("app.kubernetes.io/managed-by")
                if q.metadata.name == "team":
                    team += 1
                elif labelled == "dynquota":
                    managed += 1
                else:
                    foreign += 1
            token = page.metadata._continue
            if not token:
                return managed, team, foreign


@pytest.fixture(scope="module")
def bed() -> Iterator[LocalControlPlane]:
    with LocalControlPlane() as cp:
        started = time.monotonic()
        asyncio.run(_each(cp.kubeconfig, _make_namespace))
        print(f"\ncreated {COUNT} namespaces in {time.monotonic() - started:.1f} s")
        yield cp


@pytest.mark.parametrize("run", RUNS.split(","))
def test_cleanup_at_scale(bed: LocalControlPlane, run: str) -> None:
    qps_text, _, concurrency = run.partition(":")
    qps = float(qps_text)
    managed_expected = COUNT - len(range(25, COUNT, 50))
    started = time.monotonic()
    asyncio.run(_each(bed.kubeconfig, _make_managed))
    created = time.monotonic() - started
    assert asyncio.run(_census(bed.kubeconfig)) == (
        managed_expected,
        len(range(0, COUNT, 50)),
        len(range(25, COUNT, 50)),
    )
    argv = [sys.executable, "-m", "dynquota.cli", "cleanup", "--yes", "--qps", qps_text,
            "--progress-interval", "30", "--kubeconfig", bed.kubeconfig]  # fmt: skip
    if concurrency:
        argv += ["--concurrency", concurrency]
    started = time.monotonic()
    done = subprocess.run(
        argv, capture_output=True, text=True, check=False, timeout=3 * COUNT / qps + 600
    )
    seconds = time.monotonic() - started
    lines = done.stdout.splitlines()
    print("\n".join(["", f"--- qps={run}: dynquota cleanup --yes ---", *lines, done.stderr]))
    assert done.returncode == 0, done.stderr
    progress = [line for line in lines if line.startswith("progress: ")]
    failed = int(progress[-1].rsplit(", ", 1)[1].split()[0])
    deleting = float(progress[-1].split(" in ", 1)[1].split(" s ", 1)[0])
    print(
        f"RESULT namespaces={COUNT} qps={qps:g} concurrency={concurrency or 16} "
        f"managed={managed_expected} create_quotas_s={created:.1f} command_s={seconds:.1f} "
        f"delete_phase_s={deleting:.1f} deletes_per_s={managed_expected / deleting:.1f} "
        f"failures={failed} deadline_s={deadline_for(managed_expected, qps):.0f}"
    )
    assert lines[-1] == (
        f"deleted {managed_expected} managed quotas (0 already gone, 0 replaced meanwhile and "
        "left alone)"
    )
    assert failed == 0
    assert asyncio.run(_census(bed.kubeconfig)) == (
        0,
        len(range(0, COUNT, 50)),
        len(range(25, COUNT, 50)),
    )
