"""judge_guard: whether the chart's budget guard is in force as installed (issue 30, LOW-6;
the README-only attack made it harmless by narrowing the binding and still read True)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from dynquota.policy.budget_guard import GuardSeen, judge_guard

NAME = "dq-dynquota-budget-guard"
KINDS = ["pods", "configmaps", "resourceclaims.resource.k8s.io"]


def managed(manager: str, time: str = "2026-12-04T17:00:00Z") -> dict[str, Any]:
    return {"manager": manager, "operation": "Update", "time": time,
            "fieldsV1": {"f:spec": {"f:x": {}}}}  # fmt: skip


def installed() -> tuple[dict[str, Any], dict[str, Any]]:
    """The policy and binding as the chart installs them (the fields judged)."""
    policy = {
        "metadata": {"name": NAME, "managedFields": [managed("helm")]},
        "spec": {
            "failurePolicy": "Ignore",
            "paramKind": {"apiVersion": "v1", "kind": "ResourceQuota"},
            "matchConstraints": {"resourceRules": [
                {"apiGroups": [""], "apiVersions": ["*"], "resources": ["configmaps", "pods"],
                 "operations": ["CREATE"]},
                {"apiGroups": ["resource.k8s.io"], "apiVersions": ["*"],
                 "resources": ["resourceclaims"], "operations": ["CREATE"]},
            ]},
            "validations": [{"expression": "true"}],
        },
    }  # fmt: skip
    binding = {
        "metadata": {"name": NAME, "managedFields": [managed("helm")]},
        "spec": {
            "policyName": NAME,
            "validationActions": ["Deny"],
            "paramRef": {"name": "dynquota", "parameterNotFoundAction": "Allow"},
            "matchResources": {
                "namespaceSelector": {"matchExpressions": [
                    {"key": "dynquota.io/budget", "operator": "Exists"},
                    {"key": "kubernetes.io/metadata.name", "operator": "NotIn",
                     "values": ["kube-system", "kube-public", "kube-node-lease", "dq"]},
                ]},
                "objectSelector": {},
                "matchPolicy": "Equivalent",
            },
        },
    }  # fmt: skip
    return policy, binding


def test_as_installed_it_is_in_force() -> None:
    policy, binding = installed()
    assert judge_guard(NAME, policy, binding, KINDS) == GuardSeen(
        True, f"the ValidatingAdmissionPolicy {NAME} and its binding deny"
    )


B = f"the ValidatingAdmissionPolicyBinding {NAME}"
P = f"the ValidatingAdmissionPolicy {NAME}"


@pytest.mark.parametrize(
    ("edit", "detail"),
    [
        (lambda p, b: b["spec"].update(validationActions=["Audit"]),
         f"{B} has validationActions ['Audit'] (no Deny: it refuses nothing)"),
        (lambda p, b: b["spec"].update(policyName="other"),
         f"{B} binds 'other', not the guard {NAME}"),
        (lambda p, b: b["spec"]["paramRef"].update(name="not-dynquota"),
         f"{B}: its paramRef is {{'name': 'not-dynquota', 'parameterNotFoundAction': 'Allow'}},"
         " not the namespace's quota dynquota"),
        (lambda p, b: b["spec"]["matchResources"].update(namespaceSelector={"matchExpressions": [
            {"key": "nothing.example/none", "operator": "Exists"}]}),
         f"{B}: its namespaceSelector is {{'matchExpressions': [{{'key': 'nothing.example/none', "
         "'operator': 'Exists'}]}, not every namespace labelled dynquota.io/budget"),
        (lambda p, b: b["spec"]["matchResources"].update(
            objectSelector={"matchLabels": {"a": "b"}}),
         f"{B}: its matchResources narrow the objects it applies to"),
        (lambda p, b: p["spec"].update(paramKind={"apiVersion": "v1", "kind": "ConfigMap"}),
         f"{P} takes {{'apiVersion': 'v1', 'kind': 'ConfigMap'}} as its param, not a "
         "ResourceQuota"),
        (lambda p, b: p["spec"]["matchConstraints"].update(resourceRules=[
            {"apiGroups": [""], "resources": ["nothings"], "operations": ["CREATE"]}]),
         f"{P} does not match CREATE of configmaps, pods, resourceclaims.resource.k8s.io"),
        (lambda p, b: p["spec"]["matchConstraints"]["resourceRules"][0].update(
            operations=["UPDATE"]),
         f"{P} does not match CREATE of configmaps, pods"),
        (lambda p, b: p["spec"].update(validations=[]), f"{P} has no validations"),
    ],
)  # fmt: skip
def test_a_guard_made_harmless_is_not_in_force(edit: Any, detail: str) -> None:
    policy, binding = installed()
    edit(policy, binding)
    assert judge_guard(NAME, policy, binding, KINDS) == GuardSeen(False, detail)


def test_missing_objects_and_the_status_writer() -> None:
    policy, binding = installed()
    assert judge_guard(NAME, None, binding, KINDS) == GuardSeen(False, f"{P} does not exist")
    assert judge_guard(NAME, policy, None, KINDS) == GuardSeen(False, f"{B} does not exist")
    wildcard = copy.deepcopy(policy)
    wildcard["spec"]["matchConstraints"]["resourceRules"] = [
        {"apiGroups": ["*"], "resources": ["*"], "operations": ["*"]}
    ]
    assert judge_guard(NAME, wildcard, binding, KINDS).present is True
