"""The companion LimitRange's pure parts: the policy fields, what it covers, equality with a
stored one, ownership."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from dynquota.policy import ContainerDefaults, DynamicQuotaPolicySpec, validate_policy
from dynquota.policy.limitrange import limit_range_covers, owned_limit_range

LABELLED = {"app.kubernetes.io/managed-by": "dynquota"}


def spec(**fields: Any) -> DynamicQuotaPolicySpec:
    return DynamicQuotaPolicySpec.model_validate(fields)


def reason(**fields: Any) -> str | None:
    return validate_policy({"metadata": {"name": "p"}, "spec": fields}).reason


def test_default_requests_give_the_container_defaults() -> None:
    s = spec(defaultRequests={"cpu": "100m", "memory": "128Mi"})
    assert s.container_defaults == ContainerDefaults({"cpu": "100m", "memory": "128Mi"}, {})
    assert s.container_defaults.limits_item() == {
        "type": "Container",
        "defaultRequest": {"cpu": "100m", "memory": "128Mi"},
    }
    assert spec().container_defaults.wanted is False
    assert spec(defaultRequests=None).default_requests == {}


def test_default_limits_need_the_explicit_opt_in() -> None:
    assert reason(defaultLimits={"cpu": "1"}) == (
        "spec: defaultLimits caps every container without its own limit at run time: it needs "
        "allowDefaultLimits: true"
    )
    s = spec(defaultRequests={"cpu": "100m"}, defaultLimits={"cpu": "1"}, allowDefaultLimits=True)
    assert s.container_defaults.limits_item() == {
        "type": "Container",
        "defaultRequest": {"cpu": "100m"},
        "default": {"cpu": "1"},
    }


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (
            {"defaultRequests": {"nvidia.com/gpu": "1"}},
            "spec.defaultRequests: defaultRequests: 'nvidia.com/gpu' is not one of cpu, memory, "
            "ephemeral-storage",
        ),
        (
            {"defaultRequests": {"cpu": "0"}},
            "spec.defaultRequests: defaultRequests.cpu: must be above 0, not '0'",
        ),
        (
            {"defaultRequests": {"cpu": "0.5m"}},
            "spec.defaultRequests: defaultRequests.cpu: must be a whole number of millicores, "
            "not '0.5m'",
        ),
        (
            {"defaultRequests": {"memory": "1.5"}},
            "spec.defaultRequests: defaultRequests.memory: must be a whole number of bytes, not "
            "'1.5'",
        ),
        (
            {"defaultRequests": {"memory": "1 Gi"}},
            "spec.defaultRequests: defaultRequests.memory: invalid quantity '1 Gi'",
        ),
        (
            {
                "defaultRequests": {"cpu": "2"},
                "defaultLimits": {"cpu": "1500m"},
                "allowDefaultLimits": True,
            },
            "spec: defaultRequests.cpu (2) must not exceed defaultLimits.cpu (1500m)",
        ),
    ],
)
def test_bad_defaults_are_invalid_naming_the_field(fields: dict[str, Any], message: str) -> None:
    got = reason(**fields)
    assert got is not None
    assert got.startswith(message), got


def test_covers_requests_and_with_limits_the_limits_keys() -> None:
    assert ContainerDefaults({"cpu": "100m"}).covers() == {"cpu", "requests.cpu"}
    assert ContainerDefaults({}, {"memory": "1Gi"}).covers() == {
        "memory",
        "requests.memory",
        "limits.memory",
    }


def test_a_stored_limit_range_matches_numerically_and_exactly() -> None:
    d = ContainerDefaults({"cpu": "0.1"}, {"cpu": "1", "memory": "1Gi"})
    # the apiserver canonicalises quantities and fills defaultRequest from default
    stored = [
        {
            "type": "Container",
            "defaultRequest": {"cpu": "100m", "memory": "1Gi"},
            "default": {"cpu": "1", "memory": "1024Mi"},
        }
    ]
    assert d.matches(stored) is True
    assert d.matches([{**stored[0], "max": {"cpu": "2"}}]) is False
    assert d.matches([{**stored[0], "defaultRequest": {"cpu": "200m", "memory": "1Gi"}}]) is False
    assert d.matches([{**stored[0], "type": "Pod"}]) is False
    assert d.matches([*stored, *stored]) is False
    assert d.matches(None) is False


def test_limit_range_covers_container_defaults_only() -> None:
    items = [
        {"spec": {"limits": [{"type": "Container", "defaultRequest": {"cpu": "100m"}}]}},
        {"spec": {"limits": [{"type": "Pod", "max": {"memory": "1Gi"}}]}},
        {"spec": {"limits": [{"type": "Container", "default": {"memory": "1Gi"}}]}},
    ]
    assert limit_range_covers(items) == {
        "cpu",
        "requests.cpu",
        "memory",
        "requests.memory",
        "limits.memory",
    }


def test_only_the_labelled_limit_range_named_dynquota_is_owned() -> None:
    ours = {"metadata": {"name": "dynquota", "labels": LABELLED}}
    theirs = {"metadata": {"name": "dynquota", "labels": {}}}
    other = {"metadata": {"name": "defaults", "labels": LABELLED}}
    assert owned_limit_range([other, ours]) == (ours, True)
    assert owned_limit_range([theirs]) == (theirs, False)
    assert owned_limit_range([other]) == (None, False)


def test_model_rejects_unknown_field_types() -> None:
    with pytest.raises(ValidationError):
        spec(allowDefaultLimits="yes")
