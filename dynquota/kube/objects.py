"""The informers of whole objects the operator must know completely (I/O): Namespaces, the
ResourceQuotas and LimitRanges named ``dynquota``, DynamicQuotaPolicies and QuotaBudgets.

Each is a :class:`~dynquota._k8s.store.ObjectInformer` (replace on relist, resourceVersion
ordered, tombstones, a synced signal) over a raw JSON
:class:`~dynquota._k8s.reflector.Collection` of the cluster-wide collection; all only list and
watch (the chart's ClusterRole grants ``list``/``watch`` on each). Quotas and LimitRanges are
listed with the field selector ``metadata.name=dynquota``: the operator owns no other. kopf
watches none of them: its watcher re-lists without a ``DELETED`` for what vanished and keeps no
store, so a deletion missed in a watch gap was never seen (docs/architecture.md, "Which stream
runs where").
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kubernetes_asyncio import client as k8s_client

from dynquota._k8s.backoff import Backoff
from dynquota._k8s.reflector import Collection
from dynquota._k8s.store import EventHandler, ObjectInformer
from dynquota.names import (
    BUDGET_PLURAL,
    GROUP,
    MANAGED_LIMIT_RANGE_NAME,
    MANAGED_QUOTA_NAME,
    PLURAL,
    VERSION,
)

__all__ = [
    "BUDGETS",
    "LIMIT_RANGES",
    "NAMESPACES",
    "NODES",
    "POLICIES",
    "QUOTAS",
    "ObjectInformers",
    "Stream",
    "node_informer",
]

log = logging.getLogger(__name__)

NAMESPACES = "namespaces"
"""Name of the Namespace informer (its resource's plural, the metrics' ``resource`` label)."""
QUOTAS = "resourcequotas"
"""Name of the informer of the ResourceQuotas named ``dynquota``."""
LIMIT_RANGES = "limitranges"
"""Name of the informer of the LimitRanges named ``dynquota``."""
POLICIES = PLURAL
"""Name of the policy informer."""
BUDGETS = BUDGET_PLURAL
"""Name of the budget informer."""
NODES = "nodes"
"""Name of the Node informer (:func:`node_informer`)."""


@dataclass(frozen=True)
class Stream:
    """What one informer tells: ``on_event(event_type, obj)`` (see :mod:`dynquota._k8s.store`)
    and ``on_synced()`` after every full list (``None``: nothing)."""

    on_event: EventHandler
    on_synced: Callable[[], None] | None = None


class ObjectInformers:
    """The whole-object informers of one replica, started and stopped together.

    Args:
        api_client: the kubernetes_asyncio ``ApiClient`` (not closed here).
        namespaces, quotas, limit_ranges, policies, budgets: the handlers of each informer.
        budgets_absent_ok: whether a 404 on the budgets counts as "no budgets" (their CRD not
            installed while the policies' is served, i.e. an upgrade: Helm installs ``crds/``
            only on install); asked at each failed list.
        watch_timeout: the watches' ``timeoutSeconds``; ``clock``: epoch seconds.
        on_date: every response's ``Date`` header (the server's time, at least once a watch
            cycle; :meth:`dynquota._k8s.clock.ServerClock.observe_date`), or ``None``.
    """

    def __init__(
        self,
        api_client: k8s_client.ApiClient,
        *,
        namespaces: Stream,
        quotas: Stream,
        limit_ranges: Stream,
        policies: Stream,
        budgets: Stream,
        budgets_absent_ok: Callable[[], bool],
        watch_timeout: int = 300,
        clock: Callable[[], float] = time.time,
        on_date: Callable[[str | None], None] | None = None,
    ) -> None:
        self.clock = clock
        base = f"/apis/{GROUP}/{VERSION}"

        def informer(
            name: str,
            path: str,
            stream: Stream,
            field_selector: str | None = None,
            **kw: Any,
        ) -> ObjectInformer:
            source = Collection(api_client, path, field_selector=field_selector, on_date=on_date)
            return ObjectInformer(
                source,
                name=name,
                on_event=stream.on_event,
                on_synced=stream.on_synced,
                watch_timeout=watch_timeout,
                clock=clock,
                **kw,
            )

        self.informers: dict[str, ObjectInformer] = {
            NAMESPACES: informer(NAMESPACES, "/api/v1/namespaces", namespaces),
            QUOTAS: informer(
                QUOTAS, "/api/v1/resourcequotas", quotas, f"metadata.name={MANAGED_QUOTA_NAME}"
            ),
            LIMIT_RANGES: informer(
                LIMIT_RANGES,
                "/api/v1/limitranges",
                limit_ranges,
                f"metadata.name={MANAGED_LIMIT_RANGE_NAME}",
            ),
            POLICIES: informer(POLICIES, f"{base}/{PLURAL}", policies),
            BUDGETS: informer(
                BUDGETS,
                f"{base}/{BUDGET_PLURAL}",
                budgets,
                absent_ok=budgets_absent_ok,
                # a CRD not installed is asked again every 5 minutes at most
                backoff=Backoff(maximum=300.0),
            ),
        }
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        """Start one task per informer (idempotent)."""
        if not self._tasks:
            self._tasks = [
                asyncio.create_task(informer.run(), name=f"dynquota-informer-{name}")
                for name, informer in self.informers.items()
            ]

    async def stop(self) -> None:
        """Cancel the tasks and wait for them to end (a task that had died is logged)."""
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                try:
                    await task
                except Exception:
                    log.exception("informer task %s had died", task.get_name())

    def alive(self, now: float | None = None, margin: float = 60.0) -> bool:
        """Every task running and its loop making progress (see
        :meth:`~dynquota._k8s.reflector.Reflector.alive`)."""
        when = self.clock() if now is None else now
        if any(task.done() for task in self._tasks):
            return False
        return all(informer.alive(when, margin) for informer in self.informers.values())

    def healthy(self, margin: float = 60.0, now: float | None = None) -> bool:
        """Fresh enough to shrink on: every informer completed a watch cycle or a list within
        its watch timeout plus ``margin`` seconds (see
        :meth:`~dynquota._k8s.reflector.Reflector.healthy`); false before the first lists."""
        when = self.clock() if now is None else now
        return all(informer.healthy(when, margin) for informer in self.informers.values())

    async def wait_synced(self, *names: str) -> None:
        """Wait until each named informer (every one without names) applied its first full
        list."""
        for name in names or tuple(self.informers):
            await self.informers[name].wait_synced()

    def stats(self) -> dict[str, dict[str, Any]]:
        """Counters and times per informer (the metrics' ``resource`` label)."""
        return {name: informer.stats() for name, informer in self.informers.items()}


def node_informer(
    api_client: k8s_client.ApiClient,
    stream: Stream,
    *,
    watch_timeout: int = 300,
    clock: Callable[[], float] = time.time,
) -> ObjectInformer:
    """An informer of the Nodes keeping only when each was created (``metadata`` ``name``,
    ``uid``, ``resourceVersion``, ``creationTimestamp``: a few hundred bytes a node, not the
    tens of KiB of its status), for the DaemonSet rule of node growth
    (:mod:`dynquota.policy.daemons`). Not one of :class:`ObjectInformers`: no write waits for
    it, and a Node list the token may not make (the rule off) costs nothing else."""
    return ObjectInformer(
        Collection(api_client, "/api/v1/nodes"),
        name=NODES,
        on_event=stream.on_event,
        on_synced=stream.on_synced,
        watch_timeout=watch_timeout,
        clock=clock,
        lean=_node_created,
    )


def _node_created(obj: Mapping[str, Any]) -> dict[str, Any]:
    meta = obj.get("metadata") or {}
    keep = ("name", "uid", "resourceVersion", "creationTimestamp")
    return {"metadata": {k: meta[k] for k in keep if k in meta}}
