"""The QuotaBudget spec (dynquota.policy.budget_spec): validation in units."""

from __future__ import annotations

import re
from typing import Any

import pytest
from pydantic import ValidationError

from dynquota.policy.budget_spec import QuotaBudgetSpec


def spec(hard: object) -> QuotaBudgetSpec:
    return QuotaBudgetSpec.model_validate({"hard": hard})


def test_amounts_become_whole_units_of_each_key() -> None:
    budget = spec({"pods": 60, "requests.cpu": "8", "requests.memory": "64Gi", "secrets": 200})
    assert budget.hard == {
        "pods": 60,
        "requests.cpu": 8000,
        "requests.memory": 64 * 2**30,
        "secrets": 200,
    }
    assert spec({"requests.cpu": "1500m"}).hard == {"requests.cpu": 1500}


@pytest.mark.parametrize(
    ("hard", "message"),
    [
        ({"nvidia.com/gpu": 4}, "nvidia.com/gpu"),
        ({"cpu": "4", "requests.cpu": "4"}, "cpu and requests.cpu are the same key"),
        ({"pods": "60.5"}, "pods: hard must be a whole number, not '60.5'"),
        ({"pods": "500m"}, "pods: hard must be a whole number, not '500m'"),
        ({"pods": -1}, "pods: hard must not be negative, not -1"),
        ({"requests.cpu": "-1"}, "requests.cpu: hard must not be negative"),
        ({"requests.memory": "lots"}, "requests.memory: hard:"),
        ({"count/jobs.batch": True}, "count/jobs.batch: hard must be a whole number"),
        (
            {"requests.cpu": "0.5m"},
            "requests.cpu: hard must be a whole number of millicores, "
            "not '0.5m' (a ResourceQuota rounds it up to the next millicore, more than the budget)",
        ),
        ({"pods": "1e30"}, "pods: hard must be at most 9223372036854775807, not '1e30'"),
        (
            {"pods": 2**63},
            "pods: hard must be at most 9223372036854775807, not 9223372036854775808",
        ),
        ({}, "at least 1 item"),
    ],
)
def test_bad_amounts_are_refused_naming_the_key(hard: object, message: str) -> None:
    with pytest.raises(ValidationError, match=re.escape(message)):
        spec(hard)


def test_a_selector_is_no_field_any_more() -> None:
    # issue #22: membership is the namespace label dynquota.io/budget, not a selector
    with pytest.raises(ValidationError, match="namespaceSelector"):
        QuotaBudgetSpec.model_validate(
            {"namespaceSelector": {"matchLabels": {"a": "b"}}, "hard": {"pods": 1}}
        )


@pytest.mark.parametrize(
    ("given", "units"),
    [({"pods": "60"}, 60), ({"pods": "1k"}, 1000), ({"pods": 60}, 60),
     ({"count/jobs.batch": "2e3"}, 2000), ({"requests.nvidia.com/gpu": "4"}, 4),
     # as a ResourceQuota reads them (measured, docs/budgets.md): "1000m" of pods is 1, a
     # fraction of a byte is kept to the milli-byte, rounded up, and admits its floor
     ({"pods": "1000m"}, 1), ({"pods": "60.0"}, 60), ({"pods": str(2**63 - 1)}, 2**63 - 1),
     ({"requests.memory": "0.5"}, 0), ({"requests.storage": "1.5"}, 1),
     ({"requests.memory": "0.9999"}, 1), ({"limits.memory": "1.5Ki"}, 1536)],
)  # fmt: skip
def test_counts_are_accepted_as_resourcequota_writes_them(
    given: dict[str, Any], units: int
) -> None:
    """Issue 30: ``hard: {pods: "60"}``, the way every ResourceQuota writes a count."""
    assert QuotaBudgetSpec.model_validate({"hard": given}).hard == {next(iter(given)): units}


@pytest.mark.parametrize(
    ("hard", "error"),
    [({"requests.cpu": "0.5m"}, "spec.hard: requests.cpu: hard must be a whole number of "
      "millicores, not '0.5m' (a ResourceQuota rounds it up to the next millicore, more than "
      "the budget)"),
     ({"pods": "1e30"}, "spec.hard: pods: hard must be at most 9223372036854775807, not '1e30'"),
     ({"pods": 5.5}, "spec.hard: pods: hard must be a whole number, not 5.5")],
)  # fmt: skip
def test_an_invalid_budget_says_one_clear_line(hard: dict[str, Any], error: str) -> None:
    """The Valid=False message and the BudgetInvalid Event: no pydantic text."""
    from dynquota.operator.budgets import read_budget

    record = read_budget({"metadata": {"name": "b"}, "spec": {"hard": hard}})
    assert (record.spec, record.error) == (None, error)
