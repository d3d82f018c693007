"""Issue 24, case 5: the brake on mass un-management. Policies deleted one by one (a prune),
or all at once (the CRD removed), would delete every managed quota; the brake holds the
deletions beyond the configured share within its window until an admin confirms on
``kube-system`` or the policies return. The kill switch is not braked."""

from __future__ import annotations

from typing import Any

from dynquota.operator.brake import CONFIRM, UnmanageBrake
from dynquota.testing.wait import async_wait_until

from .fakes import T0, World, namespace, policy, policy_list

TEAMS = [f"team-{i}" for i in range(4)]


def held(world: World) -> float:
    value = world.op.metrics.registry.get_sample_value(
        "dynquota_writes_held_total", {"reason": "unmanage-brake"}
    )
    return value or 0.0


async def four_managed(**settings: Any) -> World:
    world = World(unmanage_brake_share=0.5, **settings)
    world.op.on_policy(None, policy())
    for team in TEAMS:
        world.op.on_namespace(None, namespace(team))
        world.usage.counts[(team, "pods")] = 5
        await world.reconcile(team)
        world.op.on_quota("ADDED", world.quotas.objects[team])  # as the watch delivers it
    assert sorted(world.quotas.objects) == TEAMS
    return world


async def test_the_crd_removed_holds_the_deletions_beyond_the_share_until_confirmed() -> None:
    world = await four_managed()
    policy_list(world.op, [])  # the CRD deleted: every policy gone
    for team in TEAMS:
        await world.reconcile(team)
    # 4 managed: two may leave (2 <= 0.5 * 4), the third would be more than half
    assert sorted(world.quotas.objects) == ["team-2", "team-3"]
    assert held(world) == 2
    assert sorted(world.op.brake.held) == ["team-2", "team-3"]
    (event,) = [e for e in world.events.posted if e[2] == "UnmanageHeld"]
    assert event[0] == "kube-system"
    assert event[3].startswith(
        "holding the deletion of managed quotas (1 so far, e.g. in team-2; dynquota plan lists "
        "them): no policy enforces them any more, more than 50% of the managed namespaces within "
        "600 s"
    )
    # a confirmation older than the hold confirms nothing
    world.op.on_namespace(
        None, namespace("kube-system", rv=2, annotations={CONFIRM: "2027-01-15T07:59:00Z"})
    )
    await world.reconcile("team-2")
    assert "team-2" in world.quotas.objects
    # the admin confirms this hold
    world.op.on_namespace(
        None, namespace("kube-system", rv=3, annotations={CONFIRM: "2027-01-15T08:00:00Z"})
    )
    for team in ("team-2", "team-3"):
        await world.reconcile(team)
    assert world.quotas.objects == {}
    assert world.op.brake.held == {}


async def test_quotas_of_namespaces_being_deleted_do_not_widen_the_share() -> None:
    """Four managed namespaces and four more being deleted (their quotas still listed): the
    share is of the four, so the CRD removed lets two go, not all four (a test run after 50
    deleted namespaces saw its four un-managing deletes pass)."""
    world = await four_managed()
    for i in range(4):
        gone = f"gone-{i}"
        world.op.on_namespace(None, namespace(gone))
        world.usage.counts[(gone, "pods")] = 1
        await world.reconcile(gone)
        world.op.on_quota("ADDED", world.quotas.objects[gone])
        terminating = namespace(gone, rv=2)
        terminating["metadata"]["deletionTimestamp"] = "2027-01-15T08:00:00Z"
        world.op.on_namespace(None, terminating)
    policy_list(world.op, [])
    for team in TEAMS:
        await world.reconcile(team)
    assert sorted(n for n in world.quotas.objects if n.startswith("team-")) == [
        "team-2",
        "team-3",
    ]
    assert held(world) == 2


async def test_the_policies_returning_end_the_hold() -> None:
    world = await four_managed()
    policy_list(world.op, [])
    for team in TEAMS:
        await world.reconcile(team)
    policy_list(world.op, [policy()])  # the CRD and the policy restored
    for team in ("team-2", "team-3"):
        await world.reconcile(team)
    assert sorted(world.quotas.objects) == ["team-2", "team-3"]
    assert world.op.brake.held == {}
    assert world.op.brake.held_since is None


async def test_the_kill_switch_is_not_braked() -> None:
    world = await four_managed()
    policy_list(world.op, [])  # the CRD deleted: the brake would hold two of four
    world.op.on_namespace(
        "MODIFIED",
        namespace("kube-system", rv=2, annotations={"dynquota.io/kill-switch": "true"}),
    )  # the sweep deletes every managed quota
    await async_wait_until(lambda: world.quotas.objects == {}, "the sweep", timeout=5)
    assert held(world) == 0
    await world.op.stop_background()


async def test_policies_switched_to_dry_run_are_braked_like_deleted_ones() -> None:
    """A policy's dryRun flipped to true releases its namespaces' quotas: a commit flipping
    every policy is a mass un-management like a prune."""
    world = await four_managed()
    world.op.on_policy("MODIFIED", policy(dry_run=True, generation=2) | {"metadata": {
        "name": "p", "generation": 2, "resourceVersion": "2"}})  # fmt: skip
    for team in TEAMS:
        await world.reconcile(team)
    assert sorted(world.quotas.objects) == ["team-2", "team-3"]
    assert held(world) == 2


async def test_the_operator_wide_dry_run_is_not_braked() -> None:
    world = await four_managed()
    # restarted with the operator-wide dry run (the parts are built with the settings)
    world.settings = world.settings.model_copy(update={"dry_run": True})
    world.op = world.new_operator()
    world.op.on_policy(None, policy())
    for team in TEAMS:
        world.op.on_namespace(None, namespace(team))
    for team in TEAMS:
        await world.reconcile(team)
    assert world.quotas.objects == {}
    assert held(world) == 0


async def test_a_confirmed_hold_pre_approves_nothing_after_the_policies_return() -> None:
    """README-only attack: one hold confirmed, the policies restored (the quotas re-created),
    then the CRD deleted again within the window: held again at the share, announced again
    (v0.3 before the fix: every quota deleted within 15 s, no new Event)."""
    world = await four_managed()
    policy_list(world.op, [])
    for team in TEAMS:
        await world.reconcile(team)
    world.op.on_namespace(
        None, namespace("kube-system", rv=2, annotations={CONFIRM: "2027-01-15T08:00:00Z"})
    )
    for team in ("team-2", "team-3"):
        await world.reconcile(team)
    assert world.quotas.objects == {}
    policy_list(world.op, [policy()])  # the CRD and the policy restored
    for team in TEAMS:
        await world.reconcile(team)
        world.op.on_quota("ADDED", world.quotas.objects[team])
    assert sorted(world.quotas.objects) == TEAMS
    world.clock.now += 60  # well within the 600 s window
    policy_list(world.op, [])  # deleted again
    for team in TEAMS:
        await world.reconcile(team)
    assert len(world.quotas.objects) == 2
    assert len(world.op.brake.held) == 2
    held_events = [e for e in world.events.posted if e[2] == "UnmanageHeld"]
    assert len(held_events) == 2  # the second hold is announced with its own time


def test_a_prune_is_counted_over_the_window() -> None:
    brake = UnmanageBrake(share=0.25, window=600)
    # 8 managed namespaces, their policies deleted one by one, one namespace each
    quotas = set("abcdefgh")
    assert brake.admit("a", quotas, steady=0, now=T0, confirmed_at=None)  # 1 of 8
    quotas.discard("a")  # its quota deleted
    assert brake.admit("b", quotas, steady=10, now=T0 + 10, confirmed_at=None)  # 2 of 8
    quotas.discard("b")
    assert not brake.admit("c", quotas, steady=20, now=T0 + 20, confirmed_at=None)  # 3 of 8
    assert brake.held_since == T0 + 20
    # past the window, the early ones no longer count: 1 of 6
    assert brake.admit("c", quotas, steady=621, now=T0 + 621, confirmed_at=None)
    assert brake.held == {}
    assert UnmanageBrake(share=1.0, window=600).admit("x", (), 0, T0, None)


async def test_a_decision_made_before_the_policies_landed_is_not_written() -> None:
    """CI (stop 22): an operator starting deleted managed quotas as "no policy matches": its
    reconcile computed the governance before the policy list landed, the list landed during
    the quota read, and the write gate (policies now listed) let the stale delete go. The
    governance is taken again after every read."""
    world = await four_managed()
    op = world.op
    op.cluster._policies.clear()
    op.cluster.policies_listed = False  # a new operator: the policy informer has not listed yet
    real_get = world.quotas.get

    async def get_while_the_list_lands(namespace: str) -> object:
        policy_list(op, [policy()])  # the policy informer's first list lands meanwhile
        return await real_get(namespace)

    world.quotas.get = get_while_the_list_lands  # type: ignore[method-assign]
    op.cluster._watched.clear()  # no watched copy: the reconcile reads the quota (a GET)
    await world.reconcile("team-0")
    assert "team-0" in world.quotas.objects  # kept: the policy governs it
