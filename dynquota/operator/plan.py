"""``dynquota plan``: what the operator would do now, per namespace and resource (read-only).

:func:`read_cluster` reads, with the operator's own kubernetes_asyncio adapters and never
writing, everything a decision needs: the ``kube-system`` kill switch, namespaces, policies,
every ResourceQuota, and metadata-only lists of non-terminal pods and of ConfigMaps, tallied
by the operator's informers (:mod:`dynquota.usage`'s quota semantics). :func:`build_plan` then
decides each namespace with the operator's own code, given the operator's
:class:`~dynquota.settings.Settings` (the running release's, see
:mod:`dynquota.operator.release`): the same
:func:`~dynquota.operator.decision.governance_of` and
:func:`~dynquota.operator.decision.decide_args` the operator uses, on the same conversions
(:meth:`QuotaSnapshot.state <dynquota.kube.quotas.QuotaSnapshot.state>`,
:func:`dynquota.policy.observed_usage`). It also says why each namespace is not
managed or not enforced, and lists the other (non-dynquota) ResourceQuotas of each namespace:
admission checks a create against every quota of the namespace, so the lowest limit wins.

It reads every LimitRange as the reconcile does before adding a compute key (the compute trap,
``Operator._missing_defaults`` and ``Operator._ensure_companion`` in
:mod:`dynquota.operator.reconcile`): a compute key with no LimitRange default is shown
``held`` (``NeedsDefaultRequests``) where the operator holds it, and the state of each
companion LimitRange ``dynquota`` (in place, would be created or patched, foreign, dry run,
left over) is listed.

The plan has no usage history: it takes the peak as the current usage ``U``, and assumes the
operator has been running for longer than every cooldown. The operator itself may therefore
wait longer before a downscale than the plan shows (never shorter).
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kubernetes_asyncio import client

from dynquota._k8s.errors import NotFoundError
from dynquota._k8s.reflector import Collection
from dynquota._k8s.workqueue import WorkQueue
from dynquota.kube.cluster import ClusterClient
from dynquota.kube.informer import UsageWatcher
from dynquota.kube.quotas import MANAGED_QUOTA_NAME, QuotaSnapshot
from dynquota.names import (
    DEFAULT_OVERRIDE_TTL,
    MANAGED_BY_LABEL,
    MANAGED_BY_VALUE,
    MANAGED_LIMIT_RANGE_NAME,
    EventReason,
)
from dynquota.operator.budgets import (
    BudgetRecord,
    Budgets,
    leaving,
    member_slice,
    read_budget,
    reserved,
)
from dynquota.operator.decision import decide_args, governance_of
from dynquota.policy import (
    KILL_SWITCH,
    MANAGED_LABEL,
    OVERRIDE_EXPIRES_AT,
    SYSTEM_NAMESPACES,
    TRACKED_RESOURCES,
    Governance,
    NamespaceInfo,
    QuotaKeyError,
    decide,
    format_time,
    observed_usage,
    parse_kill_switch,
    resource_order,
    target,
    unit_for,
    validate_policy,
)
from dynquota.policy.budget import Allocation, allocate
from dynquota.policy.limitrange import ContainerDefaults, limit_range_covers, owned_limit_range
from dynquota.quantity import QuantityError, parse_quantity
from dynquota.settings import Settings

__all__ = [
    "BudgetKeyPlan",
    "BudgetMember",
    "BudgetPlan",
    "ClusterSnapshot",
    "Companion",
    "NotManaged",
    "OtherQuota",
    "Plan",
    "PlanRow",
    "build_plan",
    "compute_plan",
    "format_budgets",
    "format_plan",
    "format_table",
    "read_cluster",
]


@dataclass
class ClusterSnapshot:
    """What :func:`compute_plan` needs, as decoded JSON objects (camelCase keys).

    ``tally`` maps ``(namespace, resource)`` to the count the quota charges now;
    ``limit_ranges`` holds every LimitRange (any namespace); ``budgets`` every QuotaBudget
    (empty when its CRD is not served).
    """

    kube_system: Mapping[str, Any]
    namespaces: Sequence[Mapping[str, Any]]
    policies: Sequence[Mapping[str, Any]]
    quotas: Sequence[Mapping[str, Any]]
    tally: Mapping[tuple[str, str], int] = field(default_factory=dict)
    limit_ranges: Sequence[Mapping[str, Any]] = ()
    budgets: Sequence[Mapping[str, Any]] = ()


@dataclass(frozen=True)
class PlanRow:
    """One line of the plan, one quota key. Values are ints in the key's unit (objects,
    millicores, bytes: :func:`dynquota.policy.unit_for`; ``None``: unknown/absent; ``tally``
    only for ``pods``/``configmaps``); ``next`` is the action (``create``, ``patch``,
    ``delete``, ``nothing``; ``held`` for a compute key the operator does not add because the
    namespace has no LimitRange default for it, ``NeedsDefaultRequests``) and ``why`` the
    reason."""

    namespace: str
    resource: str
    tally: int | None
    status_used: int | None
    hard: int | None
    target: int | None
    next: str
    why: str


def _units(resource: str, text: object) -> int | None:
    """``text`` in the unit of ``resource`` (millicores, bytes, objects), or ``None``."""
    try:
        quantity = parse_quantity(str(text))
    except QuantityError:
        return None
    try:
        return unit_for(resource).units(quantity)
    except QuotaKeyError:
        return quantity.ceil()


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
    (none when invalid) and ``frozen``: the namespaces it selects that another or an invalid
    budget selects too (nobody writes their budgeted keys)."""

    name: str
    error: str
    keys: tuple[BudgetKeyPlan, ...]
    frozen: tuple[str, ...]

    def only(self, namespaces: set[str]) -> BudgetPlan | None:
        """The budget with only the members and frozen namespaces in ``namespaces``, or
        ``None`` when none is left (its totals stay the whole budget's)."""
        keys = tuple(
            dataclasses.replace(k, members=tuple(m for m in k.members if m.namespace in namespaces))
            for k in self.keys
        )
        frozen = tuple(n for n in self.frozen if n in namespaces)
        if not frozen and not any(k.members for k in keys):
            return None
        return BudgetPlan(self.name, self.error, keys, frozen)


@dataclass
class Plan:
    """The whole plan: ``rows`` (namespaces the operator sizes, freezes or removes a quota
    from), ``not_managed``, ``other_quotas`` and ``companions`` (companion LimitRanges asked
    for or left over), each sorted by namespace, and ``budgets`` (by name)."""

    rows: list[PlanRow]
    not_managed: list[NotManaged]
    other_quotas: list[OtherQuota]
    companions: list[Companion] = field(default_factory=list)
    budgets: list[BudgetPlan] = field(default_factory=list)

    def only(self, namespaces: Iterable[str]) -> Plan:
        """The plan restricted to ``namespaces`` (budgets: those with a member or frozen
        namespace among them, showing only those)."""
        keep = set(namespaces)
        return Plan(
            [r for r in self.rows if r.namespace in keep],
            [n for n in self.not_managed if n.namespace in keep],
            [q for q in self.other_quotas if q.namespace in keep],
            [c for c in self.companions if c.namespace in keep],
            [b for b in (b.only(keep) for b in self.budgets) if b is not None],
        )


def compute_plan(
    snapshot: ClusterSnapshot,
    *,
    now: float | None = None,
    operator_namespace: str = "",
    override_ttl: int = DEFAULT_OVERRIDE_TTL,
    excluded: frozenset[str] = frozenset(),
) -> list[PlanRow]:
    """The rows of :func:`build_plan` for settings given piecemeal: the operator's own
    namespace, the override TTL (seconds) and the namespaces its settings exclude. Pure apart
    from reading the clock when ``now`` is omitted."""
    exclude = sorted(excluded)
    settings = Settings.from_environment(
        {
            "DYNQUOTA_NAMESPACE": operator_namespace,
            "DYNQUOTA_OVERRIDE_TTL": str(override_ttl),
            "DYNQUOTA_EXCLUDE_NAMESPACES": ",".join(exclude),
        }
    )[0]
    return build_plan(snapshot, settings, now=now).rows


def build_plan(snapshot: ClusterSnapshot, settings: Settings, *, now: float | None = None) -> Plan:
    """Decide every namespace of ``snapshot`` as an operator running with ``settings`` would
    at ``now`` (default: the clock), with the operator's own code (module docstring).

    Namespaces the operator leaves alone (system, its own, terminating) and those it does not
    manage (excluded by the settings, opted out, no policy matches) are in ``not_managed``,
    with the reason, and in ``rows`` only when a managed quota would be deleted there;
    namespaces in dry run are in both (``rows`` say what would be written). Pure apart from
    reading the clock when ``now`` is omitted.
    """
    when = time.time() if now is None else now
    annotations = (snapshot.kube_system.get("metadata") or {}).get("annotations") or {}
    kill_switch = parse_kill_switch(annotations.get(KILL_SWITCH)).engaged
    policies = [validate_policy(p) for p in snapshot.policies]
    quotas: dict[str, QuotaSnapshot] = {}
    others: list[OtherQuota] = []
    for obj in snapshot.quotas:
        read = QuotaSnapshot.from_object(obj)
        if read.name == MANAGED_QUOTA_NAME:
            quotas[read.namespace] = read
        if not read.managed:
            others.append(OtherQuota(read.namespace, read.name, dict(read.spec_hard)))
    others.sort(key=lambda q: (q.namespace, q.name))
    limit_ranges: dict[str, list[Mapping[str, Any]]] = {}
    for obj in snapshot.limit_ranges:
        namespace = str((obj.get("metadata") or {}).get("namespace") or "")
        limit_ranges.setdefault(namespace, []).append(obj)
    rows: list[PlanRow] = []
    not_managed: list[NotManaged] = []
    companions: list[Companion] = []
    infos: dict[str, NamespaceInfo] = {}
    for obj in snapshot.namespaces:
        meta = obj.get("metadata") or {}
        name = str(meta["name"])
        labels = dict(meta.get("labels") or {})
        infos[name] = NamespaceInfo(name, labels, bool(meta.get("deletionTimestamp")))
    # as Operator.governance: the settings' verdict, then the policies
    governances = {name: governance_of(info, policies, settings) for name, info in infos.items()}
    # the operator's own membership and demand code (Budgets.slicing, Budgets.shape)
    budgets = Budgets(_PlanBudgetHost(settings, infos, governances))
    budgets.records = {r.name: r for r in map(read_budget, snapshot.budgets)}
    budgets.listed = True
    for name in sorted(infos):
        info = infos[name]
        governance = governances[name]
        why = _not_managed_why(info, governance, settings)
        if why is not None:
            not_managed.append(NotManaged(name, why))
        dry_run = settings.dry_run or governance.dry_run
        companion = _companion(
            name,
            governance.container_defaults if governance.kind == "managed" else None,
            limit_ranges.get(name, []),
            dry_run=dry_run,
            kill_switch=kill_switch,
        )
        if companion is not None and governance.kind != "frozen":  # frozen: nothing changes
            companions.append(companion)
        if governance.kind == "excluded":
            continue
        found = quotas.get(name)
        if found is not None and not found.managed:
            for resource in TRACKED_RESOURCES:
                rows.append(
                    PlanRow(
                        name,
                        resource,
                        snapshot.tally.get((name, resource), 0),
                        found.used_int(resource),
                        found.hard_int(resource),
                        None,
                        "nothing",
                        "a quota named dynquota without the managed-by label exists: left alone",
                    )
                )
            continue
        quota = found
        if governance.kind == "unmanaged" and quota is None and kill_switch is not None:
            continue  # nothing to do: said in not_managed
        tally = {r: snapshot.tally.get((name, r), 0) for r in TRACKED_RESOURCES}
        keys = resource_order(set(TRACKED_RESOURCES) | set(governance.profiles))
        usage = observed_usage(tally, quota.used_counts() if quota is not None else {}, keys)
        missing = _missing_defaults(governance, quota, limit_ranges.get(name, []), companion)
        decision = decide(
            governance=governance,
            usage=usage,
            peak=usage,
            quota=quota.state() if quota is not None else None,
            kill_switch=kill_switch,
            now=when,
            started_at=0.0,
            missing_defaults=missing,
            budgeted=budgets.budgeted(name),
            **decide_args(settings),
        )
        if not decision.dry_run:
            # as the reconcile: budgeted keys are the budget task's; their hard is its demand
            decision = budgets.shape(name, decision, quota)
        slicing = budgets.slicing(name)
        by_resource = {c.resource: c.reason for c in decision.changes}
        held = {
            e.cause: e.message.removeprefix("(dry run) ")
            for e in decision.events
            if e.reason == EventReason.NEEDS_DEFAULT_REQUESTS and e.cause
        }
        # a held key's note is said on its own row
        notes = [n for n in decision.notes if n not in held.values()]
        general = "; ".join(notes) or governance.reason
        if decision.requeue_at is not None and not decision.changes:
            general += f"; next check at {format_time(math.ceil(decision.requeue_at))}"
        if quota is not None and OVERRIDE_EXPIRES_AT in quota.annotations:
            general += f"; override until {quota.annotations[OVERRIDE_EXPIRES_AT]}"
        for warning in decision.warnings:
            general += f"; warning: {warning}"
        written = (
            "dry run, not written: " if decision.dry_run and decision.action != "nothing" else ""
        )
        for resource in keys:
            profile = governance.profiles.get(resource)
            goal = (
                target(usage[resource], profile, unit_for(resource).granularity)
                if profile is not None and resource in usage
                else None
            )
            hard_now = quota.hard_int(resource) if quota is not None else None
            if resource in held:
                rows.append(
                    PlanRow(
                        name,
                        resource,
                        None,
                        quota.used_int(resource) if quota is not None else None,
                        hard_now,
                        None,
                        "held",
                        f"NeedsDefaultRequests: {held[resource]}",
                    )
                )
                continue
            why = by_resource.get(resource, general)
            if decision.action == "delete" or resource not in slicing.keys:
                pass
            elif slicing.frozen:
                why = f"frozen: selected by budgets {', '.join(slicing.conflicts)}; not written"
            else:
                why = (
                    f"sliced by budget {slicing.budget}: the target is its demand, the budget's "
                    "task writes the slice (see budgets)"
                )
            rows.append(
                PlanRow(
                    name,
                    resource,
                    snapshot.tally.get((name, resource), 0)
                    if resource in TRACKED_RESOURCES
                    else None,
                    quota.used_int(resource) if quota is not None else None,
                    hard_now,
                    goal,
                    decision.action,
                    written
                    + why
                    + _lower_limits(others, name, resource, goal or hard_now)
                    + _enforced_note(quota, resource),
                )
            )
    plans = [
        _budget_plan(record, budgets, quotas, snapshot.tally)
        for _, record in sorted(budgets.records.items())
    ]
    return Plan(rows, not_managed, others, companions, plans)


class _PlanBudgetHost:
    """What :class:`~dynquota.operator.budgets.Budgets` reads of the operator, from a
    snapshot (``namespaces`` and their ``governances``); the plan never queues."""

    def __init__(
        self,
        settings: Settings,
        namespaces: dict[str, NamespaceInfo],
        governances: Mapping[str, Governance],
    ) -> None:
        self._settings = settings
        self._namespaces = namespaces
        self._governances = governances

    @property
    def settings(self) -> Settings:
        return self._settings

    @property
    def namespaces(self) -> dict[str, NamespaceInfo]:
        return self._namespaces

    @property
    def queue(self) -> WorkQueue:
        raise RuntimeError("the plan never queues a namespace")

    def governance(self, namespace: str) -> Governance | None:
        return self._governances.get(namespace)


def _budget_plan(
    record: BudgetRecord,
    budgets: Budgets,
    quotas: Mapping[str, QuotaSnapshot],
    tally: Mapping[tuple[str, str], int],
) -> BudgetPlan:
    """One budget as its next pass would see it: the slices of its members
    (:func:`~dynquota.operator.budgets.member_slice`) and :func:`~dynquota.policy.budget.allocate`,
    as ``BudgetTasks.run_pass`` does, from the snapshot's quotas and tally."""
    frozen = tuple(budgets.frozen(record.name))
    if record.spec is None:
        return BudgetPlan(record.name, record.error, (), frozen)
    members = budgets.members(record.name)
    left = leaving(record.name, set(members), quotas)
    keys: list[BudgetKeyPlan] = []
    for key, hard in sorted(record.spec.hard.items()):
        slices = [
            member_slice(
                ns,
                key,
                quotas.get(ns),
                tally.get((ns, key), 0) if key in TRACKED_RESOURCES else None,
                budgets.demand_for(ns, key, hard, len(members)),
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
    return BudgetPlan(record.name, "", tuple(keys), frozen)


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
        return f"waiting for {_shown(key, allocation.waiting[namespace])}"
    return ""


def _missing_defaults(
    governance: Governance,
    quota: QuotaSnapshot | None,
    items: Sequence[Mapping[str, Any]],
    companion: Companion | None,
) -> frozenset[str]:
    """The policy's compute keys (the compute trap) not in the quota yet that no LimitRange
    of the namespace (``items``) gives a default for, counting the companion as the
    reconcile does once it is in place or written (``Operator._missing_defaults``)."""
    if governance.kind != "managed":
        return frozenset()
    hard = quota.spec_hard if quota is not None else {}
    trapped = frozenset(
        k for k in governance.profiles if k not in hard and unit_for(k).info.compute_trap
    )
    covered = limit_range_covers(items)
    if companion is not None and companion.state in ("in place", "create", "patch"):
        covered |= governance.container_defaults.covers()
    return trapped - covered


def _companion(
    namespace: str,
    defaults: ContainerDefaults | None,
    items: Sequence[Mapping[str, Any]],
    *,
    dry_run: bool,
    kill_switch: bool | None,
) -> Companion | None:
    """The state of ``namespace``'s companion LimitRange given the ``defaults`` its managing
    policy asks for (``None``: not managed), as ``Operator._ensure_companion`` would find and
    write it; ``None`` when there is none and none is asked for."""
    found, owned = owned_limit_range(items)
    wanted = defaults is not None and defaults.wanted
    if not wanted:
        if found is None or not owned:
            return None
        stored = _limits_text((found.get("spec") or {}).get("limits"))
        return Companion(
            namespace,
            "left over",
            stored,
            "dynquota's, but no policy asks for defaults here; dynquota never deletes it "
            "(dynquota cleanup --limit-ranges removes it)",
        )
    assert defaults is not None
    text = _limits_text([defaults.limits_item()])
    if found is not None and not owned:
        return Companion(
            namespace,
            "foreign",
            text,
            f"a LimitRange {MANAGED_LIMIT_RANGE_NAME} without the label {MANAGED_BY_LABEL}="
            f"{MANAGED_BY_VALUE} exists: never written (Warning ForeignLimitRange); the "
            "compute keys its own defaults do not cover stay held",
        )
    if found is not None and defaults.matches((found.get("spec") or {}).get("limits")):
        return Companion(namespace, "in place", text, "holds the policy's defaults")
    action = "create" if found is None else "patch"
    if dry_run:
        return Companion(
            namespace, "not written", text, f"dry run: would {action} it; compute keys held"
        )
    if kill_switch is not False:
        return Companion(
            namespace, "not written", text, f"kill switch engaged: would {action} it once released"
        )
    return Companion(
        namespace,
        action,
        text,
        "the operator writes it, then adds the compute keys it covers"
        if found is None
        else "its defaults differ from the policy's: patched in place",
    )


def _limits_text(limits: object) -> str:
    """A LimitRange's ``spec.limits`` (Container items) as ``defaultRequest cpu=100m;
    default cpu=1``."""
    parts: list[str] = []
    for item in limits if isinstance(limits, list) else []:
        if not isinstance(item, Mapping) or item.get("type") != "Container":
            continue
        for field_name in ("defaultRequest", "default"):
            values = item.get(field_name) or {}
            if isinstance(values, Mapping) and values:
                parts.append(
                    f"{field_name} " + ", ".join(f"{k}={v}" for k, v in sorted(values.items()))
                )
    return "; ".join(parts) or "-"


def _not_managed_why(
    namespace: NamespaceInfo, governance: Governance, settings: Settings
) -> str | None:
    """Why ``namespace`` is not managed or not enforced, or ``None`` (managed and enforced,
    or frozen: the table says so)."""
    name = namespace.name
    if governance.kind == "excluded":
        if namespace.terminating:
            return "excluded: being deleted (its quota is left to the namespace controller)"
        if name in SYSTEM_NAMESPACES:
            return "excluded: system namespace (always excluded)"
        if settings.namespace and name == settings.namespace:
            return "excluded: the release's own namespace"
        return f"excluded: {governance.reason}"
    if governance.kind == "unmanaged":
        if name in settings.exclude_namespaces:
            return "excluded: listed in excludeNamespaces"
        if settings.include_namespaces and name not in settings.include_namespaces:
            return "excluded: not in includeNamespaces"
        if namespace.labels.get(MANAGED_LABEL, "").lower() == "false":
            return f"opted out: labelled {MANAGED_LABEL}={namespace.labels[MANAGED_LABEL]}"
        return governance.reason
    if governance.kind == "managed" and settings.dry_run:
        return "dry run: operator.dryRun=true (decisions reported, no quota written)"
    if governance.kind == "managed" and governance.dry_run:
        return (
            f"dry run: policy {governance.policy} has spec.dryRun=true (decisions reported, "
            "no quota written)"
        )
    return None


def _lower_limits(
    others: Iterable[OtherQuota], namespace: str, resource: str, limit: int | None
) -> str:
    """``; lower limit in quota Q: pods=5 (the lowest limit wins)`` for each other quota of
    ``namespace`` whose limit on ``resource`` (or ``count/<resource>``) is below ``limit``."""
    if limit is None:
        return ""
    notes = ""
    for other in others:
        if other.namespace != namespace:
            continue
        for key in (resource, f"count/{resource}"):
            found = _units(resource, other.hard[key]) if key in other.hard else None
            if found is not None and found < limit:
                notes += (
                    f"; lower limit in quota {other.name}: {key}={other.hard[key]} "
                    "(the lowest limit wins)"
                )
    return notes


def _enforced_note(quota: QuotaSnapshot | None, resource: str) -> str:
    """``"; enforced 3100m: ..."`` when admission enforces another value of ``resource`` than
    the HARD column shows (``status.hard``, the quota controller's copy, lags ``spec.hard``:
    kube-controller-manager down or slow); ``""`` when they agree or nothing is written."""
    if quota is None:
        return ""
    written, enforced = quota.hard_int(resource), quota.status_hard_int(resource)
    if written is None or enforced == written:
        return ""
    if enforced is None:
        return "; not enforced yet: status.hard lacks it (the quota controller has not copied it)"
    return (
        f"; enforced {_shown(resource, enforced)}: status.hard, the quota controller has not "
        "copied spec.hard yet"
    )


def _shown(resource: str, value: int | None) -> str:
    """A value of the plan in its key's unit as quantity text (``1500m``, ``3687Mi``, ``7``)."""
    if value is None:
        return "-"
    try:
        return unit_for(resource).text(value)
    except QuotaKeyError:
        return str(value)


def format_table(rows: list[PlanRow]) -> str:
    """The plan as an aligned text table (``-`` for unknown values; quantities with their
    unit, ``1500m``, ``4Gi``)."""
    header = ("NAMESPACE", "RESOURCE", "TALLY", "STATUS.USED", "HARD", "TARGET", "NEXT", "WHY")
    table = [header] + [
        (
            r.namespace,
            r.resource,
            *(_shown(r.resource, v) for v in (r.tally, r.status_used, r.hard, r.target)),
            r.next,
            r.why,
        )
        for r in rows
    ]
    widths = [max(len(line[i]) for line in table) for i in range(len(header) - 1)]
    return "\n".join(
        "  ".join(cell.ljust(widths[i]) for i, cell in enumerate(line[:-1])) + "  " + line[-1]
        for line in table
    )


def format_plan(plan: Plan, header: Iterable[str] = ()) -> str:
    """The plan as text: ``header`` lines, the table of :func:`format_table`, then the
    namespaces not managed or not enforced (``NAMESPACE  WHY``), the other quotas
    (``NAMESPACE  QUOTA  HARD``, keys sorted) and the companion LimitRanges (``NAMESPACE
    STATE  DEFAULTS  WHY``), each section only when it has lines."""
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
    return "\n".join(parts)


def format_budgets(budgets: Iterable[BudgetPlan]) -> list[str]:
    """The budgets as text lines: per budget and key one line with the budget's hard, the
    granted sum of commitments, the usage and the free room, then its members' slices
    (``NAMESPACE  GRANT  ENFORCED  USED  DEMAND  NEXT  NOTE``); an invalid budget and the
    frozen namespaces in a sentence each."""
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
                f"budget {budget.name} {key}: hard {_shown(key, k.hard)}, granted "
                f"{_shown(key, k.granted)}, used {_shown(key, k.used)}, free "
                f"{_signed(key, k.free)}; {k.state}"
            )
            table: list[tuple[str, ...]] = [
                ("  NAMESPACE", "GRANT", "ENFORCED", "USED", "DEMAND", "NEXT", "NOTE")
            ]
            table += [
                (
                    f"  {m.namespace}",
                    *(_shown(key, v) for v in (m.grant, m.enforced, m.used, m.demand, m.next)),
                    m.note,
                )
                for m in k.members
            ]
            if k.members:
                lines.append(_columns(table).rstrip())
        if budget.frozen:
            lines.append(
                f"budget {budget.name}: frozen (selected by another or an invalid budget too; "
                f"nobody writes their budgeted keys): {', '.join(budget.frozen)}"
            )
    return lines


def _signed(resource: str, value: int) -> str:
    """:func:`_shown` with a sign for a negative value (over the budget)."""
    return f"-{_shown(resource, -value)}" if value < 0 else _shown(resource, value)


def _columns(table: list[tuple[str, ...]]) -> str:
    """Aligned columns, two spaces apart; the last column is not padded."""
    widths = [max(len(line[i]) for line in table) for i in range(len(table[0]) - 1)]
    return "\n".join(
        "  ".join(cell.ljust(widths[i]) for i, cell in enumerate(line[:-1])) + "  " + line[-1]
        for line in table
    )


async def read_cluster(api: client.ApiClient, now: float | None = None) -> ClusterSnapshot:
    """Read a :class:`ClusterSnapshot` through ``api`` (a kubernetes_asyncio ``ApiClient``,
    not closed here) with the operator's own adapters, never writing.

    ``kube-system`` and the policies as the operator reads them
    (:class:`~dynquota.kube.cluster.ClusterClient`); namespaces and every ResourceQuota as
    consistent paginated lists (:class:`~dynquota._k8s.reflector.Collection`); the tally as the
    operator's informers make it: one full metadata-only list of each tracked resource into a
    :class:`~dynquota.usage.ResourceTally` (:class:`~dynquota.kube.informer.UsageWatcher`,
    no watch), counted at ``now`` (default: the clock); every LimitRange (one paginated
    list: the reconcile lists a namespace's before adding a compute key); every QuotaBudget
    (none when its CRD is not served, as the operator reads it). Every request has the short
    timeout of :mod:`dynquota._k8s.timeouts`.

    Raises ``ApiError`` (``NotFoundError`` on the policies: the CRD is missing;
    ``ForbiddenError``: a missing permission) or ``TransportError`` (the cluster cannot be
    reached).
    """
    cluster = ClusterClient(api)
    kube_system = await cluster.read_namespace("kube-system")
    namespaces = await Collection(api, "/api/v1/namespaces").list_all()
    policies = await cluster.list_policies()
    # every quota, not only dynquota's: the others limit the namespace too
    quotas = await Collection(api, "/api/v1/resourcequotas").list_all()
    limit_ranges = await Collection(api, "/api/v1/limitranges").list_all()
    try:
        budgets = await cluster.list_budgets()
    except NotFoundError:
        budgets = []  # the QuotaBudget CRD is not served: no budgets (as the operator reads it)
    usage = UsageWatcher.for_cluster(api)
    for informer in usage.informers.values():
        await informer.list_once()
    when = time.time() if now is None else now
    tally = {
        (namespace, resource): count
        for namespace in usage.namespaces()
        for resource, count in usage.usages(namespace, when).items()
        if count
    }
    return ClusterSnapshot(kube_system, namespaces, policies, quotas, tally, limit_ranges, budgets)
