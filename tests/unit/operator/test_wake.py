"""The waker (issue 26), built alone with a fake workload store: a raise of a key pods are
charged to wakes each refused ReplicaSet (and each StatefulSet, DaemonSet and Job short of
pods) once, through the write gate; nothing at rest."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from dynquota._k8s.errors import ConflictError, ForbiddenError
from dynquota.metrics import Metrics
from dynquota.operator.ports import HELD_LEASE
from dynquota.operator.wake import SWEEP_TOGETHER, Waker
from dynquota.operator.write_gate import Write
from dynquota.testing.wait import async_wait_until

FAILED = {"type": "ReplicaFailure", "status": "True", "reason": "FailedCreate"}


def rs(name: str, wanted: int, have: int, refused: bool = True, rv: str = "5") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "resourceVersion": rv},
        "spec": {"replicas": wanted},
        "status": {"replicas": have, "conditions": [FAILED] if refused else []},
    }


@dataclass
class Store:
    """ReplicaSets ``items`` (every namespace the same), other kinds in ``others`` (objects
    carry their namespace); ``marks``: (namespace, name, stamp, rv) of ReplicaSets, ``kinds``:
    (kind, namespace, name) of every mark; ``lists``: (kind, namespace) of every LIST."""

    items: list[dict[str, Any]] = field(default_factory=list)
    others: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    calls: list[tuple[str, str]] = field(default_factory=list)
    marks: list[tuple[str, str, str, str]] = field(default_factory=list)
    kinds: list[tuple[str, str, str]] = field(default_factory=list)
    conflict: set[str] = field(default_factory=set)
    forbidden: set[str] = field(default_factory=set)

    @property
    def lists(self) -> int:
        return len(self.calls)

    async def list_workloads(
        self, kind: str, namespace: str, keep: Callable[[dict[str, Any]], bool] | None = None
    ) -> list[dict[str, Any]]:
        self.calls.append((kind, namespace))
        items = self.items if kind == "ReplicaSet" else self.others.get(kind, [])
        if namespace:
            items = [i for i in items if i["metadata"].get("namespace", namespace) == namespace]
        return [i for i in items if keep is None or keep(i)]

    async def wake_workload(
        self, kind: str, namespace: str, name: str, stamp: str, resource_version: str
    ) -> None:
        if name in self.conflict:
            raise ConflictError(409, "changed")
        if name in self.forbidden:
            raise ForbiddenError(403, "a webhook changed the template")
        self.kinds.append((kind, namespace, name))
        if kind == "ReplicaSet":
            self.marks.append((namespace, name, stamp, resource_version))


@dataclass
class Gate:
    held: str | None = None
    asked: list[Write] = field(default_factory=list)

    def hold(self, write: Write) -> str | None:
        self.asked.append(write)
        return self.held


def waker(store: Store, gate: Gate, reports: list[Any], **kw: Any) -> Waker:
    async def report(namespace: str, names: list[str], why: str) -> None:
        reports.append((namespace, names, why))

    return Waker(store, gate, Metrics(), report, qps=1000, **kw)  # type: ignore[arg-type]


def wakes(w: Waker) -> float:
    return w.metrics.registry.get_sample_value("dynquota_wakes_total", {"kind": "ReplicaSet"}) or 0


async def test_a_raise_wakes_each_refused_replica_set_once() -> None:
    store = Store([rs("web", 60, 56), rs("api", 3, 3), rs("old", 0, 0), rs("job", 5, 2, False)])
    gate, reports = Gate(), []
    w = waker(store, gate, reports)
    assert await w.wake("team", "101", "pods 56->79") == ["ReplicaSet/web"]
    assert store.marks == [("team", "web", "101", "5")]
    assert reports == [("team", ["ReplicaSet/web"], "pods 56->79")]
    assert wakes(w) == 1
    # the same raise again (a duplicate event): nothing is written
    assert await w.wake("team", "101", "pods 56->79") == []
    assert len(store.marks) == 1
    # the next raise wakes it again, with the new raise's mark
    assert await w.wake("team", "140", "pods 79->100") == ["ReplicaSet/web"]
    assert store.marks[-1] == ("team", "web", "140", "5")
    assert {g.kind for g in gate.asked} == {"wake"}


async def test_observe_starts_a_pass_only_for_a_raise_of_a_key_pods_are_charged_to() -> None:
    store = Store([rs("web", 60, 56)])
    w = waker(store, Gate(), [])
    # first seen (a start): full, so no refused create can have room
    assert w.observe("team", None, {"pods": "20"}, "1", {"pods": "20"}) is False
    assert w.observe("team", {"pods": "20"}, {"pods": "20"}, "2") is False  # at rest
    assert w.observe("team", {"pods": "20"}, {"pods": "14"}, "3") is False  # a shrink
    assert w.observe("team", {"configmaps": "5"}, {"configmaps": "9"}, "4") is False
    assert store.lists == 0
    assert w.observe("team", {"pods": "20"}, {"pods": "28"}, "5") is True
    await w.stop()


async def test_the_gate_holds_the_marks_and_a_conflict_skips_one() -> None:
    store = Store([rs("a", 2, 1), rs("b", 2, 1)], conflict={"a"})
    gate = Gate(held=HELD_LEASE)
    w = waker(store, gate, reports := [])
    assert await w.wake("team", "9", "pods 1->2") is None  # held: to be tried again
    assert store.marks == []
    assert (
        w.metrics.registry.get_sample_value("dynquota_writes_held_total", {"reason": HELD_LEASE})
        == 1
    )
    gate.held = None
    # a: changed since the list (409): its controller was re-queued by that change
    assert await w.wake("team", "9", "pods 1->2") == ["ReplicaSet/b"]
    assert reports == [("team", ["ReplicaSet/b"], "pods 1->2")]


async def test_off_lists_nothing() -> None:
    store = Store([rs("web", 60, 56)])
    w = waker(store, Gate(), [], enabled=False)
    assert w.observe("team", {"pods": "20"}, {"pods": "28"}, "5") is False
    assert store.lists == 0


async def test_a_raise_unseen_by_this_leader_is_woken_where_there_is_room() -> None:
    """README-only attack: the operator killed between its raise and the wake left the
    ReplicaSet to its backoff for good. The first sight of a quota after a start or a leader
    change (an event or the sweep) starts a pass where a key pods are charged to has room."""
    store = Store([rs("web", 100, 14)])
    reports: list[Any] = []
    w = waker(store, Gate(), reports)

    class Quota:
        namespace, resource_version = "team", "77"
        status_hard, status_used = {"pods": "20", "configmaps": "9"}, {"pods": "14"}

    assert w.sweep([Quota()]) == 1
    await async_wait_until(lambda: store.marks, "the mark", timeout=5)
    assert store.marks == [("team", "web", "77", "5")]
    assert reports[0][2] == "after a restart or a leader change: pods used 14 of 20"
    assert w.sweep([Quota()]) == 0  # seen: the next raise's event decides
    w.reset()  # leadership lost, then gained again: unseen again
    assert w.sweep([Quota()]) == 1
    await w.stop()


@pytest.mark.loop_clock  # the retry's backoff takes no wall time
async def test_a_held_pass_is_tried_again() -> None:
    store = Store([rs("web", 60, 56)])
    gate = Gate(held=HELD_LEASE)
    w = waker(store, gate, [])
    w.observe("team", {"pods": "20"}, {"pods": "20"}, "1")  # seen
    assert w.observe("team", {"pods": "20"}, {"pods": "28"}, "2") is True
    await async_wait_until(lambda: store.lists >= 1, "the first try", timeout=5)
    gate.held = None  # the Lease renewed
    await async_wait_until(lambda: store.marks, "the retry's mark", timeout=5)
    assert store.marks == [("team", "web", "2", "5")]
    await w.stop()


async def test_a_deleted_namespace_is_forgotten_by_the_operators_waker() -> None:
    """The operator's namespace DELETED reaches the waker (its per-namespace state would
    otherwise grow with every namespace ever seen)."""
    from .fakes import World, namespace

    world = World()
    store = Store([rs("web", 60, 56)])
    world.op.waker = waker(store, Gate(), [])
    world.op.on_namespace(None, namespace("team-a"))
    world.op.waker.observe("team-a", {"pods": "20"}, {"pods": "20"}, "1")
    assert "team-a" in world.op.waker._seen
    world.op.on_namespace("DELETED", namespace("team-a"))
    assert "team-a" not in world.op.waker._seen


def sts(name: str, wanted: int, have: int, ns: str = "team") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": ns, "resourceVersion": "7"},
            "spec": {"replicas": wanted}, "status": {"replicas": have}}  # fmt: skip


def ds(name: str, desired: int, current: int, ns: str = "team") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": ns, "resourceVersion": "8"}, "spec": {},
            "status": {"desiredNumberScheduled": desired,
                       "currentNumberScheduled": current}}  # fmt: skip


def job(
    name: str, parallelism: int, active: int, ns: str = "team", succeeded: int = 0, **spec: Any
) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": ns, "resourceVersion": "9"},
            "spec": {"parallelism": parallelism, **spec},
            "status": {"active": active, "succeeded": succeeded}}  # fmt: skip


async def test_statefulsets_daemonsets_and_jobs_short_of_pods_are_woken_too() -> None:
    store = Store(
        [rs("web", 5, 2)],
        {
            "StatefulSet": [sts("db", 3, 1), sts("cache", 2, 2)],
            "DaemonSet": [ds("agent", 30, 10), ds("calm", 3, 3)],
            "Job": [
                job("batch", 8, 4),
                job("done", 2, 0, completions=2, succeeded=2),
                job("held", 3, 0, suspend=True),
            ],
        },
    )
    w = waker(store, Gate(), reports := [])
    marked = await w.wake("team", "50", "pods 10->14")
    assert marked == ["ReplicaSet/web", "StatefulSet/db", "DaemonSet/agent", "Job/batch"]
    assert [k for k, _ in store.calls] == ["ReplicaSet", "StatefulSet", "DaemonSet", "Job"]
    assert reports == [("team", marked, "pods 10->14")]
    for kind in ("ReplicaSet", "StatefulSet", "DaemonSet", "Job"):
        value = w.metrics.registry.get_sample_value("dynquota_wakes_total", {"kind": kind})
        assert value == 1, kind


async def test_a_policy_with_wake_false_wakes_nothing_in_its_namespaces() -> None:
    store = Store([rs("web", 60, 56)])
    w = waker(store, Gate(), [], allowed=lambda ns: ns != "quiet")
    w.observe("quiet", {"pods": "20"}, {"pods": "20"}, "1")
    assert w.observe("quiet", {"pods": "20"}, {"pods": "28"}, "2") is False
    assert store.lists == 0
    w.observe("team", {"pods": "20"}, {"pods": "20"}, "1")
    assert w.observe("team", {"pods": "20"}, {"pods": "28"}, "2") is True
    await w.stop()


async def test_a_mark_the_policy_refuses_is_not_tried_again_for_that_raise() -> None:
    """A mutating webhook that rewrites the template on every update makes the wake change
    more than the mark: the chart's policy refuses it (403). The pass goes on with the others
    and does not retry the refused one for the same raise."""
    store = Store([rs("mutated", 4, 1), rs("plain", 4, 1)], forbidden={"mutated"})
    w = waker(store, Gate(), [])
    assert await w.wake("team", "60", "pods 1->4") == ["ReplicaSet/plain"]
    assert await w.wake("team", "60", "pods 1->4") == []
    assert [name for _, _, name in store.kinds] == ["plain"]


async def test_a_sweep_of_many_namespaces_lists_each_kind_once_across_the_cluster() -> None:
    """After a start, a sweep of more than SWEEP_TOGETHER namespaces with room: one LIST per
    kind across the cluster (not four per namespace), marks in the swept namespaces only, one
    Event per namespace."""
    count = SWEEP_TOGETHER + 2
    spaces = [f"t{i}" for i in range(count)]
    store = Store(
        [],
        {"StatefulSet": [sts("db", 3, 1, ns) for ns in spaces] + [sts("db", 3, 1, "elsewhere")],
         "Job": [job("batch", 2, 1, "t0")]},
    )  # fmt: skip
    w = waker(store, Gate(), reports := [])

    class Quota:
        def __init__(self, namespace: str) -> None:
            self.namespace, self.resource_version = namespace, "90"
            self.status_hard, self.status_used = {"pods": "20"}, {"pods": "14"}

    assert w.sweep([Quota(ns) for ns in spaces]) == count
    await async_wait_until(lambda: len(reports) == count, "an Event per namespace", timeout=5)
    assert store.calls == [("ReplicaSet", ""), ("StatefulSet", ""), ("DaemonSet", ""),
                           ("Job", "")]  # fmt: skip
    assert sorted((ns, name) for _, ns, name in store.kinds) == sorted(
        [(ns, "db") for ns in spaces] + [("t0", "batch")]
    )
    assert dict((r[0], r[1]) for r in reports)["t0"] == ["StatefulSet/db", "Job/batch"]
    await w.stop()
