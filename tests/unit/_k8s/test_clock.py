"""ServerClock: the cluster's time on the monotonic clock, re-anchored to the apiserver's
``Date``; a local wall-clock step never moves it."""

from __future__ import annotations

from dynquota._k8s.clock import ServerClock, parse_http_date

T0 = 1_800_000_000.0  # 2027-01-15T08:00:00Z
DATE_T0 = "Fri, 15 Jan 2027 08:00:00 GMT"


class Fake:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_parse_http_date() -> None:
    assert parse_http_date(DATE_T0) == T0
    assert parse_http_date("yesterday") is None
    assert parse_http_date("") is None


def test_a_local_wall_step_after_the_anchor_changes_nothing() -> None:
    wall, mono = Fake(T0), Fake(50.0)
    clock = ServerClock(monotonic=mono, wall=wall)
    mono.now += 60
    wall.now += 25 * 3600  # the local clock steps: never read again
    assert clock() == T0 + 60


def test_a_local_clock_running_ahead_is_re_anchored_to_the_server() -> None:
    wall, mono = Fake(T0 + 25 * 3600), Fake(50.0)  # started with a clock 25 h ahead
    clock = ServerClock(monotonic=mono, wall=wall)
    clock.observe_date(DATE_T0)
    assert clock() == T0 + 0.5  # the server wrote the header within that second
    assert clock.reanchors == 1
    assert clock.offset == -25 * 3600 + 0.5
    mono.now += 10
    clock.observe_date("Fri, 15 Jan 2027 08:00:11 GMT")  # within tolerance: kept
    assert clock() == T0 + 10.5
    assert clock.reanchors == 1
    clock.observe_date(None)
    clock.observe_date("garbage")
    assert clock.reanchors == 1
