"""Issue 28, part 3: a tenant with only the built-in ``admin`` role in its namespace reads what
governs it — the AppliedDynamicQuota ``dynquota`` the operator writes (policy bounds, next
raise, override rules, its budget's figures and its slice) — with kubectl's access and with
``dynquota status``, on the real apiserver, and gets 403 for another tenant's."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import pytest
from cli_run import run_cli  # same directory
from kubernetes.client.exceptions import ApiException

from dynquota.names import APPLIED_PLURAL, BUDGET_LABEL, BUDGET_PLURAL, GROUP, VERSION
from dynquota.testing.operator import OperatorCluster
from dynquota.testing.rbac import bind_cluster_role
from dynquota.testing.wait import wait_until

PODS = {"bufferPercent": 40, "minimum": 5, "maximum": 40, "upscaleCooldown": "5m",
        "downscaleCooldown": "1h"}  # fmt: skip


def _applied(op_cluster: OperatorCluster, ns: str) -> dict[str, Any] | None:
    try:
        obj: dict[str, Any] = op_cluster.custom.get_namespaced_custom_object(
            GROUP, VERSION, ns, APPLIED_PLURAL, "dynquota"
        )
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise
    return obj


def test_a_namespace_admin_reads_what_governs_it_and_nothing_of_another_tenant(
    op_cluster: OperatorCluster,
    scope: dict[str, str],
    start_operator: Any,
    capsys: pytest.CaptureFixture[str],
) -> None:
    tag = uuid.uuid4().hex[:6]
    team = op_cluster.budget(f"team-{tag}", {"pods": 30})
    op_cluster.policy(f"tv-{tag}", scope, pods=PODS)
    a = op_cluster.new_namespace({**scope, BUDGET_LABEL: team})
    b = op_cluster.new_namespace(scope)
    alice = f"alice-{tag}"
    bind_cluster_role(op_cluster.api, a, alice, "admin")
    op = start_operator()
    try:

        def settled() -> dict[str, Any] | None:
            """The projection once the budget pass reported figures and a slice."""
            obj = _applied(op_cluster, a)
            budget = ((obj or {}).get("status") or {}).get("budget") or {}
            stored = op_cluster.custom.get_cluster_custom_object(
                GROUP, VERSION, BUDGET_PLURAL, team
            )
            free = (stored.get("status") or {}).get("free")
            ok = obj is not None and "slice" in budget and free and budget.get("free") == free
            return obj if ok else None

        obj = wait_until(
            settled, "the projection with the budget's figures and a slice", timeout=90
        )
        assert obj is not None
        quota = op_cluster.quota(a)
        stored = op_cluster.custom.get_cluster_custom_object(GROUP, VERSION, BUDGET_PLURAL, team)
        status = obj["status"]
        assert obj["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "dynquota"}
        assert status["state"] == "Enforced"
        assert status["policy"]["name"] == f"tv-{tag}"
        pods = status["policy"]["resources"]["pods"]
        assert (pods["minimum"], pods["maximum"], pods["bufferPercent"]) == ("5", "40", 40)
        assert (pods["upscaleCooldown"], pods["downscaleCooldown"]) == ("5m", "1h")
        assert pods["nextRaiseAfter"]  # the quota was created: stamped, plus 5m
        # the test bed's operator runs with an 8 s override TTL (operator_settings)
        assert status["policy"]["override"] == {"allowed": True, "ttl": "8s", "minInterval": "0s"}
        assert status["budget"]["hard"] == {"pods": "30"}
        assert status["budget"]["free"] == stored["status"]["free"]
        assert status["budget"]["slice"] == {"pods": quota.spec.hard["pods"]}
        assert b not in json.dumps(status)  # nothing of the other tenant
        # b is governed too (its own object), and alice may not read it
        wait_until(lambda: _applied(op_cluster, b), "b's projection")

        who = ["--kubeconfig", op_cluster.cp.kubeconfig, "--as", alice]
        code, out, err = run_cli(["status", "-n", a, "-o", "json", *who], capsys)
        assert (code, err) == (0, "")
        assert json.loads(out)["status"]["policy"]["resources"]["pods"]["maximum"] == "40"
        code, out, err = run_cli(["status", "-n", a, *who], capsys)
        assert code == 0
        assert f"policy: tv-{tag}" in out.splitlines()
        assert f"budget: {team}" in out
        code, out, err = run_cli(["status", "-n", b, *who], capsys)
        assert code == 2
        assert out == ""
        assert len(err.splitlines()) == 1, err
        assert "403" in err, err
        assert "applieddynamicquotas" in err, err
        # a namespace without one: one line too
        code, _, err = run_cli(["status", "-n", "kube-public", "--kubeconfig",
                                op_cluster.cp.kubeconfig], capsys)  # fmt: skip
        assert code == 2
        assert len(err.splitlines()) == 1
        assert "no AppliedDynamicQuota" in err
        # opted out: the projection goes
        op_cluster.core.patch_namespace(
            b, {"metadata": {"labels": {"dynquota.io/managed": "false"}}}
        )
        wait_until(lambda: _applied(op_cluster, b) is None, "b's projection deleted", timeout=60)
    finally:
        op.stop()
        op_cluster.delete_budget(team)


def test_a_namespace_joining_a_budget_sees_figures_that_count_it_within_seconds(
    op_cluster: OperatorCluster, scope: dict[str, str], start_operator: Any
) -> None:
    """Issue 30 follow-up, finding D: right after a namespace joined a budget its projection
    showed the budget's figures of before (up to the 5-minute figures refresh). Joining is
    event driven now: the figures that count the joiner are shown once the budget's status
    does."""
    tag = uuid.uuid4().hex[:6]
    team = op_cluster.budget(f"join-{tag}", {"pods": 30})
    op_cluster.policy(f"tj-{tag}", scope, pods=PODS)
    member = op_cluster.new_namespace({**scope, BUDGET_LABEL: team})
    joiner = op_cluster.new_namespace(scope)
    op_cluster.create_pods(joiner, 3)  # usage the budget's used must count once it joined
    op = start_operator()
    try:

        def budget_status() -> dict[str, Any]:
            got = op_cluster.custom.get_cluster_custom_object(GROUP, VERSION, BUDGET_PLURAL, team)
            return dict(got.get("status") or {})

        wait_until(lambda: member in (budget_status().get("namespaces") or {}), "the member")
        wait_until(lambda: _applied(op_cluster, joiner), "the joiner's projection")
        started = time.monotonic()
        op_cluster.core.patch_namespace(joiner, {"metadata": {"labels": {BUDGET_LABEL: team}}})

        def shown() -> dict[str, Any] | None:
            stored = budget_status()
            budget = (((_applied(op_cluster, joiner) or {}).get("status") or {}).get("budget")
                      or {})  # fmt: skip
            counted = joiner in (stored.get("namespaces") or {})
            figures = {k: stored.get(k) for k in ("used", "granted", "free")}
            same = all(budget.get(k) == v for k, v in figures.items())
            return budget if counted and same else None

        budget = wait_until(shown, "the joiner's figures counting it", timeout=30)
        took = time.monotonic() - started
        print(f"measured: the joiner's projection counted it {took:.1f} s after the label")
        assert budget["name"] == team
        assert budget["used"] == {"pods": "3"}  # the joiner's 3 pods (the member has none)
        assert took < 20.0  # before: up to FIGURES_REFRESH (300 s) plus a sweep
    finally:
        op.stop()
        op_cluster.delete_budget(team)
