"""The one road from what was read to a decision, shared by the operator and ``dynquota plan``.

Both govern a namespace with :func:`governance_of` (the settings' verdict — the operator's own
namespace, the include/exclude lists — then the policies), read its usage with
:func:`observe` (the keys sized, ``U = max(tally, status.used)`` per key) and decide it with
:func:`decide_namespace`, which passes :func:`dynquota.policy.decide` the settings' arguments
(:func:`decide_args`) and what the replica remembers (:class:`Replica`). ``dynquota plan`` has
no replica: it reads one snapshot and remembers nothing. Pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TypedDict

from dynquota.kube.quotas import QuotaSnapshot
from dynquota.policy import (
    TRACKED_RESOURCES,
    Decision,
    Governance,
    NamespaceInfo,
    PolicyInfo,
    QuotaState,
    decide,
    govern,
    not_counted_after,
    observed_usage,
    resource_order,
)
from dynquota.quantity import Quantity
from dynquota.settings import Settings

__all__ = [
    "DecideArgs",
    "Lineage",
    "Observed",
    "Replica",
    "decide_args",
    "decide_namespace",
    "governance_of",
    "observe",
]


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


@dataclass(frozen=True)
class Observed:
    """The usage of one namespace as a decision reads it (units of each key): the informers'
    ``tally`` (``pods``, ``configmaps``), the managed quota's ``status_used``, the ``keys``
    sized (the tracked ones and the policy's, in order), ``usage`` per key
    (:func:`dynquota.policy.observed_usage`: ``max(tally, status.used)``; a key without a
    ``status.used`` is missing: unknown) and the ``phantom`` keys sized from their tally."""

    tally: Mapping[str, int]
    status_used: Mapping[str, int]
    keys: list[str]
    usage: dict[str, int]
    phantom: frozenset[str] = frozenset()


def observe(
    governance: Governance,
    status_used: Mapping[str, int],
    tally: Mapping[str, int],
    phantom: frozenset[str] = frozenset(),
) -> Observed:
    """The :class:`Observed` usage of a namespace ``governance`` governs, from its managed
    quota's ``status_used`` and the informers' ``tally`` (counts); ``phantom``: the tracked
    keys whose ``status.used`` above the tally is taken as phantom charges (the operator's
    memory; ``plan``: none)."""
    keys = resource_order(set(TRACKED_RESOURCES) | set(governance.profiles))
    usage = observed_usage(tally, status_used, keys, phantom)
    return Observed(tally, status_used, keys, usage, phantom)


@dataclass(frozen=True)
class Replica:
    """What a running replica knows beyond one read (the arguments of
    :func:`dynquota.policy.decide` of the same names): the ``peak`` per key over its
    downscale window (units), when it started (``started_at``, seconds since the epoch),
    whether someone else deleted the managed quota (``previously_managed``), since when each
    status-driven key is uncounted, the node-growth floor, the namespace's ``born_at`` and
    ``hard_before`` (:class:`Lineage`), a ``stalled`` quota controller and the forecasts
    (``exhaustion``, seconds)."""

    peak: Mapping[str, int]
    started_at: float
    previously_managed: bool = False
    uncounted_since: Mapping[str, float] = field(default_factory=dict)
    daemon_floor: Mapping[str, int] | None = None
    born_at: float | None = None
    hard_before: Mapping[str, Quantity | int] = field(default_factory=dict)
    stalled: bool = False
    exhaustion: Mapping[str, float] = field(default_factory=dict)


def decide_namespace(
    namespace: str,
    governance: Governance,
    observed: Observed,
    quota: QuotaState | None,
    *,
    current: QuotaSnapshot | None,
    kill_switch: bool | None,
    now: float,
    settings: Settings,
    dry_run: bool,
    missing_defaults: frozenset[str],
    budgeted: Mapping[str, str],
    replica: Replica | None,
) -> Decision:
    """:func:`dynquota.policy.decide` for ``namespace`` as an operator running with
    ``settings`` decides it at ``now``: ``quota`` is the state decided on (the managed quota's
    :meth:`~dynquota.kube.quotas.QuotaSnapshot.state`, or in dry run the simulated one),
    ``current`` the managed quota as read (``None``: none), ``dry_run`` whether the namespace
    is in dry run.

    Without a ``replica`` (``dynquota plan``: one snapshot, no history) the peak is the usage,
    the operator counts as started long ago, and neither the tenant line's namespace and help
    URL nor the enforcement lag (``status.hard`` lacking a key, objects admitted uncharged) is
    passed: the plan's table does not show them (``docs/operator.md``, "dynquota plan").
    """
    enforced = replica is not None and current is not None and not dry_run
    remembered: _ReplicaArgs = (
        _replica_args(namespace, replica, settings) if replica is not None else {}
    )
    return decide(
        governance=governance,
        usage=observed.usage,
        peak=replica.peak if replica is not None else observed.usage,
        quota=quota,
        kill_switch=kill_switch,
        now=now,
        started_at=replica.started_at if replica is not None else 0.0,
        missing_defaults=missing_defaults,
        budgeted=budgeted,
        charged={k: observed.status_used[k] for k in observed.phantom},
        unenforced=current.unenforced() if enforced and current is not None else frozenset(),
        uncharged=current.uncharged(observed.tally) if enforced and current is not None else None,
        **remembered,
        **decide_args(settings),
    )


class _ReplicaArgs(TypedDict, total=False):
    previously_managed: bool
    namespace: str
    help_url: str
    uncounted_since: Mapping[str, float]
    daemon_floor: Mapping[str, int] | None
    born_at: float | None
    hard_before: Mapping[str, Quantity | int]
    stalled: bool
    exhaustion: Mapping[str, float]


def _replica_args(namespace: str, replica: Replica, settings: Settings) -> _ReplicaArgs:
    return _ReplicaArgs(
        previously_managed=replica.previously_managed,
        namespace=namespace,
        help_url=settings.tenant_help_url,
        uncounted_since=replica.uncounted_since,
        daemon_floor=replica.daemon_floor,
        born_at=replica.born_at,
        hard_before=replica.hard_before,
        stalled=replica.stalled,
        exhaustion=replica.exhaustion,
    )


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
    quotas: dict[str, QuotaSnapshot] = field(default_factory=dict)
    """Namespace -> its managed quota as last read or written (parsed only when re-created)."""

    def seen(self, name: str, listing: bool) -> None:
        """A Namespace event; ``listing``: it came from a list, not the watch."""
        if listing and not self.listed:
            self.names.add(name)

    def forget(self, name: str) -> None:
        """The namespace was deleted (one of that name made later is new)."""
        self.names.discard(name)
        self.quotas.pop(name, None)

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
        quantity; empty: adopt, or ``quota`` is there and nothing is re-created), after
        recording ``quota`` (its managed quota now, ``None``: none). Forgets it unless
        ``governance`` is managed or frozen and not ``dry_run``."""
        if governance.kind not in ("managed", "frozen") or dry_run:
            self.quotas.pop(name, None)
            return {}
        if quota is not None:
            self.quotas[name] = quota
            return {}  # decide reads it only without a quota: no parse on the hot path
        last = self.quotas.get(name)
        return {} if last is None else last.state().hard

    def saw(self, name: str, quota: QuotaSnapshot | None) -> None:
        """``quota`` is namespace ``name``'s managed quota, read or just written (``None``:
        none; what was remembered stays)."""
        if quota is not None:
            self.quotas[name] = quota
