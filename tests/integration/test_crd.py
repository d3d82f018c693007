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
            "spec.resources: Invalid value: every key must be a ResourceQuota key the "
            "Kubernetes quota system counts: pods, configmaps, secrets,"
        ), message
    # Also next to a valid key: the whole policy is refused, nothing is pruned.
    message = refusal(
        policies, {"resources": {"pods": {"maximum": 50}, "nvidia.com/gpu": {"maximum": 1}}}
    )
    assert message.startswith("spec.resources: Invalid value: every key must be a ResourceQuota")
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
            "spec.resources: Invalid value: an alias and its long form name the same quota "
            "resource (cpu and requests.cpu, secrets and count/secrets, hugepages-<size> and "
            "requests.hugepages-<size>): give only one of them",
        ),
        (
            {"secrets": {"minimum": 5}},
            "spec.resources: Invalid value: every key but pods and configmaps needs a maximum "
            "(only those two have a built-in one)",
        ),
        (
            {"count/jobs.batch": {"maximum": "30"}},
            "spec.resources: Invalid value: minimum, maximum and minimumHeadroom of object "
            "counts, extended resources and devices are whole numbers (quantity strings such as "
            "500m or 4Gi are for cpu, memory, ephemeral-storage, hugepages and storage keys)",
        ),
        (
            {"count/jobs.batch": {"maximum": 30, "roundTo": "5"}},
            "spec.resources: Invalid value: roundTo of object counts, extended resources and "
            "devices is a whole number, and of memory, ephemeral-storage, hugepages and storage "
            "keys a whole number of bytes (a quantity such as 64Mi or 1Gi; 250m for cpu)",
        ),
        (
            {"requests.memory": {"maximum": "4Gi", "roundTo": "0.5"}},
            "spec.resources: Invalid value: roundTo of object counts, extended resources and "
            "devices is a whole number, and of memory, ephemeral-storage, hugepages and storage "
            "keys a whole number of bytes (a quantity such as 64Mi or 1Gi; 250m for cpu)",
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
            {"count/jobs.batch": {"maximum": 30, "minimumHeadroom": "2"}},
            "spec.resources: Invalid value: minimum, maximum and minimumHeadroom of object "
            "counts, extended resources and devices are whole numbers (quantity strings such as "
            "500m or 4Gi are for cpu, memory, ephemeral-storage, hugepages and storage keys)",
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
    policies: kubernetes.client.CustomObjectsApi, resources: dict[str, Any], expected: str
) -> None:
    assert refusal(policies, {"resources": resources}) == expected


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
        f'spec.resources.pods.upscaleCooldown: Invalid value: "{duration}": '
        "spec.resources.pods.upscaleCooldown in body should match "
        "'^([0-9]+h)?([0-9]+m)?([0-9]+s)?$'"
    )


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
        'spec.override.minInterval: Invalid value: "1d": spec.override.minInterval in body '
        "should match '^([0-9]+h)?([0-9]+m)?([0-9]+s)?$'"
    )
    assert refusal(policies, {"override": {"allowed": "no"}}).startswith(
        '[spec.override.allowed: Invalid value: "string": spec.override.allowed in body must '
        'be of type boolean: "string", '
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
