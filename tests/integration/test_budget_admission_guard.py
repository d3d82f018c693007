"""The static guard of docs/examples/budget-admission-guard.yaml on a real apiserver that loads
it from its staticManifestsDir (KEP-5793; Kubernetes 1.37: beta, on by default): the
operator's identity may create, change and delete only the admission policies and bindings
named ``dynquota-budget-slice-*`` carrying dynquota's labels, which RBAC alone cannot say
(docs/budgets.md, "Who may write admission policies"). A private control plane (the flag is
the apiserver's): about 10 s of setup."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes
import pytest
import yaml
from kubernetes.client.exceptions import ApiException

from dynquota.kube.budget_admission import binding_for, policy_for
from dynquota.testing.controlplane import LocalControlPlane

GUARD = Path(__file__).resolve().parents[2] / "docs" / "examples" / "budget-admission-guard.yaml"
OPERATOR = "system:serviceaccount:dynquota-system:dynquota"


@pytest.fixture(scope="module")
def guarded_cp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalControlPlane]:
    """A control plane whose apiserver loads the guard as a static manifest."""
    root = tmp_path_factory.mktemp("static-admission")
    manifests = root / "manifests"
    manifests.mkdir()
    (manifests / "guard.yaml").write_text(GUARD.read_text())
    config = root / "admission.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "apiserver.config.k8s.io/v1",
                "kind": "AdmissionConfiguration",
                "plugins": [
                    {
                        "name": "ValidatingAdmissionPolicy",
                        "configuration": {
                            "apiVersion": "apiserver.config.k8s.io/v1",
                            "kind": "ValidatingAdmissionPolicyConfiguration",
                            "staticManifestsDir": str(manifests),
                        },
                    }
                ],
            }
        )
    )
    with LocalControlPlane(
        extra_apiserver_args=[f"--admission-control-config-file={config}"]
    ) as cp:
        yield cp


def apis(cp: LocalControlPlane) -> tuple[Any, Any]:
    """The admission API as cluster admin, and as the operator's ServiceAccount (impersonated;
    RBAC: the chart's rules on both kinds, unrestricted, and quotas)."""
    admin = kubernetes.config.new_client_from_config(config_file=cp.kubeconfig)
    rbac = kubernetes.client.RbacAuthorizationV1Api(admin)
    rbac.create_cluster_role(
        {"metadata": {"name": "dq-guard-test"},
         "rules": [{"apiGroups": ["admissionregistration.k8s.io"],
                    "resources": ["validatingadmissionpolicies",
                                  "validatingadmissionpolicybindings"],
                    "verbs": ["get", "list", "create", "patch", "delete"]},
                   # a policy with paramKind ResourceQuota needs its writer to get every quota
                   {"apiGroups": [""], "resources": ["resourcequotas"], "verbs": ["get"]}]}
    )  # fmt: skip
    rbac.create_cluster_role_binding(
        {"metadata": {"name": "dq-guard-test"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                     "name": "dq-guard-test"},
         "subjects": [{"kind": "ServiceAccount", "name": "dynquota",
                       "namespace": "dynquota-system"}]}
    )  # fmt: skip
    operator = kubernetes.config.new_client_from_config(config_file=cp.kubeconfig)
    operator.set_default_header("Impersonate-User", OPERATOR)
    return (
        kubernetes.client.AdmissionregistrationV1Api(admin),
        kubernetes.client.AdmissionregistrationV1Api(operator),
    )


def refused(call: Any, *args: Any) -> str:
    """The message of the 4xx that ``call(*args)`` must raise."""
    with pytest.raises(ApiException) as exc:
        call(*args)
    assert exc.value.status == 403, exc.value.body
    return str(exc.value.body)


def test_the_static_guard_confines_the_operator_to_its_own_budget_objects(
    guarded_cp: LocalControlPlane,
) -> None:
    admin, operator = apis(guarded_cp)
    policy = policy_for("guarded", ["pods"])
    binding = binding_for("guarded", {"matchLabels": {"nobody": "x"}}, [])
    # its own objects: created, patched, deleted
    operator.create_validating_admission_policy(policy)
    operator.create_validating_admission_policy_binding(binding)
    operator.patch_validating_admission_policy(
        policy["metadata"]["name"], {"spec": {"failurePolicy": "Ignore"}}
    )
    # anything else: refused by the guard
    others = {"metadata": {"name": "team-policy", "labels": {"team": "platform"}},
              "spec": {"validations": [{"expression": "true"}],
                       "matchConstraints": {"resourceRules": [
                           {"apiGroups": ["example.com"], "apiVersions": ["*"],
                            "resources": ["widgets"], "operations": ["CREATE"]}]}}}  # fmt: skip
    theirs = admin.create_validating_admission_policy(others)
    message = refused(operator.delete_validating_admission_policy, "team-policy")
    assert "dynquota may only create, change or delete" in message
    taken = {"metadata": {"labels": policy["metadata"]["labels"]}}
    refused(operator.patch_validating_admission_policy, "team-policy", taken)
    renamed = {**policy, "metadata": {**policy["metadata"], "name": "not-a-budget"}}
    refused(operator.create_validating_admission_policy, renamed)
    unlabelled = {**policy, "metadata": {"name": "dynquota-budget-slice-unlabelled"}}
    refused(operator.create_validating_admission_policy, unlabelled)
    elsewhere = {**binding, "metadata": {**binding["metadata"], "name": "dynquota-budget-slice-x"},
                 "spec": {"policyName": "team-policy", "validationActions": ["Deny"]}}  # fmt: skip
    refused(operator.create_validating_admission_policy_binding, elsewhere)
    kept = admin.read_validating_admission_policy("team-policy")
    assert kept.metadata.resource_version == theirs.metadata.resource_version
    operator.delete_validating_admission_policy_binding(binding["metadata"]["name"])
    operator.delete_validating_admission_policy(policy["metadata"]["name"])
    # the guard itself is not an API object: nobody can change it through the API
    assert [p.metadata.name for p in admin.list_validating_admission_policy().items] == [
        "team-policy"
    ]
