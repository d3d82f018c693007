"""Peak usage over a sliding time window (Pure).

The downscale rule sizes a quota from ``P``, the highest usage seen during the last
``downscaleCooldown`` seconds. Usage is a step function sampled at every change: a sample
``(t, v)`` holds from ``t`` until the next sample. :meth:`PeakWindow.peak` returns the highest
value *in force* at any instant of ``[now - window, now]`` — including the value that was in
force when the window opened, even though it was observed before the window began. Losing that
value would under-estimate the peak and speed a downscale up, which the design forbids.

Memory is bounded: a monotonic deque keeps only samples that can still be a window's maximum
(values strictly decreasing from oldest to newest), drops samples that stopped being in force
more than ``horizon`` seconds ago, and, past ``max_samples`` entries, merges the two adjacent
entries closest in value, keeping the larger value in force for both spans (an over-estimate,
which can only delay a downscale, never speed it up).

Times are seconds since the epoch (float), values are counts (int).
"""

from __future__ import annotations

import math
from collections import deque
from typing import Final

__all__ = ["DEFAULT_MAX_SAMPLES", "PeakWindow", "PeakWindows"]

DEFAULT_MAX_SAMPLES: Final = 64
"""Default bound on retained samples per window."""


class _Sample:
    """A value, when it was first observed, and when it stopped being in force."""

    __slots__ = ("end", "start", "value")

    def __init__(self, start: float, value: int) -> None:
        self.start = start
        self.value = value
        self.end = math.inf  # still in force


class PeakWindow:
    """Highest usage in force during the last ``window`` seconds, for one namespace/resource.

    ``horizon`` (seconds, > 0) is the longest window that :meth:`peak` can answer; samples
    that stopped being in force longer ago are forgotten. ``first_observed`` is the time of
    the first sample (``None`` before any): history before it is unknown, so a caller must not
    treat a window that starts earlier as fully observed.
    """

    __slots__ = ("_samples", "first_observed", "horizon", "max_samples")

    def __init__(self, horizon: float, max_samples: int = DEFAULT_MAX_SAMPLES) -> None:
        if not horizon > 0:
            raise ValueError(f"horizon must be > 0 seconds, got {horizon!r}")
        if max_samples < 2:
            raise ValueError(f"max_samples must be >= 2, got {max_samples!r}")
        self.horizon = float(horizon)
        self.max_samples = max_samples
        self.first_observed: float | None = None
        self._samples: deque[_Sample] = deque()

    def __len__(self) -> int:
        """Number of samples retained."""
        return len(self._samples)

    def observe(self, value: int, now: float) -> None:
        """Record that usage is ``value`` from ``now`` on.

        Samples must come in time order; a sample older than the newest one is treated as
        taken at the newest one's time (clocks may step back; the value still counts).
        """
        samples = self._samples
        if self.first_observed is None:
            self.first_observed = now
        if samples:
            last = samples[-1]
            if now < last.start:
                now = last.start
            if last.value == value:
                return
            last.end = now
            # Drop samples the new one dominates: it is as high and in force later, so any
            # future window that sees them also sees it.
            while samples and samples[-1].value <= value:
                samples.pop()
        samples.append(_Sample(now, value))
        self._expire(now)
        if len(samples) > self.max_samples:
            self._merge_closest()

    def peak(self, now: float, window: float | None = None) -> int | None:
        """Highest value in force at any instant of ``[now - window, now]``.

        ``window`` defaults to (and is capped at) ``horizon``. Returns ``None`` before the
        first sample.
        """
        self._expire(now)
        if not self._samples:
            return None
        span = self.horizon if window is None else min(window, self.horizon)
        start = now - span
        for sample in self._samples:
            if sample.end > start:
                return sample.value
        return self._samples[-1].value  # unreachable: the newest sample is always in force

    def peak_expiry(self, now: float, window: float | None = None) -> float | None:
        """When the current :meth:`peak` over ``window`` may drop, absent new samples.

        That is when the sample holding the peak has been out of force for ``window``
        seconds: its end + ``window``. ``None`` when there is no sample or the peak is
        still in force (it cannot drop before a new sample arrives). Seconds since the epoch.
        """
        self._expire(now)
        span = self.horizon if window is None else min(window, self.horizon)
        start = now - span
        for sample in self._samples:
            if sample.end > start:
                return None if math.isinf(sample.end) else sample.end + span
        return None

    def current(self) -> int | None:
        """The newest value observed, or ``None``."""
        return self._samples[-1].value if self._samples else None

    def _expire(self, now: float) -> None:
        start = now - self.horizon
        samples = self._samples
        while len(samples) > 1 and samples[0].end <= start:
            samples.popleft()

    def _merge_closest(self) -> None:
        samples = self._samples
        best = 0
        best_gap: int | None = None
        for index in range(len(samples) - 1):
            gap = samples[index].value - samples[index + 1].value
            if best_gap is None or gap < best_gap:
                best, best_gap = index, gap
        keep, drop = samples[best], samples[best + 1]
        keep.end = drop.end
        del samples[best + 1]


class PeakWindows:
    """A :class:`PeakWindow` per ``(namespace, resource)``, created on first observation.

    ``horizon`` (seconds) is the longest window the policies ask for. It is never shortened
    early: a longer horizon applies at once, a shorter one only once the longer one has held
    for its own length since it was last wanted (:meth:`set_horizon`), so an invalid, deleted
    or briefly edited policy cannot drop peak samples that a later, longer window still needs
    (a typo must never speed a downscale up).
    """

    __slots__ = ("_held", "_wanted", "_windows", "horizon", "max_samples")

    def __init__(self, horizon: float, max_samples: int = DEFAULT_MAX_SAMPLES) -> None:
        if not horizon > 0:
            raise ValueError(f"horizon must be > 0 seconds, got {horizon!r}")
        self.horizon = float(horizon)
        """The horizon in force now (seconds): the wanted one or a longer one still held."""
        self._wanted = self.horizon
        self._held: dict[float, float] = {}
        """Longer horizons still held: horizon (seconds) -> held until (epoch seconds)."""
        self.max_samples = max_samples
        self._windows: dict[tuple[str, str], PeakWindow] = {}

    def observe(self, namespace: str, resource: str, value: int, now: float) -> None:
        """Record usage ``value`` of ``resource`` in ``namespace`` from ``now`` on."""
        self._settle(now)
        key = (namespace, resource)
        window = self._windows.get(key)
        if window is None:
            window = self._windows[key] = PeakWindow(self.horizon, self.max_samples)
        window.observe(value, now)

    def peak(
        self, namespace: str, resource: str, now: float, window: float | None = None
    ) -> int | None:
        """Peak of ``resource`` in ``namespace`` over ``[now - window, now]``, or ``None``."""
        found = self._settled(namespace, resource, now)
        return found.peak(now, window) if found is not None else None

    def peak_expiry(
        self, namespace: str, resource: str, now: float, window: float | None = None
    ) -> float | None:
        """:meth:`PeakWindow.peak_expiry` of this pair, or ``None``."""
        found = self._settled(namespace, resource, now)
        return found.peak_expiry(now, window) if found is not None else None

    def _settled(self, namespace: str, resource: str, now: float) -> PeakWindow | None:
        self._settle(now)
        return self._windows.get((namespace, resource))

    def first_observed(self, namespace: str, resource: str) -> float | None:
        """When the first sample for this pair was taken, or ``None``."""
        found = self._windows.get((namespace, resource))
        return found.first_observed if found is not None else None

    def set_horizon(self, horizon: float, now: float) -> None:
        """The policies now want ``horizon`` seconds (> 0) at ``now`` (epoch seconds).

        A longer horizon than the one in force applies at once. A shorter one keeps the one
        in force until ``now`` + that horizon: its samples may still be needed by a window
        of that length if the longer one comes back within it. Pure.
        """
        if not horizon > 0:
            raise ValueError(f"horizon must be > 0 seconds, got {horizon!r}")
        wanted = float(horizon)
        if wanted < self._wanted:
            previous = self._wanted
            self._held[previous] = max(self._held.get(previous, 0.0), now + previous)
        self._wanted = wanted
        self._settle(now)

    def held_until(self, now: float) -> float | None:
        """When the horizon in force may next shrink (epoch seconds), or ``None`` when it is
        the wanted one."""
        self._settle(now)
        return min(self._held.values()) if self._held else None

    def _settle(self, now: float) -> None:
        if not self._held and self.horizon == self._wanted:
            return  # nothing held (every decision asks twice a key)
        for horizon, until in list(self._held.items()):
            if until <= now or horizon <= self._wanted:
                del self._held[horizon]
        effective = max([self._wanted, *self._held])
        if effective != self.horizon:
            self.horizon = effective
            for window in self._windows.values():
                window.horizon = effective

    def forget(self, namespace: str) -> None:
        """Drop every window of ``namespace`` (e.g. when it is deleted)."""
        for key in [key for key in self._windows if key[0] == namespace]:
            del self._windows[key]
