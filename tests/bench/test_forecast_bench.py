"""Forecasts of exhaustion (issue 27 part 5) on simulated ramps, in one process (no cluster).

    .venv/bin/python -m pytest -m bench -s tests/bench/test_forecast_bench.py

Each ramp is a true usage curve ``u(t)``; ``status.used`` follows it in steps (the value of
``floor(u)`` at its last update, updates every 2-8 s) and is sampled every 5-15 s into a
:class:`~dynquota.policy.forecast.Trend`. From the 5th sample on, until the ramp reaches its
limit, the forecast is compared with the true remaining time: signed relative error
``(predicted - true) / true`` (negative: early), a ``None`` counted as an infinite error.
Families:

- linear: slopes 0.05-20 /s, from 0, 10 or 100, reaching the limit after 5 min, 15 min, 1 h;
- exponential: doubling every 30 s-10 min, from 10 or 100 to 10-100 times that;
- throttled runaway: usage pinned at a hard raised by 40 % (rounded up) each cooldown of
  10 s-2 min, from 10 to a maximum of 200 or 1,000 (the runaway dynquota itself shapes);
- step: flat, one jump, flat (a limit never reached): forecasts in the flat phase before the
  jump, and how long one is given after it.

Seeded (``DYNQUOTA_BENCH_FORECAST_SEED``, default 27): the figures are reproducible. Cost:
``observe`` + ``eta`` per call on 1,000 keys whose histories are full, and the bytes a full
:class:`Trend` holds.
"""

from __future__ import annotations

import gc
import math
import os
import random
import time
import tracemalloc
from collections.abc import Callable

import pytest
from figures import percentile, report  # same directory

from dynquota.policy.forecast import CURVE_REACH, MAX_SAMPLES, WINDOW, Trend, eta

pytestmark = pytest.mark.bench

SEED = int(os.environ.get("DYNQUOTA_BENCH_FORECAST_SEED", "27"))
KEYS = 1000

Curve = Callable[[float], float]
Ramp = tuple[Curve, float, int]
"""A true usage curve, the seconds it takes to reach the limit, the limit."""


def status_used(curve: Curve, until: float, rng: random.Random) -> list[tuple[float, int]]:
    """The samples a trend sees of ``curve`` until ``until`` seconds: every 5-15 s, the value
    ``status.used`` had (``floor(curve)`` at its last update; updates every 2-8 s)."""
    updates, samples = [0.0], []
    t = 0.0
    while t < until:
        while updates[-1] <= t:
            updates.append(updates[-1] + rng.uniform(2, 8))
        samples.append((t, math.floor(curve(updates[-2]))))
        t += rng.uniform(5, 15)
    return samples


def linear_ramps() -> list[Ramp]:
    return [
        (lambda t, u0=u0, s=slope: u0 + s * t, seconds, round(u0 + slope * seconds))
        for slope in (0.05, 0.2, 1, 5, 20)
        for u0 in (0, 10, 100)
        for seconds in (300, 900, 3600)
    ]


def exponential_ramps() -> list[Ramp]:
    return [
        (lambda t, u0=u0, d=doubling: u0 * 2 ** (t / d), doubling * math.log2(times), u0 * times)
        for doubling in (30, 60, 120, 300, 600)
        for u0, times in ((10, 10), (10, 100), (100, 10), (100, 100))
    ]


def throttled_ramps() -> list[tuple[int, Ramp]]:
    """``(cooldown, ramp)``: usage pinned at a hard raised by 40 % each cooldown."""
    ramps: list[tuple[int, Ramp]] = []
    for cooldown in (10, 30, 60, 120):
        for limit in (200, 1000):
            hards = [10]
            while hards[-1] < limit:
                hards.append(min(limit, math.ceil(hards[-1] * 1.4)))
            ramps.append(
                (cooldown, (lambda t, h=hards, c=cooldown: h[min(len(h) - 1, int(t // c))],
                            (len(hards) - 1) * cooldown, limit))
            )  # fmt: skip
    return ramps


def forecasts(
    ramps: list[Ramp], rng: random.Random, reach: float | None = None
) -> list[tuple[float | None, float]]:
    """``(forecast, true seconds left)`` at every sample from the 5th on, until the limit;
    with ``reach``, only those whose truth is within ``reach`` times the history (the seconds
    observed, at most the window) or beyond it (``-reach``)."""
    found: list[tuple[float | None, float]] = []
    for curve, reached, limit in ramps:
        trend = Trend()
        for i, (t, used) in enumerate(status_used(curve, reached, rng)):
            trend.observe(t, used)
            within = reached - t <= abs(reach or 0) * min(t, trend.window)
            if i >= 4 and (reach is None or within == (reach > 0)):
                found.append((eta(trend, limit, t), reached - t))
    return found


def errors(found: list[tuple[float | None, float]]) -> list[float]:
    """Signed relative errors ``(forecast - true) / true`` (negative: early; ``None``: inf)."""
    return [math.inf if p is None else (p - true) / true for p, true in found]


def summary(name: str, signed: list[float]) -> str:
    absolute = [abs(e) for e in signed]
    return (
        f"{name}: {len(signed)} forecasts, median error {percentile(absolute, 50):.1%}, "
        f"p90 {percentile(absolute, 90):.1%}, earliest {min(signed):+.1%}, "
        f"None {sum(math.isinf(e) for e in signed)}"
    )


def test_forecast_error_per_ramp_family() -> None:
    rng = random.Random(SEED)
    linear = errors(forecasts(linear_ramps(), rng))
    exponential = errors(forecasts(exponential_ramps(), rng))
    state = rng.getstate()
    near = errors(forecasts(exponential_ramps(), rng, CURVE_REACH))
    rng.setstate(state)
    far = errors(forecasts(exponential_ramps(), rng, -CURVE_REACH))
    throttled, early_steps = [], 0.0  # the earliest forecast, in cooldowns
    for cooldown, ramp in throttled_ramps():
        found = forecasts([ramp], rng)
        throttled += errors(found)
        early = [(p - true) / cooldown for p, true in found if p is not None]
        early_steps = min([early_steps, *early])
    steps, flat_forecasts, after_jump = [], 0, [0.0]
    for jump_at in (120, 300):
        for high in (12, 30, 45):
            trend, after = Trend(), []
            for i, (t, used) in enumerate(
                status_used(lambda t, j=jump_at, h=high: 10 if t < j else h, 1500, rng)
            ):
                trend.observe(t, used)
                predicted = eta(trend, 50, t) if i >= 4 else None
                if predicted is not None and used == 10:
                    flat_forecasts += 1
                elif predicted is not None:
                    after.append((t - jump_at, predicted))
                    after_jump.append(t - jump_at)
            steps.append(
                f"10 -> {high} at {jump_at} s, limit 50: forecasts for "
                + (f"{after[-1][0]:.0f} s after the jump, shortest {min(p for _, p in after):.0f} s"
                   if after else "none")
            )  # fmt: skip
    report(
        f"Forecast of exhaustion: relative error from the 5th sample (seed {SEED})",
        [
            summary("linear (45 ramps)", linear),
            summary("exponential (20 ramps)", exponential),
            summary(f"  truth within {CURVE_REACH:g}x the history", near),
            summary("  beyond", far),
            summary("throttled runaway (8 ramps)", throttled)
            + f" (earliest {-early_steps:.2f} cooldown before the truth)",
            f"step: {flat_forecasts} forecasts in flat phases",
            *steps,
        ],
    )
    # the bounds of dynquota/policy/forecast.py's docstring
    assert percentile([abs(e) for e in linear], 50) <= 0.01
    assert min(linear) >= -0.25
    assert min(exponential) >= -0.05
    assert percentile([abs(e) for e in near], 50) <= 0.01
    assert percentile([abs(e) for e in near], 90) <= 0.10
    assert early_steps > -1  # never a step early
    assert flat_forecasts == 0
    assert max(after_jump) <= WINDOW / 2  # the jump has left the newer half


def test_forecast_cost_and_memory() -> None:
    rng = random.Random(SEED)
    trends = [Trend() for _ in range(KEYS)]
    slopes = [rng.uniform(0.1, 5) for _ in range(KEYS)]
    t = 0.0
    for _ in range(2 * MAX_SAMPLES):  # full histories: the window holds 63 samples 14.5 s apart
        t += 14.5
        for trend, slope in zip(trends, slopes, strict=True):
            trend.observe(t, 100 + math.floor(slope * t))
    assert all(len(trend) >= MAX_SAMPLES - 1 for trend in trends)
    rounds, forecasts = 20, 0
    started = time.perf_counter()
    for _ in range(rounds):
        t += 14.5
        for trend, slope in zip(trends, slopes, strict=True):
            trend.observe(t, 100 + math.floor(slope * t))
            forecasts += eta(trend, 100 + math.floor(slope * (t + 3600)), t) is not None
    per_call = (time.perf_counter() - started) / (rounds * KEYS) * 1e6
    started = time.perf_counter()
    for trend, slope in zip(trends, slopes, strict=True):
        eta(trend, 100 + math.floor(slope * (t + 3600)), t)
    eta_only = (time.perf_counter() - started) / KEYS * 1e6

    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    kept = [Trend() for _ in range(KEYS)]
    for i in range(2 * MAX_SAMPLES):
        for trend in kept:
            trend.observe(i * 14.5, i)
    gc.collect()
    per_trend = (tracemalloc.get_traced_memory()[0] - before) / KEYS
    tracemalloc.stop()
    report(
        f"Forecast cost: {KEYS:,} keys, {MAX_SAMPLES} samples each",
        [
            f"observe + eta: {per_call:.1f} us a call ({per_call * KEYS / 1000:.1f} ms for "
            f"{KEYS:,} keys); eta alone {eta_only:.1f} us",
            f"a full Trend holds {per_trend:,.0f} bytes ({per_trend * 10_000 / 2**20:.1f} MiB "
            "for 10,000 keys)",
        ],
    )
    assert forecasts == rounds * KEYS
    assert len(kept) == KEYS
