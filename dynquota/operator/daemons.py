"""Node growth: the DaemonSet pods of new nodes get room at once (a part the operator holds,
built alone in tests).

The rule is :mod:`dynquota.policy.daemons`; this part feeds it. The Node informer
(:func:`dynquota.kube.objects.node_informer`) tells when each Node was created; when one
appears (or, after a start, one created within the window exists), the DaemonSets across the
cluster are listed a few times over the next minute (the DaemonSet controller sets
``desiredNumberScheduled`` in the sync that the quota refuses): the short ones in namespaces
the operator may manage are kept, with what one of their pods is charged
(:func:`dynquota.admission.pods.pod_usage` of the template); each such namespace's *floor* is
its quota's ``status.used`` at that moment plus
:func:`~dynquota.policy.daemons.node_growth`, and each namespace whose floor changed is
queued. The reconcile passes :meth:`NodeGrowth.floor` to ``decide`` as ``daemon_floor``; the
raise it makes is enforced, then woken (:mod:`dynquota.operator.wake`). A floor is absolute:
once the pods exist, usage has grown into it and nothing is added twice (a first build added
the shortfall to the usage of each later decision: 2 -> 5 -> 8 for 3 new nodes).

Only the leader lists; nothing is written here. Off (``DYNQUOTA_NODE_GROWTH=false``, or no
Node informer): no demand, the usual steps.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from dynquota._k8s.errors import KubeError
from dynquota.admission.errors import InvalidObjectError
from dynquota.admission.pods import pod_usage
from dynquota.operator.ports import WorkloadLister
from dynquota.policy.daemons import NODE_GROWTH_WINDOW, DaemonShortfall, node_growth
from dynquota.policy.keys import QuotaKeyError
from dynquota.policy.units import unit_for
from dynquota.policy.wake import short_workload
from dynquota.usage.counting import parse_time

__all__ = ["CHECK_AFTER", "NodeGrowth"]

log = logging.getLogger(__name__)

CHECK_AFTER: tuple[float, ...] = (2.0, 5.0, 10.0, 20.0, 40.0)
"""Seconds after the latest new Node at which the DaemonSets are listed (the controller's
status follows the Node within a second or two; a slow one is caught later)."""


class NodeGrowth:
    """See the module docs.

    Args:
        daemons: lists DaemonSets across the cluster (``None``: off).
        enqueue: queues a namespace for a reconcile.
        manageable: whether the operator may manage a namespace (a managed quota there).
        used: ``used(namespace, key)``: the managed quota's ``status.used`` of ``key`` in the
            key's units (0 when unknown).
        leading: whether this replica leads now (only the leader lists).
        enabled: ``False``: no list, no demand.
        clock: seconds since the epoch; ``window``: seconds a new node counts.
        check_after: seconds after the latest new Node at which to list.
    """

    def __init__(
        self,
        daemons: WorkloadLister | None,
        enqueue: Callable[[str], None],
        manageable: Callable[[str], bool],
        leading: Callable[[], bool],
        used: Callable[[str, str], int],
        *,
        enabled: bool = True,
        clock: Callable[[], float] = time.time,
        window: float = NODE_GROWTH_WINDOW,
        check_after: Sequence[float] = CHECK_AFTER,
    ) -> None:
        self.daemons = daemons
        self.enqueue = enqueue
        self.manageable = manageable
        self.leading = leading
        self.used = used
        self.enabled = enabled and daemons is not None
        self.clock = clock
        self.window = window
        self.check_after = tuple(check_after)
        self.created: dict[str, float] = {}
        """Node name -> its creationTimestamp (seconds since the epoch)."""
        self.floors: dict[str, dict[str, int]] = {}
        """Namespace -> quota key -> the hard its new nodes' DaemonSet pods need, as last
        listed (only namespaces with such a need)."""
        self._synced = False
        self._task: asyncio.Task[None] | None = None

    def on_node(self, event_type: str | None, obj: Mapping[str, Any]) -> None:
        """A Node event from the informer (``DELETED``, or added/changed: ``None`` from a
        list, ``ADDED``/``MODIFIED`` from the watch)."""
        meta = obj.get("metadata") or {}
        name = str(meta.get("name") or "")
        if not name:
            return
        if event_type == "DELETED":
            self.created.pop(name, None)
            return
        new = name not in self.created
        try:
            self.created[name] = parse_time(str(meta.get("creationTimestamp") or ""))
        except ValueError:
            self.created.pop(name, None)
            return
        if new and self._synced and self._recent(self.created[name]):
            self.poke()

    def on_nodes_synced(self) -> None:
        """The Node informer applied a full list: a node created within the window (the
        operator was down or not leading when it came) is looked at now."""
        self._synced = True
        if any(self._recent(t) for t in self.created.values()):
            self.poke()

    def _recent(self, created: float) -> bool:
        return self.clock() - self.window <= created

    def poke(self) -> None:
        """A new Node: list the DaemonSets at :data:`CHECK_AFTER` (restarted by each poke)."""
        if not self.enabled:
            return
        if self._task is not None and not self._task.done():
            self._task.cancel()
        self._task = asyncio.get_running_loop().create_task(
            self._checks(), name="dynquota-node-growth"
        )

    async def _checks(self) -> None:
        waited = 0.0
        for at in self.check_after:
            await asyncio.sleep(max(0.0, at - waited))
            waited = at
            try:
                await self.check()
            except KubeError as exc:
                log.warning("node growth: listing DaemonSets failed: %s", exc)

    async def check(self) -> None:
        """List the DaemonSets short of pods across the cluster (the leader only) and queue
        each namespace whose shortfall changed. Raises ``KubeError``."""
        if not self.enabled or self.daemons is None or not self.leading():
            return
        items = await self.daemons.list_workloads("DaemonSet", "", keep=self._keep)
        now = self.clock()
        short: dict[str, list[DaemonShortfall]] = {}
        for obj in items:
            meta = obj.get("metadata") or {}
            status = obj.get("status") or {}
            try:
                created = parse_time(str(meta.get("creationTimestamp") or ""))
                missing = int(status.get("desiredNumberScheduled", 0)) - int(
                    status.get("currentNumberScheduled", 0)
                )
            except (TypeError, ValueError):
                continue
            template = (obj.get("spec") or {}).get("template") or {}
            short.setdefault(str(meta.get("namespace")), []).append(
                DaemonShortfall(str(meta.get("name")), created, missing, _charge(template, now))
            )
        floors: dict[str, dict[str, int]] = {}
        for namespace, daemons in short.items():
            extra = node_growth(daemons, self.created.values(), now, self.window)
            if extra:
                floors[namespace] = {k: self.used(namespace, k) + v for k, v in extra.items()}
        changed = {ns for ns in set(floors) | set(self.floors)
                   if floors.get(ns) != self.floors.get(ns)}  # fmt: skip
        self.floors = floors
        for namespace in sorted(changed):
            self.enqueue(namespace)

    def _keep(self, obj: dict[str, Any]) -> bool:
        namespace = str((obj.get("metadata") or {}).get("namespace") or "")
        return short_workload("DaemonSet", obj) and self.manageable(namespace)

    def floor(self, namespace: str) -> dict[str, int]:
        """``decide``'s ``daemon_floor`` for ``namespace`` (quota key -> units); empty when
        off, nothing is short there or no node is new."""
        return dict(self.floors.get(namespace, {})) if self.enabled else {}

    def forget(self, namespace: str) -> None:
        """The namespace is gone."""
        self.floors.pop(namespace, None)

    async def stop(self) -> None:
        """Cancel the pending lists."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task


def _charge(template: Mapping[str, Any], now: float) -> dict[str, int]:
    """What one pod of ``template`` is charged, per quota key in the key's units."""
    pod = {"metadata": {}, "spec": template.get("spec") or {}}
    charge: dict[str, int] = {}
    try:
        usage = pod_usage(pod, now)
    except InvalidObjectError:  # a malformed template: count the pod, not its resources
        return {"pods": 1, "count/pods": 1}
    for key, quantity in usage.items():
        try:
            charge[key] = unit_for(key).units(quantity)
        except QuotaKeyError:
            continue
    charge.setdefault("pods", 1)
    return charge
