"""When a quota key's usage reaches a limit, on its recent trend (Pure: no I/O, ``now`` passed in).

One :class:`Trend` per (namespace, quota key) keeps the recent samples of its usage
(``status.used``); :func:`eta` turns it into the seconds left until a limit (the quota's hard,
the policy's maximum, a budget slice: the caller's choice). A forecast, not sizing: floats.

The model, and why:

1. **A line through the window** — ordinary least squares over the samples of the last
   :data:`WINDOW` seconds, read at ``now``: Prometheus' ``predict_linear``
   (``promql/functions.go``, ``linearRegression``), the usual "disk full in 4 h" rule.
   ``status.used`` moves in steps (admission charges each create, the quota controller
   recounts late); a fit over the window averages the steps out where the newest samples
   would carry a whole step of noise, so the line starts at its own value at ``now``.
2. **Still growing now** — the newer half of the samples must have a positive slope too: a
   one-off jump (a Helm install) followed by a flat usage stops being forecast once the jump
   leaves the newer half, not the window.
3. **A runaway is a curve** — usage doubling every ``T`` seconds is convex, and the least
   squares line of a convex curve is under it from the newest sample on: its ETA is never
   early, but late by at least ``(r - 1) / ln r`` for a limit ``r`` times the usage (x3.9
   at 10, x21 at 100), so no line bounds a runaway's error. The runaway dynquota itself
   shapes (usage pinned at a hard raised by the buffer each cooldown) is such a curve. So
   ``ln usage`` is fitted as well (usage > 0 throughout, :data:`CURVE_SAMPLES` samples at
   least) and its exponential replaces the line when (a) it fits far better, by an F-like
   statistic: the squared error it removes, in usage units, is :data:`CURVE_EVIDENCE` times
   what it leaves per degree of freedom (both models have two parameters; a bare "smaller
   error" took the step noise of slow linear ramps for curvature and forecast them up to
   60 % early), and (b) its forecast is within :data:`CURVE_REACH` times the span of the
   samples: a doubling rate seen for minutes is no evidence for hours. Otherwise the line.

The bound, on the step-wise, lagging ``status.used`` of ``tests/bench/test_forecast_bench.py``
(asserted there; held on nine seeds): a runaway doubling every 30 s to 10 min is never
forecast more than 5 % early; once its limit is within twice the history (30 min ahead with
a full window) the median error is under 1 % and the p90 under 10 %; further out the forecast
is mostly the line's, late as above (median x13). A linear ramp: median error under 1 %,
never more than 25 % early (slow ramps whose steps looked like a curve: 19 % at worst). A
runaway throttled by the buffer is never forecast a step early. Noise-free, the line is
never early on a convex ramp and the curve is exact on an exponential.
"""

from __future__ import annotations

import math
from array import array
from bisect import bisect_left
from collections.abc import Sequence
from typing import Final

__all__ = [
    "CURVE_EVIDENCE",
    "CURVE_REACH",
    "CURVE_SAMPLES",
    "HORIZON",
    "MAX_SAMPLES",
    "MIN_SAMPLES",
    "WINDOW",
    "Trend",
    "eta",
    "etas",
]

WINDOW: Final = 900.0
"""Seconds of history a :class:`Trend` keeps and :func:`eta` fits."""
MAX_SAMPLES: Final = 64
"""The most samples a :class:`Trend` keeps (about one every ``WINDOW / 63`` s)."""
MIN_SAMPLES: Final = 3
"""Samples (at distinct times) :func:`eta` needs before it forecasts."""
HORIZON: Final = 7 * 24 * 3600.0
"""Seconds beyond which :func:`eta` says ``None`` (no exhaustion in sight)."""
CURVE_SAMPLES: Final = 8
"""Samples the exponential needs before it may replace the line."""
CURVE_EVIDENCE: Final = 20.0
"""The exponential replaces the line when the squared error it removes is this many times
what it leaves per degree of freedom: ``(line - curve) * (n - 2) > 20 * curve``."""
CURVE_REACH: Final = 2.0
"""... and its forecast is at most this many times the span of the samples it was fitted on."""


class Trend:
    """The recent usage of one quota key: up to ``max_samples`` samples ``(t, usage)``
    (seconds since the epoch; usage in the key's integer units, kept as floats: exact below
    2**53) from the last ``window`` seconds before the newest one.

    Memory is bounded whatever the call rate: samples are kept at least
    ``window / (max_samples - 1)`` seconds apart, except the newest, which a closer sample
    replaces (so the newest observation is always kept); two ``array('d')`` of at most
    ``max_samples`` floats: about 1.3 kB when full.

    Raises :class:`ValueError` when ``window`` is not positive or ``max_samples`` is below
    :data:`MIN_SAMPLES`."""

    __slots__ = ("_times", "_usage", "max_samples", "spacing", "window")

    def __init__(self, window: float = WINDOW, max_samples: int = MAX_SAMPLES) -> None:
        if not window > 0:
            raise ValueError(f"window must be positive seconds, got {window!r}")
        if max_samples < MIN_SAMPLES:
            raise ValueError(f"max_samples must be at least {MIN_SAMPLES}, got {max_samples}")
        self.window = float(window)
        self.max_samples = max_samples
        self.spacing = self.window / (max_samples - 1)
        self._times = array("d")
        self._usage = array("d")

    def observe(self, t: float, usage: int) -> None:
        """Record ``usage`` seen at ``t`` (seconds since the epoch). Call it at every look at
        usage, changed or not: an unchanged usage is what makes a trend flat.

        A sample older than the newest is ignored (a late delivery: the newer one says more);
        one at the newest's time replaces its usage. Samples older than ``t - window`` are
        dropped."""
        times, values = self._times, self._usage
        if times:
            if t < times[-1]:
                return
            if t == times[-1]:
                values[-1] = usage
                return
        if len(times) >= 2 and times[-1] - times[-2] < self.spacing:
            times[-1], values[-1] = t, usage  # too close to its elder: the newer stands for it
        else:
            times.append(t)
            values.append(usage)
        while times[0] < t - self.window or len(times) > self.max_samples:
            del times[0]
            del values[0]

    def samples(self) -> list[tuple[float, float]]:
        """The samples kept, ``(t, usage)``, oldest first (a copy)."""
        return list(zip(self._times, self._usage, strict=True))

    def __len__(self) -> int:
        return len(self._times)


def eta(trend: Trend, limit: int, now: float, horizon: float = HORIZON) -> float | None:
    """Seconds from ``now`` (seconds since the epoch) until the usage in ``trend`` reaches
    ``limit`` (the key's units) on its recent trend (the module docstring's model).

    Only the samples from ``now - trend.window`` on are used. ``0.0`` when the newest usage
    is at or above ``limit`` (or the trend says it is there by now); ``None`` when those
    samples are fewer than :data:`MIN_SAMPLES`, the usage is not growing (over them and over
    their newer half), or the forecast is beyond ``horizon`` seconds. Raises nothing."""
    return etas(trend, (limit,), now, horizon)[0]


def etas(
    trend: Trend, limits: Sequence[int], now: float, horizon: float = HORIZON
) -> list[float | None]:
    """:func:`eta` for each of ``limits`` (the key's units), in their order, fitting the
    samples once (a decision asks for the quota's hard and the policy's maximum)."""
    first = bisect_left(trend._times, now - trend.window)  # older: stale, not looked at since
    ys = trend._usage[first:]
    if not ys:
        return [None for _ in limits]
    newest = ys[-1]
    if len(ys) < MIN_SAMPLES:
        return [0.0 if newest >= limit else None for limit in limits]
    xs = [t - now for t in trend._times[first:]]  # seconds, <= 0: the fits' x = 0 is now
    line = _fit(xs, ys)
    half = len(xs) // 2
    recent = _fit(xs[half:], ys[half:]) if line is not None and line[0] > 0 else None
    if line is None or recent is None or recent[0] <= 0:
        return [0.0 if newest >= limit else None for limit in limits]
    slope, at_now, line_error = line
    curve = None
    if len(ys) >= CURVE_SAMPLES and min(ys) > 0:
        fitted = _fit(xs, [math.log(y) for y in ys])
        if fitted is not None and fitted[0] > 0:
            rate, log_at_now, _ = fitted  # its error in usage units, as the line's:
            curve_error = sum(
                [(y - math.exp(log_at_now + rate * x)) ** 2 for x, y in zip(xs, ys, strict=True)]
            )
            removed = (line_error - curve_error) * (len(ys) - 2)
            if removed > CURVE_EVIDENCE * curve_error:
                curve = (rate, log_at_now, xs[-1] - xs[0])
    answers: list[float | None] = []
    for limit in limits:
        if newest >= limit:
            answers.append(0.0)
            continue
        seconds = (limit - at_now) / slope
        if curve is not None:
            rate, log_at_now, span = curve
            on_curve = (math.log(limit) - log_at_now) / rate
            if on_curve <= CURVE_REACH * span:
                seconds = on_curve
        seconds = max(0.0, seconds)
        answers.append(seconds if seconds <= horizon else None)
    return answers


def _fit(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float, float] | None:
    """Ordinary least squares through ``(xs, ys)``: ``(slope, value at x = 0, squared error)``,
    or ``None`` when fewer than two distinct ``xs``."""
    n = len(xs)
    if n < 2:
        return None
    mean_x = sum(xs) / n
    mean_y = sum(ys) / n
    sxx = sxy = syy = 0.0
    for x, y in zip(xs, ys, strict=True):
        dx, dy = x - mean_x, y - mean_y
        sxx += dx * dx
        sxy += dx * dy
        syy += dy * dy
    if sxx <= 0.0:
        return None
    slope = sxy / sxx
    return slope, mean_y - slope * mean_x, max(0.0, syy - slope * sxy)
