"""Tenant budgets on the operator side (issue #13) against fakes at the kube/ ports: the
reconcile hands a budgeted key over as demand, a pass writes shrinks before grows and grows
only into observed room, conflicts and frozen namespaces write nothing."""

from __future__ import annotations

from typing import Any

import pytest

from dynquota._k8s.errors import ConflictError
from dynquota.names import BUDGET_LABEL
from dynquota.operator.budgets import read_budget
from dynquota.operator.guard_watch import GuardWatch
from dynquota.policy import Decision
from dynquota.policy.budget_guard import DEFAULT_GUARDED_KINDS, GuardSeen

from .fakes import FakeBudgetStatus, World, budget, namespace, policy

PODS = {
    "bufferPercent": 50,
    "minimum": 2,
    "maximum": 100,
    "upscaleCooldown": "0s",
    "downscaleCooldown": "1h",
}


@pytest.fixture
def world() -> World:
    w = World(budget_status=FakeBudgetStatus())
    w.op.on_policy(None, policy(pods=PODS))
    return w


def member(
    world: World, ns: str, pods: int, labels: dict[str, str] | None = None, into: str = "b"
) -> None:
    """Namespace ``ns`` with ``pods`` pods, labelled into budget ``into`` (``labels``: these
    labels instead)."""
    labels = {"tenant": "t", BUDGET_LABEL: into} if labels is None else labels
    world.op.on_namespace(None, namespace(ns, labels))
    world.usage.counts[(ns, "pods")] = pods


def status(world: World) -> dict[str, Any]:
    fake = world.budget_status
    assert isinstance(fake, FakeBudgetStatus)
    return fake.patches[-1][1]


async def test_the_reconcile_hands_a_budgeted_key_over_and_the_pass_writes_it(
    world: World,
) -> None:
    world.op.budgets.on_budget(None, budget("b", {"pods": 30}))
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
    # issue 30: the summary line kubectl get qb shows, and the Ready summary condition
    assert status(world)["used"] == {"pods": "0"}  # status.used of the fake quota
    assert status(world)["summary"] == "pods: 0/30 (9 free)"
    conditions = {c["type"]: c for c in status(world)["conditions"]}
    assert conditions["AtRisk"]["status"] == "True"  # team-a at its slice
    ready = conditions["Ready"]
    assert (ready["status"], ready["reason"]) == ("False", "AtRisk")
    assert conditions["Reconciling"]["status"] == "True"


async def test_a_pass_shrinks_first_and_grows_only_into_room_the_controller_showed(
    world: World,
) -> None:
    world.op.budgets.on_budget(None, budget("b", {"pods": 30}))
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
    world.op.budgets.on_budget(None, budget("b", {"pods": 30}))
    member(world, "a", pods=5)
    world.quotas.put("a", {"pods": "20"}, annotations={"dynquota.io/hard.pods": "20"})
    world.op.budgets.demand["a"] = {"pods": 8}
    world.quotas.fail.append(ConflictError(409, "Conflict", "modified"))
    result = await world.op.budget_tasks.run_pass("b")
    assert result.writes == {}
    assert result.again == 0.0
    assert world.quotas.hard("a")["pods"] == "20"


async def test_a_pass_lists_only_its_own_quotas_once_every_member_carries_its_label(
    world: World,
) -> None:
    """The first pass LISTs every managed quota; its slice writes label the members'
    quotas, so later passes LIST only ``dynquota.io/budget=b``; a member whose quota lost the
    label (re-created, edited) makes that pass LIST everything again, once."""
    world.op.budgets.on_budget(None, budget("b", {"pods": 30}))
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


async def test_the_kill_switch_holds_every_pass_and_its_deletes_pass_unchanged(
    world: World,
) -> None:
    world.op.budgets.on_budget(None, budget("b", {"pods": 30}))
    member(world, "a", pods=5)
    world.quotas.put("a", {"pods": "20", "configmaps": "50"})
    world.op.budgets.demand["a"] = {"pods": 8}
    world.op.switch.state.engaged = True
    result = await world.op.budget_tasks.run_pass("b")
    assert (result.writes, result.again) == ({}, 1.0)
    assert world.quotas.hard("a")["pods"] == "20"
    delete = Decision("delete")
    assert world.op.budgets.shape("a", delete, None) is delete


async def test_a_namespace_leaving_keeps_its_slice_held_until_its_reconcile_resized_it(
    world: World,
) -> None:
    world.op.budgets.on_budget(None, budget("bud", {"pods": 30}))
    member(world, "a", pods=5, into="bud")
    member(world, "b", pods=10, into="bud")
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
    member(world, "a", pods=4, labels={"tenant": "t"})  # no budget label
    await world.reconcile("a")  # no budget at all: created under its policy (pods 6)
    writes = len(world.quotas.writes)
    world.quotas.objects["a"]["metadata"]["annotations"]["dynquota.io/budget"] = "gone"
    await world.reconcile("a")
    assert len(world.quotas.writes) == writes + 1
    assert "dynquota.io/budget" not in world.quotas.annotations("a")
    assert world.quotas.hard("a")["pods"] == "6"


async def test_a_member_whose_slice_fits_gets_the_mark_alone(world: World) -> None:
    world.op.budgets.on_budget(None, budget("bud", {"pods": 30}))
    member(world, "a", pods=4, into="bud")
    # joined with its own quota (sized by its policy before), which fits in the budget
    world.quotas.put("a", {"pods": "6"}, annotations={"dynquota.io/hard.pods": "6"})
    world.op.budgets.demand["a"] = {"pods": 6}
    writes = len(world.quotas.writes)
    result = await world.op.budget_tasks.run_pass("bud")
    assert result.writes == {}  # no slice changes: the mark alone, for the budget guard
    assert len(world.quotas.writes) == writes + 1
    assert world.quotas.annotations("a")["dynquota.io/budget"] == "bud"
    assert world.quotas.hard("a")["pods"] == "6"
    again = await world.op.budget_tasks.run_pass("bud")
    assert again.writes == {}
    assert len(world.quotas.writes) == writes + 1  # nothing at rest


async def test_a_budgeted_key_the_policy_does_not_size_gets_an_even_share_not_zero(
    world: World,
) -> None:
    # the policy sizes pods and configmaps; the budget also names services
    world.op.budgets.on_budget(None, budget("bud", {"services": 10}))
    member(world, "a", pods=1, into="bud")
    member(world, "b", pods=1, into="bud")
    await world.reconcile("a")
    await world.reconcile("b")
    assert world.op.budgets.unsized == {"a": frozenset({"services"}), "b": frozenset({"services"})}
    result = await world.op.budget_tasks.run_pass("bud")
    # a slice of 0 would refuse every Service where none was limited before: 10 / 2 each
    assert result.writes == {"a": {"services": 5}, "b": {"services": 5}}
    assert world.quotas.hard("a")["services"] == "5"
    assert "BudgetKeyNotSized" in world.events.reasons("bud")
    assert status(world)["namespaces"]["a"]["demand"] == {"services": "5"}


async def test_a_joiner_is_marked_only_once_its_slice_is_enforced(world: World) -> None:
    world.op.budgets.on_budget(None, budget("bud", {"pods": 30}))
    member(world, "a", pods=20, into="bud")
    member(world, "j", pods=2, into="bud")
    mark = {"dynquota.io/budget": "bud"}
    world.quotas.put("a", {"pods": "28"}, annotations={"dynquota.io/hard.pods": "28", **mark})
    # j joins with its own quota of 20 (2 used): over budget, shrunk towards its usage
    world.quotas.put("j", {"pods": "20"}, annotations={"dynquota.io/hard.pods": "20"})
    world.op.budgets.demand.update({"a": {"pods": 28}, "j": {"pods": 3}})
    first = await world.op.budget_tasks.run_pass("bud")
    assert first.writes == {"a": {"pods": 27}, "j": {"pods": 3}}  # shrinks, fair shares
    # the slice is written without the mark: the guard keeps refusing creates in j while
    # status.hard still holds its old 20
    assert "dynquota.io/budget" not in world.quotas.annotations("j")
    await world.op.budget_tasks.run_pass("bud")
    assert "dynquota.io/budget" not in world.quotas.annotations("j")
    world.quotas.objects["j"]["status"]["hard"]["pods"] = "3"  # the controller's copy
    await world.op.budget_tasks.run_pass("bud")
    assert world.quotas.annotations("j")["dynquota.io/budget"] == "bud"


# -- membership by label and the mark (issue #22) ----------------------------------------------


async def test_a_label_naming_no_budget_marks_the_quota_with_it_and_sizes_it_by_its_policy(
    world: World,
) -> None:
    member(world, "a", pods=4, into="ghost")  # no QuotaBudget ghost
    assert world.op.budgets.slicing("a").budget is None
    await world.reconcile("a")
    # its own policy's sizing (ceil(4 * 1.5) = 6), and the mark equal to the label: the guard
    # (mark == label) admits, and no budget holds a slice of it
    assert world.quotas.hard("a") == {"configmaps": "50", "pods": "6"}
    assert world.quotas.annotations("a")["dynquota.io/budget"] == "ghost"
    writes = len(world.quotas.writes)
    await world.reconcile("a")
    assert len(world.quotas.writes) == writes  # nothing at rest


async def test_a_budget_deleted_keeps_the_mark_equal_to_the_label(world: World) -> None:
    world.op.budgets.on_budget(None, budget("bud", {"pods": 30}))
    member(world, "a", pods=4, into="bud")
    mark = {"dynquota.io/budget": "bud"}
    world.quotas.put("a", {"pods": "9"}, annotations={"dynquota.io/hard.pods": "9", **mark})
    world.op.budgets.on_budget("DELETED", budget("bud", {"pods": 30}))
    await world.reconcile("a")
    # the key is the policy's again (9 kept: its downscale cooldown of 1 h); the mark stays
    # the label's value (the guard admits) and the configmaps key is written with it
    assert world.quotas.hard("a") == {"configmaps": "50", "pods": "9"}
    assert world.quotas.annotations("a")["dynquota.io/budget"] == "bud"


async def test_relabelled_to_another_budget_the_mark_changes_only_with_the_new_slice(
    world: World,
) -> None:
    world.op.budgets.on_budget(None, budget("b1", {"pods": 30}))
    world.op.budgets.on_budget(None, budget("c1", {"pods": 10}))
    member(world, "a", pods=4, into="b1")
    member(world, "full", pods=8, into="c1")
    b1 = {"dynquota.io/budget": "b1"}
    c1 = {"dynquota.io/budget": "c1"}
    world.quotas.put("a", {"pods": "20"}, annotations={"dynquota.io/hard.pods": "20", **b1})
    world.quotas.put("full", {"pods": "10"}, annotations={"dynquota.io/hard.pods": "10", **c1})
    world.op.budgets.demand.update({"a": {"pods": 20}, "full": {"pods": 12}})
    member(world, "a", pods=4, into="c1")  # relabelled b1 -> c1, a full budget
    await world.reconcile("a")
    # the reconcile never writes the new budget's mark: b1's stays (the guard refuses creates,
    # mark b1 != label c1) and b1 keeps holding a's 20 pods
    assert world.quotas.annotations("a")["dynquota.io/budget"] == "b1"
    held = await world.op.budget_tasks.run_pass("b1")
    assert held.leaving == ["a"]
    assert held.allocations["pods"].reserved == 20
    # c1 is over (a's 20 + full's 10 > 10): both shrink to their usage, nothing granted; a's
    # slice is written without the mark until the controller shows it enforced
    first = await world.op.budget_tasks.run_pass("c1")
    assert first.writes == {"a": {"pods": 4}, "full": {"pods": 8}}
    assert world.quotas.annotations("a")["dynquota.io/budget"] == "b1"
    world.quotas.objects["a"]["status"]["hard"]["pods"] = "4"  # the controller's copy
    await world.op.budget_tasks.run_pass("c1")
    assert world.quotas.annotations("a")["dynquota.io/budget"] == "c1"
    released = await world.op.budget_tasks.run_pass("b1")
    assert released.leaving == []


async def test_relabelled_to_a_budget_that_does_not_exist_the_reconcile_writes_the_label(
    world: World,
) -> None:
    world.op.budgets.on_budget(None, budget("b1", {"pods": 30}))
    member(world, "a", pods=4, into="b1")
    b1 = {"dynquota.io/budget": "b1"}
    world.quotas.put("a", {"pods": "20"}, annotations={"dynquota.io/hard.pods": "20", **b1})
    member(world, "a", pods=4, into="nope")
    await world.reconcile("a")
    # sized by its own policy and marked with the label in one write: b1 frees the room
    assert world.quotas.annotations("a")["dynquota.io/budget"] == "nope"
    assert world.quotas.hard("a") == {"configmaps": "50", "pods": "20"}  # downscale cooldown
    released = await world.op.budget_tasks.run_pass("b1")
    assert released.leaving == []


async def test_an_invalid_budget_has_no_members(world: World) -> None:
    world.op.budgets.on_budget(None, budget("bad", {"pods": "5.5"}))
    member(world, "a", pods=4, into="bad")
    assert world.op.budgets.members("bad") == []
    await world.reconcile("a")
    assert world.quotas.annotations("a")["dynquota.io/budget"] == "bad"
    assert world.quotas.hard("a")["pods"] == "6"


def test_a_v02_selector_is_ignored() -> None:
    body = budget("old", {"pods": 3})
    body["spec"]["namespaceSelector"] = {"matchLabels": {"tenant": "t"}}
    record = read_budget(body)
    assert record.spec is not None
    assert record.spec.hard == {"pods": 3}


async def test_a_key_of_a_kind_the_guard_does_not_hold_back_is_reported() -> None:
    world = World(budget_status=FakeBudgetStatus(), budget_guard_kinds=list(DEFAULT_GUARDED_KINDS))
    world.op.on_policy(None, policy(pods=PODS))
    world.op.budgets.on_budget(None, budget("bud", {"pods": 30, "count/deployments.apps": 5}))
    member(world, "a", pods=1, into="bud")
    await world.reconcile("a")
    await world.op.budget_tasks.run_pass("bud")
    guarded = next(c for c in status(world)["conditions"] if c["type"] == "Guarded")
    assert (guarded["status"], guarded["reason"]) == ("False", "KindNotGuarded")
    assert "deployments.apps (charged by count/deployments.apps)" in guarded["message"]


async def test_a_member_whose_quota_is_foreign_is_at_risk_saying_why(world: World) -> None:
    """README-only attack (issue 30, LOW-5): a member's managed quota lost its managed-by label
    (or was taken over): the budget said "not enforced yet", as for a quota about to be
    created. It says the quota is not dynquota's, why, and that a human must act (Stalled)."""
    world.op.budgets.on_budget(None, budget("b", {"pods": 30}))
    member(world, "team-a", pods=3)
    member(world, "team-c", pods=1)  # no quota yet: not enforced yet
    world.quotas.put("team-a", {"pods": "50"}, labels={})  # the label removed
    world.op.on_quota("MODIFIED", world.quotas.objects["team-a"])
    await world.reconcile("team-a")
    assert world.quotas.writes == []  # a foreign quota is never written
    await world.op.budget_tasks.run_pass("b")
    conditions = {c["type"]: c for c in status(world)["conditions"]}
    why = (
        "not enforced yet (no quota or key in status.hard): team-c; not enforced by dynquota in "
        "team-a: its ResourceQuota dynquota is not dynquota's (its label "
        "app.kubernetes.io/managed-by=dynquota is missing: removed, or never set), so dynquota "
        "leaves it alone and writes no slice there (Warning ForeignQuota); delete that quota "
        "for dynquota to create the slice; nothing is granted meanwhile"
    )
    at_risk = conditions["AtRisk"]
    assert (at_risk["status"], at_risk["reason"], at_risk["message"]) == (
        "True", "ForeignQuota", why,
    )  # fmt: skip
    assert [(t, conditions[t]["status"], conditions[t]["reason"]) for t in (
        "Ready", "Reconciling", "Stalled")] == [
        ("Ready", "False", "ForeignQuota"), ("Reconciling", "False", "Idle"),
        ("Stalled", "True", "ForeignQuota"),
    ]  # fmt: skip
    # taken over by another manager: said as such
    taken = world.quotas.objects["team-a"]
    taken["metadata"]["labels"] = {"app.kubernetes.io/managed-by": "helm"}
    world.op.on_quota("MODIFIED", taken)
    await world.op.budget_tasks.run_pass("b")
    message = next(c for c in status(world)["conditions"] if c["type"] == "AtRisk")["message"]
    assert "(it is labelled app.kubernetes.io/managed-by=helm, not dynquota: taken over)" in message
    # dynquota's again (the label back): an unbounded slice like any other
    taken["metadata"]["labels"] = {"app.kubernetes.io/managed-by": "dynquota"}
    world.op.on_quota("MODIFIED", taken)
    assert world.op.cluster.foreign("team-a") is None


SEEN = GuardSeen(True, "the ValidatingAdmissionPolicy g and its binding deny")
MISSING = GuardSeen(False, "the ValidatingAdmissionPolicyBinding g does not exist")
FAILED = GuardSeen(None, "reading the ValidatingAdmissionPolicy g failed: 403")


@pytest.mark.parametrize(
    ("kinds", "seen", "expected"),
    [
        (None, None, ("Unknown", "GuardNotConfigured",
                      "the operator was not told which kinds a budget guard holds back "
                      "(DYNQUOTA_BUDGET_GUARD_KINDS, which the chart sets from budgetGuard.kinds: "
                      "it runs without the chart?); kubectl get validatingadmissionpolicy,"
                      "validatingadmissionpolicybinding shows whether a guard exists; without "
                      "one a member's creates are admitted before its slice is enforced")),
        (None, SEEN, ("Unknown", "GuardNotConfigured", None)),
        (list(DEFAULT_GUARDED_KINDS), None, ("Unknown", "GuardNotObservable",
         "the chart installed its budget guard for every budgeted kind (budgetGuard.kinds), "
         "but whether it is in force is not known: the guard was not read")),
        (list(DEFAULT_GUARDED_KINDS), FAILED, ("Unknown", "GuardNotObservable",
         "the chart installed its budget guard for every budgeted kind (budgetGuard.kinds), "
         "but whether it is in force is not known: reading the ValidatingAdmissionPolicy g "
         "failed: 403")),
        (["pods"], SEEN, ("True", "Guarded",
         "the ValidatingAdmissionPolicy g and its binding deny: creates of pods in a member "
         "namespace are held back until its slice is enforced")),
        (["pods"], MISSING, ("False", "GuardMissing",
         "the ValidatingAdmissionPolicyBinding g does not exist: a member's creates are "
         "admitted before its slice is enforced, so the budget can be exceeded (helm upgrade "
         "restores the chart's guard)")),
        ([], SEEN, ("False", "KindNotGuarded",
              "the chart's budget guard does not hold back creates of pods (charged by pods) "
              "until a member's slice is enforced: add the kinds to the chart value "
              "budgetGuard.kinds")),
    ],
)  # fmt: skip
async def test_guarded_is_true_only_with_the_guard_seen(
    kinds: list[str] | None, seen: GuardSeen | None, expected: tuple[str, str, str | None]
) -> None:
    """README-only attack (issue 30, LOW-6): an operator run without the chart's budget guard
    said Guarded=True on every budget. True only when the guard was read and denies; False
    when a kind is not guarded or the guard is missing; otherwise Unknown, saying why."""
    world = World(budget_status=FakeBudgetStatus(), budget_guard_kinds=kinds)
    reads: list[int] = []

    async def guard() -> GuardSeen:
        reads.append(1)
        assert seen is not None
        return seen

    watch = GuardWatch(guard, world.op.gate, world.clock)
    world.op.budget_tasks.guard = watch if seen is not None else None
    world.op.on_policy(None, policy(pods=PODS))
    world.op.budgets.on_budget(None, budget("bud", {"pods": 30}))
    member(world, "a", pods=1, into="bud")
    await world.reconcile("a")
    await world.op.budget_tasks.run_pass("bud")
    await world.op.budget_tasks.run_pass("bud")
    guarded = next(c for c in status(world)["conditions"] if c["type"] == "Guarded")
    got = (guarded["status"], guarded["reason"], guarded["message"])
    assert got[:2] == expected[:2]
    if expected[2] is not None:
        assert got[2] == expected[2]
    assert len(reads) == (1 if seen is not None else 0)  # two passes within a minute: one read
    if seen is not None:
        world.clock.now += 61
        await world.op.budget_tasks.run_pass("bud")
        assert len(reads) == 2


async def test_the_guard_watch_wakes_every_budget_when_what_is_in_force_changes() -> None:
    """README-only attack (issue 30): a quiet budget's Guarded lagged an edit of the guard by
    the resync (True for 585 s after the binding went to Audit). The watch reads it every
    minute; a changed answer wakes every budget, the same answer wakes none."""
    answers = [SEEN, SEEN, MISSING]
    clock = [0.0]

    async def read() -> GuardSeen:
        return answers.pop(0)

    class Leading:
        is_leader = True

    watch = GuardWatch(read, Leading(), lambda: clock[0])
    assert await watch.seen() == SEEN
    clock[0] = 30.0
    assert await watch.seen() == SEEN  # reused within the minute: no read
    assert answers == [SEEN, MISSING]
    assert await watch.refresh() is False  # the same answer
    assert await watch.refresh() is True  # Audit now
    assert await watch.seen() == MISSING
    world = World(budget_status=FakeBudgetStatus(), budget_guard_kinds=["pods"])
    world.op.budget_tasks.guard = watch
    world.op.budget_tasks.start()
    try:
        assert watch.on_change == world.op.budget_tasks.wake_all
    finally:
        await world.op.budget_tasks.stop()
