"""A refused quota write on the real apiserver (issue 30 follow-up, finding A): a
ValidatingAdmissionPolicy refuses the operator's UPDATEs of the managed quota in one member
namespace of a QuotaBudget. The budget and the policy governing that namespace must say
Ready=False / Stalled=True, naming the namespace and the HTTP status, until the policy goes and
a write lands (then Ready=True again). Before the fix the budget said Ready=True / Enforced."""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from dynquota.names import BUDGET_LABEL, BUDGET_PLURAL, GROUP, PLURAL, VERSION
from dynquota.testing.budgetload import pods_of
from dynquota.testing.operator import OPERATOR_NS, OPERATOR_SA, OperatorCluster, OperatorThread
from dynquota.testing.wait import wait_until

OPERATOR = f"system:serviceaccount:{OPERATOR_NS}:{OPERATOR_SA}"
MESSAGE = "dynquota test: quota writes refused here"
POLICY = {
    "pods": {
        "bufferPercent": 50,
        "minimum": 2,
        "maximum": 60,
        "upscaleCooldown": "0s",
        "downscaleCooldown": "1h",
    }
}


def deny_quota_updates(name: str, namespace: str) -> str:
    """A ValidatingAdmissionPolicy and its binding refusing (403) the operator's UPDATEs of
    ResourceQuotas in ``namespace`` (not their status: the quota controller still counts)."""
    return f"""
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {{name: {name}}}
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
      - {{apiGroups: [""], apiVersions: [v1], operations: [UPDATE], resources: [resourcequotas]}}
  matchConditions:
    - {{name: operator, expression: "request.userInfo.username == '{OPERATOR}'"}}
  validations:
    - {{expression: "false", message: "{MESSAGE}", reason: Forbidden}}
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {{name: {name}}}
spec:
  policyName: {name}
  validationActions: [Deny]
  matchResources:
    namespaceSelector:
      matchLabels: {{kubernetes.io/metadata.name: {namespace}}}
"""


def refused_as_operator(op_cluster: OperatorCluster, namespace: str) -> bool:
    """Whether a server-side dry-run patch of the managed quota in ``namespace``, as the
    operator, is refused (the admission policy is in force)."""
    try:
        op_cluster.cp.kubectl(
            f"--as={OPERATOR}", "-n", namespace, "patch", "resourcequota", "dynquota",
            "--dry-run=server", "--type=merge", "-p", '{"metadata":{"labels":{"probe":"x"}}}',
        )  # fmt: skip
    except subprocess.CalledProcessError as exc:
        if MESSAGE not in exc.stderr:
            raise  # refused for another reason: the test's set-up is wrong
        return True
    return False


def summary(obj: dict[str, Any]) -> dict[str, tuple[str, str, str]]:
    found = {c["type"]: c for c in (obj.get("status") or {}).get("conditions") or []}
    return {
        t: (found[t]["status"], found[t]["reason"], found[t]["message"])
        for t in ("Ready", "Reconciling", "Stalled")
        if t in found
    }


@pytest.fixture
def cleanup(op_cluster: OperatorCluster) -> Iterator[list[tuple[str, str]]]:
    """Objects to delete after the test: ``(kind, name)``."""
    made: list[tuple[str, str]] = []
    yield made
    for kind, name in made:
        op_cluster.cp.kubectl("delete", kind, name, "--ignore-not-found", "--wait=false")


def test_a_refused_slice_write_stalls_the_budget_and_the_policy_until_it_lands(
    op_cluster: OperatorCluster,
    scope: dict[str, str],
    start_operator: Callable[..., OperatorThread],
    cleanup: list[tuple[str, str]],
) -> None:
    run = uuid.uuid4().hex[:8]
    budget, policy = f"qb-{run}", f"p-{run}"
    op_cluster.policy(policy, scope, **POLICY)
    cleanup.append(("quotabudget", op_cluster.budget(budget, {"pods": 12})))
    labels = {**scope, BUDGET_LABEL: budget}
    a, b = op_cluster.new_namespace(labels), op_cluster.new_namespace(labels)
    start_operator()
    # both slices at the minimum, enforced and marked: the budget is Ready
    for ns in (a, b):
        op_cluster.wait_hard(ns, {"pods": "2", "configmaps": "50"}, timeout=60)

    def get(plural: str, name: str) -> dict[str, Any]:
        found: dict[str, Any] = op_cluster.custom.get_cluster_custom_object(
            GROUP, VERSION, plural, name
        )
        return found

    wait_until(
        lambda: (
            summary(get(BUDGET_PLURAL, budget)).get("Ready", ("",))[0] == "True"
            and all(op_cluster.annotations(ns).get("dynquota.io/budget") == budget for ns in (a, b))
        ),
        "the budget Ready, both slices marked",
        timeout=60,
    )
    # the operator may not update the quota in b any more (a 403 from admission)
    name = f"deny-{run}"
    op_cluster.cp.kubectl("apply", "-f", "-", input=deny_quota_updates(name, b))
    cleanup += [("validatingadmissionpolicybinding", name), ("validatingadmissionpolicy", name)]
    wait_until(lambda: refused_as_operator(op_cluster, b), "the admission policy in force")
    # b's demand grows (2 pods: ceil(2 * 1.5) = 3): the budget's grow of b's slice is refused
    op_cluster.create_pods(b, 2)
    denied = (
        f"resourcequotas \"dynquota\" is forbidden: ValidatingAdmissionPolicy '{name}' with "
        f"binding '{name}' denied request: {MESSAGE}"
    )
    why = (
        f"writes of managed quotas are not landing: patch of the managed quota in {b} "
        f"refused: 403 Forbidden: {denied} (not Ready until a write there succeeds; dynquota "
        "tries again: fix the operator's rights or the admission policy that refuses it)"
    )
    stalled = {
        "Ready": ("False", "QuotaWriteForbidden", why),
        "Reconciling": ("False", "Idle", "not working on it"),
        "Stalled": ("True", "QuotaWriteForbidden", why),
    }
    wait_until(
        lambda: summary(get(BUDGET_PLURAL, budget))["Ready"][0] == "False",
        "the budget not Ready: the write is refused",
        timeout=60,
    )
    assert summary(get(BUDGET_PLURAL, budget)) == stalled
    # only a write that landed is granted (issue 30, LOW-7: the refused grow counted, 5 and 7)
    figures = get(BUDGET_PLURAL, budget)["status"]
    assert (figures["granted"], figures["free"]) == ({"pods": "4"}, {"pods": "8"})
    assert figures["namespaces"][b]["grant"] == {"pods": "2"}
    # the policy governing b says it too (its status is written a second after the change)
    wait_until(
        lambda: summary(get(PLURAL, policy)).get("Ready", ("",))[0] == "False",
        "the policy not Ready",
        timeout=30,
    )
    assert summary(get(PLURAL, policy)) == stalled
    assert pods_of(op_cluster.quota(b), "spec") == 2  # nothing landed
    # the admission policy goes: the next try lands and both are Ready again
    op_cluster.cp.kubectl("delete", "validatingadmissionpolicybinding", name)
    wait_until(lambda: not refused_as_operator(op_cluster, b), "the admission policy gone")
    op_cluster.wait_hard(b, {"pods": "3", "configmaps": "50"}, timeout=90)
    for plural, obj, reason in ((BUDGET_PLURAL, budget, "Enforced"), (PLURAL, policy, "Applied")):
        wait_until(
            lambda p=plural, o=obj, r=reason: (  # type: ignore[misc]
                summary(get(p, o)).get("Ready", ("", ""))[:2] == ("True", r)
            ),
            f"{obj} Ready again",
            timeout=60,
        )
