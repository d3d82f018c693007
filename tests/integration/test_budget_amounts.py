"""A QuotaBudget's amounts read as a ResourceQuota reads them (issue 30 follow-up, finding C),
on the real apiserver: what kube-apiserver does with a fractional byte, a sub-millicore and a
count written in milli units (the evidence in docs/budgets.md, "Amounts as a ResourceQuota
reads them"), the budget CRD taking and refusing the same, and an amount the CRD lets through
but the operator refuses reported as one clear line (Valid=False and a Warning Event)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import kubernetes
import pytest
from kubernetes.client.exceptions import ApiException

from dynquota.names import BUDGET_KIND, BUDGET_PLURAL, GROUP, VERSION
from dynquota.policy.budget_spec import QuotaBudgetSpec
from dynquota.testing.chart import BUDGET_CRD
from dynquota.testing.controlplane import LocalControlPlane
from dynquota.testing.operator import OperatorCluster, OperatorThread
from dynquota.testing.wait import wait_until

WHOLE = (
    'is a whole number, such as 60, "60" or "1000m" (quantity strings such as 500m or 4Gi are '
    "for cpu, memory, ephemeral-storage, hugepages and storage keys)"
)
AT_MOST = (
    "a count is at most 9223372036854775807 (2^63-1), the largest whole number a quantity "
    "check in a CRD holds"
)
NOT_A_QUANTITY = (
    "is not a quantity: a whole number or a quantity such as 60, 500m or 4Gi, without spaces"
)


def quota(core: Any, namespace: str, hard: dict[str, str], name: str = "q") -> Any:
    """Create a ResourceQuota and wait until the quota controller copied its hard."""
    core.create_namespaced_resource_quota(
        namespace, {"metadata": {"name": name}, "spec": {"hard": hard}}
    )
    return wait_until(
        lambda: (q := core.read_namespaced_resource_quota(name, namespace)).status.hard and q,
        "status.hard",
    )


def pod(name: str, memory: str) -> dict[str, Any]:
    resources = {"requests": {"memory": memory}, "limits": {"memory": memory}}
    return {
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "c", "image": "x", "resources": resources}]},
    }


def test_a_resource_quota_keeps_milli_units_and_admits_whole_bytes_below(
    api_client: kubernetes.client.ApiClient, namespace: str
) -> None:
    """The evidence: a fraction of a byte is kept to the milli-byte (rounded up), a
    sub-millicore is rounded up to 1m, ``1000m`` of pods is 1, ``1500m`` is refused; a hard
    of 1.5 bytes admits one pod of 1 byte and not a second."""
    core = kubernetes.client.CoreV1Api(api_client)
    hard = {"requests.storage": "0.9999", "pods": "1000m", "requests.cpu": "0.5m"}
    other = f"amounts-{uuid.uuid4().hex[:8]}"  # (its quota would refuse the pods below)
    core.create_namespace({"metadata": {"name": other}})
    try:
        stored = quota(core, other, hard)
        assert stored.spec.hard == {"requests.storage": "1", "pods": "1", "requests.cpu": "1m"}
        assert stored.status.hard == stored.spec.hard
    finally:
        core.delete_namespace(other)
    stored = quota(core, namespace, {"requests.memory": "1.5", "limits.memory": "100"})
    assert stored.status.hard == {"requests.memory": "1500m", "limits.memory": "100"}
    core.create_namespaced_pod(namespace, pod("a", "1"))
    with pytest.raises(ApiException) as refused:
        core.create_namespaced_pod(namespace, pod("b", "1"))
    assert json.loads(refused.value.body)["message"] == (
        'pods "b" is forbidden: exceeded quota: q, requested: requests.memory=1, used: '
        "requests.memory=1, limited: requests.memory=1500m"
    )
    with pytest.raises(ApiException) as invalid:
        quota(core, namespace, {"pods": "1500m"}, name="q2")
    assert json.loads(invalid.value.body)["message"] == (
        'ResourceQuota "q2" is invalid: spec.hard[pods]: Invalid value: "1500m": must be an integer'
    )


@pytest.fixture
def budgets(
    controlplane: LocalControlPlane, api_client: kubernetes.client.ApiClient
) -> Iterator[kubernetes.client.CustomObjectsApi]:
    """The QuotaBudget CRD from crds/ (applied, Established); budgets made are deleted."""
    controlplane.kubectl(
        "apply", "--server-side", "--force-conflicts", "--field-manager=test-crd",
        "-f", str(BUDGET_CRD),
    )  # fmt: skip
    controlplane.kubectl(
        "wait", "--for=condition=Established", "--timeout=60s", "crd/quotabudgets.dynquota.io"
    )
    api = kubernetes.client.CustomObjectsApi(api_client)
    yield api
    for item in api.list_cluster_custom_object(GROUP, VERSION, BUDGET_PLURAL)["items"]:
        if item["metadata"]["name"].startswith("amounts-"):
            api.delete_cluster_custom_object(
                GROUP, VERSION, BUDGET_PLURAL, item["metadata"]["name"]
            )


def create(budgets: kubernetes.client.CustomObjectsApi, hard: dict[str, Any]) -> dict[str, Any]:
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": BUDGET_KIND,
        "metadata": {"name": f"amounts-{uuid.uuid4().hex[:8]}"},
        "spec": {"hard": hard},
    }
    created: dict[str, Any] = budgets.create_cluster_custom_object(
        GROUP, VERSION, BUDGET_PLURAL, body
    )
    return created


@pytest.mark.parametrize(
    ("hard", "units"),
    [({"pods": "1000m"}, 1), ({"secrets": "2000m"}, 2), ({"pods": "0m"}, 0),
     ({"pods": "60.0"}, 60), ({"pods": "9223372036854775807"}, 2**63 - 1),
     ({"pods": 2**63 - 1}, 2**63 - 1), ({"requests.memory": "0.5"}, 0),
     ({"requests.storage": "1.5"}, 1), ({"requests.memory": "0.9999"}, 1)],
)  # fmt: skip
def test_the_budget_crd_takes_what_a_resource_quota_takes(
    budgets: kubernetes.client.CustomObjectsApi, hard: dict[str, Any], units: int
) -> None:
    created = create(budgets, hard)
    assert created["spec"]["hard"] == hard
    assert QuotaBudgetSpec.model_validate(created["spec"]).hard == {next(iter(hard)): units}


@pytest.mark.parametrize(
    ("hard", "message"),
    [({"pods": "1500m"}, f"pods: the budget of object counts, extended resources and devices "
      f"{WHOLE}"),
     ({"count/jobs.batch": "0.5"}, "count/jobs.batch: the budget of object counts, extended "
      f"resources and devices {WHOLE}"),
     ({"pods": "9223372036854775808"}, f"pods: {AT_MOST}"),
     ({"pods": "1e30"}, f"pods: {AT_MOST}"),
     ({"pods": "-1000m"}, "pods: every budget must be non-negative: a whole number, or a "
      "quantity such as 60, 500m or 4Gi"),
     # issue 30, LOW-6: " 5" was told it must be non-negative
     ({"pods": " 5"}, f'pods: " 5" {NOT_A_QUANTITY}'),
     ({"requests.cpu": "1 Gi"}, f'requests.cpu: "1 Gi" {NOT_A_QUANTITY}'),
     ({"requests.memory": "five"}, f'requests.memory: "five" {NOT_A_QUANTITY}')],
)  # fmt: skip
def test_the_budget_crd_refuses_with_one_message_naming_the_limit(
    budgets: kubernetes.client.CustomObjectsApi, hard: dict[str, Any], message: str
) -> None:
    with pytest.raises(ApiException) as refused:
        create(budgets, hard)
    assert refused.value.status == 422
    body = json.loads(refused.value.body)
    name = body["details"]["name"]
    assert body["message"] == (
        f'QuotaBudget.dynquota.io "{name}" is invalid: spec.hard: Invalid value: {message}'
    )


def test_an_amount_the_operator_refuses_is_one_line_on_valid_and_in_an_event(
    op_cluster: OperatorCluster, start_operator: Callable[..., OperatorThread]
) -> None:
    """``0.5m`` of cpu passes the CRD (any quantity for cpu); the operator refuses it: a
    ResourceQuota would round it up to 1m, more than the budget."""
    name = op_cluster.budget(f"amounts-{uuid.uuid4().hex[:8]}", {"requests.cpu": "0.5m"})
    try:
        start_operator()
        error = (
            "spec.hard: requests.cpu: hard must be a whole number of millicores, not '0.5m' "
            "(a ResourceQuota rounds it up to the next millicore, more than the budget)"
        )

        def valid() -> dict[str, Any] | None:
            got = op_cluster.custom.get_cluster_custom_object(GROUP, VERSION, BUDGET_PLURAL, name)
            found = [c for c in (got.get("status") or {}).get("conditions") or []]
            return next((c for c in found if c["type"] == "Valid"), None)

        condition = wait_until(valid, "the budget's Valid condition")
        assert (condition["status"], condition["reason"], condition["message"]) == (
            "False", "Invalid", error,
        )  # fmt: skip
        event = wait_until(
            lambda: next(
                (e for e in op_cluster.events("default", "BudgetInvalid")
                 if e.involved_object.name == name), None,
            ),
            "the BudgetInvalid Event",
        )  # fmt: skip
        assert (event.type, event.message) == (
            "Warning",
            f"{error}; it has no members: namespaces labelled with it are sized by their own "
            "policy",
        )
    finally:
        op_cluster.delete_budget(name)
