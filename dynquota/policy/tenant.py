"""The override and tenant-line half of a sizing decision (Pure).

:class:`SizerBase` holds one decision under construction (what to set, remove, change, post)
and the rules that are not per-key sizing: the governed tenant override (``spec.override``),
its annotations, the tenant line ``dynquota.io/message`` with its ``QuotaAtLimit`` Warnings,
and the summary Events. Split out of :mod:`dynquota.policy.decide` (issue #11).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Final

from dynquota.names import EventReason
from dynquota.policy.decision import Change, Event, QuotaState, target
from dynquota.policy.durations import format_duration, rough_duration
from dynquota.policy.models import OverrideSettings, ResourceProfile
from dynquota.policy.override import (
    FUTURE_STAMP_ALLOWANCE,
    Override,
    ended_text,
    parse_time_or_none,
    split_message,
)
from dynquota.policy.selection import MANAGED_LABEL, Governance
from dynquota.policy.state import (
    OVERRIDE,
    OVERRIDE_ENDED_AT,
    OVERRIDE_EXPIRES_AT,
    OVERRIDE_GRANTED_AT,
    TENANT_MESSAGE,
    format_time,
    parse_time,
)
from dynquota.policy.units import unit_for
from dynquota.quantity import Quantity

__all__ = ["TENANT_MESSAGE_REFRESH", "SizerBase"]

TENANT_MESSAGE_REFRESH: Final = 3600
"""Seconds a tenant line (``dynquota.io/message``) stays after its namespace left the limit
when no other write removes it first: removing it needs a write of its own, so a namespace
flapping at its limit costs at most one such write per hour."""


class SizerBase:
    """The state of one decision under construction, and its override and tenant-line rules
    (subclassed by :mod:`dynquota.policy.decide`'s sizer, which adds the per-key sizing)."""

    def __init__(
        self,
        governance: Governance,
        usage: Mapping[str, int],
        peak: Mapping[str, int],
        quota: QuotaState | None,
        now: int,
        started_at: float,
        ttl: int,
    ) -> None:
        self.governance = governance
        self.policy = governance.policy or ""
        self.usage = usage
        self.peak = peak
        self.quota = quota
        self.now = now
        self.start = math.ceil(started_at)
        self.ttl = ttl
        self.annotations: Mapping[str, str] = quota.annotations if quota else {}
        self.hard: dict[str, int] = {}
        self.set: dict[str, str] = {}
        self.remove: set[str] = set()
        self.changes: list[Change] = []
        self.notes: list[str] = []
        self.events: list[Event] = []
        self.pending: list[int] = []
        self.edits: list[str] = []
        self.recreated = False
        self.rules: OverrideSettings = governance.override
        self.namespace = ""
        self.help_url = ""
        self.next_grant: int | None = None
        self.limits: dict[str, tuple[int, int, ResourceProfile, int]] = {}
        self.units: dict[str, Callable[[int], str]] = {}
        self.uncounted_since: dict[str, float] = {}
        self.not_counted_after = 0
        self.missing_defaults: frozenset[str] = frozenset()
        self.budgeted: dict[str, str] = {}
        """Key -> the QuotaBudget whose slice it is (for the tenant line)."""
        self.charged: dict[str, int] = {}
        """Key -> ``status.used`` above the tally (phantom charges): a floor, never a target."""
        self.newborn = False
        """The namespace was created moments ago: its usage is not adopted past the maximum."""
        self.hard_before: dict[str, Quantity | int] = {}
        """Key -> the hard of a managed quota deleted since (kill switch, others): a cap."""
        self.exhaustion: Mapping[str, float] = {}
        """Key -> seconds until usage reaches the maximum on its trend (the tenant line)."""
        self.stalled = False
        """The quota controller is stalled: raises resting on ``status.used`` are held."""
        self.uncharged: dict[str, int] = {}
        """Key -> objects the tally counts and ``status.used`` does not (admitted uncharged)."""
        self.unenforced: frozenset[str] = frozenset()
        """Keys of ``spec.hard`` that ``status.hard`` lacks: not enforced yet."""
        self.daemon_floor: dict[str, int] = {}
        """Key -> the hard the DaemonSet pods of new nodes need (raised to at once)."""
        self.keep: set[str] = set()
        """State annotations kept although their key is not in ``hard`` this time."""
        self.dropped: set[str] = set()
        """Keys removed from ``spec.hard`` because never counted (not reported as edits)."""
        self.unknown: list[str] = []
        """Keys held because their ``status.used`` is missing."""
        """Per resource: usage, the hard limit after this decision, the profile and the
        last upscale stamp after it (for the tenant line); ``units``: each one's formatter
        (units -> quantity text)."""

    # -- annotation helpers -------------------------------------------------------------------

    def _put(self, key: str, text: str) -> None:
        if self.annotations.get(key) != text:
            self.set[key] = text

    def _put_time(self, key: str, seconds: int) -> None:
        current = self.annotations.get(key)
        if current is not None:
            try:
                if parse_time(current) == seconds:
                    return
            except ValueError:
                pass
        self.set[key] = format_time(seconds)

    # -- override annotations ---------------------------------------------------------------

    def _override_annotations(self, override: Override) -> None:
        if override.mode == "grant" and override.granted_at is not None:
            self._put_time(OVERRIDE_GRANTED_AT, override.granted_at)
            self._put_time(OVERRIDE_EXPIRES_AT, override.expires_at or override.granted_at)
            self.pending.append(override.expires_at or override.granted_at)
        elif override.mode == "active" and override.expires_at is not None:
            if override.write_granted and override.granted_at is not None:
                self.set[OVERRIDE_GRANTED_AT] = format_time(override.granted_at)
            if override.write_expires:
                self.set[OVERRIDE_EXPIRES_AT] = format_time(override.expires_at)
            elif override.clamped_from is not None:
                self.set[OVERRIDE_EXPIRES_AT] = format_time(override.expires_at)
                self.notes.append(
                    f"override expiry {format_time(override.clamped_from)} is later than "
                    f"granted-at + {format_duration(self.ttl)}: clamped to "
                    f"{format_time(override.expires_at)}"
                )
        elif override.mode in ("expire", "cancel"):
            for key in (OVERRIDE, OVERRIDE_GRANTED_AT, OVERRIDE_EXPIRES_AT):
                if key in self.annotations:
                    self.remove.add(key)
            if self.rules.min_interval > 0 or OVERRIDE_ENDED_AT in self.annotations:
                end = self.now
                if override.mode == "expire" and override.expires_at is not None:
                    end = min(end, override.expires_at)
                self._put_time(OVERRIDE_ENDED_AT, end)

    # -- governed override (spec.override) and the tenant line ----------------------------------

    def _grant_ready_at(self) -> int | None:
        """When ``spec.override.minInterval`` allows the next grant, or ``None`` (no interval,
        or no previous end recorded; a stamp in the future is not honoured)."""
        if self.rules.min_interval <= 0:
            return None
        ended = parse_time_or_none(self.annotations.get(OVERRIDE_ENDED_AT))
        if ended is None or ended > self.now + FUTURE_STAMP_ALLOWANCE:
            return None
        return ended + self.rules.min_interval

    def _govern_override(self, override: Override) -> Override:
        """Apply the policy's ``spec.override`` rules to the override read from the quota: a
        request the rules refuse is not granted (``OverrideRejected``, cause naming the rule);
        an active override under a policy that no longer allows overrides ends now."""
        rules = self.rules
        stale = OVERRIDE_GRANTED_AT in self.annotations or OVERRIDE_EXPIRES_AT in self.annotations
        if override.mode == "grant":
            if not rules.allowed:
                self.events.append(
                    Event(
                        "Warning",
                        EventReason.OVERRIDE_REJECTED,
                        f"{OVERRIDE}=max not granted: policy {self.policy} does not allow "
                        "overrides (spec.override.allowed: false); ask the platform team",
                        cause="override.allowed",
                    )
                )
                if stale:  # malformed state of an earlier grant: end it
                    return Override("expire", ended="override ended (not allowed by policy)")
                return Override("none")
            ready = self._grant_ready_at()
            if ready is not None and self.now < ready:
                self.next_grant = ready
                self.pending.append(ready)
                self.events.append(
                    Event(
                        "Warning",
                        EventReason.OVERRIDE_REJECTED,
                        f"{OVERRIDE}=max not granted before {format_time(ready)}: policy "
                        f"{self.policy} allows a new override "
                        f"{format_duration(rules.min_interval)} after the previous one ended "
                        "(spec.override.minInterval); the request stays and is granted then",
                        cause="override.minInterval",
                    )
                )
                if stale:
                    return Override("expire", ended="override ended (malformed state)")
                return Override("none")
        elif override.mode == "active" and not rules.allowed:
            return Override(
                "expire",
                override.granted_at,
                override.expires_at,
                ended=f"override ended: policy {self.policy} does not allow overrides "
                "(spec.override.allowed: false)",
            )
        return override

    def _override_hint(self, override: Override, kind: str) -> str:
        """What a tenant at the limit can do, for one resource whose situation is ``kind``."""
        if kind == "budget":  # an override asks the budget, which gives only its free room
            return (
                "an override gets only the budget's free room: ask the platform team for a "
                "larger budget"
            )
        if override.mode in ("grant", "active"):
            return "the override is active: ask the platform team for a higher maximum"
        if kind == "maximum":
            return "ask the platform team for a policy with a higher maximum"
        if not self.rules.allowed:
            return f"overrides are not allowed by policy {self.policy}: ask the platform team"
        if self.next_grant is not None:
            return f"the override can be granted again at {format_time(self.next_grant)}"
        ns = self.namespace or "NS"
        return (
            f"for more room now: kubectl -n {ns} annotate resourcequota dynquota "
            f"{OVERRIDE}=max (every resource to its policy maximum for "
            f"{format_duration(self.ttl)})"
        )

    def _tenant_message(self, override: Override, dry_run: bool) -> None:
        """The tenant line (``dynquota.io/message``) and ``QuotaAtLimit`` Warnings for the
        resources whose usage reached their hard limit after this decision.

        The line is ``<RFC 3339 when written>: <what>``; it is rewritten only when its
        content changes (never at rest), and once no resource is at its limit it is removed
        with the next write, or by a write of its own :data:`TENANT_MESSAGE_REFRESH` seconds
        after it was written (a namespace flapping at its limit writes it at most that often).
        """
        parts: list[str] = []
        help_text = f" Help: {self.help_url}" if self.help_url else ""
        for resource, (used, hard, profile, last_upscale) in self.limits.items():
            if used < hard or resource in self.unenforced:
                continue  # not at its limit, or not enforced yet (nothing is refused)
            fmt = self.units.get(resource, str)
            goal = target(used, profile, unit_for(resource).granularity)
            budget = self.budgeted.get(resource)
            if budget is not None:
                kind = "budget"
                when = (  # what a tenant may run: its namespace's AppliedDynamicQuota
                    f"its slice of QuotaBudget {budget}: raised only when the budget has free "
                    f"room (kubectl dynquota status -n {self.namespace or 'NS'})"
                )
            elif override.mode in ("grant", "active"):
                kind = "override"
                until = format_time(override.expires_at or self.now)
                when = f"the policy maximum under the override (active until {until})"
            elif used > profile.maximum:
                kind = "maximum"
                when = (
                    f"above the maximum {fmt(profile.maximum)} of policy {self.policy}: no "
                    "automatic raise"
                )
            elif hard >= profile.maximum:
                kind = "maximum"
                when = f"the maximum of policy {self.policy}: no automatic raise"
            elif goal > hard:
                kind = "cooldown"
                raise_at = max(last_upscale + profile.upscale_cooldown, self.now)
                when = f"next automatic raise at {format_time(raise_at)}"
            else:
                kind = "no-buffer"
                when = (
                    f"no automatic raise (its target is {fmt(goal)}: bufferPercent "
                    f"{profile.buffer_percent}, minimum {fmt(profile.minimum)})"
                )
            left = self.exhaustion.get(resource)
            if kind in ("cooldown", "no-buffer") and left is not None:
                when += (
                    f"; at its recent rate it reaches the maximum {fmt(profile.maximum)} in "
                    f"{rough_duration(left)}"
                )
            part = (
                f"{resource} at its limit (used {fmt(used)} of hard {fmt(hard)}): {when}; "
                f"{self._override_hint(override, kind)}"
            )
            parts.append(part)
            if not dry_run:
                self.events.append(
                    Event(
                        "Warning",
                        EventReason.QUOTA_AT_LIMIT,
                        part + "." + help_text,
                        cause=f"{resource}:{kind}",
                    )
                )
        existing = self.annotations.get(TENANT_MESSAGE)
        written_at, old_content = split_message(existing)
        if parts:
            content = "; ".join(parts) + "." + help_text
            if content != old_content:
                self.set[TENANT_MESSAGE] = f"{format_time(self.now)}: {content}"
            return
        if existing is None or self.quota is None:
            return
        refresh_at = None if written_at is None else written_at + TENANT_MESSAGE_REFRESH
        if self.set or self.remove or self.changes or refresh_at is None or self.now >= refresh_at:
            self.remove.add(TENANT_MESSAGE)
        else:
            self.pending.append(refresh_at)

    def _summarise_events(self, override: Override) -> None:
        by_kind: dict[str, list[Change]] = {}
        for change in self.changes:
            if change.resource in self.budgeted:
                continue  # only the budget's demand: its pass writes (and reports) the slice
            by_kind.setdefault(change.kind, []).append(change)
        granted = by_kind.pop("override-granted", [])
        expired = by_kind.pop("override-expired", [])
        by_kind.pop("revert", None)  # reported as ManualEditReverted
        by_kind.pop("not-counted", None)  # reported as KeyNotCounted
        resized = [c for kind, changes in by_kind.items() for c in changes]
        resized.sort(key=lambda c: self.changes.index(c))
        if override.mode == "grant":
            until = format_time(override.expires_at or self.now)
            sizes = ", ".join(f"{c.resource} {c.old}->{c.new}" for c in granted) or "no change"
            if self.budgeted:
                sizes += (
                    f"; {', '.join(sorted(self.budgeted))} asked of the budget (it grants only its "
                    "free room)"
                )
            self.events.append(
                Event(
                    "Normal",
                    EventReason.OVERRIDE_GRANTED,
                    f"override granted until {until}: {sizes}",
                )
            )
        if override.mode in ("expire", "cancel"):
            ended = ended_text(override, self.now, detailed=False)
            sizes = "; ".join(c.reason for c in expired) or "no change"
            self.events.append(Event("Normal", EventReason.OVERRIDE_EXPIRED, f"{ended}: {sizes}"))
        if resized and self.recreated:
            self.events.append(
                Event(
                    "Warning",
                    EventReason.QUOTA_RECREATED,
                    "the managed quota was deleted and is re-created (its state is lost, "
                    "cooldowns restart; to stop dynquota managing this namespace, label it "
                    f"{MANAGED_LABEL}=false): " + "; ".join(c.reason for c in resized),
                )
            )
        elif resized:
            self.events.append(
                Event("Normal", EventReason.RESIZED, "; ".join(c.reason for c in resized))
            )
        if self.edits:
            self.events.append(
                Event(
                    "Warning",
                    EventReason.MANUAL_EDIT_REVERTED,
                    f"spec.hard was edited directly: {'; '.join(self.edits)}. dynquota sizes "
                    f"this quota: change its DynamicQuotaPolicy, or request {OVERRIDE}=max",
                )
            )
