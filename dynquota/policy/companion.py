"""The compute trap and the companion LimitRange: the rules the reconcile and ``dynquota plan``
share (Pure; issue #12, ``docs/quota-keys.md``).

A *compute* key (``requests.cpu``, ``memory``, ``limits.*``: :attr:`KeyInfo.compute_trap
<dynquota.policy.keys.KeyInfo>`) in a quota makes quota admission refuse every pod that does
not declare the resource, so it is never added to a namespace without a LimitRange default for
it (:func:`trapped_keys`, :func:`missing_defaults`). A policy may ask dynquota to keep a
LimitRange ``dynquota`` with such defaults (:class:`~dynquota.policy.limitrange.ContainerDefaults`);
:func:`companion_step` is what is done with it given the namespace's LimitRanges.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from dynquota.policy.limitrange import ContainerDefaults, limit_range_covers, owned_limit_range
from dynquota.policy.units import unit_for

__all__ = ["CompanionStep", "Step", "companion_step", "missing_defaults", "trapped_keys"]

Step = Literal["none", "left over", "foreign", "in place", "dry run", "held", "create", "patch"]
"""What is done with a namespace's companion LimitRange: ``none`` (none asked for, none
there), ``left over`` (dynquota's, but none asked for: never deleted), ``foreign`` (one named
``dynquota`` without the managed-by label: never written), ``in place`` (holds the defaults),
``dry run`` and ``held`` (would be written, but the namespace is in dry run, or writes are
held: the kill switch, unknown knowledge, the Lease), ``create``, ``patch``."""


@dataclass(frozen=True)
class CompanionStep:
    """:func:`companion_step`'s answer: the ``step`` and the LimitRange named ``dynquota``
    found among the namespace's (``None``: none)."""

    step: Step
    found: Mapping[str, Any] | None

    @property
    def covers(self) -> bool:
        """Whether the defaults count as in place once this step is done (in place, or
        written now)."""
        return self.step in ("in place", "create", "patch")


def companion_step(
    defaults: ContainerDefaults | None,
    items: Iterable[Mapping[str, Any]],
    *,
    dry_run: bool,
    may_write: bool,
) -> CompanionStep:
    """What to do with the companion LimitRange of a namespace whose LimitRanges are ``items``
    (decoded JSON) and whose managing policy asks for ``defaults`` (``None``: not managed):
    see :data:`Step`. ``dry_run``: the namespace is in dry run; ``may_write``: a companion
    write may go now (the operator: the write gate; ``plan``: the kill switch released)."""
    found, owned = owned_limit_range(items)
    if defaults is None or not defaults.wanted:
        return CompanionStep("left over" if found is not None and owned else "none", found)
    if found is not None and not owned:
        return CompanionStep("foreign", found)
    if found is not None and defaults.matches((found.get("spec") or {}).get("limits")):
        return CompanionStep("in place", found)
    if dry_run:
        return CompanionStep("dry run", found)
    if not may_write:
        return CompanionStep("held", found)
    return CompanionStep("create" if found is None else "patch", found)


def trapped_keys(profiles: Iterable[str], hard: Mapping[str, object]) -> frozenset[str]:
    """The keys of a policy (``profiles``: its quota keys) that force pods to declare a
    resource (the compute trap) and are not in the managed quota's ``spec.hard`` (``hard``)
    yet."""
    return frozenset(k for k in profiles if k not in hard and unit_for(k).info.compute_trap)


def missing_defaults(
    trapped: frozenset[str],
    items: Iterable[Mapping[str, Any]],
    companion: ContainerDefaults | None,
) -> frozenset[str]:
    """The ``trapped`` keys (:func:`trapped_keys`) no LimitRange of the namespace (``items``)
    gives a default for, counting the ``companion`` defaults (``None``: not in place, nor
    written now). Such a key is held (``NeedsDefaultRequests``)."""
    covered = limit_range_covers(items)
    if companion is not None:
        covered |= companion.covers()
    return trapped - covered
