"""Names and formats of the state dynquota keeps on the managed quota, and the kill switch (Pure).

Annotations on the managed ResourceQuota ``dynquota`` (all under ``dynquota.io/``):

=========================================  =====================================================
``dynquota.io/last-upscale.<resource>``    last time ``H`` was raised by sizing (RFC 3339 UTC)
``dynquota.io/last-change.<resource>``     last time ``H`` changed by sizing (RFC 3339 UTC)
``dynquota.io/hard.<resource>``            the hard limit dynquota last wrote (an integer);
                                           a ``spec.hard`` that differs was edited directly
                                           and is reverted (stamping nothing)
``dynquota.io/profile.<resource>``         ``bufferPercent=..,minimum=..,maximum=..`` (and
                                           ``,roundTo=..`` when set) of the profile that sized
                                           it; a difference is a policy change, applied at once
``dynquota.io/policy``                     name of the governing policy; a different one now
                                           governing is a policy change
``dynquota.io/override``                   written by the tenant: ``max`` (any case) requests
                                           the override
``dynquota.io/override-granted-at``        RFC 3339 UTC, written when granted
``dynquota.io/override-expires-at``        RFC 3339 UTC, granted-at + TTL at most
``dynquota.io/override-ended-at``          RFC 3339 UTC, when the last override ended
                                           (kept only under a policy ``minInterval``)
``dynquota.io/message``                    for the tenant: one line written when a
                                           resource reached its limit (what, when the
                                           next raise can come, the override command)
``dynquota.io/budget``                     the QuotaBudget whose pass last wrote a slice
                                           here; while the namespace is no member of it,
                                           that budget still holds its slice, until the
                                           reconcile re-sized the quota under its own
                                           policy and removed this mark
=========================================  =====================================================

Timestamps are written as ``2026-11-30T03:30:00Z`` (UTC, whole seconds). Reading accepts RFC
3339 with ``Z`` or a numeric offset and optional fractional seconds (truncated).

Kill switch: annotation ``dynquota.io/kill-switch`` on the ``kube-system`` Namespace.
"""

from __future__ import annotations

import hashlib
import math
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from functools import lru_cache
from typing import Final, Literal

__all__ = [
    "ANNOTATION_PREFIX",
    "BUDGET",
    "KILL_SWITCH",
    "OVERRIDE",
    "OVERRIDE_ENDED_AT",
    "OVERRIDE_EXPIRES_AT",
    "OVERRIDE_GRANTED_AT",
    "POLICY",
    "TENANT_MESSAGE",
    "KillSwitchReading",
    "KillSwitchState",
    "bounded",
    "format_time",
    "hard_key",
    "last_change_key",
    "last_upscale_key",
    "not_counted_key",
    "parse_kill_switch",
    "parse_time",
    "profile_key",
    "quoted",
    "resolve_kill_switch",
    "resource_keys",
    "state_name",
]

ANNOTATION_PREFIX: Final = "dynquota.io/"
OVERRIDE: Final = "dynquota.io/override"
OVERRIDE_GRANTED_AT: Final = "dynquota.io/override-granted-at"
OVERRIDE_EXPIRES_AT: Final = "dynquota.io/override-expires-at"
OVERRIDE_ENDED_AT: Final = "dynquota.io/override-ended-at"
TENANT_MESSAGE: Final = "dynquota.io/message"
BUDGET: Final = "dynquota.io/budget"
"""The budget mark on a managed quota (see the table above; ``docs/budgets.md``)."""
POLICY: Final = "dynquota.io/policy"
KILL_SWITCH: Final = "dynquota.io/kill-switch"


_LONGEST_STATE: Final = "last-upscale."
_ANNOTATION_NAME_LIMIT: Final = 63


@lru_cache(maxsize=4096)  # ~14 calls per key per decision, on a bounded set of keys
def state_name(resource: str) -> str:
    """The ``<resource>`` part of a state annotation's name.

    An annotation name is at most 63 characters of ``[A-Za-z0-9-_.]``, so a quota key with a
    ``/`` (``count/jobs.batch``, ``requests.nvidia.com/gpu``) has it written as ``_``
    (``count_jobs.batch``; no counted key contains ``_`` where a ``/`` could stand), and a key
    still too long is written ``sha-`` and the first 16 hex digits of its SHA-256.
    ``pods`` -> ``pods``; ``requests.cpu`` -> ``requests.cpu``."""
    name = resource.replace("/", "_")
    if len(_LONGEST_STATE) + len(name) <= _ANNOTATION_NAME_LIMIT:
        return name
    return "sha-" + hashlib.sha256(resource.encode()).hexdigest()[:16]


def last_upscale_key(resource: str) -> str:
    """``dynquota.io/last-upscale.<resource>`` (see :func:`state_name`)."""
    return f"{ANNOTATION_PREFIX}last-upscale.{state_name(resource)}"


def last_change_key(resource: str) -> str:
    """``dynquota.io/last-change.<resource>``."""
    return f"{ANNOTATION_PREFIX}last-change.{state_name(resource)}"


def hard_key(resource: str) -> str:
    """``dynquota.io/hard.<resource>``: the hard limit dynquota last wrote."""
    return f"{ANNOTATION_PREFIX}hard.{state_name(resource)}"


def profile_key(resource: str) -> str:
    """``dynquota.io/profile.<resource>``: the sizing key of the profile that sized it."""
    return f"{ANNOTATION_PREFIX}profile.{state_name(resource)}"


def not_counted_key(resource: str) -> str:
    """``dynquota.io/not-counted.<resource>``: when dynquota removed ``resource`` from
    ``spec.hard`` because the quota controller never counted it (``KeyNotCounted``); the key
    is not added again while this annotation is there."""
    return f"{ANNOTATION_PREFIX}not-counted.{state_name(resource)}"


def resource_keys(resource: str) -> tuple[str, str, str, str]:
    """All per-resource state annotation names of ``resource``."""
    return (
        last_upscale_key(resource),
        last_change_key(resource),
        hard_key(resource),
        profile_key(resource),
    )


TENANT_TEXT_LIMIT: Final = 256
"""Characters of tenant-written text (annotation values) kept in memory or in a message."""


def bounded(text: str, limit: int = TENANT_TEXT_LIMIT) -> str:
    """``text`` cut to at most ``limit`` characters (plus a short tag). Pure.

    Annotation values are written by tenants and may total 256 KiB: anything the operator
    keeps (de-duplication keys) or logs or posts (Event messages) is bounded first. A cut
    text is tagged with its length and a SHA-256 prefix, so two long values that differ only
    past the cut still read differently: ``'xxxx…' (+199744 chars, sha256 1f2e3d4c5b6a)``.
    """
    if len(text) <= limit:
        return text
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:12]
    return f"{text[:limit]}…(+{len(text) - limit} chars, sha256 {digest})"


def quoted(text: str, limit: int = TENANT_TEXT_LIMIT) -> str:
    """``repr`` of :func:`bounded` text: quoted, control characters escaped, so a tenant's
    value cannot forge a log line. Pure."""
    return repr(bounded(text, limit))


_RFC3339: Final = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(\.\d+)?([Zz]|[+-]\d{2}:\d{2})"
)


def format_time(seconds: float) -> str:
    """RFC 3339 UTC text of seconds since the epoch, truncated to whole seconds:
    ``2026-11-30T03:30:00Z``. Raises ``ValueError`` outside years 1..9999."""
    try:
        moment = datetime.fromtimestamp(math.floor(seconds), UTC)
    except (OverflowError, OSError) as error:
        raise ValueError(f"time out of range: {seconds!r}") from error
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(text: str) -> int:
    """Whole seconds since the epoch of an RFC 3339 timestamp (``2026-11-30T03:30:00Z``,
    ``2026-11-30T04:30:00+01:00``; a fraction of a second is dropped).

    Raises:
        ValueError: ``invalid timestamp '...': expected RFC 3339 like 2026-11-30T03:30:00Z``
            for any other text (date only, no offset, out-of-range fields).
    """
    if not isinstance(text, str):
        raise _invalid_time(text)
    return _parse_time(text)


@lru_cache(maxsize=4096)
def _parse_time(text: str) -> int:
    """:func:`parse_time` of a string, memoised (the same stamps are read every reconcile)."""
    match = _RFC3339.fullmatch(text)
    if match is None:
        raise _invalid_time(text)
    year, month, day, hour, minute, second = (int(match[i]) for i in range(1, 7))
    offset = match[8]
    if offset in ("Z", "z"):
        zone = UTC
    else:
        hours, minutes = int(offset[1:3]), int(offset[4:6])
        if hours > 23 or minutes > 59:
            raise _invalid_time(text)
        sign = -1 if offset[0] == "-" else 1
        zone = timezone(sign * timedelta(hours=hours, minutes=minutes))
    try:
        moment = datetime(year, month, day, hour, minute, second, tzinfo=zone)
    except ValueError:
        raise _invalid_time(text) from None
    return math.floor(moment.timestamp())


def _invalid_time(text: object) -> ValueError:
    # built only on failure: quoting (bounding, hashing) a tenant's text is not free, and
    # parse_time runs for every stamp of every decision
    return ValueError(
        f"invalid timestamp {quoted(str(text))}: expected RFC 3339 like 2026-11-30T03:30:00Z"
    )


KillSwitchState = Literal["engaged", "released", "unknown"]
"""The kill switch as reported (metric label, log, CLI): ``unknown`` while no valid state is
known; then nothing is created."""


@dataclass(frozen=True)
class KillSwitchReading:
    """The ``dynquota.io/kill-switch`` annotation read: ``engaged`` is ``True``/``False``, or
    ``None`` when the state is unknown (an invalid value and no valid state to fall back on;
    then nothing must be written). ``warning`` says why a value was not taken as it is."""

    engaged: bool | None
    warning: str | None = None

    @property
    def state(self) -> KillSwitchState:
        """``engaged``, ``released`` or ``unknown`` (``engaged is None``)."""
        if self.engaged is None:
            return "unknown"
        return "engaged" if self.engaged else "released"


def _invalid(value: str) -> str:
    return f"invalid {KILL_SWITCH} value {quoted(value)}: expected true or false (case-insensitive)"


def parse_kill_switch(value: str | None) -> KillSwitchReading:
    """Read the kill-switch annotation value (``None``: annotation absent).

    ``true`` engages, ``false`` or absent releases, compared case-insensitively and exactly
    (no surrounding spaces); anything else, the empty string included, is invalid:
    ``engaged=None`` with a warning.
    """
    if value is None:
        return KillSwitchReading(False)
    lowered = value.lower()
    if lowered == "true":
        return KillSwitchReading(True)
    if lowered == "false":
        return KillSwitchReading(False)
    return KillSwitchReading(None, f"{_invalid(value)}; the kill switch stays as it was")


def resolve_kill_switch(
    value: str | None, previous: bool | None, *, managed_quotas_exist: bool | None = None
) -> KillSwitchReading:
    """The kill switch's state given the annotation ``value`` (``None``: absent), the last
    valid state ``previous`` (``None``: no valid value read since start-up) and, at start-up,
    whether any managed quota exists cluster-wide (``managed_quotas_exist``; ``None``: not
    known, e.g. an older caller).

    A valid value wins (see :func:`parse_kill_switch`). An invalid value (Warning text in
    ``warning``) keeps ``previous``; with no previous state:

    - managed quotas exist: the last valid state was *released* (an engaged switch deletes
      every managed quota), so ``engaged=False``;
    - no managed quota exists (a fresh install, or the switch was engaged): ``engaged=None``,
      state ``unknown``: nothing is created until a valid value is read;
    - not known: ``engaged=None`` as well.

    Pure. Caveat: a switch set to ``true`` and then to an invalid value while the operator was
    down, before it deleted anything, reads as released (the quotas are still there).
    """
    reading = parse_kill_switch(value)
    if reading.engaged is not None or value is None:
        return reading
    invalid = _invalid(value)
    if previous is not None:
        was = "engaged" if previous else "released"
        return KillSwitchReading(previous, f"{invalid}; the kill switch stays {was}")
    if managed_quotas_exist:
        return KillSwitchReading(
            False,
            f"{invalid}; no valid value was read since start-up, but managed quotas exist, so "
            "it was last released (an engaged switch deletes them all): acting as released",
        )
    if managed_quotas_exist is None:
        return KillSwitchReading(
            None,
            f"{invalid}; no valid value was read since start-up: the state is unknown, nothing "
            "is written until it reads true or false",
        )
    return KillSwitchReading(
        None,
        f"{invalid}; no valid value was read since start-up and no managed quota exists (a "
        "fresh install, or the switch was engaged): the state is unknown, no quota is created "
        "until it reads true or false",
    )
