"""DaemonSet pods for new nodes: the room a node pool's growth asks for at once (Pure: no I/O).

A DaemonSet wants one pod on every node it selects. When a node pool grows by more than one
sizing step per upscale cooldown (10 -> 30 nodes at a 40 % buffer is four steps, four
cooldowns), the namespace's quota refuses the pods of the new nodes until the steps catch up:
node agents missing for minutes to hours. Node growth is not a runaway — no tenant creates
Nodes — so it is let through at once, within bounds a tenant cannot move:

- only DaemonSets created **before** the node count for it: a DaemonSet created after the
  nodes (a new workload) is sized by the usual steps, as any new workload. Creation times
  have whole seconds, so a node made in the DaemonSet's own second counts as after it (a
  test bed run saw two of three nodes made in that second given no room, their pods missing
  for minutes);
- each such DaemonSet is given room for one pod per node created after it **within the
  last** :data:`NODE_GROWTH_WINDOW` seconds, **once per node** (:func:`new_grants`: a node
  granted before is never granted again, however often the DaemonSets are listed), and only
  while it is short (``desiredNumberScheduled - currentNumberScheduled``): re-targeting a
  DaemonSet at more existing nodes (its node selector) gains nothing beyond the nodes just
  created (a first build recomputed the room at every list from the grown usage: a README-only
  user's five short DaemonSets and two new nodes took a quota 10 -> 50, not 20);
- the demand is what those pods are charged (``pods``, compute requests and limits, per key
  in the key's units), added to usage; the hard never exceeds the policy's maximum and the
  upscale cooldown is not restarted (the buffer still waits for it), as for the raise to usage
  (:mod:`dynquota.policy.decide`).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field

__all__ = ["NODE_GROWTH_WINDOW", "DaemonShortfall", "new_grants", "node_growth"]

NODE_GROWTH_WINDOW = 3600.0
"""Seconds a new node counts for the DaemonSets that were there before it."""


@dataclass(frozen=True)
class DaemonShortfall:
    """A DaemonSet short of pods: ``name``, ``created`` (its creationTimestamp, seconds since
    the epoch), ``missing`` (``desiredNumberScheduled - currentNumberScheduled``, > 0) and
    ``pod_charge`` (quota key -> what one of its pods is charged, in the key's units:
    ``pods`` 1, ``requests.cpu`` in millicores, ...)."""

    name: str
    created: float
    missing: int
    pod_charge: Mapping[str, int] = field(default_factory=dict)


def node_growth(
    daemons: Iterable[DaemonShortfall],
    nodes_created: Iterable[float],
    now: float,
    window: float = NODE_GROWTH_WINDOW,
) -> dict[str, int]:
    """The room (quota key -> units beyond usage) the DaemonSet pods of new nodes need in
    one namespace: for each of ``daemons``, ``min(missing, nodes created after it within
    the last window seconds)`` pods, each charged its ``pod_charge``. ``nodes_created``:
    every Node's creationTimestamp (seconds since the epoch); ``now``: seconds since the
    epoch. Empty when no node is new or nothing is short."""
    recent = sorted(t for t in nodes_created if now - window <= t <= now)
    demand: dict[str, int] = {}
    if not recent:
        return demand
    for daemon in daemons:
        after = sum(1 for t in recent if t >= daemon.created)
        pods = min(daemon.missing, after)
        if pods <= 0:
            continue
        for key, per_pod in daemon.pod_charge.items():
            demand[key] = demand.get(key, 0) + pods * per_pod
    return demand


def new_grants(
    daemon: DaemonShortfall,
    nodes: Mapping[str, float],
    granted: Collection[str],
    now: float,
    window: float = NODE_GROWTH_WINDOW,
) -> list[str]:
    """The nodes (names, sorted) ``daemon`` is newly given a pod's room for: created after it
    or in its second (``nodes``: name -> creationTimestamp, seconds since the epoch) within the
    last ``window`` seconds, not in ``granted`` (given before), at most ``daemon.missing``."""
    fresh = sorted(
        name
        for name, created in nodes.items()
        if created >= daemon.created and now - window <= created <= now and name not in granted
    )
    return fresh[: max(daemon.missing, 0)]
