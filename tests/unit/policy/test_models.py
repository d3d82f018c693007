"""Unit tests for dynquota.policy models: profiles, durations, selectors, policy validation."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from dynquota.policy import (
    CONFIGMAPS,
    DEFAULT_PROFILES,
    MAX_DURATION_SECONDS,
    PODS,
    LabelSelector,
    ResourceProfile,
    format_duration,
    parse_duration,
    validate_policy,
)


def _policy(spec: Any, name: str = "team-a") -> dict[str, Any]:
    return {
        "apiVersion": "dynquota.io/v1alpha1",
        "kind": "DynamicQuotaPolicy",
        "metadata": {"name": name},
        "spec": spec,
    }


# -- durations --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("90s", 90),
        ("5m", 300),
        ("1h30m", 5400),
        ("1h", 3600),
        ("6h", 21600),
        ("2m", 120),
        ("0s", 0),
        ("1h1m1s", 3661),
        ("90m", 5400),
        ("8760h", MAX_DURATION_SECONDS),
        ("007s", 7),
    ],
)
def test_parse_duration(text: str, seconds: int) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "",
            "invalid duration '': expected whole hours, minutes and seconds in that order, "
            "like 90s, 5m or 1h30m",
        ),
        (
            "300",
            "invalid duration '300': expected whole hours, minutes and seconds in that "
            "order, like 90s, 5m or 1h30m",
        ),
        (
            "1.5h",
            "invalid duration '1.5h': expected whole hours, minutes and seconds in that "
            "order, like 90s, 5m or 1h30m",
        ),
        (
            "5m1h",
            "invalid duration '5m1h': expected whole hours, minutes and seconds in that "
            "order, like 90s, 5m or 1h30m",
        ),
        (
            "1d",
            "invalid duration '1d': expected whole hours, minutes and seconds in that "
            "order, like 90s, 5m or 1h30m (write 24h)",
        ),
        (
            " 5m",
            "invalid duration ' 5m': expected whole hours, minutes and seconds in that "
            "order, like 90s, 5m or 1h30m",
        ),
        (
            "-5m",
            "invalid duration '-5m': expected whole hours, minutes and seconds in that "
            "order, like 90s, 5m or 1h30m",
        ),
        ("8761h", "invalid duration '8761h': longer than 8760h"),
    ],
)
def test_parse_duration_invalid(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=r"^invalid duration ") as info:
        parse_duration(text)
    assert str(info.value) == message


@pytest.mark.parametrize(
    ("seconds", "text"), [(0, "0s"), (90, "1m30s"), (3600, "1h"), (5400, "1h30m"), (3661, "1h1m1s")]
)
def test_format_duration(seconds: int, text: str) -> None:
    assert format_duration(seconds) == text


@given(st.integers(min_value=0, max_value=MAX_DURATION_SECONDS))
def test_duration_round_trip(seconds: int) -> None:
    assert parse_duration(format_duration(seconds)) == seconds


# -- profiles and defaults --------------------------------------------------------------------


def test_default_profiles() -> None:
    pods, configmaps = DEFAULT_PROFILES[PODS], DEFAULT_PROFILES[CONFIGMAPS]
    assert (pods.buffer_percent, pods.minimum, pods.maximum) == (40, 10, 1000)
    assert (pods.upscale_cooldown, pods.downscale_cooldown) == (300, 3600)
    assert (configmaps.buffer_percent, configmaps.minimum, configmaps.maximum) == (40, 50, 2000)
    assert (configmaps.upscale_cooldown, configmaps.downscale_cooldown) == (120, 21600)
    assert pods.sizing_key() == "bufferPercent=40,minimum=10,maximum=1000"
    assert pods.to_crd() == {
        "bufferPercent": 40,
        "minimum": 10,
        "maximum": 1000,
        "upscaleCooldown": "5m",
        "downscaleCooldown": "1h",
    }


def test_profile_by_alias_and_by_name() -> None:
    by_alias = ResourceProfile.model_validate(
        {
            "bufferPercent": 0,
            "minimum": 0,
            "maximum": 0,
            "upscaleCooldown": "0s",
            "downscaleCooldown": "90s",
        }
    )
    assert by_alias == ResourceProfile.of(0, 0, 0, 0, 90)
    with pytest.raises(ValidationError):
        ResourceProfile.of(40, 11, 10, 300, 3600)


def test_empty_spec_gets_all_defaults() -> None:
    info = validate_policy(_policy({}))
    assert info.valid
    assert info.reason is None
    assert info.spec is not None
    assert info.spec.priority == 0
    assert info.spec.dry_run is False
    assert info.spec.resources == dict(DEFAULT_PROFILES)
    assert info.spec.namespace_selector.matches({})
    assert info.selector is not None
    assert info.priority == 0


def test_partial_profile_fills_defaults_per_resource() -> None:
    info = validate_policy(
        _policy(
            {
                "priority": 7,
                "dryRun": True,
                "resources": {"configmaps": {"maximum": 300, "upscaleCooldown": "1h30m"}},
            }
        )
    )
    assert info.spec is not None
    assert info.spec.priority == 7
    assert info.spec.dry_run is True
    assert info.spec.resources[PODS] == DEFAULT_PROFILES[PODS]
    assert info.spec.resources[CONFIGMAPS] == ResourceProfile.of(40, 50, 300, 5400, 21600)


def test_null_spec_parts_mean_defaults() -> None:
    info = validate_policy(_policy({"namespaceSelector": None, "resources": None}))
    assert info.spec is not None
    assert info.spec.resources == dict(DEFAULT_PROFILES)
    assert validate_policy({"metadata": {"name": "x"}}).valid


# -- malformed policies: exact Valid=False messages -------------------------------------------

_DURATION_HELP = "expected whole hours, minutes and seconds in that order, like 90s, 5m or 1h30m"
_NAME_RULE = (
    "alphanumeric characters, '-', '_' or '.', starting and ending with an alphanumeric character"
)

MALFORMED: list[tuple[Any, str]] = [
    (
        {"resources": {"count/nodes": {}}},
        "spec.resources: resource key not counted by the Kubernetes quota system: "
        "'count/nodes': 'nodes' is cluster-scoped; a namespace quota cannot count it",
    ),
    (
        {"resources": {"secrets": {}, "count/nodes": {"maximum": 1}, "nvidia.com/gpu": {}}},
        "spec.resources: resource keys not counted by the Kubernetes quota system: "
        "'count/nodes': 'nodes' is cluster-scoped; a namespace quota cannot count it; "
        "'nvidia.com/gpu': extended resources are counted only as 'requests.nvidia.com/gpu'",
    ),
    (
        {"resources": {"limits.nvidia.com/gpu": {"maximum": 1}, "count/events": {}}},
        "spec.resources: resource keys not counted by the Kubernetes quota system: "
        "'count/events': the quota system never counts this kind; 'limits.nvidia.com/gpu': "
        "extended resources are counted only as requests.<name>, never limits.",
    ),
    (
        {"resources": {"count/deployment.apps": {"maximum": 3}}},
        "spec.resources: resource key not counted by the Kubernetes quota system: "
        "'count/deployment.apps': group 'apps' serves no namespaced resource 'deployment' "
        "(check the plural)",
    ),
    (
        {"resources": {"secret": {"maximum": 3}}},
        "spec.resources: resource key not counted by the Kubernetes quota system: "
        "'secret': not a resource the quota system counts",
    ),
    (
        {"resources": {"cpu": {"maximum": "2"}, "requests.cpu": {"maximum": "2"}}},
        "spec.resources: 'cpu' and 'requests.cpu' name the same quota resource: give only one "
        "of them",
    ),
    (
        {"resources": {"secrets": {}}},
        "spec.resources: secrets: maximum is required (only pods and configmaps have a "
        "built-in maximum)",
    ),
    (
        {"resources": {"requests.memory": {"maximum": "4Gb"}}},
        "spec.resources: requests.memory: maximum: invalid quantity '4Gb': expected a signed "
        "decimal number with an optional suffix (n, u, m, k, M, G, T, P, E, Ki, Mi, Gi, Ti, Pi, "
        "Ei, or e/E and an integer exponent), without spaces",
    ),
    (
        {"resources": {"count/jobs.batch": {"maximum": "30.5"}}},
        "spec.resources: count/jobs.batch: maximum must be a whole number, not '30.5'",
    ),
    (
        {"resources": {"requests.cpu": {"minimum": "2", "maximum": "1"}}},
        "spec.resources: requests.cpu: minimum (2) must be less than or equal to maximum (1)",
    ),
    (
        {"resources": {"pods": {"maximum": 5}}},
        "spec.resources.pods: minimum (10) must be less than or equal to maximum (5)",
    ),
    (
        {"resources": {"pods": {"minimum": 20, "maximum": 10}}},
        "spec.resources.pods: minimum (20) must be less than or equal to maximum (10)",
    ),
    (
        {"resources": {"pods": {"bufferPercent": 1001}}},
        "spec.resources.pods.bufferPercent: must be between 0 and 1000, not 1001",
    ),
    (
        {"resources": {"configmaps": {"bufferPercent": -1}}},
        "spec.resources.configmaps.bufferPercent: must be between 0 and 1000, not -1",
    ),
    (
        {"resources": {"pods": {"bufferPercent": "40"}}},
        "spec.resources.pods.bufferPercent: must be an integer",
    ),
    (
        {"resources": {"pods": {"bufferPercent": 40.5}}},
        "spec.resources.pods.bufferPercent: must be an integer",
    ),
    (
        {"resources": {"pods": {"minimum": True}}},
        "spec.resources.pods.minimum: must be an integer",
    ),
    (
        {"resources": {"pods": {"minimum": -1}}},
        "spec.resources.pods.minimum: must be between 0 and 9223372036854775807, not -1",
    ),
    (
        {"resources": {"pods": {"upscaleCooldown": "5 minutes"}}},
        f"spec.resources.pods.upscaleCooldown: invalid duration '5 minutes': {_DURATION_HELP}",
    ),
    (
        {"resources": {"pods": {"downscaleCooldown": 3600}}},
        "spec.resources.pods.downscaleCooldown: must be a duration string like 90s, 5m or "
        "1h30m, not 3600",
    ),
    (
        {"resources": {"pods": {"bufferPercent": 40, "buffer": 40}}},
        "spec.resources.pods.buffer: unknown field",
    ),
    ({"resources": {"pods": None}}, "spec.resources.pods: must be an object"),
    ({"resources": ["pods"]}, "spec.resources: must be an object"),
    ({"priority": "high"}, "spec.priority: must be an integer"),
    ({"priority": 2**31}, "spec.priority: must be a 32-bit integer, not 2147483648"),
    ({"dryRun": "yes"}, "spec.dryRun: must be true or false"),
    ({"namespaceSelecter": {}}, "spec.namespaceSelecter: unknown field"),
    (
        {"namespaceSelector": {"matchExpressions": [{"key": "team", "operator": "In"}]}},
        "spec.namespaceSelector.matchExpressions[0]: values must be non-empty for operator In",
    ),
    (
        {
            "namespaceSelector": {
                "matchExpressions": [{"key": "team", "operator": "NotIn", "values": []}]
            }
        },
        "spec.namespaceSelector.matchExpressions[0]: values must be non-empty for operator NotIn",
    ),
    (
        {
            "namespaceSelector": {
                "matchExpressions": [
                    {"key": "team", "operator": "In", "values": ["a"]},
                    {"key": "team", "operator": "Exists", "values": ["a"]},
                ]
            }
        },
        "spec.namespaceSelector.matchExpressions[1]: values must be empty for operator Exists",
    ),
    (
        {
            "namespaceSelector": {
                "matchExpressions": [{"key": "team", "operator": "DoesNotExist", "values": ["x"]}]
            }
        },
        "spec.namespaceSelector.matchExpressions[0]: values must be empty for operator "
        "DoesNotExist",
    ),
    (
        {
            "namespaceSelector": {
                "matchExpressions": [{"key": "team", "operator": "in", "values": ["a"]}]
            }
        },
        "spec.namespaceSelector.matchExpressions[0].operator: unknown operator 'in': expected "
        "In, NotIn, Exists or DoesNotExist",
    ),
    (
        {"namespaceSelector": {"matchExpressions": [{"operator": "Exists"}]}},
        "spec.namespaceSelector.matchExpressions[0].key: required field is missing",
    ),
    (
        {"namespaceSelector": {"matchLabels": {"team a": "x"}}},
        f"spec.namespaceSelector.matchLabels: invalid label key 'team a': the name part must "
        f"be at most 63 {_NAME_RULE}",
    ),
    (
        {"namespaceSelector": {"matchLabels": {"Example.com/team": "x"}}},
        "spec.namespaceSelector.matchLabels: invalid label key 'Example.com/team': the prefix "
        "must be a lowercase DNS subdomain (at most 253 characters)",
    ),
    (
        {"namespaceSelector": {"matchLabels": {"a/b/c": "x"}}},
        "spec.namespaceSelector.matchLabels: invalid label key 'a/b/c': at most one '/' allowed",
    ),
    (
        {"namespaceSelector": {"matchLabels": {"/team": "x"}}},
        "spec.namespaceSelector.matchLabels: invalid label key '/team': the prefix before '/' "
        "is empty",
    ),
    (
        {"namespaceSelector": {"matchLabels": {"team": "-x"}}},
        f"spec.namespaceSelector.matchLabels: invalid label value '-x': must be empty or at "
        f"most 63 {_NAME_RULE}",
    ),
    (
        {"namespaceSelector": {"matchLabels": {"team": "x" * 64}}},
        f"spec.namespaceSelector.matchLabels: invalid label value '{'x' * 64}': must be empty "
        f"or at most 63 {_NAME_RULE}",
    ),
    (
        {"namespaceSelector": {"matchLabels": {"team": 1}}},
        "spec.namespaceSelector.matchLabels.team: must be a string",
    ),
    (
        {
            "priority": "x",
            "resources": {"pods": {"bufferPercent": 2000, "upscaleCooldown": "1d"}},
        },
        "spec.priority: must be an integer; spec.resources.pods.bufferPercent: must be between "
        f"0 and 1000, not 2000; spec.resources.pods.upscaleCooldown: invalid duration '1d': "
        f"{_DURATION_HELP} (write 24h)",
    ),
    ("not a spec", "spec: must be an object"),
]


@pytest.mark.parametrize(("spec", "reason"), MALFORMED)
def test_malformed_policy_reason(spec: Any, reason: str) -> None:
    info = validate_policy(_policy(spec))
    assert info.name == "team-a"
    assert not info.valid
    assert info.spec is None
    assert info.reason == reason


def test_malformed_without_name() -> None:
    info = validate_policy({"spec": {}})
    assert info.reason == "metadata.name: required field is missing"
    assert info.name == ""


def test_invalid_policy_keeps_what_it_can() -> None:
    # Resources broken, selector and priority fine: both usable for selection.
    info = validate_policy(
        _policy(
            {
                "priority": 5,
                "namespaceSelector": {"matchLabels": {"team": "a"}},
                "resources": {"count/nodes": {}},
            }
        )
    )
    assert not info.valid
    assert info.priority == 5
    assert info.selector is not None
    assert info.selector.matches({"team": "a"})
    assert not info.selector.matches({"team": "b"})
    # Selector broken, priority not an integer: both unknown.
    info = validate_policy(
        _policy(
            {
                "priority": "5",
                "namespaceSelector": {"matchExpressions": [{"key": "t", "operator": "In"}]},
            }
        )
    )
    assert info.selector is None
    assert info.priority is None


# -- label selector semantics -----------------------------------------------------------------


def _selector(raw: dict[str, Any]) -> LabelSelector:
    return LabelSelector.model_validate(raw)


@pytest.mark.parametrize(
    ("raw", "labels", "matches"),
    [
        ({}, {}, True),
        ({}, {"any": "thing"}, True),
        ({"matchLabels": {"team": "a"}}, {"team": "a", "x": "y"}, True),
        ({"matchLabels": {"team": "a"}}, {"team": "b"}, False),
        ({"matchLabels": {"team": "a"}}, {}, False),
        ({"matchLabels": {"team": ""}}, {"team": ""}, True),
        ({"matchLabels": {"team": ""}}, {}, False),
        (
            {"matchExpressions": [{"key": "team", "operator": "In", "values": ["a", "b"]}]},
            {"team": "b"},
            True,
        ),
        (
            {"matchExpressions": [{"key": "team", "operator": "In", "values": ["a", "b"]}]},
            {"team": "c"},
            False,
        ),
        ({"matchExpressions": [{"key": "team", "operator": "In", "values": ["a"]}]}, {}, False),
        ({"matchExpressions": [{"key": "team", "operator": "NotIn", "values": ["a"]}]}, {}, True),
        (
            {"matchExpressions": [{"key": "team", "operator": "NotIn", "values": ["a"]}]},
            {"team": "a"},
            False,
        ),
        (
            {"matchExpressions": [{"key": "team", "operator": "NotIn", "values": ["a"]}]},
            {"team": "b"},
            True,
        ),
        ({"matchExpressions": [{"key": "team", "operator": "Exists"}]}, {"team": ""}, True),
        ({"matchExpressions": [{"key": "team", "operator": "Exists", "values": []}]}, {}, False),
        ({"matchExpressions": [{"key": "team", "operator": "DoesNotExist"}]}, {}, True),
        ({"matchExpressions": [{"key": "team", "operator": "DoesNotExist"}]}, {"team": "a"}, False),
        (
            {
                "matchLabels": {"env": "prod"},
                "matchExpressions": [
                    {"key": "team", "operator": "Exists"},
                    {"key": "tier", "operator": "NotIn", "values": ["system"]},
                ],
            },
            {"env": "prod", "team": "a", "tier": "web"},
            True,
        ),
        (
            {
                "matchLabels": {"env": "prod"},
                "matchExpressions": [
                    {"key": "team", "operator": "Exists"},
                    {"key": "tier", "operator": "NotIn", "values": ["system"]},
                ],
            },
            {"env": "prod", "team": "a", "tier": "system"},
            False,
        ),
        ({"matchLabels": {"example.com/team": "a"}}, {"example.com/team": "a"}, True),
        ({"matchLabels": None, "matchExpressions": None}, {"a": "b"}, True),
    ],
)
def test_selector_semantics(raw: dict[str, Any], labels: dict[str, str], matches: bool) -> None:
    assert _selector(raw).matches(labels) is matches


def test_counts_as_quantity_strings_are_the_same_policy_as_integers() -> None:
    """Issue 30: a count given as ResourceQuota writes it (``"60"``, ``"1k"``) is the integer."""
    as_text = validate_policy(
        {
            "metadata": {"name": "p"},
            "spec": {
                "resources": {
                    "pods": {"minimum": "5", "maximum": "1k"},
                    "secrets": {"maximum": "60", "roundTo": "5", "minimumHeadroom": "2"},
                }
            },
        }
    )
    as_int = validate_policy(
        {
            "metadata": {"name": "p"},
            "spec": {
                "resources": {
                    "pods": {"minimum": 5, "maximum": 1000},
                    "secrets": {"maximum": 60, "roundTo": 5, "minimumHeadroom": 2},
                }
            },
        }
    )
    assert as_text.reason is None
    assert as_text.spec == as_int.spec
