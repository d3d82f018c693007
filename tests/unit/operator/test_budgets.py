"""Tenant budgets on the operator side (issue #13) against fakes at the kube/ ports: the
reconcile hands a budgeted key over as demand, a pass writes shrinks before grows and grows
only into observed room, conflicts and frozen namespaces write nothing."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from dynquota._k8s.errors import (
    ConflictError,
    ForbiddenError,
    NotOwnedError,
    RetryConflictError,
)
from dynquota.operator.budgets import read_budget
from dynquota.policy import Decision

from .test_reconcile import World, namespace, policy

PODS = {
    "bufferPercent": 50,
    "minimum": 2,
    "maximum": 100,
    "upscaleCooldown": "0s",
    "downscaleCooldown": "1h",
}


class FakeBudgetStatus:
    def __init__(self) -> None:
        self.patches: list[tuple[str, dict[str, Any]]] = []

    async def patch_budget_status(self, name: str, status: Mapping[str, Any]) -> None:
        self.patches.append((name, dict(status)))


def budget(name: str, selector: dict[str, str], hard: dict[str, Any]) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "uid": f"uid-{name}", "generation": 1},
        "spec": {"namespaceSelector": {"matchLabels": selector}, "hard": hard},
    }


@pytest.fixture
def world() -> World:
    w = World()
    w.op.budget_status = FakeBudgetStatus()
    w.op.on_policy(None, policy(pods=PODS))
    return w


def member(world: World, ns: str, pods: int, labels: dict[str, str] | None = None) -> None:
    world.op.on_namespace(None, namespace(ns, labels or {"tenant": "t"}))
    world.usage.counts[(ns, "pods")] = pods


def status(world: World) -> dict[str, Any]:
    fake = world.op.budget_status
    assert isinstance(fake, FakeBudgetStatus)
    return fake.patches[-1][1]


async def test_the_reconcile_hands_a_budgeted_key_over_and_the_pass_writes_it(
    world: World,
) -> None:
    world.op.budgets.on_budget(None, budget("b", {"tenant": "t"}, {"pods": 30}))
    member(world, "team-a", pods=14)
    await world.reconcile("team-a")
    # created without the budgeted key; its target (ceil(14 * 1.5) = 21) is the demand
    assert world.quotas.hard("team-a") == {"configmaps": "50"}
    assert "dynquota.io/hard.pods" not in world.quotas.annotations("team-a")
    assert world.op.budgets.demand == {"team-a": {"pods": 21}}
    result = await world.op.budget_tasks.run_pass("b")
    assert result.writes == {"team-a": {"pods": 21}}  # a bounding write, within the budget
    assert world.quotas.hard("team-a") == {"configmaps": "50", "pods": "21"}
    annotations = world.quotas.annotations("team-a")
    assert annotations["dynquota.io/hard.pods"] == "21"
    # the budget's write is not taken for a manual edit: the reconcile writes nothing now
    writes = list(world.quotas.writes)
    world.quotas.objects["team-a"]["status"]["hard"]["pods"] = "21"
    await world.reconcile("team-a")
    assert world.quotas.writes == writes
    assert "ManualEditReverted" not in world.events.reasons("team-a")
    assert status(world)["granted"] == {"pods": "21"}
    assert status(world)["free"] == {"pods": "9"}


async def test_a_pass_shrinks_first_and_grows_only_into_room_the_controller_showed(
    world: World,
) -> None:
    world.op.budgets.on_budget(None, budget("b", {"tenant": "t"}, {"pods": 30}))
    member(world, "a", pods=5)
    member(world, "b", pods=10)
    world.quotas.put("a", {"pods": "20"}, annotations={"dynquota.io/hard.pods": "20"})
    world.quotas.put("b", {"pods": "10"}, annotations={"dynquota.io/hard.pods": "10"})
    world.op.budgets.demand.update({"a": {"pods": 8}, "b": {"pods": 15}})
    first = await world.op.budget_tasks.run_pass("b")
    assert first.writes == {"a": {"pods": 8}}  # room 30 - (20 + 10) = 0: b waits
    assert world.quotas.hard("a")["pods"] == "8"
    assert world.quotas.hard("b")["pods"] == "10"
    again = await world.op.budget_tasks.run_pass("b")
    assert again.writes == {}  # the shrink is not in status.hard yet: still no room
    rebalancing = next(c for c in status(world)["conditions"] if c["type"] == "Rebalancing")
    assert rebalancing["reason"] == "WaitingForQuotaController"
    assert "room from the shrinks of a is not in status.hard yet" in rebalancing["message"]
    world.quotas.objects["a"]["status"]["hard"]["pods"] = "8"  # the controller's copy
    third = await world.op.budget_tasks.run_pass("b")
    assert third.writes == {"b": {"pods": 15}}
    annotations = world.quotas.annotations("b")
    assert annotations["dynquota.io/hard.pods"] == "15"
    assert annotations["dynquota.io/last-upscale.pods"] == "2027-01-15T08:00:00Z"


async def test_a_conflict_ends_the_pass_and_asks_for_another_at_once(world: World) -> None:
    world.op.budgets.on_budget(None, budget("b", {"tenant": "t"}, {"pods": 30}))
    member(world, "a", pods=5)
    world.quotas.put("a", {"pods": "20"}, annotations={"dynquota.io/hard.pods": "20"})
    world.op.budgets.demand["a"] = {"pods": 8}
    world.quotas.fail.append(ConflictError(409, "Conflict", "modified"))
    result = await world.op.budget_tasks.run_pass("b")
    assert result.writes == {}
    assert result.again == 0.0
    assert world.quotas.hard("a")["pods"] == "20"


async def test_a_namespace_in_two_budgets_is_frozen_and_reported(world: World) -> None:
    world.op.budgets.on_budget(None, budget("one", {"tenant": "t"}, {"pods": 30}))
    world.op.budgets.on_budget(None, budget("two", {"team": "x"}, {"pods": 50}))
    member(world, "a", pods=14, labels={"tenant": "t", "team": "x"})
    world.quotas.put("a", {"pods": "10", "configmaps": "50"})
    await world.reconcile("a")
    assert world.quotas.hard("a")["pods"] == "10"  # frozen: usage 14 would ask for 21
    assert world.op.budgets.demand == {}
    result = await world.op.budget_tasks.run_pass("one")
    assert result.writes == {}
    valid = next(c for c in status(world)["conditions"] if c["type"] == "Valid")
    assert (valid["status"], valid["reason"]) == ("False", "NamespaceConflict")
    assert status(world)["frozenNamespaces"] == ["a"]
    assert "BudgetConflict" in world.events.reasons("one")


async def test_a_pass_lists_only_its_own_quotas_once_every_member_carries_its_label(
    world: World,
) -> None:
    """The first pass LISTs every managed quota; its slice writes label the members'
    quotas, so later passes LIST only ``dynquota.io/budget=b``; a member whose quota lost the
    label (re-created, edited) makes that pass LIST everything again, once."""
    world.op.budgets.on_budget(None, budget("b", {"tenant": "t"}, {"pods": 30}))
    member(world, "a", pods=5)
    member(world, "c", pods=4)
    world.quotas.put("a", {"pods": "20", "configmaps": "50"})
    world.quotas.put("c", {"pods": "6", "configmaps": "50"})
    world.quotas.put("elsewhere", {"pods": "9", "configmaps": "50"})
    world.op.budgets.demand.update({"a": {"pods": 8}, "c": {"pods": 6}})
    own = "dynquota.io/budget=b"
    first = await world.op.budget_tasks.run_pass("b")
    assert world.quotas.selectors == [None]  # nothing known yet: every managed quota
    assert first.writes == {"a": {"pods": 8}}  # c keeps 6: a label-only write
    assert world.quotas.objects["a"]["metadata"]["labels"]["dynquota.io/budget"] == "b"
    assert world.quotas.objects["c"]["metadata"]["labels"]["dynquota.io/budget"] == "b"
    assert "dynquota.io/budget" not in world.quotas.annotations("a")  # not enforced yet
    world.quotas.objects["a"]["status"]["hard"]["pods"] = "8"  # the controller's copy
    await world.op.budget_tasks.run_pass("b")
    assert world.quotas.selectors == [None, own]
    assert world.quotas.annotations("a")["dynquota.io/budget"] == "b"  # marked, enforced
    writes = len(world.quotas.writes)
    await world.op.budget_tasks.run_pass("b")
    assert world.quotas.selectors == [None, own, own]
    assert len(world.quotas.writes) == writes  # nothing at rest
    del world.quotas.objects["c"]["metadata"]["labels"]["dynquota.io/budget"]
    await world.op.budget_tasks.run_pass("b")
    assert world.quotas.selectors == [None, own, own, own, None]  # c missing: all, once
    assert world.quotas.objects["c"]["metadata"]["labels"]["dynquota.io/budget"] == "b"
    await world.op.budget_tasks.run_pass("b")
    assert world.quotas.selectors[-1] == own


async def test_writes_wait_for_the_budgets_to_be_listed(world: World) -> None:
    world.op.budgets.listed = False
    member(world, "a", pods=3)
    outcome = await world.reconcile("a")
    assert outcome.retry is True
    assert world.quotas.writes == []


def test_an_invalid_budget_keeps_its_selector_and_keys_to_freeze() -> None:
    record = read_budget(budget("bad", {"tenant": "t"}, {"pods": "5k", "secrets": 3}))
    assert record.spec is None
    assert "pods" in record.error
    assert record.keys == frozenset({"pods", "secrets"})
    assert record.selector is not None
    assert record.selector.matches({"tenant": "t"})


async def test_the_kill_switch_holds_every_pass_and_its_deletes_pass_unchanged(
    world: World,
) -> None:
    world.op.budgets.on_budget(None, budget("b", {"tenant": "t"}, {"pods": 30}))
    member(world, "a", pods=5)
    world.quotas.put("a", {"pods": "20", "configmaps": "50"})
    world.op.budgets.demand["a"] = {"pods": 8}
    world.op.kill_switch = True
    result = await world.op.budget_tasks.run_pass("b")
    assert (result.writes, result.again) == ({}, 1.0)
    assert world.quotas.hard("a")["pods"] == "20"
    delete = Decision("delete")
    assert world.op.budgets.shape("a", delete, None) is delete


class FakeAdmission:
    """The budgets' policies and bindings (``BudgetAdmissionStore``), logging into ``log``."""

    def __init__(self, log: list[str]) -> None:
        self.log = log
        self.bindings: dict[str, dict[str, Any]] = {}

    async def apply(self, policy: Mapping[str, Any], binding: Mapping[str, Any]) -> None:
        self.log.append(f"apply {binding['metadata']['name']}")
        self.bindings[binding["metadata"]["name"]] = dict(binding)

    async def remove(self, name: str) -> list[str]:
        self.log.append(f"remove {name}")
        self.bindings.pop(name, None)
        return []

    async def list_owned(self) -> list[str]:
        return sorted(self.bindings)

    async def remove_all(self) -> int:
        self.log.append("remove-all")
        count = len(self.bindings)
        self.bindings.clear()
        return count


async def test_the_binding_is_written_once_and_the_kill_switch_removes_it_before_any_quota(
    world: World,
) -> None:
    log: list[str] = []
    admission = FakeAdmission(log)
    world.op.budget_admission = admission
    delete = world.quotas.delete

    async def logged_delete(namespace: str, uid: str | None = None) -> bool:
        log.append(f"delete {namespace}")
        return await delete(namespace, uid)

    world.quotas.delete = logged_delete  # type: ignore[method-assign]
    world.op.budgets.on_budget(None, budget("b", {"tenant": "t"}, {"pods": 30}))
    member(world, "a", pods=5)
    member(world, "outsider", pods=1, labels={"tenant": "t", "dynquota.io/managed": "false"})
    world.quotas.put("a", {"pods": "20", "configmaps": "50"})
    await world.op.budget_tasks.run_pass("b")
    await world.op.budget_tasks.run_pass("b")
    assert log == ["apply dynquota-budget-slice-b"]  # nothing written at rest
    selector = admission.bindings["dynquota-budget-slice-b"]["spec"]["matchResources"]
    names = selector["namespaceSelector"]["matchExpressions"][-1]
    assert names["key"] == "kubernetes.io/metadata.name"
    assert names["values"] == ["kube-node-lease", "kube-public", "kube-system", "outsider"]
    world.op.kill_switch = True
    assert await world.op.engage_kill_switch() == 1
    assert log == ["apply dynquota-budget-slice-b", "remove-all", "delete a"]
    assert admission.bindings == {}
    # while engaged no pass writes a binding again
    await world.op.budget_tasks.run_pass("b")
    assert admission.bindings == {}


async def test_a_deleted_budget_loses_its_binding(world: World) -> None:
    log: list[str] = []
    world.op.budget_admission = FakeAdmission(log)
    world.op.budgets.on_budget(None, budget("b", {"tenant": "t"}, {"pods": 30}))
    member(world, "a", pods=5)
    world.quotas.put("a", {"pods": "20", "configmaps": "50"})
    await world.op.budget_tasks.run_pass("b")
    world.op.budget_tasks.running = True
    world.op.budgets.on_budget("DELETED", budget("b", {"tenant": "t"}, {"pods": 30}))
    removal = world.op.budget_tasks._removals["b"]
    await removal
    assert log == ["apply dynquota-budget-slice-b", "remove dynquota-budget-slice-b"]
    await world.op.budget_tasks.stop()


class ForbiddenAdmission(FakeAdmission):
    """RBAC without the rule (``rbac.budgetAdmissionPolicies=false``): every call is a 403."""

    async def apply(self, policy: Mapping[str, Any], binding: Mapping[str, Any]) -> None:
        self.log.append("apply refused")
        raise ForbiddenError(403, "Forbidden", "no")

    async def remove_all(self) -> int:
        self.log.append("remove-all refused")
        raise ForbiddenError(403, "Forbidden", "no")


async def test_without_the_rbac_rule_budgets_and_the_kill_switch_work_on(world: World) -> None:
    log: list[str] = []
    world.op.budget_admission = ForbiddenAdmission(log)
    world.op.budgets.on_budget(None, budget("b", {"tenant": "t"}, {"pods": 30}))
    member(world, "a", pods=5)
    world.quotas.put("a", {"pods": "20", "configmaps": "50"})
    world.op.budgets.demand["a"] = {"pods": 8}
    result = await world.op.budget_tasks.run_pass("b")
    assert result.writes == {"a": {"pods": 8}}  # the shrink, as without the policy
    await world.op.budget_tasks.run_pass("b")
    assert log == ["apply refused"]  # tried once, then not again
    world.op.kill_switch = True
    assert await world.op.engage_kill_switch() == 1
    assert log == ["apply refused", "remove-all refused"]
    assert "a" not in world.quotas.objects


async def test_a_namespace_leaving_keeps_its_slice_held_until_its_reconcile_resized_it(
    world: World,
) -> None:
    world.op.budgets.on_budget(None, budget("bud", {"tenant": "t"}, {"pods": 30}))
    member(world, "a", pods=5)
    member(world, "b", pods=10)
    mark = {"dynquota.io/budget": "bud"}
    world.quotas.put("a", {"pods": "20"}, annotations={"dynquota.io/hard.pods": "20", **mark})
    world.quotas.put("b", {"pods": "10"}, annotations={"dynquota.io/hard.pods": "10", **mark})
    world.op.budgets.demand.update({"a": {"pods": 20}, "b": {"pods": 10}})
    settled = await world.op.budget_tasks.run_pass("bud")
    assert settled.writes == {}  # 20 + 10 = 30: each has its demand
    # a leaves the budget (its label removed) and b asks for 15: the budget still holds a's 20
    member(world, "a", pods=5, labels={"tenant": "other"})
    world.op.budgets.demand["b"] = {"pods": 15}
    held = await world.op.budget_tasks.run_pass("bud")
    assert held.leaving == ["a"]
    assert held.writes == {}
    assert held.allocations["pods"].reserved == 20
    assert held.allocations["pods"].committed_after == 30
    rebalancing = next(c for c in status(world)["conditions"] if c["type"] == "Rebalancing")
    assert rebalancing["reason"] == "Waiting"
    assert "holding the slices of a (no members now" in rebalancing["message"]
    # a's reconcile re-sizes it under its own policy and drops the mark in the same write
    await world.reconcile("a")
    assert "dynquota.io/budget" not in world.quotas.annotations("a")
    released = await world.op.budget_tasks.run_pass("bud")
    assert released.leaving == []
    assert released.writes == {"b": {"pods": 15}}
    assert world.quotas.annotations("b")["dynquota.io/budget"] == "bud"


async def test_the_mark_alone_is_removed_when_the_policy_changes_nothing(world: World) -> None:
    member(world, "a", pods=4)
    await world.reconcile("a")  # no budget at all: created under its policy (pods 6)
    writes = len(world.quotas.writes)
    world.quotas.objects["a"]["metadata"]["annotations"]["dynquota.io/budget"] = "gone"
    await world.reconcile("a")
    assert len(world.quotas.writes) == writes + 1
    assert "dynquota.io/budget" not in world.quotas.annotations("a")
    assert world.quotas.hard("a")["pods"] == "6"


class ContestedAdmission(FakeAdmission):
    """The adapter's two refusals of its own: a same-named object someone else made
    (``NotOwnedError``), and conditional writes that kept losing races
    (``RetryConflictError``)."""

    def __init__(self, log: list[str], error: Exception) -> None:
        super().__init__(log)
        self.error = error

    async def apply(self, policy: Mapping[str, Any], binding: Mapping[str, Any]) -> None:
        self.log.append(f"apply refused: {type(self.error).__name__}")
        raise self.error


async def test_a_foreign_object_leaves_the_window_open_and_a_lost_race_fails_the_pass(
    world: World,
) -> None:
    log: list[str] = []
    name = "dynquota-budget-slice-b"
    world.op.budget_admission = ContestedAdmission(
        log, NotOwnedError("ValidatingAdmissionPolicy", name)
    )
    world.op.budgets.on_budget(None, budget("b", {"tenant": "t"}, {"pods": 30}))
    member(world, "a", pods=5)
    world.quotas.put("a", {"pods": "20", "configmaps": "50"})
    world.op.budgets.demand["a"] = {"pods": 8}
    result = await world.op.budget_tasks.run_pass("b")
    assert result.writes == {"a": {"pods": 8}}  # the budget works on, its window open
    await world.op.budget_tasks.run_pass("b")
    assert log == ["apply refused: NotOwnedError"]  # logged once, not every pass
    assert world.op.budget_tasks.admission_forbidden is False  # other budgets keep theirs
    # a conflict is retryable: the pass fails (and is run again with backoff), nothing cached
    world.op.budget_tasks.admission.clear()
    world.op.budget_admission = ContestedAdmission(
        log, RetryConflictError(409, "Conflict", "changed")
    )
    with pytest.raises(RetryConflictError):
        await world.op.budget_tasks.run_pass("b")
    assert "b" not in world.op.budget_tasks.admission


async def test_a_member_whose_slice_fits_gets_the_mark_alone(world: World) -> None:
    world.op.budgets.on_budget(None, budget("bud", {"tenant": "t"}, {"pods": 30}))
    member(world, "a", pods=4)
    # joined with its own quota (sized by its policy before), which fits in the budget
    world.quotas.put("a", {"pods": "6"}, annotations={"dynquota.io/hard.pods": "6"})
    world.op.budgets.demand["a"] = {"pods": 6}
    writes = len(world.quotas.writes)
    result = await world.op.budget_tasks.run_pass("bud")
    assert result.writes == {}  # no slice changes: the mark alone, for the admission policy
    assert len(world.quotas.writes) == writes + 1
    assert world.quotas.annotations("a")["dynquota.io/budget"] == "bud"
    assert world.quotas.hard("a")["pods"] == "6"
    again = await world.op.budget_tasks.run_pass("bud")
    assert again.writes == {}
    assert len(world.quotas.writes) == writes + 1  # nothing at rest


def test_a_namespace_entering_or_leaving_a_selector_wakes_that_budget(world: World) -> None:
    woken: list[str] = []
    world.op.budgets.on_wake = woken.append
    world.op.budgets.on_budget(None, budget("bud", {"tenant": "t"}, {"pods": 30}))
    world.op.budgets.on_budget(None, budget("other", {"tenant": "o"}, {"pods": 30}))
    woken.clear()
    # a namespace no policy manages: it never reaches the reconcile's hook, yet the budget's
    # binding must exclude it by name at once
    world.op.on_namespace(None, namespace("plain", {"x": "y"}))
    assert woken == []
    world.op.on_namespace(None, namespace("plain", {"tenant": "t"}))
    assert woken == ["bud"]
    woken.clear()
    world.op.on_namespace(None, namespace("plain", {"tenant": "o"}))
    assert sorted(woken) == ["bud", "other"]


async def test_a_budgeted_key_the_policy_does_not_size_gets_an_even_share_not_zero(
    world: World,
) -> None:
    # the policy sizes pods and configmaps; the budget also names services
    world.op.budgets.on_budget(None, budget("bud", {"tenant": "t"}, {"services": 10}))
    member(world, "a", pods=1)
    member(world, "b", pods=1)
    await world.reconcile("a")
    await world.reconcile("b")
    assert world.op.budgets.unsized == {"a": frozenset({"services"}), "b": frozenset({"services"})}
    result = await world.op.budget_tasks.run_pass("bud")
    # a slice of 0 would refuse every Service where none was limited before: 10 / 2 each
    assert result.writes == {"a": {"services": 5}, "b": {"services": 5}}
    assert world.quotas.hard("a")["services"] == "5"
    assert "BudgetKeyNotSized" in world.events.reasons("bud")
    assert status(world)["namespaces"]["a"]["demand"] == {"services": "5"}


@pytest.mark.parametrize(
    "expressions",
    [
        [{"key": "kubernetes.io/metadata.name", "operator": "Exists"}],
        [{"key": "tenant", "operator": "DoesNotExist"}],
        [{"key": "tenant", "operator": "NotIn", "values": ["x"]}],
    ],
)
def test_a_selector_that_takes_in_kube_system_is_refused_and_holds_nothing(
    expressions: list[dict[str, Any]],
) -> None:
    body = budget("all", {}, {"pods": 3})
    body["spec"]["namespaceSelector"] = {"matchExpressions": expressions}
    record = read_budget(body)
    assert record.spec is None
    assert record.selector is None  # nothing frozen either
    assert record.error.startswith("spec.namespaceSelector selects kube-system")


async def test_a_joiner_is_marked_only_once_its_slice_is_enforced(world: World) -> None:
    world.op.budgets.on_budget(None, budget("bud", {"tenant": "t"}, {"pods": 30}))
    member(world, "a", pods=20)
    member(world, "j", pods=2)
    mark = {"dynquota.io/budget": "bud"}
    world.quotas.put("a", {"pods": "28"}, annotations={"dynquota.io/hard.pods": "28", **mark})
    # j joins with its own quota of 20 (2 used): over budget, shrunk towards its usage
    world.quotas.put("j", {"pods": "20"}, annotations={"dynquota.io/hard.pods": "20"})
    world.op.budgets.demand.update({"a": {"pods": 28}, "j": {"pods": 3}})
    first = await world.op.budget_tasks.run_pass("bud")
    assert first.writes == {"a": {"pods": 27}, "j": {"pods": 3}}  # shrinks, fair shares
    # the slice is written without the mark: admission keeps denying creates in j while
    # status.hard still holds its old 20
    assert "dynquota.io/budget" not in world.quotas.annotations("j")
    await world.op.budget_tasks.run_pass("bud")
    assert "dynquota.io/budget" not in world.quotas.annotations("j")
    world.quotas.objects["j"]["status"]["hard"]["pods"] = "3"  # the controller's copy
    await world.op.budget_tasks.run_pass("bud")
    assert world.quotas.annotations("j")["dynquota.io/budget"] == "bud"
