"""The ``Guarded`` condition of a DynamicQuotaPolicy (issue 23): every label key its selector
uses must be one the chart's governance-labels policy guards."""

from __future__ import annotations

from typing import Any

import pytest

from dynquota.policy.labels import LabelSelector
from dynquota.policy.status import guarded_condition

PREFIXES = ["dynquota.io/"]


def selector(**body: Any) -> LabelSelector:
    return LabelSelector.model_validate(body)


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"matchLabels": {"dynquota.io/tier": "gold"}},
        {"matchLabels": {"kubernetes.io/metadata.name": "a"}},
        {"matchExpressions": [{"key": "dynquota.io/pilot", "operator": "Exists"}]},
        {"matchLabels": {"team": "x"}, "keys": ["team"]},
    ],
    ids=["empty", "prefix", "metadata-name", "expression", "exact-key"],
)
def test_guarded_selectors(body: dict[str, Any]) -> None:
    keys = body.pop("keys", [])
    assert guarded_condition(selector(**body), PREFIXES, keys) == (
        "True",
        "Guarded",
        "its namespaceSelector uses guarded label keys only",
    )


def test_an_unguarded_key_is_named_and_the_policy_still_governs() -> None:
    body = {
        "matchLabels": {"team": "x", "dynquota.io/tier": "gold"},
        "matchExpressions": [{"key": "env", "operator": "NotIn", "values": ["prod"]}],
    }
    assert guarded_condition(selector(**body), PREFIXES, []) == (
        "False",
        "UnguardedSelector",
        "namespaceSelector uses the label env, team, which is not guarded: whoever may patch a "
        "Namespace can move it into or out of this policy. Add the key to the chart value "
        "governanceLabels.guardedKeys, or select on dynquota.io/ labels (the policy still "
        "governs; nothing is frozen)",
    )


def test_with_the_guard_off_nothing_but_the_metadata_name_is_guarded() -> None:
    status, reason, _ = guarded_condition(
        selector(matchLabels={"dynquota.io/pilot": "true"}), [], []
    )
    assert (status, reason) == ("False", "UnguardedSelector")
