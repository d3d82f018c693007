"""``dynquota plan``: what the operator would do now, per namespace and resource (read-only).

:func:`build_plan` decides each namespace of a
:class:`~dynquota.operator.plan_snapshot.ClusterSnapshot` (read by
:func:`~dynquota.operator.plan_snapshot.read_cluster` or
:func:`~dynquota.operator.plan_scope.read_scope`) with the operator's own code, given the
operator's :class:`~dynquota.settings.Settings` (the running release's, see
:mod:`dynquota.operator.release`): the same :func:`~dynquota.operator.decision.governance_of`,
:func:`~dynquota.operator.decision.observe` and
:func:`~dynquota.operator.decision.decide_namespace` the reconcile uses (without a replica's
memory). It also says why each namespace is not
managed or not enforced, and lists the other (non-dynquota) ResourceQuotas of each namespace:
admission checks a create against every quota of the namespace, so the lowest limit wins.

It takes every LimitRange as the reconcile does before adding a compute key (the compute trap
and the companion rules of :mod:`dynquota.policy.companion`, which
:class:`~dynquota.operator.companion.Companions` follows): a compute key with no LimitRange
default is shown ``held`` (``NeedsDefaultRequests``) where the operator holds it, and the state
of each companion LimitRange ``dynquota`` (in place, would be created or patched, foreign, dry
run, left over) is listed (:mod:`dynquota.operator.plan_companion`).

The plan has no usage history: it takes the peak as the current usage ``U``, and assumes the
operator has been running for longer than every cooldown. The operator itself may therefore
wait longer before a downscale than the plan shows (never shorter).
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from dynquota.kube.quotas import MANAGED_QUOTA_NAME, QuotaSnapshot
from dynquota.names import (
    DEFAULT_OVERRIDE_TTL,
    EventReason,
)
from dynquota.operator.brake import CONFIRM, UnmanageBrake, counted
from dynquota.operator.decision import decide_namespace, governance_of, observe
from dynquota.operator.plan_budgets import budget_plans, snapshot_budgets
from dynquota.operator.plan_companion import companion_of, missing_defaults
from dynquota.operator.plan_model import (
    Companion,
    NotManaged,
    OtherQuota,
    Plan,
    PlanRow,
    Tarpitted,
    shown,
)
from dynquota.operator.plan_snapshot import ClusterSnapshot
from dynquota.operator.ports import PolicyRecord
from dynquota.operator.write_rate import rule_for
from dynquota.policy import (
    KILL_SWITCH,
    MANAGED_LABEL,
    OVERRIDE_EXPIRES_AT,
    SYSTEM_NAMESPACES,
    TRACKED_RESOURCES,
    Governance,
    NamespaceInfo,
    PolicyInfo,
    QuotaKeyError,
    format_time,
    parse_kill_switch,
    target,
    unit_for,
    validate_policy,
)
from dynquota.policy.churn import tarpitted
from dynquota.quantity import QuantityError, parse_quantity
from dynquota.settings import Settings

__all__ = ["build_plan", "compute_plan"]


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
    # as ClusterView.governance: the settings' verdict, then the policies
    governances = {name: governance_of(info, policies, settings) for name, info in infos.items()}
    # the operator's own membership and demand code (Budgets.slicing, Budgets.shape)
    budgets = snapshot_budgets(settings, infos, governances, snapshot.budgets)
    # the brake as an operator starting now would apply it (an empty window: the running
    # operator's may hold more, counting deletes it already passed)
    brake = UnmanageBrake(settings.unmanage_brake_share, settings.unmanage_brake_window_seconds)
    managed = counted([n for n, q in quotas.items() if q.managed], infos)
    for name in sorted(infos):
        info = infos[name]
        governance = governances[name]
        why = _not_managed_why(info, governance, settings)
        if why is not None:
            not_managed.append(NotManaged(name, why))
        dry_run = settings.dry_run or governance.dry_run
        companion = companion_of(
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
        observed = observe(governance, quota.used_counts() if quota is not None else {}, tally)
        keys, usage = observed.keys, observed.usage
        missing = missing_defaults(governance, quota, limit_ranges.get(name, []), companion)
        decision = decide_namespace(
            name,
            governance,
            observed,
            quota.state() if quota is not None else None,
            current=quota,
            kill_switch=kill_switch,
            now=when,
            settings=settings,
            dry_run=dry_run,
            missing_defaults=missing,
            budgeted=budgets.budgeted(name),
            replica=None,
        )
        if not decision.dry_run:
            # as the reconcile: budgeted keys are the budget task's; their hard is its demand
            decision = budgets.shape(name, decision, quota)
        slicing = budgets.slicing(name)
        # in dry run the operator releases (deletes) the managed quota: say so, as a delete
        released = decision.dry_run and quota is not None and governance.kind == "managed"
        action = "delete" if released else decision.action
        braked = (
            action == "delete"
            and not kill_switch
            and (governance.kind == "unmanaged" or (released and not settings.dry_run))
            and not brake.admit(name, managed, 0.0, when, None)
        )
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
        # namespace-wide warnings once, on its first row (not repeated on every key's)
        warned = "".join(
            f"; warning: {w}"
            for w in [governance.warning, *decision.warnings]
            if w and w not in held.values()
        )
        written = (
            "dry run, not written: " if decision.dry_run and decision.action != "nothing" else ""
        )
        if released:
            who = "operator.dryRun" if settings.dry_run else f"policy {governance.policy}"
            written = f"released ({who} is in dry run: dynquota enforces nothing here); would: "
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
                        f"NeedsDefaultRequests: {held[resource]}" + warned,
                    )
                )
                warned = ""
                continue
            why = by_resource.get(resource, general)
            if braked:
                why = (
                    f"held by the brake on mass un-management ({why}): more than "
                    f"{settings.unmanage_brake_share:.0%} of the managed namespaces would lose "
                    f"their quota; confirm with kubectl annotate namespace kube-system "
                    f"{CONFIRM}=<RFC 3339 time> --overwrite, or restore the policies"
                )
            elif action == "delete" or resource not in slicing.keys:
                pass
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
                    "held" if braked else action,
                    written
                    + why.rstrip(".")
                    + _lower_limits(others, name, resource, goal or hard_now)
                    + _enforced_note(quota, resource)
                    + warned,
                )
            )
            warned = ""
    plans = budget_plans(budgets, quotas, snapshot.tally)
    tarpit = _tarpitted(snapshot.tarpit_rules, governances, policies, settings)
    return Plan(rows, not_managed, others, companions, plans, tarpit)


def _tarpitted(
    rules: Sequence[Mapping[str, Any]] | None,
    governances: Mapping[str, Governance],
    policies: Sequence[PolicyInfo],
    settings: Settings,
) -> list[Tarpitted]:
    """The namespaces the tarpit FlowSchema's ``rules`` list (``None``: not read), with the
    governing policy's ``writeRate`` (the running operator's counts are not in the cluster:
    why it engaged is its Event ``Tarpitted``)."""
    records = {p.name: PolicyRecord(p, 0, {}) for p in policies}
    found = []
    for ns in sorted(tarpitted(rules or ())):
        rule = rule_for(governances.get(ns), records, settings.dry_run).rate
        why = (
            f"writeRate {rule.limit} writes in {rule.window} s, released after "
            f"{rule.quiet_period} s at or below {rule.limit // 2} (Event Tarpitted: why)"
            if rule is not None
            else "no writeRate governs it now: the operator takes it out"
        )
        found.append(Tarpitted(ns, why))
    return found


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
        f"; enforced {shown(resource, enforced)}: status.hard, the quota controller has not "
        "copied spec.hard yet"
    )
