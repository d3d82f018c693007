"""The evaluator's work queue: requests waiting per namespace, one namespace per worker.

Port of the work handling of ``quotaEvaluator`` in kubernetes/kubernetes ``staging/src/
k8s.io/apiserver/pkg/admission/plugin/resourcequota/controller.go`` (``addWork``,
``getWork``, ``completeWork``) over client-go's ``workqueue.Type`` semantics
(:class:`NamespaceQueue`). Requests arriving while their namespace is being processed wait in a
*dirty* list and form the next batch. Plus :meth:`NamespaceWork.requeue`: undecided requests
sent back to the head of their namespace's work after a conflict round that wrote nothing.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .waiters import Waiter

__all__ = ["NamespaceQueue", "NamespaceWork"]


class NamespaceQueue:
    """A deduplicating FIFO of namespaces where a namespace is handed to one worker at a time.

    The semantics of client-go's ``workqueue.Type`` (``Add``, ``Get``, ``Done``): a key added
    while queued is not queued twice; a key added while being processed is queued again when
    ``done`` is called.
    """

    def __init__(self) -> None:
        self._ready: asyncio.Queue[str] = asyncio.Queue()
        self._dirty: set[str] = set()
        self._processing: set[str] = set()

    def add(self, key: str) -> None:
        if key in self._dirty:
            return
        self._dirty.add(key)
        if key not in self._processing:
            self._ready.put_nowait(key)

    async def get(self) -> str:
        key = await self._ready.get()
        self._processing.add(key)
        self._dirty.discard(key)
        return key

    def done(self, key: str) -> None:
        self._processing.discard(key)
        if key in self._dirty:
            self._ready.put_nowait(key)


class NamespaceWork:
    """Waiters by namespace: ``work`` (the next batch) and ``dirty`` (arrived while the
    namespace is in progress), handed out one namespace at a time (upstream ``work``,
    ``dirtyWork``, ``inProgress``)."""

    def __init__(self) -> None:
        self._queue = NamespaceQueue()
        self._work: dict[str, list[Waiter]] = {}
        self._dirty: dict[str, list[Waiter]] = {}
        self._in_progress: set[str] = set()

    def add(self, waiter: Waiter) -> None:
        """Queue a waiter (upstream ``addWork``)."""
        ns = waiter.attributes.namespace
        self._queue.add(ns)
        if ns in self._in_progress:
            self._dirty.setdefault(ns, []).append(waiter)
        else:
            self._work.setdefault(ns, []).append(waiter)

    async def get(self) -> tuple[str, list[Waiter]]:
        """The next namespace and its batch, now in progress (upstream ``getWork``); must be
        followed by :meth:`complete`."""
        ns = await self._queue.get()
        work = self._work.pop(ns, [])
        self._dirty.pop(ns, None)
        self._in_progress.add(ns)
        for w in work:
            w.requeued = False
        return ns, work

    def requeue(self, ns: str, waiters: list[Waiter]) -> None:
        """Put waiters back at the head of the namespace's work (it is in progress now)."""
        self._dirty[ns] = waiters + self._dirty.get(ns, [])
        self._queue.add(ns)

    def complete(self, ns: str) -> None:
        """The namespace's batch is done; its dirty work becomes the next batch (upstream
        ``completeWork``)."""
        self._queue.done(ns)
        dirty = self._dirty.pop(ns, None)
        if dirty:
            self._work[ns] = dirty
        else:
            self._work.pop(ns, None)
        self._in_progress.discard(ns)

    def drain(self) -> list[Waiter]:
        """Every queued waiter, removed (for closing the evaluator)."""
        out = [w for ws in (*self._work.values(), *self._dirty.values()) for w in ws]
        self._work.clear()
        self._dirty.clear()
        return out
