"""The metric-name extraction the alert/dashboard-vs-scrape check relies on
(:mod:`dynquota.testing.promql`): it must find every selected metric and nothing else, or the
check could pass with a misspelt metric."""

from __future__ import annotations

import pytest

from dynquota.testing.promql import missing_metrics, scrape_families, selected_metrics

SCRAPE = """\
# HELP dynquota_hard spec.hard of the managed quota
# TYPE dynquota_hard gauge
# HELP dynquota_resizes_total Changes of spec.hard
# TYPE dynquota_resizes_total counter
# HELP dynquota_reconcile_duration_seconds Time of one namespace decision
# TYPE dynquota_reconcile_duration_seconds histogram
dynquota_reconcile_duration_seconds_bucket{le="0.005"} 0.0
dynquota_reconcile_duration_seconds_count 0.0
# HELP dynquota_watch_restarts Informer list/watch retries after errors
# TYPE dynquota_watch_restarts counter
dynquota_watch_restarts_total{resource="pods"} 0.0
untyped_thing 1
"""


@pytest.mark.parametrize(
    ("expr", "names"),
    [
        ('absent(up{namespace="ns", service="svc"} == 1)', {"up"}),
        (
            'max by (namespace, resource) (abs(dynquota_drift{service="s"})) > 0',
            {"dynquota_drift"},
        ),
        (
            "histogram_quantile(0.99, sum by (le) "
            "(rate(dynquota_reconcile_duration_seconds_bucket[$__rate_interval])))",
            {"dynquota_reconcile_duration_seconds_bucket"},
        ),
        (
            'sum(rate(dynquota_reconciles_total{result="retry"}[10m])) '
            "/ sum(rate(dynquota_reconciles_total[10m] offset 5m)) > 0.1",
            {"dynquota_reconciles_total"},
        ),
        (
            '(max by (namespace) (a_metric{x="by (y)"}) == 1) or on (namespace) '
            "group_left (z) b_metric unless ignoring(q) c:recorded:rate5m",
            {"a_metric", "b_metric", "c:recorded:rate5m"},
        ),
        ("label_values(dynquota_hard, namespace)", {"dynquota_hard"}),
        ('label_values(dynquota_hard{cluster=~"$cluster"}, namespace)', {"dynquota_hard"}),
        ("1e3 * vector(1) > bool 2", set()),
    ],
)
def test_selected_metrics(expr: str, names: set[str]) -> None:
    assert selected_metrics(expr) == names


def test_scrape_families_and_suffixes() -> None:
    families = scrape_families(SCRAPE)
    assert families == {
        "dynquota_hard": "gauge",
        "dynquota_resizes_total": "counter",
        "dynquota_reconcile_duration_seconds": "histogram",
        "dynquota_watch_restarts": "counter",
        "untyped_thing": "untyped",
    }
    used = {
        "up",
        "dynquota_hard",
        "dynquota_resizes_total",
        "dynquota_reconcile_duration_seconds_bucket",
        "dynquota_reconcile_duration_seconds_count",
        "dynquota_watch_restarts_total",
        "untyped_thing",
    }
    assert missing_metrics(used, families) == set()
    # Misspelt, a gauge given a counter suffix, a histogram's bucket asked of a gauge.
    wrong = {"dynquota_hardd", "dynquota_hard_total", "dynquota_hard_bucket", "dynquota_resizes"}
    assert missing_metrics(wrong, families) == wrong
