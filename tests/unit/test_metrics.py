"""The operator's metrics: what counts as an API error, and how /metrics answers."""

from __future__ import annotations

import aiohttp

from dynquota.metrics import Metrics, MetricsServer


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


async def test_the_server_answers_as_prometheus_client_does() -> None:
    # /metrics is prometheus-client's aiohttp handler: the text format by default, OpenMetrics
    # when asked for, gzip when accepted (a real server on a free port, a real HTTP client)
    m = Metrics()
    m.observe_api("get", "resourcequotas", 500)
    server = MetricsServer(m, host="127.0.0.1", port=0)
    await server.start()
    url = f"http://127.0.0.1:{server.port}/metrics"
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
            async with session.get(url, headers={"Accept-Encoding": "identity"}) as answer:
                text = await answer.text()
                assert answer.status == 200
                assert answer.headers["Content-Type"].startswith("text/plain; version=")
                assert answer.headers.get("Content-Encoding") is None
            line = 'dynquota_api_errors_total{code="500",resource="resourcequotas",verb="get"} 1.0'
            assert line in text.splitlines()
            openmetrics = {"Accept": "application/openmetrics-text; version=1.0.0"}
            async with session.get(url, headers=openmetrics) as answer:
                assert answer.headers["Content-Type"].startswith("application/openmetrics-text")
                assert (await answer.text()).endswith("# EOF\n")
            async with session.get(url, headers={"Accept-Encoding": "gzip"}) as answer:
                assert answer.headers["Content-Encoding"] == "gzip"
                assert line in (await answer.text()).splitlines()  # aiohttp inflates it
    finally:
        await server.stop()
