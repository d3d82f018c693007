"""Issue 24, case 4: a wall-clock step is not elapsed time. The peak windows run on the
monotonic clock and persisted stamps are judged against the cluster's time
(:class:`~dynquota._k8s.clock.ServerClock`), so a +25 h step of the local wall clock one minute
after a peak of 100 pods leaves the quota at 140 (v0.2, on ``time.time``: 14)."""

from __future__ import annotations

from dynquota._k8s.clock import ServerClock

from .fakes import T0, Clock, World, namespace, policy

H = 3600.0
PODS = {
    "bufferPercent": 40,
    "minimum": 10,
    "maximum": 200,
    "upscaleCooldown": "60s",
    "downscaleCooldown": "24h",
}


async def peak_then_step(world: World, ticking: list[Clock], wall: Clock) -> dict[str, str]:
    """100 pods (hard 140), 10 pods 30 s later, the local ``wall`` clock +25 h 30 s after
    that; the hard then. ``ticking``: the fake clocks that advance with elapsed time."""
    world.op.on_policy(None, policy(pods=PODS))
    world.op.on_namespace(None, namespace("team-a"))
    world.usage.counts[("team-a", "pods")] = 100
    await world.reconcile("team-a")
    assert world.quotas.hard("team-a")["pods"] == "140"
    for clock in ticking:
        clock.now += 30
    world.usage.counts[("team-a", "pods")] = 10
    await world.reconcile("team-a")
    assert world.quotas.hard("team-a")["pods"] == "140"  # the peak holds for 24 h
    for clock in ticking:
        clock.now += 30
    wall.now += 25 * H
    await world.reconcile("team-a")
    return world.quotas.hard("team-a")


async def test_a_25_hour_local_wall_clock_step_does_not_end_the_peak_window() -> None:
    wall, mono = Clock(), Clock()
    mono.now = 1000.0
    world = World()
    world.clock = ServerClock(monotonic=mono, wall=wall)  # type: ignore[assignment]
    world.monotonic = mono
    world.op = world.new_operator()
    assert (await peak_then_step(world, [wall, mono], wall))["pods"] == "140"
    ann = world.quotas.annotations("team-a")
    assert ann["dynquota.io/last-upscale.pods"] == "2027-01-15T08:00:00Z"
    assert "dynquota.io/last-downscale.pods" not in ann
    assert world.clock() == T0 + 60.0


async def test_on_the_wall_clock_the_same_step_would_shrink_to_14() -> None:
    # the v0.2 wiring: one wall clock for windows and stamps (what the runtime no longer does)
    world = World()
    assert (await peak_then_step(world, [world.clock], world.clock))["pods"] == "14"
