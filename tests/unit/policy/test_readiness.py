"""Ready, Reconciling and Stalled from the other conditions, and a budget's summary line
(issue 30: kstatus, Flux and Argo CD health; `kubectl get qb`)."""

from __future__ import annotations

from typing import Any

import pytest

from dynquota.policy.readiness import (
    budget_readiness,
    budget_summary,
    policy_readiness,
    set_readiness,
)

NOW, LATER = "2026-12-04T10:00:00Z", "2026-12-04T11:00:00Z"


def cond(type_: str, status: str, reason: str = "R", message: str = "m") -> dict[str, Any]:
    return {"type": type_, "status": status, "reason": reason, "message": message}


def summary(rows: list[tuple[str, str, str, str]]) -> dict[str, tuple[str, str]]:
    return {t: (s, r) for t, s, r, _ in rows}


@pytest.mark.parametrize(
    ("conditions", "expected"),
    [
        (
            [cond("Valid", "True"), cond("Shadowed", "False"), cond("Guarded", "True")],
            {"Ready": ("True", "Applied"), "Reconciling": ("False", "Idle"),
             "Stalled": ("False", "NotStalled")},
        ),
        (
            [cond("Valid", "False", "Invalid", "spec.resources: ...")],
            {"Ready": ("False", "InvalidSpec"), "Reconciling": ("False", "Idle"),
             "Stalled": ("True", "InvalidSpec")},
        ),
        (
            [cond("Valid", "True"), cond("QuotaControllerStalled", "True", "SpecNotCopied")],
            {"Ready": ("False", "QuotaControllerStalled"), "Reconciling": ("False", "Idle"),
             "Stalled": ("True", "QuotaControllerStalled")},
        ),
        (
            [],
            {"Ready": ("Unknown", "NotObserved"), "Reconciling": ("True", "NotObserved"),
             "Stalled": ("False", "NotStalled")},
        ),
    ],
)  # fmt: skip
def test_policy_readiness(conditions: list[dict[str, Any]], expected: dict[str, Any]) -> None:
    assert summary(policy_readiness({c["type"]: c for c in conditions})) == expected


def test_a_ready_policy_says_why_it_is_shadowed_or_unguarded() -> None:
    rows = policy_readiness(
        {
            "Valid": cond("Valid", "True"),
            "Shadowed": cond("Shadowed", "True", message="2 namespaces governed by p2"),
            "Guarded": cond("Guarded", "False", message="selects on team"),
        }
    )
    assert rows[0] == (
        "Ready",
        "True",
        "Applied",
        "the policy is valid and applied to the namespaces it governs; 2 namespaces governed "
        "by p2; selects on team",
    )


@pytest.mark.parametrize(
    ("conditions", "ready", "reconciling", "stalled"),
    [
        ([cond("Valid", "True"), cond("OverBudget", "False"), cond("AtRisk", "False"),
          cond("Rebalancing", "False", "Settled")], ("True", "Enforced"), "False", "False"),
        ([cond("Valid", "True"), cond("Rebalancing", "True", "SlicesWritten")],
         ("True", "Enforced"), "False", "False"),
        ([cond("Valid", "True"), cond("Rebalancing", "False", "Waiting")],
         ("True", "Enforced"), "False", "False"),
        ([cond("Valid", "False", "Invalid")], ("False", "InvalidSpec"), "False", "True"),
        ([cond("Valid", "True"), cond("OverBudget", "True")], ("False", "OverBudget"), "False",
         "True"),
        ([cond("Valid", "True"), cond("AtRisk", "True")], ("False", "AtRisk"), "True", "False"),
        ([cond("Valid", "True"), cond("Rebalancing", "False", "WaitingForQuotaController")],
         ("False", "WaitingForQuotaController"), "True", "False"),
        ([], ("Unknown", "NotObserved"), "True", "False"),
    ],
)  # fmt: skip
def test_budget_readiness(
    conditions: list[dict[str, Any]], ready: tuple[str, str], reconciling: str, stalled: str
) -> None:
    rows = summary(budget_readiness({c["type"]: c for c in conditions}))
    assert rows["Ready"] == ready
    assert rows["Reconciling"][0] == reconciling
    assert rows["Stalled"][0] == stalled


def test_set_readiness_appends_after_the_others_and_moves_transition_time_only_on_change() -> None:
    conditions = [cond("Valid", "True")]
    assert set_readiness(conditions, "DynamicQuotaPolicy", 3, NOW)
    assert [c["type"] for c in conditions] == ["Valid", "Ready", "Reconciling", "Stalled"]
    assert all(c["observedGeneration"] == 3 for c in conditions[1:])
    assert conditions[1]["lastTransitionTime"] == NOW
    assert not set_readiness(conditions, "DynamicQuotaPolicy", 3, LATER)
    conditions[0] = cond("Valid", "False", "Invalid", "bad")
    assert set_readiness(conditions, "DynamicQuotaPolicy", 4, LATER)
    ready = conditions[1]
    assert (ready["status"], ready["reason"], ready["lastTransitionTime"]) == (
        "False", "InvalidSpec", LATER,
    )  # fmt: skip
    assert ready["message"] == "the spec is invalid and its namespaces are frozen: bad"
    # the summary conditions are not read back as inputs
    assert len(conditions) == 4
    with pytest.raises(ValueError, match="no readiness for kind"):
        set_readiness(conditions, "ResourceQuota", 1, NOW)  # type: ignore[arg-type]


def test_budget_summary_reads_like_kubectl_get_quota() -> None:
    assert (
        budget_summary(
            {"requests.cpu": 8000, "pods": 60, "requests.memory": 2**31},
            {"pods": 30, "requests.cpu": 3000},
            {"pods": 20, "requests.cpu": -500, "requests.memory": 2**30},
        )
        == "pods: 30/60 (20 free), requests.cpu: 3/8 (-500m free), "
        "requests.memory: ?/2Gi (1Gi free)"
    )
    many = {k: 1 for k in ("pods", "configmaps", "secrets", "services", "count/jobs.batch")}
    assert budget_summary(many, many, many).endswith(", secrets: 1/1 (1 free), +1 more")
    assert budget_summary({}, {}, {}) == ""
