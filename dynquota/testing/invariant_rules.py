"""The rules of the invariant checker (pure): what a sample is, and what breaks an invariant.

:class:`~dynquota.testing.invariants.InvariantChecker` samples the cluster and reads the audit
log; the functions here turn those samples into :class:`Violation` values (the audit records:
:mod:`dynquota.testing.invariant_audit`)
(the invariants are described in :mod:`dynquota.testing.invariants`). Which policy governs a
namespace is decided here, independently of the operator's own selection.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from dynquota.policy.models import PolicyInfo, ResourceProfile, validate_policy
from dynquota.policy.state import (
    KILL_SWITCH,
    OVERRIDE_EXPIRES_AT,
    OVERRIDE_GRANTED_AT,
    POLICY,
    hard_key,
    last_change_key,
    last_upscale_key,
    parse_time,
    profile_key,
)
from dynquota.quantity import QuantityError, parse_quantity

__all__ = [
    "INVARIANTS",
    "ClusterSample",
    "QuotaSample",
    "Violation",
    "count_of",
    "expected_hard",
    "sample_of",
    "stamp_of",
    "transitions",
]

INVARIANTS: Final = ("no-delete", "maximum", "cooldown", "single-writer", "process", "liveness")
SYSTEM: Final = frozenset({"kube-system", "kube-public", "kube-node-lease"})


@dataclass(frozen=True)
class Violation:
    """One broken invariant: ``time`` (seconds since the epoch), ``invariant`` (one of
    :data:`INVARIANTS`), ``namespace`` ("" when cluster-wide) and the evidence ``what``."""

    time: float
    invariant: str
    namespace: str
    what: str
    key: str = ""

    def __str__(self) -> str:
        stamp = (
            time.strftime("%H:%M:%S", time.gmtime(self.time)) + f".{int(self.time % 1 * 1000):03d}Z"
        )
        return f"{stamp} [{self.invariant}] {self.namespace or '-'}: {self.what}"


@dataclass(frozen=True)
class QuotaSample:
    """A managed quota as sampled: ``hard``/``used`` as integers (unparsable values left out)."""

    uid: str
    hard: dict[str, int]
    used: dict[str, int]
    annotations: dict[str, str]


@dataclass
class ClusterSample:
    """The cluster at time ``t`` (seconds since the epoch) as the checker sampled it."""

    t: float
    kill_switch: bool | None  # None: an invalid value
    labels: dict[str, dict[str, str]]
    terminating: frozenset[str]
    policies: list[PolicyInfo]
    quotas: dict[str, QuotaSample]
    protected: frozenset[str] = frozenset()
    governing: dict[str, PolicyInfo | None] = field(default_factory=dict)
    """namespace -> the valid policy governing it; ``None``: frozen by an invalid one."""
    read_until: float | None = None  # its quota LIST answered: what it shows was written before


def count_of(text: str | None) -> int | None:
    """A quantity rounded up to an integer, or None when unset or unparsable."""
    if text is None:
        return None
    try:
        return parse_quantity(str(text)).ceil()
    except (QuantityError, ValueError):
        return None


def _kill_switch(value: str | None) -> bool | None:
    if value is None or value.lower() == "false":
        return False
    return True if value.lower() == "true" else None


def stamp_of(annotations: Mapping[str, str], key: str) -> int | None:
    """The integer time stamp (seconds) annotated under ``key``, or None."""
    try:
        return parse_time(annotations[key])
    except (KeyError, ValueError):
        return None


def _selector_matches(info: PolicyInfo, labels: Mapping[str, str]) -> bool:
    # an unreadable selector may match anything (the operator freezes on it too)
    return info.selector is None or info.selector.matches(labels)


def _govern(labels: Mapping[str, str], policies: Iterable[PolicyInfo]) -> tuple[bool, Any]:
    """(selected by any policy, governing valid policy or None when frozen/none)."""
    matching = [p for p in policies if _selector_matches(p, labels)]
    if not matching:
        return False, None
    ranked = sorted(
        matching, key=lambda p: (-(p.priority if p.priority is not None else 2**31), p.name)
    )
    top = ranked[0]
    return True, top if top.valid else None


def expected_hard(profile: ResourceProfile, usage: int) -> int:
    """``T(U) = min(maximum, max(minimum, ceil(U * (100 + bufferPercent) / 100)))``, in integers:
    the target is usage plus the buffer, rounded up, clamped to the profile's bounds
    (``docs/sizing.md``)."""
    grown = -(-usage * (100 + profile.buffer_percent) // 100)
    return min(profile.maximum, max(profile.minimum, grown))


def sample_of(
    t: float,
    namespaces: Iterable[Any],
    policies: Iterable[Any],
    quotas: Iterable[Any],
    operator_namespace: str,
) -> ClusterSample:
    """The sample at ``t`` of the namespaces, policies (decoded JSON) and managed quotas the
    admin read (sync ``kubernetes`` models): each policy validated as the operator does, which
    valid policy governs each namespace (``None``: frozen by an invalid one), and which
    namespaces are *protected* (governed, not in dry run, opted in, not terminating, with the
    kill switch released)."""  # fmt: skip
    labels: dict[str, dict[str, str]] = {}
    terminating: set[str] = set()
    kill_switch: bool | None = False
    for ns in namespaces:
        name = ns.metadata.name
        labels[name] = dict(ns.metadata.labels or {})
        if ns.metadata.deletion_timestamp is not None:
            terminating.add(name)
        if name == "kube-system":
            kill_switch = _kill_switch((ns.metadata.annotations or {}).get(KILL_SWITCH))
    infos = [validate_policy(p) for p in policies]
    views = {
        q.metadata.namespace: QuotaSample(
            uid=q.metadata.uid,
            hard={k: c for k, v in (q.spec.hard or {}).items() if (c := count_of(v)) is not None},
            used={
                k: c
                for k, v in ((q.status and q.status.used) or {}).items()
                if (c := count_of(v)) is not None
            },
            annotations=dict(q.metadata.annotations or {}),
        )
        for q in quotas
    }
    sample = ClusterSample(t, kill_switch, labels, frozenset(terminating), infos, views)
    protected = set()
    for name, ns_labels in labels.items():
        if name in SYSTEM or name == operator_namespace:
            continue
        selected, governing = _govern(ns_labels, infos)
        if selected and governing is not None and governing.spec.dry_run:
            selected = False
        opted_out = ns_labels.get("dynquota.io/managed", "").lower() == "false"
        if selected and not opted_out and name not in terminating:
            sample.governing[name] = governing
            if kill_switch is False:
                protected.add(name)
    sample.protected = frozenset(protected)
    return sample


def transitions(prev: ClusterSample, cur: ClusterSample, sampled_deletes: bool) -> list[Violation]:
    """Invariants (i) to (iii) between two samples: ``maximum`` and ``cooldown`` for every
    changed ``spec.hard``; with ``sampled_deletes`` (no audit log) also ``no-delete`` for a
    protected quota gone or replaced."""
    found: list[Violation | None] = []
    for ns, quota in cur.quotas.items():
        before = prev.quotas.get(ns)
        policy = cur.governing.get(ns)
        profiles = policy.spec.resources if policy is not None and policy.spec else {}
        if before is None or before.uid != quota.uid:
            # a new quota: its hard is bounded too
            for r, value in quota.hard.items():
                found.append(_above_maximum(cur, ns, r, value, profiles.get(r), quota, None))
            if before is not None and sampled_deletes:
                found.append(_gone(prev, cur, ns, "replaced (a new uid)"))
            continue
        for r, value in quota.hard.items():
            old = before.hard.get(r)
            if old is None or old == value:
                continue
            profile = profiles.get(r)
            found.append(_above_maximum(cur, ns, r, value, profile, quota, before))
            if profile is None or _explained(before, quota, r):
                continue
            found.append(_too_early(cur, ns, r, old, value, profile, before, quota))
    if sampled_deletes:
        for ns in prev.quotas.keys() - cur.quotas.keys():
            found.append(_gone(prev, cur, ns, "deleted"))
    return [v for v in found if v is not None]


def _gone(prev: ClusterSample, cur: ClusterSample, ns: str, how: str) -> Violation | None:
    if ns in prev.protected and ns in cur.protected:
        return Violation(
            cur.t,
            "no-delete",
            ns,
            f"managed quota {how} between samples at {prev.t:.1f} and {cur.t:.1f} "
            "while a policy selected the namespace and the kill switch was released",
        )
    return None


def _above_maximum(
    cur: ClusterSample,
    ns: str,
    r: str,
    value: int,
    profile: ResourceProfile | None,
    quota: QuotaSample,
    before: QuotaSample | None,
) -> Violation | None:
    if profile is None or value <= profile.maximum:
        return None
    usage = max(quota.used.get(r, 0), before.used.get(r, 0) if before else 0)
    if value <= usage:
        return None
    return Violation(
        cur.t,
        "maximum",
        ns,
        f"spec.hard {r}={value} above the maximum {profile.maximum} (status.used {usage})",
        key=f"max|{ns}|{quota.uid}|{r}|{value}",
    )


def _explained(before: QuotaSample, quota: QuotaSample, r: str) -> bool:
    a, b = before.annotations, quota.annotations
    if a.get(profile_key(r)) != b.get(profile_key(r)) or a.get(POLICY) != b.get(POLICY):
        return True  # a policy change applies at once
    if a.get(OVERRIDE_GRANTED_AT) != b.get(OVERRIDE_GRANTED_AT):
        return True  # granted, expired or cancelled
    if a.get(OVERRIDE_EXPIRES_AT) != b.get(OVERRIDE_EXPIRES_AT):
        return True
    written = count_of(a.get(hard_key(r)))
    return written is not None and written != before.hard.get(r)  # a direct edit reverted


def _too_early(
    cur: ClusterSample,
    ns: str,
    r: str,
    old: int,
    new: int,
    profile: ResourceProfile,
    before: QuotaSample,
    quota: QuotaSample,
) -> Violation | None:
    if new < old:
        key, window, what = last_change_key(r), profile.downscale_cooldown, "downscale"
    else:
        key, window, what = last_upscale_key(r), profile.upscale_cooldown, "upscale"
    stamp = stamp_of(before.annotations, key)
    if stamp is None:
        return None
    after = stamp_of(quota.annotations, key)
    usage = max(quota.used.get(r, 0), before.used.get(r, 0))
    if old < new <= usage and after == stamp:
        # never below usage: quota admission admitted past hard (kubernetes#123434) and the
        # operator raised hard to the usage at once, stamping nothing (the buffer waits)
        return None
    seen = cur.read_until if cur.read_until is not None else cur.t
    if seen < stamp + window - 1 or (after is not None and after < stamp + window):
        return Violation(
            cur.t,
            "cooldown",
            ns,
            f"{what} {r} {old}->{new} seen at {seen:.1f}, {key} was {stamp} "
            f"(+{window} s = {stamp + window}), new stamp {after}",
            key=f"cd|{ns}|{quota.uid}|{r}|{old}|{new}|{stamp}",
        )
    return None
