"""What ``dynquota plan`` reports (:func:`dynquota.operator.plan.build_plan`), as plain frozen
dataclasses: a :class:`Plan` of :class:`PlanRow` per namespace and quota key, the namespaces
:class:`NotManaged`, the :class:`OtherQuota` of each namespace, the :class:`Companion`
LimitRanges and one :class:`BudgetPlan` per QuotaBudget; and :func:`shown`, a value of the plan
in its key's unit as the plan's text shows it. Pure.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from dynquota.policy import QuotaKeyError, unit_for

__all__ = [
    "BudgetKeyPlan",
    "BudgetMember",
    "BudgetPlan",
    "Companion",
    "NotManaged",
    "OtherQuota",
    "Plan",
    "PlanRow",
    "Tarpitted",
    "shown",
]


@dataclass(frozen=True)
class PlanRow:
    """One line of the plan, one quota key. Values are ints in the key's unit (objects,
    millicores, bytes: :func:`dynquota.policy.unit_for`; ``None``: unknown/absent; ``tally``
    only for ``pods``/``configmaps``); ``next`` is the action (``create``, ``patch``,
    ``delete``, ``nothing``; ``held`` for a compute key the operator does not add because the
    namespace has no LimitRange default for it, ``NeedsDefaultRequests``, or for an
    un-managing delete the brake would hold) and ``why`` the reason."""

    namespace: str
    resource: str
    tally: int | None
    status_used: int | None
    hard: int | None
    target: int | None
    next: str
    why: str


@dataclass(frozen=True)
class NotManaged:
    """A namespace dynquota does not manage, or manages without enforcing (dry run), and
    ``why`` (``excluded: ...``, ``opted out: ...``, ``no policy matches ...``, ``dry run:
    ...``)."""

    namespace: str
    why: str


@dataclass(frozen=True)
class OtherQuota:
    """A ResourceQuota in ``namespace`` that is not dynquota's managed quota: ``name`` and
    its ``spec.hard`` (quantity strings as stored)."""

    namespace: str
    name: str
    hard: Mapping[str, str]


@dataclass(frozen=True)
class Companion:
    """The companion LimitRange ``dynquota`` of ``namespace``: ``state`` is ``in place``,
    ``create``, ``patch`` (what the operator would write), ``not written`` (dry run, kill
    switch), ``foreign`` (one named ``dynquota`` without the managed-by label: never
    written) or ``left over`` (dynquota's, but no policy asks for it here: dynquota never
    deletes it); ``defaults`` the item as ``defaultRequest cpu=100m; default cpu=1`` (the
    policy's, or the stored one's when left over) and ``why`` a sentence."""

    namespace: str
    state: str
    defaults: str
    why: str


@dataclass(frozen=True)
class Tarpitted:
    """A namespace the tarpit FlowSchema lists (the write-rate governor holds it: its
    tenants' writes of the tarpit's resources get few seats and 429s) and ``why`` (the
    governing policy's ``writeRate``, or that none governs it now)."""

    namespace: str
    why: str


@dataclass(frozen=True)
class BudgetMember:
    """One member namespace's slice of one budgeted key, in the key's unit (``None``:
    unknown/absent): ``grant`` its ``spec.hard``, ``enforced`` its ``status.hard``, ``used``
    what the budget counts (``status.used``, or the tally when larger), ``demand`` the hard its
    policy would set without the budget, ``next`` the slice the budget's next pass writes
    (``None``: unchanged) and ``note`` (``at risk: not enforced``, ``usage unknown: held``,
    ``waiting for N``, or empty)."""

    namespace: str
    grant: int | None
    enforced: int | None
    used: int | None
    demand: int
    next: int | None
    note: str


@dataclass(frozen=True)
class BudgetKeyPlan:
    """One key of a budget, in the key's unit: ``hard`` the budget, ``granted`` the sum of the
    members' commitments ``max(spec.hard, status.hard, used)`` now, ``granted_after`` the same
    once the next pass's writes land (what the budget's ``status.granted`` reports), ``used``
    the members' usage summed, ``free`` ``hard - granted`` (negative: over), ``state``
    (``OverBudget``, ``AtRisk``, ``Rebalancing``, ``Waiting``, ``Settled``) and ``members``,
    sorted."""

    key: str
    hard: int
    granted: int
    granted_after: int
    used: int
    free: int
    state: str
    members: tuple[BudgetMember, ...]


@dataclass(frozen=True)
class BudgetPlan:
    """One QuotaBudget: ``error`` why it is invalid (empty: valid), ``keys`` per budgeted key
    (none when invalid) and ``leaving``: the namespaces whose quota still carries its mark but
    which are no members (relabelled, no policy): it holds their slices until the mark
    changes."""

    name: str
    error: str
    keys: tuple[BudgetKeyPlan, ...]
    leaving: tuple[str, ...]

    def only(self, namespaces: set[str]) -> BudgetPlan | None:
        """The budget with only the members and leaving namespaces in ``namespaces``, or
        ``None`` when none is left (its totals stay the whole budget's)."""
        keys = tuple(
            dataclasses.replace(k, members=tuple(m for m in k.members if m.namespace in namespaces))
            for k in self.keys
        )
        left = tuple(n for n in self.leaving if n in namespaces)
        if not left and not any(k.members for k in keys):
            return None
        return BudgetPlan(self.name, self.error, keys, left)


@dataclass
class Plan:
    """The whole plan: ``rows`` (namespaces the operator sizes, freezes or removes a quota
    from), ``not_managed``, ``other_quotas`` and ``companions`` (companion LimitRanges asked
    for or left over), each sorted by namespace, ``budgets`` (by name) and ``tarpitted`` (the
    namespaces in the write-rate governor's APF tarpit, sorted)."""

    rows: list[PlanRow]
    not_managed: list[NotManaged]
    other_quotas: list[OtherQuota]
    companions: list[Companion] = field(default_factory=list)
    budgets: list[BudgetPlan] = field(default_factory=list)
    tarpitted: list[Tarpitted] = field(default_factory=list)

    def only(self, namespaces: Iterable[str]) -> Plan:
        """The plan restricted to ``namespaces`` (budgets: those with a member or a held
        namespace among them, showing only those)."""
        keep = set(namespaces)
        return Plan(
            [r for r in self.rows if r.namespace in keep],
            [n for n in self.not_managed if n.namespace in keep],
            [q for q in self.other_quotas if q.namespace in keep],
            [c for c in self.companions if c.namespace in keep],
            [b for b in (b.only(keep) for b in self.budgets) if b is not None],
            [t for t in self.tarpitted if t.namespace in keep],
        )


def shown(resource: str, value: int | None) -> str:
    """A value of the plan in ``resource``'s unit as quantity text (``1500m``, ``4Gi``, ``7``;
    ``-``: unknown), as the plan's table shows it."""
    if value is None:
        return "-"
    try:
        return unit_for(resource).text(value)
    except QuotaKeyError:
        return str(value)
