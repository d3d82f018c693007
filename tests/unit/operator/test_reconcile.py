"""The operator's reconcile, kill switch and policy status against fakes at the kube/ ports."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest

from dynquota._k8s.errors import ApiError, ConflictError, ForbiddenError
from dynquota._k8s.workqueue import Outcome
from dynquota.kube.quotas import QuotaSnapshot
from dynquota.operator.apply import REFUSED_RETRY
from dynquota.operator.reporting import NEW_VALUE_AFTER
from dynquota.testing.wait import async_wait_until

from .fakes import (
    T0,
    FakeQuotas,
    World,
    namespace,
    policy,
    policy_list,
    setup_team,
)


async def test_new_namespace_gets_a_quota_at_target_with_state(world: World) -> None:
    await setup_team(world, pods=14)
    outcome = await world.reconcile("team-a")
    assert world.quotas.writes == [("create", "team-a")]
    assert world.quotas.hard("team-a") == {"pods": "20", "configmaps": "50"}
    ann = world.quotas.annotations("team-a")
    assert ann["dynquota.io/last-upscale.pods"] == "2027-01-15T08:00:00Z"
    assert ann["dynquota.io/last-change.pods"] == "2027-01-15T08:00:00Z"
    assert ann["dynquota.io/hard.pods"] == "20"
    assert ann["dynquota.io/policy"] == "p"
    assert world.events.posted == [
        (
            "team-a",
            "Normal",
            "Resized",
            "create pods 20: usage 14, buffer 40%; "
            "create configmaps 50: usage 0, buffer 40%, at minimum 50",
        )
    ]
    assert outcome.retry is False


async def test_fixed_point_means_no_write_and_restart_too(world: World) -> None:
    await setup_team(world, pods=14)
    await world.reconcile("team-a")
    await world.reconcile("team-a")
    await world.reconcile("team-a")
    assert world.quotas.writes == [("create", "team-a")]
    # a restarted operator (no memory) finds the fixed point too
    world.clock.now += 30
    world.op = world.new_operator()
    await setup_team(world, pods=14)
    await world.reconcile("team-a")
    assert world.quotas.writes == [("create", "team-a")]


def sample(world: World, name: str, **labels: str) -> float | None:
    """A sample of the operator's registry (``None``: no such series)."""
    return world.op.metrics.registry.get_sample_value(name, labels)


async def test_upscale_waits_for_the_cooldown_then_steps(world: World) -> None:
    await setup_team(world, pods=14)
    await world.reconcile("team-a")  # hard 20 at T0
    world.usage.counts[("team-a", "pods")] = 20
    world.clock.now = T0 + 10
    outcome = await world.reconcile("team-a")
    assert world.quotas.hard("team-a")["pods"] == "20"
    assert outcome.requeue_at == T0 + 60  # exactly at lastUpscale + upscaleCooldown
    # usage 20 of hard 20: the tenant line is written once during the cooldown
    assert world.quotas.writes == [("create", "team-a"), ("patch", "team-a")]
    assert world.quotas.annotations("team-a")["dynquota.io/message"].startswith(
        "2027-01-15T08:00:10Z: pods at its limit (used 20 of hard 20): next automatic raise at "
        "2027-01-15T08:01:00Z; for more room now: kubectl -n team-a annotate resourcequota "
        "dynquota dynquota.io/override=max (every resource to its policy maximum for 168h)."
    )
    world.clock.now = T0 + 60
    await world.reconcile("team-a")
    assert world.quotas.hard("team-a")["pods"] == "28"
    assert world.quotas.writes == [("create", "team-a"), ("patch", "team-a"), ("patch", "team-a")]
    assert "dynquota.io/message" not in world.quotas.annotations("team-a")  # with the resize
    assert world.events.posted[-1][2:] == (
        "Resized",
        "upscale pods 20->28: usage 20, buffer 40%",
    )
    assert world.op.metrics.resizes.labels("up", "upscale")._value.get() == 1


async def test_status_used_above_the_tally_counts_after_a_sync_period_and_drift_is_reported(
    world: World,
) -> None:
    """Issue 27: status.used above the tally for less than the quota controller's sync period
    is taken as phantom charges (creates that failed after admission charged them): hard is
    not raised on them; past the sync period the recount did not lower it, so it counts."""
    await setup_team(world, pods=14)
    await world.reconcile("team-a")
    assert world.quotas.hard("team-a")["pods"] == "20"
    world.quotas.set_used("team-a", {"pods": "20"})
    world.clock.now = T0 + 60
    await world.reconcile("team-a")
    assert world.quotas.hard("team-a")["pods"] == "20"  # U = tally 14: no raise on phantoms
    # (read as a scrape reads it: the per-key series are set when collected)
    drift = {"namespace": "team-a", "resource": "pods", "enforcement": "enforced"}
    assert world.op.metrics.registry.get_sample_value("dynquota_drift", drift) == -6
    assert world.op.views["team-a"].usage["pods"] == 14
    world.clock.now = T0 + 60 + world.op.settings.quota_sync_period
    await world.reconcile("team-a")
    assert world.quotas.hard("team-a")["pods"] == "28"  # U = max(14, 20)
    assert world.op.views["team-a"].usage["pods"] == 20


async def test_a_tally_change_confirming_a_phantom_charge_decides_a_quiet_namespace_at_once(
    world: World,
) -> None:
    """Admission's charge (the quota's ``status.used``) often reaches the operator before the
    pod's own event: the first run of a quiet namespace takes it as phantom and raises
    nothing; the pod's tally change then runs the namespace at once, not at the end of the
    coalescing window (the scale benchmark's idle reaction: p50 106 ms before)."""
    await setup_team(world, pods=14)
    await world.reconcile("team-a")
    assert world.quotas.hard("team-a")["pods"] == "20"
    added: list[tuple[str, str]] = []
    world.op.queue.add = lambda key: added.append(("add", key))  # type: ignore[method-assign]
    world.op.queue.add_now = lambda key: added.append(("now", key))  # type: ignore[method-assign]
    world.quotas.set_used("team-a", {"pods": "20"})
    world.clock.now = T0 + 60
    await world.reconcile("team-a")  # a trailing run (not the leading edge): nothing to confirm
    world.op.on_usage_change("team-a", "pods")
    assert added == [("add", "team-a")]
    world.op.queue.leading = lambda key: True  # type: ignore[method-assign]
    await world.reconcile("team-a")  # the first run of a quiet spell: pods taken as phantom
    assert world.quotas.hard("team-a")["pods"] == "20"
    world.op.on_usage_change("team-a", "configmaps")  # not the phantom key
    world.usage.counts[("team-a", "pods")] = 20
    world.op.on_usage_change("team-a", "pods")  # confirms it: at once, and only once
    world.op.on_usage_change("team-a", "pods")
    assert added[1:] == [("add", "team-a"), ("now", "team-a"), ("add", "team-a")]
    await world.reconcile("team-a")
    assert world.quotas.hard("team-a")["pods"] == "28"


async def test_phantom_charges_hold_a_downscale_at_status_used(world: World) -> None:
    """A downscale never takes hard below phantom charges (every create would be refused
    until the recount), and never raises hard to them."""
    await setup_team(world, pods=50)
    await world.reconcile("team-a")  # hard 70
    world.usage.counts[("team-a", "pods")] = 5
    world.quotas.set_used("team-a", {"pods": "60"})
    world.clock.now = T0 + 400
    world.op.on_usage_change("team-a", "pods")
    world.clock.now = T0 + 800
    await world.reconcile("team-a")
    assert world.quotas.hard("team-a")["pods"] == "60"
    assert world.events.posted[-1][3] == (
        "downscale pods 70->60: peak 5 over 5m, buffer 40%, at minimum 10, held at status.used "
        "60 (charges the quota controller has not recounted yet)"
    )


async def test_downscale_after_the_window_at_the_exact_instant(world: World) -> None:
    await setup_team(world, pods=50)
    await world.reconcile("team-a")  # hard 70
    world.usage.counts[("team-a", "pods")] = 5
    world.clock.now = T0 + 100
    world.op.on_usage_change("team-a", "pods")  # the informer saw the drop at T0+100
    outcome = await world.reconcile("team-a")
    assert world.quotas.hard("team-a")["pods"] == "70"
    # peak 50 stays in the 300 s window until T0+100+300
    assert outcome.requeue_at == T0 + 400
    world.clock.now = T0 + 400
    await world.reconcile("team-a")
    assert world.quotas.hard("team-a")["pods"] == "10"
    assert (
        world.events.posted[-1][3]
        == "downscale pods 70->10: peak 5 over 5m, buffer 40%, at minimum 10"
    )


async def test_spec_hard_edit_is_reverted_and_foreign_keys_removed(world: World) -> None:
    await setup_team(world, pods=14)
    await world.reconcile("team-a")
    world.quotas.objects["team-a"]["spec"]["hard"]["pods"] = "500"
    world.quotas.objects["team-a"]["spec"]["hard"]["secrets"] = "3"
    before = world.quotas.annotations("team-a")
    await world.reconcile("team-a")
    assert world.quotas.hard("team-a") == {"pods": "20", "configmaps": "50"}
    assert world.quotas.annotations("team-a") == before  # a revert stamps nothing
    edited = (
        "team-a",
        "Warning",
        "ManualEditReverted",
        "spec.hard was edited directly: pods edited to 500, restored to 20; secrets set to 3, "
        "removed (not tracked by dynquota). dynquota sizes this quota: change its "
        "DynamicQuotaPolicy, or request dynquota.io/override=max",
    )
    assert world.events.posted[1:] == [edited]
    # one Event per occurrence, not once per hour: the same edit again is reported again
    world.quotas.objects["team-a"]["spec"]["hard"]["pods"] = "500"
    world.quotas.objects["team-a"]["spec"]["hard"]["secrets"] = "3"
    await world.reconcile("team-a")
    assert world.events.posted[1:] == [edited, edited]


async def test_quota_deleted_by_someone_is_recreated_with_a_warning(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    await setup_team(world, pods=14)
    await world.reconcile("team-a")
    gone = copy.deepcopy(world.quotas.objects.pop("team-a"))
    world.op.on_quota("DELETED", gone)
    with caplog.at_level("WARNING", logger="dynquota.operator"):
        await world.reconcile("team-a")
    assert world.quotas.writes == [("create", "team-a"), ("create", "team-a")]
    message = (
        "the managed quota was deleted and is re-created (its state is lost, cooldowns "
        "restart; to stop dynquota managing this namespace, label it dynquota.io/managed=false): "
        "create pods 20: usage 14, buffer 40%; "
        "create configmaps 50: usage 0, buffer 40%, at minimum 50"
    )
    assert world.events.posted[-1] == ("team-a", "Warning", "QuotaRecreated", message)
    assert f"QuotaRecreated on ResourceQuota team-a/dynquota: {message}" in caplog.messages


async def test_a_quota_deleted_before_its_event_arrives_is_recreated_with_the_warning(
    world: World,
) -> None:
    """A reconcile runs after someone deleted the quota but before the watch delivered the
    DELETED event (CI, under load), and reads it (the watch has not shown the operator's last
    write yet): the read finds nothing while the watch still holds the managed quota, so the
    create is a re-creation, not a first create."""
    await setup_team(world, pods=14)
    await world.reconcile("team-a")
    world.op.on_quota("ADDED", copy.deepcopy(world.quotas.objects["team-a"]))
    world.usage.counts[("team-a", "pods")] = 20
    world.clock.now = T0 + 60
    await world.reconcile("team-a")  # a raise decided from the watch; its event not delivered
    assert world.quotas.writes == [("create", "team-a"), ("patch", "team-a")]
    del world.quotas.objects["team-a"]  # deleted; its DELETED event not delivered yet
    await world.reconcile("team-a")
    assert world.quotas.writes == [("create", "team-a"), ("patch", "team-a"), ("create", "team-a")]
    assert [e[2] for e in world.events.posted].count("QuotaRecreated") == 1
    # the late DELETED event of the old quota re-creates nothing and reports nothing more
    posted = len(world.events.posted)
    world.op.on_quota("DELETED", {**world.quotas.objects["team-a"], "metadata": {
        **world.quotas.objects["team-a"]["metadata"], "uid": "old"}})  # fmt: skip
    await world.reconcile("team-a")
    assert world.quotas.writes == [("create", "team-a"), ("patch", "team-a"), ("create", "team-a")]
    assert len(world.events.posted) == posted


async def test_a_quota_the_operator_never_saw_is_a_first_create(world: World) -> None:
    await setup_team(world, pods=14)
    await world.reconcile("team-a")
    assert "QuotaRecreated" not in [e[2] for e in world.events.posted]
    # re-created: a later create (after dynquota's own delete) is a plain Resized
    world.op.on_namespace("MODIFIED", namespace("team-a", {"dynquota.io/managed": "false"}, rv=2))
    deleted = copy.deepcopy(world.quotas.objects["team-a"])
    await world.reconcile("team-a")
    assert "team-a" not in world.quotas.objects
    world.op.on_quota("DELETED", deleted)  # dynquota's own delete
    world.op.on_namespace("MODIFIED", namespace("team-a", rv=3))
    await world.reconcile("team-a")
    assert world.events.posted[-1][2] == "Resized"


async def test_kill_switch_deletes_are_not_taken_for_someone_elses(world: World) -> None:
    await setup_team(world, pods=14)
    await world.reconcile("team-a")
    deleted = copy.deepcopy(world.quotas.objects["team-a"])
    world.op.switch.state.engaged = True
    assert await world.op.engage_kill_switch() == 1
    world.op.on_quota("DELETED", deleted)
    world.op.switch.state.engaged = False
    await world.reconcile("team-a")
    assert world.quotas.writes[-1] == ("create", "team-a")
    assert world.events.posted[-1][2] == "Resized"


async def test_managed_label_without_effect_is_a_warning_on_the_namespace(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    world.op.on_policy(None, policy())
    world.op.on_namespace(None, namespace("team-a", {"dynquota.io/managed": "no"}))
    with caplog.at_level("WARNING", logger="dynquota.operator"):
        await world.reconcile("team-a")
        await world.reconcile("team-a")  # posted once
    message = (
        'label dynquota.io/managed="no" is not "false": the namespace stays managed '
        '(only "false", in any case, opts a namespace out)'
    )
    warnings = [e for e in world.events.posted if e[1] == "Warning"]
    assert warnings == [("team-a", "Warning", "ManagedLabelIgnored", message)]
    assert caplog.messages == [f"ManagedLabelIgnored on Namespace team-a: {message}"]
    assert world.quotas.writes == [("create", "team-a")]  # still managed
    world.op.on_namespace(None, namespace("team-a", {"dynquota.io/managed": "off"}, rv=2))
    world.clock.now += NEW_VALUE_AFTER
    await world.reconcile("team-a")  # another value: reported (a minute later)
    assert [e[3].split(" ")[1] for e in world.events.posted if e[1] == "Warning"] == [
        'dynquota.io/managed="no"',
        'dynquota.io/managed="off"',
    ]


async def test_foreign_same_named_quota_is_left_alone_and_reported_once(world: World) -> None:
    await setup_team(world, pods=14)
    world.quotas.put(
        "team-a", {"pods": "3"}, labels={}, annotations={"dynquota.io/override": "max"}
    )
    await world.reconcile("team-a")
    await world.reconcile("team-a")
    assert world.quotas.writes == []
    assert world.quotas.hard("team-a") == {"pods": "3"}
    assert world.events.reasons("team-a") == ["ForeignQuota", "OverrideRejected"]


async def test_opted_out_namespace_loses_its_managed_quota(world: World) -> None:
    await setup_team(world, pods=14)
    await world.reconcile("team-a")
    world.op.on_namespace("MODIFIED", namespace("team-a", {"dynquota.io/managed": "false"}, rv=2))
    await world.reconcile("team-a")
    assert world.quotas.writes[-1] == ("delete", "team-a")
    assert "team-a" not in world.quotas.objects
    assert world.events.posted[-1] == (
        "team-a",
        "Warning",
        "QuotaRemoved",
        "the managed ResourceQuota dynquota was deleted: "
        "namespace labelled dynquota.io/managed=false; who may update "
        "dynamicquotapolicies.dynquota.io can restore it (the namespace's labels, or a policy "
        "selecting it)",
    )
    assert world.op.metrics.quota_deletions.labels("unmanaged")._value.get() == 1


async def test_policy_deletion_removes_quotas_rate_limited_logged_and_reported(
    caplog: pytest.LogCaptureFixture,
) -> None:
    world = World(kill_switch_delete_qps=20)
    world.op.on_policy(None, policy())
    names = [f"ns-{i}" for i in range(6)]
    for name in names:
        world.op.on_namespace(None, namespace(name))
        await world.reconcile(name)
    assert sorted(world.quotas.objects) == names
    world.op.on_policy("DELETED", policy())  # `kubectl delete dqp p`
    loop = asyncio.get_running_loop()
    start = loop.time()
    caplog.clear()
    with caplog.at_level("WARNING", logger="dynquota.operator"):
        await asyncio.gather(*(world.reconcile(name) for name in names))
    assert loop.time() - start >= 5 / 20  # 6 deletes, 50 ms apart, not all at once
    assert world.quotas.objects == {}
    removed = [e for e in world.events.posted if e[2] == "QuotaRemoved"]
    assert sorted(removed) == [
        (
            name,
            "Warning",
            "QuotaRemoved",
            "the managed ResourceQuota dynquota was deleted: no policy matches this namespace; "
            "who may update dynamicquotapolicies.dynquota.io can restore it (the namespace's "
            "labels, or a policy selecting it)",
        )
        for name in names
    ]
    assert sorted(caplog.messages) == [
        f"deleted the managed quota of {name}: no policy matches this namespace" for name in names
    ]
    assert world.op.metrics.quota_deletions.labels("unmanaged")._value.get() == 6


async def test_invalid_policy_freezes_the_namespace(world: World) -> None:
    await setup_team(world, pods=14)
    await world.reconcile("team-a")
    bad = policy(name="a-typo", priority=5)
    bad["spec"]["resources"]["count/nodes"] = {"maximum": 3}
    world.op.on_policy(None, bad)
    world.usage.counts[("team-a", "pods")] = 0
    world.clock.now = T0 + 10_000
    await world.reconcile("team-a")
    assert world.quotas.writes == [("create", "team-a")]
    assert world.op.governance("team-a").kind == "frozen"  # type: ignore[union-attr]
    written = await world.op.write_policy_status()
    assert written == 2
    status = dict(world.status.patches)
    assert status["a-typo"]["conditions"][0]["status"] == "False"
    assert status["a-typo"]["conditions"][0]["reason"] == "InvalidSpec"
    assert "count/nodes" in status["a-typo"]["conditions"][0]["message"]
    assert status["a-typo"]["frozenNamespaces"] == 1
    conditions = {c["type"]: c for c in status["a-typo"]["conditions"]}
    assert list(conditions) == ["Valid", "Ready", "Reconciling", "Stalled"]  # + the summary
    assert (conditions["Ready"]["status"], conditions["Ready"]["reason"]) == (
        "False",
        "InvalidSpec",
    )
    assert conditions["Stalled"]["status"] == "True"
    assert status["p"]["namespaces"] == 0
    assert status["p"]["frozenNamespaces"] == 0
    assert await world.op.write_policy_status() == 0  # unchanged: no second write
    invalid = [e for e in world.events.posted if e[2] == "PolicyInvalid"]
    assert len(invalid) == 1
    target_, type_, _, message = invalid[0]
    assert (target_, type_) == ("a-typo", "Warning")
    assert message.startswith(status["a-typo"]["conditions"][0]["message"].split(";")[0])
    assert message.endswith(
        "; it freezes 1 namespaces (their managed quota is left as it is) until it is fixed"
    )
    # once per generation: a new (still invalid) generation is reported again
    world.op.on_namespace(None, namespace("team-b"))
    await world.op.write_policy_status()
    assert len([e for e in world.events.posted if e[2] == "PolicyInvalid"]) == 1
    bad["metadata"]["generation"] = 2
    bad["spec"]["resources"]["count/pods"] = {"maximum": 3}
    world.op.on_policy("MODIFIED", bad)
    await world.op.write_policy_status()
    invalid = [e for e in world.events.posted if e[2] == "PolicyInvalid"]
    assert len(invalid) == 2
    assert invalid[1][3].endswith(
        "; it freezes 2 namespaces (their managed quota is left as it is) until it is fixed"
    )
    assert dict(world.status.patches)["a-typo"]["frozenNamespaces"] == 2


async def test_an_invalid_policy_already_reported_in_its_status_is_not_reported_again(
    world: World,
) -> None:
    bad = policy(name="a-typo")
    bad["spec"]["resources"]["count/nodes"] = {"maximum": 3}
    bad["status"] = {"conditions": [{"type": "Valid", "status": "False", "observedGeneration": 1}]}
    world.op.on_policy(None, bad)
    await world.op.write_policy_status()  # e.g. after a restart or a new leader
    assert [e for e in world.events.posted if e[2] == "PolicyInvalid"] == []


async def test_a_policy_outranked_everywhere_is_shadowed(world: World) -> None:
    world.op.on_policy(None, policy("b-team", priority=0))
    world.op.on_policy(None, policy("a-team", priority=0))  # same priority, sorts first
    world.op.on_policy(None, policy("platform", priority=5, selector={"matchLabels": {"t": "p"}}))
    world.op.on_namespace(None, namespace("ns-1"))
    world.op.on_namespace(None, namespace("ns-2"))
    world.op.on_namespace(None, namespace("ns-3", {"t": "p"}))
    await world.op.write_policy_status()
    status = dict(world.status.patches)
    shadowed = {
        name: next(c for c in s["conditions"] if c["type"] == "Shadowed")
        for name, s in status.items()
    }
    assert (shadowed["b-team"]["status"], shadowed["b-team"]["reason"]) == ("True", "NameTieBreak")
    assert shadowed["b-team"]["message"] == (
        "matches 3 managed namespaces but governs 0: outranked by policy "
        "a-team in 2 (equal priority 0, name a-team sorts first); "
        "platform in 1 (priority 5 > 0)"
    )
    assert (shadowed["a-team"]["status"], shadowed["a-team"]["reason"]) == ("True", "LowerPriority")
    assert shadowed["a-team"]["message"] == (
        "matches 3 managed namespaces but governs 2: outranked by policy "
        "platform in 1 (priority 5 > 0)"
    )
    assert shadowed["platform"]["status"] == "False"
    assert shadowed["platform"]["reason"] == "NotShadowed"
    assert [status[n]["namespaces"] for n in ("a-team", "b-team", "platform")] == [2, 0, 1]
    assert await world.op.write_policy_status() == 0


async def test_policy_status_counts_governed_namespaces(world: World) -> None:
    await setup_team(world)
    world.op.on_namespace(None, namespace("team-b"))
    world.op.on_namespace(None, namespace("kube-public"))
    assert await world.op.write_policy_status() == 1
    name, status = world.status.patches[0]
    assert name == "p"
    assert status["namespaces"] == 2
    assert status["observedGeneration"] == 1
    cond = status["conditions"][0]
    assert (cond["type"], cond["status"], cond["reason"]) == ("Valid", "True", "Valid")
    assert world.op.metrics.managed._value.get() == 2


async def test_a_policy_selecting_on_an_unguarded_key_is_reported_not_frozen() -> None:
    """Issue 23: a policy whose selector uses a key the chart does not guard keeps governing
    (a quota is created) and reports ``Guarded=False`` naming the key."""
    world = World(guarded_label_keys=["owner"])
    world.op.on_policy(None, policy(selector={"matchLabels": {"team": "a", "owner": "b"}}))
    world.op.on_namespace(None, namespace("team-a", {"team": "a", "owner": "b"}))
    await world.reconcile("team-a")
    assert world.quotas.hard("team-a") == {"pods": "10", "configmaps": "50"}
    await world.op.write_policy_status()
    ((_, status),) = world.status.patches
    types = [c["type"] for c in status["conditions"]]
    assert types == [
        "Valid", "Shadowed", "Guarded", "QuotaControllerStalled", "Ready", "Reconciling", "Stalled"
    ]  # fmt: skip
    stalled = status["conditions"][3]
    assert (stalled["status"], stalled["reason"]) == ("False", "Running")
    guarded = status["conditions"][2]
    assert (guarded["status"], guarded["reason"]) == ("False", "UnguardedSelector")
    assert guarded["message"].startswith("namespaceSelector uses the label team, which is not")


async def test_dry_run_writes_nothing_and_reports_a_simulated_quota() -> None:
    world = World(dry_run=True)
    await setup_team(world, pods=14)
    await world.reconcile("team-a")
    world.usage.counts[("team-a", "pods")] = 20
    world.clock.now = T0 + 60
    await world.reconcile("team-a")
    assert world.quotas.writes == []
    assert world.op.views["team-a"].hard["pods"] == 28
    assert [m for _, _, _, m in world.events.posted] == [
        "(dry run) create pods 20: usage 14, buffer 40%; "
        "create configmaps 50: usage 0, buffer 40%, at minimum 50",
        "(dry run) upscale pods 20->28: usage 20, buffer 40%",
    ]


async def test_override_grants_maximum_then_expires_to_the_peak_target() -> None:
    world = World(override_ttl="120s")
    await setup_team(world, pods=14)
    await world.reconcile("team-a")
    world.quotas.objects["team-a"]["metadata"]["annotations"]["dynquota.io/override"] = "max"
    world.clock.now = T0 + 5
    outcome = await world.reconcile("team-a")
    ann = world.quotas.annotations("team-a")
    assert world.quotas.hard("team-a")["pods"] == "100"
    assert ann["dynquota.io/override-granted-at"] == "2027-01-15T08:00:05Z"
    assert ann["dynquota.io/override-expires-at"] == "2027-01-15T08:02:05Z"
    assert outcome.requeue_at == T0 + 125
    assert world.events.reasons("team-a")[-1] == "OverrideGranted"
    assert sample(world, "dynquota_overrides_active", namespace="team-a") == 1
    world.clock.now = T0 + 125
    await world.reconcile("team-a")
    ann = world.quotas.annotations("team-a")
    assert world.quotas.hard("team-a")["pods"] == "20"
    assert "dynquota.io/override" not in ann
    assert "dynquota.io/override-granted-at" not in ann
    assert world.events.reasons("team-a")[-1] == "OverrideExpired"
    # the series exists only while the override is active
    assert sample(world, "dynquota_overrides_active", namespace="team-a") is None


async def test_malformed_override_is_warned_once_per_value_and_no_change(world: World) -> None:
    await setup_team(world, pods=14)
    await world.reconcile("team-a")
    world.quotas.objects["team-a"]["metadata"]["annotations"]["dynquota.io/override"] = "forever"
    await world.reconcile("team-a")
    await world.reconcile("team-a")
    assert world.quotas.writes == [("create", "team-a")]
    warnings = [e for e in world.events.posted if e[1] == "Warning"]
    assert len(warnings) == 1
    assert warnings[0][2] == "OverrideRejected"
    # another invalid value within the hour is reported after a minute; the same one is not
    world.quotas.objects["team-a"]["metadata"]["annotations"]["dynquota.io/override"] = "always"
    world.clock.now += NEW_VALUE_AFTER - 1
    await world.reconcile("team-a")
    assert len([e for e in world.events.posted if e[1] == "Warning"]) == 1
    world.clock.now += 1
    await world.reconcile("team-a")
    await world.reconcile("team-a")
    warnings = [e for e in world.events.posted if e[1] == "Warning"]
    assert [w[3].split(" ")[0] for w in warnings] == [
        "dynquota.io/override='forever'",
        "dynquota.io/override='always'",
    ]


async def test_conflict_and_server_errors_retry_validation_errors_do_not(world: World) -> None:
    await setup_team(world, pods=14)
    world.quotas.fail = [ConflictError(409, "AlreadyExists", "x")]
    assert (await world.reconcile("team-a")).retry is True
    world.quotas.fail = [ApiError(500, "InternalError", "etcd")]
    assert (await world.reconcile("team-a")).retry is True  # the GET failed
    original = world.quotas.create

    async def refuse(*args: Any, **kwargs: Any) -> QuotaSnapshot:
        raise ApiError(422, "Invalid", "spec.hard: bad")

    world.quotas.create = refuse  # type: ignore[method-assign]
    first = await world.reconcile("team-a")
    second = await world.reconcile("team-a")
    # not retried with backoff: decided again a minute later (a fixed RBAC or policy lands)
    assert first == Outcome(requeue_at=world.clock.now + REFUSED_RETRY)
    assert second == Outcome(requeue_at=world.clock.now + REFUSED_RETRY)
    failed = [e for e in world.events.posted if e[2] == "QuotaWriteFailed"]
    assert len(failed) == 1
    assert "422 Invalid" in failed[0][3]
    assert world.op.metrics.reconciles.labels("invalid")._value.get() == 2
    world.quotas.create = original  # type: ignore[method-assign]


async def test_a_first_refusal_by_the_confining_policy_is_decided_again_at_once(
    world: World,
) -> None:
    """A create decided on a namespace view one relabel (managed=false) behind the apiserver's
    is refused 403 by the chart's operator-writes policy (make test: an ERROR log and a
    QuotaWriteFailed Event for a race): the first refusal in two REFUSED_RETRY periods is
    retried with backoff and logged as a warning; a second one is reported as before."""
    await setup_team(world, pods=14)
    fence = ForbiddenError(
        403,
        "Forbidden",
        'resourcequotas "dynquota" is forbidden: ValidatingAdmissionPolicy '
        "'dq-operator-writes' with binding 'dq-operator-writes' denied request: dynquota: "
        "the operator's ServiceAccount never creates or updates a ResourceQuota or LimitRange "
        "in a namespace labelled dynquota.io/managed=false",
    )

    async def refuse(*args: Any, **kwargs: Any) -> QuotaSnapshot:
        raise fence

    world.quotas.create = refuse  # type: ignore[method-assign]
    assert (await world.reconcile("team-a")).retry is True
    assert [e for e in world.events.posted if e[2] == "QuotaWriteFailed"] == []
    assert await world.reconcile("team-a") == Outcome(requeue_at=world.clock.now + REFUSED_RETRY)
    assert len([e for e in world.events.posted if e[2] == "QuotaWriteFailed"]) == 1
    world.clock.now += 2 * REFUSED_RETRY + 1  # a while later: the first again
    assert (await world.reconcile("team-a")).retry is True


async def test_a_standby_replica_writes_nothing(world: World) -> None:
    world.leader.is_leader = False
    await setup_team(world, pods=14)
    await world.reconcile("team-a")
    assert world.quotas.writes == []
    assert world.events.posted == []


async def test_kill_switch_deletes_managed_quotas_only_and_release_recreates(world: World) -> None:
    await setup_team(world, pods=14)
    world.op.on_namespace(None, namespace("team-b"))
    await world.reconcile("team-a")
    await world.reconcile("team-b")
    world.quotas.put("other", {"pods": "1"}, labels={})  # unmanaged: must survive
    world.op.on_namespace(
        "MODIFIED", namespace("kube-system", rv=5, annotations={"dynquota.io/kill-switch": "TRUE"})
    )
    await async_wait_until(
        lambda: set(world.quotas.objects) == {"other"}, "managed quotas deleted", timeout=5
    )
    assert world.op.metrics.kill_switch._value.get() == 1
    assert ("kube-system", "Normal", "KillSwitchEngaged") in [e[:3] for e in world.events.posted]
    await world.reconcile("team-a")
    assert "team-a" not in world.quotas.objects  # none created while engaged
    world.op.on_namespace(
        "MODIFIED", namespace("kube-system", rv=6, annotations={"dynquota.io/kill-switch": "sure"})
    )
    await asyncio.sleep(0)
    assert world.op.kill_switch is True  # invalid value: unchanged, warned
    assert "KillSwitchInvalid" in world.events.reasons("kube-system")
    world.op.on_namespace("MODIFIED", namespace("kube-system", rv=7))
    assert world.op.kill_switch is False
    await world.reconcile("team-a")
    await world.reconcile("team-b")
    assert set(world.quotas.objects) == {"other", "team-a", "team-b"}
    await async_wait_until(
        lambda: "KillSwitchReleased" in world.events.reasons("kube-system"), "released event"
    )
    await world.op.stop_background()


async def test_kill_switch_deletes_are_rate_limited() -> None:
    world = World(kill_switch_delete_qps=20)
    world.op.on_policy(None, policy())
    for i in range(6):
        world.quotas.put(f"ns-{i}", {"pods": "10"})
    loop = asyncio.get_running_loop()
    world.op.switch.state.engaged = True
    start = loop.time()
    assert await world.op.engage_kill_switch() == 6
    assert loop.time() - start >= 5 / 20  # 6 deletes, 50 ms apart


class StaleListQuotas(FakeQuotas):
    """After the first list, someone deletes two quotas and a create lands in flight."""

    def __init__(self) -> None:
        super().__init__()
        self.lists = 0

    async def list_managed(self, label_selector: str | None = None) -> list[QuotaSnapshot]:
        found = await super().list_managed()
        self.lists += 1
        if self.lists == 1:
            del self.objects["ns-0"], self.objects["ns-1"]  # deleted by someone else
            self.put("late", {"pods": "10"})  # created after the list
        return found


async def test_kill_switch_sweep_counts_exactly_what_it_deleted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    world = World(kill_switch_delete_qps=1000)
    world.quotas = StaleListQuotas()
    world.op = world.new_operator()
    world.op.on_policy(None, policy())
    names = [f"ns-{i}" for i in range(8)]
    for name in names:
        world.quotas.put(name, {"pods": "10"})
        world.op.on_namespace(None, namespace(name))
    world.op.switch.state.engaged = True
    with caplog.at_level("WARNING", logger="dynquota.operator"):
        deleted = await world.op.engage_kill_switch()
    assert deleted == 7  # ns-2..ns-7 and the late one; ns-0 and ns-1 were already gone
    assert world.quotas.objects == {}
    assert world.quotas.lists == 3  # the stale list, the late quota, then empty
    assert caplog.messages == [
        *(f"deleted the managed quota of ns-{i}: kill switch engaged" for i in range(2, 8)),
        "deleted the managed quota of late: kill switch engaged",
        "kill switch: deleted 7 managed quotas (2 already gone); none is left",
    ]
    assert world.op.metrics.quota_deletions.labels("kill-switch")._value.get() == 7


async def test_kill_switch_record_is_exact_while_the_queue_runs(
    caplog: pytest.LogCaptureFixture,
) -> None:
    world = World(kill_switch_delete_qps=1000)
    world.op.on_policy(None, policy())
    names = [f"ns-{i}" for i in range(5)]
    for name in names:
        world.op.on_namespace(None, namespace(name))
    world.op.queue.start()
    await world.op.queue.wait_idle(timeout=5)
    assert sorted(world.quotas.objects) == names
    caplog.clear()
    with caplog.at_level("WARNING", logger="dynquota.operator"):
        # every namespace is queued with the switch: their decisions must not race the sweep
        world.op.on_namespace(
            "MODIFIED",
            namespace("kube-system", rv=5, annotations={"dynquota.io/kill-switch": "true"}),
        )
        await async_wait_until(
            lambda: any(m.startswith("kill switch: deleted") for m in caplog.messages),
            "sweep summary",
            timeout=5,
        )
        await world.op.queue.wait_idle(timeout=5)
    assert world.quotas.objects == {}
    deletions = [m for m in caplog.messages if m.startswith("deleted the managed quota of")]
    assert sorted(deletions) == [
        f"deleted the managed quota of {name}: kill switch engaged" for name in names
    ]
    assert "kill switch: deleted 5 managed quotas (0 already gone); none is left" in (
        caplog.messages
    )
    assert world.op.metrics.quota_deletions.labels("kill-switch")._value.get() == 5
    await world.op.queue.stop()
    await world.op.stop_background()


async def test_reconciles_leave_deletes_to_a_running_kill_switch_sweep(world: World) -> None:
    await setup_team(world, pods=14)
    await world.reconcile("team-a")
    world.op.switch.state.engaged = True
    world.op.switch.state.sweeping = True
    assert await world.reconcile("team-a") == Outcome()
    assert "team-a" in world.quotas.objects
    world.op.switch.state.sweeping = False  # sweep over: a straggler is deleted by its decision
    await world.reconcile("team-a")
    assert "team-a" not in world.quotas.objects
    assert world.op.metrics.quota_deletions.labels("kill-switch")._value.get() == 1


async def test_a_burst_of_usage_changes_is_one_decision(world: World) -> None:
    await setup_team(world, pods=14)
    world.op.queue.start()
    await world.op.queue.wait_idle(timeout=5)  # kube-system and team-a (created)
    runs = world.op.queue.runs
    world.clock.now = T0 + 60
    for count in range(15, 95):  # 80 events
        world.usage.counts[("team-a", "pods")] = count
        world.op.on_usage_change("team-a", "pods")
    await world.op.queue.wait_idle(timeout=5)
    assert world.op.queue.runs == runs + 1
    assert world.quotas.writes == [("create", "team-a"), ("patch", "team-a")]
    assert world.quotas.hard("team-a")["pods"] == "100"  # T(94) = 132 capped at the maximum
    await world.op.queue.stop()


async def test_deleted_namespace_is_forgotten(world: World) -> None:
    await setup_team(world, pods=14)
    await world.reconcile("team-a")
    world.op.on_namespace("DELETED", namespace("team-a", rv=9))
    assert "team-a" not in world.op.namespaces
    assert "team-a" not in world.op.views
    await world.reconcile("team-a")
    assert world.quotas.writes == [("create", "team-a")]
    # an older listing cannot bring it back
    world.op.on_namespace(None, namespace("team-a", rv=3))
    assert "team-a" not in world.op.namespaces


async def test_terminating_pod_grace_expiry_is_a_requeue_instant(world: World) -> None:
    await setup_team(world, pods=14)
    world.usage.expiry["team-a"] = T0 + 30.5
    outcome = await world.reconcile("team-a")
    assert outcome.requeue_at == T0 + 31


async def test_global_dry_run_kill_switch_deletes_nothing() -> None:
    world = World(dry_run=True)
    world.quotas.put("team-a", {"pods": "10"})
    world.op.switch.state.engaged = True
    assert await world.op.engage_kill_switch() == 0
    assert world.quotas.writes == []


def _world_with_invalid_switch(managed_quotas_exist: bool) -> World:
    world = World()
    op = world.new_operator(listed=False)
    policy_list(op, [])
    op.budgets.on_budget_list([])
    op.switch.state.managed_quotas_exist = managed_quotas_exist
    op.on_namespace(None, namespace("kube-system", annotations={"dynquota.io/kill-switch": "yes"}))
    world.op = op
    return world


async def test_invalid_kill_switch_at_start_with_managed_quotas_acts_as_released() -> None:
    world = _world_with_invalid_switch(managed_quotas_exist=True)
    assert world.op.kill_switch is False
    await setup_team(world, pods=14)
    await world.reconcile("team-a")
    assert world.quotas.writes == [("create", "team-a")]
    await async_wait_until(
        lambda: "KillSwitchInvalid" in world.events.reasons("kube-system"), "warning"
    )
    sample = world.op.metrics.registry.get_sample_value
    assert sample("dynquota_kill_switch_state", {"state": "released"}) == 1
    await world.op.stop_background()


async def test_invalid_kill_switch_at_start_without_quotas_is_unknown_and_writes_nothing() -> None:
    world = _world_with_invalid_switch(managed_quotas_exist=False)
    assert world.op.kill_switch is None
    await setup_team(world, pods=14)
    await world.reconcile("team-a")
    assert world.quotas.writes == []
    sample = world.op.metrics.registry.get_sample_value
    assert sample("dynquota_kill_switch_state", {"state": "unknown"}) == 1
    assert sample("dynquota_kill_switch_state", {"state": "engaged"}) == 0
    # a valid value settles it
    world.op.on_namespace("MODIFIED", namespace("kube-system", rv=9))
    assert world.op.kill_switch is False
    await world.reconcile("team-a")
    assert world.quotas.writes == [("create", "team-a")]
    await world.op.stop_background()


class CountingQuotas(FakeQuotas):
    def __init__(self) -> None:
        super().__init__()
        self.gets = 0

    async def get(self, namespace: str) -> QuotaSnapshot | None:
        self.gets += 1
        return await super().get(namespace)


async def test_a_run_decides_from_the_watched_quota_once_it_shows_the_operators_own_write() -> None:
    world = World()
    world.quotas = quotas = CountingQuotas()
    world.op = world.new_operator()
    await setup_team(world, pods=14)
    await world.reconcile("team-a")  # no watched quota yet: GET (none), create hard 20
    assert (quotas.gets, quotas.writes) == (1, [("create", "team-a")])
    watched = copy.deepcopy(quotas.objects["team-a"])
    world.op.on_quota("ADDED", watched)
    # a crossing: decided from the watch, no GET, the patch conditional on the watched version
    world.usage.counts[("team-a", "pods")] = 20
    world.clock.now = T0 + 60
    await world.reconcile("team-a")
    assert quotas.gets == 1
    assert quotas.patch_versions == [watched["metadata"]["resourceVersion"]]
    assert quotas.hard("team-a")["pods"] == "28"
    # the watch has not shown that patch yet: read afresh (no 409 on a copy known to be old)
    fresh = quotas.objects["team-a"]["metadata"]["resourceVersion"]
    world.usage.counts[("team-a", "pods")] = 28
    world.clock.now = T0 + 120
    await world.reconcile("team-a")
    assert quotas.gets == 2
    assert quotas.patch_versions[1:] == [fresh]
    assert quotas.hard("team-a")["pods"] == "40"
    assert world.op.metrics.write_conflicts.labels("retried")._value.get() == 0
    # the watch shows it, then lags someone else's change: 409, then a GET and a patch on the
    # fresh version
    ours = copy.deepcopy(quotas.objects["team-a"])
    world.op.on_quota("MODIFIED", ours)
    quotas.objects["team-a"]["metadata"]["labels"]["team"] = "a"
    quotas.objects["team-a"]["metadata"]["resourceVersion"] = fresh = str(quotas.rv + 50)
    world.usage.counts[("team-a", "pods")] = 40
    world.clock.now = T0 + 180
    await world.reconcile("team-a")
    assert quotas.gets == 3
    assert quotas.patch_versions[2:] == [ours["metadata"]["resourceVersion"], fresh]
    assert quotas.hard("team-a")["pods"] == "56"
    assert world.op.metrics.write_conflicts.labels("retried")._value.get() == 1
    # anything but a patch (here a delete: the namespace opted out) is decided again from a GET
    world.op.on_quota("MODIFIED", copy.deepcopy(quotas.objects["team-a"]))
    world.op.on_namespace("MODIFIED", namespace("team-a", {"dynquota.io/managed": "false"}, rv=2))
    await world.reconcile("team-a")
    assert quotas.gets == 4
    assert quotas.writes[-1] == ("delete", "team-a")


async def watched_team_at_10_pods() -> tuple[World, CountingQuotas]:
    """team-a created at hard 14 with 10 pods charged, its quota delivered by the watch."""
    world = World()
    world.quotas = quotas = CountingQuotas()
    world.op = world.new_operator()
    await setup_team(world, pods=10)
    await world.reconcile("team-a")  # create: hard 14
    quotas.set_used("team-a", {"pods": "10", "configmaps": "0"})
    world.op.on_quota("ADDED", copy.deepcopy(quotas.objects["team-a"]))
    return world, quotas


async def test_a_tally_ahead_of_the_watched_status_used_is_read_before_deciding() -> None:
    """The pod's event can arrive before the quota's charge of it (two watches): a watched
    copy whose status.used is below the tally is read again, so a charge not yet delivered is
    not taken for an object admitted uncharged (CI: raises 15, 21, 30 instead of 14, 20, 28)."""
    world, quotas = await watched_team_at_10_pods()
    gets = quotas.gets
    quotas.set_used("team-a", {"pods": "11", "configmaps": "0"})  # charged; not delivered yet
    world.usage.counts[("team-a", "pods")] = 11
    world.clock.now = T0 + 60
    await world.reconcile("team-a")
    assert quotas.gets == gets + 1
    assert quotas.hard("team-a")["pods"] == "16"  # ceil(11 * 1.4): not "15 until a recount"


async def test_a_decision_to_write_nothing_stands_on_a_watched_quota_behind_the_tally() -> None:
    """Issue 25: the read above is for a raise, which objects admitted uncharged lower; a
    decision from the watched copy that writes nothing stands (under churn most decisions are
    such, and the charge's own watch event decides again)."""
    world, quotas = await watched_team_at_10_pods()
    gets, writes = quotas.gets, len(quotas.writes)
    quotas.set_used("team-a", {"pods": "9", "configmaps": "0"})  # a delete, recounted
    world.op.on_quota("MODIFIED", copy.deepcopy(quotas.objects["team-a"]))
    quotas.set_used("team-a", {"pods": "10", "configmaps": "0"})  # charged; not delivered yet
    world.usage.counts[("team-a", "pods")] = 10
    world.clock.now = T0 + 60
    await world.reconcile("team-a")
    assert (quotas.gets, len(quotas.writes)) == (gets, writes)
    assert quotas.hard("team-a")["pods"] == "14"
    assert world.op.reporter.view("team-a").usage["pods"] == 10


async def test_the_per_namespace_series_say_enforced_or_dry_run(world: World) -> None:
    """Issue 30: the reporter labels a namespace's series with how its hard is held."""
    await setup_team(world, pods=14)
    world.op.on_policy(None, policy("audit", selector={"matchLabels": {"t": "b"}}, dry_run=True,
                                    priority=10))  # fmt: skip
    world.op.on_namespace(None, namespace("team-b", {"t": "b"}))
    assert world.op.metrics.enforcement("team-a") == "unknown"
    await world.reconcile("team-a")
    await world.reconcile("team-b")
    assert world.op.metrics.enforcement("team-a") == "enforced"
    assert world.op.metrics.enforcement("team-b") == "dry-run"
    labels = {"namespace": "team-b", "resource": "pods", "enforcement": "dry-run"}
    assert world.op.metrics.registry.get_sample_value("dynquota_hard", labels) == 10
