"""Unit tests for dynquota.policy selection, exclusions, state annotations and kill switch."""

from __future__ import annotations

from typing import Any

import pytest

from dynquota.policy import (
    DEFAULT_PROFILES,
    PODS,
    Exclusion,
    Governance,
    KillSwitchReading,
    KillSwitchState,
    NamespaceInfo,
    PolicyInfo,
    format_time,
    govern,
    managed_label_warning,
    namespace_exclusion,
    parse_kill_switch,
    parse_time,
    resolve_kill_switch,
    validate_policy,
)


def _policy(name: str, spec: dict[str, Any]) -> PolicyInfo:
    return validate_policy({"metadata": {"name": name}, "spec": spec})


def _ns(name: str = "team-a", terminating: bool = False, **labels: str) -> NamespaceInfo:
    return NamespaceInfo(name, dict(labels), terminating)


# -- exclusions -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("namespace", "kwargs", "expected"),
    [
        (_ns("kube-system"), {}, Exclusion("system namespace kube-system", remove_quota=False)),
        (_ns("kube-public"), {}, Exclusion("system namespace kube-public", remove_quota=False)),
        (
            _ns("kube-node-lease"),
            {},
            Exclusion("system namespace kube-node-lease", remove_quota=False),
        ),
        (
            _ns("dynquota"),
            {"operator_namespace": "dynquota"},
            Exclusion("the operator's own namespace", remove_quota=False),
        ),
        (
            _ns("team-a", terminating=True, **{"dynquota.io/managed": "false"}),
            {},
            Exclusion("namespace is being deleted", remove_quota=False),
        ),
        (
            _ns("team-a", **{"dynquota.io/managed": "false"}),
            {},
            Exclusion("namespace labelled dynquota.io/managed=false", remove_quota=True),
        ),
        (
            _ns("team-a", **{"dynquota.io/managed": "False"}),
            {},
            Exclusion("namespace labelled dynquota.io/managed=false", remove_quota=True),
        ),
        (
            _ns("team-a"),
            {"excluded_by_settings": True},
            Exclusion("excluded by the operator's settings", remove_quota=True),
        ),
        (_ns("team-a", **{"dynquota.io/managed": "true"}), {}, None),
        (_ns("team-a", **{"dynquota.io/managed": "no"}), {}, None),
        (_ns("dynquota"), {}, None),
        (_ns("default"), {"operator_namespace": "dynquota"}, None),
    ],
)
def test_namespace_exclusion(
    namespace: NamespaceInfo, kwargs: dict[str, Any], expected: Exclusion | None
) -> None:
    assert namespace_exclusion(namespace, **kwargs) == expected


def test_excluded_namespaces_are_never_governed() -> None:
    everything = [_policy("all", {})]
    g = govern(_ns("kube-system"), everything)
    assert (g.kind, g.reason, g.policy) == ("excluded", "system namespace kube-system", None)
    g = govern(_ns("ops"), everything, operator_namespace="ops")
    assert g.kind == "excluded"
    g = govern(_ns("team-a", terminating=True), everything)
    assert (g.kind, g.reason) == ("excluded", "namespace is being deleted")
    g = govern(_ns("team-a", **{"dynquota.io/managed": "FALSE"}), everything)
    assert (g.kind, g.reason) == ("unmanaged", "namespace labelled dynquota.io/managed=false")


# -- selection --------------------------------------------------------------------------------


def test_no_policy_matches_is_unmanaged() -> None:
    g = govern(
        _ns(team="a"), [_policy("b-only", {"namespaceSelector": {"matchLabels": {"team": "b"}}})]
    )
    assert (g.kind, g.reason, g.policy) == ("unmanaged", "no policy matches this namespace", None)
    assert govern(_ns(), []).kind == "unmanaged"


def test_highest_priority_wins() -> None:
    policies = [
        _policy("low", {"priority": 1, "resources": {"pods": {"maximum": 100}}}),
        _policy("high", {"priority": 10, "resources": {"pods": {"maximum": 500}}, "dryRun": True}),
        _policy("nomatch", {"priority": 99, "namespaceSelector": {"matchLabels": {"x": "y"}}}),
    ]
    g = govern(_ns(), policies)
    assert (g.kind, g.policy, g.reason, g.dry_run) == (
        "managed",
        "high",
        "governed by policy high",
        True,
    )
    assert g.profiles[PODS].maximum == 500


def test_equal_priority_smallest_name_wins() -> None:
    policies = [_policy("b", {"priority": 3}), _policy("a", {"priority": 3}), _policy("c", {})]
    assert govern(_ns(), policies).policy == "a"
    assert govern(_ns(), list(reversed(policies))).policy == "a"
    # Code-point order: upper case sorts before lower case, digits before letters.
    assert govern(_ns(), [_policy("b", {}), _policy("B", {}), _policy("9", {})]).policy == "9"


def test_negative_priority_ranks_below_default() -> None:
    assert govern(_ns(), [_policy("z", {}), _policy("a", {"priority": -1})]).policy == "z"


def test_invalid_winning_match_freezes() -> None:
    broken = _policy("broken", {"priority": 10, "resources": {"count/nodes": {}}})
    g = govern(_ns(), [_policy("fine", {"priority": 1}), broken])
    assert g.kind == "frozen"
    assert g.policy == "broken"
    assert g.reason == (
        "policy broken is invalid and may govern this namespace: spec.resources: resource key "
        "not counted by the Kubernetes quota system: 'count/nodes': 'nodes' is cluster-scoped; "
        "a namespace quota cannot count it"
    )
    assert g.profiles == {}


def test_invalid_policy_outranked_by_a_valid_one_does_not_freeze() -> None:
    broken = _policy("broken", {"priority": 1, "resources": {"pods": {"maximum": 1}}})
    g = govern(_ns(), [_policy("fine", {"priority": 5}), broken])
    assert (g.kind, g.policy) == ("managed", "fine")
    # Equal priority: the name decides ("a-broken" < "fine" freezes, "z-broken" does not).
    a = _policy("a-broken", {"priority": 5, "resources": {"pods": {"maximum": 1}}})
    z = _policy("z-broken", {"priority": 5, "resources": {"pods": {"maximum": 1}}})
    assert govern(_ns(), [_policy("fine", {"priority": 5}), a]).kind == "frozen"
    assert govern(_ns(), [_policy("fine", {"priority": 5}), z]).policy == "fine"


def test_invalid_policy_that_does_not_match_is_ignored() -> None:
    broken = _policy(
        "broken",
        {
            "priority": 100,
            "namespaceSelector": {"matchLabels": {"team": "b"}},
            "resources": {"pods": {"bufferPercent": -5}},
        },
    )
    assert govern(_ns(team="a"), [_policy("fine", {}), broken]).policy == "fine"
    assert govern(_ns(team="b"), [_policy("fine", {}), broken]).kind == "frozen"


def test_invalid_policy_alone_freezes_what_it_matches_instead_of_unmanaging() -> None:
    broken = _policy(
        "broken", {"namespaceSelector": {"matchLabels": {"team": "a"}}, "dryRun": "maybe"}
    )
    assert govern(_ns(team="a"), [broken]).kind == "frozen"
    assert govern(_ns(team="b"), [broken]).kind == "unmanaged"


def test_unknown_selector_or_priority_assumes_the_worst() -> None:
    bad_selector = _policy(
        "bad-selector",
        {
            "priority": 1,
            "namespaceSelector": {"matchExpressions": [{"key": "k", "operator": "In"}]},
        },
    )
    g = govern(_ns(anything="x"), [_policy("fine", {"priority": 0}), bad_selector])
    assert (g.kind, g.policy) == ("frozen", "bad-selector")
    # ... but a valid policy of higher priority still wins over it.
    assert govern(_ns(), [_policy("fine", {"priority": 2}), bad_selector]).policy == "fine"
    bad_priority = _policy(
        "zz-bad-priority", {"priority": "high", "namespaceSelector": {"matchLabels": {"t": "a"}}}
    )
    g = govern(_ns(t="a"), [_policy("fine", {"priority": 1000}), bad_priority])
    assert (g.kind, g.policy) == ("frozen", "zz-bad-priority")
    assert govern(_ns(t="b"), [_policy("fine", {"priority": 1000}), bad_priority]).policy == "fine"


def test_from_spec_round_trip() -> None:
    info = _policy("p", {"priority": 4})
    assert info.spec is not None
    assert PolicyInfo.from_spec("p", info.spec) == info
    assert govern(_ns(), [info]).profiles == dict(DEFAULT_PROFILES)


# -- timestamps -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("2026-11-30T03:30:00Z", 1796009400),
        ("2026-11-30T04:30:00+01:00", 1796009400),
        ("2026-11-29T22:30:00-05:00", 1796009400),
        ("2026-11-30t03:30:00z", 1796009400),
        ("2026-11-30T03:30:00.999999Z", 1796009400),
        ("1970-01-01T00:00:00Z", 0),
    ],
)
def test_parse_time(text: str, seconds: int) -> None:
    assert parse_time(text) == seconds


@pytest.mark.parametrize(
    "text",
    [
        "2026-11-30",
        "2026-11-30T03:30:00",
        "2026-11-30 03:30:00Z",
        "2026-02-30T00:00:00Z",
        "2026-11-30T24:00:00Z",
        "2026-11-30T03:30:00+24:00",
        "1796009400",
        "",
        "yesterday",
    ],
)
def test_parse_time_invalid(text: str) -> None:
    with pytest.raises(ValueError, match=r"^invalid timestamp ") as info:
        parse_time(text)
    assert str(info.value) == (
        f"invalid timestamp {text!r}: expected RFC 3339 like 2026-11-30T03:30:00Z"
    )


def test_format_time() -> None:
    assert format_time(1796009400) == "2026-11-30T03:30:00Z"
    assert format_time(1796009400.9) == "2026-11-30T03:30:00Z"
    assert format_time(0) == "1970-01-01T00:00:00Z"


# -- dynquota.io/managed values without effect --------------------------------------------------


def _label_warning(value: str) -> str:
    return (
        f'label dynquota.io/managed="{value}" is not "false": the namespace stays managed '
        '(only "false", in any case, opts a namespace out)'
    )


@pytest.mark.parametrize("value", ["no", "", "0", "off", "False ", "disabled"])
def test_managed_label_without_effect_is_reported(value: str) -> None:
    namespace = _ns(**{"dynquota.io/managed": value})
    assert managed_label_warning(namespace) == _label_warning(value)
    assert namespace_exclusion(namespace) is None  # semantics unchanged: still managed
    g = govern(namespace, [_policy("p", {})])
    assert (g.kind, g.policy, g.warning) == ("managed", "p", _label_warning(value))
    # frozen namespaces keep their quota: the label still has no effect, still reported
    broken = validate_policy({"metadata": {"name": "broken"}, "spec": {"priority": "x"}})
    g = govern(namespace, [broken])
    assert (g.kind, g.warning) == ("frozen", _label_warning(value))


@pytest.mark.parametrize("value", ["false", "FALSE", "False", "true", "TRUE", "True", None])
def test_managed_label_with_a_meaning_is_not_reported(value: str | None) -> None:
    labels = {} if value is None else {"dynquota.io/managed": value}
    namespace = _ns(**labels)
    assert managed_label_warning(namespace) is None
    assert govern(namespace, [_policy("p", {})]).warning is None


def test_managed_label_warning_only_where_the_label_matters() -> None:
    everything = [_policy("p", {})]
    label = {"dynquota.io/managed": "no"}
    # excluded or not matched: the namespace is not managed anyway
    assert govern(_ns("kube-system", **label), everything).warning is None
    assert govern(_ns("team-a", terminating=True, **label), everything).warning is None
    assert govern(_ns("ops", **label), everything, operator_namespace="ops").warning is None
    assert govern(_ns(**label), everything, excluded_by_settings=True).warning is None
    assert govern(_ns(**label), []) == Governance("unmanaged", "no policy matches this namespace")


# -- kill switch ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "engaged"),
    [
        ("true", True),
        ("True", True),
        ("TRUE", True),
        ("false", False),
        ("FALSE", False),
        (None, False),
    ],
)
def test_kill_switch_valid(value: str | None, engaged: bool) -> None:
    reading = parse_kill_switch(value)
    assert reading.engaged is engaged
    assert reading.warning is None


@pytest.mark.parametrize("value", ["yes", "1", "", " true", "on", "enabled"])
def test_kill_switch_invalid(value: str) -> None:
    reading = parse_kill_switch(value)
    assert reading.engaged is None
    assert reading.warning == (
        f"invalid dynquota.io/kill-switch value {value!r}: expected true or false "
        "(case-insensitive); the kill switch stays as it was"
    )


def test_resolve_kill_switch_keeps_previous_state() -> None:
    assert resolve_kill_switch("yes", previous=True).engaged is True
    assert resolve_kill_switch("yes", previous=False).engaged is False
    assert resolve_kill_switch("yes", previous=None).engaged is None
    assert resolve_kill_switch("yes", previous=True).warning is not None
    assert resolve_kill_switch("TRUE", previous=False).engaged is True
    assert resolve_kill_switch(None, previous=True).engaged is False


VALID_KILL_SWITCH = [
    ("true", "engaged"),
    ("TRUE", "engaged"),
    ("false", "released"),
    (None, "released"),
]
INVALID_KILL_SWITCH = ["yes", " true ", "", "maybe"]
INVALID_PREFIX = (
    "invalid dynquota.io/kill-switch value {!r}: expected true or false (case-insensitive)"
)


@pytest.mark.parametrize(("value", "state"), VALID_KILL_SWITCH)
@pytest.mark.parametrize("previous", [None, True, False])
@pytest.mark.parametrize("managed_quotas_exist", [None, True, False])
def test_resolve_kill_switch_valid_value_wins(
    value: str | None,
    state: KillSwitchState,
    previous: bool | None,
    managed_quotas_exist: bool | None,
) -> None:
    reading = resolve_kill_switch(value, previous, managed_quotas_exist=managed_quotas_exist)
    assert reading == KillSwitchReading(state == "engaged", None)
    assert reading.state == state


@pytest.mark.parametrize("value", INVALID_KILL_SWITCH)
@pytest.mark.parametrize("managed_quotas_exist", [None, True, False])
@pytest.mark.parametrize(("previous", "state"), [(True, "engaged"), (False, "released")])
def test_resolve_kill_switch_invalid_value_keeps_a_known_state(
    value: str, managed_quotas_exist: bool | None, previous: bool, state: KillSwitchState
) -> None:
    reading = resolve_kill_switch(value, previous, managed_quotas_exist=managed_quotas_exist)
    assert reading == KillSwitchReading(
        previous, INVALID_PREFIX.format(value) + f"; the kill switch stays {state}"
    )
    assert reading.state == state


@pytest.mark.parametrize("value", INVALID_KILL_SWITCH)
def test_resolve_kill_switch_invalid_at_start_up_with_managed_quotas_acts_released(
    value: str,
) -> None:
    reading = resolve_kill_switch(value, None, managed_quotas_exist=True)
    assert reading == KillSwitchReading(
        False,
        INVALID_PREFIX.format(value) + "; no valid value was read since start-up, but managed "
        "quotas exist, so it was last released (an engaged switch deletes them all): acting as "
        "released",
    )
    assert reading.state == "released"


@pytest.mark.parametrize("value", INVALID_KILL_SWITCH)
def test_resolve_kill_switch_invalid_at_start_up_without_managed_quotas_is_unknown(
    value: str,
) -> None:
    reading = resolve_kill_switch(value, None, managed_quotas_exist=False)
    assert reading == KillSwitchReading(
        None,
        INVALID_PREFIX.format(value) + "; no valid value was read since start-up and no managed "
        "quota exists (a fresh install, or the switch was engaged): the state is unknown, no "
        "quota is created until it reads true or false",
    )
    assert reading.state == "unknown"


@pytest.mark.parametrize("value", INVALID_KILL_SWITCH)
def test_resolve_kill_switch_old_callers_keep_unknown(value: str) -> None:
    """Without ``managed_quotas_exist`` (callers predating it): unknown, as before."""
    reading = resolve_kill_switch(value, None)
    assert reading == KillSwitchReading(
        None,
        INVALID_PREFIX.format(value) + "; no valid value was read since start-up: the state "
        "is unknown, nothing is written until it reads true or false",
    )
    assert reading.state == "unknown"


def test_kill_switch_reading_states() -> None:
    assert KillSwitchReading(True).state == "engaged"
    assert KillSwitchReading(False).state == "released"
    assert KillSwitchReading(None, "x").state == "unknown"
    assert parse_kill_switch(" true ").state == "unknown"
