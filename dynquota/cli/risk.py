"""The at-risk view of ``dynquota plan --at-risk`` (pure): the keys at or near their limit,
throttled, frozen or over budget, most urgent first, with a summary line.

A row's usage is ``max(tally, status.used)`` (what admission and the operator see), its limit
``hard`` (``spec.hard``). Risks, most urgent first (:data:`RISKS`):

- ``at limit``: usage >= hard (the next create of that key is refused);
- ``over budget``: the namespace is a member of a budget key that is ``OverBudget`` or is
  marked ``at risk`` (not enforced) by it;
- ``frozen``: an invalid policy could match the namespace (nobody sizes it until the policy
  is fixed);
- ``throttled``: a raise waits for the upscale cooldown (``the buffer waits for the
  cooldown``);
- ``at maximum``: the target is clamped at the policy's maximum (it will not grow);
- ``held``: a compute key held for want of a LimitRange default (``NeedsDefaultRequests``);
- ``near limit``: usage >= :data:`NEAR` of hard.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final

from dynquota.operator.plan_model import BudgetPlan, PlanRow

__all__ = ["NEAR", "RISKS", "Risk", "at_risk", "summary"]

NEAR: Final = 0.9
"""``near limit`` from this share of ``hard`` (90 %)."""

RISKS: Final = (
    "at limit",
    "over budget",
    "frozen",
    "throttled",
    "at maximum",
    "held",
    "near limit",
)
"""The risks, most urgent first (the sort order)."""


@dataclass(frozen=True)
class Risk:
    """One key at risk: its plan ``row``, the ``risk`` (one of :data:`RISKS`, the most urgent
    that holds) and ``use`` (usage / hard, ``None`` when either is unknown)."""

    row: PlanRow
    risk: str
    use: float | None


def _usage(row: PlanRow) -> int | None:
    values = [v for v in (row.tally, row.status_used) if v is not None]
    return max(values) if values else None


def _over_budget(budgets: Iterable[BudgetPlan]) -> set[tuple[str, str]]:
    """``(namespace, key)`` of the members of an ``OverBudget`` key, or marked at risk."""
    found: set[tuple[str, str]] = set()
    for budget in budgets:
        for key in budget.keys:
            for member in key.members:
                if key.state == "OverBudget" or member.note.startswith("at risk"):
                    found.add((member.namespace, key.key))
    return found


def at_risk(rows: Sequence[PlanRow], budgets: Iterable[BudgetPlan]) -> list[Risk]:
    """The rows at risk (module docstring), sorted: risk (:data:`RISKS` order), then use
    (highest first, unknown last), then namespace and resource. Pure."""
    over = _over_budget(budgets)
    found: list[Risk] = []
    for row in rows:
        used, hard = _usage(row), row.hard
        use = used / hard if used is not None and hard else None
        risks = []
        if used is not None and hard is not None and used >= hard:
            risks.append("at limit")
        if (row.namespace, row.resource) in over:
            risks.append("over budget")
        if row.why.startswith("frozen:"):
            risks.append("frozen")
        if "waits for the cooldown" in row.why:
            risks.append("throttled")
        if ", at maximum " in row.why:
            risks.append("at maximum")
        if row.next == "held":
            risks.append("held")
        if use is not None and use >= NEAR:
            risks.append("near limit")
        if risks:
            found.append(Risk(row, min(risks, key=RISKS.index), use))
    found.sort(
        key=lambda r: (
            RISKS.index(r.risk),
            -(r.use if r.use is not None else -1.0),
            r.row.namespace,
            r.row.resource,
        )
    )
    return found


def summary(risks: Sequence[Risk], shown: int) -> str:
    """``3 keys at risk in 2 of 310 namespaces: 1 at limit, 2 throttled`` (``shown``: the
    namespaces the plan covered); ``nothing at risk in 310 namespaces`` when empty."""
    if not risks:
        return f"nothing at risk in {shown} namespaces"
    namespaces = len({r.row.namespace for r in risks})
    counts = [(name, sum(1 for r in risks if r.risk == name)) for name in RISKS]
    keys = "1 key" if len(risks) == 1 else f"{len(risks)} keys"
    return f"{keys} at risk in {namespaces} of {shown} namespaces: " + ", ".join(
        f"{n} {name}" for name, n in counts if n
    )
