"""The tenant override as read from the managed quota's annotations (Pure).

:func:`read_override` turns ``dynquota.io/override`` and its stamps into an :class:`Override`
(grant, active, expire, cancel), repairing malformed state safely (``docs/sizing.md`` §3).
Split out of :mod:`dynquota.policy.decide` (issue #11).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, Literal

from dynquota.names import EventReason
from dynquota.policy.decision import Event, QuotaState
from dynquota.policy.durations import format_duration
from dynquota.policy.selection import Governance
from dynquota.policy.state import (
    OVERRIDE,
    OVERRIDE_EXPIRES_AT,
    OVERRIDE_GRANTED_AT,
    format_time,
    parse_time,
    quoted,
)

__all__ = [
    "FUTURE_STAMP_ALLOWANCE",
    "Override",
    "ended_text",
    "frozen_events",
    "parse_time_or_none",
    "read_override",
    "reject_unmanaged_override",
    "split_message",
]

FUTURE_STAMP_ALLOWANCE: Final = 300
"""Seconds a stamp may lie in the future (clock skew between replicas) before it is treated as
malformed and restarted at ``now``."""


def split_message(text: str | None) -> tuple[int | None, str | None]:
    """``(written at, content)`` of a tenant line ``<RFC 3339>: <content>``; a line without a
    valid time gives ``(None, text)``."""
    if text is None:
        return None, None
    stamp, sep, content = text.partition(": ")
    if sep:
        written = parse_time_or_none(stamp)
        if written is not None:
            return written, content
    return None, text


@dataclass
class Override:
    """The tenant override as read from the quota's annotations.

    ``mode``: ``none`` (no override), ``grant`` (grant now), ``active``, ``expire`` (ends now)
    or ``cancel`` (``dynquota.io/override`` removed). ``granted_at`` / ``expires_at``: seconds
    since the epoch (``expires_at``: the provable end). ``clamped_from``: the stored expiry,
    when it was clamped; ``write_granted`` / ``write_expires``: a repaired annotation to write;
    ``ended``: the text of an ``expire`` that is not a plain expiry.
    """

    mode: Literal["none", "grant", "active", "expire", "cancel"]
    granted_at: int | None = None
    expires_at: int | None = None
    clamped_from: int | None = None
    write_granted: bool = False
    write_expires: bool = False
    ended: str | None = None


def parse_time_or_none(text: str | None) -> int | None:
    if text is None:
        return None
    try:
        return parse_time(text)
    except ValueError:
        return None


def read_override(
    annotations: Mapping[str, str], now: int, ttl: int
) -> tuple[Override, list[Event], list[str]]:
    """The override's state, and the Events and notes reading it calls for.

    Malformed override state never blocks a change (``docs/sizing.md`` §3): a provable expiry
    in the past expires and a removed request cancels, whatever else is malformed. The
    provable end is the earliest of a valid ``expires-at`` and a valid ``granted-at + ttl``;
    an active override with partly malformed state is repaired (Warning ``StateRepaired``)
    and never ends later than that, nor later than a grant made now would. With no provable
    time at all the state is discarded: a valid request is granted again from ``now``, any
    other value ends the override now.
    """
    events: list[Event] = []
    notes: list[str] = []
    raw = annotations.get(OVERRIDE)
    valid_request = raw is not None and raw.lower() == "max"
    if raw is not None and not valid_request:
        events.append(
            Event(
                "Warning",
                EventReason.OVERRIDE_REJECTED,
                f"{OVERRIDE}={quoted(raw)} is not a valid request (the only value is max); ignored",
                value=raw,
            )
        )
    granted_raw = annotations.get(OVERRIDE_GRANTED_AT)
    expires_raw = annotations.get(OVERRIDE_EXPIRES_AT)
    if granted_raw is None and expires_raw is None:
        if valid_request:
            return Override("grant", now, now + ttl), events, notes
        return Override("none"), events, notes

    granted = parse_time_or_none(granted_raw)
    expires = parse_time_or_none(expires_raw)
    problems: list[str] = []
    for key, text, value in (
        (OVERRIDE_GRANTED_AT, granted_raw, granted),
        (OVERRIDE_EXPIRES_AT, expires_raw, expires),
    ):
        if text is None:
            problems.append(f"{key} missing")
        elif value is None:
            problems.append(f"{key} malformed ({quoted(text)})")
    if granted is not None and granted > now + FUTURE_STAMP_ALLOWANCE:
        # Where the admission policy is not installed a tenant can write this stamp: a
        # future grant would never end (an expiry is clamped to granted-at + TTL only).
        problems.append(f"{OVERRIDE_GRANTED_AT} in the future ({quoted(granted_raw or '')})")
        granted = None
    if granted is not None and expires is not None and expires < granted:
        problems.append(
            f"{OVERRIDE_EXPIRES_AT} {quoted(expires_raw or '')} is before {OVERRIDE_GRANTED_AT} "
            f"{quoted(granted_raw or '')}"
        )
        granted = None  # a grant after its own expiry proves nothing
    malformed = "override state malformed: " + ", ".join(problems) if problems else ""

    bounds = [b for b in (expires, None if granted is None else granted + ttl) if b is not None]
    end = min(bounds) if bounds else None
    state = Override("active", granted, end)
    if end is not None and expires is not None and end < expires:
        state.clamped_from = expires
    if end is not None and now >= end:
        state.mode = "expire"
    elif raw is None:
        state.mode = "cancel"
    if state.mode in ("expire", "cancel"):
        if malformed:
            notes.append(f"{malformed}; the override annotations are removed")
        return state, events, notes

    if end is None:  # nothing proves when the override was granted
        if valid_request:
            message = (
                f"{malformed}; nothing proves when the override was granted: granted again "
                f"until {format_time(now + ttl)}"
            )
            events.append(Event("Warning", EventReason.STATE_REPAIRED, message))
            return Override("grant", now, now + ttl), events, notes
        message = (
            f"{malformed}; nothing proves when the override was granted and {OVERRIDE} is "
            "not a valid request: the override ends now"
        )
        events.append(Event("Warning", EventReason.STATE_REPAIRED, message))
        ended = "override ended (its state was malformed)"
        return Override("expire", ended=ended), events, notes

    if not malformed:
        return state, events, notes  # a clamp only: a note (_Sizer._override_annotations)
    # Active, partly malformed: repair, never ending later than a grant made now would.
    repairs: list[str] = []
    if granted is None:
        state.granted_at = now
        state.write_granted = True
        repairs.append(f"{OVERRIDE_GRANTED_AT} re-stamped {format_time(now)}")
        if end > now + ttl:
            state.expires_at = end = now + ttl
            state.write_expires = True
            repairs.append(
                f"{OVERRIDE_EXPIRES_AT} set to {format_time(end)} "
                f"(was {quoted(expires_raw or '')}, later than a grant made now would end)"
            )
    else:
        state.write_expires = True
        repairs.append(
            f"{OVERRIDE_EXPIRES_AT} set to {format_time(end)} ({OVERRIDE_GRANTED_AT} + "
            f"{format_duration(ttl)})"
        )
    message = f"{malformed}; repaired: {', '.join(repairs)}; the override ends at "
    events.append(Event("Warning", EventReason.STATE_REPAIRED, message + format_time(end)))
    return state, events, notes


def ended_text(override: Override, now: int, detailed: bool) -> str:
    """How an override ended: expired, cancelled, or discarded as malformed."""
    if override.ended is not None:
        return override.ended
    if override.mode == "expire":
        return f"override expired at {format_time(override.expires_at or now)}"
    return f"override cancelled ({OVERRIDE} removed)" if detailed else "override cancelled"


def frozen_events(governance: Governance, quota: QuotaState | None) -> list[Event]:
    if quota is None or OVERRIDE_GRANTED_AT in quota.annotations:
        return []
    raw = quota.annotations.get(OVERRIDE)
    if raw is None:
        return []
    return [
        Event(
            "Warning",
            EventReason.OVERRIDE_REJECTED,
            f"{OVERRIDE}={quoted(raw)} not granted: the namespace is frozen ({governance.reason})",
        )
    ]


def reject_unmanaged_override(quota_name: str, value: str) -> Event:
    """The ``OverrideRejected`` Warning for a ``dynquota.io/override`` annotation found on a
    ResourceQuota dynquota does not manage (``quota_name``; the caller posts it there)."""
    return Event(
        "Warning",
        EventReason.OVERRIDE_REJECTED,
        f"{OVERRIDE}={quoted(value)} on ResourceQuota {quota_name} ignored: dynquota manages "
        "only the ResourceQuota named dynquota labelled app.kubernetes.io/managed-by=dynquota",
    )
