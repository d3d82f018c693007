"""``dynquota plan`` scoped like kubectl on the real apiserver: ``plan -n NS`` reads only that
namespace (its requests counted at ``ApiClient.request``), a budget member's plan reads the
other members, ``-l SELECTOR --at-risk`` lists the namespace at its limit."""

from __future__ import annotations

import json
import uuid
from typing import Any

import kubernetes
import pytest
import yaml
from cli_run import run_cli  # same directory
from kubernetes_asyncio import client as async_client

from dynquota.cli import main
from dynquota.names import MANAGED_BY_LABEL, MANAGED_BY_VALUE
from dynquota.testing.operator import OperatorCluster
from dynquota.testing.wait import wait_until


def _lists(op_cluster: OperatorCluster, plural: str) -> bool:
    try:
        op_cluster.custom.list_cluster_custom_object("dynquota.io", "v1alpha1", plural)
    except kubernetes.client.ApiException as exc:
        if exc.status == 429:
            return False
        raise
    return True


def test_plan_of_one_namespace_reads_only_that_namespace(
    op_cluster: OperatorCluster,
    scope: dict[str, str],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ns = op_cluster.new_namespace(scope)
    op_cluster.new_namespace(scope)  # another one, never read
    op_cluster.create_pods(ns, 3)
    op_cluster.policy("p-scope", scope, pods={"minimum": 10, "maximum": 100, "bufferPercent": 40})
    # a CRD's watch cache answers 429 "storage is (re)initializing" until it has started
    # (plan tries again, which would count twice): wait for it first
    wait_until(lambda: _lists(op_cluster, "quotabudgets"), "the QuotaBudget watch cache")
    sent: list[tuple[str, str]] = []
    request = async_client.ApiClient.request

    async def counted(self: Any, method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        sent.append((method, url.split("://", 1)[1].split("/", 1)[1].split("?")[0]))
        return await request(self, method, url, *args, **kwargs)

    monkeypatch.setattr(async_client.ApiClient, "request", counted)
    argv = ["plan", "--kubeconfig", op_cluster.cp.kubeconfig, "--local", "-n", ns, "-o", "json"]
    code, out, err = run_cli(argv, capsys)
    assert (code, err) == (0, "")
    assert sent == [
        ("GET", "api/v1/namespaces/kube-system"),
        ("GET", f"api/v1/namespaces/{ns}"),
        ("GET", "apis/dynquota.io/v1alpha1/dynamicquotapolicies"),
        ("GET", "apis/dynquota.io/v1alpha1/quotabudgets"),
        ("GET", f"api/v1/namespaces/{ns}/resourcequotas"),
        ("GET", f"api/v1/namespaces/{ns}/limitranges"),
        ("GET", f"api/v1/namespaces/{ns}/pods"),
        ("GET", f"api/v1/namespaces/{ns}/configmaps"),
    ]
    document = json.loads(out)
    assert document["apiVersion"] == "plan.dynquota.io/v2"
    (pods,) = [r for r in document["rows"] if r["resource"] == "pods"]
    assert pods == {
        "namespace": ns,
        "resource": "pods",
        "tally": 3,
        "statusUsed": None,
        "hard": None,
        "target": 10,
        "next": "create",
        "why": "create pods 10: usage 3, buffer 40%, at minimum 10",
    }
    # the whole cluster: cluster-wide lists, none of them per namespace
    sent.clear()
    argv = ["plan", "--kubeconfig", op_cluster.cp.kubeconfig, "--local", "-A", "-o", "yaml"]
    code, out, err = run_cli(argv, capsys)
    assert (code, err) == (0, "")
    assert not [p for _, p in sent if p.startswith(f"api/v1/namespaces/{ns}")]
    assert ("GET", "api/v1/pods") in sent
    assert yaml.safe_load(out)["apiVersion"] == "plan.dynquota.io/v2"
    # jsonpath and the at-risk view on the same namespace
    code, out, _ = run_cli(
        [*argv[:4], "--local", "-n", ns, "-o", "jsonpath={.rows[0].target}"], capsys
    )
    assert (code, out) == (0, "10")  # as kubectl: no newline after jsonpath output


def test_plan_at_risk_lists_the_namespace_at_its_limit(
    op_cluster: OperatorCluster, scope: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    full, calm = op_cluster.new_namespace(scope), op_cluster.new_namespace(scope)
    for ns, hard, pods in ((full, "3", 3), (calm, "10", 1)):
        op_cluster.core.create_namespaced_resource_quota(
            ns,
            {
                "metadata": {"name": "dynquota", "labels": {MANAGED_BY_LABEL: MANAGED_BY_VALUE}},
                "spec": {"hard": {"pods": hard}},
            },
        )
        op_cluster.create_pods(ns, pods)
    op_cluster.policy("p-risk", scope, pods={"minimum": 1, "maximum": 3, "bufferPercent": 40})
    selector = ",".join(f"{k}={v}" for k, v in scope.items())
    argv = ["plan", "--kubeconfig", op_cluster.cp.kubeconfig, "--local", "-l", selector]
    code, out, err = run_cli([*argv, "--at-risk"], capsys)
    assert (code, err) == (0, "")
    lines = out.splitlines()
    table = lines[lines.index("") + 1 :]
    assert table[0].split() == [
        "NAMESPACE", "RESOURCE", "RISK", "USE", "USED", "HARD", "TARGET", "NEXT", "WHY"
    ]  # fmt: skip
    assert table[1].split()[:8] == [full, "pods", "at", "limit", "100%", "3", "3", "3"]
    assert table[2:] == ["1 key at risk in 1 of 2 namespaces: 1 at limit"]
    code, out, _ = run_cli([*argv, "--at-risk", "-o", "jsonpath={.summary}"], capsys)
    assert (code, out) == (0, "1 key at risk in 1 of 2 namespaces: 1 at limit")


def test_plan_of_a_budget_member_reads_the_other_members_too(
    op_cluster: OperatorCluster,
    scope: dict[str, str],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    name = f"b-{uuid.uuid4().hex[:8]}"
    team = {"dynquota.io/budget": name}  # budget membership is this label (docs/budgets.md)
    first = op_cluster.new_namespace({**scope, **team})
    second = op_cluster.new_namespace({**scope, **team})
    outside = op_cluster.new_namespace(scope)
    op_cluster.create_pods(first, 3)
    op_cluster.create_pods(second, 2)
    op_cluster.policy("p-budget", scope, pods={"minimum": 1, "maximum": 50, "bufferPercent": 40})
    op_cluster.budget(name, {"pods": 40})
    try:
        wait_until(lambda: _lists(op_cluster, "quotabudgets"), "the QuotaBudget watch cache")
        argv = ["plan", "--kubeconfig", op_cluster.cp.kubeconfig, "--local", "-o", "json"]
        sent: list[str] = []
        request = async_client.ApiClient.request

        async def counted(self: Any, method: str, url: str, *args: Any, **kwargs: Any) -> Any:
            sent.append(url.split("://", 1)[1].split("/", 1)[1].split("?")[0])
            return await request(self, method, url, *args, **kwargs)

        monkeypatch.setattr(async_client.ApiClient, "request", counted)
        assert main([*argv, "-n", first]) == 0
        (scoped,) = [b for b in json.loads(capsys.readouterr().out)["budgets"] if b["name"] == name]
        # the other member is read (its quotas, pods...), the namespace outside never
        assert f"api/v1/namespaces/{second}/pods" in sent
        assert not [p for p in sent if outside in p]
        monkeypatch.undo()
        assert main([*argv, "-A"]) == 0
        (whole,) = [b for b in json.loads(capsys.readouterr().out)["budgets"] if b["name"] == name]
        (key,) = scoped["keys"]
        assert (key["granted"], key["used"], key["free"]) == (5, 5, 35)
        assert [m["namespace"] for m in key["members"]] == [first]  # only the one asked for
        assert {k: v for k, v in key.items() if k != "members"} == {
            k: v for k, v in whole["keys"][0].items() if k != "members"
        }
    finally:
        op_cluster.delete_budget(name)
