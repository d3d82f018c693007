"""Unit tests of decide() for issue 16: the policy's ``spec.override`` rules and the tenant
line (``dynquota.io/message``) with its ``QuotaAtLimit`` Warnings."""

from __future__ import annotations

from typing import Any

import pytest

from dynquota.policy import (
    DEFAULT_PROFILES,
    Decision,
    Event,
    Governance,
    OverrideSettings,
    QuotaState,
    ResourceProfile,
    apply_decision,
    decide,
    validate_policy,
)
from dynquota.policy.tenant import TENANT_MESSAGE_REFRESH

from .test_decide import GOV, T0, WEEK, run, settled, ts

R_KEY = "dynquota.io/override"
G_KEY = "dynquota.io/override-granted-at"
E_KEY = "dynquota.io/override-expires-at"
ENDED = "dynquota.io/override-ended-at"
MSG = "dynquota.io/message"


def gov(**rules: Any) -> Governance:
    return Governance.managed("default", DEFAULT_PROFILES, override=OverrideSettings.of(**rules))


# -- spec.override -----------------------------------------------------------------------------


def test_override_settings_validate_like_the_crd() -> None:
    spec = validate_policy(
        {"metadata": {"name": "a"}, "spec": {"override": {"ttl": "24h", "minInterval": "12h"}}}
    ).spec
    assert spec is not None
    assert spec.override == OverrideSettings.of(True, 86400, 43200)
    default = validate_policy({"metadata": {"name": "a"}, "spec": {}}).spec
    assert default is not None
    assert default.override == OverrideSettings()
    assert default.override.to_crd() == {"allowed": True, "minInterval": "0s"}
    bad = validate_policy({"metadata": {"name": "a"}, "spec": {"override": {"ttl": "0s"}}})
    assert bad.reason == "spec.override.ttl: must be longer than 0s"
    bad = validate_policy({"metadata": {"name": "a"}, "spec": {"override": {"allowed": "no"}}})
    assert bad.reason == "spec.override.allowed: must be true or false"
    bad = validate_policy({"metadata": {"name": "a"}, "spec": {"override": {"minInterval": 5}}})
    assert bad.reason == (
        "spec.override.minInterval: must be a duration string like 90s, 5m or 1h30m, not 5"
    )


def test_disallowed_request_is_rejected_with_the_rule_as_cause() -> None:
    quota = settled(14, extra={R_KEY: "max"})
    d = run(quota, T0 + 10, pods=10, governance=gov(allowed=False))
    assert d.action == "nothing"
    assert d.events == (
        Event(
            "Warning",
            "OverrideRejected",
            "dynquota.io/override=max not granted: policy default does not allow overrides "
            "(spec.override.allowed: false); ask the platform team",
        ),
    )
    assert d.events[0].cause == "override.allowed"


def test_active_override_ends_when_the_policy_disallows_it() -> None:
    quota = settled(1000, 2000, extra={R_KEY: "max", G_KEY: ts(0), E_KEY: ts(WEEK)})
    d = run(quota, T0 + 3600, pods=10, configmaps=10, governance=gov(allowed=False))
    assert d.hard == {"pods": 14, "configmaps": 50}
    assert {R_KEY, G_KEY, E_KEY} <= d.remove_annotations
    assert [e.reason for e in d.events] == ["OverrideExpired"]
    assert d.events[0].message.startswith(
        "override ended: policy default does not allow overrides (spec.override.allowed: false)"
    )


def test_policy_ttl_replaces_the_operators_and_clamps_an_active_override() -> None:
    d = run(settled(14, extra={R_KEY: "max"}), T0 + 10, pods=10, governance=gov(ttl=3600))
    assert d.set_annotations[E_KEY] == ts(3610)
    active = settled(1000, 2000, extra={R_KEY: "max", G_KEY: ts(0), E_KEY: ts(WEEK)})
    d = run(active, T0 + 60, pods=10, configmaps=10, governance=gov(ttl=3600))
    assert d.set_annotations == {E_KEY: ts(3600)}  # clamped to granted-at + the policy's TTL
    assert d.requeue_at == T0 + 3600


def test_min_interval_spaces_grants_and_the_request_waits() -> None:
    rules = gov(min_interval=6 * 3600)
    active = settled(1000, 2000, extra={R_KEY: "max", G_KEY: ts(0), E_KEY: ts(3600)})
    # the override expires: its end is recorded in the same patch
    d = run(active, T0 + 3700, pods=10, configmaps=10, governance=rules)
    assert d.set_annotations[ENDED] == ts(3600)
    ended = apply_decision(active, d)
    assert ended is not None
    assert R_KEY not in ended.annotations
    # a new request one hour later is refused until 6 h after the end
    again = apply_decision(ended, run(ended, T0 + 3700, pods=10, configmaps=10, governance=rules))
    assert again is not None
    requested = settled(14, extra={**again.annotations, R_KEY: "max"})
    d = run(requested, T0 + 7200, pods=10, governance=rules)
    assert d.action == "nothing"
    assert [(e.reason, e.cause) for e in d.events] == [("OverrideRejected", "override.minInterval")]
    assert d.events[0].message == (
        f"dynquota.io/override=max not granted before {ts(3600 + 6 * 3600)}: policy default "
        "allows a new override 6h after the previous one ended (spec.override.minInterval); "
        "the request stays and is granted then"
    )
    assert d.requeue_at == T0 + 3600 + 6 * 3600
    # at that instant it is granted
    d = run(requested, T0 + 3600 + 6 * 3600, pods=10, governance=rules)
    assert d.changes[0].kind == "override-granted"
    assert d.set_annotations[G_KEY] == ts(3600 + 6 * 3600)


def test_defaults_record_no_end_stamp() -> None:
    active = settled(1000, 2000, extra={R_KEY: "max", G_KEY: ts(0), E_KEY: ts(3600)})
    d = run(active, T0 + 3700, pods=10, configmaps=10)
    assert ENDED not in d.set_annotations


# -- the tenant line ----------------------------------------------------------------------------


def test_line_at_the_maximum_points_to_the_platform_team_not_the_override() -> None:
    d = run(settled(1000), T0 + 10, pods=1000)
    assert d.set_annotations[MSG] == (
        f"{ts(10)}: pods at its limit (used 1000 of hard 1000): the maximum of policy default: "
        "no automatic raise; ask the platform team for a policy with a higher maximum."
    )
    assert [e.cause for e in d.events if e.reason == "QuotaAtLimit"] == ["pods:maximum"]


def test_line_under_a_disallowing_policy_says_so() -> None:
    d = run(settled(14), T0 + 10, pods=14, governance=gov(allowed=False))
    assert d.set_annotations[MSG].endswith(
        "overrides are not allowed by policy default: ask the platform team."
    )


@pytest.mark.parametrize("dry_run", [False, True])
def test_dry_run_posts_no_at_limit_warning(dry_run: bool) -> None:
    d = run(settled(14), T0 + 10, pods=14, dry_run=dry_run)
    assert ("QuotaAtLimit" in [e.reason for e in d.events]) is not dry_run


def test_line_stays_briefly_below_the_limit_then_goes_with_a_write_of_its_own() -> None:
    slow = ResourceProfile.of(40, 10, 1000, 7200, 5 * 3600)  # next raise 2 h away
    governance = Governance.managed("default", {**DEFAULT_PROFILES, "pods": slow})
    at_limit = settled(14, pods_profile=slow)
    line = run(at_limit, T0 + 10, pods=14, governance=governance)
    assert line.set_annotations[MSG].startswith(
        f"{ts(10)}: pods at its limit (used 14 of hard 14): next automatic raise at {ts(7200)}"
    )
    quota = apply_decision(at_limit, line)
    # one pod less: no resize due, the line stays (no write) and is looked at again later
    d = run(quota, T0 + 20, pods=13, governance=governance)
    assert d.action == "nothing"
    assert d.requeue_at == T0 + 10 + TENANT_MESSAGE_REFRESH
    # back at the limit: same content, no write (flapping costs nothing)
    assert run(quota, T0 + 30, pods=14, governance=governance).action == "nothing"
    # an hour after it was written, still below the limit: removed on its own
    d = run(quota, T0 + 10 + TENANT_MESSAGE_REFRESH, pods=13, governance=governance)
    assert d.remove_annotations == frozenset({MSG})
    assert d.changes == ()


def test_help_url_and_namespace_in_the_line() -> None:
    d = decide(
        governance=GOV,
        usage={"pods": 14, "configmaps": 0},
        peak={"pods": 14, "configmaps": 0},
        quota=settled(14),
        kill_switch=False,
        now=T0 + 10,
        started_at=T0 - 86400,
        override_ttl=3600,
        namespace="shop",
        help_url="https://wiki/q",
    )
    assert d.set_annotations[MSG].endswith(
        "kubectl -n shop annotate resourcequota dynquota dynquota.io/override=max (every "
        "resource to its policy maximum for 1h). Help: https://wiki/q"
    )


def test_line_when_the_target_equals_usage() -> None:
    """minimum 0 and no pods: hard 0, and nothing will raise it by itself."""
    none = ResourceProfile.of(40, 0, 1000, 300, 3600)
    governance = Governance.managed("default", {**DEFAULT_PROFILES, "pods": none})
    d = run(settled(0, pods_profile=none), T0 + 10, pods=0, governance=governance)
    assert d.set_annotations[MSG].startswith(
        f"{ts(10)}: pods at its limit (used 0 of hard 0): no automatic raise (its target is 0: "
        "bufferPercent 40, minimum 0); for more room now: kubectl -n NS annotate"
    )
    assert [e.cause for e in d.events if e.reason == "QuotaAtLimit"] == ["pods:no-buffer"]


def budgeted_run(quota: QuotaState, now: float, pods: int) -> Decision:
    """:func:`decide` for a namespace whose ``pods`` is a slice of QuotaBudget ``team-x``."""
    return decide(
        governance=GOV,
        usage={"pods": pods, "configmaps": 0},
        peak={"pods": pods, "configmaps": 0},
        quota=quota,
        kill_switch=False,
        now=now,
        started_at=T0 - 86400,
        budgeted={"pods": "team-x"},
    )


def test_line_for_a_budgeted_key_points_to_the_budget_not_a_raise() -> None:
    d = budgeted_run(settled(14), T0 + 10, pods=14)
    assert d.set_annotations[MSG] == (
        f"{ts(10)}: pods at its limit (used 14 of hard 14): its slice of QuotaBudget team-x: "
        "raised only when the budget has free room (kubectl dynquota status -n NS); an "
        "override gets only the budget's free room: ask the platform team for a larger budget."
    )
    assert [e.cause for e in d.events if e.reason == "QuotaAtLimit"] == ["pods:budget"]


def test_a_budgeted_key_is_at_its_limit_at_its_slice_not_at_the_policys_demand() -> None:
    # the slice is 9 (the budget's write); the policy would ask for ceil(9 x 1.4) = 13
    d = budgeted_run(settled(9), T0 + 10, pods=9)
    assert d.hard["pods"] == 13  # the demand handed to the budget
    assert d.set_annotations[MSG].startswith(
        f"{ts(10)}: pods at its limit (used 9 of hard 9): its slice of QuotaBudget team-x"
    )


def test_events_do_not_claim_a_budgeted_key_the_budget_writes() -> None:
    d = budgeted_run(settled(10), T0 + WEEK, pods=10)
    assert d.hard["pods"] == 14  # the demand handed to the budget
    assert "Resized" not in [e.reason for e in d.events]
