"""Forecasts of exhaustion (issue 27 part 5): the bounded history of one key's usage and the
seconds until it reaches a limit, on a line or, for a runaway, on its curve."""

from __future__ import annotations

import itertools
import math

import pytest

from dynquota.policy.forecast import HORIZON, MAX_SAMPLES, WINDOW, Trend, eta

T0 = 1_700_000_000.0  # seconds since the epoch: the fits work relative to now


def trend_of(*samples: tuple[float, int], **kwargs: float) -> Trend:
    trend = Trend(**kwargs)  # type: ignore[arg-type]
    for t, usage in samples:
        trend.observe(T0 + t, usage)
    return trend


def ramp(start: int, step: int, every: float, count: int) -> list[tuple[float, int]]:
    return [(i * every, start + i * step) for i in range(count)]


def test_a_linear_ramp_reaches_the_limit_on_its_line() -> None:
    trend = trend_of(*ramp(10, 2, 10, 5))  # 10, 12, ... 18 at 0..40 s: +0.2 a second
    assert eta(trend, 50, T0 + 40) == pytest.approx(160.0, rel=1e-12)  # (50 - 18) / 0.2
    # counted from now, on the line: 19 at 45 s
    assert eta(trend, 50, T0 + 45) == pytest.approx(155.0, rel=1e-12)


def test_a_long_linear_ramp_stays_on_its_line() -> None:
    trend = trend_of(*ramp(100, 3, 15, 40))  # 100 .. 217 over 585 s: +0.2 a second
    assert eta(trend, 1000, T0 + 585) == pytest.approx((1000 - 217) / 0.2, rel=1e-9)


@pytest.mark.parametrize(
    "usage",
    [[20, 20, 20, 20, 20, 20], [30, 28, 26, 24, 22, 20], [20, 22, 24, 22, 20, 18]],
    ids=["flat", "shrinking", "up then down"],
)
def test_no_growth_no_forecast(usage: list[int]) -> None:
    trend = trend_of(*[(i * 15.0, u) for i, u in enumerate(usage)])
    assert eta(trend, 50, T0 + 75) is None


@pytest.mark.parametrize("limit", [20, 19, 0])
def test_at_or_above_the_limit_is_now(limit: int) -> None:
    assert eta(trend_of((0, 20)), limit, T0) == 0.0  # one sample is enough
    assert eta(trend_of(*ramp(10, 5, 15, 3)), limit, T0 + 30) == 0.0


def test_too_few_samples_no_forecast() -> None:
    assert eta(Trend(), 50, T0) is None
    assert eta(trend_of((0, 10), (15, 12)), 50, T0 + 15) is None
    assert eta(trend_of((0, 10), (15, 12), (30, 14)), 50, T0 + 30) is not None


def test_beyond_the_horizon_no_forecast() -> None:
    trend = trend_of(*ramp(10, 1, 15, 5))  # 1 every 15 s: a limit 10**6 is 173 days away
    assert eta(trend, 10**6, T0 + 60) is None
    assert eta(trend, 10**6, T0 + 60, horizon=200 * 86400) == pytest.approx(
        (10**6 - 14) * 15, rel=1e-9
    )
    assert eta(trend, 10 + HORIZON // 15, T0 + 60) is not None


def test_a_runaway_is_forecast_on_its_curve() -> None:
    # doubling every 15 s: 1, 2, 4 ... 2048 at 0..165 s
    trend = trend_of(*[(i * 15.0, 2**i) for i in range(12)])
    assert eta(trend, 2**20, T0 + 165) == pytest.approx(9 * 15, rel=1e-6)
    # beyond twice the span of the samples (330 s) the curve is not trusted: the line is late
    late = eta(trend, 2**34, T0 + 165, horizon=math.inf)
    assert late is not None
    assert late > 100 * 23 * 15


def test_a_runaway_from_zero_is_forecast_on_the_line() -> None:
    trend = trend_of((0, 0), *[(15 + i * 15.0, 2**i) for i in range(11)])
    line = eta(trend, 2**20, T0 + 165)
    assert line is not None
    assert line > 9 * 15  # ln 0: no curve, the line (late)


def test_a_jump_stops_being_forecast_when_the_newer_half_is_flat() -> None:
    flat = [(i * 15.0, 10) for i in range(11)]  # 0..150 s
    trend = trend_of(*flat, *[(165 + i * 15.0, 30) for i in range(3)])
    assert eta(trend, 50, T0 + 195) is not None  # 14 samples: the jump is in the newer 7
    for i in range(3, 12):
        trend.observe(T0 + 165 + i * 15, 30)
    assert len(trend) == 23
    assert eta(trend, 50, T0 + 330) is None  # the newer 12 are all 30


def test_old_samples_leave_the_window() -> None:
    trend = trend_of(*ramp(0, 1, 15, 200))  # 0..2985 s
    times = [t for t, _ in trend.samples()]
    assert times[0] >= T0 + 2985 - WINDOW
    assert times[-1] == T0 + 2985
    # forecast from the samples of the last window before now only
    assert eta(trend, 1000, T0 + 2985 + WINDOW + 1) is None
    later = eta(trend, 1000, T0 + 2985 + WINDOW - 30)  # the newest 3 samples
    assert later == pytest.approx((1000 - 199) * 15 - (WINDOW - 30), rel=1e-9)


def test_memory_is_bounded_whatever_the_call_rate() -> None:
    trend = Trend()
    for i in range(10_000):
        trend.observe(T0 + i, i % 7)
        assert len(trend) <= MAX_SAMPLES
    times = [t for t, _ in trend.samples()]
    assert times[-1] == T0 + 9_999  # the newest is always kept
    assert times[-1] - times[0] <= WINDOW
    # kept at least window / 63 s apart (but the newest)
    assert min(b - a for a, b in itertools.pairwise(times[:-1])) >= WINDOW / 63

    small = Trend(window=60, max_samples=4)
    for i in range(10_000):
        small.observe(T0 + i / 100, i)
    assert len(small) <= 4
    assert small.samples()[-1] == (T0 + 99.99, 9_999)


def test_late_and_repeated_samples() -> None:
    trend = trend_of((0, 10), (15, 12), (30, 14))
    trend.observe(T0 + 20, 99)  # older than the newest: ignored
    assert trend.samples() == [(T0, 10), (T0 + 15, 12), (T0 + 30, 14)]
    trend.observe(T0 + 30, 16)  # at the newest's time: replaces its usage
    assert trend.samples() == [(T0, 10), (T0 + 15, 12), (T0 + 30, 16)]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"window": 0}, "window"), ({"window": -1.0}, "window"), ({"max_samples": 2}, "max_samples")],
)
def test_a_trend_needs_a_window_and_room(kwargs: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Trend(**kwargs)  # type: ignore[arg-type]
