"""``dynquota plan``'s text output (pure): the plan's table and sections (:func:`format_plan`:
the rows, the namespaces not managed, the other quotas, the companion LimitRanges, the budgets),
``-o wide`` and the ``--at-risk`` view, the last two in plain tabwriter-style columns
(:func:`dynquota.cli.output.columns`), and the header's line for a stalled quota controller
(:func:`stall_lines`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from dynquota.cli.output import columns
from dynquota.cli.risk import Risk, at_risk, summary
from dynquota.names import MANAGED_LIMIT_RANGE_NAME
from dynquota.operator.plan_model import BudgetPlan, Plan, PlanRow, shown

__all__ = ["format_budgets", "format_plan", "format_table", "plan_text", "stall_lines"]


def format_table(rows: list[PlanRow]) -> str:
    """The plan as an aligned text table (``-`` for unknown values; quantities with their
    unit, ``1500m``, ``4Gi``)."""
    header = ("NAMESPACE", "RESOURCE", "TALLY", "STATUS.USED", "HARD", "TARGET", "NEXT", "WHY")
    table: list[tuple[str, ...]] = [header] + [
        (
            r.namespace,
            r.resource,
            *(shown(r.resource, v) for v in (r.tally, r.status_used, r.hard, r.target)),
            r.next,
            r.why,
        )
        for r in rows
    ]
    return _columns(table)


def format_plan(plan: Plan, header: Iterable[str] = ()) -> str:
    """The plan as text: ``header`` lines, the table of :func:`format_table`, then the
    namespaces not managed or not enforced (``NAMESPACE  WHY``), the other quotas
    (``NAMESPACE  QUOTA  HARD``, keys sorted), the companion LimitRanges (``NAMESPACE
    STATE  DEFAULTS  WHY``), the budgets and the namespaces in the APF tarpit (``NAMESPACE
    WHY``), each section only when it has lines."""
    parts = [*header, format_table(plan.rows)]
    if plan.not_managed:
        parts += [
            "",
            f"not managed or not enforced ({len(plan.not_managed)} namespaces):",
            _columns([("NAMESPACE", "WHY"), *((n.namespace, n.why) for n in plan.not_managed)]),
        ]
    if plan.other_quotas:
        parts += [
            "",
            "other quotas (not dynquota's; admission checks a create against every quota of "
            "the namespace: the lowest limit wins):",
            _columns(
                [
                    ("NAMESPACE", "QUOTA", "HARD"),
                    *(
                        (
                            q.namespace,
                            q.name,
                            ", ".join(f"{k}={v}" for k, v in sorted(q.hard.items())) or "-",
                        )
                        for q in plan.other_quotas
                    ),
                ]
            ),
        ]
    if plan.companions:
        parts += [
            "",
            f"companion LimitRanges ({MANAGED_LIMIT_RANGE_NAME}; they give the compute keys "
            "their default requests):",
            _columns(
                [
                    ("NAMESPACE", "STATE", "DEFAULTS", "WHY"),
                    *((c.namespace, c.state, c.defaults, c.why) for c in plan.companions),
                ]
            ),
        ]
    if plan.budgets:
        parts += ["", *format_budgets(plan.budgets)]
    if plan.tarpitted:
        parts += [
            "",
            f"in the APF tarpit ({len(plan.tarpitted)} namespaces; writeRate: their tenants' "
            "writes of the tarpit's resources run on a few seats, 429 when they are taken):",
            _columns([("NAMESPACE", "WHY"), *((t.namespace, t.why) for t in plan.tarpitted)]),
        ]
    return "\n".join(parts)


def format_budgets(budgets: Iterable[BudgetPlan]) -> list[str]:
    """The budgets as text lines: per budget and key one line with the budget's hard, the
    granted sum of commitments, the usage and the free room, then its members' slices
    (``NAMESPACE  GRANT  ENFORCED  USED  DEMAND  NEXT  NOTE``); an invalid budget and the
    namespaces whose slices it holds in a sentence each."""
    lines = [
        "budgets (granted: the sum of the members' max(spec.hard, status.hard, used); "
        "NEXT: the slice the budget's next pass writes):"
    ]
    for budget in budgets:
        if budget.error:
            lines.append(f"budget {budget.name}: invalid: {budget.error}")
        for k in budget.keys:
            key = k.key
            lines.append(
                f"budget {budget.name} {key}: hard {shown(key, k.hard)}, granted "
                f"{shown(key, k.granted)}, used {shown(key, k.used)}, free "
                f"{_signed(key, k.free)}; {k.state}"
            )
            table: list[tuple[str, ...]] = [
                ("  NAMESPACE", "GRANT", "ENFORCED", "USED", "DEMAND", "NEXT", "NOTE")
            ]
            table += [
                (
                    f"  {m.namespace}",
                    *(shown(key, v) for v in (m.grant, m.enforced, m.used, m.demand, m.next)),
                    m.note,
                )
                for m in k.members
            ]
            if k.members:
                lines.append(_columns(table).rstrip())
        if budget.leaving:
            lines.append(
                f"budget {budget.name}: holding the slices of {', '.join(budget.leaving)} "
                "(their quota still carries its mark; released when the mark changes)"
            )
    return lines


def _signed(resource: str, value: int) -> str:
    """:func:`~dynquota.operator.plan_model.shown` with a sign for a negative value (over the
    budget)."""
    return f"-{shown(resource, -value)}" if value < 0 else shown(resource, value)


def _columns(table: list[tuple[str, ...]]) -> str:
    """Aligned columns, two spaces apart; the last column is not padded (unlike
    :func:`~dynquota.cli.output.columns`, trailing spaces of a line are kept)."""
    widths = [max(len(line[i]) for line in table) for i in range(len(table[0]) - 1)]
    return "\n".join(
        "  ".join(cell.ljust(widths[i]) for i, cell in enumerate(line[:-1])) + "  " + line[-1]
        for line in table
    )


def _use(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def _wide(rows: Sequence[PlanRow]) -> str:
    """The rows with USE (usage / hard) and RISK (:mod:`dynquota.cli.risk`, ``-`` when none)
    before NEXT."""
    risks = {(r.row.namespace, r.row.resource): r for r in at_risk(rows, ())}
    head = ("NAMESPACE", "RESOURCE", "TALLY", "STATUS.USED", "HARD", "TARGET", "USE", "RISK")
    table: list[tuple[str, ...]] = [(*head, "NEXT", "WHY")]
    for r in rows:
        risk = risks.get((r.namespace, r.resource))
        used = [v for v in (r.tally, r.status_used) if v is not None]
        use = max(used) / r.hard if used and r.hard else None
        table.append(
            (
                r.namespace,
                r.resource,
                *(shown(r.resource, v) for v in (r.tally, r.status_used, r.hard, r.target)),
                _use(use),
                risk.risk if risk is not None else "-",
                r.next,
                r.why,
            )
        )
    return columns(table)


def _risk_table(risks: Sequence[Risk]) -> str:
    """``NAMESPACE RESOURCE RISK USE USED HARD TARGET NEXT WHY``, one line per key at risk."""
    table: list[tuple[str, ...]] = [
        ("NAMESPACE", "RESOURCE", "RISK", "USE", "USED", "HARD", "TARGET", "NEXT", "WHY")
    ]
    for risk in risks:
        r = risk.row
        used = [v for v in (r.tally, r.status_used) if v is not None]
        table.append(
            (
                r.namespace,
                r.resource,
                risk.risk,
                _use(risk.use),
                shown(r.resource, max(used) if used else None),
                shown(r.resource, r.hard),
                shown(r.resource, r.target),
                r.next,
                r.why,
            )
        )
    return columns(table)


def plan_text(
    plan: Plan,
    header: Sequence[str],
    *,
    wide: bool = False,
    risks: Sequence[Risk] | None = None,
    shown_namespaces: int = 0,
) -> str:
    """The plan as text: ``header`` lines, then with ``risks`` (``--at-risk``) only their
    table and the summary line (``shown_namespaces``: how many the plan covered); else
    :func:`format_plan`, its first table with USE and RISK columns
    when ``wide``."""
    if risks is not None:
        body = [_risk_table(risks)] if risks else []
        return "\n".join([*header, *body, summary(risks, shown_namespaces)])
    if not wide:
        return format_plan(plan, header)
    rest = format_plan(dataclasses.replace(plan, rows=[])).split("\n", 1)
    return "\n".join([*header, _wide(plan.rows), *rest[1:]])


def stall_lines(policies: Iterable[Mapping[str, Any]]) -> list[str]:
    """The plan's line for a stalled quota controller: from the first policy whose
    ``QuotaControllerStalled`` condition is ``True`` (the operator's signals: the plan reads
    one snapshot and cannot time a copy or a recount itself); ``[]`` when none says so."""
    for policy in policies:
        for condition in (policy.get("status") or {}).get("conditions") or []:
            if (
                condition.get("type") == "QuotaControllerStalled"
                and condition.get("status") == "True"
            ):
                return [
                    f"quota controller: STALLED ({condition.get('reason', '')}, since "
                    f"{condition.get('lastTransitionTime', '?')}): {condition.get('message', '')}"
                ]
    return []
