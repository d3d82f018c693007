"""Sizing: one decision for one namespace's managed quota (Pure).

:func:`decide` takes plain values (usage, peak, the managed quota's ``spec.hard`` and
annotations, the governing policy, the kill switch, ``now``) and returns a :class:`Decision`:
what to write (create, one JSON merge-patch, or delete), why, which Events to post and when to
look again. It does no I/O and reads no clock. All sizing arithmetic is on integers.

The rules (sizing, tenant override, kill switch, dry run) are stated as implemented in
``docs/sizing.md``. Times are seconds since the epoch, floored to whole seconds (``floor(now)``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

from dynquota.names import DEFAULT_OVERRIDE_TTL
from dynquota.policy.decision import (
    Change,
    ChangeKind,
    Decision,
    Event,
    QuotaState,
    target,
)
from dynquota.policy.durations import format_duration
from dynquota.policy.keyrules import (
    DEFAULT_NOT_COUNTED_AFTER,
    NEWBORN,
    Draft,
    KeyRules,
    clamp_note,
    edited_note,
    parse_record,
    record_outside_bounds,
    stored_text,
)
from dynquota.policy.models import ResourceProfile
from dynquota.policy.override import (
    Override,
    ended_text,
    frozen_events,
    read_override,
    reject_unmanaged_override,  # re-exported: dynquota.operator.reporting imports it here
)
from dynquota.policy.profiles import resource_order
from dynquota.policy.selection import Governance
from dynquota.policy.state import (
    OVERRIDE,
    POLICY,
    format_time,
    hard_key,
    last_change_key,
    last_upscale_key,
    profile_key,
    quoted,
)
from dynquota.policy.units import unit_for
from dynquota.quantity import Quantity

__all__ = ["decide", "reject_unmanaged_override"]


def _buffer(profile: ResourceProfile, fmt: Callable[[int], str]) -> str:
    """``buffer 40%`` (``, minimum headroom 2``): the sizing a reason names."""
    text = f"buffer {profile.buffer_percent}%"
    if profile.minimum_headroom:
        text += f", minimum headroom {fmt(profile.minimum_headroom)}"
    return text


def _window(profile: ResourceProfile) -> str:
    return format_duration(profile.downscale_cooldown)  # as a reason names it (``1h``)


def _nothing(note: str, dry_run: bool, events: list[Event] | None = None) -> Decision:
    return Decision("nothing", notes=(note,), events=tuple(events or ()), dry_run=dry_run)


def decide(
    *,
    governance: Governance,
    usage: Mapping[str, int],
    peak: Mapping[str, int],
    quota: QuotaState | None,
    kill_switch: bool | None,
    now: float,
    started_at: float,
    dry_run: bool = False,
    override_ttl: int = DEFAULT_OVERRIDE_TTL,
    previously_managed: bool = False,
    namespace: str = "",
    help_url: str = "",
    uncounted_since: Mapping[str, float] | None = None,
    not_counted_after: int = DEFAULT_NOT_COUNTED_AFTER,
    missing_defaults: frozenset[str] = frozenset(),
    budgeted: Mapping[str, str] | None = None,
    daemon_floor: Mapping[str, int] | None = None,
    charged: Mapping[str, int] | None = None,
    unenforced: frozenset[str] = frozenset(),
    born_at: float | None = None,
    hard_before: Mapping[str, Quantity | int] | None = None,
    uncharged: Mapping[str, int] | None = None,
    stalled: bool = False,
    exhaustion: Mapping[str, float] | None = None,
) -> Decision:
    """Decide the managed quota of one namespace. Pure.

    Args:
        governance: from :func:`dynquota.policy.selection.govern`.
        usage: per sized key, in the key's units (:mod:`dynquota.policy.units`):
            ``max(tally, status.used)`` for ``pods``/``configmaps`` (missing: 0), else
            ``status.used``; a status-driven key missing here has unknown usage and is held
            at its current hard (:func:`~dynquota.policy.decision.observed_usage`).
        peak: per key, the peak of the usage over the last ``downscaleCooldown`` (units;
            missing or below the usage: the usage is used).
        quota: the managed quota (or, in dry run, the simulated one), ``None`` if there is none.
        kill_switch: ``True`` engaged, ``False`` released, ``None`` unknown (nothing is
            written).
        now: seconds since the epoch (floored to whole seconds).
        started_at: when the operator started (seconds since the epoch): no downscale before
            ``started_at + downscaleCooldown``, since peak history before it is lost.
        dry_run: the global dry-run flag (a policy's ``dryRun`` is in ``governance``).
        override_ttl: the operator's tenant override lifetime, seconds (a policy's
            ``spec.override.ttl`` replaces it).
        previously_managed: with ``quota=None``, the namespace had a managed quota that
            someone else deleted (not dynquota: the kill switch and opting out are not
            re-creations): the create is reported as a ``QuotaRecreated`` Warning instead of a
            ``Resized`` Event. Ignored when ``quota`` is given.
        namespace: the namespace's name, for the override command in the tenant line.
        help_url: the admin's help page for tenants (``""``: none), appended to the tenant
            line and its ``QuotaAtLimit`` Warnings.
        uncounted_since: per status-driven key of ``spec.hard``, since when (seconds since
            the epoch) ``status.hard`` shows it while ``status.used`` does not; after
            ``not_counted_after`` seconds the key is removed from ``spec.hard`` with a
            ``KeyNotCounted`` Warning and not added again while its
            ``dynquota.io/not-counted.<key>`` annotation is there.
        not_counted_after: seconds, :func:`not_counted_after` of the controller's sync period.
        missing_defaults: keys of the policy that force requests (the compute trap) and for
            which the namespace has no LimitRange default: such a key is never added to
            ``spec.hard`` (Warning ``NeedsDefaultRequests``); one already there stays sized.
        budgeted: key -> the QuotaBudget whose slice it is (the namespace is a member): the
            decision is still made (its hard is the budget's demand), but the tenant line says
            the slice is raised only from the budget's free room.
        daemon_floor: key -> the hard (units) the DaemonSet pods of new nodes need: usage
            when the DaemonSets were listed plus :func:`dynquota.policy.daemons.node_growth`
            (an absolute floor, so a later decision on grown usage adds nothing twice): an
            existing key's hard is raised to it at once (at most the maximum), without waiting
            for or restarting the upscale cooldown.
        charged: key -> ``status.used`` of a key sized from its tally while ``status.used``
            exceeds it (phantom charges, :func:`~dynquota.policy.decision.observed_usage`): no
            change takes ``hard`` below ``min(hard, charged)`` (below it every create would be
            refused until the recount); it is never raised to it either.
        unenforced: keys of the managed quota's ``spec.hard`` that its ``status.hard`` lacks
            (the quota controller has not enforced them yet; creates are admitted uncharged):
            usage above hard is not followed (held) until the key is enforced, then raised at
            once to at most ``max(hard, maximum)`` (issue 27; ``docs/sizing.md``).
        born_at: the creationTimestamp (seconds since the epoch) of a namespace created while
            the operator ran; ``None``: found at its start (adopted: an install) or unknown.
            In a namespace younger than :data:`NEWBORN` seconds the usage at the quota's create
            does not lift ``hard`` past the maximum (older, or ``None``: adopted).
        hard_before: with ``quota=None``, the ``spec.hard`` of the managed quota dynquota
            last saw in this namespace while it stayed governed (deleted since by the kill
            switch or by someone else): a key in it is not lifted past
            ``max(that hard, maximum)`` by usage that grew while no quota stood
            (:class:`dynquota.operator.decision.Lineage`; empty or ``None``: adopted).
        uncharged: key -> objects the tally counts above an enforced key's ``status.used``
            (admitted uncharged): a raise is lowered by them (not below the hard before).
        stalled: the quota controller is stalled (:mod:`dynquota.policy.stall`): raises of
            keys sized from ``status.used`` are held (it may be stale).
        exhaustion: key -> seconds until usage reaches the maximum on its recent trend
            (:func:`dynquota.policy.forecast.eta`), said in the tenant line at the limit.

    Returns:
        A :class:`Decision`; ``dry_run`` set when it must not be written.
    """
    t = math.floor(now)
    if kill_switch is None:
        return _nothing(
            "kill switch state unknown: nothing is written until it reads true or false", dry_run
        )
    if governance.kind == "excluded":
        return _nothing(f"not managed: {governance.reason}", dry_run)
    if kill_switch:
        if quota is None:
            return _nothing("kill switch engaged: no managed quota is created", dry_run)
        return Decision(
            "delete", notes=("kill switch engaged: managed quota deleted",), dry_run=dry_run
        )
    if governance.kind == "unmanaged":
        if quota is None:
            return _nothing(f"not managed: {governance.reason}", dry_run)
        return Decision("delete", notes=(f"not managed: {governance.reason}",), dry_run=dry_run)
    if governance.kind == "frozen":
        return _nothing(f"frozen: {governance.reason}", dry_run, frozen_events(governance, quota))
    ttl = governance.override.ttl or override_ttl
    sizer = _Sizer(governance, usage, peak, quota, t, started_at, ttl)
    sizer.recreated = quota is None and previously_managed
    sizer.namespace = namespace
    sizer.help_url = help_url
    sizer.uncounted_since = dict(uncounted_since or {})
    sizer.not_counted_after = not_counted_after
    sizer.missing_defaults = missing_defaults
    sizer.budgeted = dict(budgeted or {})
    sizer.daemon_floor = dict(daemon_floor or {})
    sizer.charged = dict(charged or {})
    sizer.unenforced = unenforced
    sizer.uncharged = dict(uncharged or {})
    sizer.stalled = stalled
    sizer.exhaustion = exhaustion if exhaustion is not None else {}  # (read for a reason)
    sizer.newborn = born_at is not None and t - born_at < NEWBORN
    sizer.hard_before = dict(hard_before or {}) if quota is None else {}
    return sizer.run(dry_run or governance.dry_run)


class _Sizer(KeyRules):
    """The managed case of :func:`decide`, one resource at a time."""

    def run(self, dry_run: bool) -> Decision:
        override: Override | None
        if self.quota is None:
            override = Override("none")
        else:
            override, override_events, override_notes = read_override(
                self.annotations, self.now, self.ttl
            )
            self.events.extend(override_events)
            self.notes.extend(override_notes)
            override = self._govern_override(override)
        profiles = self.governance.profiles
        recorded_policy = self.annotations.get(POLICY)
        policy_renamed = recorded_policy is not None and recorded_policy != self.policy
        if self.quota is not None and recorded_policy is None:
            self.notes.append(f"adopt: {POLICY} missing")
        self._put(POLICY, self.policy)
        for resource in resource_order(profiles):
            self._resource(resource, profiles[resource], override, policy_renamed)
        self._override_annotations(override)
        return self._decision(override, dry_run)

    def _resource(
        self, resource: str, profile: ResourceProfile, override: Override, policy_renamed: bool
    ) -> None:
        now = self.now
        unit = unit_for(resource)
        fmt = unit.text
        self.units[resource] = fmt
        spec: Quantity | int | None = self.quota.hard.get(resource) if self.quota else None
        if not self._counted(resource, unit, spec):
            return
        used = max(0, self.usage.get(resource, 0))
        peak = max(used, self.peak.get(resource, used))
        repairs: list[str] = []
        record_raw = self.annotations.get(hard_key(resource))
        record = recorded = parse_record(record_raw, unit)
        if record_raw is not None and record is None:
            repairs.append(f"{hard_key(resource)} malformed ({quoted(record_raw)})")
        base: int | None
        spec_units = None if spec is None else unit.units(spec)
        if (outside := record_outside_bounds(record, spec_units, profile, unit)) is not None:
            repairs.append(
                f"{hard_key(resource)} malformed ({quoted(record_raw or '')}: {outside})"
            )
            record = None
        if record is not None:
            base = record
        elif spec_units is not None:
            base = spec_units
            if record_raw is None:
                self.notes.append(f"adopt {resource} {fmt(base)}: {hard_key(resource)} missing")
        else:
            base = None
        if base is None and resource in self.missing_defaults:
            self._needs_defaults(resource, unit)
            return
        if base is not None and not unit.tally and resource not in self.usage:
            self._hold_unknown(resource, base, fmt)
            return
        edited = base is not None and (spec_units is None or spec_units != base)
        ceiling = self._ceiling(resource, base, record_raw, profile)
        stamp_keys = (last_upscale_key(resource), last_change_key(resource))
        if base is None:
            last_upscale = last_change = now
        else:
            last_upscale = self._stamp(last_upscale_key(resource), repairs)
            last_change = self._stamp(last_change_key(resource), repairs)
        sizing_key = profile.sizing_key()
        recorded_profile = self.annotations.get(profile_key(resource))
        if base is not None and recorded_profile is None and record_raw is not None:
            self.notes.append(f"adopt {resource}: {profile_key(resource)} missing")
        policy_changed = base is not None and (
            policy_renamed
            or (recorded_profile is not None and recorded_profile != sizing_key)
            or base > profile.maximum
            # a record below the minimum was never written by dynquota (the minimum is raised
            # only with a new profile record): size from the policy, never enforce it
            or base < profile.minimum
        )
        self._report_state(resource, repairs, stamp_keys, used, profile)

        g = unit.granularity
        # (a reason's texts are made in its branch: most decisions under churn change nothing)
        t_used, t_peak = target(used, profile, g), target(peak, profile, g)
        desired: int
        kind: ChangeKind | None = None
        repair = usage_unknown = False
        why = ""
        if override.mode in ("grant", "active"):
            desired = profile.maximum
            until = format_time(override.expires_at or now)
            if base is None:
                kind, why = "create", f"override active until {until}, maximum {fmt(desired)}"
            elif override.mode == "grant":
                kind, why = "override-granted", f"{OVERRIDE}=max until {until}"
            else:
                kind = "policy"
                why = f"policy {self.policy}, override active until {until}, maximum {fmt(desired)}"
        elif base is None:  # not counted yet: its first status.used sizes it at once
            desired, kind = t_used, "create"
            usage_unknown = not unit.tally and resource not in self.usage
            why = "usage unknown yet, " if usage_unknown else f"usage {fmt(used)}, "
            why += (
                f"{_buffer(profile, fmt)}{'' if usage_unknown else clamp_note(used, profile, unit)}"
            )
        elif override.mode in ("expire", "cancel"):
            desired = t_peak
            kind = "override-expired"
            ended = ended_text(override, now, detailed=True)
            why = f"{ended}, peak {fmt(peak)} over {_window(profile)}, {_buffer(profile, fmt)}"
            why += clamp_note(peak, profile, unit)
        elif policy_changed:
            desired = t_peak
            kind = "policy"
            why = (
                f"policy {self.policy}, peak {fmt(peak)} over {_window(profile)}, "
                f"{_buffer(profile, fmt)}, "
                f"minimum {fmt(profile.minimum)}, maximum {fmt(profile.maximum)}"
            )
        elif t_used > base and self._stall_holds(resource, unit, base, used):
            desired = base
        elif t_used > base:
            desired = base
            ready_at = last_upscale + profile.upscale_cooldown
            if now >= ready_at:
                desired = t_used
                kind, why = (
                    "upscale",
                    f"usage {fmt(used)}, {_buffer(profile, fmt)}{clamp_note(used, profile, unit)}",
                )
            else:
                if t_used > max(used, base):  # after a repair, only the buffer is left to wait
                    self.pending.append(ready_at)
                if used > base and resource in self.unenforced:
                    # not enforced yet: what gets in now is uncharged, and a raise would only
                    # follow the tally event by event (issue 27); sized once status.hard exists
                    self.notes.append(
                        f"{resource}: usage {fmt(used)} above hard {fmt(base)} while the quota "
                        "controller has not enforced it (status.hard lacks it): held"
                    )
                elif used > base:
                    # Objects admitted before the quota was in force (or charged late,
                    # kubernetes#123434) put usage above hard: every create is refused, even a
                    # replacement. Raise to usage at once (never past the ceiling), without
                    # restarting the cooldown; the buffer still waits for it.
                    raised = used if ceiling is None else min(used, ceiling)
                    desired, kind, repair = raised, "upscale", True
                    why = f"usage {fmt(used)} above hard {fmt(base)}, raised "
                    why += (
                        "to usage at once (never below usage)"
                        if raised == used
                        else (
                            f"at once to the maximum {fmt(raised)} (usage that got past a quota "
                            "not yet enforced is not followed above the maximum)"
                        )
                    )
                    if t_used > used:
                        why += f"; the buffer waits for the cooldown until {format_time(ready_at)}"
        elif t_peak < base:
            desired = base
            ready_at = max(
                last_change + profile.downscale_cooldown, self.start + profile.downscale_cooldown
            )
            if now >= ready_at:
                desired = t_peak
                kind = "downscale"
                why = (
                    f"peak {fmt(peak)} over {_window(profile)}, {_buffer(profile, fmt)}"
                    f"{clamp_note(peak, profile, unit)}"
                )
            else:
                self.pending.append(ready_at)
        else:
            desired = base

        if kind == "upscale" and not unit.tally:
            why += " (usage is status.used: the next recount may lower it)"
        draft = self._floors(
            resource,
            profile,
            Draft(desired, kind, repair, why),
            base=base,
            used=used,
            peak=peak,
            ceiling=ceiling,
            granted=override.mode in ("grant", "active"),
        )
        desired, kind, repair, why = draft.desired, draft.kind, draft.repair, draft.why
        if base is not None and desired == base:
            kind = None
        if kind is not None:
            if repair:
                pass  # the cooldown keeps running: the buffer still waits for it
            elif usage_unknown:
                # the cooldown counts as already run out: the first status.used sizes the key
                last_upscale, last_change = now - profile.upscale_cooldown, now
            elif base is None or desired > base:
                last_upscale = last_change = now
            else:
                last_change = now
            new = fmt(desired)
            label = f"{resource} {new}" if base is None else f"{resource} {fmt(base)}->{new}"
            reason = f"{kind} {label}: {why}"
            if edited:
                reason += f" (spec.hard was {stored_text(spec) or 'absent'}, edited directly)"
                self.edits.append(f"{edited_note(resource, spec)}, set to {fmt(desired)} ({kind})")
            self.changes.append(Change(resource, kind, stored_text(spec), fmt(desired), reason))
        elif edited:
            self.edits.append(f"{edited_note(resource, spec)}, restored to {fmt(desired)}")
            self.changes.append(
                Change(
                    resource,
                    "revert",
                    stored_text(spec),
                    fmt(desired),
                    f"revert {resource} {stored_text(spec) or 'absent'}->{fmt(desired)}: "
                    "spec.hard was edited directly",
                )
            )
        if override.mode == "active" and override.expires_at is not None:
            self.pending.append(override.expires_at)

        self.hard[resource] = desired
        # a budgeted key's limit is the budget's slice in the quota, not the policy's demand
        limit = spec_units if resource in self.budgeted and spec_units is not None else desired
        self.limits[resource] = (used, limit, profile, last_upscale)
        self._put_time(last_upscale_key(resource), last_upscale)
        self._put_time(last_change_key(resource), last_change)
        if recorded != desired:
            self.set[hard_key(resource)] = fmt(desired)
        self._put(profile_key(resource), sizing_key)
