"""The waker: after a raise is enforced, wake the controllers the quota refused (a part the
operator holds, built alone in tests).

A raise is *enforced* when the quota's ``status.hard`` shows it (quota admission judges against
``status.hard``), whoever made it: a sizing step, a budget slice that grew, an override. The
operator's quota informer calls :meth:`Waker.observe` with the quota before and after; when a
key a pod create is charged to grew, one wake pass runs for the namespace
(:func:`dynquota.policy.wake.raised_keys`, :func:`~dynquota.policy.wake.charged_by_pods`): list
its ReplicaSets, StatefulSets, DaemonSets and Jobs, and set the wake mark on each one that
wants pods it has not got (:func:`~dynquota.policy.wake.short_workload`). At most one wake per
object per raise (the mark's value names the raise: the quota's resourceVersion), every patch
through the write gate and a shared rate limit, counted in ``dynquota_wakes_total{kind}`` and
said in one Normal ``Woken`` Event on the quota. At rest (no raise, or nothing short) nothing
is written. A policy with ``spec.wake: false`` wakes nothing in its namespaces.

After a start or a leader change, :meth:`Waker.sweep` looks at every quota not seen yet: a few
namespaces are passed one by one; more are passed together with one paged LIST per kind
across the cluster (4 LISTs instead of 4 per namespace).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, Protocol

from aiolimiter import AsyncLimiter

from dynquota._k8s.errors import ConflictError, ForbiddenError, KubeError, NotFoundError
from dynquota.metrics import Metrics
from dynquota.operator.ports import WorkloadLister
from dynquota.operator.write_gate import WAKE, WriteGate
from dynquota.policy.wake import (
    WORKLOAD_KINDS,
    WorkloadKind,
    charged_by_pods,
    raised_keys,
    short_workload,
)
from dynquota.quantity import QuantityError, parse_quantity

__all__ = ["SWEEP_TOGETHER", "WakeReport", "Waker", "WorkloadStore"]

log = logging.getLogger(__name__)


class WorkloadStore(WorkloadLister, Protocol):
    """The workloads a wake lists and marks (:class:`dynquota.kube.workloads.WorkloadClient`)."""

    async def wake_workload(
        self, kind: WorkloadKind, namespace: str, name: str, stamp: str, resource_version: str
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

SWEEP_TOGETHER = 8
"""A sweep with more namespaces than this lists each kind once across the cluster."""

WakeReport = Callable[[str, list[str], str], Awaitable[None]]
"""``report(namespace, woken "Kind/name"s, why)``: the operator's Event on the quota."""

Target = tuple[str, str]
"""``(raise_id, why)`` of one namespace's pass."""


class Waker:
    """See the module docs.

    Args:
        workloads: the port that lists and marks workloads.
        gate: the operator's write gate (every mark asks it: :data:`WAKE`).
        metrics: ``dynquota_wakes_total``.
        report: says what was woken (an Event on the managed quota).
        enabled: ``False`` turns waking off (nothing listed, nothing written).
        qps: marks per second at most, shared by every namespace (LISTs too, separately).
        allowed: ``allowed(namespace)``: whether the namespace's policy lets it be woken
            (``spec.wake``); default: every namespace.
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
        allowed: Callable[[str], bool] | None = None,
    ) -> None:
        self.workloads = workloads
        self.gate = gate
        self.metrics = metrics
        self.report = report
        self.enabled = enabled and workloads is not None
        self.allowed = allowed or (lambda _namespace: True)
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
        target = self._target(namespace, before, after, raise_id, used)
        if target is None:
            return False
        self._start(namespace, lambda: self.wake(namespace, *target))
        return True

    def _target(
        self,
        namespace: str,
        before: Mapping[str, str] | None,
        after: Mapping[str, str],
        raise_id: str,
        used: Mapping[str, str] | None,
    ) -> Target | None:
        if not self.enabled:
            return None
        unseen = namespace not in self._seen
        self._seen.add(namespace)
        if not self.allowed(namespace):
            return None
        if before is None or unseen:
            keys = sorted(k for k in after if charged_by_pods(k) and _room(k, after, used or {}))
            if not keys:
                return None
            return raise_id, "after a restart or a leader change: " + ", ".join(
                f"{k} used {(used or {}).get(k, '0')} of {after[k]}" for k in keys
            )
        keys = sorted(k for k in raised_keys(before, after) if charged_by_pods(k))
        if not keys:
            return None
        return raise_id, ", ".join(f"{k} {before[k]}->{after[k]}" for k in keys)

    def _start(self, key: str, run: Callable[[], Awaitable[list[str] | None]]) -> None:
        running = self._tasks.get(key)
        if running is not None and not running.done():
            running.cancel()  # a newer raise: its pass supersedes
        self._tasks[key] = asyncio.get_running_loop().create_task(
            self._pass(key, run), name=f"dynquota-wake-{key}"
        )

    def sweep(self, quotas: Iterable[QuotaView]) -> int:
        """Observe every managed quota not seen since this replica leads (a namespace whose
        quota stays quiet gets no event: its refused controllers would wait for their
        backoff). More than :data:`SWEEP_TOGETHER` namespaces to pass are passed together
        (one LIST per kind across the cluster). Returns how many namespaces are passed."""
        targets: dict[str, Target] = {}
        for q in list(quotas):
            if q.namespace in self._seen:
                continue
            target = self._target(q.namespace, None, q.status_hard, q.resource_version,
                                  q.status_used)  # fmt: skip
            if target is not None:
                targets[q.namespace] = target
        if len(targets) <= SWEEP_TOGETHER:
            for namespace, target in targets.items():
                self._start(namespace, functools.partial(self.wake, namespace, *target))
        else:
            self._start("", lambda: self.wake_together(targets))
        return len(targets)

    def reset(self) -> None:
        """Leadership lost: what was seen no longer counts (the next leader may miss raises
        made meanwhile); running passes stop."""
        self._seen.clear()
        for task in self._tasks.values():
            task.cancel()

    async def wake(self, namespace: str, raise_id: str, why: str) -> list[str] | None:
        """One wake pass for ``namespace`` (see the module docs); returns the workloads marked
        (``"Kind/name"``), or ``None`` when the write gate held a mark (the pass is to be tried
        again). Raises ``KubeError`` when a LIST fails."""
        assert self.workloads is not None
        marked: list[str] = []
        for kind in WORKLOAD_KINDS:
            await self._list_limiter.acquire()  # a start or leader change lists many at once
            items = await self.workloads.list_workloads(kind, namespace)
            done = await self._mark(kind, namespace, items, raise_id, marked)
            if not done:
                if marked:
                    await self.report(namespace, marked, why)
                return None
        if marked:
            await self.report(namespace, marked, why)
        return marked

    async def wake_together(self, targets: Mapping[str, Target]) -> list[str] | None:
        """One wake pass for many namespaces (a sweep): each kind listed once across the
        cluster (paged; only short workloads of ``targets``' namespaces kept), marked as
        :meth:`wake` marks them; one Event per namespace. Returns every ``"Kind/name"``
        marked, or ``None`` when the gate held a mark. Raises ``KubeError``."""
        assert self.workloads is not None
        marked: dict[str, list[str]] = defaultdict(list)
        held = False
        for kind in WORKLOAD_KINDS:
            await self._list_limiter.acquire()
            items = await self.workloads.list_workloads(
                kind, "", keep=functools.partial(_short_in, kind, targets)
            )
            by_namespace: dict[str, list[dict[str, Any]]] = defaultdict(list)
            for item in items:
                by_namespace[_namespace(item)].append(item)
            for namespace, objs in by_namespace.items():
                raise_id = targets[namespace][0]
                if not await self._mark(kind, namespace, objs, raise_id, marked[namespace]):
                    held = True
                    break
            if held:
                break
        for namespace, names in marked.items():
            if names:
                await self.report(namespace, names, targets[namespace][1])
        return None if held else [n for names in marked.values() for n in names]

    async def _mark(
        self,
        kind: WorkloadKind,
        namespace: str,
        items: list[dict[str, Any]],
        raise_id: str,
        marked: list[str],
    ) -> bool:
        """Mark the short ones of ``items``; ``False`` when the gate held a mark."""
        assert self.workloads is not None
        for obj in items:
            meta = obj.get("metadata") or {}
            name, rv = str(meta.get("name") or ""), str(meta.get("resourceVersion") or "")
            if not name or not short_workload(kind, obj):
                continue
            if self._woken.get((namespace, f"{kind}/{name}")) == raise_id:
                continue  # woken for this raise already
            held = self.gate.hold(WAKE)
            if held is not None:
                self.metrics.writes_held.labels(held).inc()
                return False
            await self._limiter.acquire()
            try:
                await self.workloads.wake_workload(kind, namespace, name, raise_id, rv)
            except (ConflictError, NotFoundError):
                continue  # changed or gone since the list: re-queued by that change already
            except ForbiddenError as exc:
                # the chart's policy refused it (a mutating webhook changed more than the
                # mark): the controller waits for its backoff; trying again changes nothing
                log.warning("wake of %s %s/%s refused: %s", kind, namespace, name, exc)
                self._woken[(namespace, f"{kind}/{name}")] = raise_id
                continue
            self._woken[(namespace, f"{kind}/{name}")] = raise_id
            self.metrics.wakes.labels(kind).inc()
            marked.append(f"{kind}/{name}")
        return True

    async def _pass(self, key: str, run: Callable[[], Awaitable[list[str] | None]]) -> None:
        # A pass the gate held (the Lease could lapse) or whose LIST failed is tried again
        # with backoff for up to RETRY_FOR seconds: a dropped pass is a controller left to its
        # own backoff (README-only attack: a restart at the wrong moment lost it for good).
        delay, waited = 1.0, 0.0
        try:
            while True:
                try:
                    if await run() is not None:
                        return
                    failure = "held by the write gate"
                except KubeError as exc:
                    failure = str(exc)
                if waited >= RETRY_FOR:
                    log.warning("waking the controllers of %s: gave up: %s",
                                key or "the namespaces swept", failure)  # fmt: skip
                    return
                await asyncio.sleep(delay)
                waited += delay
                delay = min(delay * 2, 30.0)
        finally:
            if self._tasks.get(key) is asyncio.current_task():
                del self._tasks[key]

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


def _short_in(kind: WorkloadKind, targets: Mapping[str, Target], obj: dict[str, Any]) -> bool:
    return _namespace(obj) in targets and short_workload(kind, obj)


def _namespace(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("namespace") or "")


def _room(key: str, hard: Mapping[str, str], used: Mapping[str, str]) -> bool:
    """Whether ``used`` of ``key`` is below its ``hard`` (quantities; unparseable: no)."""
    try:
        return parse_quantity(used.get(key, "0")) < parse_quantity(hard[key])
    except QuantityError:
        return False
