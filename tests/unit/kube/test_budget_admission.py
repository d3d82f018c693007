"""The budgets' admission policy and binding as built (pure): which creates a key's policy
matches, the expression, and the binding's narrowed selector (docs/budgets.md)."""

from __future__ import annotations

from dynquota.kube.budget_admission import (
    binding_for,
    contains,
    is_owned,
    key_resource,
    policy_for,
    resource_rules,
)


def test_each_key_family_maps_to_the_objects_it_charges() -> None:
    assert key_resource("pods") == ("", "pods")
    assert key_resource("count/pods") == ("", "pods")
    assert key_resource("requests.cpu") == ("", "pods")
    assert key_resource("limits.memory") == ("", "pods")
    assert key_resource("requests.nvidia.com/gpu") == ("", "pods")
    assert key_resource("configmaps") == ("", "configmaps")
    assert key_resource("services.loadbalancers") == ("", "services")
    assert key_resource("requests.storage") == ("", "persistentvolumeclaims")
    assert key_resource("gold.storageclass.storage.k8s.io/requests.storage") == (
        "",
        "persistentvolumeclaims",
    )
    assert key_resource("gpu.deviceclass.resource.k8s.io/devices") == (
        "resource.k8s.io",
        "resourceclaims",
    )
    assert key_resource("count/deployments.apps") == ("apps", "deployments")
    # guarding resourcequotas would deny the managed quota's own creation
    assert key_resource("resourcequotas") is None
    assert key_resource("count/resourcequotas") is None


def test_the_rules_match_create_only_one_rule_per_group() -> None:
    assert resource_rules(["pods", "requests.cpu", "count/jobs.batch", "configmaps"]) == [
        {
            "apiGroups": [""],
            "apiVersions": ["*"],
            "resources": ["configmaps", "pods"],
            "operations": ["CREATE"],
        },
        {
            "apiGroups": ["batch"],
            "apiVersions": ["*"],
            "resources": ["jobs"],
            "operations": ["CREATE"],
        },
    ]
    assert resource_rules(["resourcequotas"]) == []


def test_the_policy_denies_while_a_key_is_missing_from_status() -> None:
    policy = policy_for("team", ["pods", "configmaps"])
    spec = policy["spec"]
    assert policy["metadata"]["name"] == "dynquota-budget-slice-team"
    assert spec["paramKind"] == {"apiVersion": "v1", "kind": "ResourceQuota"}
    assert spec["failurePolicy"] == "Fail"
    assert spec["validations"][0]["expression"] == (
        'has(params.metadata.annotations) && "dynquota.io/budget" in params.metadata.annotations '
        '&& params.metadata.annotations["dynquota.io/budget"] == "team" '
        "&& has(params.status) && has(params.status.hard) && has(params.status.used) && "
        '["configmaps", "pods"].all(k, k in params.status.hard && k in params.status.used)'
    )
    assert "QuotaBudget team" in spec["validations"][0]["messageExpression"]


def test_the_binding_selects_the_budget_minus_its_non_members() -> None:
    selector = {
        "matchLabels": {"team": "a"},
        "matchExpressions": [{"key": "tier", "operator": "In", "values": ["x"]}],
    }
    binding = binding_for("team", selector, ["kube-system", "no-policy", "kube-system"])
    assert binding["spec"] == {
        "policyName": "dynquota-budget-slice-team",
        "validationActions": ["Deny"],
        "paramRef": {"name": "dynquota", "parameterNotFoundAction": "Deny"},
        "matchResources": {
            "namespaceSelector": {
                "matchLabels": {"team": "a"},
                "matchExpressions": [
                    {"key": "tier", "operator": "In", "values": ["x"]},
                    {"key": "dynquota.io/managed", "operator": "NotIn", "values": ["false"]},
                    {
                        "key": "kubernetes.io/metadata.name",
                        "operator": "NotIn",
                        "values": ["kube-system", "no-policy"],
                    },
                ],
            }
        },
    }
    assert binding["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "dynquota"


def test_contains_ignores_what_the_apiserver_defaults_but_not_a_changed_value() -> None:
    policy = policy_for("b", ["pods"])
    stored = {
        **policy["spec"],
        "matchConstraints": {
            "matchPolicy": "Equivalent",
            "namespaceSelector": {},
            "objectSelector": {},
            "resourceRules": [
                {**policy["spec"]["matchConstraints"]["resourceRules"][0], "scope": "*"}
            ],
        },
    }
    assert contains(stored, policy["spec"]) is True
    assert contains({**stored, "failurePolicy": "Ignore"}, policy["spec"]) is False
    wider = policy_for("b", ["pods", "configmaps"])["spec"]
    assert contains(stored, wider) is False  # one rule stored, the new spec has more resources
    assert contains({"a": [1, 2]}, {"a": [1]}) is False  # a list is compared whole
    assert contains({"a": {"b": 1}}, {"a": {"b": 1, "c": 2}}) is False


def test_only_objects_with_both_ownership_labels_are_dynquotas() -> None:
    assert is_owned(policy_for("b", ["pods"])) is True
    labels = dict(policy_for("b", ["pods"])["metadata"]["labels"])
    del labels["app.kubernetes.io/component"]
    assert is_owned({"metadata": {"labels": labels}}) is False
    assert is_owned({"metadata": {"labels": {"app.kubernetes.io/managed-by": "Helm"}}}) is False
    assert is_owned({"metadata": {}}) is False
