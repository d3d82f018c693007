"""Tenant budgets (issue #13, "Benchmarks") on a real local control plane (``make
bench-budgets``; the table is printed and recorded in docs/performance.md).

One run, one control plane, the same shifting workload three times, one arm after the other:

1. **dynquota**: a QuotaBudget of ``BUDGET`` pods over 3 namespaces, each under a
   DynamicQuotaPolicy (buffer 50 %, minimum 2, upscale cooldown 0 s, downscale 3 s: the
   integration test's profile), the operator in-process with the chart's RBAC;
2. **static split**: one plain ResourceQuota of ``BUDGET // 3`` pods per namespace, no dynquota
   (Capsule-style copying when it does not overshoot);
3. **no limit**: no quota at all (what the tenant would have used).

The workload (``dynquota.testing.budgetload.Load``): a tenant wants ``DEMAND`` pods (default:
the whole budget) in ONE namespace at a time, and the demand moves on: phase 1, A creates;
then each phase the last hungry namespace deletes its pods while the next one creates
(A -> B -> C -> A ...). ``CREATORS`` threads create in the hungry namespace; a refused create
backs off 0.1 s. A sampler takes one LIST of the quotas and one of the pods every 50 ms.

Figures per arm:

- over-budget samples: sum over the 3 namespaces of max(spec.hard, status.hard) > budget;
- peak pods (one LIST) and the overshoot beyond the budget;
- utilisation: the most pods the tenant held at once (the same LIST), as a fraction of the
  budget; and the pods held at the end of each phase (once the demand has moved), averaged:
  what the tenant keeps while it still wants more;
- denials: creates refused by quota (403), and of them the ones refused while the tenant held
  fewer than ``BUDGET`` pods (the load's own count: creates minus deletes when the 403 came
  back) — refused although the budget had room;
- dynquota only: the time for freed headroom to reach the hungry namespace: for every pod the
  shrinking namespace deletes while the hungry one still wants more, from the DELETE's return
  to the first later version of the hungry namespace's quota (a watch) whose ``spec.hard``
  (written) / ``status.hard`` (enforced) pods are higher than at the deletion; p50/p99 over
  those deletions (a burst of deletions freed by one grow all count, each with its own wait).

Gates (issue #13): 0 over-budget samples for dynquota; its utilisation at least 1.5x the static
split's. Knobs (environment): ``DQ_BENCH_BUDGET_PODS`` (60), ``DQ_BENCH_BUDGET_DEMAND`` (the
budget), ``DQ_BENCH_BUDGET_PHASE_SECONDS`` (15), ``DQ_BENCH_BUDGET_SHIFTS`` (3: phases after
the first), ``DQ_BENCH_BUDGET_CREATORS`` (3). Defaults: about 5 minutes on the 2-core test bed.
"""

from __future__ import annotations

import os
import statistics
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from figures import QuotaWatch, percentile, pooled_cluster, report, stored_count  # same directory

from dynquota.names import BUDGET_KIND, BUDGET_PLURAL, GROUP, VERSION
from dynquota.testing.budgetload import Load, Sampler, pods_of
from dynquota.testing.operator import OperatorCluster, OperatorThread, operator_settings
from dynquota.testing.wait import wait_until

pytestmark = pytest.mark.bench

BUDGET = int(os.environ.get("DQ_BENCH_BUDGET_PODS", "60"))
DEMAND = int(os.environ.get("DQ_BENCH_BUDGET_DEMAND", str(BUDGET)))
PHASE_SECONDS = float(os.environ.get("DQ_BENCH_BUDGET_PHASE_SECONDS", "15"))
SHIFTS = int(os.environ.get("DQ_BENCH_BUDGET_SHIFTS", "3"))
CREATORS = int(os.environ.get("DQ_BENCH_BUDGET_CREATORS", "3"))
POLICY = {
    "bufferPercent": 50,
    "minimum": 2,
    "maximum": BUDGET,
    "upscaleCooldown": "0s",
    "downscaleCooldown": "3s",
}
GROW_SLACK = 5.0
"""Seconds after a phase's end a grow may still arrive for one of its deletions."""


@dataclass
class Phase:
    """One load phase: the plan, the hungry and shrinking namespaces, its epoch bounds."""

    plan: dict[str, str]
    hungry: str
    shrinking: str | None
    started: float = 0.0
    ended: float = 0.0
    held_at_end: int = 0


@dataclass
class Arm:
    """What one arm measured (see the module docstring)."""

    name: str
    samples: int = 0
    over: int = 0
    most_pods: int = 0
    created: int = 0
    denied: int = 0
    denied_with_room: int = 0
    held_at_ends: list[int] = field(default_factory=list)
    written_ms: list[float] = field(default_factory=list)
    enforced_ms: list[float] = field(default_factory=list)
    not_reached: int = 0
    rebalances: float | None = None

    @property
    def utilisation(self) -> float:
        return self.most_pods / BUDGET

    @property
    def sustained(self) -> float:
        return statistics.mean(self.held_at_ends) / BUDGET if self.held_at_ends else 0.0


def phases(namespaces: list[str]) -> list[Phase]:
    """Phase 1: the first namespace creates; then each shift moves the demand on."""
    result = [Phase({namespaces[0]: "create"}, namespaces[0], None)]
    for i in range(SHIFTS):
        prev, nxt = namespaces[i % 3], namespaces[(i + 1) % 3]
        result.append(Phase({prev: "delete", nxt: "create"}, nxt, prev))
    return result


def run_load(
    c: OperatorCluster, arm: Arm, namespaces: list[str], quota: str | None
) -> tuple[Load, list[Phase]]:
    """Run the workload in ``namespaces`` under the sampler; fill ``arm``'s common figures."""
    run = uuid.uuid4().hex[:8]
    load = Load(c, run, namespaces, creators=CREATORS, demand=DEMAND)
    plan = phases(namespaces)
    with Sampler(c, namespaces, run, BUDGET, quota=quota) as sampler:
        for phase in plan:
            phase.started = time.time()
            load.phase(phase.plan, PHASE_SECONDS)
            phase.ended = time.time()
            phase.held_at_end = sum(load.held.values())
    arm.samples, arm.over, arm.most_pods = sampler.samples, len(sampler.over), sampler.most_pods
    arm.created, arm.denied = load.created, len(load.denials)
    arm.denied_with_room = sum(1 for d in load.denials if d.held < BUDGET)
    arm.held_at_ends = [p.held_at_end for p in plan]
    return load, plan


def pods_in(seen: Any, part: str) -> int | None:
    value = getattr(seen, part).get("pods")
    return None if value is None else stored_count(value)


def headroom_times(arm: Arm, load: Load, plan: list[Phase], watches: dict[str, QuotaWatch]) -> None:
    """Fill ``arm``'s freed-headroom times from the deletions and the watched quotas."""
    for phase in plan:
        if phase.shrinking is None:
            continue
        seen = watches[phase.hungry].versions()
        for deletion in load.deletions:
            if deletion.namespace != phase.shrinking or not (
                phase.started <= deletion.at <= phase.ended
            ):
                continue
            if deletion.held.get(phase.hungry, 0) >= DEMAND:
                continue  # the hungry namespace wants nothing more
            for part, times in (("spec", arm.written_ms), ("status", arm.enforced_ms)):
                before = [s for s in seen if s.at <= deletion.at and pods_in(s, part) is not None]
                start = pods_in(before[-1], part) if before else 0
                grown = next(
                    (
                        s.at
                        for s in seen
                        if deletion.at < s.at <= phase.ended + GROW_SLACK
                        and (pods_in(s, part) or 0) > (start or 0)
                    ),
                    None,
                )
                if grown is None:
                    arm.not_reached += part == "status"
                else:
                    times.append((grown - deletion.at) * 1000)


def arm_dynquota(c: OperatorCluster) -> Arm:
    arm = Arm("dynquota budget")
    run = uuid.uuid4().hex[:8]
    team = {"bench": "budget", "team": run}
    c.policy(f"bench-budget-{run}", team, pods=POLICY)
    name = f"qb-{run}"
    # members by the namespace label (issue #22)
    namespaces = [c.new_namespace({**team, "dynquota.io/budget": name}) for _ in range(3)]
    c.custom.create_cluster_custom_object(
        GROUP,
        VERSION,
        BUDGET_PLURAL,
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": BUDGET_KIND,
            "metadata": {"name": name},
            "spec": {"hard": {"pods": BUDGET}},
        },
    )
    op = OperatorThread(operator_settings(c)).start()
    watches: dict[str, QuotaWatch] = {}
    try:

        def bounded() -> bool:
            quotas = [c.quota(ns) for ns in namespaces]
            return all(q is not None and pods_of(q, "status") is not None for q in quotas)

        wait_until(bounded, "every slice enforced", timeout=120)
        watches = {ns: QuotaWatch(c, ns) for ns in namespaces}
        load, plan = run_load(c, arm, namespaces, "dynquota")
        wait_until(lambda: time.time() > plan[-1].ended + GROW_SLACK, "the last grows seen", 30)
        arm.rebalances = op.sample("dynquota_budget_rebalances_total", {"budget": name})
    finally:
        for watch in watches.values():
            watch.stop()
        op.stop()
    headroom_times(arm, load, plan, watches)
    for ns in namespaces:
        c.delete_namespace(ns)
    return arm


def arm_static(c: OperatorCluster) -> Arm:
    arm = Arm(f"static split {BUDGET // 3}x3")
    namespaces = [c.new_namespace({"bench": "budget-static"}) for _ in range(3)]
    for ns in namespaces:
        c.core.create_namespaced_resource_quota(
            ns, {"metadata": {"name": "static"}, "spec": {"hard": {"pods": str(BUDGET // 3)}}}
        )
    wait_until(
        lambda: all(pods_of(c.quota(ns, "static"), "status") for ns in namespaces),
        "the static quotas enforced",
        timeout=60,
    )
    run_load(c, arm, namespaces, "static")
    for ns in namespaces:
        c.delete_namespace(ns)
    return arm


def arm_unlimited(c: OperatorCluster) -> Arm:
    arm = Arm("no tenant limit")
    namespaces = [c.new_namespace({"bench": "budget-none"}) for _ in range(3)]
    run_load(c, arm, namespaces, None)
    for ns in namespaces:
        c.delete_namespace(ns)
    return arm


def ms(values: list[float]) -> str:
    if not values:
        return "-"
    return f"{statistics.median(values):.0f}/{percentile(values, 99):.0f}"


@pytest.mark.timeout(int(3 * (SHIFTS + 1) * PHASE_SECONDS + 600))
def test_budget_against_a_static_split_and_no_limit(tmp_path: Path) -> None:
    began = time.monotonic()
    with pooled_cluster(tmp_path, 10) as c:
        arms = [arm_dynquota(c), arm_static(c), arm_unlimited(c)]
    dyn, static, _ = arms
    lines = [
        f"budget {BUDGET} pods over 3 namespaces; demand {DEMAND} pods in one namespace at a "
        f"time, moving on {SHIFTS} times; phases of {PHASE_SECONDS:.0f} s; {CREATORS} creators; "
        f"kube-controller-manager --resource-quota-sync-period=10s; run "
        f"{time.monotonic() - began:.0f} s; load average {os.getloadavg()[0]:.1f} (2 cores)",
        f"{'arm':20} {'samples':>7} {'over':>5} {'peak (over)':>11} {'util.':>6} "
        f"{'held@end':>8} {'creates':>7} {'denied':>6} {'w/ room':>7} "
        f"{'headroom ms p50/p99 written, enforced (not reached)':>50}",
    ]
    for arm in arms:
        limited = arm.name != "no tenant limit"
        headroom = (
            f"{ms(arm.written_ms)}, {ms(arm.enforced_ms)} ({arm.not_reached}) "
            f"n={len(arm.enforced_ms)}"
            if arm.rebalances is not None
            else "-"
        )
        lines.append(
            f"{arm.name:20} {arm.samples:7} {arm.over if limited else '-':>5} "
            f"{f'{arm.most_pods} ({max(0, arm.most_pods - BUDGET)})':>11} "
            f"{arm.utilisation:6.2f} {arm.sustained:8.2f} {arm.created:7} {arm.denied:6} "
            f"{arm.denied_with_room:7} {headroom:>50}"
        )
    lines += [
        f"pods held at the phases' ends, {arm.name}: "
        + ", ".join(str(held) for held in arm.held_at_ends)
        for arm in arms
    ]
    lines.append(
        f"dynquota: {dyn.rebalances:.0f} rebalances; utilisation {dyn.utilisation:.2f} = "
        f"{dyn.utilisation / static.utilisation:.2f}x the static split's (gate: >= 1.5x)"
    )
    report("Tenant budgets: dynquota vs a static split vs no limit", lines)
    assert dyn.samples > 100
    assert dyn.over == 0
    assert dyn.utilisation >= 1.5 * static.utilisation
