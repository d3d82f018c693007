"""The budgets' admission policy and binding (dynquota.kube.budget_admission) on the real
apiserver: written only when they differ, every write conditional on the resourceVersion just
read, and an object of the same name that dynquota did not create never written or deleted
(docs/budgets.md, "The admission policy")."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import kubernetes
import pytest
from kubernetes.client.exceptions import ApiException
from kubernetes_asyncio import client

from dynquota._k8s.errors import ConflictError, NotOwnedError
from dynquota.kube.budget_admission import AdmissionClient, binding_for, object_name, policy_for
from dynquota.testing.wait import wait_until

POLICY, BINDING = "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"


@pytest.fixture
def admission(
    api_client: kubernetes.client.ApiClient,
) -> kubernetes.client.AdmissionregistrationV1Api:
    """The official sync client's admission API: the test's own path, behind the adapter's
    back."""
    return kubernetes.client.AdmissionregistrationV1Api(api_client)


@pytest.fixture
def budget(admission: kubernetes.client.AdmissionregistrationV1Api) -> Iterator[str]:
    """A fresh budget name; its policy and binding (whoever made them) deleted after the test."""
    name = f"t-{uuid.uuid4().hex[:8]}"
    yield name
    for delete in (
        admission.delete_validating_admission_policy_binding,
        admission.delete_validating_admission_policy,
    ):
        try:
            delete(object_name(name))
        except ApiException as exc:
            if exc.status != 404:
                raise


def pair(budget: str, keys: list[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The budget's policy and a binding that selects no namespace (a label nobody has)."""
    selector = {"matchLabels": {"dq-admission-test": budget}}
    return policy_for(budget, keys), binding_for(budget, selector, [])


def calls() -> tuple[list[tuple[str, str]], Any]:
    """A list of ``(verb, resource)`` and the observer that appends to it."""
    seen: list[tuple[str, str]] = []
    return seen, lambda verb, resource, status: seen.append((verb, resource))


def foreign_policy(name: str) -> dict[str, Any]:
    """A policy of someone else (no dynquota labels) that matches nothing dynquota makes."""
    return {
        "metadata": {"name": name, "labels": {"team": "platform"}},
        "spec": {
            "failurePolicy": "Ignore",
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": ["example.com"],
                        "apiVersions": ["*"],
                        "resources": ["widgets"],
                        "operations": ["CREATE"],
                    }
                ]
            },
            "validations": [{"expression": "true"}],
        },
    }


async def test_apply_creates_the_pair_then_writes_nothing_at_rest_and_patches_a_change(
    async_api_client: client.ApiClient,
    admission: kubernetes.client.AdmissionregistrationV1Api,
    budget: str,
) -> None:
    seen, observer = calls()
    store = AdmissionClient(async_api_client, observer)
    policy, binding = pair(budget, ["pods"])
    await store.apply(policy, binding)
    vap, vapb = "validatingadmissionpolicies", "validatingadmissionpolicybindings"
    # read both first, then the policy before the binding
    assert seen == [("get", vap), ("get", vapb), ("create", vap), ("create", vapb)]
    name = object_name(budget)
    assert await store.list_owned() == [name]

    # (kube-controller-manager's validatingadmissionpolicy-status-controller, which writes a
    # policy's status once after a change, does not run here: only a write moves these)
    before = (
        admission.read_validating_admission_policy(name).metadata.resource_version,
        admission.read_validating_admission_policy_binding(name).metadata.resource_version,
    )
    seen.clear()
    await store.apply(policy, binding)
    assert seen == [("get", vap), ("get", vapb)]  # at rest: no write at all
    assert (
        admission.read_validating_admission_policy(name).metadata.resource_version,
        admission.read_validating_admission_policy_binding(name).metadata.resource_version,
    ) == before

    # a second key: the policy is patched, the binding (unchanged) is not
    seen.clear()
    wider, _ = pair(budget, ["pods", "configmaps"])
    await store.apply(wider, binding)
    assert seen == [("get", vap), ("get", vapb), ("patch", vap)]
    rules = admission.read_validating_admission_policy(name).spec.match_constraints.resource_rules
    assert [r.resources for r in rules] == [["configmaps", "pods"]]
    assert (
        admission.read_validating_admission_policy_binding(name).metadata.resource_version
        == before[1]
    )


async def test_a_write_on_a_stale_read_conflicts_and_apply_reads_again(
    async_api_client: client.ApiClient,
    admission: kubernetes.client.AdmissionregistrationV1Api,
    budget: str,
) -> None:
    store = AdmissionClient(async_api_client)
    policy, binding = pair(budget, ["pods"])
    await store.apply(policy, binding)
    name = object_name(budget)
    stale = await store.read(POLICY, name)
    assert stale is not None
    # someone changes the policy after the read
    admission.patch_validating_admission_policy(name, {"spec": {"failurePolicy": "Ignore"}})
    wider, _ = pair(budget, ["pods", "secrets"])
    with pytest.raises(ConflictError) as conflict:
        await store.write(wider, stale)
    assert conflict.value.status == 409
    changed = admission.read_validating_admission_policy(name)
    assert changed.spec.failure_policy == "Ignore"  # the stale write changed nothing
    assert [r.resources for r in changed.spec.match_constraints.resource_rules] == [["pods"]]
    # apply reads first: it sees the change and writes over it, conditionally
    await store.apply(wider, binding)
    fixed = admission.read_validating_admission_policy(name)
    assert fixed.spec.failure_policy == "Fail"
    assert [r.resources for r in fixed.spec.match_constraints.resource_rules] == [
        ["pods", "secrets"]
    ]
    # a create that loses the race to another creator is a conflict too
    gone = f"{budget}-b"
    other, _ = pair(gone, ["pods"])
    admission.create_validating_admission_policy(other)
    try:
        with pytest.raises(ConflictError) as exists:
            await store.write(other, None)
        assert exists.value.reason == "AlreadyExists"
    finally:
        admission.delete_validating_admission_policy(object_name(gone))


async def test_an_object_of_the_same_name_dynquota_did_not_create_is_never_written_or_deleted(
    async_api_client: client.ApiClient,
    admission: kubernetes.client.AdmissionregistrationV1Api,
    budget: str,
) -> None:
    seen, observer = calls()
    store = AdmissionClient(async_api_client, observer)
    name = object_name(budget)
    theirs = admission.create_validating_admission_policy(foreign_policy(name))
    policy, binding = pair(budget, ["pods"])
    with pytest.raises(NotOwnedError) as refused:
        await store.apply(policy, binding)
    assert refused.value.retryable is False
    assert refused.value.message == (
        f"ValidatingAdmissionPolicy {name} exists without the labels dynquota puts on what it "
        "creates; dynquota will not take over an object it did not create (left untouched: "
        "delete or rename it to let dynquota write its own)"
    )
    assert [verb for verb, _ in seen] == ["get", "get"]  # nothing written
    with pytest.raises(ApiException) as absent:
        admission.read_validating_admission_policy_binding(name)
    assert absent.value.status == 404  # no binding for a policy that is not ours

    # removal leaves it alone too, and it is not listed as owned
    await store.remove(name)
    assert await store.list_owned() == []
    assert await store.remove_all() == 0
    after = admission.read_validating_admission_policy(name)
    assert after.metadata.resource_version == theirs.metadata.resource_version
    assert after.metadata.labels == {"team": "platform"}
    assert after.spec.failure_policy == "Ignore"
    assert [r.resources for r in after.spec.match_constraints.resource_rules] == [["widgets"]]


async def test_remove_deletes_the_owned_binding_then_policy_and_keeps_a_foreign_binding(
    async_api_client: client.ApiClient,
    admission: kubernetes.client.AdmissionregistrationV1Api,
    budget: str,
) -> None:
    seen, observer = calls()
    store = AdmissionClient(async_api_client, observer)
    name = object_name(budget)
    await store.apply(*pair(budget, ["pods"]))
    seen.clear()
    assert await store.remove(name) == []
    vap, vapb = "validatingadmissionpolicies", "validatingadmissionpolicybindings"
    assert seen == [("get", vapb), ("delete", vapb), ("get", vap), ("delete", vap)]
    assert await store.list_owned() == []

    # a delete on a stale read (changed behind its back) conflicts and deletes nothing
    await store.apply(*pair(budget, ["pods"]))
    stale = await store.read(POLICY, name)
    assert stale is not None
    admission.patch_validating_admission_policy(name, {"spec": {"failurePolicy": "Ignore"}})
    with pytest.raises(ConflictError):
        await store.delete(POLICY, stale)
    assert admission.read_validating_admission_policy(name).spec.failure_policy == "Ignore"
    await store.remove(name)  # reads again: deleted
    assert await store.list_owned() == []

    # a binding of that name someone else made (pointing at their own policy) stays
    theirs = admission.create_validating_admission_policy_binding(
        {
            "metadata": {"name": name},
            "spec": {"policyName": f"{name}-theirs", "validationActions": ["Audit"]},
        }
    )
    assert await store.remove(name) == ["ValidatingAdmissionPolicyBinding"]
    kept = admission.read_validating_admission_policy_binding(name)
    assert kept.metadata.resource_version == theirs.metadata.resource_version
    assert kept.spec.policy_name == f"{name}-theirs"


def test_an_admission_policy_cannot_guard_writes_of_admission_policies(
    admission: kubernetes.client.AdmissionregistrationV1Api,
    api_client: kubernetes.client.ApiClient,
    namespace: str,
) -> None:
    """The evidence behind docs/budgets.md's RBAC decision: a policy (created through the API)
    that refuses every CREATE of a name starting ``dq-probe-`` refuses a ConfigMap so named,
    yet admits a ValidatingAdmissionPolicy and a binding so named (the apiserver skips
    API-created policies for these kinds: k8s.io/apiserver, policy/generic/plugin.go,
    isExcludedFromAPIHooks). So no policy in the chart can confine the operator's grant."""
    guard = f"dq-guard-{uuid.uuid4().hex[:6]}"
    rules = [
        {"apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps"],
         "operations": ["CREATE"]},
        {"apiGroups": ["admissionregistration.k8s.io"], "apiVersions": ["*"],
         "resources": ["validatingadmissionpolicies", "validatingadmissionpolicybindings"],
         "operations": ["CREATE"]},
    ]  # fmt: skip
    admission.create_validating_admission_policy(
        {
            "metadata": {"name": guard},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {"resourceRules": rules},
                "validations": [
                    {
                        "expression": "!object.metadata.name.startsWith('dq-probe-')",
                        "message": "dq-probe guard",
                    }
                ],
            },
        }
    )
    admission.create_validating_admission_policy_binding(
        {"metadata": {"name": guard}, "spec": {"policyName": guard, "validationActions": ["Deny"]}}
    )
    core = kubernetes.client.CoreV1Api(api_client)
    probe = f"dq-probe-{uuid.uuid4().hex[:6]}"
    try:

        def configmap_denied() -> ApiException | None:
            try:
                core.create_namespaced_config_map(
                    namespace, {"metadata": {"name": probe}}, dry_run="All"
                )
            except ApiException as exc:
                return exc
            return None

        denied = wait_until(configmap_denied, "the guard denies a dq-probe ConfigMap", timeout=30)
        assert denied.status == 422
        assert "dq-probe guard" in str(denied.body)
        # the same guard, loaded (it just denied), admits both admission kinds so named
        policy = foreign_policy(probe)
        made = admission.create_validating_admission_policy(policy, dry_run="All")
        assert made.metadata.name == probe
        made = admission.create_validating_admission_policy_binding(
            {"metadata": {"name": probe}, "spec": {"policyName": probe,
                                                   "validationActions": ["Deny"]}},
            dry_run="All",
        )  # fmt: skip
        assert made.metadata.name == probe
    finally:
        admission.delete_validating_admission_policy_binding(guard)
        admission.delete_validating_admission_policy(guard)
