"""Peak windows (dynquota.usage.peak), including a property test vs a naive model."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dynquota.usage import PeakWindow, PeakWindows

T0 = 1_000_000.0


def test_empty_window_has_no_peak() -> None:
    window = PeakWindow(horizon=60)
    assert window.peak(T0) is None
    assert window.first_observed is None


def test_peak_is_highest_in_window() -> None:
    window = PeakWindow(horizon=60)
    window.observe(5, T0)
    window.observe(20, T0 + 10)
    window.observe(8, T0 + 20)
    assert window.peak(T0 + 30) == 20
    assert window.first_observed == T0


def test_peak_forgets_values_older_than_horizon() -> None:
    window = PeakWindow(horizon=60)
    window.observe(20, T0)
    window.observe(8, T0 + 10)  # 20 was in force during [T0, T0 + 10)
    assert window.peak(T0 + 69) == 20  # window [T0 + 9, T0 + 69] still sees 20
    assert window.peak(T0 + 70) == 8  # window [T0 + 10, T0 + 70]: 20 is gone
    assert len(window) == 1
    assert window.peak(T0 + 10_000) == 8  # the value in force is never forgotten


def test_value_in_force_at_window_start_counts() -> None:
    window = PeakWindow(horizon=3600)
    window.observe(100, T0)
    window.observe(10, T0 + 50)
    assert window.peak(T0 + 100, window=60) == 100  # 100 held during [T0 + 40, T0 + 50)
    assert window.peak(T0 + 110, window=60) == 10
    assert window.peak(T0 + 110) == 100  # full horizon still sees it


def test_window_capped_at_horizon() -> None:
    window = PeakWindow(horizon=10)
    window.observe(9, T0)
    window.observe(1, T0 + 1)
    assert window.peak(T0 + 100, window=1000) == 1


def test_repeated_value_keeps_one_sample() -> None:
    window = PeakWindow(horizon=60)
    for i in range(10):
        window.observe(4, T0 + i)
    assert len(window) == 1
    assert window.current() == 4


def test_monotonic_increase_keeps_one_sample() -> None:
    window = PeakWindow(horizon=60)
    for i in range(100):
        window.observe(i, T0 + i / 10)
    assert len(window) == 1
    assert window.peak(T0 + 10) == 99


def test_memory_bounded_and_conservative() -> None:
    window = PeakWindow(horizon=1000, max_samples=8)
    for i in range(100):
        window.observe(1000 - i, T0 + i)  # strictly decreasing: worst case for the deque
    assert len(window) == 8
    assert window.peak(T0 + 100) == 1000
    # merging only ever over-estimates: the true peak of [T0+50, T0+100] is 950; the merged
    # sample (952, held over [T0+48, T0+64)) stands in for it.
    assert window.peak(T0 + 100, window=50) == 952


def test_clock_stepping_back_is_clamped() -> None:
    window = PeakWindow(horizon=60)
    window.observe(10, T0 + 5)
    window.observe(3, T0)  # taken as T0 + 5
    assert window.peak(T0 + 64) == 10
    assert window.peak(T0 + 65) == 3


def test_invalid_arguments() -> None:
    with pytest.raises(ValueError, match="horizon"):
        PeakWindow(horizon=0)
    with pytest.raises(ValueError, match="max_samples"):
        PeakWindow(horizon=1, max_samples=1)


def test_peak_windows_per_namespace_and_resource() -> None:
    windows = PeakWindows(horizon=60)
    windows.observe("a", "pods", 7, T0)
    windows.observe("a", "configmaps", 70, T0)
    windows.observe("b", "pods", 1, T0)
    windows.observe("a", "pods", 2, T0 + 1)
    assert windows.peak("a", "pods", T0 + 2) == 7
    assert windows.peak("a", "configmaps", T0 + 2) == 70
    assert windows.peak("b", "pods", T0 + 2) == 1
    assert windows.peak("c", "pods", T0 + 2) is None
    assert windows.first_observed("a", "pods") == T0
    windows.set_horizon(0.5, T0 + 2)
    assert windows.peak("a", "pods", T0 + 2) == 7  # the 60 s horizon is held for 60 s
    assert windows.peak("a", "pods", T0 + 63) == 2
    windows.forget("a")
    assert windows.peak("a", "pods", T0 + 2) is None
    assert windows.peak("b", "pods", T0 + 2) == 1


def test_shorter_horizon_is_held_for_the_longer_one() -> None:
    """A policy typo (24 h window -> none for 5 minutes -> 24 h again) keeps every sample."""
    day = 86400.0
    windows = PeakWindows(horizon=day)
    windows.observe("team", "pods", 100, T0)
    windows.observe("team", "pods", 10, T0 + 30 * 3600)
    windows.set_horizon(6 * 3600, T0 + 40 * 3600)  # the policy became invalid
    assert windows.horizon == day
    assert windows.held_until(T0 + 40 * 3600) == T0 + 40 * 3600 + day
    windows.observe("team", "pods", 11, T0 + 40 * 3600 + 60)
    windows.set_horizon(day, T0 + 40 * 3600 + 300)  # fixed 5 minutes later
    # the 100 stopped being in force at T0+30h: within 24 h of T0+40h5m, so it still counts
    assert windows.peak("team", "pods", T0 + 40 * 3600 + 300, day) == 100
    assert windows.held_until(T0 + 40 * 3600 + 300) is None


def test_held_horizon_lapses_after_its_length() -> None:
    windows = PeakWindows(horizon=100)
    windows.observe("a", "pods", 9, T0)
    windows.observe("a", "pods", 1, T0 + 10)
    windows.set_horizon(20, T0 + 10)
    assert windows.horizon == 100
    assert windows.peak("a", "pods", T0 + 109) == 9
    assert windows.peak("a", "pods", T0 + 110, 20) == 1
    assert windows.horizon == 20
    windows.set_horizon(50, T0 + 111)  # longer again: at once
    assert windows.horizon == 50


samples = st.lists(
    st.tuples(st.integers(min_value=0, max_value=30), st.integers(min_value=0, max_value=50)),
    min_size=1,
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(samples, st.integers(min_value=1, max_value=40), st.integers(min_value=0, max_value=60))
def test_peak_matches_step_function_model(
    steps: list[tuple[int, int]], horizon: int, after: int
) -> None:
    window = PeakWindow(horizon=horizon, max_samples=1000)
    history: list[tuple[float, int]] = []
    t = T0
    for delta, value in steps:
        t += delta
        window.observe(value, t)
        history.append((t, value))
    now = t + after
    start = now - horizon
    # value in force at x: the last sample taken at or before x
    expected = max(
        value
        for i, (taken, value) in enumerate(history)
        if (history[i + 1][0] if i + 1 < len(history) else float("inf")) > start and taken <= now
    )
    # a sample superseded at the instant it was taken held for no time, yet it was seen
    assert window.peak(now) == expected
