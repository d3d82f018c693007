"""Tenant budgets in the operator (issues #13 and #22, ``docs/budgets.md``): which namespace
belongs to which QuotaBudget, what the per-namespace reconcile may write, and the budget mark.

Membership is one namespace label: a namespace labelled ``dynquota.io/budget=<B>`` is a
*member* of B when B exists and is valid and a DynamicQuotaPolicy manages the namespace (not in
dry run). A member's budgeted keys are written only by B's serialized task
(:mod:`dynquota.operator.budget_task`), which decides from one LIST of the quotas. The
per-namespace reconcile still decides the whole quota; :meth:`Budgets.shape` then hands the
hard it would set for each budgeted key to the budget as the namespace's *demand* and takes
those keys out of the write (the reconcile keeps writing the other keys).

The *mark* (annotation ``dynquota.io/budget`` on the managed quota) is what the chart's budget
guard compares with the namespace's label. The reconcile never writes a mark other than the
label (:func:`mark_as_label`): a namespace labelled with a budget that does not exist (or is
invalid) is sized by its own policy and marked with the label's value (no slice: the guard
admits); an unlabelled one loses its mark. A member's mark is written by its budget's task
only, once its slice is enforced, so a namespace relabelled B -> C keeps B's mark (B holds its
room, the guard refuses creates) until C's slice is in force.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from pydantic import ValidationError

from dynquota.kube.quotas import QuotaSnapshot
from dynquota.names import BUDGET_LABEL, TRACKED_RESOURCES
from dynquota.operator.budget_shape import mark_as_label, strip_keys
from dynquota.policy import Decision, Governance, NamespaceInfo, describe_validation_error
from dynquota.policy.budget import Slice, commitment
from dynquota.policy.budget_spec import QuotaBudgetSpec
from dynquota.policy.state import (
    BUDGET,
)
from dynquota.settings import Settings

__all__ = [
    "BudgetRecord",
    "Budgets",
    "Slicing",
    "leaving",
    "member_slice",
    "read_budget",
    "reserved",
]

log = logging.getLogger("dynquota.operator")


@dataclass(frozen=True)
class BudgetRecord:
    """One stored QuotaBudget as the operator read it.

    ``spec``: the validated spec, ``None`` if invalid (``error`` says why; an invalid budget
    has no members). ``keys``: the keys of its ``hard`` as stored, kept even when the spec is
    invalid. ``status``: its stored status.
    """

    name: str
    uid: str
    generation: int
    spec: QuotaBudgetSpec | None
    error: str
    keys: frozenset[str]
    status: Mapping[str, Any]


def read_budget(obj: Mapping[str, Any]) -> BudgetRecord:
    """A QuotaBudget (decoded JSON) as a :class:`BudgetRecord`. A ``spec.namespaceSelector``
    (v0.2 builds from main; the CRD of a Helm upgrade that did not apply ``crds/`` still stores
    it) is ignored: the namespace label says which budget a namespace is in. Pure; never
    raises."""
    meta = obj.get("metadata") or {}
    raw = {k: v for k, v in (obj.get("spec") or {}).items() if k != "namespaceSelector"}
    spec: QuotaBudgetSpec | None = None
    error = ""
    try:
        spec = QuotaBudgetSpec.model_validate(raw)
    except ValidationError as exc:
        # one clear line per problem, as a policy's (no pydantic "Value error," text)
        error = describe_validation_error(exc)
    hard = raw.get("hard")
    keys = frozenset(str(k) for k in hard) if isinstance(hard, Mapping) else frozenset()
    return BudgetRecord(
        name=str(meta.get("name") or ""),
        uid=str(meta.get("uid") or ""),
        generation=int(meta.get("generation") or 0),
        spec=spec,
        error=error,
        keys=keys,
        status=dict(obj.get("status") or {}),
    )


def member_slice(
    namespace: str,
    key: str,
    quota: QuotaSnapshot | None,
    tally: int | None,
    demand: int | None,
    step: int = 1,
) -> Slice:
    """The :class:`~dynquota.policy.budget.Slice` of member ``namespace`` for budgeted ``key``
    as a budget pass builds it (one source for ``BudgetTasks._slice`` and ``plan``):
    ``spec_hard``/``status_hard``/``used`` from its managed ``quota`` (``None``: none); for a
    tracked key (``pods``, ``configmaps``) ``used`` is the larger of ``status.used`` and the
    informers' ``tally`` (objects; ``None``: no tally); ``demand`` is what its policy would
    set (:attr:`Budgets.demand`), or, not decided yet, what it has (``max(spec.hard, used)``);
    ``step``: its profile's ``minimumHeadroom`` (:meth:`Budgets.step_for`). All in the key's
    unit. Pure."""
    spec_hard = status_hard = used = None
    if quota is not None:
        spec_hard = quota.hard_int(key)
        status_hard = quota.status_hard_int(key)
        used = quota.used_int(key)
    if key in TRACKED_RESOURCES and tally is not None:
        used = max(used or 0, tally)
    if demand is None:  # not decided yet: asks for what it has
        demand = max(spec_hard or 0, used or 0)
    return Slice(namespace, spec_hard, status_hard, used, demand, max(step, 1))


def leaving(
    budget: str, members: Collection[str], quotas: Mapping[str, QuotaSnapshot]
) -> list[str]:
    """The namespaces whose managed quota in ``quotas`` (namespace -> quota, one LIST) still
    carries ``budget``'s mark (:data:`~dynquota.policy.state.BUDGET`) but which are not in
    ``members``: they left it (label, policy) and neither their reconcile nor their new
    budget's task has rewritten the mark yet, so the budget still holds their slices.
    Sorted. Pure."""
    return sorted(
        ns for ns, q in quotas.items() if q.annotations.get(BUDGET) == budget and ns not in members
    )


def reserved(key: str, namespaces: Iterable[str], quotas: Mapping[str, QuotaSnapshot]) -> int:
    """What the slices of ``namespaces`` (see :func:`leaving`) hold of ``key``: the sum of
    ``max(spec.hard, status.hard, status.used)`` (units of the key). Pure."""
    return sum(commitment(member_slice(ns, key, quotas[ns], None, 0)) for ns in namespaces)


@dataclass(frozen=True)
class Slicing:
    """How budgets bear on one namespace.

    ``budget``: the budget it is a member of (``None``: none). ``keys``: the quota keys the
    per-namespace reconcile must not write (the member's budgeted keys). ``label``: the value
    of its ``dynquota.io/budget`` label (``None``: unlabelled), which the reconcile's mark
    follows when it is no member.
    """

    budget: str | None = None
    keys: frozenset[str] = frozenset()
    label: str | None = None


NOT_BUDGETED = Slicing()


class Budgets:
    """The budgets one operator replica knows, their members' demands, and the reconcile's hook.

    Args:
        settings: the operator settings (its global dry run: no member).
        namespaces: the known namespaces (a live mapping: the cluster view's).
        governance: how a namespace is governed now.
        requeue_all: queues every known namespace when membership may have changed
            (``None``: nothing is queued, as in ``dynquota plan``).

    Feed it with :meth:`on_budget` and :meth:`on_budgets_synced` (an informer) or
    :meth:`on_budget_list`; the reconcile calls
    :meth:`shape`; :class:`~dynquota.operator.budget_task.BudgetTasks` runs the passes.
    """

    def __init__(
        self,
        settings: Settings,
        namespaces: Mapping[str, NamespaceInfo],
        governance: Callable[[str], Governance | None],
        requeue_all: Callable[[], None] | None = None,
    ) -> None:
        self.settings = settings
        self.namespaces = namespaces
        self.governance = governance
        self.requeue_all = requeue_all
        self.records: dict[str, BudgetRecord] = {}
        self.listed = False
        """Whether a consistent LIST of the budgets succeeded (or their CRD is not served):
        until then no quota write is made (a budgeted key could be written past its budget)."""
        self.demand: dict[str, dict[str, int]] = {}
        """Namespace -> budgeted key -> the hard its policy would set (units of the key)."""
        self.unsized: dict[str, frozenset[str]] = {}
        """Member namespace -> its budgeted keys its policy does not size (no demand of its
        own: :meth:`demand_for` gives it an even share of the budget)."""
        self._member_of: dict[str, str | None] = {}
        self.on_wake: Callable[[str], None] | None = None
        """Called with a budget name when its task should run a pass (the assembly wires it
        to :meth:`~dynquota.operator.budget_task.BudgetTasks.wake`)."""
        self.on_records: Callable[[], None] | None = None
        """Called after the set of budgets changed (the assembly wires it to
        :meth:`~dynquota.operator.budget_task.BudgetTasks.sync`)."""
        self.on_status: Callable[[str], None] | None = None
        """Called with a budget's name when its stored status changed (the runtime wires it to
        the tenant projections' :meth:`~dynquota.operator.applied.AppliedWriter.budget_status`)."""

    # -- watches --------------------------------------------------------------------------------

    def on_budget(self, event_type: str | None, obj: Mapping[str, Any]) -> None:
        """A QuotaBudget event (``None``: from a listing)."""
        name = str((obj.get("metadata") or {}).get("name") or "")
        if not name:
            return
        old = self.records.get(name)
        if event_type == "DELETED":
            if self.records.pop(name, None) is not None:
                self._changed(name)
            return
        record = read_budget(obj)
        self.records[name] = record
        if old is not None and old.status != record.status:
            self._status_changed(name)
        if old is None or (old.spec, old.keys) != (record.spec, record.keys):
            if record.spec is None:
                log.warning("QuotaBudget %s is invalid: %s", name, record.error)
            self._changed(name)

    def on_budget_list(self, items: list[dict[str, Any]]) -> None:
        """The budgets from a consistent LIST: stored ones not in it are forgotten; from now
        on writes may proceed."""
        seen = set()
        for obj in items:
            seen.add(str((obj.get("metadata") or {}).get("name") or ""))
            self.on_budget(None, obj)
        for name in list(self.records):
            if name not in seen:
                del self.records[name]
                self._changed(name)
        self.on_budgets_synced()

    def on_budgets_synced(self) -> None:
        """The budget informer applied a full list (or found their CRD not served): from now
        on writes may proceed."""
        if not self.listed:
            self.listed = True
            self._requeue_all()
            if self.on_records is not None:
                self.on_records()

    def _changed(self, name: str) -> None:
        # membership may change anywhere: every namespace decides again (its demand and
        # whether the reconcile writes its keys), every task looks again
        self._requeue_all()
        if self.on_records is not None:
            self.on_records()
        self.wake(name)

    def _requeue_all(self) -> None:
        if self.requeue_all is not None:
            self.requeue_all()

    def status_written(self, record: BudgetRecord, status: Mapping[str, Any]) -> None:
        """The operator wrote ``status`` (merged as stored) to ``record``'s budget: it is what
        is stored now, unless the budget changed meanwhile."""
        if self.records.get(record.name) is record:
            self.records[record.name] = replace(record, status=status)
            self._status_changed(record.name)

    def _status_changed(self, name: str) -> None:
        if self.on_status is not None:
            self.on_status(name)

    def wake(self, budget: str | None) -> None:
        """Ask the task of ``budget`` for a pass (no-op for ``None``)."""
        if budget is not None and self.on_wake is not None:
            self.on_wake(budget)

    def wake_namespace(self, namespace: str, marks: Iterable[str | None] = ()) -> None:
        """Something about ``namespace``'s quota changed: wake its budget's task and those of
        the budgets named in ``marks`` (the quota's budget mark before and after)."""
        for budget in {self._member_of.get(namespace), *marks}:
            self.wake(budget)

    def wake_labelled(
        self, before: Mapping[str, str] | None, after: Mapping[str, str] | None
    ) -> None:
        """A namespace's labels changed from ``before`` to ``after`` (``None``: it did not
        exist): wake the budgets its ``dynquota.io/budget`` label named before and after."""
        for labels in (before, after):
            if labels is not None and labels.get(BUDGET_LABEL) in self.records:
                self.wake(labels[BUDGET_LABEL])

    def demand_for(self, namespace: str, key: str, hard: int, members: int) -> int | None:
        """What member ``namespace`` asks of budgeted ``key``: its policy's hard
        (:attr:`demand`); for a key its policy does not size, an even share of the budget's
        ``hard`` over its ``members`` (count; a slice of 0 would refuse every create of a key
        that was not limited before); ``None``: not decided yet. Units of the key."""
        own = self.demand.get(namespace, {}).get(key)
        if own is not None:
            return own
        if key in self.unsized.get(namespace, ()):
            return -(-hard // max(members, 1))  # rounded up: the allocation caps the sum
        return None

    def step_for(self, namespace: str, key: str) -> int:
        """The whole step a slice of ``key`` is given room in: the ``minimumHeadroom`` of the
        profile governing ``namespace`` for ``key`` (1: none, or not governed). Units."""
        governance = self.governance(namespace)
        profile = governance.profiles.get(key) if governance is not None else None
        return max(profile.minimum_headroom, 1) if profile is not None else 1

    def forget(self, namespace: str) -> None:
        """``namespace`` is gone."""
        self.demand.pop(namespace, None)
        self.unsized.pop(namespace, None)
        self.wake(self._member_of.pop(namespace, None))

    # -- membership -----------------------------------------------------------------------------

    def slicing(self, namespace: str) -> Slicing:
        """How budgets bear on ``namespace`` now (see :class:`Slicing`): a member of the
        budget its label names when that budget exists and is valid and a policy manages the
        namespace (not in dry run)."""
        info = self.namespaces.get(namespace)
        if info is None:
            return NOT_BUDGETED
        label = info.labels.get(BUDGET_LABEL) or None
        governance = self.governance(namespace)
        if governance is None or governance.kind != "managed":
            return Slicing(label=label)
        if governance.dry_run or self.settings.dry_run:
            return Slicing(label=label)
        record = self.records.get(label) if label is not None else None
        if record is None or record.spec is None:
            return Slicing(label=label)
        return Slicing(label, frozenset(record.spec.hard), label)

    def budgeted(self, namespace: str) -> dict[str, str]:
        """Key -> the budget whose slice it is in ``namespace`` (empty: no member)."""
        slicing = self.slicing(namespace)
        if slicing.budget is None:
            return {}
        return dict.fromkeys(sorted(slicing.keys), slicing.budget)

    def members(self, budget: str) -> list[str]:
        """The member namespaces of ``budget``, sorted."""
        return sorted(
            ns
            for ns, info in self.namespaces.items()
            if info.labels.get(BUDGET_LABEL) == budget and self.slicing(ns).budget == budget
        )

    # -- the reconcile's hook -------------------------------------------------------------------

    def shape(self, namespace: str, decision: Decision, current: QuotaSnapshot | None) -> Decision:
        """``decision`` (the per-namespace reconcile's, not in dry run) without the keys a
        budget writes: their hard is recorded as the namespace's demand (members only) and
        the decision keeps each such key as it is (``spec.hard`` and its ``hard``,
        ``last-upscale``, ``last-change`` records). Deletes (kill switch, unmanaged) pass
        unchanged. Wakes the budget when the demand or the membership changed."""
        slicing = self.slicing(namespace)
        before = self._member_of.get(namespace)
        if slicing.budget != before:
            self._member_of[namespace] = slicing.budget
            self.wake(before)
            self.wake(slicing.budget)
            if slicing.budget is None:
                self.demand.pop(namespace, None)
                self.unsized.pop(namespace, None)
        if slicing.budget is None:
            return mark_as_label(decision, current, slicing.label)
        if not slicing.keys or decision.action == "delete":
            return decision
        governance = self.governance(namespace)
        profiles = governance.profiles if governance is not None else {}
        unsized = frozenset(k for k in slicing.keys if k not in profiles)
        if self.unsized.get(namespace, frozenset()) != unsized:
            self.unsized[namespace] = unsized
            self.wake(slicing.budget)
        demand: dict[str, int] = {}
        for key in slicing.keys:
            if key in decision.hard:
                demand[key] = decision.hard[key]
            elif decision.action == "nothing" and current is not None:
                units = current.hard_int(key)
                if units is not None:
                    demand[key] = units
        if self.demand.get(namespace) != demand:
            self.demand[namespace] = demand
            self.wake(slicing.budget)
        return strip_keys(decision, slicing.keys, current)
