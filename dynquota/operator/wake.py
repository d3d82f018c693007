"""The waker: after a raise is enforced, wake the controllers the quota refused (a part the
operator holds, built alone in tests).

A raise is *enforced* when the quota's ``status.hard`` shows it (quota admission judges against
``status.hard``), whoever made it: a sizing step, a budget slice that grew, an override. The
operator's quota informer calls :meth:`Waker.observe` with the quota before and after; when a
key a pod create is charged to grew, one wake pass runs for the namespace
(:func:`dynquota.policy.wake.raised_keys`, :func:`~dynquota.policy.wake.charged_by_pods`): list
its ReplicaSets, and set the wake mark on each one whose controller was refused
(:func:`~dynquota.policy.wake.refused_replica_set`). At most one wake per ReplicaSet per raise
(the mark's value names the raise: the quota's resourceVersion), every patch through the write
gate and a shared rate limit, counted in ``dynquota_wakes_total{kind}`` and said in one Normal
``Woken`` Event on the quota. At rest (no raise, or nothing refused) nothing is written.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, Protocol

from aiolimiter import AsyncLimiter

from dynquota._k8s.errors import ConflictError, KubeError, NotFoundError
from dynquota.metrics import Metrics
from dynquota.operator.write_gate import WAKE, WriteGate
from dynquota.policy.wake import charged_by_pods, raised_keys, refused_replica_set
from dynquota.quantity import QuantityError, parse_quantity

__all__ = ["WakeReport", "Waker", "WorkloadStore"]

log = logging.getLogger(__name__)


class WorkloadStore(Protocol):
    """The workloads a wake lists and marks (:class:`dynquota.kube.workloads.WorkloadClient`)."""

    async def list_replica_sets(self, namespace: str) -> list[dict[str, Any]]: ...
    async def wake_replica_set(
        self, namespace: str, name: str, stamp: str, resource_version: str
    ) -> None: ...


class QuotaView(Protocol):
    """What a sweep reads of a managed quota (:class:`dynquota.kube.quotas.QuotaSnapshot`)."""

    @property
    def namespace(self) -> str: ...
    @property
    def resource_version(self) -> str: ...
    @property
    def status_hard(self) -> Mapping[str, str]: ...
    @property
    def status_used(self) -> Mapping[str, str]: ...


RETRY_FOR = 300.0
"""Seconds a held or failed pass is tried again (backoff 1 s doubling to 30 s)."""

WakeReport = Callable[[str, list[str], str], Awaitable[None]]
"""``report(namespace, woken names, why)``: the operator's Event on the quota."""


class Waker:
    """See the module docs.

    Args:
        workloads: the port that lists and marks ReplicaSets.
        gate: the operator's write gate (every mark asks it: :data:`WAKE`).
        metrics: ``dynquota_wakes_total``.
        report: says what was woken (an Event on the managed quota).
        enabled: ``False`` turns waking off (nothing listed, nothing written).
        qps: marks per second at most, shared by every namespace.
    """

    def __init__(
        self,
        workloads: WorkloadStore | None,
        gate: WriteGate,
        metrics: Metrics,
        report: WakeReport,
        *,
        enabled: bool = True,
        qps: float = 20.0,
    ) -> None:
        self.workloads = workloads
        self.gate = gate
        self.metrics = metrics
        self.report = report
        self.enabled = enabled and workloads is not None
        self._limiter = AsyncLimiter(1, 1.0 / qps)
        self._list_limiter = AsyncLimiter(1, 1.0 / qps)
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._woken: dict[tuple[str, str], str] = {}
        self._seen: set[str] = set()

    def observe(
        self,
        namespace: str,
        before: Mapping[str, str] | None,
        after: Mapping[str, str],
        raise_id: str,
        used: Mapping[str, str] | None = None,
    ) -> bool:
        """A managed quota's ``status.hard`` went from ``before`` to ``after`` (``used``: its
        ``status.used``): start a wake pass when a key pods are charged to grew. The first
        time a namespace is seen since this replica leads (``before`` unknown: a restart or
        a leader change, when a raise may have gone unwoken), a pass starts when such a key
        has room (``used`` below ``after``). Returns whether a pass started."""
        if not self.enabled:
            return False
        unseen = namespace not in self._seen
        self._seen.add(namespace)
        if before is None or unseen:
            keys = sorted(k for k in after if charged_by_pods(k) and _room(k, after, used or {}))
            if not keys:
                return False
            why = "after a restart or a leader change: " + ", ".join(
                f"{k} used {(used or {}).get(k, '0')} of {after[k]}" for k in keys
            )
        else:
            keys = sorted(k for k in raised_keys(before, after) if charged_by_pods(k))
            if not keys:
                return False
            why = ", ".join(f"{k} {before[k]}->{after[k]}" for k in keys)
        running = self._tasks.get(namespace)
        if running is not None and not running.done():
            running.cancel()  # a newer raise: its pass supersedes
        self._tasks[namespace] = asyncio.get_running_loop().create_task(
            self._pass(namespace, raise_id, why), name=f"dynquota-wake-{namespace}"
        )
        return True

    def sweep(self, quotas: Iterable[QuotaView]) -> int:
        """Observe every managed quota not seen since this replica leads (a namespace whose
        quota stays quiet gets no event: its refused ReplicaSets would wait for their backoff).
        Returns how many passes started."""
        return sum(
            self.observe(q.namespace, None, q.status_hard, q.resource_version, q.status_used)
            for q in list(quotas)
            if q.namespace not in self._seen
        )

    def reset(self) -> None:
        """Leadership lost: what was seen no longer counts (the next leader may miss raises
        made meanwhile); running passes stop."""
        self._seen.clear()
        for task in self._tasks.values():
            task.cancel()

    async def wake(self, namespace: str, raise_id: str, why: str) -> list[str] | None:
        """One wake pass (see the module docs); returns the ReplicaSets marked, or ``None``
        when the write gate held a mark (the pass is to be tried again). Raises ``KubeError``
        when the list fails."""
        assert self.workloads is not None
        marked: list[str] = []
        await self._list_limiter.acquire()  # a start or leader change lists many at once
        for rs in await self.workloads.list_replica_sets(namespace):
            meta = rs.get("metadata") or {}
            name, rv = str(meta.get("name") or ""), str(meta.get("resourceVersion") or "")
            if not name or not refused_replica_set(rs):
                continue
            if self._woken.get((namespace, name)) == raise_id:
                continue  # woken for this raise already
            held = self.gate.hold(WAKE)
            if held is not None:
                self.metrics.writes_held.labels(held).inc()
                if marked:
                    await self.report(namespace, marked, why)
                return None
            await self._limiter.acquire()
            try:
                await self.workloads.wake_replica_set(namespace, name, raise_id, rv)
            except (ConflictError, NotFoundError):
                continue  # changed or gone since the list: re-queued by that change already
            self._woken[(namespace, name)] = raise_id
            self.metrics.wakes.labels("ReplicaSet").inc()
            marked.append(name)
        if marked:
            await self.report(namespace, marked, why)
        return marked

    async def _pass(self, namespace: str, raise_id: str, why: str) -> None:
        # A pass the gate held (the Lease could lapse) or whose LIST failed is tried again
        # with backoff for up to RETRY_FOR seconds: a dropped pass is a controller left to its
        # own backoff (README-only attack: a restart at the wrong moment lost it for good).
        delay, waited = 1.0, 0.0
        try:
            while True:
                try:
                    if await self.wake(namespace, raise_id, why) is not None:
                        return
                    failure = "held by the write gate"
                except KubeError as exc:
                    failure = str(exc)
                if waited >= RETRY_FOR:
                    log.warning("waking the controllers of %s after %s: gave up: %s",
                                namespace, why, failure)  # fmt: skip
                    return
                await asyncio.sleep(delay)
                waited += delay
                delay = min(delay * 2, 30.0)
        finally:
            if self._tasks.get(namespace) is asyncio.current_task():
                del self._tasks[namespace]

    def forget(self, namespace: str) -> None:
        """The namespace is gone: drop what was woken and seen there."""
        self._seen.discard(namespace)
        for key in [k for k in self._woken if k[0] == namespace]:
            del self._woken[key]

    async def stop(self) -> None:
        """Cancel every running pass and wait for it."""
        tasks, self._tasks = list(self._tasks.values()), {}
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task


def _room(key: str, hard: Mapping[str, str], used: Mapping[str, str]) -> bool:
    """Whether ``used`` of ``key`` is below its ``hard`` (quantities; unparseable: no)."""
    try:
        return parse_quantity(used.get(key, "0")) < parse_quantity(hard[key])
    except QuantityError:
        return False
