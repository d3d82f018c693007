"""Refused and failing quota writes on the budgets' and policies' Ready (issue 30 follow-up,
finding A), against fakes at the kube/ ports: a 403 on a member's slice is Stalled (a human
must act), a 503 Reconciling (retried), each naming the namespace and the HTTP status, with
Ready=False until a write there succeeds; the pass is tried again with backoff."""

from __future__ import annotations

from typing import Any

import pytest

from dynquota._k8s.errors import ApiError, ForbiddenError, NotFoundError, TransportError
from dynquota.names import BUDGET_LABEL
from dynquota.operator.budget_task import refused_backoff
from dynquota.operator.write_failures import RECONCILE_WRITER, RecordingQuotas, WriteFailures
from dynquota.policy.readiness import WriteFailure

from .fakes import FakeBudgetStatus, FakeQuotas, World, budget, namespace, policy
from .test_budgets import PODS

VAP = (
    "resourcequotas \"dynquota\" is forbidden: ValidatingAdmissionPolicy 'deny' with binding "
    "'deny' denied request: no quota writes here"
)


@pytest.fixture
def world() -> World:
    w = World(budget_status=FakeBudgetStatus())
    w.op.on_policy(None, policy(pods=PODS))
    w.op.budgets.on_budget(None, budget("b", {"pods": 30}))
    # a member whose slice (20, enforced) is to shrink to its demand 8
    w.op.on_namespace(None, namespace("team-a", {"tenant": "t", BUDGET_LABEL: "b"}))
    w.usage.counts[("team-a", "pods")] = 5
    w.quotas.put("team-a", {"pods": "20"}, annotations={"dynquota.io/hard.pods": "20"})
    w.quotas.objects["team-a"]["status"]["hard"]["pods"] = "20"
    w.op.budgets.demand["team-a"] = {"pods": 8}
    return w


def conditions(world: World) -> dict[str, dict[str, Any]]:
    fake = world.budget_status
    assert isinstance(fake, FakeBudgetStatus)
    return {c["type"]: c for c in fake.patches[-1][1]["conditions"]}


def summary(found: dict[str, dict[str, Any]]) -> list[tuple[str, str, str]]:
    types = ("Ready", "Reconciling", "Stalled")
    return [(t, found[t]["status"], found[t]["reason"]) for t in types]


async def policy_conditions(world: World) -> dict[str, dict[str, Any]]:
    await world.op.status.write()
    name, status = world.status.patches[-1]
    assert name == "p"
    return {c["type"]: c for c in status["conditions"]}


async def test_a_refused_slice_is_stalled_naming_the_namespace_until_a_write_succeeds(
    world: World,
) -> None:
    world.quotas.fail.append(ForbiddenError(403, "Forbidden", VAP))
    refused = await world.op.budget_tasks.run_pass("b")
    assert refused.writes == {}
    assert refused.again == 5.0  # tried again with backoff: 5, 10, 20, 40, then 60 s
    assert [refused_backoff(n) for n in (1, 2, 3, 4, 5, 9)] == [5, 10, 20, 40, 60, 60]
    found = conditions(world)
    assert summary(found) == [
        ("Ready", "False", "QuotaWriteForbidden"),
        ("Reconciling", "False", "Idle"),
        ("Stalled", "True", "QuotaWriteForbidden"),
    ]
    assert found["Ready"]["message"] == (
        "writes of managed quotas are not landing: patch of the managed quota in team-a "
        f"refused: 403 Forbidden: {VAP} (not Ready until a write there succeeds; dynquota "
        "tries again: fix the operator's rights or the admission policy that refuses it)"
    )
    assert found["Stalled"]["message"] == found["Ready"]["message"]
    # the policy governing team-a says it too
    governing = await policy_conditions(world)
    assert summary(governing) == [
        ("Ready", "False", "QuotaWriteForbidden"),
        ("Reconciling", "False", "Idle"),
        ("Stalled", "True", "QuotaWriteForbidden"),
    ]
    # the next pass's write lands: Ready again, on both
    again = await world.op.budget_tasks.run_pass("b")
    assert again.writes == {"team-a": {"pods": 8}}
    assert summary(conditions(world)) == [
        ("Ready", "True", "Enforced"),
        ("Reconciling", "False", "Idle"),
        ("Stalled", "False", "NotStalled"),
    ]
    assert summary(await policy_conditions(world))[0] == ("Ready", "True", "Applied")


async def test_a_failing_slice_write_is_reconciling_and_backs_off(world: World) -> None:
    world.quotas.fail.append(ApiError(503, "ServiceUnavailable", "etcd leader changed"))
    failing = await world.op.budget_tasks.run_pass("b")
    assert failing.again == 5.0
    assert summary(conditions(world)) == [
        ("Ready", "False", "QuotaWriteServiceUnavailable"),
        ("Reconciling", "True", "QuotaWriteServiceUnavailable"),
        ("Stalled", "False", "NotStalled"),
    ]
    assert conditions(world)["Reconciling"]["message"] == (
        "writes of managed quotas are not landing: patch of the managed quota in team-a "
        "failed: 503 ServiceUnavailable: etcd leader changed (dynquota retries with backoff)"
    )
    world.quotas.fail.append(TransportError("timed out after 10 s"))
    second = await world.op.budget_tasks.run_pass("b")
    assert second.again == 10.0
    assert conditions(world)["Ready"]["reason"] == "QuotaWriteNoAnswer"


async def test_a_refused_create_of_the_reconcile_shows_on_the_budget_and_the_policy(
    world: World,
) -> None:
    world.op.on_namespace(None, namespace("team-b", {"tenant": "t", BUDGET_LABEL: "b"}))

    async def refused(*args: object) -> None:
        raise ForbiddenError(403, "Forbidden", "no rights in team-b")

    world.quotas.create = refused  # type: ignore[assignment,method-assign]
    await world.reconcile("team-b")
    assert "team-b" not in world.quotas.objects
    del world.quotas.create
    await world.op.budget_tasks.run_pass("b")
    ready = conditions(world)["Ready"]
    assert (ready["status"], ready["reason"]) == ("False", "QuotaWriteForbidden")
    assert "create of the managed quota in team-b refused: 403 Forbidden" in ready["message"]
    assert (await policy_conditions(world))["Stalled"]["status"] == "True"
    await world.reconcile("team-b")  # created now: the reconcile's failure is over
    await world.op.budget_tasks.run_pass("b")
    assert conditions(world)["Ready"]["reason"] == "AtRisk"  # its slice not enforced yet


async def test_gone_changed_or_terminating_is_no_failure_and_a_success_clears() -> None:
    failures = WriteFailures()
    changed: list[str] = []
    failures.on_change = changed.append
    quotas = FakeQuotas()
    recording = RecordingQuotas(quotas, failures, RECONCILE_WRITER)
    quotas.fail.append(NotFoundError(404, "NotFound", "gone"))
    with pytest.raises(NotFoundError):
        await recording.patch("a", {"spec": {"hard": {"pods": "1"}}})
    terminating = "unable to create new content in namespace a because it is being terminated"
    quotas.fail.append(ForbiddenError(403, "Forbidden", terminating))
    with pytest.raises(ForbiddenError):
        await recording.create("a", {"pods": "1"}, {})
    assert failures.of(["a"]) == []
    quotas.fail.append(ForbiddenError(403, "Forbidden", "no"))
    with pytest.raises(ForbiddenError):
        await recording.create("a", {"pods": "1"}, {})
    assert failures.of(["a"]) == [
        WriteFailure("a", RECONCILE_WRITER, "create", 403, "Forbidden", "no", False)
    ]
    quotas.fail.append(ForbiddenError(403, "Forbidden", "no, again"))  # a new message alone
    with pytest.raises(ForbiddenError):
        await recording.create("a", {"pods": "1"}, {})
    assert changed == ["a"]
    await recording.create("a", {"pods": "1"}, {})
    assert failures.of(["a"]) == []
    assert changed == ["a", "a"]


async def test_a_refused_reconcile_write_no_longer_wanted_stops_holding_ready() -> None:
    """README-only attack: the refusal removed, the budget's slice write landed and the
    reconcile had nothing left to write: the policy and budget stayed Stalled for good. A
    reconcile whose decision needs no write settles its namespace's refused write."""
    from .fakes import T0, setup_team

    w = World()
    await setup_team(w, pods=14)
    await w.reconcile("team-a")  # create pods 20
    original = w.quotas.patch

    async def refuse(*args: Any, **kwargs: Any) -> Any:
        raise ApiError(422, "Invalid", "spec.hard: refused here")

    w.quotas.patch = refuse  # type: ignore[method-assign]
    w.usage.counts[("team-a", "pods")] = 20
    w.clock.now = T0 + 60
    assert (await w.reconcile("team-a")).retry is False  # a raise refused: recorded
    assert [f.namespace for f in w.op.write_failures.of(["team-a"])] == ["team-a"]
    w.quotas.patch = original  # type: ignore[method-assign]
    w.usage.counts[("team-a", "pods")] = 14  # the raise is no longer wanted: nothing to write
    w.clock.now = T0 + 120
    assert (await w.reconcile("team-a")).retry is False
    assert w.quotas.writes == [("create", "team-a")]
    assert w.op.write_failures.of(["team-a"]) == []


async def test_a_refused_grow_is_not_counted_as_granted(world: World) -> None:
    """README-only attack (issue 30, LOW-7): a grow the apiserver refused (an admission
    policy's 403) was counted in the budget's ``granted`` and ``free`` as if it had landed;
    only a write that landed counts, and the demand it was for is still waiting."""
    world.quotas.put("team-a", {"pods": "10"}, annotations={"dynquota.io/hard.pods": "10"})
    world.op.budgets.demand["team-a"] = {"pods": 15}
    world.quotas.fail.append(ForbiddenError(403, "Forbidden", VAP))
    refused = await world.op.budget_tasks.run_pass("b")
    assert refused.writes == {}
    assert world.quotas.hard("team-a") == {"pods": "10"}
    fake = world.budget_status
    assert isinstance(fake, FakeBudgetStatus)
    status = fake.patches[-1][1]
    assert status["granted"] == {"pods": "10"}
    assert status["free"] == {"pods": "20"}
    assert status["summary"] == "pods: 0/30 (20 free)"
    assert status["namespaces"]["team-a"]["grant"] == {"pods": "10"}
    rebalancing = conditions(world)["Rebalancing"]
    assert (rebalancing["status"], rebalancing["reason"], rebalancing["message"]) == (
        "False",
        "Waiting",
        "demand not yet granted: team-a",
    )
    assert refused.allocations["pods"].writes == {}
    assert refused.allocations["pods"].waiting == {"team-a": 5}
    # the write lands on the next pass: granted then
    again = await world.op.budget_tasks.run_pass("b")
    assert again.writes == {"team-a": {"pods": 15}}
    assert fake.patches[-1][1]["granted"] == {"pods": "15"}
    assert fake.patches[-1][1]["free"] == {"pods": "15"}
