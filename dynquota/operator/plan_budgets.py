"""The budgets section of ``dynquota plan`` (pure): each QuotaBudget as its next pass would see
it, from a :class:`~dynquota.operator.plan_snapshot.ClusterSnapshot`.

:func:`snapshot_budgets` builds the operator's own
:class:`~dynquota.operator.budgets.Budgets` (membership by the label ``dynquota.io/budget``,
demand, ``Budgets.slicing``/``Budgets.shape``) on the snapshot's namespaces and governances;
:func:`budget_plans` computes each budget's rows and totals (:class:`BudgetPlan`) with the
operator's :func:`~dynquota.operator.budgets.member_slice` and
:func:`~dynquota.policy.budget.allocate`, as ``BudgetTasks.run_pass`` does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from dynquota.kube.quotas import QuotaSnapshot
from dynquota.operator.budgets import (
    BudgetRecord,
    Budgets,
    leaving,
    member_slice,
    read_budget,
    reserved,
)
from dynquota.operator.plan_model import BudgetKeyPlan, BudgetMember, BudgetPlan, shown
from dynquota.policy import TRACKED_RESOURCES, Governance, NamespaceInfo
from dynquota.policy.budget import Allocation, allocate
from dynquota.settings import Settings

__all__ = ["budget_plans", "snapshot_budgets"]


def snapshot_budgets(
    settings: Settings,
    namespaces: dict[str, NamespaceInfo],
    governances: Mapping[str, Governance],
    budgets: Sequence[Mapping[str, Any]],
) -> Budgets:
    """The operator's :class:`~dynquota.operator.budgets.Budgets` over a snapshot: its
    ``namespaces`` and their ``governances`` (as ``ClusterView.governance``), and every
    QuotaBudget object of the snapshot (``budgets``), listed; the plan queues nothing."""
    found = Budgets(settings, namespaces, governances.get)
    found.records = {r.name: r for r in map(read_budget, budgets)}
    found.listed = True
    return found


def budget_plans(
    budgets: Budgets,
    quotas: Mapping[str, QuotaSnapshot],
    tally: Mapping[tuple[str, str], int],
) -> list[BudgetPlan]:
    """Every budget of ``budgets`` (by name) as its next pass would see it, from the
    snapshot's managed ``quotas`` (by namespace) and ``tally``."""
    return [
        _budget_plan(record, budgets, quotas, tally)
        for _, record in sorted(budgets.records.items())
    ]


def _budget_plan(
    record: BudgetRecord,
    budgets: Budgets,
    quotas: Mapping[str, QuotaSnapshot],
    tally: Mapping[tuple[str, str], int],
) -> BudgetPlan:
    """One budget as its next pass would see it: the slices of its members
    (:func:`~dynquota.operator.budgets.member_slice`) and :func:`~dynquota.policy.budget.allocate`,
    as ``BudgetTasks.run_pass`` does, from the snapshot's quotas and tally."""
    members = budgets.members(record.name)
    left = leaving(record.name, set(members), quotas)
    if record.spec is None:
        return BudgetPlan(record.name, record.error, (), tuple(left))
    keys: list[BudgetKeyPlan] = []
    for key, hard in sorted(record.spec.hard.items()):
        slices = [
            member_slice(
                ns,
                key,
                quotas.get(ns),
                tally.get((ns, key), 0) if key in TRACKED_RESOURCES else None,
                budgets.demand_for(ns, key, hard, len(members)),
                budgets.step_for(ns, key),
            )
            for ns in members
        ]
        allocation = allocate(hard, slices, reserved(key, left, quotas))
        keys.append(
            BudgetKeyPlan(
                key,
                hard,
                allocation.committed,
                allocation.committed_after,
                sum(s.used or 0 for s in slices),
                hard - allocation.committed,
                _budget_state(allocation),
                tuple(
                    BudgetMember(
                        s.namespace,
                        s.spec_hard,
                        s.status_hard,
                        s.used,
                        s.demand,
                        allocation.writes.get(s.namespace),
                        _member_note(allocation, key, s.namespace),
                    )
                    for s in slices
                ),
            )
        )
    return BudgetPlan(record.name, "", tuple(keys), tuple(left))


def _budget_state(allocation: Allocation) -> str:
    """The key's state, as the budget's conditions say it (the first that holds)."""
    if allocation.over_budget:
        return "OverBudget"
    if allocation.at_risk:
        return "AtRisk"
    if allocation.writes:
        return "Rebalancing"
    return "Waiting" if allocation.waiting else "Settled"


def _member_note(allocation: Allocation, key: str, namespace: str) -> str:
    if namespace in allocation.at_risk:
        return "at risk: not enforced (no quota or key in status.hard)"
    if namespace in allocation.held:
        return "usage unknown: held"
    if namespace in allocation.waiting:
        return f"waiting for {shown(key, allocation.waiting[namespace])}"
    return ""
