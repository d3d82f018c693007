"""The tenant projections' writer (issue 28, part 3) on the real ``Operator`` with fake I/O:
what it writes, when it writes nothing, the gate, deletes, the kill switch."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dynquota._k8s.errors import ConflictError
from dynquota.kube.applied import AppliedObject
from dynquota.operator.applied import RELIST_SECONDS, AppliedWriter
from dynquota.policy.applied import FIGURES_REFRESH

from .fakes import World, budget, namespace, policy


class FakeStore:
    def __init__(self) -> None:
        self.objects: dict[str, AppliedObject] = {}
        self.calls: list[tuple[str, str]] = []
        self.conflict_next = False
        self._rv = 0

    def _stored(self, ns: str, status: Mapping[str, Any]) -> AppliedObject:
        self._rv += 1
        obj = AppliedObject(ns, f"uid-{ns}", str(self._rv), dict(status))
        self.objects[ns] = obj
        return obj

    async def list_managed(self) -> list[AppliedObject]:
        self.calls.append(("list", ""))
        return list(self.objects.values())

    async def create(self, namespace: str, status: Mapping[str, Any]) -> AppliedObject:
        self.calls.append(("create", namespace))
        return self._stored(namespace, status)

    async def replace(
        self, namespace: str, status: Mapping[str, Any], resource_version: str
    ) -> AppliedObject:
        self.calls.append(("replace", namespace))
        if self.conflict_next or self.objects[namespace].resource_version != resource_version:
            self.conflict_next = False
            raise ConflictError(409, "Conflict", "the object has been modified")
        return self._stored(namespace, status)

    async def delete(self, namespace: str, uid: str) -> bool:
        self.calls.append(("delete", namespace))
        return self.objects.pop(namespace, None) is not None


def wired(world: World, **kw: Any) -> tuple[AppliedWriter, FakeStore]:
    store = FakeStore()
    op = world.op
    writer = AppliedWriter(
        store,
        settings=op.settings,
        namespaces=op.cluster.namespaces,
        governance=op.cluster.governance,
        switch=op.switch.state,
        budgets=op.budgets,
        leader=op.gate,
        write_gate=op.write_gate,
        clock=op.clock,
        writes_per_second=1000,
        **kw,
    )
    op.reporter.on_reported = writer.observe
    op.budgets.on_status = writer.budget_status
    op.on_policy_spec = writer.policies_changed  # as the runtime wires it
    return writer, store


async def test_a_managed_namespace_gets_its_projection_once_and_nothing_at_rest() -> None:
    world = World()
    writer, store = wired(world)
    world.op.on_policy(None, policy())
    world.op.on_namespace(None, namespace("team-a"))
    world.usage.counts[("team-a", "pods")] = 14
    assert await writer.sync() == 0  # not reconciled yet: nothing known of its quota
    await world.reconcile("team-a")
    assert await writer.sync() == 1
    status = store.objects["team-a"].status
    assert status["state"] == "Enforced"
    assert status["asOf"] == "2027-01-15T08:00:00Z"
    assert status["policy"]["name"] == "p"
    assert status["policy"]["resources"]["pods"] == {
        "minimum": "10",
        "maximum": "100",
        "bufferPercent": 40,
        "upscaleCooldown": "1m",
        "downscaleCooldown": "5m",
        "nextRaiseAfter": "2027-01-15T08:01:00Z",  # created at T0 + the 60 s up-cooldown
    }
    assert status["policy"]["override"] == {"allowed": True, "ttl": "168h", "minInterval": "0s"}
    assert "budget" not in status
    # at rest: the clock moves, the namespace is decided again, nothing is written
    world.clock.now += 3600
    await world.reconcile("team-a")
    assert await writer.sync() == 0
    assert [c for c in store.calls if c[0] != "list"] == [("create", "team-a")]


async def test_a_policy_change_is_written_at_once_and_an_opt_out_deletes() -> None:
    world = World()
    writer, store = wired(world)
    world.op.on_policy(None, policy())
    world.op.on_namespace(None, namespace("team-a"))
    await world.reconcile("team-a")
    await writer.sync()
    raised = {"bufferPercent": 40, "minimum": 10, "maximum": 500, "upscaleCooldown": "60s",
              "downscaleCooldown": "300s"}  # fmt: skip
    writer._wake.clear()  # what run() does before a pass
    world.op.on_policy(None, policy(pods=raised, generation=2))
    # a pass soon, whether or not the reconcile writes the quota (writeRate: it does not)
    assert writer.woken
    await world.reconcile("team-a")
    assert await writer.sync() == 1
    assert store.objects["team-a"].status["policy"]["resources"]["pods"]["maximum"] == "500"
    world.op.on_namespace(None, namespace("team-a", {"dynquota.io/managed": "false"}, rv=2))
    assert await writer.sync() == 1
    assert "team-a" not in store.objects
    assert store.calls[-1] == ("delete", "team-a")
    # a namespace being deleted takes its object along: no delete of ours
    world.op.on_namespace(None, namespace("team-b"))
    await world.reconcile("team-b")
    assert await writer.sync() == 1
    terminating = namespace("team-b", rv=2)
    terminating["metadata"]["deletionTimestamp"] = "2027-01-15T08:00:00Z"
    world.op.on_namespace(None, terminating)
    assert await writer.sync() == 0
    assert store.calls[-1] == ("create", "team-b")


async def test_budget_figures_alone_wait_for_the_refresh_but_the_slice_does_not() -> None:
    world = World()
    writer, store = wired(world)
    world.op.on_policy(None, policy())
    world.op.on_namespace(None, namespace("team-a", {"dynquota.io/budget": "team"}))
    record = budget("team", {"pods": 60})
    record["status"] = {"used": {"pods": "10"}, "granted": {"pods": "20"}, "free": {"pods": "40"},
                        "namespaces": {"team-a": {}}}  # fmt: skip
    world.op.budgets.on_budget(None, record)
    await world.reconcile("team-a")
    await writer.sync()
    shown = store.objects["team-a"].status["budget"]
    assert shown["name"] == "team"
    assert shown["hard"] == {"pods": "60"}
    assert (shown["used"], shown["free"]) == ({"pods": "10"}, {"pods": "40"})
    assert shown["figuresAsOf"] == "2027-01-15T08:00:00Z"
    record["status"] = {"used": {"pods": "12"}, "granted": {"pods": "20"}, "free": {"pods": "40"},
                        "namespaces": {"team-a": {}}}  # fmt: skip
    world.op.budgets.on_budget("MODIFIED", record)
    world.clock.now += FIGURES_REFRESH - 1
    assert await writer.sync() == 0  # figures alone: not yet
    world.clock.now += 1
    assert await writer.sync() == 1
    assert store.objects["team-a"].status["budget"]["used"] == {"pods": "12"}


async def test_nothing_is_written_without_the_gate_and_a_conflict_lists_again() -> None:
    world = World()
    writer, store = wired(world)
    world.op.on_policy(None, policy())
    world.op.on_namespace(None, namespace("team-a"))
    await world.reconcile("team-a")
    world.leader.is_leader = False  # not the leader: no write, and a new term lists again
    assert await writer.sync() == 0
    assert store.calls == []
    world.leader.is_leader = True
    assert await writer.sync() == 1
    world.op.switch.state.engaged = True  # a change, but a conflict: listed again at the next pass
    store.conflict_next = True
    assert await writer.sync() == 0
    assert await writer.sync() == 1
    assert [c[0] for c in store.calls] == ["list", "create", "replace", "list", "replace"]
    status = store.objects["team-a"].status
    assert status["state"] == "KillSwitchEngaged"
    assert "nextRaiseAfter" not in status["policy"]["resources"]["pods"]


async def test_an_edit_by_someone_else_is_restored_at_the_next_list(caplog: Any) -> None:
    """An admin forges the policy maximum; the next LIST (RELIST_SECONDS later) restores it."""
    world = World()
    steady = [0.0]
    writer, store = wired(world, monotonic=lambda: steady[0])
    world.op.on_policy(None, policy())
    world.op.on_namespace(None, namespace("team-a"))
    await world.reconcile("team-a")
    assert await writer.sync() == 1
    forged = dict(store.objects["team-a"].status)
    forged["policy"] = {**forged["policy"], "resources": {"pods": {"maximum": "9999"}}}
    store._stored("team-a", forged)
    steady[0] = RELIST_SECONDS - 1
    assert await writer.sync() == 0  # not listed yet: unseen
    steady[0] = RELIST_SECONDS
    assert await writer.sync() == 1
    assert store.objects["team-a"].status["policy"]["resources"]["pods"]["maximum"] == "100"
    assert "changed by someone else (resourceVersion 2, ours 1): restored" in caplog.text


async def test_joining_a_budget_shows_its_figures_once_they_count_the_joiner() -> None:
    """Issue 30 follow-up, finding D: a namespace labelled into a budget got the budget's
    figures of before it joined, and the ones counting it only after FIGURES_REFRESH (5 min)."""
    world = World()
    writer, store = wired(world)
    world.op.on_policy(None, policy())
    world.op.on_namespace(None, namespace("team-a"))
    record = budget("team", {"pods": 60})
    before = {"used": {"pods": "10"}, "granted": {"pods": "20"}, "free": {"pods": "40"}}
    record["status"] = {**before, "namespaces": {"team-b": {"grant": {"pods": "20"}}}}
    world.op.budgets.on_budget(None, record)
    await world.reconcile("team-a")
    assert await writer.sync() == 1
    assert "budget" not in store.objects["team-a"].status
    writer._wake.clear()  # (the task's loop clears it)
    # labelled into the budget: its reconcile says so, and the pass writes it at once
    world.op.on_namespace("MODIFIED", namespace("team-a", {"dynquota.io/budget": "team"}, rv=2))
    await world.reconcile("team-a")
    assert writer.woken
    assert await writer.sync() == 1
    shown = store.objects["team-a"].status["budget"]
    assert (shown["name"], shown["used"]) == ("team", {"pods": "10"})  # not counting it yet
    # the budget's pass counts it: its status change wakes the writer, the figures go at once
    world.clock.now += 2
    counted = {"used": {"pods": "14"}, "granted": {"pods": "34"}, "free": {"pods": "26"}}
    record["status"] = {**counted, "namespaces": {"team-a": {}, "team-b": {}}}
    writer._wake.clear()
    world.op.budgets.on_budget("MODIFIED", record)
    assert writer.woken
    assert await writer.sync() == 1
    shown = store.objects["team-a"].status["budget"]
    assert (shown["used"], shown["granted"], shown["free"]) == (
        counted["used"], counted["granted"], counted["free"],
    )  # fmt: skip
    assert shown["figuresAsOf"] == "2027-01-15T08:00:02Z"
    # from now on its figures alone wait for the refresh, as every member's
    record["status"] = {**counted, "used": {"pods": "15"}, "namespaces": {"team-a": {}}}
    world.op.budgets.on_budget("MODIFIED", record)
    assert await writer.sync() == 0


async def test_a_foreign_quota_is_shown_as_not_dynquotas_not_enforced() -> None:
    """README-only attack (issue 30, LOW-5): the managed quota of a budget member lost its
    managed-by label; ``dynquota status`` still said Enforced with the old slice. It says the
    quota is not dynquota's, why, and that neither the policy nor the budget is enforced."""
    from dynquota.cli.status import status_text

    world = World()
    writer, store = wired(world)
    world.op.on_policy(None, policy())
    world.op.on_namespace(None, namespace("team-a", {"dynquota.io/budget": "team"}))
    world.op.budgets.on_budget(None, budget("team", {"pods": 60}))
    world.usage.counts[("team-a", "pods")] = 4
    await world.reconcile("team-a")
    await world.op.budget_tasks.run_pass("team")
    world.quotas.objects["team-a"]["status"]["hard"] = dict(world.quotas.hard("team-a"))
    await world.reconcile("team-a")
    await writer.sync()
    assert store.objects["team-a"].status["state"] == "Enforced"
    assert store.objects["team-a"].status["budget"]["slice"] == {"pods": "10"}
    # someone removes the managed-by label: the quota is not dynquota's any more
    taken = world.quotas.objects["team-a"]
    del taken["metadata"]["labels"]["app.kubernetes.io/managed-by"]
    world.op.on_quota("MODIFIED", taken)
    await world.reconcile("team-a")
    assert await writer.sync() == 1
    shown = store.objects["team-a"].status
    assert (shown["state"], shown["message"]) == (
        "Foreign",
        "the ResourceQuota dynquota in this namespace is not dynquota's (its label "
        "app.kubernetes.io/managed-by=dynquota is missing: removed, or never set): dynquota "
        "leaves it alone, so policy p sizes nothing here and this namespace's slice of "
        "QuotaBudget team is not enforced by dynquota; its limits are whatever its owner wrote "
        "(kubectl -n team-a get resourcequota dynquota). For dynquota to size it again, the "
        "platform team deletes that quota",
    )
    assert "slice" not in shown["budget"]
    text = status_text({"metadata": {"namespace": "team-a"}, "status": shown})
    assert text.splitlines()[1] == "state: Foreign (as of 2027-01-15T08:00:00Z)"
