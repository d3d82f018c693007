"""Quota counting semantics for pods and ConfigMaps (dynquota.usage.counting)."""

from __future__ import annotations

import math
from datetime import UTC, datetime

import pytest

from dynquota.usage import (
    CONFIGMAPS,
    INDEFINITE,
    PODS,
    charge,
    parse_time,
    pod_counts,
    pod_expiry,
)

NOW = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC).timestamp()


def rfc3339(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def pod(
    phase: str | None = None, deleted_at: float | None = None, grace: int | None = None
) -> dict[str, object]:
    metadata: dict[str, object] = {"name": "p", "namespace": "ns", "uid": "u1"}
    if deleted_at is not None:
        metadata["deletionTimestamp"] = rfc3339(deleted_at)
    if grace is not None:
        metadata["deletionGracePeriodSeconds"] = grace
    obj: dict[str, object] = {"metadata": metadata}
    if phase is not None:
        obj["status"] = {"phase": phase}
    return obj


def counted(obj: dict[str, object], now: float = NOW) -> bool:
    expiry = charge(PODS, obj)
    return expiry is not None and now <= expiry


def test_parse_time_utc() -> None:
    assert parse_time("2026-03-01T12:00:00Z") == NOW
    assert parse_time("2026-03-01T13:00:00+01:00") == NOW


@pytest.mark.parametrize("bad", ["2026-03-01T12:00:00", "yesterday", ""])
def test_parse_time_rejects(bad: str) -> None:
    with pytest.raises(ValueError, match=r"."):
        parse_time(bad)


@pytest.mark.parametrize("phase", ["Succeeded", "Failed"])
def test_terminal_pods_not_counted(phase: str) -> None:
    assert charge(PODS, pod(phase)) is None
    assert pod_counts(phase, INDEFINITE, NOW) is False


@pytest.mark.parametrize("phase", [None, "Pending", "Running", "Unknown"])
def test_non_terminal_pods_counted(phase: str | None) -> None:
    assert charge(PODS, pod(phase)) == INDEFINITE
    assert pod_counts(phase, INDEFINITE, NOW) is True


def test_terminating_pod_within_grace_counted() -> None:
    # deletionTimestamp 10 s ago with grace 30 s: expires 20 s from now.
    obj = pod("Running", deleted_at=NOW - 10, grace=30)
    assert charge(PODS, obj) == NOW + 20
    assert counted(obj) is True


def test_terminating_pod_past_grace_not_counted() -> None:
    # deletionTimestamp 10 s ago with grace 5 s: expired 5 s ago.
    obj = pod("Running", deleted_at=NOW - 10, grace=5)
    assert charge(PODS, obj) == NOW - 5
    assert counted(obj) is False


def test_counted_exactly_at_expiry_not_after() -> None:
    # Upstream stops charging only when now is strictly after the expiry.
    expiry = pod_expiry({"deletionTimestamp": rfc3339(NOW), "deletionGracePeriodSeconds": 0})
    assert expiry == NOW
    assert pod_counts(None, expiry, NOW) is True
    assert pod_counts(None, expiry, NOW + 0.001) is False


def test_deletion_timestamp_without_grace_counts_forever() -> None:
    assert pod_expiry({"deletionTimestamp": rfc3339(NOW - 3600)}) == INDEFINITE
    assert pod_expiry({"deletionGracePeriodSeconds": 30}) == INDEFINITE


def test_negative_grace_is_one_second() -> None:
    metadata = {"deletionTimestamp": rfc3339(NOW), "deletionGracePeriodSeconds": -7}
    assert pod_expiry(metadata) == NOW + 1


def test_request_time_plus_twice_grace() -> None:
    # A delete at t with grace g stores deletionTimestamp t+g: the quota charges until t+2g.
    requested, grace = NOW, 30
    expiry = pod_expiry(
        {"deletionTimestamp": rfc3339(requested + grace), "deletionGracePeriodSeconds": grace}
    )
    assert expiry == requested + 2 * grace


def test_configmaps_always_counted() -> None:
    terminating = {"metadata": {"deletionTimestamp": rfc3339(NOW - 999)}}
    assert charge(CONFIGMAPS, {"metadata": {"name": "kube-root-ca.crt"}}) == INDEFINITE
    assert charge(CONFIGMAPS, terminating) == INDEFINITE
    assert math.isinf(charge(CONFIGMAPS, {}) or 0.0)


def test_untracked_resource_rejected() -> None:
    with pytest.raises(ValueError, match="untracked resource: 'secrets'"):
        charge("secrets", {"metadata": {}})
