"""The write-rate governor's decision (dynquota.policy.churn): engage, hold, release."""

from __future__ import annotations

import pytest

from dynquota.policy.churn import (
    ChurnSample,
    TarpitState,
    WriteRate,
    decide_churn,
    looser,
    tarpit_rules,
    tarpitted,
    writes_in_window,
)

RULE = WriteRate(limit=100, window=60, quiet_period=300)
START = 1_000.0


def samples(*per_second: tuple[float, int]) -> list[ChurnSample]:
    """``(at, writes)`` pairs as samples (half creates, half deletes)."""
    return [ChurnSample(at, n - n // 2, n // 2) for at, n in per_second]


def decide(
    writes: list[ChurnSample],
    state: TarpitState,
    now: float,
    held: bool = False,
    started_at: float = START,
    rule: WriteRate = RULE,
) -> tuple[str, TarpitState, float | None]:
    d = decide_churn(
        rule=rule, samples=writes, state=state, held_at_maximum=held, now=now,
        started_at=started_at,
    )  # fmt: skip
    return d.action, d.state, d.recheck_at


def test_only_the_window_counts() -> None:
    seen = samples((940.0, 50), (941.0, 7), (1000.0, 3), (1001.0, 1000))
    assert writes_in_window(seen, 1000.0, 60) == 10  # (940, 1000]; 1001 is after now


def test_engage_above_the_limit_not_at_it() -> None:
    at_limit = samples((1500.0, 100))
    assert decide(at_limit, TarpitState(), 1500.0)[0] == "none"
    above = samples((1500.0, 60), (1510.0, 41))
    assert decide(above, TarpitState(), 1510.0)[:2] == ("engage", TarpitState(True, rule=RULE))


def test_a_full_quota_under_refusals_engages_without_writes() -> None:
    action, state, _ = decide([], TarpitState(), 1500.0, held=True)
    assert (action, state) == ("engage", TarpitState(True, rule=RULE))
    held = decide_churn(
        rule=RULE, samples=[], state=TarpitState(), held_at_maximum=True, now=1500.0,
        started_at=START,
    )  # fmt: skip
    assert "quota held at its maximum" in held.reason


def test_hold_while_above_half_the_limit() -> None:
    """Contained by the tarpit, a churner's seen rate falls: half the limit is the bar."""
    contained = samples((1500.0, 51))
    assert decide(contained, TarpitState(True, quiet_since=1400.0), 1500.0) == (
        "hold",
        TarpitState(True, rule=RULE),  # the quiet clock starts again
        None,
    )


def test_release_after_the_quiet_period() -> None:
    quiet = samples((1500.0, 50))
    first = decide(quiet, TarpitState(True), 1500.0)
    assert first == ("hold", TarpitState(True, 1500.0, RULE), 1800.0)
    assert decide([], first[1], 1799.0)[0] == "hold"
    assert decide([], first[1], 1800.0) == ("release", TarpitState(False), None)


def test_a_restart_never_speeds_a_release_up() -> None:
    """Found tarpitted at start with no history: quiet counts from the start, not before."""
    state = TarpitState(True, quiet_since=500.0)  # a stale clock from before the restart
    assert decide([], state, START + 10, started_at=START) == (
        "hold",
        TarpitState(True, START, RULE),
        START + RULE.quiet_period,
    )
    assert decide([], TarpitState(True), START + RULE.quiet_period, started_at=START)[0] == "hold"


def test_pressure_while_quiet_restarts_the_clock() -> None:
    state = TarpitState(True, quiet_since=1500.0)
    assert decide([], state, 1700.0, held=True) == ("hold", TarpitState(True, rule=RULE), None)


@pytest.mark.parametrize(
    ("limit", "window", "verdict"),
    [
        (100_000, 60, True),  # a larger limit
        (100, 30, True),  # the same limit in a shorter window
        (100, 60, False),  # the same (a quietPeriod change alone)
        (99, 60, False),  # a smaller limit
        (200, 120, False),  # the same rate in a longer window: its counts were not kept
        (1_000, 30, True),
    ],
)
def test_looser(limit: int, window: int, verdict: bool) -> None:
    assert looser(WriteRate(limit, window, 10), RULE) is verdict


def test_a_looser_rule_releases_at_once_when_quiet_by_it() -> None:
    """Rule 6: held under limit 100 (70 writes: more than half), the limit raised to 1000:
    70 <= 500, released now, not a quiet period later."""
    seen = samples((1500.0, 70))
    state = decide(seen, TarpitState(True, rule=RULE), 1500.0)[1]
    assert state == TarpitState(True, rule=RULE)
    raised = WriteRate(1_000, 60, 300)
    d = decide_churn(
        rule=raised, samples=seen, state=state, held_at_maximum=False, now=1501.0,
        started_at=START,
    )  # fmt: skip
    assert (d.action, d.state, d.recheck_at) == ("release", TarpitState(False), None)
    assert d.reason == (
        "released from the tarpit: its writeRate was relaxed (100 writes in 60 s -> 1000 in "
        "60 s): 70 writes in 60 s (limit 1000), quiet at 500 or fewer"
    )


def test_a_looser_rule_still_needs_half_of_it_and_a_stricter_one_never_speeds_up() -> None:
    seen = samples((1500.0, 70))
    held = TarpitState(True, rule=RULE)
    # raised to 120: 70 > 60, held under the new rule, the quiet clock not started
    assert decide(seen, held, 1501.0, rule=WriteRate(120, 60, 300)) == (
        "hold", TarpitState(True, rule=WriteRate(120, 60, 300)), None,
    )  # fmt: skip
    # lowered to 50 while quiet since 1400: the quiet clock goes on, nothing sooner
    quiet = TarpitState(True, 1400.0, RULE)
    strict = WriteRate(50, 60, 300)
    assert decide([], quiet, 1501.0, rule=strict) == (
        "hold",
        TarpitState(True, 1400.0, strict),
        1700.0,
    )
    # a longer window with a larger limit: not looser, rule 4
    longer = WriteRate(1_000, 600, 300)
    assert decide([], quiet, 1501.0, rule=longer)[0] == "hold"


def test_a_looser_rule_waits_for_a_window_of_history() -> None:
    """Less than a window since the start (rule 5): held, judged by rule 6 again at
    ``started_at + window``."""
    quiet = TarpitState(True, START, RULE)
    raised = WriteRate(1_000, 60, 300)
    assert decide([], quiet, START + 30, rule=raised) == (
        "hold", TarpitState(True, START, RULE), START + 60,
    )  # fmt: skip
    assert decide([], quiet, START + 60, rule=raised)[:2] == ("release", TarpitState(False))
    # found at start (rule unknown): no rule 6
    assert decide([], TarpitState(True), START + 60, rule=raised)[0] == "hold"


@pytest.mark.parametrize(("limit", "window", "quiet"), [(0, 60, 300), (10, 0, 300), (10, 60, -1)])
def test_write_rate_bounds(limit: int, window: int, quiet: int) -> None:
    with pytest.raises(ValueError, match="writeRate"):
        WriteRate(limit, window, quiet)


def test_rules_name_namespaces_never_system_or_release() -> None:
    rules = tarpit_rules(
        ["team-b", "kube-system", "team-a", "dynquota-system", "team-a", "kube-node-lease"],
        ["pods", "configmaps", "leases", "events"],
        release_namespace="dynquota-system",
    )
    (rule,) = rules
    (resource_rule,) = rule["resourceRules"]
    assert resource_rule["namespaces"] == ["team-a", "team-b"]
    assert resource_rule["resources"] == ["pods", "configmaps"]
    assert resource_rule["clusterScope"] is False
    assert "get" not in resource_rule["verbs"]
    assert rule["subjects"] == [{"kind": "Group", "group": {"name": "system:authenticated"}}]
    assert tarpitted(rules) == {"team-a", "team-b"}


def test_no_rules_at_rest() -> None:
    """An empty namespace list is invalid in a FlowSchema rule: no rule at all instead."""
    assert tarpit_rules([], ["pods"], "dynquota-system") == []
    assert tarpit_rules(["kube-public"], ["pods"], "dynquota-system") == []
    assert tarpitted([]) == set()


@pytest.mark.parametrize("resources", [["*"], ["leases", "events"], []])
def test_rules_name_their_resources(resources: list[str]) -> None:
    with pytest.raises(ValueError, match="names its resources"):
        tarpit_rules(["team-a"], resources, "dynquota-system")
