"""API Priority and Fairness against one namespace's churn, measured (issue 32, part 1).

``make bench-apf`` (not in ``make test``). One private control plane whose components act as
their own, non-exempt users (``LocalControlPlane(component_identities=True)``: the
controllers as their ServiceAccounts in kube-system, as on a kubeadm cluster), no nodes.
One tenant ServiceAccount (``apf-ci/ci``) drives two clients, each in a process of its own
(``dynquota.testing.apfload``):

- the **churner**: ConfigMap create + delete from ``DYNQUOTA_APF_BENCH_WORKERS`` (32) workers
  in ``apf-churn``, once honouring ``Retry-After`` on 429 like client-go, once retrying at once;
- the **quiet client**: ``DYNQUOTA_APF_BENCH_QUIET_RATE`` (5) creates/s in ``apf-quiet``.

Same user, so APF's per-user flows (``service-accounts``, 9000, ``ByUser``) put both in one
flow. Scenarios: the quiet client alone (the latency baseline), then per tarpit level a run
without it (the churner's baseline, taken just before, as the shared machine's load drifts
by the minute) and a run with it for each churner; the tarpit level
(``Limited``, lending and borrowing 0) of ``DYNQUOTA_APF_BENCH_SHARES`` (1,2,3) shares with
``Reject`` and with a short queue (1 queue of 5), reached by a FlowSchema at precedence 1000
matching writes of configmaps in ``apf-churn`` by any authenticated user (``ByNamespace``).
Each run lasts ``DYNQUOTA_APF_BENCH_SECONDS`` (15). Per run: the churner's successful writes/s
and 429s, the quiet client's p50/p99 (ms), the APF counters of the schemas involved (from the
apiserver's ``/metrics``), kube-apiserver + etcd CPU (cores), the load average.

Then **kube-controller-manager caught or not** (``apf_kcm.py``): with the churner (retrying
at once) keeping a 1-share ``Reject`` tarpit busy, a Deployment of
``DYNQUOTA_APF_BENCH_REPLICAS`` (20) replicas is created in the churn namespace and one in
another tenant's; time until each ReplicaSet exists and all its pods are created
(``DYNQUOTA_APF_BENCH_KCM_DEADLINE``, 30 s, at most), then how long until they catch up once
the tarpit is gone, for: no tarpit; the tarpit at 1000 (where the chart puts it); the same
FlowSchema at 850 (under ``kube-system-service-accounts``, 900: it catches the controllers'
writes in that namespace); and a FlowSchema at 700 sending all of kube-controller-manager (its
user and the ServiceAccounts of kube-system) to the tarpit.

The table is printed and written to ``$DYNQUOTA_APF_BENCH_REPORT``
(default ``/tmp/dynquota-apf-bench.md``).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path

import pytest
from apf_bed import (  # same directory
    AUTHENTICATED,
    CHURN_NS,
    PRECEDENCE,
    QUIET_NS,
    TARPIT,
    Bed,
    apf_bed,
    describe,
    load_average,
    tarpit_counts,
)
from apf_kcm import kcm_rows  # same directory
from figures import percentile, report  # same directory

from dynquota.testing.apf import TARPIT_QUEUE, tarpit_level, tarpit_schema
from dynquota.testing.apfload import ChurnResult, QuietResult, run_churn, run_quiet

pytestmark = [pytest.mark.bench, pytest.mark.timeout(3600)]

SECONDS = float(os.environ.get("DYNQUOTA_APF_BENCH_SECONDS", "15"))
WORKERS = int(os.environ.get("DYNQUOTA_APF_BENCH_WORKERS", "32"))
QUIET_RATE = float(os.environ.get("DYNQUOTA_APF_BENCH_QUIET_RATE", "5"))
SHARES = [int(s) for s in os.environ.get("DYNQUOTA_APF_BENCH_SHARES", "1,2,3").split(",")]
REPORT = os.environ.get("DYNQUOTA_APF_BENCH_REPORT", "/tmp/dynquota-apf-bench.md")
START_DELAY = 2.0
"""Seconds between submitting a run and its start: both processes start at the same instant."""


@dataclass(frozen=True)
class Tarpit:
    """A tarpit level: ``shares`` nominal shares, a short queue or ``Reject``."""

    shares: int
    queue: bool

    def __str__(self) -> str:
        limit = "queue 1x5" if self.queue else "Reject"
        return f"{self.shares} share{'s' * (self.shares > 1)}, {limit}"


def engage(bed: Bed, tarpit: Tarpit | None, precedence: int = PRECEDENCE) -> None:
    """Apply ``tarpit`` (level + the FlowSchema on the churn namespace) or remove it, and wait
    until the tenant's writes there are matched accordingly."""
    if tarpit is None:
        bed.delete("flowschema", TARPIT)
        bed.delete("prioritylevelconfiguration", TARPIT)
        bed.await_schema(CHURN_NS, "service-accounts")
        return
    level = tarpit_level(TARPIT, tarpit.shares, TARPIT_QUEUE if tarpit.queue else None)
    schema = tarpit_schema(TARPIT, TARPIT, precedence, AUTHENTICATED, [CHURN_NS], ["configmaps"])
    bed.delete("prioritylevelconfiguration", TARPIT)  # a level's limits change on a new one
    bed.apply([level, schema])
    bed.await_schema(CHURN_NS, TARPIT)
    bed.await_schema(QUIET_NS, "service-accounts")


@dataclass
class Run:
    """One run's figures."""

    scenario: str
    honour: bool | None  # None: no churner
    churn: ChurnResult | None
    quiet: QuietResult
    flows: str
    cpu_cores: float
    load: str
    baseline: Run | None = None  # the run without a tarpit just before this one


def run_once(bed: Bed, pool: ProcessPoolExecutor, scenario: str, honour: bool | None) -> Run:
    """The quiet client for ``SECONDS``, with the churner beside it unless ``honour`` is None."""
    bed.sweep(CHURN_NS, QUIET_NS)
    before, cpu, began = bed.flow_counts(), bed.cpu_seconds(), time.monotonic()
    start_at = time.time() + START_DELAY
    churn = None
    if honour is not None:
        churn = pool.submit(run_churn, bed.tenant, CHURN_NS, WORKERS, SECONDS, honour, start_at)
    quiet = pool.submit(run_quiet, bed.tenant, QUIET_NS, QUIET_RATE, SECONDS, start_at)
    quiet_result = quiet.result(timeout=SECONDS + 120)
    churn_result = churn.result(timeout=SECONDS + 120) if churn else None
    cpu = (bed.cpu_seconds() - cpu) / (time.monotonic() - began)
    flows = tarpit_counts(before, bed.flow_counts())
    return Run(
        scenario,
        honour,
        churn_result,
        quiet_result,
        describe(flows, [TARPIT, "service-accounts"]),
        cpu,
        load_average(),
    )


def churn_matrix(bed: Bed, pool: ProcessPoolExecutor) -> list[Run]:
    """The quiet client alone, then per tarpit level a run without it (its baseline, taken
    just before: the machine's load drifts) and a run with it for each churner."""
    runs = [run_once(bed, pool, "quiet client alone", None)]
    for tarpit in [Tarpit(s, False) for s in SHARES] + [Tarpit(s, True) for s in SHARES]:
        engage(bed, None)
        # without a tarpit there is no 429: both churners are the same client
        baseline = run_once(bed, pool, f"no tarpit (baseline of {tarpit})", True)
        runs.append(baseline)
        engage(bed, tarpit)
        for honour in (True, False):
            run = run_once(bed, pool, str(tarpit), honour)
            run.baseline = baseline
            runs.append(run)
    engage(bed, None)
    return runs


def matrix_lines(runs: list[Run]) -> list[str]:
    """The churn table (markdown): the churner's rate against its baseline run's, the quiet
    client's latencies against its own alone."""
    alone = runs[0].quiet
    base50, base99 = (percentile(alone.latencies_ms, p) for p in (50, 99))
    lines = [
        "| scenario | churner | writes/s (x baseline) | 429s (gave up) | max Retry-After | "
        "quiet p50 ms (x alone) | quiet p99 ms (x alone) | quiet 429s/errors | "
        "APF dispatched/rejected | apiserver+etcd cores | load 1/5/15 |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        p50, p99 = (percentile(r.quiet.latencies_ms, p) for p in (50, 99))
        if r.churn is None:
            churner = "none"
            rate = rejected = after = "-"
        else:
            churner = "retries at once"
            if r.baseline is None:
                churner = "either (no 429 to honour)"
            elif r.honour:
                churner = "honours Retry-After"
            base = r.baseline.churn if r.baseline is not None else r.churn
            ratio = r.churn.write_rate / base.write_rate if base and base.write_rate else 0.0
            rate = f"{r.churn.write_rate:.0f} ({ratio:.2f})"
            rejected = f"{r.churn.rejected} ({r.churn.gave_up})"
            after = f"{r.churn.retry_after_max:.0f} s"
        lines.append(
            f"| {r.scenario} | {churner} | {rate} | {rejected} | {after} | "
            f"{p50:.0f} ({p50 / base50:.1f}) | {p99:.0f} ({p99 / base99:.1f}) | "
            f"{r.quiet.rejected}/{r.quiet.errors} | {r.flows} | {r.cpu_cores:.2f} | {r.load} |"
        )
    return lines


@pytest.fixture(scope="module")
def bed() -> Iterator[Bed]:
    with apf_bed() as b:
        yield b


def test_apf_churn_containment(bed: Bed) -> None:
    began = time.monotonic()
    with ProcessPoolExecutor(max_workers=2, mp_context=get_context("spawn")) as pool:
        runs = churn_matrix(bed, pool)
        churn_table = matrix_lines(runs)
        report("APF: churn containment (writes/s; latency ms)", churn_table)
        kcm_table = kcm_rows(bed, pool, WORKERS)
        report("APF: kube-controller-manager's Deployments, tarpit placement", kcm_table)
    header = (
        f"{time.strftime('%Y-%m-%d %H:%M')}, {os.cpu_count()} cores, {SECONDS:.0f} s per run, "
        f"{WORKERS} churn workers, quiet {QUIET_RATE:g}/s, "
        f"{time.monotonic() - began:.0f} s in all; load average at the end {load_average()}"
    )
    report("APF bench", [header])
    Path(REPORT).write_text("\n".join([header, "", *churn_table, "", *kcm_table, ""]))
    # every run really ran: the churner wrote, the quiet client was answered
    assert all(r.quiet.latencies_ms for r in runs)
    assert all(r.churn.creates for r in runs if r.churn is not None)
