"""The operator's companion LimitRange (companion.py ``Companions``), with the
LimitRange port faked at its Protocol (``LimitRangeReader``) and the quota world of
fakes.py."""

from __future__ import annotations

from typing import Any

from dynquota._k8s.errors import ForbiddenError

from .fakes import LABELLED, FakeLimitRanges, World, namespace, policy

CPU = {
    "bufferPercent": 50,
    "minimum": "500m",
    "maximum": "2",
    "upscaleCooldown": "60s",
    "downscaleCooldown": "300s",
}


def setup(world: World, dry_run: bool = False, **fields: Any) -> FakeLimitRanges:
    body = policy(dry_run=dry_run)
    body["spec"]["resources"]["requests.cpu"] = CPU
    body["spec"].update(fields)
    fake = FakeLimitRanges()
    world.op.companions.limit_ranges = fake
    world.op.on_policy(None, body)
    world.op.on_namespace(None, namespace("team-a"))
    return fake


def container(ns: FakeLimitRanges, name: str = "dynquota") -> dict[str, Any]:
    found = next(o for o in ns.objects["team-a"] if o["metadata"]["name"] == name)
    return dict(found["spec"]["limits"][0])


async def test_companion_is_created_and_the_compute_key_added_then_no_calls_at_rest() -> None:
    world = World()
    fake = setup(world, defaultRequests={"cpu": "100m"})
    await world.reconcile("team-a")
    assert fake.calls == [("list", "team-a"), ("create", "team-a")]
    assert container(fake) == {"type": "Container", "defaultRequest": {"cpu": "100m"}}
    assert world.quotas.hard("team-a") == {"pods": "10", "configmaps": "50", "requests.cpu": "500m"}
    assert "NeedsDefaultRequests" not in world.events.reasons("team-a")
    await world.reconcile("team-a")
    await world.reconcile("team-a")
    assert fake.calls == [("list", "team-a"), ("create", "team-a")]  # nothing at rest


async def test_changed_defaults_patch_conditionally_and_equal_ones_write_nothing() -> None:
    world = World()
    fake = setup(world, defaultRequests={"cpu": "0.1"})
    fake.put(
        "team-a", "dynquota", {"type": "Container", "defaultRequest": {"cpu": "100m"}}, LABELLED
    )
    await world.reconcile("team-a")
    assert fake.calls == [("list", "team-a")]  # 0.1 == 100m: in place already
    world.op.on_policy(
        None, {**policy(), "spec": {**policy()["spec"], "defaultRequests": {"cpu": "250m"}}}
    )
    await world.reconcile("team-a")
    assert fake.calls[1:] == [("list", "team-a"), ("patch", "team-a")]
    assert container(fake) == {"type": "Container", "defaultRequest": {"cpu": "250m"}}


async def test_a_foreign_limit_range_named_dynquota_is_never_written() -> None:
    world = World()
    fake = setup(world, defaultRequests={"cpu": "100m"})
    theirs = {"type": "Container", "defaultRequest": {"memory": "32Mi"}}
    fake.put("team-a", "dynquota", theirs, {})
    await world.reconcile("team-a")
    await world.reconcile("team-a")
    assert [verb for verb, _ in fake.calls] == ["list", "list"]  # no create, no patch
    assert container(fake) == theirs
    assert world.events.reasons("team-a").count("ForeignLimitRange") == 1
    assert "NeedsDefaultRequests" in world.events.reasons("team-a")
    assert "requests.cpu" not in world.quotas.hard("team-a")


async def test_dry_run_writes_no_limit_range_and_holds_the_key() -> None:
    world = World()
    fake = setup(world, dry_run=True, defaultRequests={"cpu": "100m"})
    await world.reconcile("team-a")
    assert fake.calls == [("list", "team-a")]
    assert "requests.cpu" not in world.op.views["team-a"].hard
    # held, not in the quota: no usage to know, so no usage_unknown series (docs/metrics.md)
    labels = {"namespace": "team-a", "resource": "requests.cpu"}
    assert world.op.metrics.registry.get_sample_value("dynquota_usage_unknown", labels) is None
    assert any(
        r == "NeedsDefaultRequests" and m.startswith("(dry run) requests.cpu not added")
        for _, _, r, m in world.events.posted
    )


async def test_forbidden_create_holds_the_key_and_the_quota_goes_on() -> None:
    world = World()
    fake = setup(world, defaultRequests={"cpu": "100m"})
    fake.fail.append(ForbiddenError(403, "Forbidden", "limitranges is forbidden"))
    outcome = await world.reconcile("team-a")
    assert outcome.retry is False
    assert world.quotas.hard("team-a") == {"pods": "10", "configmaps": "50"}
    assert "NeedsDefaultRequests" in world.events.reasons("team-a")


async def test_no_write_before_the_policies_are_listed() -> None:
    world = World()
    world.op.cluster.policies_listed = False
    fake = setup(world, defaultRequests={"cpu": "100m"})
    await world.reconcile("team-a")
    assert "create" not in [verb for verb, _ in fake.calls]


async def test_a_recreated_namespace_gets_its_companion_again_at_once() -> None:
    """What was in place in a deleted namespace is forgotten with it: the namespace created
    again under the same name (no compute key to add, so nothing else forces a LIST) gets
    its companion at its first reconcile, not after the 10-minute re-check."""
    world = World()
    world.op.companions.limit_ranges = fake = FakeLimitRanges()
    world.op.on_policy(
        None, {**policy(), "spec": {**policy()["spec"], "defaultRequests": {"cpu": "100m"}}}
    )
    world.op.on_namespace(None, namespace("team-a"))
    await world.reconcile("team-a")
    assert fake.calls == [("list", "team-a"), ("create", "team-a")]
    world.op.on_namespace("DELETED", namespace("team-a"))
    del fake.objects["team-a"], world.quotas.objects["team-a"]  # gone with the namespace
    world.op.on_namespace("ADDED", namespace("team-a", rv=7))
    await world.reconcile("team-a")
    assert fake.calls[2:] == [("list", "team-a"), ("create", "team-a")]
    assert container(fake) == {"type": "Container", "defaultRequest": {"cpu": "100m"}}


async def test_a_companion_deleted_by_hand_is_restored_by_its_watch_event() -> None:
    world = World()
    fake = setup(world, defaultRequests={"cpu": "100m"})
    await world.reconcile("team-a")
    assert fake.calls == [("list", "team-a"), ("create", "team-a")]
    deleted = fake.objects["team-a"].pop()
    deleted["metadata"]["namespace"] = "team-a"
    world.op.on_limit_range("DELETED", deleted)
    assert "team-a" in world.op.queue._queued  # decided again at once
    other = {"metadata": {"name": "team-defaults", "namespace": "team-a"}}
    world.op.on_limit_range("ADDED", other)  # not a companion: ignored
    await world.reconcile("team-a")
    assert fake.calls[2:] == [("list", "team-a"), ("create", "team-a")]
    assert container(fake) == {"type": "Container", "defaultRequest": {"cpu": "100m"}}
    await world.reconcile("team-a")
    assert len(fake.calls) == 4  # confirmed again: nothing at rest
