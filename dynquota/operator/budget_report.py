"""A QuotaBudget's status, Events and metrics after each pass (issue #13, ``docs/budgets.md``).

:class:`BudgetReporter` turns one pass (:class:`PassResult`) into the budget's status (a JSON
merge-patch of the status subresource, only when it changed): ``used``, ``granted`` (the sum of
commitments after the pass), ``free``, the slices per namespace and the
conditions ``Valid``, ``OverBudget``, ``AtRisk``, ``Rebalancing``, ``Guarded``; the Events
``Rebalanced``, ``OverBudget`` (when a key goes over) and ``BudgetInvalid``; and the
``dynquota_budget_*`` metrics. ``Ready``/``Reconciling``/``Stalled`` also say when a write of a
member's quota is refused or failing (:mod:`dynquota.operator.write_failures`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from dynquota._k8s.errors import NotFoundError
from dynquota.kube.events import ObjectRef
from dynquota.kube.quotas import MANAGED_BY_LABEL, QuotaSnapshot
from dynquota.metrics import Metrics
from dynquota.names import API_VERSION, BUDGET_KIND, EventReason
from dynquota.operator.budgets import BudgetRecord, Budgets
from dynquota.operator.ports import BudgetStatusSink
from dynquota.operator.reporting import Reporter
from dynquota.operator.write_failures import WriteFailures
from dynquota.operator.write_gate import STATUS, WriteGate
from dynquota.policy import hard_text, unit_for
from dynquota.policy.applied import foreign_why
from dynquota.policy.budget import Allocation
from dynquota.policy.readiness import budget_summary, set_readiness
from dynquota.policy.status import now_rfc3339, set_condition

__all__ = ["STATUS_INTERVAL", "BudgetReporter", "PassResult"]

STATUS_INTERVAL = 1.0
"""Seconds between two status writes of one budget when only its figures changed (used,
granted, slices): under load every pass changes them."""


@dataclass
class PassResult:
    """What one pass did: ``writes`` (namespace -> key -> value written, in units),
    ``allocations`` per key, ``again``: seconds until the next pass is due without a wake-up
    (0: at once, e.g. after a 409; ``None``: only when woken)."""

    writes: dict[str, dict[str, int]] = field(default_factory=dict)
    allocations: dict[str, Allocation] = field(default_factory=dict)
    again: float | None = None
    leaving: list[str] = field(default_factory=list)
    """Namespaces that left the budget and whose slice it still holds (sorted)."""


def _text(key: str, units: int) -> str:
    text = hard_text({key: abs(units)})[key]
    return f"-{text}" if units < 0 else text


class BudgetReporter:
    """Reports each pass of ``budgets`` (see the module docs).

    Args:
        budgets: the budgets (their records, members' demands and unsized keys).
        reporter: the Events.
        write_gate: asked before a status write (:data:`~dynquota.operator.write_gate.STATUS`).
        status: the budgets' status writes (``None``: none written; unit tests).
        metrics: the ``dynquota_budget_*`` metrics.
        failures: the failing writes of the members' quotas (``None``: none known).
    """

    def __init__(
        self,
        budgets: Budgets,
        *,
        reporter: Reporter,
        write_gate: WriteGate,
        status: BudgetStatusSink | None,
        metrics: Metrics,
        failures: WriteFailures | None = None,
    ) -> None:
        self.budgets = budgets
        self.failures = failures
        self.events = reporter
        self.write_gate = write_gate
        self.status = status
        self.metrics = metrics
        self._over: dict[str, frozenset[str]] = {}
        self._written: dict[str, float] = {}

    def forget(self, name: str) -> None:
        """Budget ``name`` was deleted."""
        self._over.pop(name, None)
        self._written.pop(name, None)
        self.metrics.forget_budget(name)

    async def report(
        self,
        record: BudgetRecord,
        result: PassResult,
        members: list[str],
        guarded: tuple[str, str, str] | None,
        listed: Mapping[str, QuotaSnapshot] | None = None,
        foreign: Mapping[str, QuotaSnapshot] | None = None,
    ) -> None:
        """Write the status, Events and metrics of one pass of ``record`` over ``members``;
        ``guarded``: its ``Guarded`` condition, ``(status, reason, message)``
        (:func:`~dynquota.policy.budget_guard.guarded_condition`; ``None`` for an invalid
        spec); ``listed``: the pass's
        LIST (namespace -> quota); ``foreign``: members whose quota named ``dynquota`` is not
        dynquota's (no managed-by label: never written, so their slice is not enforced)."""
        events = self.events
        ref = ObjectRef(API_VERSION, BUDGET_KIND, record.name, "", record.uid)
        conditions = [dict(c) for c in record.status.get("conditions") or []]
        stamp = now_rfc3339()
        gen = record.generation
        status: dict[str, Any] = {"observedGeneration": gen}
        if record.spec is None:
            set_condition(conditions, "Valid", "False", "Invalid", record.error, gen, stamp)
            await events.warn_once(
                ref, EventReason.BUDGET_INVALID, f"{record.error}; it has no members: namespaces "
                "labelled with it are sized by their own policy",
                key=f"budget/{record.name}", cause=str(gen),
            )  # fmt: skip
            set_readiness(conditions, "QuotaBudget", gen, stamp)
            status["conditions"] = conditions
            await self._patch_status(record, status)
            return
        set_condition(conditions, "Valid", "True", "Valid", "the spec is valid", gen, stamp)
        if guarded is not None:
            set_condition(conditions, "Guarded", *guarded, gen, stamp)
        allocations = result.allocations
        unsized = {
            ns: sorted(keys)
            for ns in members
            if (keys := self.budgets.unsized.get(ns, frozenset()) & set(allocations))
        }
        if unsized:
            await events.warn_once(
                ref, EventReason.BUDGET_KEY_NOT_SIZED,
                "the DynamicQuotaPolicy of "
                + "; ".join(f"{ns} does not size {', '.join(k)}" for ns, k in unsized.items())
                + ": each such namespace asks for an even share of the budget (hard / members) "
                "instead of its usage plus a buffer; add the key to its policy's resources",
                key=f"budget/{record.name}", cause=repr(sorted(unsized.items())),
            )  # fmt: skip
        over = frozenset(k for k, a in allocations.items() if a.over_budget)
        at_risk = sorted({ns for a in allocations.values() for ns in a.at_risk})
        waiting = sorted({ns for a in allocations.values() for ns in a.waiting})
        set_condition(
            conditions, "OverBudget", "True" if over else "False",
            "OverBudget" if over else "WithinBudget",
            f"over budget for {', '.join(sorted(over))}: nothing is granted until usage falls"
            if over else "every key is within the budget", gen, stamp,
        )  # fmt: skip
        set_condition(
            conditions, "AtRisk", "True" if at_risk else "False",
            ("ForeignQuota" if _foreign_of(at_risk, foreign) else "Unbounded") if at_risk
            else "Bounded",
            _at_risk_message(at_risk, foreign) if at_risk else "every slice is enforced",
            gen, stamp,
        )  # fmt: skip
        held = (
            f"; holding the slices of {', '.join(result.leaving)} (no members now: relabelled "
            "or without a policy) until their quota is re-sized under their own policy"
            if result.leaving
            else ""
        )
        # a shrink written but not yet in status.hard frees nothing: only the quota controller
        # copies it there (if it is down, nothing is freed and nothing grows: say so)
        unobserved = _unobserved_shrinks(listed, members, allocations)
        observe = (
            f"; room from the shrinks of {', '.join(unobserved)} is not in status.hard yet (the "
            "quota controller copies spec.hard there; while kube-controller-manager is down "
            "nothing is freed and nothing grows)"
            if unobserved and waiting
            else ""
        )
        if result.writes:
            reason = "SlicesWritten"
        elif observe:
            reason = "WaitingForQuotaController"
        else:
            reason = "Waiting" if waiting or held else "Settled"
        set_condition(
            conditions, "Rebalancing", "True" if result.writes else "False", reason,
            (f"slices written for {', '.join(sorted(result.writes))}" if result.writes
             else (f"demand not yet granted: {', '.join(waiting)}" if waiting else "settled"))
            + observe + held,
            gen, stamp,
        )  # fmt: skip
        failing = self.failures.of(members) if self.failures is not None else []
        set_readiness(conditions, "QuotaBudget", gen, stamp, failing)
        if over and over != self._over.get(record.name, frozenset()):
            message = "; ".join(
                f"{k}: committed {_text(k, allocations[k].committed)} of "
                f"{_text(k, allocations[k].budget)}"
                for k in sorted(over)
            )
            await events.emit(
                ref, "Warning", EventReason.OVER_BUDGET,
                f"{message}: nothing is granted, no slice shrunk below its usage",
            )  # fmt: skip
        self._over[record.name] = over
        if result.writes:
            self.metrics.budget_rebalances.labels(record.name).inc()
            parts = []
            for key, allocation in sorted(allocations.items()):
                moved = [
                    f"{ns} {_old(listed, ns, key)}->{_text(key, vals[key])}"
                    for ns, vals in sorted(result.writes.items())
                    if key in vals
                ]
                if moved:
                    parts.append(
                        f"{key}: {', '.join(moved)} (budget {_text(key, allocation.budget)}, "
                        f"committed {_text(key, allocation.committed_after)})"
                    )
            await events.emit(ref, "Normal", EventReason.REBALANCED, "; ".join(parts))
        namespaces: dict[str, Any] = {}
        used_sum: dict[str, int] = {}
        for ns in members:
            quota = (listed or {}).get(ns)
            grant, used, demand = {}, {}, {}
            for key in allocations:
                value = result.writes.get(ns, {}).get(key)
                if value is None and quota is not None:
                    value = quota.hard_int(key)
                if value is not None:
                    grant[key] = _text(key, value)
                u = quota.used_int(key) if quota is not None else None
                if u is not None:
                    used[key] = _text(key, u)
                    used_sum[key] = used_sum.get(key, 0) + u
                d = self.budgets.demand_for(ns, key, allocations[key].budget, len(members))
                if d is not None:
                    demand[key] = _text(key, d)
            namespaces[ns] = {"grant": grant, "used": used, "demand": demand}
        for ns in record.status.get("namespaces") or {}:
            namespaces.setdefault(ns, None)  # left the budget: removed by the merge-patch
        for key, allocation in allocations.items():
            base = unit_for(key).base
            self.metrics.budget_hard.labels(record.name, key).set(base(allocation.budget))
            self.metrics.budget_granted.labels(record.name, key).set(
                base(allocation.committed_after)
            )
            self.metrics.budget_used.labels(record.name, key).set(base(used_sum.get(key, 0)))
        status.update(
            summary=budget_summary(
                {k: a.budget for k, a in allocations.items()},
                {k: used_sum.get(k, 0) for k in allocations},
                {k: a.free for k, a in allocations.items()},
            ),
            namespaceCount=len(members),
            used={k: _text(k, used_sum.get(k, 0)) for k in allocations},
            granted={k: _text(k, a.committed_after) for k, a in allocations.items()},
            free={k: _text(k, a.free) for k, a in allocations.items()},
            namespaces=namespaces,
            conditions=conditions,
        )
        if await self._patch_status(record, status) and result.again is None:
            result.again = STATUS_INTERVAL  # the waiting figures are written by a later pass

    async def _patch_status(self, record: BudgetRecord, status: dict[str, Any]) -> bool:
        """Merge-patch ``status`` if it differs from the stored one; a change of the figures
        alone (conditions and generation as stored) waits until :data:`STATUS_INTERVAL`
        seconds after this budget's last status write. Returns whether a write waits."""
        old = record.status
        same_conditions = _same_conditions(
            old.get("conditions") or [], status.get("conditions") or []
        ) and old.get("observedGeneration") == status.get("observedGeneration")
        same = same_conditions and all(
            old.get(k) == v for k, v in status.items() if k not in ("namespaces", "conditions")
        )
        same = same and {k: v for k, v in (status.get("namespaces") or {}).items() if v} == (
            old.get("namespaces") or {}
        )
        if same or self.status is None or not self.write_gate.may(STATUS):
            return False
        now = time.monotonic()
        if same_conditions and now - self._written.get(record.name, -math.inf) < STATUS_INTERVAL:
            return True  # figures only, written a moment ago: under load, not on every pass
        self._written[record.name] = now
        try:
            await self.status.patch_budget_status(record.name, status)
        except NotFoundError:
            return False  # deleted meanwhile
        merged = {**old, **status}
        merged["namespaces"] = {k: v for k, v in (status.get("namespaces") or {}).items() if v}
        self.budgets.status_written(record, merged)
        return False


def _foreign_of(
    at_risk: list[str], foreign: Mapping[str, QuotaSnapshot] | None
) -> dict[str, QuotaSnapshot]:
    return {ns: q for ns in at_risk if (q := (foreign or {}).get(ns)) is not None}


def _at_risk_message(at_risk: list[str], foreign: Mapping[str, QuotaSnapshot] | None) -> str:
    """The ``AtRisk=True`` message: the members whose slice is not enforced yet, and those
    whose quota ``dynquota`` is foreign (dynquota writes no slice there until it is gone)."""
    others = _foreign_of(at_risk, foreign)
    parts = []
    unbounded = [ns for ns in at_risk if ns not in others]
    if unbounded:
        parts.append(f"not enforced yet (no quota or key in status.hard): {', '.join(unbounded)}")
    for ns, quota in others.items():
        parts.append(
            f"not enforced by dynquota in {ns}: its ResourceQuota dynquota is not dynquota's "
            f"({foreign_why(quota.labels.get(MANAGED_BY_LABEL))}), so dynquota leaves it alone "
            "and writes no slice there (Warning ForeignQuota); delete that quota for dynquota "
            "to create the slice"
        )
    return "; ".join(parts) + "; nothing is granted meanwhile"


def _same_conditions(old: list[dict[str, Any]], new: list[dict[str, Any]]) -> bool:
    def strip(items: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
        return sorted(
            (c.get("type"), c.get("status"), c.get("reason"), c.get("message")) for c in items
        )

    return strip(old) == strip(new)


def _unobserved_shrinks(
    listed: Mapping[str, QuotaSnapshot] | None,
    members: list[str],
    allocations: Mapping[str, Allocation],
) -> list[str]:
    """The members whose budgeted ``spec.hard`` is below their ``status.hard`` for some key: a
    shrink written that the quota controller has not copied yet (sorted as ``members``)."""
    found = []
    for ns in members:
        quota = (listed or {}).get(ns)
        if quota is None:
            continue
        for key in allocations:
            spec, enforced = quota.hard_int(key), quota.status_hard_int(key)
            if spec is not None and enforced is not None and spec < enforced:
                found.append(ns)
                break
    return found


def _old(listed: Mapping[str, QuotaSnapshot] | None, ns: str, key: str) -> str:
    quota = (listed or {}).get(ns)
    units = quota.hard_int(key) if quota is not None else None
    return "absent" if units is None else unit_for(key).text(units)
