"""The cluster view: what the watches told one replica, and nothing it does about it (a part of
:class:`~dynquota.operator.assembly.Operator`, built alone in tests).

:class:`ClusterView` is the operator's lister cache, as a kube controller holds its listers:
the namespaces (resourceVersion-ordered, with tombstones), the DynamicQuotaPolicies and
whether a full list of them was applied, the managed quotas as their watch delivered them last
(their ``status.used``), the usage informers (:class:`~dynquota.operator.ports.UsageView`) and
the peak windows sampled from them, and the namespaces'
:class:`~dynquota.operator.decision.Lineage`. Its ``on_*`` methods apply one informer event
and return what changed; they queue nothing and call no other part:
:class:`~dynquota.operator.assembly.Operator` hands each change to the parts that act on it.
It also answers what the write gate asks of the informers
(:class:`~dynquota.operator.write_gate.Informed`). No I/O.
"""

from __future__ import annotations

import enum
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from cachetools import LRUCache, TTLCache

from dynquota.kube.quotas import MANAGED_QUOTA_NAME, QuotaSnapshot
from dynquota.names import MANAGED_LIMIT_RANGE_NAME
from dynquota.operator.decision import Lineage, governance_of
from dynquota.operator.ports import (
    KUBE_SYSTEM,
    PolicyRecord,
    UsageView,
    resource_version_of,
)
from dynquota.policy import (
    DEFAULT_PROFILES,
    TRACKED_RESOURCES,
    Governance,
    NamespaceInfo,
    PolicyInfo,
    observed_usage,
    validate_policy,
)
from dynquota.settings import Settings
from dynquota.usage import PeakWindows

__all__ = ["WATCHED_QUOTAS", "ClusterView", "NamespaceSeen", "PolicySeen", "QuotaSeen"]

log = logging.getLogger("dynquota.operator")

WATCHED_QUOTAS = 256  # managed quotas kept as the watch delivered them (about 3 KB each)


@dataclass(frozen=True)
class NamespaceSeen:
    """What one Namespace event changed: ``deleted``; otherwise its ``annotations`` and, when
    its labels or termination changed (``changed``), the labels ``before`` (``None``: it was
    not known) and ``after``."""

    name: str
    deleted: bool = False
    changed: bool = False
    annotations: Mapping[str, str] | None = None
    before: Mapping[str, str] | None = None
    after: Mapping[str, str] | None = None


@dataclass(frozen=True)
class QuotaSeen:
    """One event of a ResourceQuota named ``dynquota``: the ``quota`` delivered, the one the
    watch delivered before (``before``, ``None``: none kept) and whether it is ``gone``
    (deleted, or not managed)."""

    event_type: str | None
    quota: QuotaSnapshot
    before: QuotaSnapshot | None
    gone: bool


class PolicySeen(enum.Enum):
    """What one policy event changed: ``NOTHING``; only its ``STATUS`` (or generation) as
    stored; its ``SPEC`` (valid or not), or it was deleted: every namespace may be governed
    differently."""

    NOTHING = "nothing"
    STATUS = "status"
    SPEC = "spec"


class ClusterView:
    """See the module docs.

    Args:
        settings: the operator settings (governance: the include/exclude lists).
        clock: the cluster's time, seconds since the epoch (the usage tallies' expiry).
        monotonic: seconds on a clock that never steps: the peak windows (default ``clock``).

    Set :attr:`usage` (the usage informers) before the queue runs, and :attr:`objects_fresh`
    when object informers run (without it only the usage informers count as fresh).
    """

    def __init__(
        self,
        settings: Settings,
        *,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] | None = None,
    ) -> None:
        self.settings = settings
        self.clock = clock
        self.monotonic = monotonic if monotonic is not None else clock
        self.usage: UsageView | None = None
        """The usage informers (the runtime sets them; ``None``: nothing counted yet)."""
        self.objects_fresh: Callable[[float], bool] | None = None
        """Whether the object informers (namespaces, quotas, LimitRanges, policies, budgets)
        completed a watch cycle within their timeout plus ``margin`` seconds
        (:meth:`dynquota.kube.objects.ObjectInformers.healthy`; the runtime sets it)."""
        self.namespaces: dict[str, NamespaceInfo] = {}
        """Namespace name -> what governs it of the Namespace (labels, termination)."""
        self.lineage = Lineage()
        self.kube_system_uid = ""
        self._namespace_rv: dict[str, int] = {}
        self._namespace_uid: dict[str, str] = {}
        self._deleted: TTLCache[str, int] = TTLCache(maxsize=100_000, ttl=3600)
        self._policies: dict[str, PolicyRecord] = {}
        self._policies_version = 0  # bumped when a policy's spec changes
        # namespace -> (the NamespaceInfo and policies version it was decided on, the answer):
        # a reconcile asks up to four times, and most events change neither input
        self._governance: dict[str, tuple[NamespaceInfo, int, Governance]] = {}
        self.policies_listed = False
        """Whether the policy informer applied a full (consistent) list since start
        (:meth:`on_policies_synced`); until then every managed-quota write is held."""
        self._status_used: dict[str, dict[str, int]] = {}
        # the managed quotas the watch delivered last, for the namespaces active most recently:
        # a quiet namespace's first event decides from it instead of a GET (bounded: a GET
        # waits behind the create that caused the event, p50 13 ms, p99 58 ms on 2 cores)
        self._watched: LRUCache[str, QuotaSnapshot] = LRUCache(maxsize=WATCHED_QUOTAS)
        # namespace -> the least resourceVersion a watched copy needs to show this replica's
        # last write of the managed quota (a copy older than that is not decided from)
        self._written: dict[str, int] = {}
        # namespace -> its quota named dynquota without the managed-by label, as the watch
        # delivered it last (never written; a budget says why its slice is not enforced there)
        self._foreign: dict[str, QuotaSnapshot] = {}
        self.peaks = PeakWindows(self._peak_horizon())

    # -- watches ------------------------------------------------------------------------------

    def on_namespace(self, event_type: str | None, obj: Mapping[str, Any]) -> NamespaceSeen | None:
        """A Namespace event (``ADDED``/``MODIFIED``/``DELETED``, ``None`` for a listing);
        ``None`` when it changes nothing (no name, or older than what is held: a start-up
        listing racing the watch). A deleted namespace is forgotten here (:meth:`forget`)."""
        meta = obj.get("metadata") or {}
        name = str(meta.get("name") or "")
        if not name:
            return None
        rv = resource_version_of(obj)
        if event_type == "DELETED":
            self.namespaces.pop(name, None)
            self._namespace_rv.pop(name, None)
            self._deleted[name] = rv
            self.forget(name)
            return NamespaceSeen(name, deleted=True)
        if rv and rv < max(self._namespace_rv.get(name, 0), self._deleted.get(name, 0)):
            return None
        self._namespace_rv[name] = rv
        self._namespace_uid[name] = str(meta.get("uid") or "")
        self.lineage.seen(name, listing=event_type is None)
        if name == KUBE_SYSTEM:
            self.kube_system_uid = str(meta.get("uid") or "")
        info = NamespaceInfo.of(meta)
        before = self.namespaces.get(name)
        annotations = dict(meta.get("annotations") or {})
        if before == info:
            return NamespaceSeen(name, annotations=annotations)
        self.namespaces[name] = info
        return NamespaceSeen(
            name,
            changed=True,
            annotations=annotations,
            before=before.labels if before is not None else None,
            after=info.labels,
        )

    def on_quota(self, event_type: str | None, obj: Mapping[str, Any]) -> QuotaSeen | None:
        """An event of a ResourceQuota named ``dynquota`` (managed or not); ``None`` for any
        other quota."""
        snapshot = QuotaSnapshot.from_object(obj)
        if snapshot.name != MANAGED_QUOTA_NAME or not snapshot.namespace:
            return None
        before = self._watched.get(snapshot.namespace)
        gone = event_type == "DELETED" or not snapshot.managed
        if event_type != "DELETED" and not snapshot.managed:
            self._foreign[snapshot.namespace] = snapshot
        else:
            self._foreign.pop(snapshot.namespace, None)
        if gone:
            self._status_used.pop(snapshot.namespace, None)
            self._watched.pop(snapshot.namespace, None)
        else:
            self._status_used[snapshot.namespace] = snapshot.used_counts()
            self._watched[snapshot.namespace] = snapshot
        return QuotaSeen(event_type, snapshot, before, gone)

    def on_limit_range(self, event_type: str | None, obj: Mapping[str, Any]) -> str | None:
        """An event of a LimitRange: its namespace when it is named ``dynquota`` (the
        companion, or a foreign one of that name), else ``None``."""
        meta = obj.get("metadata") or {}
        namespace = str(meta.get("namespace") or "")
        if meta.get("name") != MANAGED_LIMIT_RANGE_NAME or not namespace:
            return None
        return namespace

    def on_policy(self, event_type: str | None, obj: Mapping[str, Any]) -> PolicySeen:
        """A DynamicQuotaPolicy event: re-validate it (an invalid one is logged). A change of
        the policies keeps the peak windows at least as long as before (never shortened
        early)."""
        meta = obj.get("metadata") or {}
        name = str(meta.get("name") or "")
        if not name:
            return PolicySeen.NOTHING
        if event_type == "DELETED":
            if self._policies.pop(name, None) is None:
                return PolicySeen.NOTHING
            self._policies_changed()
            return PolicySeen.SPEC
        info = validate_policy(obj)
        generation = int(meta.get("generation") or 0)
        old = self._policies.get(name)
        self._policies[name] = PolicyRecord(
            info, generation, dict(obj.get("status") or {}), str(meta.get("uid") or "")
        )
        if old is None or old.info != info:
            if not info.valid:
                log.warning("policy %s is invalid: %s", name, info.reason)
            self._policies_changed()
            return PolicySeen.SPEC
        if old.status != self._policies[name].status or old.generation != generation:
            return PolicySeen.STATUS
        return PolicySeen.NOTHING

    def on_policies_synced(self) -> bool:
        """The policy informer applied a full list: the policies count as known from now on.
        Returns whether this is the first such list (writes held on them may proceed)."""
        if self.policies_listed:
            return False
        self.policies_listed = True
        log.debug("policies listed: %d; writes may proceed", len(self._policies))
        return True

    def on_usage_change(self, namespace: str, resource: str) -> None:
        """The usage informers' callback: sample the peak of ``max(tally, status.used)``."""
        if self.usage is None:
            return
        tally = {resource: self.usage.usage(namespace, resource, self.clock())}
        used = observed_usage(tally, self._status_used.get(namespace, {}), tally)
        self.peaks.observe(namespace, resource, used[resource], self.monotonic())

    def forget(self, namespace: str) -> None:
        """``namespace`` was deleted: drop what is kept of it (one of that name made later is
        new)."""
        self.peaks.forget(namespace)
        self.lineage.forget(namespace)
        if namespace != KUBE_SYSTEM:
            self._namespace_uid.pop(namespace, None)
        self._status_used.pop(namespace, None)
        self._watched.pop(namespace, None)
        self._written.pop(namespace, None)
        self._governance.pop(namespace, None)
        self._foreign.pop(namespace, None)

    # -- what is known ----------------------------------------------------------------------

    def governance(self, namespace: str) -> Governance | None:
        """How ``namespace`` is governed now (``None`` if it is not known)."""
        info = self.namespaces.get(namespace)
        if info is None:
            self._governance.pop(namespace, None)
            return None
        known = self._governance.get(namespace)
        if known is not None and known[0] is info and known[1] == self._policies_version:
            return known[2]
        governance = governance_of(info, self.policies, self.settings)
        self._governance[namespace] = (info, self._policies_version, governance)
        return governance

    @property
    def policies(self) -> list[PolicyInfo]:
        """Every stored policy, valid or not."""
        return [record.info for record in self._policies.values()]

    @property
    def policy_records(self) -> Mapping[str, PolicyRecord]:
        """Policy name -> its record (read-only; :meth:`policy_status_written` updates one)."""
        return self._policies

    def policy_status_written(self, name: str, status: Mapping[str, Any]) -> None:
        """The operator wrote ``status`` to policy ``name``: it is what is stored now."""
        record = self._policies.get(name)
        if record is not None:
            record.status = status

    def namespace_uid(self, namespace: str) -> str:
        """The uid of ``namespace`` as last seen (``""``: not known)."""
        return self._namespace_uid.get(namespace, "")

    def watched(self, namespace: str) -> QuotaSnapshot | None:
        """The managed quota of ``namespace`` as its watch delivered it last (``None``: none
        kept: absent, or not active recently)."""
        return self._watched.get(namespace)

    def foreign(self, namespace: str) -> QuotaSnapshot | None:
        """The quota named ``dynquota`` of ``namespace`` without the managed-by label
        (*foreign*: removed, or someone else's) as its watch delivered it last; ``None``: none
        (no quota of that name, or dynquota's)."""
        return self._foreign.get(namespace)

    def current(self, namespace: str) -> QuotaSnapshot | None:
        """The watched managed quota of ``namespace`` if it shows this replica's last write of
        it (its resourceVersion is at least the one the write returned), else ``None``: read
        it. A copy another writer has since changed is still returned: a patch decided from
        it carries its resourceVersion and gets a 409."""
        snapshot = self._watched.get(namespace)
        if snapshot is None:
            return None
        rv = snapshot.resource_version
        if not rv.isdigit() or int(rv) < self._written.get(namespace, 0):
            return None
        return snapshot

    def wrote(self, namespace: str, snapshot: QuotaSnapshot | None) -> None:
        """This replica wrote the managed quota of ``namespace``: ``snapshot`` as the create
        or patch returned it, ``None`` for a delete (the copy held is then older than the
        delete, whose resourceVersion is not returned)."""
        if snapshot is None:
            held = self._watched.pop(namespace, None)
            rv = held.resource_version if held is not None else ""
            floor = int(rv) + 1 if rv.isdigit() else 0
        else:
            rv = snapshot.resource_version
            floor = int(rv) if rv.isdigit() else 0
        if floor:
            self._written[namespace] = max(floor, self._written.get(namespace, 0))

    def watched_quotas(self) -> Iterable[QuotaSnapshot]:
        """Every managed quota kept as the watch delivered it."""
        return list(self._watched.values())

    def status_used(self, namespace: str) -> Mapping[str, int]:
        """The managed quota's ``status.used`` of ``namespace`` (counts), as last seen."""
        return self._status_used.get(namespace, {})

    def read_status_used(self, namespace: str, status_used: Mapping[str, int]) -> None:
        """A read of the managed quota of ``namespace`` (a GET made for a decision) showed
        ``status_used`` (counts): newer than its last event."""
        self._status_used[namespace] = dict(status_used)

    def with_quota(self) -> list[str]:
        """The namespaces whose managed quota the watch or a GET delivered (and not deleted
        since)."""
        return list(self._status_used)

    def tally(self, namespace: str, now: float) -> dict[str, int]:
        """The informers' count of each tracked resource in ``namespace`` at ``now`` (0 each
        before the usage informers are set)."""
        usage = self.usage
        return {r: usage.usage(namespace, r, now) if usage else 0 for r in TRACKED_RESOURCES}

    def count(self, namespace: str, resource: str, now: float) -> int | None:
        """The informers' count of ``resource`` in ``namespace`` at ``now``; ``None`` for a
        resource they do not count (not tracked) or before the usage informers are set."""
        if self.usage is None or resource not in TRACKED_RESOURCES:
            return None
        return self.usage.usage(namespace, resource, now)

    # -- what the write gate asks (operator/write_gate.py) ------------------------------------

    def usage_synced(self) -> bool:
        """Whether every usage informer applied its first full list."""
        return self.usage is not None and self.usage.synced

    def informers_fresh(self) -> bool:
        """Every informer fresh enough to shrink on (the liveness margin)."""
        margin = float(self.settings.liveness_margin_seconds)
        if self.usage is None or not self.usage.healthy(margin=margin):
            return False
        return self.objects_fresh is None or self.objects_fresh(margin)

    # -- the peak windows ---------------------------------------------------------------------

    def _policies_changed(self) -> None:
        self._policies_version += 1
        # a shorter horizon is held for the longer one's length (never shortened early)
        self.peaks.set_horizon(self._peak_horizon(), self.monotonic())

    def _peak_horizon(self) -> float:
        longest = max(p.downscale_cooldown for p in DEFAULT_PROFILES.values())
        for record in self._policies.values():
            if record.info.spec is not None:
                for profile in record.info.spec.resources.values():
                    longest = max(longest, profile.downscale_cooldown)
        return float(max(longest, 1))
