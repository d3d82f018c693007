"""An in-memory quota store and accessor, for tests and the benchmark.

:class:`InMemoryQuotaServer` plays kube-apiserver with etcd: it holds ResourceQuota documents,
gives every write a new resourceVersion from one global revision counter, and refuses a status
write whose resourceVersion is not current with :class:`QuotaConflictError` (409). It can
inject latency, errors and competing writers (another apiserver replica, the quota
controller) that bump a quota's resourceVersion.

:class:`InMemoryQuotaAccessor` is one evaluator instance's view: an informer fed by the
server's events after an injectable lag, plus the caches of :class:`CachingQuotaAccessor`.
Several accessors over one server model several apiserver replicas.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from dynquota.quantity import parse_quantity

from .accessor import CachingQuotaAccessor, InformerLag
from .errors import QuotaAccessError, QuotaConflictError
from .resources import add
from .types import ResourceQuota, ScopedResourceSelectorRequirement

__all__ = ["InMemoryQuotaAccessor", "InMemoryQuotaServer", "ServerStats"]

EventType = Literal["ADDED", "MODIFIED", "DELETED"]
Watcher = Callable[[EventType, ResourceQuota], None]


@dataclass
class ServerStats:
    """What the in-memory server saw (counts since creation).

    Attributes:
        status_writes: successful status writes by evaluators.
        conflicts: status writes refused with 409.
        failed_writes: status writes refused with an injected error.
        lists: list calls.
        competing_writes: writes by :meth:`InMemoryQuotaServer.competing_write`.
        writes_by_quota: successful evaluator status writes per ``namespace/name``.
    """

    status_writes: int = 0
    conflicts: int = 0
    failed_writes: int = 0
    lists: int = 0
    competing_writes: int = 0
    writes_by_quota: dict[str, int] = field(default_factory=dict)


@dataclass
class _Fault:
    op: Literal["list", "update"]
    error: QuotaAccessError
    times: int
    namespace: str | None
    name: str | None


class InMemoryQuotaServer:
    """The authoritative quota store (an apiserver + etcd stand-in).

    Args:
        write_latency: seconds a status write takes; the resourceVersion precondition is
            checked halfway, as etcd's compare-and-swap happens inside the request.
        list_latency: seconds a list takes.
    """

    def __init__(self, *, write_latency: float = 0.0, list_latency: float = 0.0) -> None:
        self.write_latency = write_latency
        self.list_latency = list_latency
        self.stats = ServerStats()
        self._objects: dict[str, ResourceQuota] = {}
        self._revision = 0
        self._watchers: list[Watcher] = []
        self._faults: list[_Fault] = []
        self._conflicts_planned: dict[str, int] = {}

    # --- setup and inspection (synchronous, no latency) ---------------------------------

    def create(
        self,
        namespace: str,
        name: str,
        hard: Mapping[str, str | int],
        used: Mapping[str, str | int] | None = None,
        *,
        scopes: tuple[str, ...] = (),
        scope_selector: tuple[ScopedResourceSelectorRequirement, ...] = (),
    ) -> ResourceQuota:
        """Store a new quota; ``hard`` becomes ``status.hard``; ``used`` defaults to zeros.

        Pass ``used={}`` for a quota whose status the quota controller has not filled yet.
        """
        hard_q = {k: parse_quantity(str(v)) for k, v in hard.items()}
        used_q = (
            {k: parse_quantity("0") for k in hard}
            if used is None
            else {k: parse_quantity(str(v)) for k, v in used.items()}
        )
        quota = ResourceQuota(
            namespace=namespace,
            name=name,
            hard=hard_q,
            used=used_q,
            scopes=scopes,
            scope_selector=scope_selector,
        )
        return self._store(quota, "ADDED")

    def get(self, namespace: str, name: str) -> ResourceQuota:
        """The stored quota. Raises KeyError if absent."""
        return self._objects[f"{namespace}/{name}"]

    def all_quotas(self) -> list[ResourceQuota]:
        """Every stored quota."""
        return list(self._objects.values())

    def delete(self, namespace: str, name: str) -> None:
        """Remove a quota (informers see DELETED)."""
        quota = self._objects.pop(f"{namespace}/{name}")
        self._revision += 1
        self._notify("DELETED", quota.with_resource_version(str(self._revision)))

    def subscribe(self, watcher: Watcher) -> Callable[[], None]:
        """Call ``watcher(event_type, quota)`` on every change; returns an unsubscribe."""
        self._watchers.append(watcher)
        return lambda: self._watchers.remove(watcher)

    # --- injection ------------------------------------------------------------------------

    def competing_write(
        self, namespace: str, name: str, used_delta: Mapping[str, str | int] | None = None
    ) -> ResourceQuota:
        """Another writer updates the quota: ``used += used_delta`` (or no change) and a new
        resourceVersion, as another apiserver replica or the quota controller would."""
        quota = self.get(namespace, name)
        if used_delta:
            quota = quota.with_used(
                add(quota.used, {k: parse_quantity(str(v)) for k, v in used_delta.items()})
            )
        self.stats.competing_writes += 1
        return self._store(quota, "MODIFIED")

    def conflict_before_next_writes(self, namespace: str, name: str, times: int = 1) -> None:
        """Make the next ``times`` evaluator writes to this quota lose a race: just before
        each, a competing writer bumps its resourceVersion (without changing ``used``)."""
        key = f"{namespace}/{name}"
        self._conflicts_planned[key] = self._conflicts_planned.get(key, 0) + times

    def fail_next(
        self,
        op: Literal["list", "update"],
        error: QuotaAccessError,
        *,
        times: int = 1,
        namespace: str | None = None,
        name: str | None = None,
    ) -> None:
        """Answer the next ``times`` matching list/update calls with ``error``."""
        self._faults.append(_Fault(op, error, times, namespace, name))

    # --- the API --------------------------------------------------------------------------

    async def list(self, namespace: str) -> list[ResourceQuota]:
        """Every quota of ``namespace`` as stored now.

        Raises:
            QuotaAccessError: an injected fault.
        """
        self.stats.lists += 1
        if self.list_latency:
            await asyncio.sleep(self.list_latency)
        self._raise_fault("list", namespace, None)
        return [q for q in self._objects.values() if q.namespace == namespace]

    async def update_status(self, quota: ResourceQuota) -> ResourceQuota:
        """Store ``quota``'s status if its resourceVersion is current.

        Raises:
            QuotaConflictError: the resourceVersion is stale (409), or the quota is gone.
            QuotaAccessError: an injected fault.
        """
        if self.write_latency:
            await asyncio.sleep(self.write_latency / 2)
        key = quota.key
        planned = self._conflicts_planned.get(key, 0)
        if planned and key in self._objects:
            self._conflicts_planned[key] = planned - 1
            self.competing_write(quota.namespace, quota.name)
        try:
            self._raise_fault("update", quota.namespace, quota.name)
        except QuotaAccessError:
            self.stats.failed_writes += 1
            raise
        current = self._objects.get(key)
        if current is None or current.resource_version != quota.resource_version:
            self.stats.conflicts += 1
            raise QuotaConflictError(
                f'Operation cannot be fulfilled on resourcequotas "{quota.name}": the object '
                "has been modified; please apply your changes to the latest version and try again"
            )
        stored = self._store(current.with_used(quota.used), "MODIFIED")
        self.stats.status_writes += 1
        self.stats.writes_by_quota[key] = self.stats.writes_by_quota.get(key, 0) + 1
        if self.write_latency:
            await asyncio.sleep(self.write_latency / 2)
        return stored

    # --- internals ------------------------------------------------------------------------

    def _store(self, quota: ResourceQuota, event: EventType) -> ResourceQuota:
        self._revision += 1
        stored = quota.with_resource_version(str(self._revision))
        self._objects[stored.key] = stored
        self._notify(event, stored)
        return stored

    def _notify(self, event: EventType, quota: ResourceQuota) -> None:
        for watcher in list(self._watchers):
            watcher(event, quota)

    def _raise_fault(self, op: str, namespace: str, name: str | None) -> None:
        for fault in self._faults:
            if fault.op != op or fault.times <= 0:
                continue
            if fault.namespace is not None and fault.namespace != namespace:
                continue
            if fault.name is not None and fault.name != name:
                continue
            fault.times -= 1
            raise fault.error


class InMemoryQuotaAccessor(CachingQuotaAccessor):
    """One evaluator instance's view of an :class:`InMemoryQuotaServer`.

    Args:
        server: the shared store.
        informer_lag: seconds before a change reaches this informer (0: at once).
        synced: start with a synced informer (False: cold start until :meth:`sync_informer`).
        **cache_options: see :class:`CachingQuotaAccessor` (``look_aside``, ``live_ttl``, ...).

    Attributes:
        read_gate: test hook; when set, :meth:`get_quotas` waits for the event first.
    """

    def __init__(
        self,
        server: InMemoryQuotaServer,
        *,
        informer_lag: float = 0.0,
        synced: bool = True,
        **cache_options: Any,
    ) -> None:
        super().__init__(**cache_options)
        self.server = server
        self.informer_lag = InformerLag(informer_lag)
        self.read_gate: asyncio.Event | None = None
        self._informer: dict[str, dict[str, ResourceQuota]] = {}
        self._synced = False
        self._unsubscribe = server.subscribe(self._on_event)
        if synced:
            self.sync_informer()

    def sync_informer(self) -> None:
        """Complete the informer's initial list: it now holds every stored quota."""
        self._informer = {}
        for quota in self.server.all_quotas():
            self._informer.setdefault(quota.namespace, {})[quota.name] = quota
        self._synced = True

    def close(self) -> None:
        """Stop receiving events."""
        self._unsubscribe()
        self.informer_lag.cancel()

    @property
    def informer_synced(self) -> bool:
        """Whether :meth:`sync_informer` has run."""
        return self._synced

    def informer_quotas(self, namespace: str) -> list[ResourceQuota]:
        """The informer's (possibly lagging) copies."""
        return list(self._informer.get(namespace, {}).values())

    async def get_quotas(self, namespace: str) -> list[ResourceQuota]:
        """As :meth:`CachingQuotaAccessor.get_quotas`, after ``read_gate`` if set."""
        if self.read_gate is not None:
            await self.read_gate.wait()
        return await super().get_quotas(namespace)

    async def list_quotas(self, namespace: str) -> list[ResourceQuota]:
        """One list from the server."""
        return await self.server.list(namespace)

    async def write_quota_status(self, quota: ResourceQuota) -> ResourceQuota:
        """One conditional status write to the server."""
        return await self.server.update_status(quota)

    def _on_event(self, event: EventType, quota: ResourceQuota) -> None:
        if not self._synced:
            return
        self.informer_lag.call(lambda: self._apply(event, quota))

    def _apply(self, event: EventType, quota: ResourceQuota) -> None:
        if not self._synced:
            return
        names = self._informer.setdefault(quota.namespace, {})
        if event == "DELETED":
            names.pop(quota.name, None)
        else:
            names[quota.name] = quota
