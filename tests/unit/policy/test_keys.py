"""The quota key catalogue (dynquota.policy.keys) against the upstream evaluators' rules."""

from __future__ import annotations

from decimal import Decimal

import pytest

from dynquota.policy.keys import QuotaKeyError, classify, conflicting_aliases

SERVED = {
    ("", "pods"): True,
    ("", "secrets"): True,
    ("", "nodes"): False,
    ("batch", "jobs"): True,
    ("apps", "deployments"): True,
    ("example.com", "widgets"): True,
}


@pytest.mark.parametrize(
    ("key", "family", "canonical", "integer", "source"),
    [
        ("pods", "object-count", "pods", True, "tally"),
        ("configmaps", "object-count", "count/configmaps", True, "tally"),
        ("secrets", "object-count", "count/secrets", True, "status"),
        ("services", "object-count", "count/services", True, "status"),
        ("services.loadbalancers", "object-count", "services.loadbalancers", True, "status"),
        ("services.nodeports", "object-count", "services.nodeports", True, "status"),
        ("replicationcontrollers", "object-count", "count/replicationcontrollers", True, "status"),
        ("resourcequotas", "object-count", "count/resourcequotas", True, "status"),
        ("persistentvolumeclaims", "object-count", "count/persistentvolumeclaims", True, "status"),
        ("count/jobs.batch", "object-count", "count/jobs.batch", True, "status"),
        ("count/widgets.example.com", "object-count", "count/widgets.example.com", True, "status"),
        ("count/pods", "object-count", "count/pods", True, "status"),
        ("cpu", "compute", "requests.cpu", False, "status"),
        ("requests.cpu", "compute", "requests.cpu", False, "status"),
        ("limits.memory", "compute", "limits.memory", False, "status"),
        ("ephemeral-storage", "ephemeral-storage", "requests.ephemeral-storage", False, "status"),
        ("limits.ephemeral-storage", "ephemeral-storage", "limits.ephemeral-storage", False, "status"),  # noqa: E501
        ("hugepages-2Mi", "hugepages", "requests.hugepages-2Mi", False, "status"),
        ("requests.hugepages-1Gi", "hugepages", "requests.hugepages-1Gi", False, "status"),
        ("requests.storage", "storage", "requests.storage", False, "status"),
        ("gold.storageclass.storage.k8s.io/requests.storage", "storage",
         "gold.storageclass.storage.k8s.io/requests.storage", True, "status"),
        ("gold.storageclass.storage.k8s.io/persistentvolumeclaims", "object-count",
         "gold.storageclass.storage.k8s.io/persistentvolumeclaims", True, "status"),
        ("requests.nvidia.com/gpu", "extended", "requests.nvidia.com/gpu", True, "status"),
        ("requests.deviceclass.resource.kubernetes.io/gpu", "extended",
         "requests.deviceclass.resource.kubernetes.io/gpu", True, "status"),
        ("gpu.deviceclass.resource.k8s.io/devices", "device",
         "gpu.deviceclass.resource.k8s.io/devices", True, "status"),
    ],
)  # fmt: skip
def test_counted_keys(key: str, family: str, canonical: str, integer: bool, source: str) -> None:
    info = classify(key, SERVED)
    assert (info.key, info.family, info.canonical, info.integer, info.source) == (
        key,
        family,
        canonical,
        integer,
        source,
    )


def test_compute_trap_is_exactly_upstreams_validation_set() -> None:
    keys = [
        "cpu", "memory", "requests.cpu", "requests.memory", "limits.cpu", "limits.memory",
        "ephemeral-storage", "requests.ephemeral-storage", "hugepages-2Mi",
        "requests.nvidia.com/gpu", "gpu.deviceclass.resource.k8s.io/devices", "pods", "secrets",
    ]  # fmt: skip
    trapped = [k for k in keys if classify(k).compute_trap]
    assert trapped == keys[:6]
    assert [k for k in keys if classify(k).needs_default_limits] == ["limits.cpu", "limits.memory"]


@pytest.mark.parametrize(
    ("key", "granularity"),
    [
        ("requests.cpu", Decimal("0.1")),
        ("memory", Decimal(1024**2)),
        ("requests.ephemeral-storage", Decimal(1024**2)),
        ("requests.storage", Decimal(1024**3)),
        ("hugepages-2Mi", Decimal(2 * 1024**2)),
        ("secrets", Decimal(1)),
    ],
)
def test_default_granularity(key: str, granularity: Decimal) -> None:
    assert classify(key).granularity == granularity


@pytest.mark.parametrize(
    ("key", "reason"),
    [
        ("nvidia.com/gpu", "extended resources are counted only as 'requests.nvidia.com/gpu'"),
        ("limits.nvidia.com/gpu", "extended resources are counted only as requests.<name>, never limits."),  # noqa: E501
        ("count/events", "the quota system never counts this kind"),
        ("count/events.events.k8s.io", "the quota system never counts this kind"),
        ("count/deployment.apps", "no served resource 'deployment.apps' (check the plural and the group)"),  # noqa: E501
        ("count/nodes", "'nodes' is cluster-scoped; a namespace quota cannot count it"),
        ("count/", "not a qualified resource name"),
        ("count/Jobs.batch", "expected count/<resource> or count/<resource>.<group>"),
        ("storage", "not a resource the quota system counts"),
        ("requests.pods", "not a resource the quota system counts"),
        ("hugepages-big", "hugepage size 'big' is not a quantity"),
        ("gold.storageclass.storage.k8s.io/storage", "a storage class key ends in /requests.storage or /persistentvolumeclaims"),  # noqa: E501
        ("has space", "not a qualified resource name"),
    ],
)  # fmt: skip
def test_uncounted_keys_are_refused_with_the_reason(key: str, reason: str) -> None:
    with pytest.raises(QuotaKeyError) as caught:
        classify(key, SERVED)
    assert caught.value.key == key
    assert caught.value.reason == reason
    assert str(caught.value) == f"{key!r}: {reason}"


def test_count_keys_without_discovery_check_syntax_only() -> None:
    assert classify("count/deployment.apps").family == "object-count"
    with pytest.raises(QuotaKeyError):
        classify("count/events")


def test_aliases_named_together_are_reported_in_input_order() -> None:
    keys = ["pods", "cpu", "count/pods", "secrets", "requests.cpu", "count/secrets", "bogus key"]
    assert conflicting_aliases(keys) == [("cpu", "requests.cpu"), ("secrets", "count/secrets")]
