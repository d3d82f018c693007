"""Unit tests for dynquota.policy.decide: sizing rules, overrides, kill switch, dry run."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from dynquota.policy import (
    CONFIGMAPS,
    DEFAULT_OVERRIDE_TTL,
    DEFAULT_PROFILES,
    PODS,
    Change,
    Decision,
    Event,
    Governance,
    QuotaState,
    ResourceProfile,
    apply_decision,
    ceil_div,
    decide,
    format_time,
    parse_time,
    reject_unmanaged_override,
    target,
)
from dynquota.policy.override import FUTURE_STAMP_ALLOWANCE
from dynquota.quantity import parse_quantity

HINT = (
    "dynquota sizes this quota: change its DynamicQuotaPolicy, or request dynquota.io/override=max"
)
T0 = 1795996800  # 2026-11-30T00:00:00Z
STARTED = T0 - 86400  # the operator has been up for a day unless a test says otherwise
WEEK = 7 * 86400
PODS_PROFILE = DEFAULT_PROFILES[PODS]
CM_PROFILE = DEFAULT_PROFILES[CONFIGMAPS]
GOV = Governance.managed("default", DEFAULT_PROFILES)


def edit_warning(edits: str) -> Event:
    """The ``ManualEditReverted`` Warning listing ``edits``."""
    return Event("Warning", "ManualEditReverted", f"spec.hard was edited directly: {edits}. {HINT}")


def ts(offset: int) -> str:
    """RFC 3339 text of T0 + offset seconds."""
    return format_time(T0 + offset)


def run(
    quota: QuotaState | None,
    now: float,
    pods: int = 0,
    configmaps: int = 0,
    peak: Mapping[str, int] | None = None,
    governance: Governance = GOV,
    kill_switch: bool | None = False,
    started_at: float = STARTED,
    dry_run: bool = False,
    override_ttl: int = DEFAULT_OVERRIDE_TTL,
    previously_managed: bool = False,
) -> Decision:
    return decide(
        governance=governance,
        usage={PODS: pods, CONFIGMAPS: configmaps},
        peak=peak if peak is not None else {PODS: pods, CONFIGMAPS: configmaps},
        quota=quota,
        kill_switch=kill_switch,
        now=now,
        started_at=started_at,
        dry_run=dry_run,
        override_ttl=override_ttl,
        previously_managed=previously_managed,
    )


def settled(
    pods_hard: int,
    cm_hard: int = 50,
    at: int = 0,
    policy: str = "default",
    extra: Mapping[str, str] | None = None,
    hard: Mapping[str, Any] | None = None,
    pods_profile: ResourceProfile = PODS_PROFILE,
) -> QuotaState:
    """A managed quota as dynquota leaves it, last changed at T0 + ``at``."""
    annotations = {
        "dynquota.io/policy": policy,
        "dynquota.io/last-upscale.pods": ts(at),
        "dynquota.io/last-change.pods": ts(at),
        "dynquota.io/hard.pods": str(pods_hard),
        "dynquota.io/profile.pods": pods_profile.sizing_key(),
        "dynquota.io/last-upscale.configmaps": ts(at),
        "dynquota.io/last-change.configmaps": ts(at),
        "dynquota.io/hard.configmaps": str(cm_hard),
        "dynquota.io/profile.configmaps": CM_PROFILE.sizing_key(),
        **(extra or {}),
    }
    spec_hard: dict[str, Any] = {PODS: pods_hard, CONFIGMAPS: cm_hard}
    if hard is not None:
        spec_hard = dict(hard)
    return QuotaState(spec_hard, annotations)


def assert_fixed_point(quota: QuotaState | None, now: float, **kwargs: Any) -> None:
    """Deciding again on the same inputs after applying changes nothing."""
    again = run(quota, now, **kwargs)
    assert again.action == "nothing", again


# -- target -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("usage", "buffer", "minimum", "maximum", "expected"),
    [
        (100, 40, 10, 1000, 140),
        (0, 40, 10, 1000, 10),
        (1, 40, 0, 1000, 2),
        (5, 40, 0, 1000, 7),
        (10, 40, 10, 1000, 14),
        (14, 40, 10, 1000, 20),
        (843, 40, 10, 1000, 1000),
        (2000, 40, 10, 1000, 1000),
        (100, 0, 0, 1000, 100),
        (100, 1000, 0, 5000, 1100),
        (3, 33, 0, 100, 4),
        (7, 0, 10, 20, 10),
        (0, 0, 0, 0, 0),
        (10**15, 40, 0, 2**63 - 1, 14 * 10**14),
    ],
)
def test_target(usage: int, buffer: int, minimum: int, maximum: int, expected: int) -> None:
    assert target(usage, ResourceProfile.of(buffer, minimum, maximum, 0, 0)) == expected


@given(
    usage=st.integers(min_value=0, max_value=10**12),
    buffer=st.integers(min_value=0, max_value=1000),
    bounds=st.tuples(st.integers(0, 10**9), st.integers(0, 10**9)).map(sorted),
)
def test_target_properties(usage: int, buffer: int, bounds: list[int]) -> None:
    minimum, maximum = bounds
    value = target(usage, ResourceProfile.of(buffer, minimum, maximum, 0, 0))
    assert minimum <= value <= maximum
    grown = ceil_div(usage * (100 + buffer), 100)
    assert value >= grown or value == maximum
    assert value == max(minimum, grown) or value == maximum
    # integer ceil-div equals the exact ceiling of the rational
    assert grown * 100 >= usage * (100 + buffer) > (grown - 1) * 100


# -- creation ---------------------------------------------------------------------------------


def test_create_at_once_with_stamps() -> None:
    d = run(None, T0 + 0.7, pods=10, configmaps=3)
    assert d.action == "create"
    assert d.hard == {PODS: 14, CONFIGMAPS: 50}
    assert d.set_annotations == {
        "dynquota.io/policy": "default",
        "dynquota.io/last-upscale.pods": "2026-11-30T00:00:00Z",
        "dynquota.io/last-change.pods": "2026-11-30T00:00:00Z",
        "dynquota.io/hard.pods": "14",
        "dynquota.io/profile.pods": "bufferPercent=40,minimum=10,maximum=1000",
        "dynquota.io/last-upscale.configmaps": "2026-11-30T00:00:00Z",
        "dynquota.io/last-change.configmaps": "2026-11-30T00:00:00Z",
        "dynquota.io/hard.configmaps": "50",
        "dynquota.io/profile.configmaps": "bufferPercent=40,minimum=50,maximum=2000",
    }
    assert d.reasons == (
        "create pods 14: usage 10, buffer 40%",
        "create configmaps 50: usage 3, buffer 40%, at minimum 50",
    )
    assert d.changes[0] == Change(
        PODS, "create", None, "14", "create pods 14: usage 10, buffer 40%"
    )
    assert d.events == (
        Event(
            "Normal",
            "Resized",
            "create pods 14: usage 10, buffer 40%; "
            "create configmaps 50: usage 3, buffer 40%, at minimum 50",
        ),
    )
    assert d.requeue_at is None
    assert not d.dry_run
    assert d.merge_patch() == {}
    quota = apply_decision(None, d)
    assert quota == QuotaState(d.hard, d.set_annotations)
    assert_fixed_point(quota, T0 + 1, pods=10, configmaps=3)


def test_recreated_quota_is_a_warning() -> None:
    d = run(None, T0, pods=10, previously_managed=True)
    assert d.action == "create"
    assert d.hard == {PODS: 14, CONFIGMAPS: 50}
    assert d.reasons == (
        "create pods 14: usage 10, buffer 40%",
        "create configmaps 50: usage 0, buffer 40%, at minimum 50",
    )
    assert d.events == (
        Event(
            "Warning",
            "QuotaRecreated",
            "the managed quota was deleted and is re-created (its state is lost, cooldowns "
            "restart; to stop dynquota managing this namespace, label it "
            "dynquota.io/managed=false): create pods 14: usage 10, buffer 40%; create "
            "configmaps 50: usage 0, buffer 40%, at minimum 50",
        ),
    )
    # The write itself is the same as a first creation.
    first = run(None, T0, pods=10)
    assert (first.hard, first.set_annotations) == (d.hard, d.set_annotations)
    assert [e.reason for e in first.events] == ["Resized"]
    # previously_managed is about a missing quota only; nothing is re-created by it otherwise.
    assert run(settled(14), T0 + 10, pods=10, previously_managed=True).events == ()
    assert run(None, T0, pods=10, previously_managed=True, kill_switch=True).action == "nothing"
    # dry run flags it like any Event
    d = run(None, T0, pods=10, previously_managed=True, dry_run=True)
    assert d.events[0].reason == "QuotaRecreated"
    assert d.events[0].message.startswith("(dry run) the managed quota was deleted")


def test_create_ignores_cooldowns_and_start() -> None:
    # Just started, nothing in memory: creation still happens at once.
    d = run(None, T0, pods=500, configmaps=1900, started_at=T0)
    assert d.hard == {PODS: 700, CONFIGMAPS: 2000}
    assert d.reasons[1] == "create configmaps 2000: usage 1900, buffer 40%, at maximum 2000"


# -- upscale ----------------------------------------------------------------------------------


LINE_14 = (
    "pods at its limit (used 14 of hard 14): next automatic raise at 2026-11-30T00:05:00Z; "
    "for more room now: kubectl -n NS annotate resourcequota dynquota dynquota.io/override=max "
    "(every resource to its policy maximum for 168h)."
)


def test_upscale_waits_for_cooldown_then_applies() -> None:
    quota = settled(14, at=0)
    # at its limit during the cooldown: the tenant line is the only write (once)
    d = run(quota, T0 + 100, pods=14)
    assert d.action == "patch"
    assert d.requeue_at == T0 + 300
    assert d.changes == ()
    assert d.set_annotations == {"dynquota.io/message": f"{ts(100)}: {LINE_14}"}
    assert d.events == (Event("Warning", "QuotaAtLimit", LINE_14, cause="pods:cooldown"),)
    assert d.events[0].cause == "pods:cooldown"
    quota = apply_decision(quota, d)
    d = run(quota, T0 + 299.99, pods=14)
    assert (d.action, d.requeue_at) == ("nothing", T0 + 300)  # no write at rest
    d = run(quota, T0 + 300, pods=14)
    assert d.action == "patch"
    assert d.reasons == ("upscale pods 14->20: usage 14, buffer 40%",)
    assert d.hard == {PODS: 20, CONFIGMAPS: 50}
    assert d.set_annotations == {
        "dynquota.io/last-upscale.pods": ts(300),
        "dynquota.io/last-change.pods": ts(300),
        "dynquota.io/hard.pods": "20",
    }
    # the line goes in the same patch as the resize
    assert d.remove_annotations == frozenset({"dynquota.io/message"})
    assert d.requeue_at is None
    assert d.merge_patch() == {
        "metadata": {
            "annotations": {
                "dynquota.io/last-upscale.pods": ts(300),
                "dynquota.io/last-change.pods": ts(300),
                "dynquota.io/hard.pods": "20",
                "dynquota.io/message": None,
            }
        },
        "spec": {"hard": {PODS: "20", CONFIGMAPS: "50"}},
    }
    assert d.events == (Event("Normal", "Resized", "upscale pods 14->20: usage 14, buffer 40%"),)
    assert_fixed_point(apply_decision(quota, d), T0 + 300, pods=14)


def test_upscale_to_maximum_reports_cap() -> None:
    d = run(settled(843), T0 + 300, pods=843)
    assert d.reasons == ("upscale pods 843->1000: usage 843, buffer 40%, at maximum 1000",)


def test_downscale_cooldown_does_not_delay_upscale() -> None:
    # lastChange just now (a downscale), lastUpscale long ago: upscale is allowed.
    quota = settled(
        20,
        extra={"dynquota.io/last-upscale.pods": ts(-10000), "dynquota.io/last-change.pods": ts(0)},
    )
    d = run(quota, T0 + 1, pods=20)
    assert d.reasons == ("upscale pods 20->28: usage 20, buffer 40%",)


# -- downscale --------------------------------------------------------------------------------


def test_downscale_after_window_to_target_of_peak() -> None:
    quota = settled(140, at=0)
    # Usage fell to 5, but the peak over the last hour is 60: T(60) = 84.
    d = run(quota, T0 + 3599, pods=5, peak={PODS: 60})
    assert (d.action, d.requeue_at) == ("nothing", T0 + 3600)
    d = run(quota, T0 + 3600, pods=5, peak={PODS: 60})
    assert d.reasons == ("downscale pods 140->84: peak 60 over 1h, buffer 40%",)
    assert d.set_annotations == {
        "dynquota.io/last-change.pods": ts(3600),
        "dynquota.io/hard.pods": "84",
    }
    after = apply_decision(quota, d)
    assert_fixed_point(after, T0 + 3600, pods=5, peak={PODS: 60})
    # Next downscale only a full window after that change.
    d = run(after, T0 + 7199, pods=5, peak={PODS: 5})
    assert (d.action, d.requeue_at) == ("nothing", T0 + 7200)
    d = run(after, T0 + 7200, pods=5, peak={PODS: 5})
    assert d.reasons == ("downscale pods 84->10: peak 5 over 1h, buffer 40%, at minimum 10",)


def test_no_downscale_before_start_plus_window() -> None:
    quota = settled(140, at=-100000)
    started = T0 - 600  # restarted ten minutes ago: no peak history before that
    d = run(quota, T0, pods=5, started_at=started)
    assert (d.action, d.requeue_at) == ("nothing", T0 + 3000)
    d = run(quota, T0 + 3000, pods=5, started_at=started)
    assert d.reasons == ("downscale pods 140->10: peak 5 over 1h, buffer 40%, at minimum 10",)
    # A fractional start time is rounded up, so a re-check at requeue_at never spins.
    d = run(quota, T0 + 3000, pods=5, started_at=started + 0.5)
    assert (d.action, d.requeue_at) == ("nothing", T0 + 3001)


def test_peak_below_usage_is_ignored() -> None:
    d = run(settled(140), T0 + 3600, pods=60, peak={PODS: 1})
    assert d.reasons == ("downscale pods 140->84: peak 60 over 1h, buffer 40%",)


def test_no_change_when_target_of_peak_equals_hard() -> None:
    assert run(settled(84), T0 + 99999, pods=10, peak={PODS: 60}).action == "nothing"


# -- policy change ----------------------------------------------------------------------------


def test_policy_change_applies_at_once_both_ways() -> None:
    smaller = ResourceProfile.of(20, 5, 50, 300, 3600)
    gov = Governance.managed("default", {PODS: smaller, CONFIGMAPS: CM_PROFILE})
    quota = settled(140, at=0)
    d = run(quota, T0 + 1, pods=30, peak={PODS: 40}, governance=gov)
    assert d.reasons == (
        "policy pods 140->48: policy default, peak 40 over 1h, buffer 20%, minimum 5, maximum 50",
    )
    assert d.set_annotations == {
        "dynquota.io/last-change.pods": ts(1),
        "dynquota.io/hard.pods": "48",
        "dynquota.io/profile.pods": "bufferPercent=20,minimum=5,maximum=50",
    }
    assert_fixed_point(apply_decision(quota, d), T0 + 1, pods=30, peak={PODS: 40}, governance=gov)
    bigger = ResourceProfile.of(100, 200, 5000, 300, 3600)
    gov = Governance.managed("default", {PODS: bigger, CONFIGMAPS: CM_PROFILE})
    d = run(quota, T0 + 1, pods=30, peak={PODS: 40}, governance=gov)
    assert d.reasons == (
        "policy pods 140->200: policy default, peak 40 over 1h, buffer 100%, minimum 200, "
        "maximum 5000",
    )
    assert d.set_annotations["dynquota.io/last-upscale.pods"] == ts(1)


def test_another_policy_governing_is_a_policy_change() -> None:
    gov = Governance.managed("team-a", DEFAULT_PROFILES)
    d = run(settled(140, at=0), T0 + 1, pods=10, configmaps=10, governance=gov)
    assert d.reasons == (
        "policy pods 140->14: policy team-a, peak 10 over 1h, buffer 40%, minimum 10, maximum 1000",
    )
    assert d.set_annotations["dynquota.io/policy"] == "team-a"


def test_policy_change_without_size_change_only_records() -> None:
    slower = ResourceProfile.of(40, 10, 1000, 900, 7200)  # cooldowns only: not a policy change
    gov = Governance.managed("default", {PODS: slower, CONFIGMAPS: CM_PROFILE})
    assert run(settled(14), T0 + 1, pods=10, governance=gov).action == "nothing"
    wider = ResourceProfile.of(40, 10, 2000, 300, 3600)  # new maximum, same size
    gov = Governance.managed("default", {PODS: wider, CONFIGMAPS: CM_PROFILE})
    d = run(settled(14), T0 + 1, pods=10, governance=gov)
    assert d.action == "patch"
    assert d.changes == ()
    assert d.set_annotations == {
        "dynquota.io/profile.pods": "bufferPercent=40,minimum=10,maximum=2000"
    }
    assert d.events == ()


def test_hard_above_maximum_is_lowered_at_once_but_never_below_usage() -> None:
    quota = settled(1500, at=0)  # profile record unchanged, but 1500 > maximum 1000
    d = run(quota, T0 + 1, pods=1200)
    assert d.reasons == (
        "policy pods 1500->1200: policy default, peak 1200 over 1h, buffer 40%, minimum 10, "
        "maximum 1000, held at usage 1200 (never below usage)",
    )
    assert [e.message for e in d.events if e.reason == "UsageAboveMaximum"] == [
        "usage of pods 1200 is above the maximum 1000 of policy default"
    ]
    assert (
        Event(
            "Warning",
            "UsageAboveMaximum",
            "usage of pods 1200 is above the maximum 1000 of policy default",
        )
        in d.events
    )


def test_record_below_minimum_is_never_enforced() -> None:
    """A dynquota.io/hard.pods record of 0 (tampered state; dynquota never writes one below
    the minimum 10) is a policy change sized from usage, not a revert of spec.hard to 0."""
    quota = settled(0, at=0, hard={PODS: parse_quantity("10"), CONFIGMAPS: parse_quantity("50")})
    d = run(quota, T0 + 10, pods=3)
    assert d.hard == {PODS: 10, CONFIGMAPS: 50}
    assert [e.reason for e in d.events] == ["StateRepaired"]
    assert d.events[0].message == (
        "state of pods repaired: dynquota.io/hard.pods malformed ('0': outside 10..1000)"
    )
    assert d.set_annotations["dynquota.io/hard.pods"] == "10"
    assert_fixed_point(apply_decision(quota, d), T0 + 10, pods=3)
    # the same with a record above the maximum
    quota = settled(99999, hard={PODS: parse_quantity("10"), CONFIGMAPS: parse_quantity("50")})
    d = run(quota, T0 + 10, pods=3)
    assert d.hard == {PODS: 10, CONFIGMAPS: 50}
    assert [e.reason for e in d.events] == ["StateRepaired"]


# -- revert of direct edits -------------------------------------------------------------------


def test_direct_edit_is_reverted_without_stamps() -> None:
    quota = settled(14, at=0, hard={PODS: parse_quantity("50"), CONFIGMAPS: parse_quantity("50")})
    d = run(quota, T0 + 10, pods=10)
    assert d.action == "patch"
    assert d.reasons == ("revert pods 50->14: spec.hard was edited directly",)
    assert d.changes[0].kind == "revert"
    assert d.hard == {PODS: 14, CONFIGMAPS: 50}
    assert d.set_annotations == {}
    assert d.events == (edit_warning("pods edited to 50, restored to 14"),)
    assert_fixed_point(apply_decision(quota, d), T0 + 10, pods=10)


def test_removed_key_is_restored() -> None:
    quota = settled(14, hard={CONFIGMAPS: 50})
    d = run(quota, T0 + 10, pods=10)
    assert d.reasons == ("revert pods absent->14: spec.hard was edited directly",)
    assert d.events == (edit_warning("pods removed, restored to 14"),)


def test_edit_plus_due_change_reports_both() -> None:
    quota = settled(14, at=0, hard={PODS: 5, CONFIGMAPS: 50})
    d = run(quota, T0 + 300, pods=14)
    assert d.reasons == (
        "upscale pods 14->20: usage 14, buffer 40% (spec.hard was 5, edited directly)",
    )
    assert d.events == (
        Event("Normal", "Resized", d.reasons[0]),
        edit_warning("pods edited to 5, set to 20 (upscale)"),
    )


def test_several_edits_are_one_warning_with_every_value() -> None:
    quota = settled(
        14,
        hard={PODS: parse_quantity("1k"), CONFIGMAPS: 7, "secrets": parse_quantity("10")},
    )
    d = run(quota, T0 + 10, pods=10)
    assert d.hard == {PODS: 14, CONFIGMAPS: 50}
    assert d.events == (
        edit_warning(
            "pods edited to 1k, restored to 14; configmaps edited to 7, restored to 50; "
            "secrets set to 10, removed (not tracked by dynquota)"
        ),
    )
    # During an override the maximum is what is restored.
    quota = settled(1000, 2000, extra=_granted(0), hard={PODS: 3, CONFIGMAPS: 2000})
    d = run(quota, T0 + 10, pods=10)
    assert d.events == (edit_warning("pods edited to 3, restored to 1000"),)


def test_equality_is_numeric() -> None:
    quota = settled(1000, hard={PODS: parse_quantity("1k"), CONFIGMAPS: parse_quantity("50000m")})
    assert run(quota, T0 + 10, pods=700, configmaps=30).action == "nothing"
    quota = settled(14, hard={PODS: parse_quantity("14500m"), CONFIGMAPS: 50})
    assert run(quota, T0 + 10, pods=10).reasons == (
        "revert pods 14500m->14: spec.hard was edited directly",
    )


def test_foreign_keys_are_nulled() -> None:
    quota = settled(14, hard={PODS: 14, CONFIGMAPS: 50, "secrets": parse_quantity("10")})
    d = run(quota, T0 + 10, pods=10)
    assert d.action == "patch"
    assert d.null_hard == frozenset({"secrets"})
    assert d.reasons == ("revert secrets: not tracked by dynquota, removed from spec.hard",)
    assert d.events == (edit_warning("secrets set to 10, removed (not tracked by dynquota)"),)
    assert d.merge_patch() == {"spec": {"hard": {PODS: "14", CONFIGMAPS: "50", "secrets": None}}}
    after = apply_decision(quota, d)
    assert after is not None
    assert dict(after.hard) == {PODS: 14, CONFIGMAPS: 50}
    assert_fixed_point(after, T0 + 10, pods=10)


# -- adoption and repair of state annotations -------------------------------------------------


def test_quota_without_state_is_adopted_once() -> None:
    quota = QuotaState({PODS: 30, CONFIGMAPS: 60}, {"unrelated": "x"})
    d = run(quota, T0, pods=10, configmaps=10)
    assert d.action == "patch"
    assert d.changes == ()
    assert d.set_annotations == {
        "dynquota.io/policy": "default",
        "dynquota.io/last-upscale.pods": ts(0),
        "dynquota.io/last-change.pods": ts(0),
        "dynquota.io/hard.pods": "30",
        "dynquota.io/profile.pods": "bufferPercent=40,minimum=10,maximum=1000",
        "dynquota.io/last-upscale.configmaps": ts(0),
        "dynquota.io/last-change.configmaps": ts(0),
        "dynquota.io/hard.configmaps": "60",
        "dynquota.io/profile.configmaps": "bufferPercent=40,minimum=50,maximum=2000",
    }
    assert d.notes[:2] == (
        "adopt: dynquota.io/policy missing",
        "adopt pods 30: dynquota.io/hard.pods missing",
    )
    assert d.warnings == ()
    after = apply_decision(quota, d)
    assert after is not None
    assert after.annotations["unrelated"] == "x"
    assert_fixed_point(after, T0, pods=10, configmaps=10)
    # Cooldowns restarted at adoption: no downscale before T0 + 1h.
    assert run(after, T0 + 3599, pods=10, configmaps=10).requeue_at == T0 + 3600


def test_malformed_stamp_is_repaired_and_cooldown_restarts() -> None:
    quota = settled(14, extra={"dynquota.io/last-upscale.pods": "last tuesday"})
    d = run(quota, T0 + 1000, pods=13)
    assert d.action == "patch"
    assert d.changes == ()
    assert d.set_annotations == {"dynquota.io/last-upscale.pods": ts(1000)}
    message = (
        "state of pods repaired: dynquota.io/last-upscale.pods malformed ('last tuesday'); "
        "cooldowns restart now"
    )
    assert d.events == (Event("Warning", "StateRepaired", message),)
    assert d.requeue_at == T0 + 1300


def test_malformed_hard_record_adopts_spec() -> None:
    quota = settled(14, extra={"dynquota.io/hard.pods": "fourteen"})
    d = run(quota, T0 + 10, pods=10)
    assert d.changes == ()
    assert d.set_annotations == {"dynquota.io/hard.pods": "14"}
    assert d.warnings == ("state of pods repaired: dynquota.io/hard.pods malformed ('fourteen')",)


def test_non_canonical_but_equal_stamp_is_not_rewritten() -> None:
    quota = settled(14, extra={"dynquota.io/last-upscale.pods": "2026-11-30T01:00:00+01:00"})
    assert run(quota, T0 + 10, pods=10).action == "nothing"


# -- tenant override --------------------------------------------------------------------------


def test_override_granted() -> None:
    quota = settled(14, 70, extra={"dynquota.io/override": "max"})
    d = run(quota, T0 + 5, pods=10, configmaps=50)
    assert d.action == "patch"
    assert d.hard == {PODS: 1000, CONFIGMAPS: 2000}
    assert d.reasons == (
        f"override-granted pods 14->1000: dynquota.io/override=max until {ts(5 + WEEK)}",
        f"override-granted configmaps 70->2000: dynquota.io/override=max until {ts(5 + WEEK)}",
    )
    assert d.set_annotations == {
        "dynquota.io/last-upscale.pods": ts(5),
        "dynquota.io/last-change.pods": ts(5),
        "dynquota.io/hard.pods": "1000",
        "dynquota.io/last-upscale.configmaps": ts(5),
        "dynquota.io/last-change.configmaps": ts(5),
        "dynquota.io/hard.configmaps": "2000",
        "dynquota.io/override-granted-at": ts(5),
        "dynquota.io/override-expires-at": ts(5 + WEEK),
    }
    assert d.events == (
        Event(
            "Normal",
            "OverrideGranted",
            f"override granted until {ts(5 + WEEK)}: pods 14->1000, configmaps 70->2000",
        ),
    )
    assert d.requeue_at == T0 + 5 + WEEK
    after = apply_decision(quota, d)
    # Active: nothing to do, look again at expiry.
    d = run(after, T0 + 6, pods=10, configmaps=50)
    assert (d.action, d.requeue_at) == ("nothing", T0 + 5 + WEEK)


@pytest.mark.parametrize("value", ["max", "MAX", "Max"])
def test_override_value_is_case_insensitive(value: str) -> None:
    d = run(settled(14, extra={"dynquota.io/override": value}), T0, pods=10)
    assert d.hard[PODS] == 1000


@pytest.mark.parametrize("value", ["MAX", "Max", "mAx"])
def test_override_in_any_case_is_one_request_for_its_whole_life(value: str) -> None:
    """Grant, active (never rejected), expiry (the request removed whatever its case)."""
    quota = settled(14, 70, extra={"dynquota.io/override": value})
    d = run(quota, T0 + 5, pods=10, configmaps=50)
    assert d.hard == {PODS: 1000, CONFIGMAPS: 2000}
    assert [e.reason for e in d.events] == ["OverrideGranted"]
    active = apply_decision(quota, d)
    d = run(active, T0 + 3600, pods=10, configmaps=50)
    assert (d.action, d.events, d.requeue_at) == ("nothing", (), T0 + 5 + WEEK)
    d = run(active, T0 + 5 + WEEK, pods=10, configmaps=10)
    assert d.hard == {PODS: 14, CONFIGMAPS: 50}
    assert "dynquota.io/override" in d.remove_annotations
    assert [e.reason for e in d.events] == ["OverrideExpired"]


@pytest.mark.parametrize("value", ["true", "yes", " max", "max ", "maximum", "", "1000"])
def test_override_other_values_rejected_sizing_continues(value: str) -> None:
    quota = settled(14, extra={"dynquota.io/override": value})
    d = run(quota, T0 + 300, pods=14)
    assert d.reasons == ("upscale pods 14->20: usage 14, buffer 40%",)
    assert d.warnings == (
        f"dynquota.io/override={value!r} is not a valid request (the only value is max); ignored",
    )
    assert d.events[0].reason == "OverrideRejected"
    assert "dynquota.io/override-granted-at" not in d.set_annotations
    assert run(quota, T0 + 10, pods=10).action == "nothing"


def _granted(at: int, expires: int | None = None, value: str | None = "max") -> dict[str, str]:
    extra = {
        "dynquota.io/override-granted-at": ts(at),
        "dynquota.io/override-expires-at": ts(expires if expires is not None else at + WEEK),
    }
    if value is not None:
        extra["dynquota.io/override"] = value
    return extra


def test_override_expiry_sizes_to_target_of_peak() -> None:
    quota = settled(1000, 2000, at=0, extra=_granted(0))
    d = run(quota, T0 + WEEK - 1, pods=10, configmaps=10)
    assert (d.action, d.requeue_at) == ("nothing", T0 + WEEK)
    d = run(quota, T0 + WEEK, pods=10, configmaps=10, peak={PODS: 30, CONFIGMAPS: 10})
    assert d.action == "patch"
    assert d.hard == {PODS: 42, CONFIGMAPS: 50}
    assert d.reasons == (
        f"override-expired pods 1000->42: override expired at {ts(WEEK)}, peak 30 over 1h, "
        "buffer 40%",
        f"override-expired configmaps 2000->50: override expired at {ts(WEEK)}, peak 10 over "
        "6h, buffer 40%, at minimum 50",
    )
    assert d.remove_annotations == frozenset(
        {
            "dynquota.io/override",
            "dynquota.io/override-granted-at",
            "dynquota.io/override-expires-at",
        }
    )
    assert d.set_annotations == {
        "dynquota.io/last-change.pods": ts(WEEK),
        "dynquota.io/hard.pods": "42",
        "dynquota.io/last-change.configmaps": ts(WEEK),
        "dynquota.io/hard.configmaps": "50",
    }
    assert d.events == (
        Event(
            "Normal",
            "OverrideExpired",
            f"override expired at {ts(WEEK)}: " + "; ".join(d.reasons),
        ),
    )
    assert d.merge_patch()["metadata"]["annotations"]["dynquota.io/override"] is None
    after = apply_decision(quota, d)
    assert_fixed_point(after, T0 + WEEK, pods=10, configmaps=10, peak={PODS: 30, CONFIGMAPS: 10})
    # A new request after expiry is granted again.
    assert after is not None
    again = QuotaState(after.hard, {**after.annotations, "dynquota.io/override": "max"})
    d = run(again, T0 + WEEK + 60, pods=10, configmaps=10)
    assert d.hard == {PODS: 1000, CONFIGMAPS: 2000}
    assert d.events[0].reason == "OverrideGranted"
    assert d.set_annotations["dynquota.io/override-expires-at"] == ts(2 * WEEK + 60)


def test_override_removed_early_cancels() -> None:
    quota = settled(1000, 2000, at=0, extra=_granted(0, value=None))
    d = run(quota, T0 + 3600, pods=10, configmaps=10)
    assert d.reasons == (
        "override-expired pods 1000->14: override cancelled (dynquota.io/override removed), "
        "peak 10 over 1h, buffer 40%",
        "override-expired configmaps 2000->50: override cancelled (dynquota.io/override "
        "removed), peak 10 over 6h, buffer 40%, at minimum 50",
    )
    assert d.remove_annotations == frozenset(
        {"dynquota.io/override-granted-at", "dynquota.io/override-expires-at"}
    )
    assert d.events[0].reason == "OverrideExpired"
    assert d.events[0].message.startswith("override cancelled: override-expired pods 1000->14")


def test_override_expiry_beyond_ttl_is_clamped() -> None:
    quota = settled(1000, 2000, at=0, extra=_granted(0, expires=30 * 86400))
    d = run(quota, T0 + 10, pods=10)
    assert d.action == "patch"
    assert d.changes == ()
    assert d.set_annotations == {"dynquota.io/override-expires-at": ts(WEEK)}
    assert d.notes[-1] == (
        f"override expiry {ts(30 * 86400)} is later than granted-at + 168h: clamped to {ts(WEEK)}"
    )
    assert d.requeue_at == T0 + WEEK
    # A clamped expiry already in the past expires at once.
    d = run(quota, T0 + WEEK + 1, pods=10)
    assert d.changes[0].kind == "override-expired"
    # A shorter configured TTL clamps too.
    d = run(settled(1000, 2000, extra=_granted(0)), T0 + 10, pods=10, override_ttl=3600)
    assert d.set_annotations == {"dynquota.io/override-expires-at": ts(3600)}


def test_override_with_garbage_value_stays_active_until_expiry() -> None:
    quota = settled(1000, 2000, at=0, extra=_granted(0, value="please"))
    d = run(quota, T0 + 10, pods=10)
    assert d.action == "nothing"
    assert d.warnings == (
        "dynquota.io/override='please' is not a valid request (the only value is max); ignored",
    )
    d = run(quota, T0 + WEEK, pods=10, configmaps=10)
    assert d.changes[0].kind == "override-expired"
    assert "dynquota.io/override" in d.remove_annotations


# -- malformed override state never pins an override ----------------------------------------

G_KEY = "dynquota.io/override-granted-at"
E_KEY = "dynquota.io/override-expires-at"
R_KEY = "dynquota.io/override"
OVERRIDE_KEYS = frozenset({R_KEY, G_KEY, E_KEY})
CANCELLED = (
    "override-expired pods 1000->14: override cancelled (dynquota.io/override removed), peak 10 "
    "over 1h, buffer 40%",
    "override-expired configmaps 2000->50: override cancelled (dynquota.io/override removed), "
    "peak 10 over 6h, buffer 40%, at minimum 50",
)


def _at_max(extra: Mapping[str, str]) -> QuotaState:
    """A quota held at the maximum by an override, with ``extra`` override annotations."""
    return settled(1000, 2000, at=0, extra=extra)


def test_tester_repro_malformed_granted_at_neither_pins_nor_blocks() -> None:
    """Override active; granted-at set to ``nope``; then expiry in the past; then the request
    removed: each step is handled, none leaves the quota pinned at the maximum."""
    nope = _at_max({R_KEY: "max", G_KEY: "nope", E_KEY: ts(WEEK)})
    # 1. Still requested, expiry valid and ahead: granted-at re-stamped, expiry kept.
    d = run(nope, T0 + 3600, pods=10, configmaps=10)
    assert d.action == "patch"
    assert d.changes == ()
    assert d.set_annotations == {G_KEY: ts(3600)}
    assert d.remove_annotations == frozenset()
    assert d.events == (
        Event(
            "Warning",
            "StateRepaired",
            "override state malformed: dynquota.io/override-granted-at malformed ('nope'); "
            f"repaired: dynquota.io/override-granted-at re-stamped {ts(3600)}; the override "
            f"ends at {ts(WEEK)}",
        ),
    )
    assert d.requeue_at == T0 + WEEK
    repaired = apply_decision(nope, d)
    assert_fixed_point(repaired, T0 + 3600, pods=10, configmaps=10)
    # The repaired override still ends at the original expiry.
    d = run(repaired, T0 + WEEK, pods=10, configmaps=10)
    assert d.hard == {PODS: 14, CONFIGMAPS: 50}
    assert d.events[0].message.startswith(f"override expired at {ts(WEEK)}: ")
    # 2. Expiry set in the past while granted-at is malformed: expires at once.
    past = _at_max({R_KEY: "max", G_KEY: "nope", E_KEY: ts(1800)})
    d = run(past, T0 + 3600, pods=10, configmaps=10)
    assert d.hard == {PODS: 14, CONFIGMAPS: 50}
    assert d.remove_annotations == OVERRIDE_KEYS
    assert d.reasons == (
        f"override-expired pods 1000->14: override expired at {ts(1800)}, peak 10 over 1h, "
        "buffer 40%",
        f"override-expired configmaps 2000->50: override expired at {ts(1800)}, peak 10 over "
        "6h, buffer 40%, at minimum 50",
    )
    assert d.events == (
        Event(
            "Normal", "OverrideExpired", f"override expired at {ts(1800)}: " + "; ".join(d.reasons)
        ),
    )
    assert d.notes[0] == (
        "override state malformed: dynquota.io/override-granted-at malformed ('nope'); the "
        "override annotations are removed"
    )
    assert_fixed_point(apply_decision(past, d), T0 + 3600, pods=10, configmaps=10)
    # 3. Request removed while granted-at is malformed: cancelled.
    removed = _at_max({G_KEY: "nope", E_KEY: ts(WEEK)})
    d = run(removed, T0 + 3600, pods=10, configmaps=10)
    assert d.hard == {PODS: 14, CONFIGMAPS: 50}
    assert d.reasons == CANCELLED
    assert d.remove_annotations == frozenset({G_KEY, E_KEY})
    assert d.events == (
        Event("Normal", "OverrideExpired", "override cancelled: " + "; ".join(CANCELLED)),
    )
    assert_fixed_point(apply_decision(removed, d), T0 + 3600, pods=10, configmaps=10)


@pytest.mark.parametrize(
    ("extra", "problems"),
    [
        ({G_KEY: "nope", E_KEY: ts(WEEK)}, "dynquota.io/override-granted-at malformed ('nope')"),
        (
            {G_KEY: ts(0), E_KEY: "2026-12-07"},
            "dynquota.io/override-expires-at malformed ('2026-12-07')",
        ),
        (
            {G_KEY: "nope", E_KEY: "never"},
            "dynquota.io/override-granted-at malformed ('nope'), "
            "dynquota.io/override-expires-at malformed ('never')",
        ),
        ({G_KEY: ts(0)}, "dynquota.io/override-expires-at missing"),
        ({E_KEY: ts(WEEK)}, "dynquota.io/override-granted-at missing"),
        (
            {G_KEY: "nope"},
            "dynquota.io/override-granted-at malformed ('nope'), "
            "dynquota.io/override-expires-at missing",
        ),
        (
            {G_KEY: ts(3800), E_KEY: ts(3700)},
            f"dynquota.io/override-expires-at '{ts(3700)}' is before "
            f"dynquota.io/override-granted-at '{ts(3800)}'",
        ),
        (
            {G_KEY: ts(7200), E_KEY: ts(WEEK)},
            f"dynquota.io/override-granted-at in the future ('{ts(7200)}')",
        ),
    ],
)
def test_cancel_is_never_blocked_by_malformed_override_state(
    extra: dict[str, str], problems: str
) -> None:
    quota = _at_max(extra)
    d = run(quota, T0 + 3600, pods=10, configmaps=10)
    assert d.action == "patch"
    assert d.hard == {PODS: 14, CONFIGMAPS: 50}
    assert d.reasons == CANCELLED
    assert d.remove_annotations == frozenset(extra)
    assert d.events == (
        Event("Normal", "OverrideExpired", "override cancelled: " + "; ".join(CANCELLED)),
    )
    assert d.notes[0] == (
        f"override state malformed: {problems}; the override annotations are removed"
    )
    assert_fixed_point(apply_decision(quota, d), T0 + 3600, pods=10, configmaps=10)


@pytest.mark.parametrize("value", ["max", "please"])
def test_valid_expiry_in_the_past_expires_whatever_granted_at_holds(value: str) -> None:
    for granted in ("nope", None, ts(4000)):
        extra = {R_KEY: value, E_KEY: ts(1800)}
        if granted is not None:
            extra[G_KEY] = granted
        d = run(_at_max(extra), T0 + 3600, pods=10, configmaps=10)
        assert d.hard == {PODS: 14, CONFIGMAPS: 50}
        assert d.remove_annotations == frozenset(extra)
        assert d.changes[0].reason.startswith(
            f"override-expired pods 1000->14: override expired at {ts(1800)}"
        )
        assert [e.reason for e in d.events] == (
            ["OverrideExpired"] if value == "max" else ["OverrideRejected", "OverrideExpired"]
        )


def test_malformed_expires_at_is_rewritten_from_granted_at() -> None:
    for raw, problem in (
        ("2026-12-07", "dynquota.io/override-expires-at malformed ('2026-12-07')"),
        (None, "dynquota.io/override-expires-at missing"),
    ):
        extra = {R_KEY: "max", G_KEY: ts(0)}
        if raw is not None:
            extra[E_KEY] = raw
        quota = _at_max(extra)
        d = run(quota, T0 + 3600, pods=10, configmaps=10)
        assert d.action == "patch"
        assert d.changes == ()
        assert d.set_annotations == {E_KEY: ts(WEEK)}
        assert d.events == (
            Event(
                "Warning",
                "StateRepaired",
                f"override state malformed: {problem}; repaired: dynquota.io/override-expires-at "
                f"set to {ts(WEEK)} (dynquota.io/override-granted-at + 168h); the override ends "
                f"at {ts(WEEK)}",
            ),
        )
        assert d.requeue_at == T0 + WEEK
        assert_fixed_point(apply_decision(quota, d), T0 + 3600, pods=10, configmaps=10)
        # Past granted-at + TTL it expires, the malformed expiry notwithstanding.
        d = run(quota, T0 + WEEK, pods=10, configmaps=10)
        assert d.hard == {PODS: 14, CONFIGMAPS: 50}
        assert d.events[0] == Event(
            "Normal", "OverrideExpired", f"override expired at {ts(WEEK)}: " + "; ".join(d.reasons)
        )


def test_unprovable_grant_never_extends_beyond_a_grant_made_now() -> None:
    # granted-at malformed, expiry 30 days ahead: clamped to now + TTL, granted-at re-stamped.
    quota = _at_max({R_KEY: "max", G_KEY: "nope", E_KEY: ts(30 * 86400)})
    d = run(quota, T0 + 3600, pods=10, configmaps=10)
    assert d.set_annotations == {G_KEY: ts(3600), E_KEY: ts(3600 + WEEK)}
    assert d.events == (
        Event(
            "Warning",
            "StateRepaired",
            "override state malformed: dynquota.io/override-granted-at malformed ('nope'); "
            f"repaired: dynquota.io/override-granted-at re-stamped {ts(3600)}, "
            f"dynquota.io/override-expires-at set to {ts(3600 + WEEK)} (was '{ts(30 * 86400)}', "
            f"later than a grant made now would end); the override ends at {ts(3600 + WEEK)}",
        ),
    )
    assert d.requeue_at == T0 + 3600 + WEEK
    assert_fixed_point(apply_decision(quota, d), T0 + 3600, pods=10, configmaps=10)
    # Expiry before grant: the grant proves nothing, the earlier expiry stands.
    quota = _at_max({R_KEY: "max", G_KEY: ts(3800), E_KEY: ts(3700)})
    d = run(quota, T0 + 3600, pods=10, configmaps=10)
    assert d.set_annotations == {G_KEY: ts(3600)}
    assert d.events == (
        Event(
            "Warning",
            "StateRepaired",
            f"override state malformed: dynquota.io/override-expires-at '{ts(3700)}' is before "
            f"dynquota.io/override-granted-at '{ts(3800)}'; repaired: "
            f"dynquota.io/override-granted-at re-stamped {ts(3600)}; the override ends at "
            f"{ts(3700)}",
        ),
    )
    assert d.requeue_at == T0 + 3700


def test_unprovable_override_state_with_a_request_is_granted_again() -> None:
    quota = _at_max({R_KEY: "MAX", G_KEY: "nope", E_KEY: "never"})
    d = run(quota, T0 + 3600, pods=10, configmaps=10)
    assert d.action == "patch"
    assert d.changes == ()
    assert d.set_annotations == {G_KEY: ts(3600), E_KEY: ts(3600 + WEEK)}
    assert d.events == (
        Event(
            "Warning",
            "StateRepaired",
            "override state malformed: dynquota.io/override-granted-at malformed ('nope'), "
            "dynquota.io/override-expires-at malformed ('never'); nothing proves when the "
            f"override was granted: granted again until {ts(3600 + WEEK)}",
        ),
        Event("Normal", "OverrideGranted", f"override granted until {ts(3600 + WEEK)}: no change"),
    )
    assert d.requeue_at == T0 + 3600 + WEEK
    assert_fixed_point(apply_decision(quota, d), T0 + 3600, pods=10, configmaps=10)
    # Below the maximum (e.g. after an admin edit of the state), the grant raises it.
    d = run(settled(14, extra={R_KEY: "max", G_KEY: "nope"}), T0 + 3600, pods=10)
    assert d.reasons[0] == (
        f"override-granted pods 14->1000: dynquota.io/override=max until {ts(3600 + WEEK)}"
    )


def test_unprovable_override_state_without_a_valid_request_ends_now() -> None:
    quota = _at_max({R_KEY: "please", G_KEY: "nope"})
    d = run(quota, T0 + 3600, pods=10, configmaps=10)
    ended = (
        "override-expired pods 1000->14: override ended (its state was malformed), peak 10 "
        "over 1h, buffer 40%",
        "override-expired configmaps 2000->50: override ended (its state was malformed), peak "
        "10 over 6h, buffer 40%, at minimum 50",
    )
    assert d.hard == {PODS: 14, CONFIGMAPS: 50}
    assert d.reasons == ended
    assert d.remove_annotations == frozenset({R_KEY, G_KEY})
    assert d.events == (
        Event(
            "Warning",
            "OverrideRejected",
            "dynquota.io/override='please' is not a valid request (the only value is max); ignored",
        ),
        Event(
            "Warning",
            "StateRepaired",
            "override state malformed: dynquota.io/override-granted-at malformed ('nope'), "
            "dynquota.io/override-expires-at missing; nothing proves when the override was "
            "granted and dynquota.io/override is not a valid request: the override ends now",
        ),
        Event(
            "Normal",
            "OverrideExpired",
            "override ended (its state was malformed): " + "; ".join(ended),
        ),
    )
    assert_fixed_point(apply_decision(quota, d), T0 + 3600, pods=10, configmaps=10)


_G_VALUES = st.sampled_from([None, "nope", 0, 3000, 9000, -WEEK])
_E_VALUES = st.sampled_from([None, "never", 1000, 5000, WEEK, 30 * 86400])


@settings(max_examples=300, deadline=None)
@given(
    request=st.sampled_from([None, "max", "MAX", "yes"]),
    granted=_G_VALUES,
    expires=_E_VALUES,
    now=st.integers(0, 2 * WEEK),
)
def test_override_state_never_blocks_nor_outlasts_its_proof(
    request: str | None, granted: int | str | None, expires: int | str | None, now: int
) -> None:
    assume(granted is not None or expires is not None)  # some override state is stored
    extra: dict[str, str] = {}
    for key, value in ((R_KEY, request), (G_KEY, granted), (E_KEY, expires)):
        if isinstance(value, int):
            extra[key] = ts(value)
        elif value is not None:
            extra[key] = value
    quota = _at_max(extra)
    d = run(quota, T0 + now, pods=10, configmaps=10)
    # OverrideRejected is only for a bad request value.
    rejected = [e for e in d.events if e.reason == "OverrideRejected"]
    assert len(rejected) == (1 if request == "yes" else 0)
    after = apply_decision(quota, d)
    assert after is not None
    assert_fixed_point(after, T0 + now, pods=10, configmaps=10)
    left = {k: after.annotations[k] for k in (G_KEY, E_KEY) if k in after.annotations}
    proofs = [T0 + v for v in (expires,) if isinstance(v, int)]
    if isinstance(granted, int) and not (isinstance(expires, int) and expires < granted):
        proofs.append(T0 + granted + WEEK)
    if request is None:
        assert not left, "a cancelled override leaves no state"
    if not left:
        assert R_KEY not in after.annotations
        assert after.hard[PODS] == 14  # sized to T(P) at once
        if request in ("max", "MAX"):  # a valid request ends only at a provable expiry
            assert proofs
            assert min(proofs) <= T0 + now
        return
    assert set(left) == {G_KEY, E_KEY}
    assert after.hard[PODS] == 1000
    end = parse_time(left[E_KEY])
    assert parse_time(left[G_KEY]) <= end
    assert T0 + now < end <= max([*proofs, T0 + now + WEEK])
    if proofs:
        assert end <= min(proofs)  # never beyond what the stored state proves
    else:
        assert request in ("max", "MAX")
        assert end == T0 + now + WEEK  # granted again from now


def test_policy_change_during_override_moves_to_new_maximum() -> None:
    lower = ResourceProfile.of(40, 10, 500, 300, 3600)
    gov = Governance.managed("default", {PODS: lower, CONFIGMAPS: CM_PROFILE})
    quota = settled(1000, 2000, extra=_granted(0))
    d = run(quota, T0 + 10, pods=10, governance=gov)
    assert d.reasons == (
        f"policy pods 1000->500: policy default, override active until {ts(WEEK)}, maximum 500",
    )


# -- kill switch, unmanaged, frozen, excluded ------------------------------------------------


def test_kill_switch_engaged_deletes_and_creates_none() -> None:
    d = run(settled(14), T0, pods=10, kill_switch=True)
    assert d.action == "delete"
    assert d.notes == ("kill switch engaged: managed quota deleted",)
    assert apply_decision(settled(14), d) is None
    d = run(None, T0, pods=10, kill_switch=True)
    assert d.action == "nothing"
    assert d.notes == ("kill switch engaged: no managed quota is created",)


def test_kill_switch_unknown_writes_nothing() -> None:
    for quota in (None, settled(14), settled(14, hard={PODS: 99, CONFIGMAPS: 50})):
        d = run(quota, T0 + 300, pods=14, kill_switch=None)
        assert d.action == "nothing"
        assert d.notes == (
            "kill switch state unknown: nothing is written until it reads true or false",
        )


def test_unmanaged_namespace_loses_its_quota() -> None:
    gov = Governance("unmanaged", "no policy matches this namespace")
    d = run(settled(14), T0, governance=gov)
    assert (d.action, d.notes) == ("delete", ("not managed: no policy matches this namespace",))
    assert run(None, T0, governance=gov).action == "nothing"


def test_excluded_namespace_is_never_touched() -> None:
    gov = Governance("excluded", "namespace is being deleted")
    d = run(settled(14, hard={PODS: 99, CONFIGMAPS: 50}), T0, governance=gov, kill_switch=True)
    assert (d.action, d.notes) == ("nothing", ("not managed: namespace is being deleted",))


def test_frozen_namespace_is_left_as_is() -> None:
    gov = Governance(
        "frozen", "policy broken is invalid and may govern this namespace: x", "broken"
    )
    quota = settled(14, hard={PODS: 99, CONFIGMAPS: 50}, extra={"dynquota.io/override": "max"})
    d = run(quota, T0 + 99999, pods=500, governance=gov)
    assert d.action == "nothing"
    assert d.notes == ("frozen: policy broken is invalid and may govern this namespace: x",)
    assert d.warnings == (
        "dynquota.io/override='max' not granted: the namespace is frozen (policy broken is "
        "invalid and may govern this namespace: x)",
    )
    assert run(None, T0, pods=5, governance=gov).action == "nothing"


def test_override_on_an_unmanaged_quota_is_rejected() -> None:
    assert reject_unmanaged_override("compute", "max") == Event(
        "Warning",
        "OverrideRejected",
        "dynquota.io/override='max' on ResourceQuota compute ignored: dynquota manages only the "
        "ResourceQuota named dynquota labelled app.kubernetes.io/managed-by=dynquota",
    )


# -- dry run ----------------------------------------------------------------------------------


def test_global_dry_run_flags_the_decision() -> None:
    d = run(None, T0, pods=10, dry_run=True)
    assert (d.action, d.dry_run) == ("create", True)
    assert d.events[0].message == (
        "(dry run) create pods 14: usage 10, buffer 40%; "
        "create configmaps 50: usage 0, buffer 40%, at minimum 50"
    )
    assert d.reasons[0] == "create pods 14: usage 10, buffer 40%"
    assert run(settled(14), T0, kill_switch=True, dry_run=True).dry_run


def test_policy_dry_run_flags_the_decision() -> None:
    gov = Governance.managed("trial", DEFAULT_PROFILES, dry_run=True)
    simulated = None
    d = run(simulated, T0, pods=10, governance=gov)
    assert d.dry_run
    simulated = apply_decision(simulated, d)
    d = run(simulated, T0 + 300, pods=14, governance=gov)
    assert d.dry_run
    assert d.reasons == ("upscale pods 14->20: usage 14, buffer 40%",)


# -- simulations ------------------------------------------------------------------------------


def test_runaway_is_throttled_to_one_step_per_cooldown() -> None:
    """Usage pinned at hard for 24 simulated hours: buffer 40, min 10, max 1000, 5 min."""
    quota: QuotaState | None = None
    t = T0
    steps: list[tuple[int, int]] = []
    while t <= T0 + 24 * 3600:
        used = int(quota.hard[PODS]) if quota is not None else 0
        d = run(quota, t, pods=used, started_at=T0)
        for change in d.changes:
            if change.resource == PODS:
                assert change.new is not None
                steps.append((t - T0, int(change.new)))
        quota = apply_decision(quota, d)
        if d.action == "nothing":  # the runaway re-fills at once; otherwise wait for requeue
            t = int(d.requeue_at) if d.requeue_at is not None else t + 600
    assert steps == [
        (0, 10),
        (300, 14),
        (600, 20),
        (900, 28),
        (1200, 40),
        (1500, 56),
        (1800, 79),
        (2100, 111),
        (2400, 156),
        (2700, 219),
        (3000, 307),
        (3300, 430),
        (3600, 602),
        (3900, 843),
        (4200, 1000),
    ]
    assert quota is not None
    assert quota.hard[PODS] == 1000


@dataclass
class _History:
    """Usage samples, to compute the peak in force over a window (test-side reference)."""

    samples: list[tuple[int, int]] = field(default_factory=list)

    def observe(self, now: int, value: int) -> None:
        self.samples.append((now, value))

    def peak(self, now: int, window: int) -> int:
        start = now - window
        in_force = [v for t, v in self.samples if t >= start]
        before = [v for t, v in self.samples if t < start]
        if before:
            in_force.append(before[-1])
        return max(in_force)


profiles = st.builds(
    lambda b, lo, span, up, down: ResourceProfile.of(b, lo, lo + span, up, down),
    st.integers(0, 200),
    st.integers(0, 50),
    st.integers(0, 500),
    st.sampled_from([0, 60, 300, 600]),
    st.sampled_from([0, 600, 3600]),
)


@settings(max_examples=150, deadline=None)
@given(
    pods_profile=profiles,
    restart_ago=st.integers(0, 7200),
    events=st.lists(
        st.tuples(st.integers(0, 1800), st.integers(0, 800), st.integers(0, 800)),
        min_size=1,
        max_size=40,
    ),
)
def test_invariants_over_random_histories(
    pods_profile: ResourceProfile, restart_ago: int, events: list[tuple[int, int, int]]
) -> None:
    gov = Governance.managed("p", {PODS: pods_profile, CONFIGMAPS: CM_PROFILE})
    started = T0 - restart_ago
    history = {PODS: _History(), CONFIGMAPS: _History()}
    quota: QuotaState | None = None
    t = T0
    last_upscale: int | None = None
    last_change: int | None = None
    for dt, pods, configmaps in events:
        t += dt
        history[PODS].observe(t, pods)
        history[CONFIGMAPS].observe(t, configmaps)
        peak = {
            PODS: history[PODS].peak(t, pods_profile.downscale_cooldown),
            CONFIGMAPS: history[CONFIGMAPS].peak(t, CM_PROFILE.downscale_cooldown),
        }
        d = run(
            quota,
            t,
            pods=pods,
            configmaps=configmaps,
            peak=peak,
            governance=gov,
            started_at=started,
        )
        for change in d.changes:
            if change.resource != PODS:
                continue
            assert change.new is not None
            new = int(change.new)
            # never below usage; past the maximum only where dynquota found it (the create)
            ceiling = None if change.old is None else max(int(change.old), pods_profile.maximum)
            assert new >= (pods if ceiling is None else min(pods, ceiling))
            if change.kind == "create":
                last_upscale = last_change = t
            elif (
                change.kind == "upscale" and t - (last_upscale or t) < pods_profile.upscale_cooldown
            ):
                # within the cooldown only a hard below usage is raised, to usage exactly, and
                # the cooldown is not restarted
                assert change.old is not None
                assert int(change.old) < pods
                assert new in (pods, peak[PODS]) or new == ceiling < pods
            elif change.kind == "upscale":
                assert last_upscale is not None
                assert t - last_upscale >= pods_profile.upscale_cooldown
                assert new == max(target(pods, pods_profile), min(peak[PODS], ceiling or 0))
                last_upscale = last_change = t
            elif change.kind == "downscale":
                assert last_change is not None
                assert t - last_change >= pods_profile.downscale_cooldown
                assert t >= started + pods_profile.downscale_cooldown
                assert new == max(target(peak[PODS], pods_profile), min(peak[PODS], ceiling or 0))
                last_change = t
            elif change.kind == "policy":
                # a hard held above the maximum (at usage) follows the peak down at once
                assert change.old is not None
                assert int(change.old) > pods_profile.maximum
                assert new == max(target(peak[PODS], pods_profile), min(peak[PODS], ceiling or 0))
                last_change = t
            else:
                pytest.fail(f"unexpected change {change}")
        quota = apply_decision(quota, d)
        assert quota is not None
        hard = int(quota.hard[PODS])
        assert pods_profile.minimum <= hard <= max(pods_profile.maximum, peak[PODS])
        assert hard >= target(pods, pods_profile) or (
            d.requeue_at is not None and last_upscale is not None
        )
        # Deciding again on the same inputs changes nothing (fixed point).
        again = run(
            quota,
            t,
            pods=pods,
            configmaps=configmaps,
            peak=peak,
            governance=gov,
            started_at=started,
        )
        assert again.action == "nothing"
        assert again.requeue_at == d.requeue_at


@settings(max_examples=100, deadline=None)
@given(
    pods=st.integers(0, 5000),
    hard=st.integers(0, 5000),
    offset=st.integers(0, 10**6),
    kind=st.sampled_from(["frozen", "excluded"]),
    kill_switch=st.sampled_from([True, False, None]),
)
def test_frozen_and_excluded_never_write(
    pods: int, hard: int, offset: int, kind: str, kill_switch: bool | None
) -> None:
    gov = Governance("frozen" if kind == "frozen" else "excluded", "why", "p")
    if kind == "frozen" and kill_switch:
        return  # the kill switch deletes every managed quota, frozen or not
    for quota in (None, settled(hard, hard={PODS: hard, CONFIGMAPS: 1, "x": 2})):
        d = run(quota, T0 + offset, pods=pods, governance=gov, kill_switch=kill_switch)
        assert d.action == "nothing"
        assert apply_decision(quota, d) is quota


@settings(max_examples=100, deadline=None)
@given(pods=st.integers(0, 3000), configmaps=st.integers(0, 3000), offset=st.integers(0, 10**6))
def test_dry_run_decisions_are_always_flagged(pods: int, configmaps: int, offset: int) -> None:
    for quota in (None, settled(14), settled(900, extra={"dynquota.io/override": "max"})):
        d = run(quota, T0 + offset, pods=pods, configmaps=configmaps, dry_run=True)
        assert d.dry_run
        assert all(e.message.startswith("(dry run) ") for e in d.events)


def test_cooldown_stamp_far_in_the_future_is_repaired_not_honoured() -> None:
    """A stamp past the clock-skew allowance would pin H until then: it restarts now."""
    quota = settled(10, extra={"dynquota.io/last-upscale.pods": "2099-01-01T00:00:00Z"})
    d = run(quota, T0 + 1000, pods=9)
    assert d.action == "patch"
    assert d.changes == ()  # T(9) = 13 > 10, but the cooldown restarts now
    assert d.set_annotations == {"dynquota.io/last-upscale.pods": ts(1000)}
    message = (
        "state of pods repaired: dynquota.io/last-upscale.pods malformed: in the future "
        "('2099-01-01T00:00:00Z'); cooldowns restart now"
    )
    assert d.events == (Event("Warning", "StateRepaired", message),)
    assert d.requeue_at == T0 + 1300  # upscale once the 5 min cooldown has passed


def test_cooldown_stamp_within_the_skew_allowance_is_honoured() -> None:
    quota = settled(10, at=1000 + FUTURE_STAMP_ALLOWANCE)  # a replica's clock 5 min ahead
    d = run(quota, T0 + 1000, pods=9)
    assert d.action == "nothing"
    assert d.events == ()
    assert d.requeue_at == T0 + 1000 + FUTURE_STAMP_ALLOWANCE + 300


def test_forged_future_grant_ends_within_one_ttl() -> None:
    """Issue 10 case 6: granted-at and expires-at forged to 2099 (no admission policy) are
    repaired: the override ends one TTL after the repair, never in 2099."""
    forged = "2099-01-01T00:00:00Z"
    quota = _at_max({R_KEY: "max", G_KEY: forged, E_KEY: forged})
    d = run(quota, T0 + 3600, pods=10, configmaps=10)
    assert d.set_annotations == {G_KEY: ts(3600), E_KEY: ts(3600 + WEEK)}
    assert [e.reason for e in d.events] == ["StateRepaired"]
    assert d.events[0].message.startswith(
        f"override state malformed: dynquota.io/override-granted-at in the future ('{forged}')"
    )
    assert d.requeue_at == T0 + 3600 + WEEK
    repaired = apply_decision(quota, d)
    assert_fixed_point(repaired, T0 + 7200, pods=10, configmaps=10)
    d = run(repaired, T0 + 3600 + WEEK, pods=10, configmaps=10)
    assert d.remove_annotations == frozenset({R_KEY, G_KEY, E_KEY})
    assert d.hard == {PODS: 14, CONFIGMAPS: 50}


def test_a_grant_within_the_clock_skew_allowance_is_trusted() -> None:
    quota = _at_max({R_KEY: "max", G_KEY: ts(3700), E_KEY: ts(3700 + WEEK)})
    d = run(quota, T0 + 3600, pods=10, configmaps=10)
    assert d.action == "nothing"
    assert d.requeue_at == T0 + 3700 + WEEK


def test_tenant_text_in_messages_is_bounded() -> None:
    """Issue 10 case 5: a 200 KB override value yields a message of bounded length that still
    tells distinct values apart."""
    messages = []
    for tail in ("a", "b"):
        value = "x" * 200_000 + tail
        d = run(_at_max({R_KEY: value}), T0 + 3600, pods=10, configmaps=10)
        (event,) = [e for e in d.events if e.reason == "OverrideRejected"]
        assert len(event.message) < 400
        assert "(+199745 chars, sha256 " in event.message
        messages.append(event.message)
    assert messages[0] != messages[1]


def test_usage_above_maximum_names_its_cause() -> None:
    quota = _at_max({})
    d = run(quota, T0 + 3600, pods=1200, configmaps=10)
    (event,) = [e for e in d.events if e.reason == "UsageAboveMaximum"]
    assert event.cause == PODS


def test_a_namespace_above_the_maximum_at_install_is_held_at_usage() -> None:
    """v0.2: installing a policy on a namespace already above its maximum never blocks it."""
    d = run(None, T0, pods=1500)
    assert d.action == "create"
    assert d.hard[PODS] == 1500
    assert d.reasons[0] == (
        "create pods 1500: usage 1500, buffer 40%, at maximum 1000, held at usage 1500 "
        "(never below usage)"
    )
    assert "UsageAboveMaximum" in [e.reason for e in d.events]
    quota = apply_decision(None, d)
    # usage grows past it (pods admitted before the quota was enforced): no growth
    d = run(quota, T0 + 600, pods=1500)
    assert d.action == "nothing"
    # a pod is deleted: the hard stays at the peak, so its replacement fits
    d = run(quota, T0 + 700, pods=1499, peak={PODS: 1500})
    assert d.action == "nothing"
    # the window passes with usage lower: it follows the peak down, never below it
    d = run(quota, T0 + 7200, pods=1200, peak={PODS: 1200})
    assert d.hard[PODS] == 1200


def test_usage_above_hard_during_the_cooldown_is_raised_to_usage_at_once() -> None:
    """A burst admitted before the new quota was in force leaves usage above hard: every create
    (a replacement too) is refused until the cooldown ends, so hard goes to usage at once; the
    buffer still waits for the cooldown, which does not restart."""
    quota = settled(14, at=0)
    d = run(quota, T0 + 100, pods=17)
    assert d.action == "patch"
    assert d.hard == {PODS: 17, CONFIGMAPS: 50}
    assert d.reasons == (
        f"upscale pods 14->17: usage 17 above hard 14, raised to usage at once (never below "
        f"usage); the buffer waits for the cooldown until {ts(300)}",
    )
    assert "dynquota.io/last-upscale.pods" not in d.set_annotations
    assert "dynquota.io/last-change.pods" not in d.set_annotations
    assert d.set_annotations["dynquota.io/hard.pods"] == "17"
    assert d.requeue_at == T0 + 300
    quota = apply_decision(quota, d)
    # at usage, still in the cooldown: no further write but the tenant line
    d = run(quota, T0 + 200, pods=17)
    assert d.changes == ()
    # the cooldown ends on its first schedule: the buffer is added
    d = run(quota, T0 + 300, pods=17)
    assert d.reasons == ("upscale pods 17->24: usage 17, buffer 40%",)
