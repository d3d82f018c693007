"""Node growth: the DaemonSet pods of new nodes get room at once (a part the operator holds,
built alone in tests).

The rule is :mod:`dynquota.policy.daemons`; this part feeds it. The Node informer
(:func:`dynquota.kube.objects.node_informer`) tells when each Node was created; when one
appears (or, after a start, one created within the window exists), the DaemonSets across the
cluster are listed a few times over the next minute (the DaemonSet controller sets
``desiredNumberScheduled`` in the sync that the quota refuses): the short ones in namespaces
the operator may manage are kept, with what one of their pods is charged
(:func:`dynquota.admission.pods.pod_usage` of the template); each such namespace's *floor* is
its quota's ``status.used`` at its first grant plus the pods of every node granted since
(each new node once per DaemonSet: :func:`~dynquota.policy.daemons.new_grants`), and each
namespace whose floor changed is queued. The reconcile passes :meth:`NodeGrowth.floor` to
``decide`` as ``daemon_floor``; the raise it makes is enforced, then woken
(:mod:`dynquota.operator.wake`). A floor is absolute and grows only by new grants: once the
pods exist, usage has grown into it and nothing is added twice (one build added the shortfall
to each later decision's usage, 2 -> 5 -> 8 for 3 new nodes; the next re-granted at every
list, 10 -> 50 for 5 DaemonSets and 2 nodes: README-only attack). The room is the namespace's:
a DaemonSet created after the nodes may take it first (documented in docs/sizing.md).

Only the leader lists; nothing is written here. Off (``DYNQUOTA_NODE_GROWTH=false``, a policy's
``spec.wake: false``, or no Node informer): no floor, the usual steps.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dynquota._k8s.errors import KubeError
from dynquota.admission.errors import InvalidObjectError
from dynquota.admission.pods import pod_usage
from dynquota.operator.ports import WorkloadLister
from dynquota.policy.daemons import NODE_GROWTH_WINDOW, DaemonShortfall, new_grants
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
        self._episodes: dict[str, _Episode] = {}
        """Namespace -> what node growth granted there (only namespaces with a grant)."""
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
            except Exception:  # a bug must not end the schedule silently
                log.exception("node growth: a check failed")

    async def check(self) -> None:
        """List the DaemonSets short of pods across the cluster (the leader only), grant each
        its new nodes not granted before (:func:`~dynquota.policy.daemons.new_grants`), and
        queue each namespace whose floor changed. Raises ``KubeError``."""
        if not self.enabled or self.daemons is None or not self.leading():
            return
        items = await self.daemons.list_workloads("DaemonSet", "", keep=self._keep)
        now = self.clock()
        self._expire(now)
        log.debug("node growth: %d DaemonSet(s) short of pods", len(items))
        recent = {n: t for n, t in self.created.items() if now - self.window <= t <= now}
        changed: set[str] = set()
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
            namespace, name = str(meta.get("namespace")), str(meta.get("name"))
            episode = self._episodes.setdefault(namespace, _Episode())
            granted = episode.granted.setdefault(name, set())
            template = (obj.get("spec") or {}).get("template") or {}
            daemon = DaemonShortfall(name, created, missing, _charge(template, now))
            fresh = new_grants(daemon, recent, granted, now, self.window)
            if not fresh:
                continue
            granted.update(fresh)
            log.info("node growth: DaemonSet %s/%s gets room for its pods on %d new node(s): %s",
                     namespace, name, len(fresh), ", ".join(fresh))  # fmt: skip
            episode.latest = max([episode.latest, *(recent[n] for n in fresh)])
            for key, per_pod in daemon.pod_charge.items():
                if key not in episode.floor:  # the usage the room is added to, read once
                    episode.floor[key] = self.used(namespace, key)
                episode.floor[key] += per_pod * len(fresh)
            changed.add(namespace)
        for namespace in [ns for ns, e in self._episodes.items() if not e.floor]:
            del self._episodes[namespace]
        for namespace in sorted(changed):
            self.enqueue(namespace)

    def _expire(self, now: float) -> None:
        """Drop the floors whose newest granted node left the window."""
        for namespace in [ns for ns, e in self._episodes.items()
                          if e.floor and now - self.window > e.latest]:  # fmt: skip
            del self._episodes[namespace]

    def _keep(self, obj: dict[str, Any]) -> bool:
        namespace = str((obj.get("metadata") or {}).get("namespace") or "")
        return short_workload("DaemonSet", obj) and self.manageable(namespace)

    def floor(self, namespace: str) -> dict[str, int]:
        """``decide``'s ``daemon_floor`` for ``namespace`` (quota key -> units): the usage
        when its first new node was granted plus every grant's pods since; empty when off,
        nothing was granted, or the newest granted node is older than the window."""
        episode = self._episodes.get(namespace)
        if not self.enabled or episode is None or self.clock() - self.window > episode.latest:
            return {}
        return dict(episode.floor)

    def forget(self, namespace: str) -> None:
        """The namespace is gone."""
        self._episodes.pop(namespace, None)

    async def stop(self) -> None:
        """Cancel the pending lists."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task


@dataclass
class _Episode:
    """One namespace's node growth: ``granted`` (DaemonSet -> the nodes whose pod got room),
    ``floor`` (quota key -> the usage at its first grant plus the granted pods' charge),
    ``latest`` (creationTimestamp of the newest granted node, seconds since the epoch)."""

    granted: dict[str, set[str]] = field(default_factory=dict)
    floor: dict[str, int] = field(default_factory=dict)
    latest: float = 0.0


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
