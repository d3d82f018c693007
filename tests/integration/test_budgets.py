"""Tenant budgets (issue #13) on the real control plane: the QuotaBudget CRD's validation, and
the operator slicing a budget into managed quotas under concurrency (docs/budgets.md)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from dynquota.names import BUDGET_KIND, BUDGET_PLURAL, GROUP, VERSION
from dynquota.testing.operator import OperatorCluster


def budget_body(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": BUDGET_KIND,
        "metadata": {"name": name},
        "spec": spec,
    }


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"namespaceSelector": {}, "hard": {"pods": 5}}, "at least one label"),
        ({"namespaceSelector": {"matchLabels": {"a": "b"}}, "hard": {}}, "should have at least 1"),
        ({"namespaceSelector": {"matchLabels": {"a": "b"}}, "hard": {"pods": "5k"}}, "whole"),
        ({"namespaceSelector": {"matchLabels": {"a": "b"}}, "hard": {"pods": -1}}, "non-negative"),
        ({"namespaceSelector": {"matchLabels": {"a": "b"}}, "hard": {"count/nodes": 1}}, "key"),
        (
            {
                "namespaceSelector": {"matchLabels": {"a": "b"}},
                "hard": {"cpu": 1, "requests.cpu": 1},
            },
            "alias",
        ),
    ],
)
def test_the_crd_refuses_a_bad_budget(
    op_cluster: OperatorCluster, spec: dict[str, Any], message: str
) -> None:
    name = f"crdtest-{uuid.uuid4().hex[:8]}"
    with pytest.raises(ApiException) as caught:
        op_cluster.custom.create_cluster_custom_object(
            GROUP, VERSION, BUDGET_PLURAL, budget_body(name, spec)
        )
    assert caught.value.status == 422
    assert message in str(caught.value.body)


def test_the_crd_stores_a_good_budget(op_cluster: OperatorCluster) -> None:
    name = f"crdtest-{uuid.uuid4().hex[:8]}"
    spec = {
        "namespaceSelector": {"matchLabels": {"a": "b"}},
        "hard": {"pods": 60, "requests.cpu": "4"},
    }
    stored = op_cluster.custom.create_cluster_custom_object(
        GROUP, VERSION, BUDGET_PLURAL, budget_body(name, spec)
    )
    try:
        assert stored["spec"] == spec
    finally:
        op_cluster.custom.delete_cluster_custom_object(GROUP, VERSION, BUDGET_PLURAL, name)
