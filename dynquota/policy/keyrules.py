"""Per-key rules of a sizing decision (Pure): stamps, the ``spec.hard`` record, keys whose
usage is unknown (held; ``KeyNotCounted``) and compute keys without a LimitRange default
(``NeedsDefaultRequests``). Split out of :mod:`dynquota.policy.decide` (issue #11).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from dynquota.names import EventReason
from dynquota.policy.decision import Action, Change, ChangeKind, Decision, Event, grown_target
from dynquota.policy.durations import format_duration
from dynquota.policy.models import ResourceProfile
from dynquota.policy.override import FUTURE_STAMP_ALLOWANCE, Override
from dynquota.policy.state import (
    ANNOTATION_PREFIX,
    format_time,
    hard_key,
    not_counted_key,
    parse_time,
    quoted,
    resource_keys,
)
from dynquota.policy.tenant import SizerBase
from dynquota.policy.units import KeyUnit, unit_for
from dynquota.quantity import Quantity, QuantityError

__all__ = [
    "DEFAULT_NOT_COUNTED_AFTER",
    "DISCOVERY_RESYNC",
    "NEWBORN",
    "Draft",
    "KeyRules",
    "clamp_note",
    "edited_note",
    "not_counted_after",
    "parse_record",
    "record_outside_bounds",
    "stored_text",
]

_RECORD: Final = re.compile(r"[0-9]+")
DISCOVERY_RESYNC: Final = 30
"""Seconds between the quota controller's discovery resyncs (it picks up a new kind's
evaluator at the next one; kube-controller-manager's fixed 30 s)."""


def not_counted_after(sync_period: int) -> int:
    """Seconds a key may stay in ``status.hard`` without a ``status.used`` before it is
    removed from ``spec.hard`` (``KeyNotCounted``): ``2 x (30 s + sync_period)``, with
    ``sync_period`` the quota controller's ``--resource-quota-sync-period`` in seconds."""
    return 2 * (DISCOVERY_RESYNC + sync_period)


DEFAULT_NOT_COUNTED_AFTER: Final = not_counted_after(300)
"""660 s: :func:`not_counted_after` of the controller's default 5-minute sync period."""


def stored_text(value: Quantity | int | None) -> str | None:
    """``spec.hard`` text as stored (a Quantity's canonical text; an int as is)."""
    return None if value is None else str(value)


def parse_record(raw: str | None, unit: KeyUnit) -> int | None:
    """The ``dynquota.io/hard.<key>`` record in units: digits for counts, quantity text for
    the other keys; ``None`` when absent or malformed."""
    if raw is None:
        return None
    if unit.counted:
        return int(raw) if _RECORD.fullmatch(raw) else None
    try:
        return unit.parse(raw)
    except QuantityError:
        return None


def edited_note(resource: str, spec: Quantity | int | None) -> str:
    return f"{resource} removed" if spec is None else f"{resource} edited to {stored_text(spec)}"


def clamp_note(usage: int, profile: ResourceProfile, unit: KeyUnit) -> str:
    """``", at maximum M"`` / ``", at minimum m"`` when the target of ``usage`` is clamped
    there (:func:`~dynquota.policy.decision.grown_target` outside ``[minimum, maximum]``);
    ``""`` when not."""
    grown = grown_target(usage, profile, unit.granularity)
    if grown > profile.maximum:
        return f", at maximum {unit.text(profile.maximum)}"
    if grown < profile.minimum:
        return f", at minimum {unit.text(profile.minimum)}"
    return ""


STATE_PREFIXES: Final = tuple(
    f"{ANNOTATION_PREFIX}{name}."
    for name in ("last-upscale", "last-change", "hard", "profile", "not-counted")
)
"""The prefixes of dynquota's per-key state annotations."""

NEWBORN: Final = 120
"""Seconds after its creation during which a namespace counts as born under its policy."""


@dataclass
class Draft:
    """One key's decision in the making: ``desired`` hard (the key's units), the change's
    ``kind`` (``None``: none), ``repair`` (the cooldown keeps running) and ``why``."""

    desired: int
    kind: ChangeKind | None = None
    repair: bool = False
    why: str = ""


class KeyRules(SizerBase):
    """:class:`~dynquota.policy.tenant.SizerBase` plus the per-key rules that are not the
    sizing arithmetic itself (subclassed by :mod:`dynquota.policy.decide`'s sizer)."""

    def _stamp(self, key: str, repairs: list[str]) -> int:
        raw = self.annotations.get(key)
        if raw is None:
            if self.quota is not None:
                repairs.append(f"{key} missing")
            return self.now
        try:
            stamp = parse_time(raw)
        except ValueError:
            repairs.append(f"{key} malformed ({quoted(raw)})")
            return self.now
        if stamp > self.now + FUTURE_STAMP_ALLOWANCE:
            # A typo (2062 for 2026) or a skewed clock would otherwise block the cooldown for
            # as long as the skew: restart it now instead (never earlier than honest history).
            repairs.append(f"{key} malformed: in the future ({quoted(raw)})")
            return self.now
        return stamp

    # -- the decision -------------------------------------------------------------------------

    def _counted(self, resource: str, unit: KeyUnit, spec: Quantity | int | None) -> bool:
        """Whether ``resource`` is sized in this decision: not while its
        ``dynquota.io/not-counted.<key>`` annotation says the quota controller never counted it
        (the annotation stays; a value someone wrote back into ``spec.hard`` is removed)."""
        marker = not_counted_key(resource)
        if marker not in self.annotations:
            return True
        self.keep.add(marker)
        self.notes.append(
            f"{resource} not sized: the quota controller never counted it (removed at "
            f"{self.annotations[marker]}); remove the annotation {marker} to try again"
        )
        return False

    def _hold_unknown(self, resource: str, base: int, fmt: Callable[[int], str]) -> None:
        """A status-driven key of ``spec.hard`` whose ``status.used`` is missing: held at its
        hard, never sized from a guess; removed (``KeyNotCounted``) once ``status.hard`` has
        shown it for :attr:`not_counted_after` seconds without a ``status.used``."""
        since = self.uncounted_since.get(resource)
        deadline = None if since is None else math.floor(since) + self.not_counted_after
        if deadline is None or self.now < deadline:
            self.hard[resource] = base
            self.keep.update(resource_keys(resource))
            self.unknown.append(resource)
            note = (
                f"usage of {resource} unknown (status.used has no {resource}): held at {fmt(base)}"
            )
            if deadline is not None:
                self.pending.append(deadline)
                note += f"; removed at {format_time(deadline)} if still not counted"
            self.notes.append(note)
            return
        self.dropped.add(resource)
        self.set[not_counted_key(resource)] = format_time(self.now)
        self.keep.add(not_counted_key(resource))
        why = (
            f"the quota controller has not counted {resource} for "
            f"{format_duration(self.now - math.floor(since or self.now))} since status.hard "
            "showed it (no status.used), and admission refuses every create of a kind whose "
            f"usage is unknown: {resource} removed from spec.hard"
        )
        self.changes.append(
            Change(resource, "not-counted", fmt(base), None, f"not-counted {resource}: {why}")
        )
        self.events.append(
            Event(
                "Warning",
                EventReason.KEY_NOT_COUNTED,
                f"{why}. Check the key (a typo, a kind the controller ignores, or its CRD "
                f"removed); to try again, remove the annotation {not_counted_key(resource)}",
            )
        )

    def _needs_defaults(self, resource: str, unit: KeyUnit) -> None:
        """A compute key the namespace has no LimitRange default for: not added (Warning
        ``NeedsDefaultRequests``), since quota admission would refuse every pod that does not
        declare it."""
        field_name = "default" if unit.info.needs_default_limits else "defaultRequest"
        name = unit.info.canonical.split(".", 1)[1]
        message = (
            f"{resource} not added to the quota: with a quota on it the apiserver refuses every "
            f"pod whose containers do not all declare a {name} "
            f"{'limit' if unit.info.needs_default_limits else 'request'}, and this namespace "
            f"has no LimitRange (type Container) with {field_name}.{name}; add one and "
            "dynquota adds the key"
        )
        self.notes.append(message)
        self.events.append(
            Event("Warning", EventReason.NEEDS_DEFAULT_REQUESTS, message, cause=resource)
        )

    def _report_state(
        self,
        resource: str,
        repairs: list[str],
        stamp_keys: tuple[str, str],
        used: int,
        profile: ResourceProfile,
    ) -> None:
        """Notes and Warnings of one key before it is sized: its state annotations repaired
        (``StateRepaired`` when one was malformed) and usage above the maximum
        (``UsageAboveMaximum``)."""
        if repairs:
            message = f"state of {resource} repaired: " + ", ".join(repairs)
            if any(key in r for r in repairs for key in stamp_keys):
                message += "; cooldowns restart now"
            self.notes.append(message)
            if any("malformed" in r for r in repairs):
                self.events.append(Event("Warning", EventReason.STATE_REPAIRED, message))
        if used > profile.maximum:
            fmt = self.units[resource]
            message = (
                f"usage of {resource} {fmt(used)} is above the maximum {fmt(profile.maximum)} "
                f"of policy {self.policy}"
            )
            self.events.append(
                Event("Warning", EventReason.USAGE_ABOVE_MAXIMUM, message, cause=resource)
            )

    def _decision(self, override: Override, dry_run: bool) -> Decision:
        """The :class:`Decision` once every resource is sized: state of resources no longer
        tracked (and foreign ``spec.hard`` keys) goes, Events and the tenant line are made."""
        kept = {k for r in self.hard for k in resource_keys(r)} | self.keep
        for key in self.annotations:
            if key.startswith(STATE_PREFIXES) and key not in kept:
                self.remove.add(key)
        null_hard = self._untracked_keys()
        self._summarise_events(override)
        self._tenant_message(override, dry_run)
        requeue = min(self.pending) if self.pending else None
        if self.quota is None:
            action: Action = "create"
        elif self.set or self.remove or self.changes:
            action = "patch"
        else:
            action = "nothing"
        writes = action != "nothing"
        return Decision(
            action,
            hard=dict(self.hard) if writes else {},
            set_annotations=dict(self.set) if writes else {},
            remove_annotations=frozenset(self.remove) if writes else frozenset(),
            null_hard=null_hard if writes else frozenset(),
            changes=tuple(self.changes),
            notes=tuple(self.notes),
            events=self._dry(self.events, dry_run),
            requeue_at=float(requeue) if requeue is not None else None,
            dry_run=dry_run,
        )

    def _untracked_keys(self) -> frozenset[str]:
        """Keys of ``spec.hard`` this decision does not size (``null`` in the patch): a key
        the policy no longer lists (a ``policy`` change) or one written by someone else
        (reverted: not tracked by dynquota). Call after every resource is sized."""
        null_hard = frozenset(
            k for k in (self.quota.hard if self.quota else {}) if k not in self.hard
        )
        for key in sorted(null_hard - self.dropped):
            foreign = stored_text(self.quota.hard[key]) if self.quota else None
            if hard_key(key) in self.annotations:
                # dynquota sized it: the policy no longer lists it (not a manual edit)
                reason = f"policy {key} {foreign}->absent: policy {self.policy} no longer sizes it"
                self.changes.append(Change(key, "policy", foreign, None, reason))
                continue
            self.edits.append(f"{key} set to {foreign}, removed (not tracked by dynquota)")
            reason = f"revert {key}: not tracked by dynquota, removed from spec.hard"
            self.changes.append(Change(key, "revert", foreign, None, reason))
        return null_hard

    def _stall_holds(self, resource: str, unit: KeyUnit, base: int, used: int) -> bool:
        """Whether a raise of ``resource`` (usage ``used`` above what ``base`` leaves room
        for) is held because it rests on the ``status.used`` of a stalled quota controller
        (a tally-driven key is sized from the objects that exist: not held)."""
        if not self.stalled or unit.tally:
            return False
        fmt = self.units[resource]
        self.notes.append(
            f"{resource}: raise held at {fmt(base)} (usage {fmt(used)} is status.used, and the "
            "quota controller is stalled: QuotaControllerStalled)"
        )
        return True

    def _ceiling(
        self, resource: str, base: int | None, record_raw: str | None, profile: ResourceProfile
    ) -> int | None:
        """How high never-below-usage may lift a key's hard (units; ``None``: no bound).

        Past the maximum only for usage dynquota found (adoption: no hard yet in a namespace
        neither :attr:`newborn` nor in :attr:`hard_before`, or a hard without dynquota's
        record); otherwise never past ``max(hard, maximum)``: usage that got past a quota not
        yet enforced, or grew while no quota stood, is not followed."""
        if base is None:
            if self.newborn:
                return profile.maximum
            before = self.hard_before.get(resource)
            return (
                None if before is None else max(unit_for(resource).units(before), profile.maximum)
            )
        return None if record_raw is None else max(base, profile.maximum)

    def _floors(
        self,
        resource: str,
        profile: ResourceProfile,
        draft: Draft,
        *,
        base: int | None,
        used: int,
        peak: int,
        ceiling: int | None,
        granted: bool,
    ) -> Draft:
        """The floors under a key's hard, in order: room for the DaemonSet pods of new nodes,
        ``status.used`` charges not recounted yet, and never below usage (the peak) — none
        past ``ceiling`` (units; ``None``: adoption, no ceiling; see ``docs/sizing.md``).
        ``base``: the hard before (``None``: not in the quota yet); ``granted``: a tenant
        override holds the key at its maximum. Returns the draft, changed or not."""
        fmt = self.units[resource]
        wanted = self.daemon_floor.get(resource, 0)
        if wanted > 0 and base is not None and not granted:
            # DaemonSet pods for new nodes (dynquota.policy.daemons): at once, within the
            # maximum, the cooldown left running (the buffer still waits for it)
            floor = min(wanted, max(profile.maximum, used) if ceiling is None else ceiling)
            if draft.desired < floor <= base:  # a downscale: not below the room just given
                draft.desired = floor
                draft.why += f", held at {fmt(floor)} for the DaemonSet pods of new nodes"
            elif floor > draft.desired:
                draft.desired, draft.kind, draft.repair = floor, "upscale", True
                draft.why = (
                    f"room for the DaemonSet pods of new nodes ({fmt(wanted)} with usage "
                    f"{fmt(used)}), raised at once (node growth; the upscale cooldown keeps "
                    "running)"
                )
                if floor < wanted:
                    draft.why += f", at maximum {fmt(profile.maximum)}"
        if resource in self.charged and base is not None:
            floor = min(base, self.charged[resource])
            if draft.desired < floor:
                draft.desired = floor
                draft.why += (
                    f", held at status.used {fmt(floor)} (charges the quota controller has not "
                    "recounted yet)"
                )
        held = base is not None and draft.desired == base and draft.kind is None
        if draft.desired < peak and not held:
            # Never below usage (v0.2): a hard below what the namespace already uses refuses
            # every create, replacements of failed pods included. Above the maximum the quota
            # is held at the peak over the downscale window (so a deleted pod's replacement
            # still fits) where dynquota found that usage; never grown past the ceiling.
            floor = peak if ceiling is None else min(peak, ceiling)
            if floor > draft.desired:
                draft.desired = floor
                if floor == peak:
                    draft.why += f", held at usage {fmt(peak)} (never below usage)"
                else:
                    draft.why += (
                        f", held at {fmt(floor)} below usage {fmt(peak)} (never below usage "
                        "stops at max(hard, maximum) once dynquota has sized the key)"
                    )
        uncharged = self.uncharged.get(resource, 0)
        if uncharged > 0 and base is not None and draft.desired > base:
            # quota admission admits up to hard - status.used more, and status.used misses the
            # objects admitted uncharged (before enforcement) until the recount: a raise gives
            # them no room, or real usage would pass the hard written (and repairs would
            # follow it past the cooldown)
            room = max(base, draft.desired - uncharged)
            if room < draft.desired:
                draft.desired = room
                draft.why += (
                    f", {fmt(room)} until the quota controller recounts {uncharged} object(s) "
                    "admitted uncharged"
                )
        return draft

    @staticmethod
    def _dry(events: list[Event], dry_run: bool) -> tuple[Event, ...]:
        if not dry_run:
            return tuple(events)
        return tuple(Event(e.type, e.reason, f"(dry run) {e.message}", e.cause) for e in events)


def record_outside_bounds(
    record: int | None, spec_units: int | None, profile: ResourceProfile, unit: KeyUnit
) -> str | None:
    """Why a ``dynquota.io/hard.<key>`` record (in ``unit``) cannot be dynquota's, or None.

    dynquota never records a hard outside the policy's ``minimum..maximum`` that differs from
    ``spec.hard`` (a policy change records both at once), so such a record was tampered with,
    not ``spec.hard``: it is repaired, never enforced."""
    if record is None or record == spec_units:
        return None
    if profile.minimum <= record <= profile.maximum:
        return None
    return f"outside {unit.text(profile.minimum)}..{unit.text(profile.maximum)}"
