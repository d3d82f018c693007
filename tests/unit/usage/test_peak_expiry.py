"""PeakWindow.peak_expiry: when the operator must look again for a downscale (an addition the
operator needs on dynquota.usage.peak)."""

from __future__ import annotations

from dynquota.usage.peak import PeakWindow, PeakWindows


def test_peak_expiry_is_the_end_of_the_peak_sample_plus_the_window() -> None:
    w = PeakWindow(100)
    w.observe(5, 0)
    w.observe(14, 10)
    w.observe(2, 20)  # 14 was in force from 10 to 20
    assert w.peak(30, 50) == 14
    assert w.peak_expiry(30, 50) == 70
    assert w.peak(70.5, 50) == 2
    assert w.peak_expiry(70.5, 50) is None  # 2 is still in force


def test_peak_expiry_is_none_while_the_peak_is_in_force_or_unknown() -> None:
    windows = PeakWindows(100)
    windows.observe("a", "pods", 3, 0)
    assert windows.peak_expiry("a", "pods", 1, 50) is None
    assert windows.peak_expiry("b", "pods", 1, 50) is None
