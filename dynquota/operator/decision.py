"""The one road from what was read to a decision, shared by the operator and ``dynquota plan``.

Both govern a namespace and decide its quota with the same settings-derived arguments, here:
:func:`governance_of` (the settings' verdict — the operator's own namespace, the
include/exclude lists — then the policies) and :func:`decide_args` (the global dry-run flag
and the override TTL, passed to :func:`dynquota.policy.decide` as ``**decide_args(settings)``).
The other inputs come from the pure conversions
:meth:`dynquota.kube.quotas.QuotaSnapshot.state` and :func:`dynquota.policy.observed_usage`.
Pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TypedDict

from dynquota.kube.quotas import QuotaSnapshot
from dynquota.policy import (
    Governance,
    NamespaceInfo,
    PolicyInfo,
    govern,
    not_counted_after,
)
from dynquota.quantity import Quantity
from dynquota.settings import Settings

__all__ = ["DecideArgs", "Lineage", "decide_args", "governance_of"]


class DecideArgs(TypedDict):
    """The keyword arguments of :func:`dynquota.policy.decide` that come from the settings:
    ``dry_run`` (the global flag), ``override_ttl`` and ``not_counted_after`` (seconds)."""

    dry_run: bool
    override_ttl: int
    not_counted_after: int


def decide_args(settings: Settings) -> DecideArgs:
    """The arguments of :func:`dynquota.policy.decide` that ``settings`` fix
    (``not_counted_after``: :func:`dynquota.policy.not_counted_after` of the quota
    controller's sync period)."""
    return DecideArgs(
        dry_run=settings.dry_run,
        override_ttl=settings.override_ttl,
        not_counted_after=not_counted_after(settings.quota_sync_period),
    )


def governance_of(
    info: NamespaceInfo, policies: Iterable[PolicyInfo], settings: Settings
) -> Governance:
    """How the namespace ``info`` is governed by ``policies`` under ``settings``
    (:func:`dynquota.policy.govern` with the operator's namespace and ``Settings.excluded``)."""
    return govern(info, list(policies), settings.namespace, settings.excluded(info.name))


@dataclass
class Lineage:
    """What this operator remembers of each namespace's past, in memory (a restart adopts).

    *Found at start*: the namespaces in its first Namespace list; what they hold is adopted
    (an install, a restart); a namespace that appears later was born while it ran, and a
    runaway created with it is capped at the maximum (:func:`dynquota.policy.decide`'s
    ``born_at``). Known from the informer, not from clocks: a creationTimestamp has whole
    seconds and the operator's clock is not the apiserver's.

    *Hard before*: the last ``spec.hard`` of the namespace's managed quota seen while it stayed
    governed and enforced. A quota re-created after the kill switch (or a delete by someone
    else) is then not lifted past ``max(that hard, maximum)`` by usage that grew while no
    quota stood (``decide``'s ``hard_before``). Forgotten when governance lapses (opted out,
    dry run) and when the namespace is deleted: what an admin let grow is adopted, like an
    install.
    ``dynquota plan`` finds everything at start and remembers no hard."""

    names: set[str] = field(default_factory=set)
    listed: bool = False
    hards: dict[str, Mapping[str, Quantity | int]] = field(default_factory=dict)

    def seen(self, name: str, listing: bool) -> None:
        """A Namespace event; ``listing``: it came from a list, not the watch."""
        if listing and not self.listed:
            self.names.add(name)

    def forget(self, name: str) -> None:
        """The namespace was deleted (one of that name made later is new)."""
        self.names.discard(name)
        self.hards.pop(name, None)

    def synced(self) -> None:
        """The Namespace informer applied a full list (only the first one counts)."""
        self.listed = True

    def born_at(self, info: NamespaceInfo | None) -> float | None:
        """The creationTimestamp (epoch seconds) of the namespace ``info`` if it was created
        while the operator ran; ``None`` if found at start, or unknown."""
        return None if info is None or info.name in self.names else info.created

    def hard_before(
        self, name: str, governance: Governance, dry_run: bool, quota: QuotaSnapshot | None
    ) -> Mapping[str, Quantity | int]:
        """The hard to cap a re-created managed quota of namespace ``name`` at (key ->
        quantity; empty: adopt), after recording ``quota`` (its managed quota now, ``None``:
        none). Forgets it unless ``governance`` is managed or frozen and not ``dry_run``."""
        if governance.kind not in ("managed", "frozen") or dry_run:
            self.hards.pop(name, None)
            return {}
        self.saw(name, quota)
        return self.hards.get(name, {})

    def saw(self, name: str, quota: QuotaSnapshot | None) -> None:
        """``quota`` is namespace ``name``'s managed quota, read or just written (``None``:
        none; what was remembered stays)."""
        if quota is not None:
            self.hards[name] = dict(quota.state().hard)
