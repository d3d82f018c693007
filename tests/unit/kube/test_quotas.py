"""The managed-quota adapter's pure parts: snapshots, identity, the merge-patch body; settings."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from dynquota.kube.quotas import (
    MANAGED_BY_LABEL,
    QuotaSnapshot,
)
from dynquota.settings import Settings, parse_duration_seconds


def snapshot(
    hard: dict[str, str],
    annotations: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    name: str = "dynquota",
) -> QuotaSnapshot:
    return QuotaSnapshot.from_object(
        {
            "metadata": {
                "name": name,
                "namespace": "team-a",
                "uid": "u1",
                "resourceVersion": "42",
                "labels": {MANAGED_BY_LABEL: "dynquota"} if labels is None else labels,
                "annotations": annotations or {},
            },
            "spec": {"hard": hard},
            "status": {"hard": hard, "used": {"pods": "3", "configmaps": "1k"}},
        }
    )


def test_snapshot_reads_counts_and_identity() -> None:
    q = snapshot({"pods": "14", "configmaps": "1k"})
    assert q.managed is True
    assert q.hard_int("pods") == 14
    assert q.hard_int("configmaps") == 1000
    assert q.used_int("configmaps") == 1000
    assert q.used_int("secrets") is None
    assert q.resource_version == "42"


def test_same_name_without_label_or_other_name_is_not_managed() -> None:
    assert snapshot({}, labels={}).managed is False
    assert snapshot({}, labels={MANAGED_BY_LABEL: "helm"}).managed is False
    assert snapshot({}, name="other").managed is False


def test_settings_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DYNQUOTA_DRY_RUN", "true")
    monkeypatch.setenv("DYNQUOTA_OVERRIDE_TTL", "1h30m")
    monkeypatch.setenv("DYNQUOTA_EXCLUDE_NAMESPACES", "a, b,,c")
    monkeypatch.setenv("DYNQUOTA_LOG_FORMAT", "JSON")
    monkeypatch.setenv("DYNQUOTA_NAMESPACE", "dynquota-system")
    s = Settings()
    assert s.dry_run is True
    assert s.override_ttl == 5400
    assert s.exclude_namespaces == ["a", "b", "c"]
    assert s.log_format == "json"
    assert s.excluded("kube-system")
    assert s.excluded("dynquota-system")
    assert s.excluded("b")
    assert not s.excluded("team-a")


def test_settings_defaults_and_flags_win(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DYNQUOTA_METRICS_PORT", "9999")
    s = Settings(metrics_port=1234)
    assert s.metrics_port == 1234
    assert s.override_ttl == 168 * 3600
    assert s.probe_port == 8081
    assert s.kill_switch_delete_qps == 20.0
    assert s.lease_name == "dynquota"
    assert Settings(include_namespaces="x,y").excluded("z")


def test_settings_reject_bad_values() -> None:
    with pytest.raises(ValidationError):
        Settings(override_ttl="7d")
    with pytest.raises(ValidationError):
        Settings(log_format="xml")
    with pytest.raises(ValueError, match="positive"):
        parse_duration_seconds("0s")
    assert parse_duration_seconds("168h") == 604800
    assert parse_duration_seconds("3600") == 3600
