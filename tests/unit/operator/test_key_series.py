"""Issue 25: the per-key series of a namespace are set from its last decision when they are
read (a scrape), not at every decision; what a read returns is what setting them at every
decision gave, also after a write's hard or a removal, and from another thread."""

from __future__ import annotations

import asyncio

import pytest

from dynquota.kube.quotas import QuotaSnapshot
from dynquota.metrics import Metrics
from dynquota.operator.cluster_view import ClusterView
from dynquota.operator.key_series import KeySeries, UsageReport
from dynquota.operator.ports import NamespaceView
from dynquota.policy import Governance
from dynquota.settings import Settings

from .fakes import Clock, namespace, policy

SETTINGS = Settings(metrics_port=0, probe_port=0)


def governed(ns: str = "team-a") -> Governance:
    cluster = ClusterView(SETTINGS, clock=Clock())
    cluster.on_policy(None, policy())
    cluster.on_policies_synced()
    cluster.on_namespace(None, namespace(ns))
    governance = cluster.governance(ns)
    assert governance is not None
    assert governance.kind == "managed"
    return governance


def series(
    clock: Clock | None = None,
) -> tuple[KeySeries, Metrics, dict[str, NamespaceView]]:
    metrics = Metrics()
    views: dict[str, NamespaceView] = {}
    keys = KeySeries(metrics, lambda ns: views.setdefault(ns, NamespaceView()), clock or Clock())
    return keys, metrics, views


def scrape(metrics: Metrics, name: str, resource: str = "pods") -> float | None:
    labels = {"namespace": "team-a", "resource": resource, "enforcement": "unknown"}
    value: float | None = metrics.registry.get_sample_value(name, labels)
    return value


def quota(pods: str) -> QuotaSnapshot:
    return QuotaSnapshot("team-a", "dynquota", "uid", "1", spec_hard={"pods": pods})


def held(metrics: Metrics) -> int:
    """Series the usage gauge holds, read past the collect hook (what a decision set)."""
    return sum(len(family.samples) for family in metrics.usage.collect())


def test_a_report_sets_nothing_until_the_series_are_read() -> None:
    keys, metrics, _ = series()
    usage = {"pods": 10, "configmaps": 3}
    for pods in (8, 9, 10):
        keys.report(
            "team-a", UsageReport(governed(), {**usage, "pods": pods}, usage, usage, quota("14"))
        )
        assert held(metrics) == 0  # a decision sets no series
    assert (scrape(metrics, "dynquota_hard"), scrape(metrics, "dynquota_usage")) == (14, 10)
    assert scrape(metrics, "dynquota_tally") == 10  # the last report's, not the first's
    assert held(metrics) == 2  # pods and configmaps


def test_a_writes_hard_and_a_removal_stand_over_the_report_before_them() -> None:
    keys, metrics, _ = series()
    usage = {"pods": 10, "configmaps": 3}
    keys.report("team-a", UsageReport(governed(), usage, usage, usage, quota("10")))
    keys.set_hard("team-a", {"pods": 14})  # the write after that decision
    assert scrape(metrics, "dynquota_hard") == 14
    keys.report("team-a", UsageReport(governed(), usage, usage, usage, quota("14")))
    keys.remove_hard("team-a", ["pods", "configmaps"])  # the quota deleted
    assert scrape(metrics, "dynquota_hard") is None
    assert scrape(metrics, "dynquota_usage") == 10
    keys.report("team-a", UsageReport(governed(), usage, usage, usage, quota("14")))
    keys.forget("team-a")  # no longer governed: a report not set yet is dropped
    assert (scrape(metrics, "dynquota_usage"), keys.governed("team-a")) == (None, False)


def test_after_a_write_the_series_show_the_written_quota() -> None:
    """A key removed by a write (KeyNotCounted) leaves dynquota_usage_unknown at once: the
    watch event of our own write need not bring a decision that reports it (a flaky
    integration test left the series at 1)."""
    keys, metrics, _ = series()
    usage = {"pods": 10, "configmaps": 3}
    held_key = QuotaSnapshot(
        "team-a", "dynquota", "uid", "1", spec_hard={"pods": "14", "secrets": "4"}
    )
    governance = governed()
    governance.profiles["secrets"] = governance.profiles["pods"]
    keys.report("team-a", UsageReport(governance, usage, usage, usage, held_key))
    assert scrape(metrics, "dynquota_usage_unknown", "secrets") == 1
    keys.wrote("team-a", quota("20"))  # secrets removed, pods raised
    assert scrape(metrics, "dynquota_usage_unknown", "secrets") is None
    assert scrape(metrics, "dynquota_hard") == 20
    # the key is out of spec.hard: so is its hard series (a README-only attack saw it stay)
    assert scrape(metrics, "dynquota_hard", "secrets") is None
    assert scrape(metrics, "dynquota_maximum", "secrets") == 100  # the policy still sizes it


def test_a_key_whose_count_went_shows_no_usage_left_from_before() -> None:
    """A status-driven key whose status.used went (dry run, the kill switch, a re-created
    quota, a stalled quota controller) is held: usage unknown, no usage, target or forecast
    left from before (a README-only attack saw 3 secrets shown where there were 6)."""
    keys, metrics, _ = series()
    governance = governed()
    governance.profiles["secrets"] = governance.profiles["pods"]
    both = QuotaSnapshot("team-a", "dynquota", "uid", "1", spec_hard={"pods": "14", "secrets": "5"})
    counted = {"pods": 10, "secrets": 3}
    keys.report("team-a", UsageReport(governance, {"pods": 10}, counted, counted, both))
    assert (scrape(metrics, "dynquota_usage", "secrets"), scrape(metrics, "dynquota_drift")) == (
        3,
        0,
    )
    keys.report("team-a", UsageReport(governance, {"pods": 12}, {}, {"pods": 12}, both))
    assert scrape(metrics, "dynquota_usage_unknown", "secrets") == 1
    assert scrape(metrics, "dynquota_usage", "secrets") is None
    assert scrape(metrics, "dynquota_target", "secrets") is None
    # a tally key keeps its usage; its drift keeps the last value (a dry run keeps every
    # series: docs/metrics.md, test_metrics_series)
    assert (scrape(metrics, "dynquota_usage"), scrape(metrics, "dynquota_drift")) == (12, 0)


def test_a_dry_runs_report_leaves_its_simulated_hard() -> None:
    keys, metrics, _ = series()
    usage = {"pods": 10, "configmaps": 3}
    keys.set_hard("team-a", {"pods": 30})  # the simulated quota's
    keys.report("team-a", UsageReport(governed(), usage, {}, usage, None, dry_run=True))
    assert scrape(metrics, "dynquota_hard") == 30


def test_a_read_looks_at_the_trend_so_a_stopped_growth_loses_its_forecast() -> None:
    """Growth that stopped brings no decision: the reads (scrapes) add its flat samples, so
    the forecast goes instead of staying as the last decision left it (a README-only attack
    saw a 65 s countdown for minutes on a flat namespace)."""
    clock = Clock()
    clock.now = 0.0
    keys, metrics, views = series(clock)
    governance = governed()
    view = views.setdefault("team-a", NamespaceView())
    for step, used in enumerate((10, 20, 30, 40, 50)):
        clock.now = 30.0 * step
        view.forget_forecasts()
        view.observe_trend("pods", used, 1000, quota("60"), clock.now)
        usage = {"pods": used, "configmaps": 3}
        keys.report("team-a", UsageReport(governance, usage, usage, usage, quota("60")))
    labels = {"namespace": "team-a", "resource": "pods", "limit": "hard"}
    assert metrics.registry.get_sample_value("dynquota_exhaustion_seconds", labels) == 30.0
    for _ in range(20):  # 10 minutes of scrapes, usage flat at 50
        clock.now += 30.0
        metrics.registry.get_sample_value("dynquota_exhaustion_seconds", labels)
    assert metrics.registry.get_sample_value("dynquota_exhaustion_seconds", labels) is None


async def test_a_read_in_another_thread_sets_the_series_on_the_event_loop() -> None:
    keys, metrics, _ = series()
    usage = {"pods": 10, "configmaps": 3}
    keys.report("team-a", UsageReport(governed(), usage, usage, usage, quota("14")))
    loop_thread = asyncio.get_running_loop()
    settled_on: list[object] = []
    settle = keys.settle

    def recorded(namespace: str | None = None) -> None:
        settled_on.append(asyncio.get_running_loop())
        settle(namespace)

    keys.settle = recorded  # type: ignore[method-assign]
    assert await asyncio.to_thread(scrape, metrics, "dynquota_usage") == 10
    assert settled_on == [loop_thread]


def test_a_views_forecast_is_fitted_when_read_from_its_last_look() -> None:
    view = NamespaceView()
    for t, used in enumerate((10, 12, 14, 16, 18)):
        view.observe_trend("pods", used, 100, quota("30"), 60.0 * t)
    # a straight line, 2 pods a minute, at 18 at the last look: 12 to the hard 30 is 360 s, 82
    # to the maximum 100 is 2,460 s
    found = view.exhaustion
    assert found.keys() == {("pods", "hard"), ("pods", "maximum")}
    assert found[("pods", "hard")] == pytest.approx(360.0)
    assert found[("pods", "maximum")] == pytest.approx(2460.0)
    assert dict(view.exhaustion_of("maximum")) == {"pods": found[("pods", "maximum")]}
    view.forget_forecasts()  # the next look observes no key: no forecast
    assert (view.exhaustion, view.forecast("pods", "hard")) == ({}, None)
