"""Issue 10 ("Fail safe under API faults"), one test per case, against fakes at the kube/
ports. Each was a reproducer of a bug and fails on the code before the
fix."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import Any

import pytest

from dynquota._k8s.errors import ApiError, NotFoundError
from dynquota.kube.quotas import QuotaSnapshot
from dynquota.operator import reconcile as reconcile_module
from dynquota.operator.killswitch import Deletion
from dynquota.testing.wait import async_wait_until

from .test_reconcile import T0, FakeQuotas, World, namespace, policy, policy_list, setup_team

H = 3600


def held(world: World, reason: str) -> float:
    value = world.op.metrics.registry.get_sample_value(
        "dynquota_writes_held_total", {"reason": reason}
    )
    return value or 0.0


def unlisted_world() -> World:
    """A world whose start-up policy LIST has not succeeded (yet)."""
    world = World()
    world.op.policies_listed = False
    return world


# -- case 1: a failed policy list at start-up ------------------------------------------------


async def test_case1_unlisted_policies_hold_the_delete_that_would_lose_an_override() -> None:
    world = unlisted_world()
    state = {
        "dynquota.io/policy": "p",
        "dynquota.io/override": "max",
        "dynquota.io/override-granted-at": "2027-01-15T07:00:00Z",
        "dynquota.io/override-expires-at": "2027-01-22T07:00:00Z",
    }
    world.quotas.put("team-a", {"pods": "100", "configmaps": "2000"}, annotations=state)
    world.op.on_namespace(None, namespace("team-a"))
    outcome = await world.reconcile("team-a")  # no policy known: "unmanaged" -> delete
    assert outcome.retry is True
    assert world.quotas.writes == []
    assert world.events.posted == []
    assert held(world, "policies-unknown") == 1
    # the LIST succeeds: the quota is governed again, nothing was lost
    policy_list(world.op, [policy()])
    await world.reconcile("team-a")
    assert "team-a" in world.quotas.objects
    assert world.quotas.annotations("team-a")["dynquota.io/override"] == "max"
    assert "delete" not in [verb for verb, _ in world.quotas.writes]


async def test_case1_no_create_either_until_policies_are_listed() -> None:
    world = unlisted_world()
    await setup_team(world, pods=14)  # a kopf event delivered the policy before the LIST
    assert (await world.reconcile("team-a")).retry is True
    assert world.quotas.writes == []
    policy_list(world.op, [policy()])
    await world.reconcile("team-a")
    assert world.quotas.writes == [("create", "team-a")]
    assert world.quotas.hard("team-a")["pods"] == "20"


async def test_informers_not_synced_hold_every_write_and_stale_ones_hold_shrinks() -> None:
    world = World()
    await setup_team(world, pods=14)
    world.usage.synced = False
    assert (await world.reconcile("team-a")).retry is True
    assert held(world, "informers-not-synced") == 1
    world.usage.synced = True
    await world.reconcile("team-a")  # hard 20
    world.usage.fresh = False  # the watch broke: tallies may be stale
    world.usage.counts[("team-a", "pods")] = 20
    world.clock.now = T0 + 60
    await world.reconcile("team-a")  # an upscale loosens: allowed
    assert world.quotas.hard("team-a")["pods"] == "28"
    world.usage.counts[("team-a", "pods")] = 1
    world.clock.now = T0 + 100
    await world.reconcile("team-a")  # usage 1 from now on; the window (300 s) still sees 20
    world.clock.now = T0 + 1000
    assert (await world.reconcile("team-a")).retry is True  # a downscale shrinks: held
    assert world.quotas.hard("team-a")["pods"] == "28"
    assert held(world, "informers-stale") == 1
    world.usage.fresh = True
    await world.reconcile("team-a")
    assert world.quotas.hard("team-a")["pods"] == "10"


# -- case 2: leadership fenced by time --------------------------------------------------------


async def test_case2_no_write_starts_unless_the_lease_outlasts_it() -> None:
    world = World()
    await setup_team(world, pods=14)
    world.leader.valid_for = 5.0  # leading, but the lease lapses before a 10 s write could end
    outcome = await world.reconcile("team-a")
    assert outcome.retry is True
    assert world.quotas.writes == []
    assert held(world, "lease-not-held") == 1
    world.leader.valid_for = 11.0
    await world.reconcile("team-a")
    assert world.quotas.writes == [("create", "team-a")]


async def test_case2_the_kill_switch_sweep_stops_when_the_lease_cannot_cover_a_delete() -> None:
    world = World(kill_switch_delete_qps=1000)
    for name in ("ns-0", "ns-1"):
        world.quotas.put(name, {"pods": "10"})
    world.leader.valid_for = 1.0
    world.op.kill_switch = True
    sweep = asyncio.ensure_future(world.op.engage_kill_switch())
    await async_wait_until(lambda: held(world, "lease-not-held") >= 1, "the sweep holds")
    world.leader.is_leader = False  # the renew never came: leadership is lost
    assert await asyncio.wait_for(sweep, 10) == 0
    assert sorted(world.quotas.objects) == ["ns-0", "ns-1"]


class GatedLimiter:
    """A delete rate limiter whose turn comes when the test says so."""

    def __init__(self) -> None:
        self.turn = asyncio.Event()
        self.waiting = 0

    async def acquire(self) -> None:
        self.waiting += 1
        await self.turn.wait()


@pytest.mark.parametrize("change", ["lease", "kill-switch"])
async def test_a_delete_waiting_for_its_turn_checks_the_lease_and_the_switch_again(
    change: str,
) -> None:
    """The Lease (and the kill switch, for its deletes) is checked after the rate limiter's
    wait, not only before it: a delete queued behind a long sweep never lands on a lapsed
    Lease or after the switch was released."""
    world = World()
    world.quotas.put("ns-0", {"pods": "10"})
    world.op.kill_switch = True
    limiter = GatedLimiter()
    world.op._delete_limiter = limiter  # type: ignore[assignment]
    uid = world.quotas.objects["ns-0"]["metadata"]["uid"]
    delete = asyncio.ensure_future(
        world.op._delete_managed("ns-0", uid, "kill-switch", "kill switch engaged")
    )
    await async_wait_until(lambda: limiter.waiting == 1, "the delete waits for its turn")
    if change == "lease":
        world.leader.valid_for = 1.0  # lapses before a 10 s request could end
    else:
        world.op.kill_switch = False
    limiter.turn.set()
    assert await asyncio.wait_for(delete, 5) is Deletion.HELD
    assert sorted(world.quotas.objects) == ["ns-0"]
    assert world.quotas.writes == []


async def test_a_sweep_counts_a_delete_held_back_after_its_wait_as_held_not_gone(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The switch is released while the sweep's delete waits for its turn: nothing is sent,
    and the summary says it was held back, not that the quota was already gone."""
    world = World()
    world.quotas.put("ns-0", {"pods": "10"})
    world.op.kill_switch = True
    limiter = GatedLimiter()
    world.op._delete_limiter = limiter  # type: ignore[assignment]
    with caplog.at_level("WARNING", logger="dynquota.operator"):
        sweep = asyncio.ensure_future(world.op.engage_kill_switch())
        await async_wait_until(lambda: limiter.waiting == 1, "the sweep's delete waits")
        world.op.kill_switch = False
        limiter.turn.set()
        assert await asyncio.wait_for(sweep, 5) == 0
    assert sorted(world.quotas.objects) == ["ns-0"]
    assert world.quotas.writes == []
    assert caplog.messages[-1] == (
        "kill switch: sweep stopped (released) after deleting 0 managed quotas "
        "(0 already gone, 1 held back)"
    )


# -- case 3: a hung call never stalls the queue -----------------------------------------------


class HangingQuotas(FakeQuotas):
    async def get(self, namespace: str) -> QuotaSnapshot | None:
        await asyncio.Event().wait()  # a request that never returns
        raise AssertionError("unreachable")


async def test_case3_a_hung_reconcile_is_abandoned_and_retried(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(reconcile_module, "RECONCILE_TIMEOUT", 0.2)
    world = World()
    world.quotas = HangingQuotas()
    world.op = world.new_operator()
    await setup_team(world, pods=14)
    started = time.monotonic()
    outcome = await world.reconcile("team-a")
    assert outcome.retry is True
    assert time.monotonic() - started < 5
    sample = world.op.metrics.registry.get_sample_value
    assert sample("dynquota_reconciles_total", {"result": "retry"}) == 1


# -- case 4: a policy typo never shortens the peak history --------------------------------------

PODS_24H = {
    "bufferPercent": 40,
    "minimum": 10,
    "maximum": 1000,
    "upscaleCooldown": "5m",
    "downscaleCooldown": "24h",
}


async def _typo_scenario(typo: bool) -> World:
    world = World()
    world.op.on_policy(None, policy(pods=PODS_24H))
    world.op.on_namespace(None, namespace("team-a"))
    world.usage.counts[("team-a", "pods")] = 100
    world.op.on_usage_change("team-a", "pods")
    await world.reconcile("team-a")  # hard 140
    world.clock.now = T0 + 30 * H
    world.usage.counts[("team-a", "pods")] = 10
    world.op.on_usage_change("team-a", "pods")
    await world.reconcile("team-a")
    world.clock.now = T0 + 40 * H
    if typo:
        world.op.on_policy("MODIFIED", policy(pods=dict(PODS_24H, minimum=2000), generation=2))
        await world.reconcile("team-a")  # frozen
    world.clock.now += 60
    world.usage.counts[("team-a", "pods")] = 11
    world.op.on_usage_change("team-a", "pods")
    world.clock.now += 240
    if typo:
        world.op.on_policy("MODIFIED", policy(pods=PODS_24H, generation=3))
    await world.reconcile("team-a")
    return world


async def test_case4_a_policy_typo_does_not_speed_a_downscale_up() -> None:
    clean, typo = await _typo_scenario(False), await _typo_scenario(True)
    assert clean.quotas.hard("team-a")["pods"] == "140"
    assert typo.quotas.hard("team-a")["pods"] == "140"  # was 16: 14 h early
    assert typo.op.peaks.peak("team-a", "pods", typo.clock.now, 24 * H) == 100


# -- case 5: tenant input is bounded ----------------------------------------------------------


async def test_case5_distinct_huge_override_values_keep_memory_and_messages_bounded(
    caplog: pytest.LogCaptureFixture,
) -> None:
    world = World()
    await setup_team(world, pods=5)
    await world.reconcile("team-a")
    for i in range(50):
        value = f"{i}:" + "x" * 200_000
        world.quotas.objects["team-a"]["metadata"]["annotations"]["dynquota.io/override"] = value
        await world.reconcile("team-a")
        world.clock.now += 1
    rejected = [p for p in world.events.posted if p[2] == "OverrideRejected"]
    assert len(rejected) == 1  # a new value at most once a minute (50 values in 50 s)
    assert len(rejected[0][3]) < 400
    assert len(world.op._warned) <= 2
    assert all(len(key[2]) <= 64 for key in world.op._warned)
    assert max(len(m) for m in caplog.messages) < 1000


# -- case 7: a namespace deletion the watch missed ---------------------------------------------


class PhantomQuotas(FakeQuotas):
    def __init__(self, error: ApiError) -> None:
        super().__init__()
        self.error = error
        self.creates = 0

    async def create(
        self, namespace: str, hard: Mapping[str, str], annotations: Mapping[str, str]
    ) -> QuotaSnapshot:
        self.creates += 1
        raise self.error


@pytest.mark.parametrize(
    "error",
    [
        NotFoundError(404, "NotFound", 'namespaces "ghost" not found'),
        ApiError(
            403,
            "Forbidden",
            'resourcequotas "dynquota" is forbidden: unable to create new content in '
            "namespace ghost because it is being terminated",
        ),
    ],
)
async def test_case7_a_vanished_namespace_backs_off_instead_of_spinning(error: ApiError) -> None:
    world = World()
    quotas = PhantomQuotas(error)
    world.quotas = quotas
    world.op = world.new_operator()
    world.op.on_policy(None, policy())
    world.op.on_namespace(None, namespace("ghost"))
    queue = world.op.queue
    queue.start()
    queue.add("ghost")
    await async_wait_until(lambda: quotas.creates >= 3, "three failed creates", timeout=10)
    await async_wait_until(lambda: queue.scheduled("ghost") is not None, "a backoff timer")
    wait = (queue.scheduled("ghost") or 0.0) - world.clock()  # the workqueue's clock
    creates = quotas.creates
    await queue.stop()
    # the third failure waits 0.5 * 2**2 s (exponential backoff), where it used to re-run at once
    assert creates == 3
    assert 1.0 <= wait <= 2.1
    assert world.events.reasons("ghost") == []  # no QuotaWriteFailed noise for a deletion


# -- case 10: once-per-hour Warnings are once per hour ------------------------------------------


async def test_case10_usage_above_maximum_is_posted_once_per_hour_while_usage_churns() -> None:
    world = World()
    world.op.on_policy(None, policy(pods={"maximum": 20}))
    world.op.on_namespace(None, namespace("team-a"))
    for used in range(21, 61):  # 40 decisions in 20 minutes
        world.usage.counts[("team-a", "pods")] = used
        await world.reconcile("team-a")
        world.clock.now += 30
    assert world.events.reasons("team-a").count("UsageAboveMaximum") == 1
    world.clock.now = T0 + H + 1
    await world.reconcile("team-a")
    assert world.events.reasons("team-a").count("UsageAboveMaximum") == 2


# -- conditional writes ----------------------------------------------------------------------


class BusyQuotas(FakeQuotas):
    """Admission charges land between every GET and the patch (``busy`` times)."""

    def __init__(self, busy: int) -> None:
        super().__init__()
        self.busy = busy

    async def get(self, namespace: str) -> QuotaSnapshot | None:
        found = await super().get(namespace)
        if self.busy > 0 and namespace in self.objects:
            self.busy -= 1
            self.rv += 1
            self.objects[namespace]["metadata"]["resourceVersion"] = str(self.rv)
        return found


@pytest.mark.parametrize(("busy", "written"), [(3, True), (4, False)])
async def test_patches_are_conditional_and_retried_three_times_on_conflict(
    busy: int, written: bool
) -> None:
    world = World()
    world.quotas = BusyQuotas(0)
    world.op = world.new_operator()
    await setup_team(world, pods=14)
    await world.reconcile("team-a")  # create, hard 20
    world.usage.counts[("team-a", "pods")] = 20
    world.clock.now = T0 + 60
    world.quotas.busy = busy
    outcome = await world.reconcile("team-a")
    assert len(world.quotas.patch_versions) == min(busy + 1, 4)
    assert all(v is not None for v in world.quotas.patch_versions)
    assert (world.quotas.hard("team-a")["pods"] == "28") is written
    assert outcome.retry is not written
    sample = world.op.metrics.registry.get_sample_value
    retried = sample("dynquota_quota_write_conflicts_total", {"outcome": "retried"})
    assert retried == min(busy, 3)
    gave_up = sample("dynquota_quota_write_conflicts_total", {"outcome": "gave-up"})
    assert (gave_up or 0) == (0 if written else 1)


# -- the kill switch ---------------------------------------------------------------------------


class SwitchReader:
    """``kube-system`` as a consistent GET returns it."""

    def __init__(self, value: str | None) -> None:
        self.value = value
        self.reads = 0

    async def read_namespace(self, name: str) -> dict[str, Any]:
        self.reads += 1
        annotations = {} if self.value is None else {"dynquota.io/kill-switch": self.value}
        return namespace(name, rv=100 + self.reads, annotations=annotations)


def world_with_reader(value: str | None) -> tuple[World, SwitchReader]:
    world = World(kill_switch_delete_qps=1000)
    reader = SwitchReader(value)
    world.op.namespace_reader = reader
    return world, reader


async def test_a_release_seen_in_a_watch_event_creates_nothing_until_a_read_confirms_it() -> None:
    world, reader = world_with_reader("true")
    world.op.on_namespace(
        None, namespace("kube-system", rv=2, annotations={"dynquota.io/kill-switch": "true"})
    )
    await setup_team(world, pods=14)
    # a stale or forged event says released; the consistent read still says engaged
    world.op.on_namespace("MODIFIED", namespace("kube-system", rv=3))
    outcome = await world.reconcile("team-a")
    assert world.quotas.writes == []
    assert outcome.retry is True or world.op.kill_switch is True
    await async_wait_until(lambda: world.op.kill_switch is True, "switch back to engaged")
    assert reader.reads >= 1
    await world.reconcile("team-a")
    assert world.quotas.writes == []
    # now it is really released
    reader.value = "false"
    world.op.on_namespace(
        "MODIFIED",
        namespace("kube-system", rv=200, annotations={"dynquota.io/kill-switch": "false"}),
    )
    await async_wait_until(lambda: world.op._release_confirmed, "release confirmed")
    await world.reconcile("team-a")
    assert world.quotas.writes == [("create", "team-a")]
    await world.op.stop_background()


async def test_a_sweep_started_by_a_watch_event_deletes_only_if_a_read_confirms_it() -> None:
    world, reader = world_with_reader(None)
    world.op.on_policy(None, policy())
    world.quotas.put("team-a", {"pods": "10"})
    world.op.kill_switch = True  # as a (stale) watch event would have set it
    assert await world.op.engage_kill_switch() == 0
    assert "team-a" in world.quotas.objects
    assert world.op.kill_switch is False
    assert reader.reads == 1


class InFlightCreateQuotas(FakeQuotas):
    """The kill switch engages while a create is in flight."""

    def __init__(self, world: World) -> None:
        super().__init__()
        self.world = world

    async def create(
        self, namespace: str, hard: Mapping[str, str], annotations: Mapping[str, str]
    ) -> QuotaSnapshot:
        created = await super().create(namespace, hard, annotations)
        self.world.op.kill_switch = True  # engaged (and swept, empty) while it was in flight
        return created


async def test_a_create_that_lands_after_the_switch_engaged_is_deleted_at_once() -> None:
    world = World(kill_switch_delete_qps=1000)
    world.quotas = InFlightCreateQuotas(world)
    world.op = world.new_operator()
    await setup_team(world, pods=14)
    world.op.clock = time.time
    world.op.queue.start()
    world.op.queue.add("team-a")
    await async_wait_until(lambda: ("delete", "team-a") in world.quotas.writes, "delete")
    await world.op.queue.stop()
    assert world.quotas.writes == [("create", "team-a"), ("delete", "team-a")]
    assert world.quotas.objects == {}


# -- found by a fresh user -------------------------------------------------------------------


async def test_a_peers_kill_switch_deletes_are_not_reported_as_someone_elses() -> None:
    """The leader deleted the quotas; this replica (standby then) only saw DELETED events.
    After a takeover and the release, the re-create is a plain Resized."""
    world = World(kill_switch_delete_qps=1000)
    await setup_team(world, pods=14)
    await world.reconcile("team-a")
    quota = world.quotas.objects.pop("team-a")
    world.leader.is_leader = False
    world.op.on_namespace(
        "MODIFIED",
        namespace("kube-system", rv=5, annotations={"dynquota.io/kill-switch": "true"}),
    )
    world.op.on_quota("DELETED", quota)  # the peer's sweep
    world.leader.is_leader = True
    world.op.on_namespace("MODIFIED", namespace("kube-system", rv=6))
    await world.reconcile("team-a")
    assert world.events.reasons("team-a")[-1] == "Resized"
    assert "QuotaRecreated" not in world.events.reasons("team-a")
    await world.op.stop_background()


async def test_an_opt_out_delete_by_a_peer_is_not_reported_as_someone_elses() -> None:
    world = World()
    await setup_team(world, pods=14)
    await world.reconcile("team-a")
    quota = world.quotas.objects.pop("team-a")
    world.op.on_namespace(None, namespace("team-a", {"dynquota.io/managed": "false"}, rv=2))
    world.op.on_quota("DELETED", quota)
    world.op.on_namespace(None, namespace("team-a", rv=3))
    await world.reconcile("team-a")
    assert world.events.reasons("team-a")[-1] == "Resized"


async def test_leaving_the_unknown_kill_switch_state_is_announced() -> None:
    world = World()
    op = world.new_operator()  # a fresh operator: kill-switch reading is its first
    world.op = op
    op.managed_quotas_exist = False
    op.kill_switch = None
    op._kill_switch_observed = False
    op.on_namespace(
        None, namespace("kube-system", rv=2, annotations={"dynquota.io/kill-switch": "maybe"})
    )
    assert op.kill_switch is None
    op.on_namespace("MODIFIED", namespace("kube-system", rv=3))
    assert op.kill_switch is False
    await async_wait_until(
        lambda: "KillSwitchReleased" in world.events.reasons("kube-system"), "released Event"
    )
    await op.stop_background()


# -- issue 24: knowledge that converges -------------------------------------------------------


async def test_issue24_a_full_list_lacking_a_policy_deletes_it() -> None:
    # v0.2 applied a list item by item: a policy deleted in a watch gap stayed known for good
    world = World()
    await setup_team(world, pods=14)
    await world.reconcile("team-a")
    assert world.quotas.hard("team-a")["pods"] == "20"
    policy_list(world.op, [])  # the relist after the gap lacks the policy
    governance = world.op.governance("team-a")
    assert governance is not None
    assert governance.kind == "unmanaged"
