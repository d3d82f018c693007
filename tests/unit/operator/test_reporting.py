"""The per-namespace series across a change of governance (issue 30 follow-up, finding B):
an enforced namespace whose policy goes to dry run keeps ``dynquota_hard`` (the simulated
hard, ``enforcement="dry-run"``), and a namespace no policy governs any more (its policy
deleted, the namespace being deleted) has no series from its next decision on."""

from __future__ import annotations

from dynquota.operator.assembly import Operator

from .fakes import World, namespace, policy

PODS = {"bufferPercent": 50, "minimum": 2, "maximum": 100}


def series(op: Operator, ns: str) -> dict[tuple[str, str, str], float]:
    """``{(metric, resource, enforcement): value}`` of ``ns``'s per-namespace samples."""
    found = {}
    for family in op.metrics.registry.collect():
        for sample in family.samples:
            labels = sample.labels
            if labels.get("namespace") == ns:
                key = (sample.name, labels.get("resource", ""), labels["enforcement"])
                found[key] = sample.value
    return found


async def enforced_team(world: World) -> None:
    world.op.on_policy(None, policy(pods=PODS))
    world.op.on_namespace(None, namespace("team-a", {"tenant": "t"}))
    world.usage.counts[("team-a", "pods")] = 5
    await world.reconcile("team-a")
    assert series(world.op, "team-a")[("dynquota_hard", "pods", "enforced")] == 8


async def test_a_policy_going_to_dry_run_keeps_the_simulated_hard(world: World) -> None:
    await enforced_team(world)
    enforced = series(world.op, "team-a")
    world.op.on_policy(None, policy(pods=PODS, dry_run=True, generation=2))
    for _ in range(2):  # the release (the quota deleted), then a decision that changes nothing
        world.clock.now += 5
        await world.reconcile("team-a")
        assert world.quotas.objects == {}
        # every series stays, now saying dry-run: hard is the simulated one (8 pods, 50 cms)
        assert series(world.op, "team-a") == {
            (name, resource, "dry-run"): value for (name, resource, _), value in enforced.items()
        }


async def test_a_namespace_no_longer_governed_loses_its_series_at_its_next_decision(
    world: World,
) -> None:
    await enforced_team(world)
    world.op.on_policy("DELETED", {"metadata": {"name": "p"}})
    await world.reconcile("team-a")
    assert series(world.op, "team-a") == {}
    assert world.op.metrics.enforcement("team-a") == "unknown"  # forgotten too


async def test_a_namespace_being_deleted_loses_its_series_before_it_is_gone(world: World) -> None:
    await enforced_team(world)
    deleting = namespace("team-a", {"tenant": "t"}, rv=2)
    deleting["metadata"]["deletionTimestamp"] = "2027-01-15T08:00:00Z"
    world.op.on_namespace("MODIFIED", deleting)  # Terminating: its content goes first
    await world.reconcile("team-a")
    assert series(world.op, "team-a") == {}
    assert world.op.metrics.enforcement("team-a") == "unknown"
