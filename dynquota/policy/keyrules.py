"""Per-key rules of a sizing decision (Pure): stamps, the ``spec.hard`` record, keys whose
usage is unknown (held; ``KeyNotCounted``) and compute keys without a LimitRange default
(``NeedsDefaultRequests``). Split out of :mod:`dynquota.policy.decide` (issue #11).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Final

from dynquota.names import EventReason
from dynquota.policy.decision import Change, Event, grown_target
from dynquota.policy.durations import format_duration
from dynquota.policy.models import ResourceProfile
from dynquota.policy.override import FUTURE_STAMP_ALLOWANCE
from dynquota.policy.state import (
    format_time,
    not_counted_key,
    parse_time,
    quoted,
    resource_keys,
)
from dynquota.policy.tenant import SizerBase
from dynquota.policy.units import KeyUnit
from dynquota.quantity import Quantity, QuantityError

__all__ = [
    "DEFAULT_NOT_COUNTED_AFTER",
    "DISCOVERY_RESYNC",
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
