"""Issue 16 on the operator side, against fakes at the kube/ ports: dry run releases the
managed quota (and enforcing again creates it), the tenant line and ``QuotaAtLimit``, and the
per-namespace ``dynquota_overrides_active`` series."""

from __future__ import annotations

from typing import Any

import pytest

from dynquota._k8s.errors import ApiError

from .fakes import T0, World, namespace, policy, setup_team

RELEASED = (
    "policy p is in dry run (spec.dryRun): dynquota enforces nothing in this namespace: the "
    "managed ResourceQuota dynquota was released (deleted); it would set configmaps=50, "
    "pods=20. Leaving dry run creates it again from current usage"
)


@pytest.fixture
def world() -> World:
    return World()


def sample(world: World, name: str, **labels: str) -> float | None:
    return world.op.metrics.registry.get_sample_value(name, labels)


def with_override(body: dict[str, Any], **override: Any) -> dict[str, Any]:
    body["spec"]["override"] = override
    return body


async def test_policy_dry_run_releases_the_quota_then_enforcing_creates_it_again(
    world: World,
) -> None:
    await setup_team(world, pods=14)
    await world.reconcile("team-a")
    uid = world.quotas.objects["team-a"]["metadata"]["uid"]
    assert world.quotas.hard("team-a") == {"pods": "20", "configmaps": "50"}

    uids: list[str | None] = []
    delete = world.quotas.delete

    async def recording_delete(ns: str, uid: str | None = None) -> bool:
        uids.append(uid)
        return await delete(ns, uid)

    world.quotas.delete = recording_delete  # type: ignore[method-assign]
    world.op.on_policy(None, policy(dry_run=True, generation=2))
    await world.reconcile("team-a")
    assert uids == [uid]  # the uid precondition
    assert "team-a" not in world.quotas.objects
    assert world.quotas.writes[-1] == ("delete", "team-a")
    assert world.events.posted[-1] == ("team-a", "Normal", "QuotaReleased", RELEASED)
    assert sample(world, "dynquota_quota_deletions_total", cause="dry-run") == 1
    assert sample(world, "dynquota_reconciles_total", result="dry-run") == 1

    # afterwards it only simulates: usage grows, nothing is written
    writes = len(world.quotas.writes)
    world.usage.counts[("team-a", "pods")] = 40
    world.clock.now = T0 + 120
    await world.reconcile("team-a")
    assert len(world.quotas.writes) == writes
    assert world.op.views["team-a"].hard["pods"] == 56
    assert world.op.views["team-a"].dry_run

    # enforcing again: created from current usage (T(40) = 56), never below it
    world.op.on_policy(None, policy(dry_run=False, generation=3))
    world.clock.now = T0 + 130
    await world.reconcile("team-a")
    assert world.quotas.writes[-1] == ("create", "team-a")
    assert world.quotas.hard("team-a") == {"pods": "56", "configmaps": "50"}
    assert world.events.reasons("team-a")[-1] == "Resized"


async def test_a_release_caused_by_a_label_change_is_a_warning_naming_who_can_restore_it(
    world: World,
) -> None:
    """Issue 23: the namespace leaves its enforcing policy (its selector label removed) and
    falls to an audit-only policy: the release is a Warning that says which policy governed
    it and who can restore it, not a Normal Event."""
    world.op.on_policy(None, policy("audit", dry_run=True))
    world.op.on_policy(
        None, policy("team", selector={"matchLabels": {"dynquota.io/tier": "a"}}, priority=10)
    )
    world.op.on_namespace(None, namespace("team-a", {"dynquota.io/tier": "a"}))
    world.usage.counts[("team-a", "pods")] = 14
    await world.reconcile("team-a")
    assert world.quotas.hard("team-a") == {"pods": "20", "configmaps": "50"}
    world.op.on_namespace("MODIFIED", namespace("team-a", {}, rv=2))
    await world.reconcile("team-a")
    assert "team-a" not in world.quotas.objects
    assert world.events.posted[-1] == (
        "team-a",
        "Warning",
        "QuotaReleased",
        RELEASED.replace("policy p ", "policy audit ")
        + "; policy team governed this namespace until its labels (or the policies) changed: "
        "who may update dynamicquotapolicies.dynquota.io can restore it",
    )


async def test_global_dry_run_releases_with_its_own_words() -> None:
    world = World(dry_run=True)
    world.quotas.put("team-a", {"pods": "20", "configmaps": "50"})
    await setup_team(world, pods=14)
    await world.reconcile("team-a")
    assert world.quotas.writes == [("delete", "team-a")]
    _, type_, reason, message = world.events.posted[-1]
    assert (type_, reason) == ("Normal", "QuotaReleased")
    assert message.startswith(
        "the operator is in dry run (operator.dryRun): dynquota enforces nothing"
    )
    await world.reconcile("team-a")
    assert world.quotas.writes == [("delete", "team-a")]  # once


async def test_release_waits_for_positive_knowledge_like_every_delete(world: World) -> None:
    await setup_team(world, pods=14, dry_run=True)
    world.quotas.put("team-a", {"pods": "20", "configmaps": "50"})
    world.usage.fresh = False  # informers stale: a delete shrinks, so it is held
    outcome = await world.reconcile("team-a")
    assert outcome.retry
    assert world.quotas.writes == []
    assert sample(world, "dynquota_writes_held_total", reason="informers-stale") == 1
    world.usage.fresh = True
    world.leader.valid_for = 1.0  # the Lease could lapse during the delete
    await world.reconcile("team-a")
    assert world.quotas.writes == []
    assert sample(world, "dynquota_writes_held_total", reason="lease-not-held") == 1
    world.leader.valid_for = float("inf")
    await world.reconcile("team-a")
    assert world.quotas.writes == [("delete", "team-a")]


async def test_frozen_namespace_in_dry_run_keeps_its_quota() -> None:
    world = World(dry_run=True)
    world.quotas.put("team-a", {"pods": "20", "configmaps": "50"})
    bad = policy()
    bad["spec"]["resources"]["pods"]["minimum"] = 500  # > maximum 100: invalid
    world.op.on_policy(None, bad)
    world.op.on_namespace(None, namespace("team-a"))
    await world.reconcile("team-a")
    assert world.quotas.writes == []


async def test_at_limit_line_warning_once_and_help_url() -> None:
    world = World(tenant_help_url="https://wiki.example.com/quota")
    await setup_team(world, pods=14)
    await world.reconcile("team-a")  # hard 20
    world.usage.counts[("team-a", "pods")] = 20
    world.clock.now = T0 + 10
    await world.reconcile("team-a")
    line = world.quotas.annotations("team-a")["dynquota.io/message"]
    assert line == (
        "2027-01-15T08:00:10Z: pods at its limit (used 20 of hard 20): next automatic raise at "
        "2027-01-15T08:01:00Z; for more room now: kubectl -n team-a annotate resourcequota "
        "dynquota dynquota.io/override=max (every resource to its policy maximum for 168h). "
        "Help: https://wiki.example.com/quota"
    )
    warnings = [e for e in world.events.posted if e[2] == "QuotaAtLimit"]
    assert warnings == [("team-a", "Warning", "QuotaAtLimit", line.split(": ", 1)[1])]
    writes = len(world.quotas.writes)
    for step in (20, 30, 40):  # at rest: no write, no second Warning
        world.clock.now = T0 + step
        await world.reconcile("team-a")
    assert len(world.quotas.writes) == writes
    assert len([e for e in world.events.posted if e[2] == "QuotaAtLimit"]) == 1


async def test_overrides_active_is_per_namespace_and_disallowed_policy_refuses() -> None:
    world = World()
    world.op.on_policy(None, with_override(policy(), allowed=False))
    world.op.on_namespace(None, namespace("team-a"))
    world.usage.counts[("team-a", "pods")] = 14
    await world.reconcile("team-a")
    world.quotas.objects["team-a"]["metadata"]["annotations"]["dynquota.io/override"] = "max"
    world.clock.now = T0 + 5
    await world.reconcile("team-a")
    assert world.quotas.hard("team-a")["pods"] == "20"
    assert world.events.posted[-1] == (
        "team-a",
        "Warning",
        "OverrideRejected",
        "dynquota.io/override=max not granted: policy p does not allow overrides "
        "(spec.override.allowed: false); ask the platform team",
    )
    assert sample(world, "dynquota_overrides_active", namespace="team-a") is None
    # the policy allows it again: granted, and the namespace has its series
    world.op.on_policy(None, with_override(policy(generation=2), allowed=True, ttl="1h"))
    world.clock.now = T0 + 10
    await world.reconcile("team-a")
    assert world.quotas.hard("team-a")["pods"] == "100"
    ann = world.quotas.annotations("team-a")
    assert ann["dynquota.io/override-expires-at"] == "2027-01-15T09:00:10Z"  # policy ttl 1h
    assert sample(world, "dynquota_overrides_active", namespace="team-a") == 1
    world.op.on_namespace("DELETED", namespace("team-a", rv=5))
    assert sample(world, "dynquota_overrides_active", namespace="team-a") is None


async def test_a_peers_release_is_not_taken_for_someone_elses_delete(world: World) -> None:
    """A standby sees the leader's release as a DELETED event: when it later leads and the
    namespace enforces again, the create is a plain Resized, not QuotaRecreated."""
    await setup_team(world, pods=14, dry_run=True)
    world.quotas.put("team-a", {"pods": "20", "configmaps": "50"})
    gone = dict(world.quotas.objects.pop("team-a"))
    world.op.on_quota("DELETED", gone)  # deleted by the (other) leader, not by this replica
    world.op.on_policy(None, policy(dry_run=False, generation=2))
    await world.reconcile("team-a")
    assert world.quotas.writes == [("create", "team-a")]
    assert world.events.reasons("team-a") == ["Resized"]


async def test_a_refused_release_is_reported_not_retried_in_a_loop(world: World) -> None:
    await setup_team(world, pods=14, dry_run=True)
    world.quotas.put("team-a", {"pods": "20", "configmaps": "50"})

    async def refused(ns: str, uid: str | None = None) -> bool:
        raise ApiError(403, "Forbidden", "denied by policy")

    world.quotas.delete = refused  # type: ignore[method-assign]
    outcome = await world.reconcile("team-a")
    assert not outcome.retry
    assert "team-a" in world.quotas.objects
    assert world.events.posted[-1] == (
        "team-a",
        "Warning",
        "QuotaWriteFailed",
        "release (delete) of the managed quota refused by the apiserver (403 Forbidden): "
        "denied by policy",
    )
    assert sample(world, "dynquota_reconciles_total", result="invalid") == 1
