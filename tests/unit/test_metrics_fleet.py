"""The fleet view of /metrics: build info, process collectors, and the ``enforcement`` label of
the per-namespace series (issue 30)."""

from __future__ import annotations

import platform

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import generate_latest

from dynquota import __version__
from dynquota.metrics import Metrics
from dynquota.metrics.fleet import EnforcementLabels, FleetRegistry, build_labels
from dynquota.testing.promql import scrape_families

PER_NAMESPACE = (
    "dynquota_usage", "dynquota_tally", "dynquota_hard", "dynquota_target", "dynquota_maximum",
    "dynquota_drift", "dynquota_usage_above_maximum", "dynquota_usage_unknown",
)  # fmt: skip


def exposition(m: Metrics) -> str:
    return generate_latest(m.registry).decode()


def test_build_info_names_the_version_and_runtime() -> None:
    m = Metrics()
    labels = build_labels(__version__)
    assert labels["version"] == __version__
    assert labels["python_version"] == platform.python_version()
    assert set(labels) == {
        "version", "python_version", "python_implementation", "kopf_version",
        "kubernetes_asyncio_version", "pydantic_version", "prometheus_client_version",
    }  # fmt: skip
    assert "unknown" not in labels.values()  # every library is installed here
    assert m.registry.get_sample_value("dynquota_build_info", labels) == 1.0


def test_process_and_platform_collectors_are_on_the_operators_registry() -> None:
    families = scrape_families(exposition(Metrics()))
    for family in (
        "process_cpu_seconds_total", "process_resident_memory_bytes", "process_start_time_seconds",
        "process_open_fds", "python_info", "python_gc_collections_total", "dynquota_build_info",
    ):  # fmt: skip
        assert family in families or family.removesuffix("_total") in families, family
    # two operators in one process (the tests) do not clash
    Metrics()


def test_every_per_namespace_series_carries_its_enforcement() -> None:
    m = Metrics()
    for gauge in (m.usage, m.tally, m.hard, m.target, m.maximum, m.drift, m.above_maximum,
                  m.usage_unknown):  # fmt: skip
        gauge.labels("team-a", "pods").set(1)
        gauge.labels("team-b", "pods").set(2)
    m.exhaustion.labels("team-a", "pods", "hard").set(60)
    m.overrides_active.labels("team-b").set(1)
    m.set_enforcement("team-a", "enforced")
    m.set_enforcement("team-b", "dry-run")
    text = exposition(m)
    for name in PER_NAMESPACE:
        assert f'{name}{{enforcement="enforced",namespace="team-a",resource="pods"}} 1.0' in text
        assert f'{name}{{enforcement="dry-run",namespace="team-b",resource="pods"}} 2.0' in text
    assert (
        'dynquota_exhaustion_seconds{enforcement="enforced",limit="hard",namespace="team-a",'
        'resource="pods"} 60.0'
    ) in text
    assert 'dynquota_overrides_active{enforcement="dry-run",namespace="team-b"} 1.0' in text
    # the HELP and TYPE lines stay those of the gauges
    assert "# TYPE dynquota_hard gauge" in text
    assert "# HELP dynquota_hard spec.hard of the managed quota (simulated in dry run)" in text


def test_a_namespace_not_said_yet_is_unknown_and_a_change_leaves_no_stale_series() -> None:
    m = Metrics()
    m.hard.labels("team-a", "pods").set(10)
    assert 'dynquota_hard{enforcement="unknown",namespace="team-a",resource="pods"} 10.0' in (
        exposition(m)
    )
    m.set_enforcement("team-a", "dry-run")
    m.set_enforcement("team-a", "enforced")
    text = exposition(m)
    assert text.count('namespace="team-a",resource="pods"} 10.0') == 1
    assert 'dynquota_hard{enforcement="enforced",namespace="team-a",resource="pods"} 10.0' in text
    assert m.enforcement("team-a") == "enforced"


def test_forgetting_a_namespace_forgets_its_mode_only_when_no_series_is_left() -> None:
    m = Metrics()
    m.hard.labels("team-a", "pods").set(10)
    m.hard.labels("team-a", "secrets").set(5)
    m.set_enforcement("team-a", "dry-run")
    m.forget_namespace("team-a", ["secrets"])
    assert m.enforcement("team-a") == "dry-run"
    m.forget_namespace("team-a", ["pods", "configmaps"])
    assert m.enforcement("team-a") == "unknown"
    assert "team-a" not in exposition(m)


def test_an_unknown_mode_is_refused() -> None:
    with pytest.raises(ValueError, match="enforcement must be one of"):
        Metrics().set_enforcement("team-a", "audit")


def test_a_lookup_without_enforcement_finds_the_series_and_one_with_it_must_match() -> None:
    m = Metrics()
    m.usage.labels("team-a", "pods").set(7)
    m.set_enforcement("team-a", "dry-run")
    labels = {"namespace": "team-a", "resource": "pods"}
    assert m.registry.get_sample_value("dynquota_usage", labels) == 7
    assert m.registry.get_sample_value("dynquota_usage", {**labels, "enforcement": "dry-run"}) == 7
    assert (
        m.registry.get_sample_value("dynquota_usage", {**labels, "enforcement": "enforced"}) is None
    )
    assert m.registry.get_sample_value("dynquota_usage", {"namespace": "team-b"}) is None


def test_a_plain_registry_works_too() -> None:
    registry = CollectorRegistry()
    m = Metrics(registry)
    m.hard.labels("team-a", "pods").set(3)
    assert (
        registry.get_sample_value(
            "dynquota_hard", {"namespace": "team-a", "resource": "pods", "enforcement": "unknown"}
        )
        == 3
    )
    assert isinstance(Metrics().registry, FleetRegistry)
    assert isinstance(EnforcementLabels([]).modes(), dict)
