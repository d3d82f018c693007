"""The write-rate governor on the APF benchmark's bed, measured (issue 32, "Done means").

``make bench-apf-governor`` (not in ``make test``). The bed of ``test_apf_bench.py``
(``apf_bed.py``: components with their own identities; here with one KWOK node, so the
scheduler and a kubelet act too, and kube-apiserver's request log at ``--v=3``), the chart's
tarpit objects and the operator's rights on them (``writeRate.enabled``, release
``dynquota``), and the operator in this process as the chart's ServiceAccount. One policy
governs the churn and the quiet namespaces: ConfigMaps never refused by the quota (minimum
5000), ``writeRate`` of ``DYNQUOTA_APF_GOV_LIMIT`` (150) writes in ``WINDOW`` (5 s), quiet
period ``QUIET`` (10 s).

Two runs of ``DYNQUOTA_APF_GOV_SECONDS`` (30) s each, the churner (32 workers, honouring
``Retry-After`` like client-go) in ``apf-churn`` and the quiet client (5 creates/s) in
``apf-quiet`` under one ServiceAccount, a Deployment of 5 replicas created in ``apf-churn``
5 s into the run (kube-controller-manager's and the scheduler's writes in the held
namespace):

- **governor off** (the operator runs without ``DYNQUOTA_TARPIT_FLOW_SCHEMA``);
- **governor on**: the time from the churn's start until the FlowSchema lists ``apf-churn``
  (engage, target <= 10 s) and from the churn's end until it lists nothing (release, target
  <= quiet period + 10 s), polled as admin every 0.1 s.

Per run: the churner's successful writes/s and 429s, the quiet client's p50/p99 (ms) and
429s, the APF counters of the tarpit and ``service-accounts``, and from the request log which
clients the tarpit matched (never kube-controller-manager, the scheduler, KWOK's kubelet and
its Leases, nor dynquota). The table is printed and written to ``$DYNQUOTA_APF_GOV_REPORT``
(default ``/tmp/dynquota-apf-governor-bench.md``).
"""

from __future__ import annotations

import os
import threading
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import kubernetes
import pytest
from apf_bed import CHURN_NS, QUIET_NS, Bed, apf_bed, describe, load_average, tarpit_counts
from figures import percentile, report  # same directory

from dynquota.policy.churn import tarpitted
from dynquota.testing.apf import request_flows
from dynquota.testing.apfload import ChurnResult, QuietResult, run_churn, run_quiet
from dynquota.testing.chart import helm_template
from dynquota.testing.operator import (
    OPERATOR_NS,
    OperatorCluster,
    OperatorThread,
    install_operator,
    operator_settings,
)
from dynquota.testing.wait import wait_until

pytestmark = [pytest.mark.bench, pytest.mark.timeout(1800)]

SECONDS = float(os.environ.get("DYNQUOTA_APF_GOV_SECONDS", "30"))
LIMIT = int(os.environ.get("DYNQUOTA_APF_GOV_LIMIT", "150"))
WINDOW, QUIET = 5, 10  # seconds
WORKERS, QUIET_RATE = 32, 5.0
REPORT = os.environ.get("DYNQUOTA_APF_GOV_REPORT", "/tmp/dynquota-apf-governor-bench.md")
SCHEMA = "dynquota-tarpit"
LABEL = {"dq-bench": "apf-governor"}
SYSTEM_CLIENTS = ("kube-controller-manager", "kube-scheduler", "kwok", "dynquota")
"""User-agent programs of the clients the tarpit must never match."""
START_DELAY = 2.0
"""Seconds between submitting a run and its start: both processes start at the same instant."""
TEMPLATES = (
    "templates/serviceaccount.yaml",
    "templates/clusterrole.yaml",
    "templates/operator-policy.yaml",
    "templates/write-rate-tarpit.yaml",
)
CONFIGMAPS = {"bufferPercent": 40, "minimum": 5000, "maximum": 10000,
              "upscaleCooldown": "10s", "downscaleCooldown": "1h"}  # fmt: skip


@dataclass
class Run:
    """One run's figures (engage and release: seconds, ``None``: never within the run)."""

    scenario: str
    churn: ChurnResult
    quiet: QuietResult
    flows: str
    matched: Counter[str] = field(default_factory=Counter)
    system: Counter[str] = field(default_factory=Counter)
    engage: float | None = None
    release: float | None = None


@dataclass
class GovernorBed:
    """The APF bed with the chart's tarpit and the operator installed."""

    bed: Bed
    cluster: OperatorCluster
    flow: Any

    def listed(self) -> set[str]:
        obj = self.flow.api_client.sanitize_for_serialization(
            self.flow.read_flow_schema(SCHEMA, _request_timeout=10)
        )
        return tarpitted(obj["spec"].get("rules") or [])

    def log_size(self) -> int:
        return (self.bed.cp.log_dir / "kube-apiserver.log").stat().st_size

    def matched_since(self, offset: int) -> tuple[Counter[str], Counter[str]]:
        """Since the log was ``offset`` bytes long: requests per client the tarpit matched,
        and the system clients' requests per ``component schema``."""
        with open(self.bed.cp.log_dir / "kube-apiserver.log", errors="replace") as log:
            log.seek(offset)
            flows = request_flows(log.read().splitlines())
        matched = Counter({client: n for (client, fs), n in flows.items() if fs == SCHEMA})
        system: Counter[str] = Counter()
        for (client, fs), n in flows.items():
            if client.startswith(SYSTEM_CLIENTS):
                system[f"{client.split(':', 1)[0]} {fs}"] += n
        return matched, system


@pytest.fixture(scope="module")
def gbed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GovernorBed]:
    with apf_bed(nodes=1, extra_apiserver_args=["--v=3"]) as bed:
        cp = bed.cp
        kubeconfig = install_operator(cp, tmp_path_factory.mktemp("governor"))
        sets = ["leaderElection.enabled=true", "writeRate.enabled=true"]
        cp.kubectl("apply", "-f", "-", input=helm_template(cp, OPERATOR_NS, TEMPLATES, sets))
        cluster = OperatorCluster(cp, bed.api, kubeconfig)
        for ns in (CHURN_NS, QUIET_NS):
            cluster.core.patch_namespace(ns, {"metadata": {"labels": LABEL}})
        write_rate = {"limit": LIMIT, "window": f"{WINDOW}s", "quietPeriod": f"{QUIET}s"}
        cluster.policy("bench-governor", LABEL, configmaps=CONFIGMAPS,
                       extra_spec={"writeRate": write_rate})  # fmt: skip
        yield GovernorBed(bed, cluster, kubernetes.client.FlowcontrolApiserverV1Api(bed.api))


def deployment_later(g: GovernorBed, start_at: float, name: str) -> threading.Thread:
    """Create a Deployment of 5 pause replicas in the churn namespace 5 s after ``start_at``
    (kube-controller-manager and the scheduler then write there during the run)."""

    def create() -> None:
        time.sleep(max(0.0, start_at + 5 - time.time()))  # a point in the run's schedule
        g.bed.cp.kubectl("create", "deployment", name, "-n", CHURN_NS, "--image=pause",
                         "--replicas=5")  # fmt: skip

    thread = threading.Thread(target=create, daemon=True)
    thread.start()
    return thread


def run(g: GovernorBed, pool: ProcessPoolExecutor, scenario: str, governed: bool) -> Run:
    b = g.bed
    b.sweep(CHURN_NS, QUIET_NS)
    extra = {"tarpit_flow_schema": SCHEMA} if governed else {}
    op = OperatorThread(operator_settings(g.cluster, resync_seconds=5, **extra)).start()
    try:
        before, offset = b.flow_counts(), g.log_size()
        start_at = time.time() + START_DELAY
        churn = pool.submit(run_churn, b.tenant, CHURN_NS, WORKERS, SECONDS, True, start_at)
        quiet = pool.submit(run_quiet, b.tenant, QUIET_NS, QUIET_RATE, SECONDS, start_at)
        helper = deployment_later(g, start_at, f"web-{'on' if governed else 'off'}")
        engage = None
        if governed:
            wait_until(lambda: CHURN_NS in g.listed(), "apf-churn listed", timeout=SECONDS)
            engage = time.time() - start_at
        churn_result = churn.result(timeout=SECONDS + 120)
        ended = start_at + churn_result.seconds
        quiet_result = quiet.result(timeout=SECONDS + 120)
        helper.join(timeout=30)
        release = None
        if governed:
            wait_until(lambda: not g.listed(), "apf-churn released", timeout=QUIET + 60)
            release = time.time() - ended
        flows = describe(tarpit_counts(before, b.flow_counts()), [SCHEMA, "service-accounts"])
        matched, system = g.matched_since(offset)
    finally:
        op.stop()
        b.cp.kubectl("delete", "deployment", "--all", "-n", CHURN_NS, "--wait=false")
    return Run(scenario, churn_result, quiet_result, flows, matched, system, engage, release)


def lines(runs: list[Run]) -> list[str]:
    out = [
        "| scenario | engage s | release s (after the churn ended) | churner writes/s | "
        "churner 429s (gave up) | quiet p50 ms | quiet p99 ms | quiet 429s/errors | "
        "APF dispatched/rejected | clients matched by the tarpit | system clients' requests by "
        "schema |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        p50, p99 = (percentile(r.quiet.latencies_ms, p) for p in (50, 99))
        engage = "-" if r.engage is None else f"{r.engage:.1f}"
        release = "-" if r.release is None else f"{r.release:.1f}"
        clients = ", ".join(f"{c} {n}" for c, n in sorted(r.matched.items())) or "none"
        out.append(
            f"| {r.scenario} | {engage} | {release} | {r.churn.write_rate:.0f} | "
            f"{r.churn.rejected} ({r.churn.gave_up}) | {p50:.0f} | {p99:.0f} | "
            f"{r.quiet.rejected}/{r.quiet.errors} | {r.flows} | {clients} | "
            + ", ".join(f"{k} {n}" for k, n in sorted(r.system.items()))
            + " |"
        )
    return out


def test_governor_engages_and_releases_in_time(gbed: GovernorBed) -> None:
    began = time.monotonic()
    with ProcessPoolExecutor(max_workers=2, mp_context=get_context("spawn")) as pool:
        runs = [run(gbed, pool, "governor off", False), run(gbed, pool, "governor on", True)]
    table = lines(runs)
    header = (
        f"{time.strftime('%Y-%m-%d %H:%M')}, {os.cpu_count()} cores, {SECONDS:.0f} s per run, "
        f"{WORKERS} churn workers honouring Retry-After, quiet {QUIET_RATE:g}/s, writeRate "
        f"{LIMIT} in {WINDOW} s, quietPeriod {QUIET} s; {time.monotonic() - began:.0f} s in "
        f"all; load average at the end {load_average()}"
    )
    report("APF: the write-rate governor", [header, *table])
    Path(REPORT).write_text("\n".join([header, "", *table, ""]))
    off, on = runs
    assert off.matched == Counter()
    assert on.engage is not None
    assert on.engage <= 10
    assert on.release is not None
    assert on.release <= QUIET + 10
    assert [c for c in on.matched if c.startswith(SYSTEM_CLIENTS)] == []
    assert on.system  # they did write meanwhile
    assert all(r.quiet.latencies_ms and r.churn.creates for r in runs)
