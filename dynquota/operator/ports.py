"""The operator's ports and shared types (no I/O, no kopf).

The operator talks to the cluster only through the small Protocols here
(:class:`QuotaStore`, :class:`EventSink`, :class:`UsageView`, :class:`PolicyStatusSink`,
:class:`NamespaceReader`, :class:`LeaderView`), so unit tests fake them at that boundary; its
parts hand each other work through :class:`Requeue` (the workqueue) and read the kill switch
through :class:`SwitchView`. Also here: the constants the parts of
:class:`~dynquota.operator.assembly.Operator` share (write and reconcile timeouts, hold
reasons), :class:`Applied` (what writing one decision came to) and :class:`NamespaceView` (what
was last decided, for ``plan``, the demo and tests).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from dynquota._k8s.errors import ApiError
from dynquota._k8s.timeouts import REQUEST_TIMEOUT
from dynquota._k8s.workqueue import Outcome
from dynquota.kube.events import EventType, ObjectRef
from dynquota.kube.quotas import QuotaSnapshot
from dynquota.policy import (
    PolicyInfo,
)
from dynquota.policy.forecast import Trend, etas
from dynquota.policy.wake import WorkloadKind

__all__ = [
    "Applied",
    "BudgetStatusSink",
    "EventSink",
    "LeaderView",
    "LimitRangeReader",
    "NamespaceReader",
    "NamespaceView",
    "PolicyStatusSink",
    "QuotaStore",
    "ReconcileResult",
    "Requeue",
    "SwitchView",
    "UsageView",
    "WorkloadLister",
]


KUBE_SYSTEM = "kube-system"
WARNING_TTL = 3600.0
WRITE_TIMEOUT = REQUEST_TIMEOUT
"""Seconds one managed-quota write may take (the kube/ request timeout, the same value the
Settings lease rule checks): a write starts only when the Lease stays valid that long."""
RECONCILE_TIMEOUT = 60.0
"""Seconds after which a reconcile is abandoned and retried with backoff (a safety net
under the per-request timeouts: a hung reconcile never stalls a worker for good)."""
CONFLICT_RETRIES = 3
"""Re-reads after a 409 Conflict on a managed-quota write, before backing off."""
HELD_POLICIES = "policies-unknown"
HELD_BUDGETS = "budgets-unknown"
HELD_INFORMERS = "informers-not-synced"
HELD_STALE = "informers-stale"
HELD_KILL_SWITCH = "kill-switch-unknown"
HELD_RELEASE = "kill-switch-release-unconfirmed"
HELD_LEASE = "lease-not-held"
HELD_BRAKE = "unmanage-brake"
HELD_TARPIT = "tarpit-unknown"
"""The tarpit FlowSchema's rules are not known (not read yet, or the read failed): the
write-rate governor writes nothing (:mod:`dynquota.operator.governor`)."""
HOLD_REASONS = (
    HELD_POLICIES,
    HELD_BUDGETS,
    HELD_INFORMERS,
    HELD_STALE,
    HELD_KILL_SWITCH,
    HELD_RELEASE,
    HELD_LEASE,
    HELD_BRAKE,
    HELD_TARPIT,
)
"""Why a managed-quota write is held (label of ``dynquota_writes_held_total``)."""


ReconcileResult = Literal["ok", "retry", "standby", "held", "invalid", "dry-run"]
"""How a reconcile ended (label ``result`` of ``dynquota_reconciles_total``): ``ok`` decided
(and written), ``retry`` failed or raced (retried with backoff, or decided again), ``standby``
not leading, ``held`` a write waiting for positive knowledge, ``invalid`` a write the
apiserver refused, ``dry-run`` decided and not enforced."""


class QuotaStore(Protocol):
    """Managed-quota I/O (:class:`dynquota.kube.quotas.QuotaClient`)."""

    async def get(self, namespace: str) -> QuotaSnapshot | None: ...
    async def list_managed(self, label_selector: str | None = None) -> list[QuotaSnapshot]: ...
    async def create(
        self, namespace: str, hard: Mapping[str, str], annotations: Mapping[str, str]
    ) -> QuotaSnapshot: ...
    async def patch(
        self, namespace: str, body: Mapping[str, Any], resource_version: str | None = None
    ) -> QuotaSnapshot: ...
    async def delete(self, namespace: str, uid: str | None = None) -> bool: ...


class EventSink(Protocol):
    """Event posting (:class:`dynquota.kube.events.EventRecorder`)."""

    async def emit(self, ref: ObjectRef, type_: EventType, reason: str, message: str) -> bool: ...


class UsageView(Protocol):
    """Usage tallies (:class:`dynquota.kube.informer.UsageWatcher`).

    ``synced``: every informer applied its first full list. ``healthy(now, margin)``: every
    informer completed a watch cycle or list within its watch timeout plus ``margin``
    seconds (its tallies are fresh enough to shrink on).
    """

    @property
    def synced(self) -> bool: ...
    def healthy(self, now: float | None = None, margin: float = 60.0) -> bool: ...
    def usage(self, namespace: str, resource: str, now: float | None = None) -> int: ...
    def next_expiry(self, namespace: str, now: float | None = None) -> float | None: ...


class PolicyStatusSink(Protocol):
    """Policy status writes (:class:`dynquota.kube.cluster.ClusterClient`)."""

    async def patch_policy_status(self, name: str, status: Mapping[str, Any]) -> None: ...


class BudgetStatusSink(Protocol):
    """QuotaBudget status writes (:class:`dynquota.kube.cluster.ClusterClient`: a JSON
    merge-patch of the status subresource)."""

    async def patch_budget_status(self, name: str, status: Mapping[str, Any]) -> None: ...


class NamespaceReader(Protocol):
    """Consistent reads of a Namespace (:class:`dynquota.kube.cluster.ClusterClient`)."""

    async def read_namespace(self, name: str) -> dict[str, Any]: ...


class LimitRangeReader(Protocol):
    """A namespace's LimitRanges, and writes of the companion LimitRange ``dynquota``
    (:class:`dynquota.kube.cluster.ClusterClient`: ``list_limit_ranges`` returns decoded
    JSON objects; ``patch_limit_range`` is conditional on ``resource_version``)."""

    async def list_limit_ranges(self, namespace: str) -> list[dict[str, Any]]: ...
    async def create_limit_range(self, namespace: str, item: Mapping[str, Any]) -> None: ...
    async def patch_limit_range(
        self, namespace: str, item: Mapping[str, Any], resource_version: str
    ) -> None: ...


class LeaderView(Protocol):
    """Whether this replica may write (:class:`dynquota.kube.leader.LeaderGate`).

    ``is_leader``: it holds the Lease now. ``can_write(seconds)``: a write that takes up to
    ``seconds`` would finish before leadership could lapse (time fencing).
    """

    @property
    def is_leader(self) -> bool: ...
    def can_write(self, seconds: float) -> bool: ...


class AlwaysLeading:
    """A :class:`LeaderView` that always leads (no leader election; unit tests)."""

    is_leader = True

    def can_write(self, seconds: float) -> bool:
        return True


class Requeue(Protocol):
    """Queues namespaces for a reconcile (:class:`dynquota._k8s.workqueue.WorkQueue`):
    ``add`` (coalesced), ``add_now`` (at once, past the coalescing window), ``add_all``."""

    def add(self, key: str) -> None: ...
    def add_now(self, key: str) -> None: ...
    def add_all(self, keys: Iterable[str]) -> None: ...


class SwitchView(Protocol):
    """The kill switch as the parts read it (:class:`dynquota.operator.killswitch.SwitchState`).

    ``engaged``: ``True`` engaged, ``False`` released, ``None`` unknown (nothing is written).
    ``release_confirmed``: ``False`` from a release seen in a watch event until a consistent
    read confirms it. ``sweeping``: a sweep is deleting (reconciles leave deletes to it).
    """

    @property
    def engaged(self) -> bool | None: ...
    @property
    def release_confirmed(self) -> bool: ...
    @property
    def sweeping(self) -> bool: ...


@dataclass(frozen=True)
class Applied:
    """What writing one decision came to.

    ``outcome`` ``None``: the decision was written (or there was nothing to write) and
    ``quota`` is the managed quota afterwards (``None`` after a delete). Otherwise ``outcome``
    is for the workqueue and ``result`` labels ``dynquota_reconciles_total``. ``conflict``:
    409 Conflict — read the quota again and decide again.
    """

    quota: QuotaSnapshot | None = None
    outcome: Outcome | None = None
    result: ReconcileResult = "ok"
    conflict: bool = False


@dataclass
class PolicyRecord:
    """One stored DynamicQuotaPolicy as the operator read it: its validated ``info``, its
    ``generation``, its ``status`` as stored (or as last written by the operator) and ``uid``."""

    info: PolicyInfo
    generation: int
    status: Mapping[str, Any]
    uid: str = ""


@dataclass
class NamespaceView:
    """What the operator last decided for a namespace (for ``plan``, the demo and tests).

    ``usage``/``hard``/``target`` per resource (counts), ``action`` the last decision's action,
    ``reasons`` its change reasons (or notes), ``at`` when (seconds since the epoch).
    """

    usage: dict[str, int] = field(default_factory=dict)
    tally: dict[str, int] = field(default_factory=dict)
    status_used: dict[str, int] = field(default_factory=dict)
    hard: dict[str, int] = field(default_factory=dict)
    target: dict[str, int] = field(default_factory=dict)
    action: str = ""
    reasons: tuple[str, ...] = ()
    at: float = 0.0
    governance: str = ""
    dry_run: bool = False
    trends: dict[str, Trend] = field(default_factory=dict)
    """Per key, the recent usage for the forecasts (:mod:`dynquota.policy.forecast`)."""
    # key -> (hard or None, maximum, steady) of the last look at it, and the forecasts made
    # from them: a forecast is fitted when read (a reason, a metric, a view), not at each look
    _limits: dict[str, tuple[int | None, int, float]] = field(default_factory=dict, repr=False)
    _forecast: dict[str, tuple[float | None, float | None]] = field(
        default_factory=dict, repr=False
    )

    def observe_trend(
        self, key: str, used: int, maximum: int, current: QuotaSnapshot | None, steady: float
    ) -> None:
        """Observe ``used`` (units of ``key``) in the key's trend at ``steady`` (monotonic
        seconds); when it reaches the hard of ``current`` and ``maximum`` is forecast when
        read (:meth:`forecast`, :attr:`exhaustion`), from the trend as it is then."""
        trend = self.trends.get(key)
        if trend is None:
            trend = self.trends[key] = Trend()
        trend.observe(steady, used)
        self._limits[key] = (
            current.hard_int(key) if current is not None else None,
            maximum,
            steady,
        )
        self._forecast.pop(key, None)

    def forget_forecasts(self) -> None:
        """A new look at the namespace begins: only the keys it observes are forecast."""
        self._limits.clear()
        self._forecast.clear()

    def forecast(self, key: str, limit: Literal["hard", "maximum"]) -> float | None:
        """Seconds from the last look at ``key`` until its usage reaches ``limit`` on its
        recent trend (:func:`~dynquota.policy.forecast.etas`); ``None``: no forecast (not
        growing, beyond the horizon, no hard, or ``key`` not observed since the last
        :meth:`forget_forecasts`)."""
        found = self._forecast.get(key)
        if found is None:
            inputs = self._limits.get(key)
            if inputs is None:
                return None
            hard, maximum, steady = inputs
            trend = self.trends[key]
            if hard is None:
                found = (None, etas(trend, (maximum,), steady)[0])
            else:
                at_hard, at_maximum = etas(trend, (hard, maximum), steady)
                found = (at_hard, at_maximum)
            self._forecast[key] = found
        return found[0] if limit == "hard" else found[1]

    @property
    def exhaustion(self) -> dict[tuple[str, str], float]:
        """(key, ``hard``/``maximum``) -> seconds until usage reaches it (absent: no
        forecast), for the keys of the last look."""
        found: dict[tuple[str, str], float] = {}
        for key in list(self._limits):  # (a copy: the demo reads views in its own thread)
            for limit in ("hard", "maximum"):
                left = self.forecast(key, limit)
                if left is not None:
                    found[(key, limit)] = left
        return found

    def exhaustion_of(self, limit: Literal["hard", "maximum"]) -> Mapping[str, float]:
        """Key -> seconds until its usage reaches ``limit``, fitted only for the keys looked
        up (a decision reads it for a key at its limit, in a reason)."""
        return _Forecasts(self, limit)


class _Forecasts(Mapping[str, float]):
    """:meth:`NamespaceView.exhaustion_of`: the forecasts of one limit, made when read."""

    def __init__(self, view: NamespaceView, limit: Literal["hard", "maximum"]) -> None:
        self._view = view
        self._limit: Literal["hard", "maximum"] = limit

    def __getitem__(self, key: str) -> float:
        left = self._view.forecast(key, self._limit)
        if left is None:
            raise KeyError(key)
        return left

    def __iter__(self) -> Iterator[str]:
        return (k for k in list(self._view._limits) if k in self)

    def __len__(self) -> int:
        return sum(1 for _ in self)


def resource_version_of(obj: Mapping[str, Any]) -> int:
    """An object's ``metadata.resourceVersion`` as an integer (0: absent or not a number)."""
    raw = str((obj.get("metadata") or {}).get("resourceVersion") or "")
    return int(raw) if raw.isdigit() else 0


def namespace_terminating(exc: ApiError) -> bool:
    """A 403 for creating in a namespace that is being deleted (``NamespaceTerminating``)."""
    return exc.status == 403 and "being terminated" in exc.message


class WorkloadLister(Protocol):
    """Lists workloads of one kind (:class:`dynquota.kube.workloads.WorkloadClient`): the
    waker's and node growth's read."""

    async def list_workloads(
        self,
        kind: WorkloadKind,
        namespace: str,
        keep: Callable[[dict[str, Any]], bool] | None = None,
    ) -> list[dict[str, Any]]: ...
