"""The DynamicQuotaPolicy CRD on the real apiserver: good policies stored with defaults, bad ones
refused with the schema's or the CEL rule's message (never pruned into something valid)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes
import pytest
from kubernetes.client.exceptions import ApiException

from dynquota.policy.durations import DURATION_MESSAGE
from dynquota.policy.models import validate_policy
from dynquota.testing.controlplane import LocalControlPlane

CRD_FILE = Path(__file__).resolve().parents[2] / "crds" / "dynamicquotapolicies.yaml"
GROUP, VERSION, PLURAL = "dynquota.io", "v1alpha1", "dynamicquotapolicies"


@pytest.fixture(scope="module")
def crd(controlplane: LocalControlPlane) -> str:
    """The CRD from crds/, applied server-side and Established."""
    controlplane.kubectl(
        "apply",
        "--server-side",
        "--force-conflicts",
        "--field-manager=test-crd",
        "-f",
        str(CRD_FILE),
    )
    controlplane.kubectl(
        "wait", "--for=condition=Established", "--timeout=60s",
        "crd/dynamicquotapolicies.dynquota.io",
    )  # fmt: skip
    return "dynamicquotapolicies.dynquota.io"


@pytest.fixture
def policies(
    crd: str, api_client: kubernetes.client.ApiClient
) -> Iterator[kubernetes.client.CustomObjectsApi]:
    """CustomObjectsApi; every policy named ``crdtest-*`` is deleted after the test."""
    api = kubernetes.client.CustomObjectsApi(api_client)
    yield api
    for item in api.list_cluster_custom_object(GROUP, VERSION, PLURAL)["items"]:
        if item["metadata"]["name"].startswith("crdtest-"):
            api.delete_cluster_custom_object(GROUP, VERSION, PLURAL, item["metadata"]["name"])


def policy(spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "DynamicQuotaPolicy",
        "metadata": {"name": f"crdtest-{uuid.uuid4().hex[:8]}"},
        "spec": spec,
    }


def refusal(api: kubernetes.client.CustomObjectsApi, spec: dict[str, Any]) -> str:
    """Create a policy that must be refused (422 Invalid); return the apiserver's message
    without its ``DynamicQuotaPolicy.dynquota.io "NAME" is invalid: `` prefix."""
    body = policy(spec)
    with pytest.raises(ApiException) as refused:
        api.create_cluster_custom_object(GROUP, VERSION, PLURAL, body)
    assert refused.value.status == 422, refused.value.body
    message: str = json.loads(refused.value.body)["message"]
    prefix = f'DynamicQuotaPolicy.dynquota.io "{body["metadata"]["name"]}" is invalid: '
    assert message.startswith(prefix), message
    return message.removeprefix(prefix)


def test_crd_names_scope_and_columns(crd: str, api_client: kubernetes.client.ApiClient) -> None:
    ext = kubernetes.client.ApiextensionsV1Api(api_client)
    got = ext.read_custom_resource_definition(crd)
    assert got.spec.scope == "Cluster"
    assert got.spec.names.kind == "DynamicQuotaPolicy"
    assert got.spec.names.short_names == ["dqp"]
    (version,) = got.spec.versions
    assert (version.name, version.served, version.storage) == ("v1alpha1", True, True)
    assert version.subresources.status == {}
    assert [c.name for c in version.additional_printer_columns] == [
        "Priority",
        "Ready",
        "Valid",
        "Namespaces",
        "DryRun",
        "QuotaController",
        "Age",
    ]


def test_good_policy_is_stored_with_defaults(
    policies: kubernetes.client.CustomObjectsApi, controlplane: LocalControlPlane
) -> None:
    body = policy(
        {
            "namespaceSelector": {
                "matchLabels": {"example.com/team": "payments"},
                "matchExpressions": [
                    {"key": "env", "operator": "In", "values": ["prod", "staging"]},
                    {"key": "dynquota.io/skip", "operator": "DoesNotExist"},
                ],
            },
            "priority": 10,
            "resources": {
                "pods": {
                    "bufferPercent": 1000,
                    "minimum": 0,
                    "maximum": 0,
                    "upscaleCooldown": "0s",
                    "downscaleCooldown": "1h30m",
                },
                "configmaps": {"maximum": 5000, "upscaleCooldown": "8760h"},
            },
        }
    )
    created = policies.create_cluster_custom_object(GROUP, VERSION, PLURAL, body)
    assert created["spec"] == {**body["spec"], "dryRun": False, "wake": True}

    minimal = policies.create_cluster_custom_object(GROUP, VERSION, PLURAL, policy({}))
    assert minimal["spec"] == {
        "namespaceSelector": {},
        "priority": 0,
        "resources": {},
        "dryRun": False,
        "wake": True,
    }
    # The short name and printer columns work through kubectl.
    table = controlplane.kubectl("get", "dqp", minimal["metadata"]["name"])
    assert table.split("\n")[0].split() == [
        "NAME",
        "PRIORITY",
        "READY",
        "VALID",
        "NAMESPACES",
        "DRYRUN",
        "AGE",
    ]


def test_status_subresource_accepts_conditions(
    policies: kubernetes.client.CustomObjectsApi,
) -> None:
    created = policies.create_cluster_custom_object(GROUP, VERSION, PLURAL, policy({}))
    name = created["metadata"]["name"]
    status = {
        "observedGeneration": 1,
        "namespaces": 3,
        "conditions": [
            {
                "type": "Valid",
                "status": "True",
                "reason": "Accepted",
                "message": "",
                "lastTransitionTime": "2026-01-02T03:04:05Z",
                "observedGeneration": 1,
            }
        ],
    }
    patched = policies.patch_cluster_custom_object_status(
        GROUP, VERSION, PLURAL, name, {"status": status}
    )
    assert patched["status"] == status
    # A status write through the main resource is ignored (status subresource enabled).
    policies.patch_cluster_custom_object(
        GROUP, VERSION, PLURAL, name, {"status": {"namespaces": 99}}
    )
    got = policies.get_cluster_custom_object(GROUP, VERSION, PLURAL, name)
    assert got["status"]["namespaces"] == 3
    with pytest.raises(ApiException) as refused:
        policies.patch_cluster_custom_object_status(
            GROUP,
            VERSION,
            PLURAL,
            name,
            {"status": {"conditions": [{**status["conditions"][0], "status": "Maybe"}]}},
        )
    assert refused.value.status == 422
    assert 'Unsupported value: "Maybe"' in json.loads(refused.value.body)["message"]


def test_unknown_resource_key_is_refused_not_pruned(
    policies: kubernetes.client.CustomObjectsApi,
) -> None:
    for key in ("count/nodes", "nvidia.com/gpu", "limits.nvidia.com/gpu", "count/events"):
        message = refusal(policies, {"resources": {key: {"maximum": 5}}})
        assert message.startswith(
            f"spec.resources: Invalid value: resource key {key}: must be a ResourceQuota key "
            "the Kubernetes quota system counts: pods, configmaps, secrets,"
        ), message
    # Also next to a valid key: the whole policy is refused, nothing is pruned.
    message = refusal(
        policies, {"resources": {"pods": {"maximum": 50}, "nvidia.com/gpu": {"maximum": 1}}}
    )
    assert message.startswith(
        "spec.resources: Invalid value: resource key nvidia.com/gpu: must be a ResourceQuota"
    )
    # two bad keys: the first is named, the others counted
    message = refusal(
        policies, {"resources": {"count/nodes": {"maximum": 1}, "nvidia.com/gpu": {"maximum": 1}}}
    )
    # the apiserver iterates a map in no fixed order: either key may be the one named
    assert message.startswith(
        (
            "spec.resources: Invalid value: resource key count/nodes (and other keys): must be",
            "spec.resources: Invalid value: resource key nvidia.com/gpu (and other keys): must be",
        )
    ), message
    names = [
        i["metadata"]["name"]
        for i in policies.list_cluster_custom_object(GROUP, VERSION, PLURAL)["items"]
    ]
    assert [n for n in names if n.startswith("crdtest-")] == []


def test_counted_keys_are_stored_with_quantities(
    policies: kubernetes.client.CustomObjectsApi,
) -> None:
    resources = {
        "secrets": {"maximum": 100, "roundTo": 5, "minimumHeadroom": 3},
        "count/jobs.batch": {"maximum": 30},
        "requests.cpu": {"minimum": "500m", "maximum": "8", "roundTo": "250m"},
        "requests.memory": {"maximum": "16Gi", "roundTo": "64Mi", "minimumHeadroom": "2Gi"},
        "gold.storageclass.storage.k8s.io/requests.storage": {"maximum": "1Ti"},
        "gpu.example.com.deviceclass.resource.k8s.io/devices": {"maximum": 4},
        "requests.nvidia.com/gpu": {"maximum": 2},
    }
    stored = policies.create_cluster_custom_object(
        GROUP, VERSION, PLURAL, policy({"resources": resources})
    )
    assert stored["spec"]["resources"] == resources
    assert validate_policy(stored).valid


@pytest.mark.parametrize(
    ("resources", "expected"),
    [
        (
            {"cpu": {"maximum": "1"}, "requests.cpu": {"maximum": "2"}},
            "spec.resources: Invalid value: cpu and its long form (requests.<key> or "
            "count/<key>) name the same quota resource: give only one of them",
        ),
        (
            {"secrets": {"minimum": 5}},
            "spec.resources: Invalid value: secrets: maximum is required (only pods and "
            "configmaps have a built-in maximum)",
        ),
        (
            {"requests.cpu": {"minimum": 1}},
            "spec.resources: Invalid value: requests.cpu: maximum is required (only pods and "
            "configmaps have a built-in maximum)",
        ),
        (
            # the apiserver iterates a map in no fixed order: either key may be the one named
            {"requests.cpu": {"minimum": 1}, "secrets": {"minimum": 1}},
            tuple(
                f"spec.resources: Invalid value: {key} (and other keys): maximum is required "
                "(only pods and configmaps have a built-in maximum)"
                for key in ("requests.cpu", "secrets")
            ),
        ),
        (
            {"count/jobs.batch": {"maximum": "30.5"}},
            "spec.resources: Invalid value: count/jobs.batch: minimum, maximum and "
            "minimumHeadroom of object counts, extended resources and devices are whole "
            'numbers, such as 60 or "60" (quantity strings such as 500m or 4Gi are for cpu, '
            "memory, ephemeral-storage, hugepages and storage keys)",
        ),
        (
            {"count/jobs.batch": {"maximum": 30, "roundTo": "2.5"}},
            "spec.resources: Invalid value: count/jobs.batch: roundTo of object counts, "
            "extended resources and devices is a whole number, and of memory, "
            "ephemeral-storage, hugepages and storage keys a whole number of bytes (a quantity "
            "such as 64Mi or 1Gi; 250m for cpu)",
        ),
        (
            {"requests.memory": {"maximum": "4Gi", "roundTo": "0.5"}},
            "spec.resources: Invalid value: requests.memory: roundTo of object counts, "
            "extended resources and devices is a whole number, and of memory, "
            "ephemeral-storage, hugepages and storage keys a whole number of bytes (a quantity "
            "such as 64Mi or 1Gi; 250m for cpu)",
        ),
        (
            {"requests.cpu": {"maximum": "4", "roundTo": "0"}},
            "spec.resources[requests.cpu]: Invalid value: roundTo must be above 0 (a whole "
            "number, or a quantity such as 250m or 64Mi)",
        ),
        (
            {"secrets": {"maximum": 40, "roundTo": 0}},
            "spec.resources[secrets]: Invalid value: roundTo must be above 0 (a whole number, "
            "or a quantity such as 250m or 64Mi)",
        ),
        (
            {"count/jobs.batch": {"maximum": 30, "minimumHeadroom": "500m"}},
            "spec.resources: Invalid value: count/jobs.batch: minimum, maximum and "
            "minimumHeadroom of object counts, extended resources and devices are whole "
            'numbers, such as 60 or "60" (quantity strings such as 500m or 4Gi are for cpu, '
            "memory, ephemeral-storage, hugepages and storage keys)",
        ),
        (
            {"secrets": {"minimum": 5, "maximum": "3"}},
            "spec.resources[secrets]: Invalid value: minimum must be less than or equal to maximum",
        ),
        (
            {"requests.cpu": {"maximum": "4", "minimumHeadroom": "-1"}},
            "spec.resources[requests.cpu]: Invalid value: minimum, maximum and minimumHeadroom "
            "must be non-negative: whole numbers, or quantities such as 500m or 4Gi",
        ),
        (
            {"requests.cpu": {"maximum": "8", "roundTo": "64Mi"}},
            "spec.resources[requests.cpu]: Invalid value: roundTo must not exceed maximum "
            "(every hard would round up to the maximum)",
        ),
        (
            {"pods": {"roundTo": 1001}},
            "spec.resources: Invalid value: pods: roundTo must not exceed maximum, which is "
            "omitted and defaults to 1000",
        ),
        (
            {"configmaps": {"roundTo": 2001}},
            "spec.resources: Invalid value: configmaps: roundTo must not exceed maximum, which "
            "is omitted and defaults to 2000",
        ),
        (
            {"secrets": {"maximum": 40, "roundTo": 50}},
            "spec.resources[secrets]: Invalid value: roundTo must not exceed maximum (every hard "
            "would round up to the maximum)",
        ),
        (
            {"requests.memory": {"minimum": "2Gi", "maximum": "1Gi"}},
            "spec.resources[requests.memory]: Invalid value: minimum must be less than or "
            "equal to maximum",
        ),
    ],
)
def test_bad_counted_keys_are_refused(
    policies: kubernetes.client.CustomObjectsApi,
    resources: dict[str, Any],
    expected: str | tuple[str, ...],
) -> None:
    """``expected``: the refusal, or the refusals of which it must be one."""
    assert refusal(policies, {"resources": resources}) in (
        expected if isinstance(expected, tuple) else (expected,)
    )


def test_minimum_above_maximum_is_refused(policies: kubernetes.client.CustomObjectsApi) -> None:
    message = refusal(policies, {"resources": {"pods": {"minimum": 11, "maximum": 10}}})
    assert message == (
        "spec.resources[pods]: Invalid value: minimum must be less than or equal to maximum"
    )


def test_buffer_percent_out_of_range_is_refused(
    policies: kubernetes.client.CustomObjectsApi,
) -> None:
    expected = "spec.resources[configmaps]: Invalid value: bufferPercent must be between 0 and 1000"
    assert refusal(policies, {"resources": {"configmaps": {"bufferPercent": 1001}}}) == expected
    assert refusal(policies, {"resources": {"configmaps": {"bufferPercent": -1}}}) == expected


@pytest.mark.parametrize("duration", ["5x", "1.5h", "5m1h", "1d", "300"])
def test_malformed_duration_is_refused(
    policies: kubernetes.client.CustomObjectsApi, duration: str
) -> None:
    message = refusal(policies, {"resources": {"pods": {"upscaleCooldown": duration}}})
    assert message == (
        f'spec.resources[pods].upscaleCooldown: Invalid value: "{duration}": {DURATION_MESSAGE}'
    )
    assert "1d is 24h" in DURATION_MESSAGE


def test_empty_and_too_long_durations_are_refused(
    policies: kubernetes.client.CustomObjectsApi,
) -> None:
    message = refusal(policies, {"resources": {"pods": {"downscaleCooldown": ""}}})
    assert message == (
        'spec.resources.pods.downscaleCooldown: Invalid value: "": '
        "spec.resources.pods.downscaleCooldown in body should be at least 1 chars long"
    )
    message = refusal(policies, {"resources": {"pods": {"downscaleCooldown": "8761h"}}})
    assert message == (
        'spec.resources[pods].downscaleCooldown: Invalid value: "8761h": '
        "must be at most 8760h (365 days)"
    )


def test_bad_selectors_are_refused(policies: kubernetes.client.CustomObjectsApi) -> None:
    message = refusal(
        policies, {"namespaceSelector": {"matchExpressions": [{"key": "a", "operator": "In"}]}}
    )
    assert message == (
        "spec.namespaceSelector.matchExpressions[0]: Invalid value: values must be non-empty "
        "for operator In and NotIn, and empty for Exists and DoesNotExist"
    )
    message = refusal(
        policies,
        {
            "namespaceSelector": {
                "matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x"]}]
            }
        },
    )
    assert message.endswith(
        "values must be non-empty for operator In and NotIn, and empty for Exists and DoesNotExist"
    )
    message = refusal(
        policies, {"namespaceSelector": {"matchExpressions": [{"key": "a", "operator": "Foo"}]}}
    )
    assert message == (
        '[spec.namespaceSelector.matchExpressions[0].operator: Unsupported value: "Foo": '
        'supported values: "In", "NotIn", "Exists", "DoesNotExist", <nil>: Invalid value: '
        "null: some validation rules were not checked because the object was invalid; "
        "correct the existing errors to complete validation]"
    )
    message = refusal(policies, {"namespaceSelector": {"matchLabels": {"a/b/c": "x"}}})
    assert message == (
        "spec.namespaceSelector.matchLabels: Invalid value: every key must be a label key: "
        "[prefix/]name, the name at most 63 alphanumeric characters, '-', '_' or '.', starting "
        "and ending with an alphanumeric character, the prefix a lowercase DNS subdomain of at "
        "most 253 characters"
    )
    message = refusal(policies, {"namespaceSelector": {"matchLabels": {"team": "x y"}}})
    assert message == (
        'spec.namespaceSelector.matchLabels.team: Invalid value: "x y": '
        "spec.namespaceSelector.matchLabels.team in body should match "
        "'^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$'"
    )


# -- minimum <= maximum after the built-in defaults fill in an omitted bound (issue 10, case 8):
# a policy the operator would find invalid (and freeze every namespace it matches for) must be
# refused by the apiserver instead.

MIN_DEFAULT = "maximum must be greater than or equal to minimum, which is omitted and defaults to"
MAX_DEFAULT = "minimum must be less than or equal to maximum, which is omitted and defaults to"
DEFAULTED_BOUNDS_REFUSED = [
    ({"pods": {"maximum": 5}}, f"pods: {MIN_DEFAULT} 10"),
    ({"pods": {"minimum": 3000}}, f"pods: {MAX_DEFAULT} 1000"),
    ({"configmaps": {"maximum": 49, "bufferPercent": 10}}, f"configmaps: {MIN_DEFAULT} 50"),
    ({"configmaps": {"minimum": 2001}}, f"configmaps: {MAX_DEFAULT} 2000"),
]


@pytest.mark.parametrize(
    ("resources", "expected"),
    DEFAULTED_BOUNDS_REFUSED,
    ids=[json.dumps(r, sort_keys=True) for r, _ in DEFAULTED_BOUNDS_REFUSED],
)
def test_bound_against_the_default_bound_is_refused(
    policies: kubernetes.client.CustomObjectsApi, resources: dict[str, Any], expected: str
) -> None:
    assert refusal(policies, {"resources": resources}) == (
        f"spec.resources: Invalid value: {expected}"
    )
    # The operator's own validation agrees (it would freeze the namespaces such a policy
    # matches if one were stored anyway).
    info = validate_policy({"metadata": {"name": "x"}, "spec": {"resources": resources}})
    assert not info.valid
    assert "must be less than or equal to maximum" in str(info.reason)


@pytest.mark.parametrize(
    "resources",
    [
        {"pods": {"maximum": 10}},
        {"pods": {"minimum": 1000}},
        {"pods": {"minimum": 0, "maximum": 0}},
        {"configmaps": {"maximum": 50}, "pods": {"minimum": 0}},
        {"configmaps": {"minimum": 2000}},
        {"configmaps": {"minimum": 3000, "maximum": 4000}},
    ],
    ids=json.dumps,
)
def test_bound_at_the_default_bound_is_accepted(
    policies: kubernetes.client.CustomObjectsApi, resources: dict[str, Any]
) -> None:
    created = policies.create_cluster_custom_object(
        GROUP, VERSION, PLURAL, policy({"resources": resources})
    )
    assert created["spec"]["resources"] == resources
    assert validate_policy(created).valid


def test_both_resources_against_their_defaults_are_both_named(
    policies: kubernetes.client.CustomObjectsApi,
) -> None:
    message = refusal(
        policies, {"resources": {"configmaps": {"minimum": 2001}, "pods": {"maximum": 0}}}
    )
    assert message == (
        f"[spec.resources: Invalid value: pods: {MIN_DEFAULT} 10, "
        f"spec.resources: Invalid value: configmaps: {MAX_DEFAULT} 2000]"
    )


def test_both_bounds_given_keep_their_own_single_message(
    policies: kubernetes.client.CustomObjectsApi,
) -> None:
    """Both bounds given: only the profile's rule answers (no second, defaulted message)."""
    message = refusal(policies, {"resources": {"pods": {"minimum": 3000, "maximum": 5}}})
    assert message == (
        "spec.resources[pods]: Invalid value: minimum must be less than or equal to maximum"
    )


def test_label_keys_longer_than_the_operator_accepts_are_refused(
    policies: kubernetes.client.CustomObjectsApi,
) -> None:
    """A key whose name part has 64 characters, or whose prefix has 254, was stored and then
    made the operator freeze every namespace the policy might govern (found by the
    bad-input test). 63 and 253 are accepted."""
    name64, prefix254 = "n" * 64, "p" * 254
    message = refusal(policies, {"namespaceSelector": {"matchLabels": {name64: "x"}}})
    assert message.startswith("spec.namespaceSelector.matchLabels: Invalid value: every key")
    message = refusal(policies, {"namespaceSelector": {"matchLabels": {f"{prefix254}/n": "x"}}})
    assert message.startswith("spec.namespaceSelector.matchLabels: Invalid value: every key")
    exists = {"operator": "Exists"}
    message = refusal(
        policies, {"namespaceSelector": {"matchExpressions": [{"key": name64, **exists}]}}
    )
    assert message.startswith(
        f'spec.namespaceSelector.matchExpressions[0].key: Invalid value: "{name64}": '
        "spec.namespaceSelector.matchExpressions[0].key in body should match"
    )
    message = refusal(
        policies,
        {"namespaceSelector": {"matchExpressions": [{"key": f"{prefix254}/n", **exists}]}},
    )
    assert message == (
        f'spec.namespaceSelector.matchExpressions[0].key: Invalid value: "{prefix254}/n": the '
        "prefix before '/' must be at most 253 characters"
    )
    longest = f"{'p' * 253}/{'n' * 63}"
    selector = {"matchLabels": {longest: "x"}, "matchExpressions": [{"key": longest, **exists}]}
    created = policies.create_cluster_custom_object(
        GROUP, VERSION, PLURAL, policy({"namespaceSelector": selector})
    )
    assert validate_policy(created).valid


def test_override_settings_are_stored_with_their_defaults(
    policies: kubernetes.client.CustomObjectsApi,
) -> None:
    created = policies.create_cluster_custom_object(
        GROUP, VERSION, PLURAL, policy({"override": {}})
    )
    assert created["spec"]["override"] == {"allowed": True, "minInterval": "0s"}
    spec = {"override": {"allowed": False, "ttl": "24h", "minInterval": "8760h"}}
    created = policies.create_cluster_custom_object(GROUP, VERSION, PLURAL, policy(spec))
    assert created["spec"]["override"] == spec["override"]
    info = validate_policy(created)
    assert info.spec is not None
    assert (info.spec.override.allowed, info.spec.override.ttl) == (False, 86400)
    assert info.spec.override.min_interval == 8760 * 3600


def test_bad_override_settings_are_refused(policies: kubernetes.client.CustomObjectsApi) -> None:
    assert refusal(policies, {"override": {"ttl": "0s"}}) == (
        'spec.override.ttl: Invalid value: "0s": must be longer than 0s'
    )
    assert refusal(policies, {"override": {"ttl": "8761h"}}) == (
        'spec.override.ttl: Invalid value: "8761h": must be at most 8760h (365 days)'
    )
    assert refusal(policies, {"override": {"minInterval": "1d"}}) == (
        f'spec.override.minInterval: Invalid value: "1d": {DURATION_MESSAGE}'
    )
    assert refusal(policies, {"override": {"allowed": "no"}}).startswith(
        '[spec.override.allowed: Invalid value: "string": spec.override.allowed in body must '
        'be of type boolean: "string", '
    )


def test_write_rate_is_stored_with_its_defaults_and_checked(
    policies: kubernetes.client.CustomObjectsApi,
) -> None:
    """``spec.writeRate`` (issue 32): the window and quiet period default; the apiserver
    refuses what the operator would refuse, with the same duration message."""
    created = policies.create_cluster_custom_object(
        GROUP, VERSION, PLURAL, policy({"writeRate": {"limit": 300}})
    )
    assert created["spec"]["writeRate"] == {"limit": 300, "window": "60s", "quietPeriod": "5m"}
    info = validate_policy(created)
    assert info.spec is not None
    assert info.spec.write_rate is not None
    assert (info.spec.write_rate.window, info.spec.write_rate.quiet_period) == (60, 300)
    assert refusal(policies, {"writeRate": {"limit": 10, "window": "2h"}}) == (
        'spec.writeRate.window: Invalid value: "2h": must be between 1s and 1h'
    )
    assert refusal(policies, {"writeRate": {"limit": 10, "window": "0s"}}) == (
        'spec.writeRate.window: Invalid value: "0s": must be between 1s and 1h'
    )
    assert refusal(policies, {"writeRate": {"limit": 10, "quietPeriod": "1d"}}) == (
        f'spec.writeRate.quietPeriod: Invalid value: "1d": {DURATION_MESSAGE}'
    )
    assert refusal(policies, {"writeRate": {"window": "1m"}}).startswith(
        "[spec.writeRate.limit: Required value, "
    )
    assert refusal(policies, {"writeRate": {"limit": 0}}).startswith(
        "spec.writeRate.limit: Invalid value: 0: spec.writeRate.limit in body should be "
        "greater than or equal to 1"
    )


def test_companion_limit_range_fields_are_stored_and_checked(
    policies: kubernetes.client.CustomObjectsApi,
) -> None:
    spec = {
        "defaultRequests": {"cpu": "100m", "memory": "128Mi"},
        "defaultLimits": {"cpu": "1"},
        "allowDefaultLimits": True,
    }
    created = policies.create_cluster_custom_object(GROUP, VERSION, PLURAL, policy(spec))
    assert {k: created["spec"][k] for k in spec} == spec
    assert validate_policy(created).valid
    assert refusal(policies, {"defaultLimits": {"cpu": "1"}}) == (
        "spec: Invalid value: defaultLimits caps every container without its own "
        "limit at run time: it needs allowDefaultLimits: true"
    )
    assert refusal(policies, {"defaultRequests": {"nvidia.com/gpu": "1"}}) == (
        "spec.defaultRequests: Invalid value: keys must be cpu, memory or ephemeral-storage"
    )
    assert refusal(policies, {"defaultRequests": {"cpu": "0"}}) == (
        "spec.defaultRequests: Invalid value: values must be quantities above 0, "
        "such as 100m or 128Mi"
    )
    bad = {
        "defaultRequests": {"cpu": "2"},
        "defaultLimits": {"cpu": "1"},
        "allowDefaultLimits": True,
    }
    assert refusal(policies, bad) == (
        "spec: Invalid value: each defaultRequests value must not exceed the "
        "defaultLimits value of the same resource"
    )


# -- issue 30: counts as ResourceQuota writes them, summary conditions, the budget's columns ---

BUDGET_CRD_FILE = CRD_FILE.parent / "quotabudgets.yaml"
BUDGETS = "quotabudgets"


@pytest.fixture(scope="module")
def budget_crd(controlplane: LocalControlPlane) -> str:
    """The QuotaBudget CRD from crds/, applied server-side and Established."""
    controlplane.kubectl(
        "apply", "--server-side", "--force-conflicts", "--field-manager=test-crd",
        "-f", str(BUDGET_CRD_FILE),
    )  # fmt: skip
    controlplane.kubectl(
        "wait", "--for=condition=Established", "--timeout=60s", "crd/quotabudgets.dynquota.io"
    )
    return "quotabudgets.dynquota.io"


@pytest.fixture
def budgets(
    budget_crd: str, api_client: kubernetes.client.ApiClient
) -> Iterator[kubernetes.client.CustomObjectsApi]:
    """CustomObjectsApi; every budget named ``crdtest-*`` is deleted after the test."""
    api = kubernetes.client.CustomObjectsApi(api_client)
    yield api
    for item in api.list_cluster_custom_object(GROUP, VERSION, BUDGETS)["items"]:
        if item["metadata"]["name"].startswith("crdtest-"):
            api.delete_cluster_custom_object(GROUP, VERSION, BUDGETS, item["metadata"]["name"])


def budget(hard: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "QuotaBudget",
        "metadata": {"name": f"crdtest-{uuid.uuid4().hex[:8]}"},
        "spec": {"hard": hard},
    }


def test_counts_as_quantity_strings_are_stored_and_valid(
    policies: kubernetes.client.CustomObjectsApi, budgets: kubernetes.client.CustomObjectsApi
) -> None:
    """``hard: {pods: "60"}``, as every ResourceQuota writes a count, is accepted by the CRDs
    and by the operator's models, and means what 60 means."""
    from dynquota.policy.budget_spec import QuotaBudgetSpec

    resources = {
        "pods": {"minimum": "5", "maximum": "1k"},
        "secrets": {"maximum": "60", "roundTo": "5", "minimumHeadroom": "2"},
        "count/jobs.batch": {"maximum": "2e3"},
    }
    stored = policies.create_cluster_custom_object(
        GROUP, VERSION, PLURAL, policy({"resources": resources})
    )
    assert stored["spec"]["resources"] == resources
    info = validate_policy(stored)
    assert info.spec is not None, info.reason
    assert (info.spec.resources["pods"].maximum, info.spec.resources["secrets"].maximum) == (
        1000, 60,
    )  # fmt: skip
    created = budgets.create_cluster_custom_object(
        GROUP, VERSION, BUDGETS, budget({"pods": "60", "requests.cpu": "8", "secrets": 10})
    )
    spec = QuotaBudgetSpec.model_validate(created["spec"])
    assert spec.hard == {"pods": 60, "requests.cpu": 8000, "secrets": 10}


@pytest.mark.parametrize(
    ("hard", "expected"),
    [
        ({"pods": "60.5"}, 'pods: the budget of object counts, extended resources and devices '
         'is a whole number, such as 60, "60" or "1000m" (quantity strings such as 500m or 4Gi '
         "are for cpu, memory, ephemeral-storage, hugepages and storage keys)"),
        ({"pods": "-1"}, "pods: every budget must be non-negative: a whole number, or a "
         "quantity such as 60, 500m or 4Gi"),
        ({"secrets": 1, "count/secrets": 2}, "secrets and its long form (requests.<key> or "
         "count/<key>) name the same quota resource: give only one of them"),
    ],
)  # fmt: skip
def test_bad_budgets_are_refused_naming_the_key(
    budgets: kubernetes.client.CustomObjectsApi, hard: dict[str, Any], expected: str
) -> None:
    body = budget(hard)
    with pytest.raises(ApiException) as refused:
        budgets.create_cluster_custom_object(GROUP, VERSION, BUDGETS, body)
    assert refused.value.status == 422
    message = json.loads(refused.value.body)["message"]
    assert message == (
        f'QuotaBudget.dynquota.io "{body["metadata"]["name"]}" is invalid: spec.hard: '
        f"Invalid value: {expected}"
    )


def readiness_status(kind: str, given: list[tuple[str, str, str]]) -> list[dict[str, Any]]:
    """Conditions as the status writers will write them: ``given`` plus the summary ones."""
    from dynquota.policy.readiness import set_readiness

    conditions: list[dict[str, Any]] = [
        {"type": t, "status": st, "reason": r, "message": f"{t}: {r}",
         "lastTransitionTime": "2026-12-04T10:00:00Z", "observedGeneration": 1}
        for t, st, r in given
    ]  # fmt: skip
    set_readiness(conditions, kind, 1, "2026-12-04T10:00:00Z")  # type: ignore[arg-type]
    return conditions


def test_budget_columns_show_ready_and_the_summary(
    budgets: kubernetes.client.CustomObjectsApi, controlplane: LocalControlPlane
) -> None:
    from dynquota.policy.readiness import budget_summary

    created = budgets.create_cluster_custom_object(
        GROUP, VERSION, BUDGETS, budget({"pods": "60", "requests.cpu": "8"})
    )
    name = created["metadata"]["name"]
    summary = budget_summary(
        {"pods": 60, "requests.cpu": 8000}, {"pods": 30, "requests.cpu": 3000},
        {"pods": 20, "requests.cpu": 5000},
    )  # fmt: skip
    status = {
        "observedGeneration": 1,
        "namespaceCount": 2,
        "summary": summary,
        "conditions": readiness_status(
            "QuotaBudget", [("Valid", "True", "Valid"), ("OverBudget", "False", "WithinBudget")]
        ),
    }
    patched = budgets.patch_cluster_custom_object_status(
        GROUP, VERSION, BUDGETS, name, {"status": status}
    )
    assert patched["status"] == status
    table = controlplane.kubectl("get", "qb", name).splitlines()
    assert table[0].split() == ["NAME", "READY", "USED/HARD", "OVERBUDGET", "NAMESPACES", "AGE"]
    assert table[1].startswith(
        f"{name}   True    pods: 30/60 (20 free), requests.cpu: 3/8 (5 free)"
    )
    assert table[1].split()[-3:-1] == ["False", "2"]
    wide = controlplane.kubectl("get", "qb", name, "-o", "wide").splitlines()
    assert wide[0].split()[-2:] == ["VALID", "AGE"]
    # kubectl wait (and Flux) read Ready
    assert "condition met" in controlplane.kubectl(
        "wait", "--for=condition=Ready", "--timeout=10s", f"qb/{name}"
    )


def test_policy_ready_column_and_kubectl_wait(
    policies: kubernetes.client.CustomObjectsApi, controlplane: LocalControlPlane
) -> None:
    created = policies.create_cluster_custom_object(GROUP, VERSION, PLURAL, policy({}))
    name = created["metadata"]["name"]
    invalid = readiness_status("DynamicQuotaPolicy", [("Valid", "False", "Invalid")])
    policies.patch_cluster_custom_object_status(
        GROUP, VERSION, PLURAL, name, {"status": {"observedGeneration": 1, "conditions": invalid}}
    )
    row = controlplane.kubectl("get", "dqp", name, "--no-headers").split()
    assert row[1:3] == ["0", "False"]  # PRIORITY, READY
    stalled = controlplane.kubectl(
        "get", "dqp", name, "-o", "jsonpath={.status.conditions[?(@.type=='Stalled')].reason}"
    )
    assert stalled == "InvalidSpec"
    valid = readiness_status("DynamicQuotaPolicy", [("Valid", "True", "Valid")])
    policies.patch_cluster_custom_object_status(
        GROUP, VERSION, PLURAL, name, {"status": {"observedGeneration": 1, "conditions": valid}}
    )
    assert "condition met" in controlplane.kubectl(
        "wait", "--for=condition=Ready", "--timeout=10s", f"dqp/{name}"
    )
    row = controlplane.kubectl("get", "dqp", name, "--no-headers").split()
    assert row[1:4] == ["0", "True", "True"]  # PRIORITY, READY, VALID
