"""The result of a sizing decision, and the quota it reads (Pure).

:class:`QuotaState` is the managed quota as :func:`dynquota.policy.decide` reads it;
:class:`Decision` what to write (create, one JSON merge-patch, or delete), with its
:class:`Change` list and :class:`Event` list; :func:`apply_decision` the quota after it. Split out
of :mod:`dynquota.policy.decide` (issue #11). Values of ``spec.hard`` are integers in each key's
unit (:mod:`dynquota.policy.units`) and written as canonical quantity text.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from dynquota.names import TRACKED_RESOURCES, EventReason
from dynquota.policy.profiles import ResourceProfile
from dynquota.policy.state import OVERRIDE_EXPIRES_AT, OVERRIDE_GRANTED_AT
from dynquota.policy.units import unit_for
from dynquota.quantity import Quantity, QuantityError, parse_quantity

__all__ = [
    "RECURRING_REASONS",
    "Action",
    "Change",
    "ChangeKind",
    "Decision",
    "Event",
    "EventType",
    "QuotaState",
    "apply_decision",
    "ceil_div",
    "hard_text",
    "observed_usage",
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
    "not-counted",
]
EventType = Literal["Normal", "Warning"]

RECURRING_REASONS: Final = frozenset(
    {
        EventReason.OVERRIDE_REJECTED,
        EventReason.USAGE_ABOVE_MAXIMUM,
        EventReason.QUOTA_AT_LIMIT,
        EventReason.NEEDS_DEFAULT_REQUESTS,
    }
)
"""Reasons of Warnings that :func:`decide` repeats on every decision while their cause lasts
(the caller posts them once per cause); every other Event reports one occurrence."""


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
    phantom: Iterable[str] = (),
) -> dict[str, int]:
    """The usage :func:`decide` takes, per key of ``resources``, in the key's units.

    ``pods`` and ``configmaps`` (tally-driven): ``U = max(tally, status.used)`` (missing: 0).
    The tally is what the informers count now; ``status.used`` what the quota controller
    charged (it may lag, or count what the informers have not seen yet), so the larger is the
    safe one — except for a key of ``phantom``, whose ``status.used`` has exceeded the tally for
    less than the quota controller's sync period (charges of creates that failed after
    admission, kubernetes#76787, not recounted yet): the tally alone, so phantom charges never
    raise ``hard`` (:func:`decide`'s ``charged`` keeps ``hard`` from going below them). Any
    other key: ``status.used`` alone, and a key missing from it is left out (usage unknown:
    :func:`decide` holds it). Pure."""
    usage: dict[str, int] = {}
    phantoms = frozenset(phantom)
    for r in resources:
        if r in TRACKED_RESOURCES:
            used = status_used.get(r, 0)
            usage[r] = tally.get(r, 0) if r in phantoms else max(tally.get(r, 0), used)
        elif r in status_used:
            usage[r] = status_used[r]
    return usage


def ceil_div(numerator: int, denominator: int) -> int:
    """``ceil(numerator / denominator)`` in integers, for ``denominator > 0``."""
    return -(-numerator // denominator)


def target(usage: int, profile: ResourceProfile, granularity: int = 1) -> int:
    """``T(U) = min(maximum, max(minimum, roundUp(max(ceil(U * (100 + bufferPercent) / 100),
    U + minimumHeadroom), granularity)))``, in the key's units; ``granularity`` (> 0) is the
    profile's ``roundTo`` when the policy sets one, else the one given (the key's default: 1
    for counts, 100 for ``requests.cpu`` in millicores)."""
    return min(profile.maximum, max(profile.minimum, grown_target(usage, profile, granularity)))


def grown_target(usage: int, profile: ResourceProfile, granularity: int = 1) -> int:
    """:func:`target` before the ``minimum``/``maximum`` clamps: ``roundUp(max(ceil(U * (100 +
    bufferPercent) / 100), U + minimumHeadroom), step)`` in the key's units (``step``: the
    profile's ``roundTo``, else ``granularity``). Pure."""
    step = profile.round_to or granularity
    buffered = ceil_div(usage * (100 + profile.buffer_percent), 100)
    return ceil_div(max(buffered, usage + profile.minimum_headroom), step) * step


def hard_text(hard: Mapping[str, int]) -> dict[str, str]:
    """``spec.hard`` as canonical quantity text from integers in each key's unit
    (``{"pods": 20, "requests.cpu": 1500}`` -> ``{"pods": "20", "requests.cpu": "1500m"}``)."""
    return {k: _unit_text(k, v) for k, v in hard.items()}


def _unit_text(key: str, units: int) -> str:
    try:
        return unit_for(key).text(units)
    except ValueError:  # not a counted key: never sized, shown as is
        return str(units)


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
    writes). ``value``: the written value such a Warning is about (an annotation's or label's
    text): a different value is reported again at once (only the latest is remembered)."""

    type: EventType
    reason: str
    message: str
    cause: str = field(default="", compare=False)
    value: str = field(default="", compare=False)


@dataclass(frozen=True)
class Decision:
    """What to do with one namespace's managed quota.

    - ``action``: ``create`` (build the quota from ``hard`` and ``set_annotations``),
      ``patch`` (one JSON merge-patch, :meth:`merge_patch`), ``delete``, or ``nothing``;
    - ``hard``: desired ``spec.hard`` per sized key, integers in each key's unit
      (create/patch; else empty; :func:`hard_text` gives the quantity text);
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
        hard: dict[str, str | None] = dict(hard_text(self.hard))
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
    texts = hard_text(decision.hard)
    written: dict[str, Quantity | int] = {
        k: v if texts[k] == str(v) else parse_quantity(texts[k]) for k, v in decision.hard.items()
    }
    if decision.action == "create" or quota is None:
        return QuotaState(written, dict(decision.set_annotations))
    hard: dict[str, Quantity | int] = {
        k: v for k, v in quota.hard.items() if k not in decision.null_hard
    }
    hard.update(written)
    annotations = {
        k: v for k, v in quota.annotations.items() if k not in decision.remove_annotations
    }
    annotations.update(decision.set_annotations)
    return QuotaState(hard, annotations)
