"""What a tenant sees of what governs its namespace: the content of the namespaced
``AppliedDynamicQuota`` ``dynquota`` (issue 28, part 3; Pure: no I/O, ``now`` passed in).

Both CRDs that govern a namespace (``DynamicQuotaPolicy``, ``QuotaBudget``) are
cluster-scoped, and a RoleBinding cannot grant a cluster-scoped read, so the operator copies
what a tenant needs into one namespaced object that the aggregated ``view`` role (and so
``edit`` and ``admin``) may read — as OpenShift's ``AppliedClusterResourceQuota`` does. This
module builds its ``status`` from plain values; :mod:`dynquota.operator.applied` writes it.

The status is split in two (:class:`Projection`):

- ``stable``: the state (``Enforced``, ``Foreign``, ``DryRun``, ``Frozen``,
  ``KillSwitchEngaged``), the
  tenant line, the policy (name, per key ``minimum``/``maximum``/``bufferPercent``/cooldowns,
  ``nextRaiseAfter``), its override rules (and an active override's expiry), the budget's name
  and ``hard`` and this namespace's slice. It changes only with a policy or budget edit or a
  write of the managed quota, and a change is written at once (rate-limited);
- ``figures``: the budget's ``used``, ``granted`` and ``free`` (aggregates over all its
  namespaces: never one other namespace's figure). They move with every budget pass, so a
  change of these alone is written at most every :data:`FIGURES_REFRESH` seconds.

Every time is absolute (RFC 3339 UTC): ``nextRaiseAfter`` is ``last-upscale + upscaleCooldown``
whether it is past or not, so the content never changes with the clock alone; ``asOf`` (when
written) and ``budget.figuresAsOf`` are not part of the comparison.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from dynquota.names import MANAGED_BY_LABEL, MANAGED_BY_VALUE
from dynquota.policy.durations import format_duration
from dynquota.policy.profiles import ResourceProfile, resource_order
from dynquota.policy.selection import Governance
from dynquota.policy.state import (
    OVERRIDE_ENDED_AT,
    OVERRIDE_EXPIRES_AT,
    OVERRIDE_GRANTED_AT,
    format_time,
    last_upscale_key,
    parse_time,
)
from dynquota.policy.units import unit_for

__all__ = [
    "FIGURES_REFRESH",
    "AppliedState",
    "BudgetFacts",
    "Projection",
    "QuotaFacts",
    "WriteRateFacts",
    "foreign_why",
    "project",
    "should_write",
]

FIGURES_REFRESH: Final = 300
"""Seconds: a change of the budget's ``used``/``granted``/``free`` alone is written at most
this often per namespace (so they may be up to this plus the writer's sweep interval old)."""

AppliedState = Literal["Enforced", "Foreign", "DryRun", "Frozen", "KillSwitchEngaged"]


@dataclass(frozen=True)
class QuotaFacts:
    """What the projection reads of the managed quota: its ``annotations`` (the state stamps)
    and ``spec_hard`` (quantity text). ``None`` in :func:`project`: no managed quota.

    ``foreign``: the quota named ``dynquota`` lacks the label
    ``app.kubernetes.io/managed-by=dynquota`` (removed, or taken over): dynquota leaves it
    alone, so nothing of dynquota is enforced there (``annotations``/``spec_hard`` are then
    not read); ``managed_by``: that label's value on it (``None``: no such label)."""

    annotations: Mapping[str, str] = field(default_factory=dict)
    spec_hard: Mapping[str, str] = field(default_factory=dict)
    foreign: bool = False
    managed_by: str | None = None


def foreign_why(managed_by: str | None) -> str:
    """Why a quota named ``dynquota`` whose managed-by label is ``managed_by`` (``None``: no
    such label) is not dynquota's, e.g. ``its label app.kubernetes.io/managed-by=dynquota
    is missing: removed, or never set`` or ``it is labelled app.kubernetes.io/managed-by=helm:
    taken over``."""
    if managed_by is None:
        return f"its label {MANAGED_BY_LABEL}={MANAGED_BY_VALUE} is missing: removed, or never set"
    return f"it is labelled {MANAGED_BY_LABEL}={managed_by}, not {MANAGED_BY_VALUE}: taken over"


@dataclass(frozen=True)
class BudgetFacts:
    """The QuotaBudget a namespace is a member of: ``name``, its ``hard`` (quantity text) and
    its stored ``status`` (``used``, ``granted``, ``free`` maps as the operator wrote them)."""

    name: str
    hard: Mapping[str, str]
    status: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class WriteRateFacts:
    """The write-rate governor's view of a namespace: the policy's ``spec.writeRate``
    (``crd``: its CRD JSON) and, while the namespace is in the APF tarpit, why it was put
    there (``tarpitted``; ``None``: not in it)."""

    crd: Mapping[str, Any]
    tarpitted: str | None = None


@dataclass(frozen=True)
class Projection:
    """The status of one ``AppliedDynamicQuota``: ``stable`` and ``figures`` (module docs)."""

    stable: Mapping[str, Any]
    figures: Mapping[str, Any]

    def status(self, as_of: float, figures_as_of: float | None) -> dict[str, Any]:
        """The ``status`` to write: ``asOf`` (``as_of``, seconds since the epoch), the
        stable part and, with a budget, its figures and ``figuresAsOf``."""
        status: dict[str, Any] = {"asOf": format_time(as_of), **self.stable}
        if "budget" in status:
            budget = dict(status["budget"])
            budget.update(self.figures)
            if figures_as_of is not None:
                budget["figuresAsOf"] = format_time(figures_as_of)
            status["budget"] = budget
        return status

    @classmethod
    def from_status(cls, status: Mapping[str, Any]) -> Projection:
        """The projection a stored ``status`` shows (for comparing with a new one)."""
        stable = {k: v for k, v in status.items() if k != "asOf"}
        figures: dict[str, Any] = {}
        if isinstance(stable.get("budget"), Mapping):
            budget = dict(stable["budget"])
            for key in _FIGURE_KEYS:
                if key in budget:
                    figures[key] = budget.pop(key)
            budget.pop("figuresAsOf", None)
            stable["budget"] = budget
        return cls(stable, figures)


_FIGURE_KEYS: Final = ("used", "granted", "free")


def should_write(
    old: Projection | None,
    new: Projection,
    written_at: float | None,
    now: float,
    prompt: bool = False,
) -> bool:
    """Whether ``new`` must be written over ``old`` (``None``: none stored), last written at
    ``written_at`` (``None``: unknown, e.g. listed after a restart): at once when its stable
    part differs; when only the figures do, once :data:`FIGURES_REFRESH` seconds passed, or at
    once with ``prompt`` (a namespace that just joined its budget, whose figures did not count
    it yet)."""
    if old is None or old.stable != new.stable:
        return True
    if old.figures == new.figures:
        return False
    return prompt or written_at is None or now - written_at >= FIGURES_REFRESH


def project(
    *,
    namespace: str,
    governance: Governance,
    kill_switch: bool,
    dry_run: bool,
    quota: QuotaFacts | None,
    budget: BudgetFacts | None,
    default_ttl: int,
    write_rate: WriteRateFacts | None = None,
) -> Projection:
    """The projection of ``namespace`` governed by ``governance`` (kind ``managed`` or
    ``frozen``), with the kill switch ``kill_switch``, the operator's own ``dry_run``, its
    managed ``quota`` and the ``budget`` it is a member of; ``default_ttl``: the operator's
    override TTL (seconds) where the policy sets none; ``write_rate``: the policy's write-rate
    budget and whether the namespace is in the tarpit (``None``: no budget).
    """
    annotations = quota.annotations if quota is not None else {}
    policy: dict[str, Any] = {"name": governance.policy or ""}
    state: AppliedState
    if kill_switch:
        state = "KillSwitchEngaged"
        message = (
            "the kill switch is engaged: dynquota removed every managed quota, so nothing of "
            "dynquota limits this namespace now; sizing resumes when an admin releases it"
        )
    elif quota is not None and quota.foreign:
        state = "Foreign"
        message = (
            f"the ResourceQuota dynquota in this namespace is not dynquota's "
            f"({foreign_why(quota.managed_by)}): dynquota leaves it alone, so policy "
            f"{governance.policy} sizes nothing here"
            + (
                f" and this namespace's slice of QuotaBudget {budget.name} is not enforced by "
                "dynquota"
                if budget is not None
                else ""
            )
            + f"; its limits are whatever its owner wrote (kubectl -n {namespace} get "
            "resourcequota dynquota). For dynquota to size it again, the platform team deletes "
            "that quota"
        )
    elif governance.kind == "frozen":
        state = "Frozen"
        message = (
            f"policy {governance.policy} is invalid: the managed quota is left as it is until "
            "the platform team fixes it"
        )
    elif dry_run or governance.dry_run:
        state = "DryRun"
        message = (
            f"policy {governance.policy} is in dry run: decisions are reported, no quota is "
            "enforced"
        )
    else:
        state = "Enforced"
        message = f"sized by policy {governance.policy}: kubectl -n {namespace} get resourcequota"
        message += " dynquota shows the hard limits and usage"
    if governance.kind == "managed":
        policy["dryRun"] = bool(governance.dry_run or dry_run)
        policy["resources"] = {
            key: _resource(key, governance.profiles[key], annotations, state == "Enforced")
            for key in resource_order(governance.profiles)
        }
        policy["override"] = _override(governance, annotations, default_ttl, state)
    stable: dict[str, Any] = {"state": state, "message": message, "policy": policy}
    if write_rate is not None:
        rate: dict[str, Any] = {**write_rate.crd, "tarpitted": write_rate.tarpitted is not None}
        if write_rate.tarpitted is not None:
            rate["reason"] = write_rate.tarpitted
        stable["writeRate"] = rate
    figures: dict[str, Any] = {}
    if budget is not None:
        slice_ = {
            k: quota.spec_hard[k]
            for k in sorted(budget.hard)
            if quota is not None and k in quota.spec_hard and state == "Enforced"
        }
        stable["budget"] = {"name": budget.name, "hard": dict(sorted(budget.hard.items()))}
        if slice_:
            stable["budget"]["slice"] = slice_
        for key in _FIGURE_KEYS:
            found = budget.status.get(key)
            if isinstance(found, Mapping):
                figures[key] = {str(k): str(v) for k, v in sorted(found.items())}
    return Projection(stable, figures)


def _resource(
    key: str, profile: ResourceProfile, annotations: Mapping[str, str], enforced: bool
) -> dict[str, Any]:
    unit = unit_for(key)
    shown: dict[str, Any] = {
        "minimum": unit.text(profile.minimum),
        "maximum": unit.text(profile.maximum),
        "bufferPercent": profile.buffer_percent,
        "upscaleCooldown": format_duration(profile.upscale_cooldown),
        "downscaleCooldown": format_duration(profile.downscale_cooldown),
    }
    if profile.round_to is not None:
        shown["roundTo"] = unit.text(profile.round_to)
    if profile.minimum_headroom:
        shown["minimumHeadroom"] = unit.text(profile.minimum_headroom)
    last = _time(annotations.get(last_upscale_key(key))) if enforced else None
    if last is not None:
        shown["nextRaiseAfter"] = format_time(last + profile.upscale_cooldown)
    return shown


def _override(
    governance: Governance, annotations: Mapping[str, str], default_ttl: int, state: str
) -> dict[str, Any]:
    rules = governance.override
    shown: dict[str, Any] = {
        "allowed": rules.allowed,
        "ttl": format_duration(rules.ttl if rules.ttl is not None else default_ttl),
        "minInterval": format_duration(rules.min_interval),
    }
    if state != "Enforced":
        return shown
    expires = _time(annotations.get(OVERRIDE_EXPIRES_AT))
    if expires is not None and OVERRIDE_GRANTED_AT in annotations:
        shown["activeUntil"] = format_time(expires)
    ended = _time(annotations.get(OVERRIDE_ENDED_AT))
    if ended is not None and rules.min_interval > 0 and "activeUntil" not in shown:
        shown["nextGrantAfter"] = format_time(ended + rules.min_interval)
    return shown


def _time(text: str | None) -> int | None:
    if text is None:
        return None
    try:
        return parse_time(text)
    except ValueError:
        return None
