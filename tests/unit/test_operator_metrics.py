"""The operator's metrics: what counts as an API error."""

from __future__ import annotations

from dynquota.metrics import Metrics


def _value(metrics: Metrics, name: str, labels: dict[str, str]) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


def test_expected_not_found_is_not_an_api_error() -> None:
    m = Metrics()
    m.observe_api("get", "resourcequotas", 404)  # a namespace without its quota yet
    m.observe_api("delete", "resourcequotas", 404)  # already gone
    m.observe_api("get", "resourcequotas", 500)
    m.observe_api("patch", "resourcequotas", 0)
    m.observe_api("get", "resourcequotas", 200)
    assert (
        _value(
            m,
            "dynquota_api_errors_total",
            {"verb": "get", "resource": "resourcequotas", "code": "404"},
        )
        is None
    )
    assert (
        _value(m, "dynquota_api_not_found_total", {"verb": "get", "resource": "resourcequotas"})
        == 1
    )
    assert (
        _value(m, "dynquota_api_not_found_total", {"verb": "delete", "resource": "resourcequotas"})
        == 1
    )
    assert (
        _value(
            m,
            "dynquota_api_errors_total",
            {"verb": "get", "resource": "resourcequotas", "code": "500"},
        )
        == 1
    )
    assert (
        _value(
            m,
            "dynquota_api_errors_total",
            {"verb": "patch", "resource": "resourcequotas", "code": "0"},
        )
        == 1
    )
    errors = sum(
        s.value
        for metric in m.registry.collect()
        if metric.name == "dynquota_api_errors"
        for s in metric.samples
        if s.name == "dynquota_api_errors_total"
    )
    assert errors == 2
    assert (
        _value(
            m,
            "dynquota_api_requests_total",
            {"verb": "get", "resource": "resourcequotas", "code": "404"},
        )
        == 1
    )
