"""The QuotaBudget spec (dynquota.policy.budget_spec): validation in units, membership."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from dynquota.policy.budget_spec import QuotaBudgetSpec, resolve_membership

TEAM = {"matchLabels": {"team": "a"}}


def spec(hard: object, selector: object = TEAM) -> QuotaBudgetSpec:
    return QuotaBudgetSpec.model_validate({"namespaceSelector": selector, "hard": hard})


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
        ({"pods": "60"}, "pods: hard must be a whole number, not '60'"),
        ({"pods": -1}, "pods: hard must not be negative, not -1"),
        ({"requests.cpu": "-1"}, "requests.cpu: hard must not be negative"),
        ({"requests.memory": "lots"}, "requests.memory: hard:"),
        ({"count/jobs.batch": True}, "count/jobs.batch: hard must be a whole number"),
        ({"requests.cpu": "0.5m"}, "requests.cpu: hard must be a whole number of millicores"),
        ({"requests.memory": "0.5"}, "requests.memory: hard must be a whole number of bytes"),
        ({}, "at least 1 item"),
    ],
)
def test_bad_amounts_are_refused_naming_the_key(hard: object, message: str) -> None:
    with pytest.raises(ValidationError, match=message.replace(".", r"\.")):
        spec(hard)


def test_an_empty_selector_is_refused() -> None:
    with pytest.raises(ValidationError, match="select by at least one label"):
        spec({"pods": 1}, selector={})


def test_a_namespace_in_two_budgets_belongs_to_neither() -> None:
    budgets = {
        "team-a": spec({"pods": 10}),
        "gpu": spec({"pods": 5}, {"matchLabels": {"gpu": "yes"}}),
    }
    found = resolve_membership(
        budgets,
        [
            ("a1", {"team": "a"}),
            ("a2", {"team": "a", "gpu": "yes"}),
            ("g1", {"gpu": "yes"}),
            ("other", {"team": "b"}),
        ],
    )
    assert found.budget_of == {"a1": "team-a", "g1": "gpu"}
    assert found.conflicts == {"a2": ("gpu", "team-a")}
    assert found.members("team-a") == ["a1"]
