"""Node growth (issue 26), the operator's part built alone: Node events give creation times, a
new Node lists the DaemonSets (the leader only), the short ones of manageable namespaces are
kept with their pods' charge, changed namespaces are queued, and demand() feeds decide()."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from dynquota.operator.daemons import NodeGrowth
from dynquota.testing.wait import async_wait_until

T0 = 1795996800.0  # 2026-11-30T00:00:00Z


def stamp(offset: float) -> str:
    return dt.datetime.fromtimestamp(T0 + offset, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def node(name: str, created: float) -> dict[str, Any]:
    return {"metadata": {"name": name, "creationTimestamp": stamp(created)}}


def daemon_set(ns: str, name: str, created: float, desired: int, current: int,
               cpu: str = "100m") -> dict[str, Any]:  # fmt: skip
    container = {"name": "a", "image": "x", "resources": {"requests": {"cpu": cpu}}}
    return {
        "metadata": {"namespace": ns, "name": name, "creationTimestamp": stamp(created)},
        "spec": {"template": {"spec": {"containers": [container]}}},
        "status": {"desiredNumberScheduled": desired, "currentNumberScheduled": current},
    }


@dataclass
class Lister:
    items: list[dict[str, Any]] = field(default_factory=list)
    calls: int = 0

    async def list_workloads(
        self, kind: str, namespace: str, keep: Callable[[dict[str, Any]], bool] | None = None
    ) -> list[dict[str, Any]]:
        assert (kind, namespace) == ("DaemonSet", "")
        self.calls += 1
        return [i for i in self.items if keep is None or keep(i)]


def growth(lister: Lister, queued: list[str], leading: bool = True, **kw: Any) -> NodeGrowth:
    return NodeGrowth(
        lister,
        queued.append,
        lambda ns: ns != "kube-system",
        lambda: leading,
        lambda ns, key: {"pods": 2, "requests.cpu": 200}.get(key, 0),
        clock=lambda: T0,
        **kw,
    )


async def test_a_new_node_lists_the_daemonsets_and_queues_the_short_namespaces() -> None:
    lister = Lister([
        daemon_set("agents", "log", -86400, desired=5, current=2),
        daemon_set("agents", "calm", -86400, desired=5, current=5),
        daemon_set("kube-system", "proxy", -86400, desired=5, current=2),
    ])  # fmt: skip
    queued: list[str] = []
    g = growth(lister, queued, check_after=(0.0,))
    for i in range(2):
        g.on_node(None, node(f"old-{i}", -86400))
    g.on_nodes_synced()  # nothing recent: no list
    assert lister.calls == 0
    for i in range(3):
        g.on_node("ADDED", node(f"new-{i}", -20))
    await async_wait_until(lambda: queued, "the namespace queued", timeout=5)
    assert queued == ["agents"]  # kube-system is not the operator's
    # status.used when listed (pods 2, requests.cpu 200m) plus the 3 new nodes' pods
    assert g.floor("agents") == {"pods": 5, "count/pods": 3, "requests.cpu": 500, "cpu": 300}
    assert g.floor("kube-system") == {}
    # listed again with nothing changed: nothing queued again
    await g.check()
    assert queued == ["agents"]
    # filled: the floor stays (usage has grown into it), nothing queued
    lister.items[0]["status"]["currentNumberScheduled"] = 5
    await g.check()
    assert queued == ["agents"]
    assert g.floor("agents")["pods"] == 5
    await g.stop()


async def test_each_new_node_is_granted_once_however_often_the_daemonsets_are_listed() -> None:
    """README-only attack: five DaemonSets kept short (created while the quota was full), two
    nodes added: every list re-granted from the grown usage, a quota 10 -> 20 -> 30 -> 39 ->
    45 -> 50 where the rule gives 20. Now each (DaemonSet, node) is granted once; a later
    node adds its own share; a relist (apiserver restart) adds nothing."""
    lister = Lister([daemon_set("a", f"d{i}", -86400, desired=12, current=0) for i in range(5)])
    queued: list[str] = []
    used = {"pods": 10}
    g = NodeGrowth(lister, queued.append, lambda ns: True, lambda: True,
                   lambda ns, key: used.get(key, 0), clock=lambda: T0,
                   check_after=())  # fmt: skip
    g.on_nodes_synced()
    g.on_node("ADDED", node("n-0", -30))
    g.on_node("ADDED", node("n-1", -30))
    await g.check()
    assert g.floor("a")["pods"] == 20  # 10 + 5 DaemonSets x 2 nodes
    for grown in (20, 30, 39):  # the controllers spent the room; still short
        used["pods"] = grown
        await g.check()
        assert g.floor("a")["pods"] == 20
    g.on_node("ADDED", node("n-2", -10))
    await g.check()
    assert g.floor("a")["pods"] == 25  # the new node's five pods only
    g.on_nodes_synced()  # a relist after an apiserver restart
    await g.check()
    assert g.floor("a")["pods"] == 25
    assert queued == ["a", "a"]


async def test_the_floor_ends_with_the_window() -> None:
    lister = Lister([daemon_set("a", "d", -86400, desired=3, current=1)])
    now = [T0]
    g = NodeGrowth(lister, [].append, lambda ns: True, lambda: True, lambda ns, key: 1,
                   clock=lambda: now[0], check_after=())  # fmt: skip
    g.on_node(None, node("n-0", -10))
    await g.check()
    assert g.floor("a")["pods"] == 2
    now[0] = T0 + 3600
    assert g.floor("a") == {}


async def test_only_the_leader_lists_and_off_is_off() -> None:
    lister = Lister([daemon_set("agents", "log", -86400, desired=5, current=2)])
    queued: list[str] = []
    await growth(lister, queued, leading=False).check()
    assert lister.calls == 0
    off = growth(lister, queued, enabled=False)
    off.on_nodes_synced()
    off.on_node("ADDED", node("new", -5))
    await off.check()
    assert lister.calls == 0
    assert off.floor("agents") == {}


async def test_a_node_created_while_the_operator_was_away_is_looked_at_after_the_sync() -> None:
    lister = Lister([daemon_set("agents", "log", -86400, desired=3, current=1)])
    queued: list[str] = []
    g = growth(lister, queued, check_after=(0.0,))
    g.on_node(None, node("new-0", -600))
    g.on_node(None, node("new-1", -600))
    g.on_nodes_synced()
    await async_wait_until(lambda: queued, "the namespace queued", timeout=5)
    assert g.floor("agents")["pods"] == 4  # usage 2 + 2 new nodes
    g.on_node("DELETED", node("new-1", -600))  # what was granted stays granted
    await g.check()
    assert g.floor("agents")["pods"] == 4
    await g.stop()
