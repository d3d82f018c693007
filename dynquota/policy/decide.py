"""Sizing: one decision for one namespace's managed quota (Pure).

:func:`decide` takes plain values (usage, peak, the managed quota's ``spec.hard`` and
annotations, the governing policy, the kill switch, ``now``) and returns a :class:`Decision`:
what to write (create, one JSON merge-patch, or delete), why, which Events to post and when to
look again. It does no I/O and reads no clock. All sizing arithmetic is on integers.

The rules (sizing, tenant override, kill switch, dry run) are stated as implemented, with
every ambiguity settled, in ``docs/sizing.md``. Times are seconds
since the epoch; decisions work on whole seconds (``floor(now)``), the resolution of the
timestamps stored in annotations.
"""

from __future__ import annotations

import contextlib
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from dynquota.names import DEFAULT_OVERRIDE_TTL, EventReason
from dynquota.policy.durations import format_duration
from dynquota.policy.models import TRACKED_RESOURCES, OverrideSettings, ResourceProfile
from dynquota.policy.selection import MANAGED_LABEL, Governance
from dynquota.policy.state import (
    ANNOTATION_PREFIX,
    OVERRIDE,
    OVERRIDE_ENDED_AT,
    OVERRIDE_EXPIRES_AT,
    OVERRIDE_GRANTED_AT,
    POLICY,
    TENANT_MESSAGE,
    format_time,
    hard_key,
    last_change_key,
    last_upscale_key,
    parse_time,
    profile_key,
    quoted,
)
from dynquota.quantity import Quantity, QuantityError, parse_quantity

__all__ = [
    "DEFAULT_OVERRIDE_TTL",
    "RECURRING_REASONS",
    "TENANT_MESSAGE_REFRESH",
    "Action",
    "Change",
    "ChangeKind",
    "Decision",
    "Event",
    "QuotaState",
    "apply_decision",
    "ceil_div",
    "decide",
    "reject_unmanaged_override",
    "target",
]


Action = Literal["create", "patch", "delete", "nothing"]
ChangeKind = Literal[
    "create",
    "upscale",
    "downscale",
    "policy",
    "revert",
    "override-granted",
    "override-expired",
]
EventType = Literal["Normal", "Warning"]

#: seconds a cooldown stamp may lie in the future (clock skew between replicas) before it is
#: treated as malformed and restarted at ``now``
FUTURE_STAMP_ALLOWANCE: Final = 300
TENANT_MESSAGE_REFRESH: Final = 3600
"""Seconds a tenant line (``dynquota.io/message``) stays after its namespace left the limit
when no other write removes it first: removing it needs a write of its own, so a namespace
flapping at its limit costs at most one such write per hour."""

RECURRING_REASONS: Final = frozenset(
    {EventReason.OVERRIDE_REJECTED, EventReason.USAGE_ABOVE_MAXIMUM, EventReason.QUOTA_AT_LIMIT}
)
"""Reasons of Warnings that :func:`decide` repeats on every decision while their cause lasts
(the caller posts them once per cause); every other Event reports one occurrence."""

_STATE_PREFIXES: Final = tuple(
    f"{ANNOTATION_PREFIX}{name}." for name in ("last-upscale", "last-change", "hard", "profile")
)
_RECORD: Final = re.compile(r"[0-9]+")


def ceil_div(numerator: int, denominator: int) -> int:
    """``ceil(numerator / denominator)`` in integers, for ``denominator > 0``."""
    return -(-numerator // denominator)


def target(usage: int, profile: ResourceProfile) -> int:
    """``T(U) = min(maximum, max(minimum, ceil(U * (100 + bufferPercent) / 100)))``."""
    grown = ceil_div(usage * (100 + profile.buffer_percent), 100)
    return min(profile.maximum, max(profile.minimum, grown))


def _clamp_note(usage: int, profile: ResourceProfile) -> str:
    grown = ceil_div(usage * (100 + profile.buffer_percent), 100)
    if grown > profile.maximum:
        return f", at maximum {profile.maximum}"
    if grown < profile.minimum:
        return f", at minimum {profile.minimum}"
    return ""


@dataclass(frozen=True)
class QuotaState:
    """The managed quota as :func:`decide` reads it.

    ``hard``: ``spec.hard``, every key (foreign ones too), values as :class:`Quantity` or int
    (compared numerically). ``annotations``: ``metadata.annotations`` (only ``dynquota.io/``
    keys are read; see :mod:`dynquota.policy.state`). Parse strings with :meth:`parse`.
    """

    hard: Mapping[str, Quantity | int] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def parse(cls, hard: Mapping[str, str], annotations: Mapping[str, str]) -> QuotaState:
        """From ``spec.hard`` as quantity strings and ``metadata.annotations``; a malformed
        quantity is left out (as if the key were absent: the sizing then sets it). Pure."""
        parsed: dict[str, Quantity | int] = {}
        for key, text in hard.items():
            with contextlib.suppress(QuantityError):
                parsed[key] = parse_quantity(text)
        return cls(parsed, dict(annotations))


def observed_usage(
    tally: Mapping[str, int],
    status_used: Mapping[str, int],
    resources: Iterable[str] = TRACKED_RESOURCES,
) -> dict[str, int]:
    """``U = max(tally, status.used)`` per resource of ``resources`` (counts; missing: 0): what
    :func:`decide` takes as ``usage``. The tally is what the informers count now;
    ``status.used`` what the quota controller charged (it may lag, or count what the
    informers have not seen yet), so the larger is the safe one. Pure."""
    return {r: max(tally.get(r, 0), status_used.get(r, 0)) for r in resources}


@dataclass(frozen=True)
class Change:
    """One change of ``spec.hard[resource]``: ``old`` and ``new`` as canonical text (``None``:
    absent), ``kind`` and the human ``reason`` (``"upscale pods 14->20: usage 14, buffer
    40%"``)."""

    resource: str
    kind: ChangeKind
    old: str | None
    new: str | None
    reason: str


@dataclass(frozen=True)
class Event:
    """A Kubernetes Event to post on the managed quota: ``type`` Normal/Warning, ``reason``
    (Normal: ``Resized``, ``OverrideGranted``, ``OverrideExpired``; Warning:
    ``OverrideRejected``, ``UsageAboveMaximum``, ``QuotaAtLimit``, ``StateRepaired``,
    ``ManualEditReverted``, ``QuotaRecreated``) and ``message``. ``cause``: what a recurring
    Warning is about (a resource name, a rule, or ``""`` for the whole quota); a caller
    posting Warnings of :data:`RECURRING_REASONS` once per hour keys them on ``(namespace,
    reason, cause)``, never on the message (which changes with usage and with what a tenant
    writes)."""

    type: EventType
    reason: str
    message: str
    cause: str = field(default="", compare=False)


@dataclass(frozen=True)
class Decision:
    """What to do with one namespace's managed quota.

    - ``action``: ``create`` (build the quota from ``hard`` and ``set_annotations``),
      ``patch`` (one JSON merge-patch, :meth:`merge_patch`), ``delete``, or ``nothing``;
    - ``hard``: desired ``spec.hard`` per tracked resource, counts (create/patch; else empty);
    - ``set_annotations`` / ``remove_annotations``: annotation changes (patch) or all
      annotations (create);
    - ``null_hard``: foreign ``spec.hard`` keys the merge-patch sets to null;
    - ``changes``: one :class:`Change` per changed ``spec.hard`` entry, with its reason;
    - ``notes``: reasons of state-only writes (adopting or repairing annotations, clamping an
      override expiry, recording a new policy) and why nothing happens;
    - ``events``: Events to post (Warnings among them are also in :attr:`warnings`);
    - ``requeue_at``: when to decide again (next cooldown end or override expiry; seconds since
      the epoch) or ``None``; the caller merges grace expiry and peak-window expiry;
    - ``dry_run``: the decision is to be reported, never written.
    """

    action: Action
    hard: Mapping[str, int] = field(default_factory=dict)
    set_annotations: Mapping[str, str] = field(default_factory=dict)
    remove_annotations: frozenset[str] = frozenset()
    null_hard: frozenset[str] = frozenset()
    changes: tuple[Change, ...] = ()
    notes: tuple[str, ...] = ()
    events: tuple[Event, ...] = ()
    requeue_at: float | None = None
    dry_run: bool = False

    @property
    def shrinks(self) -> bool:
        """Whether writing this can lower what the namespace may use: a delete, a lower or
        newly added ``spec.hard`` entry, or an override ended, repaired or clamped (its
        expiry annotation moved or removed without a new grant). Such writes need positive,
        fresh knowledge of the cluster (``docs/operator.md``, fault safety)."""
        if self.action == "delete":
            return True
        if self.action != "patch":
            return False
        for change in self.changes:
            if change.new is None:
                continue  # a key removed from spec.hard limits nothing any more
            if change.old is None:
                return True
            try:
                if parse_quantity(change.new) < parse_quantity(change.old):
                    return True
            except QuantityError:
                return True
        granting = OVERRIDE_GRANTED_AT in self.set_annotations
        expiry_moved = OVERRIDE_EXPIRES_AT in self.set_annotations or bool(
            {OVERRIDE_EXPIRES_AT, OVERRIDE_GRANTED_AT} & self.remove_annotations
        )
        return expiry_moved and not granting

    @property
    def warnings(self) -> tuple[str, ...]:
        """Messages of the Warning events."""
        return tuple(e.message for e in self.events if e.type == "Warning")

    @property
    def reasons(self) -> tuple[str, ...]:
        """Reasons of the ``spec.hard`` changes, in resource order."""
        return tuple(c.reason for c in self.changes)

    def merge_patch(self) -> dict[str, Any]:
        """JSON merge-patch body for ``patch`` (``{}`` otherwise): ``metadata.annotations``
        (``None`` removes) and ``spec.hard`` (all tracked resources as quantity strings,
        foreign keys ``None``)."""
        if self.action != "patch":
            return {}
        annotations: dict[str, str | None] = dict(self.set_annotations)
        annotations.update({key: None for key in sorted(self.remove_annotations)})
        hard: dict[str, str | None] = {k: str(v) for k, v in self.hard.items()}
        hard.update({key: None for key in sorted(self.null_hard)})
        patch: dict[str, Any] = {"spec": {"hard": hard}}
        if annotations:
            patch["metadata"] = {"annotations": annotations}
        return patch


def apply_decision(quota: QuotaState | None, decision: Decision) -> QuotaState | None:
    """The managed quota after ``decision`` is written (what the apiserver would hold).

    Used to keep the simulated quota of dry run, and by tests. Pure.
    """
    if decision.action == "nothing":
        return quota
    if decision.action == "delete":
        return None
    if decision.action == "create" or quota is None:
        return QuotaState(dict(decision.hard), dict(decision.set_annotations))
    hard: dict[str, Quantity | int] = {
        k: v for k, v in quota.hard.items() if k not in decision.null_hard
    }
    hard.update(decision.hard)
    annotations = {
        k: v for k, v in quota.annotations.items() if k not in decision.remove_annotations
    }
    annotations.update(decision.set_annotations)
    return QuotaState(hard, annotations)


def _text(value: Quantity | int | None) -> str | None:
    return None if value is None else str(value)


def _split_message(text: str | None) -> tuple[int | None, str | None]:
    """``(written at, content)`` of a tenant line ``<RFC 3339>: <content>``; a line without a
    valid time gives ``(None, text)``."""
    if text is None:
        return None, None
    stamp, sep, content = text.partition(": ")
    if sep:
        written = _parse_time_or_none(stamp)
        if written is not None:
            return written, content
    return None, text


def _parse_record(raw: str | None) -> int | None:
    return int(raw) if raw is not None and _RECORD.fullmatch(raw) else None


@dataclass
class _Override:
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


def _parse_time_or_none(text: str | None) -> int | None:
    if text is None:
        return None
    try:
        return parse_time(text)
    except ValueError:
        return None


def _read_override(
    annotations: Mapping[str, str], now: int, ttl: int
) -> tuple[_Override, list[Event], list[str]]:
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
            )
        )
    granted_raw = annotations.get(OVERRIDE_GRANTED_AT)
    expires_raw = annotations.get(OVERRIDE_EXPIRES_AT)
    if granted_raw is None and expires_raw is None:
        if valid_request:
            return _Override("grant", now, now + ttl), events, notes
        return _Override("none"), events, notes

    granted = _parse_time_or_none(granted_raw)
    expires = _parse_time_or_none(expires_raw)
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
    state = _Override("active", granted, end)
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
            return _Override("grant", now, now + ttl), events, notes
        message = (
            f"{malformed}; nothing proves when the override was granted and {OVERRIDE} is "
            "not a valid request: the override ends now"
        )
        events.append(Event("Warning", EventReason.STATE_REPAIRED, message))
        ended = "override ended (its state was malformed)"
        return _Override("expire", ended=ended), events, notes

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


def _ended(override: _Override, now: int, detailed: bool) -> str:
    """How an override ended: expired, cancelled, or discarded as malformed."""
    if override.ended is not None:
        return override.ended
    if override.mode == "expire":
        return f"override expired at {format_time(override.expires_at or now)}"
    return f"override cancelled ({OVERRIDE} removed)" if detailed else "override cancelled"


def _edited(resource: str, spec: Quantity | int | None) -> str:
    return f"{resource} removed" if spec is None else f"{resource} edited to {_text(spec)}"


def _frozen_events(governance: Governance, quota: QuotaState | None) -> list[Event]:
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
) -> Decision:
    """Decide the managed quota of one namespace. Pure.

    Args:
        governance: from :func:`dynquota.policy.selection.govern`.
        usage: per tracked resource, ``U = max(tally, status.used)`` (counts; missing: 0).
        peak: per tracked resource, the peak of ``U`` over the last ``downscaleCooldown``
            (counts; missing or below ``U``: ``U`` is used).
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
        return _nothing(f"frozen: {governance.reason}", dry_run, _frozen_events(governance, quota))
    ttl = governance.override.ttl or override_ttl
    sizer = _Sizer(governance, usage, peak, quota, t, started_at, ttl)
    sizer.recreated = quota is None and previously_managed
    sizer.namespace = namespace
    sizer.help_url = help_url
    return sizer.run(dry_run or governance.dry_run)


class _Sizer:
    """The managed case of :func:`decide`, one resource at a time."""

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
        """Per resource: usage, the hard limit after this decision, the profile and the
        last upscale stamp after it (for the tenant line)."""

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

    def run(self, dry_run: bool) -> Decision:
        override: _Override | None
        if self.quota is None:
            override = _Override("none")
        else:
            override, override_events, override_notes = _read_override(
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
        for resource in TRACKED_RESOURCES:
            profile = profiles.get(resource)
            if profile is None:
                continue
            self._resource(resource, profile, override, policy_renamed)
        self._override_annotations(override)
        # State of resources no longer tracked (and foreign spec.hard keys) goes.
        for key in self.annotations:
            if key.startswith(_STATE_PREFIXES) and key.rsplit(".", 1)[-1] not in self.hard:
                self.remove.add(key)
        null_hard = frozenset(
            k for k in (self.quota.hard if self.quota else {}) if k not in self.hard
        )
        for key in sorted(null_hard):
            foreign = _text(self.quota.hard[key]) if self.quota else None
            self.edits.append(f"{key} set to {foreign}, removed (not tracked by dynquota)")
            self.changes.append(
                Change(
                    key,
                    "revert",
                    foreign,
                    None,
                    f"revert {key}: not tracked by dynquota, removed from spec.hard",
                )
            )
        self._summarise_events(override)
        self._tenant_message(override, dry_run)
        requeue = min(self.pending) if self.pending else None
        if self.quota is None:
            action: Action = "create"
        elif self.set or self.remove or self.changes:
            action = "patch"
        else:
            action = "nothing"
        return Decision(
            action,
            hard=dict(self.hard) if action != "nothing" else {},
            set_annotations=dict(self.set) if action != "nothing" else {},
            remove_annotations=frozenset(self.remove) if action != "nothing" else frozenset(),
            null_hard=null_hard if action != "nothing" else frozenset(),
            changes=tuple(self.changes),
            notes=tuple(self.notes),
            events=self._dry(self.events, dry_run),
            requeue_at=float(requeue) if requeue is not None else None,
            dry_run=dry_run,
        )

    @staticmethod
    def _dry(events: list[Event], dry_run: bool) -> tuple[Event, ...]:
        if not dry_run:
            return tuple(events)
        return tuple(Event(e.type, e.reason, f"(dry run) {e.message}", e.cause) for e in events)

    def _resource(
        self, resource: str, profile: ResourceProfile, override: _Override, policy_renamed: bool
    ) -> None:
        now = self.now
        used = max(0, self.usage.get(resource, 0))
        peak = max(used, self.peak.get(resource, used))
        spec: Quantity | int | None = self.quota.hard.get(resource) if self.quota else None
        repairs: list[str] = []
        record_raw = self.annotations.get(hard_key(resource))
        record = _parse_record(record_raw)
        if record_raw is not None and record is None:
            repairs.append(f"{hard_key(resource)} malformed ({quoted(record_raw)})")
        base: int | None
        if record is not None:
            base = record
        elif spec is not None:
            base = spec.ceil() if isinstance(spec, Quantity) else spec
            if record_raw is None:
                self.notes.append(f"adopt {resource} {base}: {hard_key(resource)} missing")
        else:
            base = None
        edited = base is not None and (spec is None or spec != base)
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
        )
        if repairs:
            message = f"state of {resource} repaired: " + ", ".join(repairs)
            if any(key in r for r in repairs for key in stamp_keys):
                message += "; cooldowns restart now"
            self.notes.append(message)
            if any("malformed" in r for r in repairs):
                self.events.append(Event("Warning", EventReason.STATE_REPAIRED, message))
        if used > profile.maximum:
            self.events.append(
                Event(
                    "Warning",
                    EventReason.USAGE_ABOVE_MAXIMUM,
                    f"usage of {resource} {used} is above the maximum {profile.maximum} "
                    f"of policy {self.policy}",
                    cause=resource,
                )
            )

        buffer = f"buffer {profile.buffer_percent}%"
        window = format_duration(profile.downscale_cooldown)
        t_used, t_peak = target(used, profile), target(peak, profile)
        desired: int
        kind: ChangeKind | None = None
        repair = False
        why = ""
        if override.mode in ("grant", "active"):
            desired = profile.maximum
            until = format_time(override.expires_at or now)
            if base is None:
                kind, why = "create", f"override active until {until}, maximum {desired}"
            elif override.mode == "grant":
                kind, why = "override-granted", f"{OVERRIDE}=max until {until}"
            else:
                kind = "policy"
                why = f"policy {self.policy}, override active until {until}, maximum {desired}"
        elif base is None:
            desired = t_used
            kind, why = "create", f"usage {used}, {buffer}{_clamp_note(used, profile)}"
        elif override.mode in ("expire", "cancel"):
            desired = t_peak
            kind = "override-expired"
            ended = _ended(override, now, detailed=True)
            why = f"{ended}, peak {peak} over {window}, {buffer}{_clamp_note(peak, profile)}"
        elif policy_changed:
            desired = t_peak
            kind = "policy"
            why = (
                f"policy {self.policy}, peak {peak} over {window}, {buffer}, "
                f"minimum {profile.minimum}, maximum {profile.maximum}"
            )
        elif t_used > base:
            desired = base
            ready_at = last_upscale + profile.upscale_cooldown
            if now >= ready_at:
                desired = t_used
                kind, why = "upscale", f"usage {used}, {buffer}{_clamp_note(used, profile)}"
            else:
                if t_used > max(used, base):  # after a repair, only the buffer is left to wait
                    self.pending.append(ready_at)
                if used > base:
                    # Objects admitted before the quota was in force (or charged late,
                    # kubernetes#123434) put usage above hard: every create is refused, even a
                    # replacement. Raise to usage at once, without restarting the cooldown; the
                    # buffer still waits for it.
                    desired, kind, repair = used, "upscale", True
                    why = f"usage {used} above hard {base}, raised to usage at once"
                    why += " (never below usage)"
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
                why = f"peak {peak} over {window}, {buffer}{_clamp_note(peak, profile)}"
            else:
                self.pending.append(ready_at)
        else:
            desired = base

        if desired < peak and not (base is not None and desired == base and kind is None):
            # Never below usage (v0.2): a hard below what the namespace already uses refuses
            # every create, replacements of failed pods included. Above the maximum the quota
            # is held at the peak over the downscale window (so a deleted pod's replacement
            # still fits): no growth, and UsageAboveMaximum says so.
            desired = peak
            why += f", held at usage {peak} (never below usage)"
        if base is not None and desired == base:
            kind = None
        if kind is not None:
            if repair:
                pass  # the cooldown keeps running: the buffer still waits for it
            elif base is None or desired > base:
                last_upscale = last_change = now
            else:
                last_change = now
            old = _text(base)
            label = f"{resource} {desired}" if base is None else f"{resource} {old}->{desired}"
            reason = f"{kind} {label}: {why}"
            if edited:
                reason += f" (spec.hard was {_text(spec) or 'absent'}, edited directly)"
                self.edits.append(f"{_edited(resource, spec)}, set to {desired} ({kind})")
            self.changes.append(Change(resource, kind, _text(spec), str(desired), reason))
        elif edited:
            self.edits.append(f"{_edited(resource, spec)}, restored to {desired}")
            self.changes.append(
                Change(
                    resource,
                    "revert",
                    _text(spec),
                    str(desired),
                    f"revert {resource} {_text(spec) or 'absent'}->{desired}: "
                    "spec.hard was edited directly",
                )
            )
        if override.mode == "active" and override.expires_at is not None:
            self.pending.append(override.expires_at)

        self.hard[resource] = desired
        self.limits[resource] = (used, desired, profile, last_upscale)
        self._put_time(last_upscale_key(resource), last_upscale)
        self._put_time(last_change_key(resource), last_change)
        if _parse_record(self.annotations.get(hard_key(resource))) != desired:
            self.set[hard_key(resource)] = str(desired)
        self._put(profile_key(resource), sizing_key)

    def _override_annotations(self, override: _Override) -> None:
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
        ended = _parse_time_or_none(self.annotations.get(OVERRIDE_ENDED_AT))
        if ended is None or ended > self.now + FUTURE_STAMP_ALLOWANCE:
            return None
        return ended + self.rules.min_interval

    def _govern_override(self, override: _Override) -> _Override:
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
                    return _Override("expire", ended="override ended (not allowed by policy)")
                return _Override("none")
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
                    return _Override("expire", ended="override ended (malformed state)")
                return _Override("none")
        elif override.mode == "active" and not rules.allowed:
            return _Override(
                "expire",
                override.granted_at,
                override.expires_at,
                ended=f"override ended: policy {self.policy} does not allow overrides "
                "(spec.override.allowed: false)",
            )
        return override

    def _override_hint(self, override: _Override, kind: str) -> str:
        """What a tenant at the limit can do, for one resource whose situation is ``kind``."""
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

    def _tenant_message(self, override: _Override, dry_run: bool) -> None:
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
            if used < hard:
                continue
            if override.mode in ("grant", "active"):
                kind = "override"
                until = format_time(override.expires_at or self.now)
                when = f"the policy maximum under the override (active until {until})"
            elif used > profile.maximum:
                kind = "maximum"
                when = (
                    f"above the maximum {profile.maximum} of policy {self.policy}: held at "
                    "usage, no automatic raise"
                )
            elif hard >= profile.maximum:
                kind = "maximum"
                when = f"the maximum of policy {self.policy}: no automatic raise"
            elif target(used, profile) > hard:
                kind = "cooldown"
                raise_at = max(last_upscale + profile.upscale_cooldown, self.now)
                when = f"next automatic raise at {format_time(raise_at)}"
            else:
                kind = "no-buffer"
                when = (
                    f"no automatic raise (its target is {target(used, profile)}: bufferPercent "
                    f"{profile.buffer_percent}, minimum {profile.minimum})"
                )
            part = (
                f"{resource} at its limit (used {used} of hard {hard}): {when}; "
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
        written_at, old_content = _split_message(existing)
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

    def _summarise_events(self, override: _Override) -> None:
        by_kind: dict[str, list[Change]] = {}
        for change in self.changes:
            by_kind.setdefault(change.kind, []).append(change)
        granted = by_kind.pop("override-granted", [])
        expired = by_kind.pop("override-expired", [])
        by_kind.pop("revert", None)  # reported as ManualEditReverted
        resized = [c for kind, changes in by_kind.items() for c in changes]
        resized.sort(key=lambda c: self.changes.index(c))
        if override.mode == "grant":
            until = format_time(override.expires_at or self.now)
            sizes = ", ".join(f"{c.resource} {c.old}->{c.new}" for c in granted) or "no change"
            self.events.append(
                Event(
                    "Normal",
                    EventReason.OVERRIDE_GRANTED,
                    f"override granted until {until}: {sizes}",
                )
            )
        if override.mode in ("expire", "cancel"):
            ended = _ended(override, self.now, detailed=False)
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
