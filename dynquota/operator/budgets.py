"""Tenant budgets in the operator (issue #13, ``docs/budgets.md``): which namespace belongs to
which QuotaBudget, and what the per-namespace reconcile may write.

A namespace that exactly one valid budget selects (and that a DynamicQuotaPolicy manages, not
in dry run) is a *member*: its budgeted keys are written only by that budget's serialized task
(:mod:`dynquota.operator.budget_task`), which decides from one LIST of the quotas. The
per-namespace reconcile still decides the whole quota; :meth:`Budgets.shape` then hands the
hard it would set for each budgeted key to the budget as the namespace's *demand* and takes
those keys out of the write (the reconcile keeps writing the other keys). A namespace selected
by two budgets, or by an invalid one, is *frozen* for those budgets' keys: nobody writes them.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from pydantic import ValidationError

from dynquota._k8s.workqueue import WorkQueue
from dynquota.kube.quotas import QuotaSnapshot
from dynquota.names import TRACKED_RESOURCES, EventReason
from dynquota.policy import Action, Decision, Governance, LabelSelector, NamespaceInfo
from dynquota.policy.budget import Slice, commitment
from dynquota.policy.budget_spec import QuotaBudgetSpec
from dynquota.policy.state import (
    BUDGET,
    hard_key,
    last_change_key,
    last_upscale_key,
    resource_keys,
)
from dynquota.settings import Settings

__all__ = [
    "BudgetHost",
    "BudgetRecord",
    "Budgets",
    "Slicing",
    "leaving",
    "member_slice",
    "read_budget",
    "reserved",
]

log = logging.getLogger("dynquota.operator")


class BudgetHost(Protocol):
    """What :class:`Budgets` reads of the operator
    (:class:`~dynquota.operator.cache.OperatorCache`)."""

    @property
    def settings(self) -> Settings: ...
    @property
    def namespaces(self) -> dict[str, NamespaceInfo]: ...
    @property
    def queue(self) -> WorkQueue: ...
    def governance(self, namespace: str) -> Governance | None: ...


@dataclass(frozen=True)
class BudgetRecord:
    """One stored QuotaBudget as the operator read it.

    ``spec``: the validated spec, ``None`` if invalid (``error`` says why). ``selector`` and
    ``keys``: its selector and the keys of its ``hard`` as stored, kept even when the spec is
    invalid (so the namespaces it would hold are frozen, not released); ``selector`` is
    ``None`` when it cannot be read at all. ``status``: its stored status.
    """

    name: str
    uid: str
    generation: int
    spec: QuotaBudgetSpec | None
    error: str
    selector: LabelSelector | None
    keys: frozenset[str]
    status: Mapping[str, Any]


_KUBE_SYSTEM_LABELS: Mapping[str, str] = {"kubernetes.io/metadata.name": "kube-system"}
"""The labels every kube-system Namespace has (the apiserver sets the name label)."""


def read_budget(obj: Mapping[str, Any]) -> BudgetRecord:
    """A QuotaBudget (decoded JSON) as a :class:`BudgetRecord`. Pure; never raises."""
    meta = obj.get("metadata") or {}
    raw = obj.get("spec") or {}
    spec: QuotaBudgetSpec | None = None
    error = ""
    try:
        spec = QuotaBudgetSpec.model_validate(raw)
    except ValidationError as exc:
        error = "; ".join(
            f"{'.'.join(map(str, e['loc'])) or 'spec'}: {e['msg']}" for e in exc.errors()
        )
    selector: LabelSelector | None = spec.namespace_selector if spec is not None else None
    if selector is None:
        try:
            selector = LabelSelector.model_validate(raw.get("namespaceSelector") or {})
        except ValidationError:
            selector = None
        if selector is not None and not selector.match_labels and not selector.match_expressions:
            selector = None  # an empty selector would freeze every namespace: ignored
    if selector is not None and selector.matches(_KUBE_SYSTEM_LABELS):
        # matchExpressions such as `kubernetes.io/metadata.name Exists` or `x DoesNotExist`
        # pass the CRD's "not empty" rule yet select every namespace: refused, and its
        # selector ignored (frozen, every namespace's keys would stop being sized)
        spec, selector = None, None
        error = (
            "spec.namespaceSelector selects kube-system, so it would take in every namespace "
            "(e.g. an Exists on kubernetes.io/metadata.name, or a DoesNotExist): select the "
            "tenant's namespaces by a label of theirs"
        )
    hard = raw.get("hard")
    keys = frozenset(str(k) for k in hard) if isinstance(hard, Mapping) else frozenset()
    return BudgetRecord(
        name=str(meta.get("name") or ""),
        uid=str(meta.get("uid") or ""),
        generation=int(meta.get("generation") or 0),
        spec=spec,
        error=error,
        selector=selector,
        keys=keys,
        status=dict(obj.get("status") or {}),
    )


def member_slice(
    namespace: str,
    key: str,
    quota: QuotaSnapshot | None,
    tally: int | None,
    demand: int | None,
) -> Slice:
    """The :class:`~dynquota.policy.budget.Slice` of member ``namespace`` for budgeted ``key``
    as a budget pass builds it (one source for ``BudgetTasks._slice`` and ``plan``):
    ``spec_hard``/``status_hard``/``used`` from its managed ``quota`` (``None``: none); for a
    tracked key (``pods``, ``configmaps``) ``used`` is the larger of ``status.used`` and the
    informers' ``tally`` (objects; ``None``: no tally); ``demand`` is what its policy would
    set (:attr:`Budgets.demand`), or, not decided yet, what it has (``max(spec.hard, used)``).
    All in the key's unit. Pure."""
    spec_hard = status_hard = used = None
    if quota is not None:
        spec_hard = quota.hard_int(key)
        status_hard = quota.status_hard_int(key)
        used = quota.used_int(key)
    if key in TRACKED_RESOURCES and tally is not None:
        used = max(used or 0, tally)
    if demand is None:  # not decided yet: asks for what it has
        demand = max(spec_hard or 0, used or 0)
    return Slice(namespace, spec_hard, status_hard, used, demand)


def leaving(
    budget: str, members: Collection[str], quotas: Mapping[str, QuotaSnapshot]
) -> list[str]:
    """The namespaces whose managed quota in ``quotas`` (namespace -> quota, one LIST) still
    carries ``budget``'s mark (:data:`~dynquota.policy.state.BUDGET`) but which are not in
    ``members``: they left it (labels, policy, frozen) and their reconcile has not re-sized
    them yet, so the budget still holds their slices. Sorted. Pure."""
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
    per-namespace reconcile must not write (the member's budgeted keys, or the frozen ones).
    ``frozen``: selected by two budgets or an invalid one (``conflicts``: their names, sorted).
    """

    budget: str | None = None
    keys: frozenset[str] = frozenset()
    frozen: bool = False
    conflicts: tuple[str, ...] = ()


NOT_BUDGETED = Slicing()


class Budgets:
    """The budgets one operator replica knows, their members' demands, and the reconcile's hook.

    Args:
        owner: the operator (its namespaces, governance, quotas, gate and settings).

    Feed it with :meth:`on_budget` / :meth:`on_budget_list`; the reconcile calls
    :meth:`shape`; :class:`~dynquota.operator.budget_task.BudgetTasks` runs the passes.
    """

    def __init__(self, owner: BudgetHost) -> None:
        self.owner = owner
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
        self.on_wake: Any = None
        """Called with a budget name when its task should run a pass (set by the tasks)."""
        self.on_records: Any = None
        """Called after the set of budgets changed (set by the tasks)."""

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
        if old is None or (old.spec, old.selector, old.keys) != (
            record.spec,
            record.selector,
            record.keys,
        ):
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
        if not self.listed:
            self.listed = True
            self.owner.queue.add_all(list(self.owner.namespaces))
            if self.on_records is not None:
                self.on_records()

    def _changed(self, name: str) -> None:
        # membership may change anywhere: every namespace decides again (its demand and
        # whether the reconcile writes its keys), every task looks again
        self.owner.queue.add_all(list(self.owner.namespaces))
        if self.on_records is not None:
            self.on_records()
        self.wake(name)

    def wake(self, budget: str | None) -> None:
        """Ask the task of ``budget`` for a pass (no-op for ``None``)."""
        if budget is not None and self.on_wake is not None:
            self.on_wake(budget)

    def wake_namespace(self, namespace: str, marks: Iterable[str | None] = ()) -> None:
        """Something about ``namespace``'s quota changed: wake its budget's task and those of
        the budgets named in ``marks`` (the quota's budget mark before and after)."""
        for budget in {self._member_of.get(namespace), *marks}:
            self.wake(budget)

    def wake_selecting(
        self, before: Mapping[str, str] | None, after: Mapping[str, str] | None
    ) -> None:
        """A namespace's labels changed from ``before`` to ``after`` (``None``: it did not
        exist): wake every budget whose selector matches either."""
        for record in self.records.values():
            if record.selector is None:
                continue
            if any(
                labels is not None and record.selector.matches(labels) for labels in (before, after)
            ):
                self.wake(record.name)

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

    def forget(self, namespace: str) -> None:
        """``namespace`` is gone."""
        self.demand.pop(namespace, None)
        self.unsized.pop(namespace, None)
        self.wake(self._member_of.pop(namespace, None))

    # -- membership -----------------------------------------------------------------------------

    def slicing(self, namespace: str) -> Slicing:
        """How budgets bear on ``namespace`` now (see :class:`Slicing`)."""
        info = self.owner.namespaces.get(namespace)
        if info is None or not self.records:
            return NOT_BUDGETED
        governance = self.owner.governance(namespace)
        if governance is None or governance.kind != "managed":
            return NOT_BUDGETED
        if governance.dry_run or self.owner.settings.dry_run:
            return NOT_BUDGETED
        picked = sorted(
            (r for r in self.records.values() if r.selector and r.selector.matches(info.labels)),
            key=lambda r: r.name,
        )
        if not picked:
            return NOT_BUDGETED
        if len(picked) == 1 and picked[0].spec is not None:
            return Slicing(picked[0].name, frozenset(picked[0].spec.hard))
        keys = frozenset().union(*(r.keys for r in picked))
        return Slicing(None, keys, frozen=True, conflicts=tuple(r.name for r in picked))

    def budgeted(self, namespace: str) -> dict[str, str]:
        """Key -> the budget whose slice it is in ``namespace`` (empty: no member)."""
        slicing = self.slicing(namespace)
        if slicing.budget is None:
            return {}
        return dict.fromkeys(sorted(slicing.keys), slicing.budget)

    def members(self, budget: str) -> list[str]:
        """The member namespaces of ``budget``, sorted."""
        return sorted(ns for ns in self.owner.namespaces if self.slicing(ns).budget == budget)

    def frozen(self, budget: str) -> list[str]:
        """Namespaces ``budget`` selects that are frozen (another or an invalid budget too)."""
        return sorted(
            ns
            for ns in self.owner.namespaces
            if budget in (s := self.slicing(ns)).conflicts and s.frozen
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
        if slicing.budget is None and not slicing.frozen:
            return release_mark(decision, current)
        if not slicing.keys or decision.action == "delete":
            return decision
        if slicing.budget is not None:
            governance = self.owner.governance(namespace)
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


def release_mark(decision: Decision, current: QuotaSnapshot | None) -> Decision:
    """``decision`` for a namespace in no budget, also removing the budget mark
    (:data:`~dynquota.policy.state.BUDGET`) its quota still carries: the namespace left that
    budget (labels, policy, budget deleted), and the budget holds its slice until this write,
    which re-sizes the quota under its own policy, lands (``docs/budgets.md``). ``nothing``
    becomes a patch of that annotation only; deletes and creates pass unchanged. Pure."""
    if current is None or BUDGET not in current.annotations:
        return decision
    left = current.annotations[BUDGET]
    note = f"left QuotaBudget {left}: its slice is released with this write"
    if decision.action == "patch":
        return dataclasses.replace(
            decision,
            remove_annotations=decision.remove_annotations | {BUDGET},
            notes=(*decision.notes, note),
        )
    if decision.action == "nothing":
        return dataclasses.replace(
            decision,
            action="patch",
            hard={},
            set_annotations={},
            remove_annotations=frozenset({BUDGET}),
            null_hard=frozenset(),
            notes=(*decision.notes, note),
        )
    return decision


def strip_keys(decision: Decision, keys: frozenset[str], current: QuotaSnapshot | None) -> Decision:
    """``decision`` writing nothing of ``keys``: a create leaves them out; a patch writes their
    current ``spec.hard`` (a no-op under the patch's resourceVersion precondition) and none of
    their state records; ``Resized``/``ManualEditReverted`` Events about them only are
    dropped. A patch left with nothing to write becomes ``nothing``. Pure."""
    if decision.action not in ("create", "patch") or not keys & (
        set(decision.hard) | decision.null_hard | {c.resource for c in decision.changes}
    ):
        return decision
    hard = dict(decision.hard)
    for key in keys:
        hard.pop(key, None)
        if decision.action == "patch" and current is not None:
            units = current.hard_int(key)
            if units is not None:
                hard[key] = units
    written = {
        k for key in keys for k in (hard_key(key), last_upscale_key(key), last_change_key(key))
    }
    state = {k for key in keys for k in resource_keys(key)}
    set_annotations = {k: v for k, v in decision.set_annotations.items() if k not in written}
    remove_annotations = frozenset(k for k in decision.remove_annotations if k not in state)
    changes = tuple(c for c in decision.changes if c.resource not in keys)
    dropped = [c for c in decision.changes if c.resource in keys]
    events = decision.events
    if dropped:
        resized = any(c.kind != "revert" for c in changes)
        reverted = any(c.kind == "revert" for c in changes)
        events = tuple(
            e
            for e in events
            if not (e.reason == EventReason.RESIZED and not resized)
            and not (e.reason == EventReason.MANUAL_EDIT_REVERTED and not reverted)
        )
    action: Action = decision.action
    if action == "patch" and not (set_annotations or remove_annotations or changes):
        action = "nothing"
    return dataclasses.replace(
        decision,
        action=action,
        hard=hard if action != "nothing" else {},
        set_annotations=set_annotations if action != "nothing" else {},
        remove_annotations=remove_annotations if action != "nothing" else frozenset(),
        null_hard=decision.null_hard - keys if action != "nothing" else frozenset(),
        changes=changes,
        events=events,
    )
