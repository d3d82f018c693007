"""Unit tests for sizing any quota key (issue #12): per-key units and canonical text, keys
sized from status.used, held while it is missing, removed when never counted (KeyNotCounted),
compute keys held without a LimitRange default (NeedsDefaultRequests)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from dynquota.policy import (
    CONFIGMAPS,
    PODS,
    Decision,
    QuotaState,
    apply_decision,
    decide,
    format_time,
    hard_text,
    not_counted_after,
    observed_usage,
    unit_for,
    validate_policy,
)
from dynquota.policy.selection import Governance
from dynquota.policy.state import hard_key, last_change_key, not_counted_key, state_name
from dynquota.quantity import parse_quantity

RECOUNT = " (usage is status.used: the next recount may lower it)"
"""How a raise of a status-driven key says what it rests on (issue 27)."""

T0 = 1795996800  # 2026-11-30T00:00:00Z
STARTED = T0 - 86400


def governance(resources: Mapping[str, Any]) -> Governance:
    info = validate_policy({"metadata": {"name": "keys"}, "spec": {"resources": dict(resources)}})
    assert info.spec is not None, info.reason
    return Governance.managed("keys", info.spec.resources)


GOV = governance(
    {
        "secrets": {"maximum": 100},
        "count/jobs.batch": {"minimum": 2, "maximum": 50, "bufferPercent": 50},
        "requests.cpu": {"minimum": "500m", "maximum": "8"},
        "requests.memory": {"maximum": "64Gi"},
    }
)


def run(
    quota: QuotaState | None,
    now: float,
    usage: Mapping[str, int],
    *,
    gov: Governance = GOV,
    uncounted_since: Mapping[str, float] | None = None,
    missing_defaults: frozenset[str] = frozenset(),
) -> Decision:
    full = {PODS: 0, CONFIGMAPS: 0, **usage}
    return decide(
        governance=gov,
        usage=full,
        peak=full,
        quota=quota,
        kill_switch=False,
        now=now,
        started_at=STARTED,
        uncounted_since=uncounted_since,
        not_counted_after=not_counted_after(10),
        missing_defaults=missing_defaults,
    )


def stored(quota: QuotaState | None, decision: Decision) -> QuotaState:
    """The quota as the apiserver stores it after ``decision``: spec.hard re-parsed from the
    written text (the apiserver canonicalises quantities)."""
    after = apply_decision(quota, decision)
    assert after is not None
    text = {k: str(v) for k, v in after.hard.items()}
    return QuotaState.parse(text, after.annotations)


# -- units ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "text", "units", "canonical"),
    [
        ("requests.cpu", "500m", 500, "500m"),
        ("requests.cpu", "2", 2000, "2"),
        ("cpu", "1.5", 1500, "1500m"),
        ("requests.cpu", "1n", 1, "1m"),  # below a millicore: rounded up
        ("requests.memory", "1.5Gi", 1536 * 2**20, "1536Mi"),
        ("limits.memory", "1G", 10**9, "1G"),
        ("requests.storage", "10Gi", 10 * 2**30, "10Gi"),
        ("hugepages-2Mi", "4Mi", 4 * 2**20, "4Mi"),
        ("secrets", "7", 7, "7"),
        ("count/jobs.batch", "1k", 1000, "1000"),
        ("requests.nvidia.com/gpu", "2", 2, "2"),
    ],
)
def test_units_and_canonical_text(key: str, text: str, units: int, canonical: str) -> None:
    unit = unit_for(key)
    assert unit.parse(text) == units
    assert unit.text(units) == canonical
    # canonical text is what the apiserver stores: parsing and printing it changes nothing
    # (counts are written as plain integers, as pods always were: 1000 is stored as 1k)
    stored_text = str(parse_quantity(unit.text(units)))
    assert stored_text == unit.text(units) or (unit.counted and stored_text == "1k")


def test_granularity_per_family() -> None:
    assert unit_for("requests.cpu").granularity == 100  # 100m
    assert unit_for("requests.memory").granularity == 2**20  # 1Mi
    assert unit_for("requests.storage").granularity == 2**30  # 1Gi
    assert unit_for("hugepages-2Mi").granularity == 2 * 2**20  # one page
    assert unit_for("secrets").granularity == 1


def test_state_annotation_names_are_valid_annotation_keys() -> None:
    assert state_name("pods") == "pods"
    assert hard_key("requests.cpu") == "dynquota.io/hard.requests.cpu"
    assert hard_key("count/jobs.batch") == "dynquota.io/hard.count_jobs.batch"
    long_key = "a-very-long-storage-class-name.storageclass.storage.k8s.io/requests.storage"
    name = last_change_key(long_key).split("/", 1)[1]
    assert name.startswith("last-change.sha-")
    assert len(name) <= 63


def test_observed_usage_reads_status_keys_from_status_only() -> None:
    usage = observed_usage(
        {PODS: 4, CONFIGMAPS: 1},
        {PODS: 3, "secrets": 12, "requests.cpu": 1500},
        [PODS, CONFIGMAPS, "secrets", "requests.cpu", "count/jobs.batch"],
    )
    assert usage == {PODS: 4, CONFIGMAPS: 1, "secrets": 12, "requests.cpu": 1500}


# -- sizing from status.used ------------------------------------------------------------------


def test_new_quota_sizes_every_key_in_its_unit() -> None:
    d = run(None, T0, {})
    assert d.action == "create"
    assert hard_text(d.hard) == {
        PODS: "10",
        CONFIGMAPS: "50",
        "count/jobs.batch": "2",
        "requests.cpu": "500m",
        "requests.memory": "1Gi",
        "secrets": "10",
    }
    assert d.set_annotations["dynquota.io/hard.count_jobs.batch"] == "2"
    assert d.set_annotations["dynquota.io/hard.requests.memory"] == "1Gi"
    assert d.set_annotations["dynquota.io/profile.requests.cpu"] == (
        "bufferPercent=20,minimum=500,maximum=8000"
    )


def test_upscale_rounds_to_granularity_and_never_repatches() -> None:
    quota = stored(None, run(None, T0, {}))
    usage = {"requests.cpu": 1234, "requests.memory": 3 * 2**30, "secrets": 10}
    d = run(quota, T0 + 300, usage)
    assert d.action == "patch"
    # 1234m * 1.2 = 1480.8m, rounded up to 100m; 3Gi * 1.2 = 3686.4Mi, up to 3687Mi;
    # 10 * 1.2 = 12 secrets
    assert d.merge_patch()["spec"]["hard"] == {
        PODS: "10",
        CONFIGMAPS: "50",
        "count/jobs.batch": "2",
        "requests.cpu": "1500m",
        "requests.memory": "3687Mi",
        "secrets": "12",
    }
    assert d.reasons == (
        f"upscale requests.cpu 500m->1500m: usage 1234m, buffer 20%{RECOUNT}",
        f"upscale requests.memory 1Gi->3687Mi: usage 3Gi, buffer 20%{RECOUNT}",
        f"upscale secrets 10->12: usage 10, buffer 20%{RECOUNT}",
    )
    again = run(stored(quota, d), T0 + 301, usage)
    assert again.action == "nothing", again


def test_status_key_missing_from_status_used_is_held() -> None:
    quota = stored(None, run(None, T0, {}))
    usage = {"requests.cpu": 100, "requests.memory": 0, "count/jobs.batch": 0}  # no secrets
    d = run(quota, T0 + 300, usage, uncounted_since={"secrets": T0 + 250})
    assert d.action == "nothing"
    assert d.hard == {}
    assert (
        "usage of secrets unknown (status.used has no secrets): held at 10; removed at "
        f"{format_time(T0 + 250 + 80)} if still not counted"
    ) in d.notes
    assert d.requeue_at == T0 + 250 + 80


def test_key_never_counted_is_removed_with_key_not_counted() -> None:
    quota = stored(None, run(None, T0, {}))
    usage = {"requests.cpu": 100, "requests.memory": 0, "secrets": 0}  # no count/jobs.batch
    d = run(quota, T0 + 80, usage, uncounted_since={"count/jobs.batch": T0})
    assert d.action == "patch"
    assert d.merge_patch()["spec"]["hard"]["count/jobs.batch"] is None
    assert d.set_annotations[not_counted_key("count/jobs.batch")] == format_time(T0 + 80)
    assert [(e.type, e.reason) for e in d.events] == [("Warning", "KeyNotCounted")]
    assert d.events[0].message.startswith(
        "the quota controller has not counted count/jobs.batch for 1m20s since status.hard "
        "showed it (no status.used), and admission refuses every create of a kind whose usage "
        "is unknown: count/jobs.batch removed from spec.hard."
    )
    assert not d.shrinks  # removing a key limits nothing
    after = stored(quota, d)
    again = run(after, T0 + 90, usage)
    assert again.action == "nothing", again  # not added again while the annotation is there
    assert "count/jobs.batch" not in again.hard


def test_compute_key_without_a_default_is_not_added() -> None:
    d = run(None, T0, {}, missing_defaults=frozenset({"requests.cpu", "requests.memory"}))
    assert d.action == "create"
    assert set(d.hard) == {PODS, CONFIGMAPS, "count/jobs.batch", "secrets"}
    warnings = [(e.reason, e.cause) for e in d.events if e.type == "Warning"]
    assert warnings == [
        ("NeedsDefaultRequests", "requests.cpu"),
        ("NeedsDefaultRequests", "requests.memory"),
    ]
    assert next(e.message for e in d.events if e.reason == "NeedsDefaultRequests") == (
        "requests.cpu not added to the quota: with a quota on it the apiserver refuses every "
        "pod whose containers do not all declare a cpu request, and this namespace has no "
        "LimitRange (type Container) with defaultRequest.cpu; add one and dynquota adds the key"
    )


def test_limits_key_needs_a_default_limit() -> None:
    gov = governance({"limits.memory": {"maximum": "8Gi"}})
    d = run(None, T0, {}, gov=gov, missing_defaults=frozenset({"limits.memory"}))
    (warning,) = [e for e in d.events if e.type == "Warning"]
    assert "declare a memory limit" in warning.message
    assert "with default.memory" in warning.message


def test_override_raises_every_key_to_its_maximum() -> None:
    quota = stored(None, run(None, T0, {}))
    quota = QuotaState(quota.hard, {**quota.annotations, "dynquota.io/override": "max"})
    d = run(quota, T0 + 10, {"requests.cpu": 0, "requests.memory": 0, "secrets": 0})
    assert hard_text(d.hard)["requests.cpu"] == "8"
    assert hard_text(d.hard)["requests.memory"] == "64Gi"
    assert hard_text(d.hard)["secrets"] == "100"


def test_plan_table_shows_each_key_in_its_unit() -> None:
    from dynquota.cli.plan_text import format_table
    from dynquota.operator.plan_model import PlanRow

    rows = [
        PlanRow("a", "pods", 4, 4, 10, 10, "nothing", "x"),
        PlanRow("a", "requests.cpu", None, 1234, 1500, 1500, "nothing", "y"),
        PlanRow("a", "requests.memory", None, None, 2**30, None, "nothing", "held"),
    ]
    assert format_table(rows).splitlines()[1:] == [
        "a          pods             4      4            10     10      nothing  x",
        "a          requests.cpu     -      1234m        1500m  1500m   nothing  y",
        "a          requests.memory  -      -            1Gi    -       nothing  held",
    ]


def test_key_dropped_from_the_policy_is_removed_as_a_policy_change() -> None:
    quota = stored(None, run(None, T0, {}))
    gov = governance({"requests.cpu": {"minimum": "500m", "maximum": "8"}})
    d = run(quota, T0 + 10, {"requests.cpu": 0}, gov=gov)
    hard = d.merge_patch()["spec"]["hard"]
    assert hard["secrets"] is None
    assert hard["count/jobs.batch"] is None
    assert "policy secrets 10->absent: policy keys no longer sizes it" in d.reasons
    assert [e.reason for e in d.events] == ["Resized"]  # no ManualEditReverted
    assert "dynquota.io/hard.secrets" in d.remove_annotations


def test_tenant_line_shows_quantities() -> None:
    usage = {"requests.cpu": 500, "requests.memory": 0, "secrets": 0, "count/jobs.batch": 0}
    quota = stored(None, run(None, T0, dict.fromkeys(usage, 0)))
    d = run(quota, T0 + 10, usage)  # cooldown (5m) not over: held at 500m
    (line,) = [e.message for e in d.events if e.reason == "QuotaAtLimit"]
    assert line.startswith(
        "requests.cpu at its limit (used 500m of hard 500m): next automatic raise at "
        f"{format_time(T0 + 300)}; "
    )


def test_a_key_created_before_it_is_counted_is_sized_from_its_first_status_used() -> None:
    """Re-created (kill switch released, quota deleted) before the quota controller counted
    it: written at the minimum with no usage, and its first status.used (50 Secrets already
    there) sizes it to the target at once, not to usage with the buffer a cooldown later."""
    created = run(None, T0, {})
    assert [r for r in created.reasons if "secrets" in r] == [
        "create secrets 10: usage unknown yet, buffer 20%"
    ]
    quota = stored(None, created)
    d = run(quota, T0 + 5, {"secrets": 50, "count/jobs.batch": 0})
    assert d.hard is not None
    assert d.hard["secrets"] == 60  # 50 + 20 %, at once
    assert [r for r in d.reasons if "secrets" in r] == [
        f"upscale secrets 10->60: usage 50, buffer 20%{RECOUNT}"
    ]


# -- roundTo ----------------------------------------------------------------------------------


ROUNDED = governance(
    {
        "secrets": {"minimum": 5, "maximum": 100, "roundTo": 5},
        "count/jobs.batch": {"maximum": 50},  # default 1
        "requests.cpu": {"minimum": "500m", "maximum": "8", "roundTo": "250m"},
        "requests.memory": {"maximum": "64Gi", "roundTo": "512Mi"},
        "requests.storage": {"minimum": "1Gi", "maximum": "1Ti", "roundTo": "100Gi"},
    }
)


def test_round_to_sets_the_step_of_each_key() -> None:
    profiles = ROUNDED.profiles
    assert profiles["requests.cpu"].round_to == 250  # millicores
    assert profiles["requests.memory"].round_to == 512 * 2**20  # bytes
    assert profiles["requests.storage"].round_to == 100 * 2**30
    assert profiles["secrets"].round_to == 5
    assert profiles["count/jobs.batch"].round_to is None  # the key's default granularity
    quota = stored(None, run(None, T0, {}, gov=ROUNDED))
    usage = {
        "requests.cpu": 1234,
        "requests.memory": 3 * 2**30,
        "requests.storage": 150 * 2**30,
        "secrets": 11,
        "count/jobs.batch": 11,
    }
    d = run(quota, T0 + 300, usage, gov=ROUNDED)
    # cpu 1234m * 1.2 = 1480.8m -> 1500m (250m steps; 100m would give 1500m too: see 1600m
    # below); memory 3Gi * 1.2 = 3686.4Mi -> 4Gi (512Mi steps); storage 150Gi * 1.2 = 180Gi
    # -> 200Gi; secrets 11 * 1.2 = 13.2 -> 15; jobs 11 * 1.2 = 13.2 -> 14 (steps of 1)
    assert d.merge_patch()["spec"]["hard"] == {
        PODS: "10",
        CONFIGMAPS: "50",
        "count/jobs.batch": "14",
        "requests.cpu": "1500m",
        "requests.memory": "4Gi",
        "requests.storage": "200Gi",
        "secrets": "15",
    }
    again = run(stored(quota, d), T0 + 301, usage, gov=ROUNDED)
    assert again.action == "nothing", again  # canonical text: no re-patch
    more = run(stored(quota, d), T0 + 600, {**usage, "requests.cpu": 1300}, gov=ROUNDED)
    # 1300m * 1.2 = 1560m: 1750m in 250m steps (the default 100m would give 1600m)
    assert more.merge_patch()["spec"]["hard"]["requests.cpu"] == "1750m"


def test_round_to_is_part_of_the_recorded_profile_and_a_change_resizes_at_once() -> None:
    d = run(None, T0, {}, gov=ROUNDED)
    assert d.set_annotations["dynquota.io/profile.requests.cpu"] == (
        "bufferPercent=20,minimum=500,maximum=8000,roundTo=250"
    )
    # no roundTo: the recorded text is unchanged from before roundTo existed
    assert d.set_annotations["dynquota.io/profile.count_jobs.batch"] == (
        "bufferPercent=20,minimum=10,maximum=50"
    )
    quota = stored(None, d)
    usage = {"requests.cpu": 1300, "requests.memory": 0, "requests.storage": 0, "secrets": 0}
    usage["count/jobs.batch"] = 0
    first = run(quota, T0 + 300, usage, gov=ROUNDED)
    quota = stored(quota, first)
    assert str(quota.hard["requests.cpu"]) == "1750m"
    coarser = governance(
        {**{k: p.to_crd(k) for k, p in ROUNDED.profiles.items() if k not in (PODS, CONFIGMAPS)},
         "requests.cpu": {"minimum": "500m", "maximum": "8", "roundTo": "1"}}
    )  # fmt: skip
    d = run(quota, T0 + 301, usage, gov=coarser)  # within the upscale cooldown: a policy change
    assert d.merge_patch()["spec"]["hard"]["requests.cpu"] == "2"
    assert d.reasons[0].startswith("policy requests.cpu 1750m->2: ")


@pytest.mark.parametrize(
    ("resources", "error"),
    [
        ({"secrets": {"maximum": 10, "roundTo": "2.5"}}, "secrets: roundTo must be a whole number"),
        ({"secrets": {"maximum": 10, "roundTo": 0}}, "roundTo must be between 1 and"),
        ({"pods": {"roundTo": 2.5}}, "roundTo: must be an integer"),
        (
            {"requests.nvidia.com/gpu": {"maximum": 4, "roundTo": "500m"}},
            "requests.nvidia.com/gpu: roundTo must be a whole number, not '500m'",
        ),
        (
            {
                "gold.storageclass.storage.k8s.io/requests.storage": {
                    "maximum": "1Ti",
                    "roundTo": "0.5",
                }
            },
            "gold.storageclass.storage.k8s.io/requests.storage: roundTo must be a whole number",
        ),
        (
            {"requests.cpu": {"maximum": "4", "roundTo": "0.5m"}},
            "requests.cpu: roundTo must be a whole number of millicores, not '0.5m'",
        ),
        (
            {"requests.memory": {"maximum": "4Gi", "roundTo": "1.5"}},
            "requests.memory: roundTo must be a whole number of bytes, not '1.5'",
        ),
        ({"requests.memory": {"maximum": "4Gi", "roundTo": "0"}}, "roundTo must be above 0"),
        ({"requests.cpu": {"maximum": "4", "roundTo": "-1"}}, "must not be negative"),
        (
            {"pods": {"roundTo": 1001}},
            "pods: roundTo (1001) must not exceed maximum (1000): every hard would round up",
        ),
        (
            {"requests.cpu": {"maximum": "8", "roundTo": "64Mi"}},
            "requests.cpu: roundTo (67108864) must not exceed maximum (8): every hard would "
            "round up to the maximum",
        ),
    ],
)
def test_a_fractional_or_non_positive_round_to_is_refused(
    resources: dict[str, Any], error: str
) -> None:
    info = validate_policy({"metadata": {"name": "bad"}, "spec": {"resources": resources}})
    assert info.spec is None
    assert info.reason is not None
    assert error in info.reason, info.reason


# -- minimumHeadroom --------------------------------------------------------------------------


ROOMY = governance(
    {
        "requests.cpu": {"minimum": "200m", "maximum": "4", "bufferPercent": 50,
                         "minimumHeadroom": "1"},
        "requests.storage": {"maximum": "1Ti", "minimumHeadroom": "100Gi"},
        "secrets": {"maximum": 100, "minimumHeadroom": 10},
    }
)  # fmt: skip


def test_minimum_headroom_leaves_room_for_the_largest_create() -> None:
    """A pod asking for 1 cpu fits from the start (hard 0 + 1 = 1, not the minimum 200m) and
    after each step (usage + 1 where the buffer gives less); the buffer wins once it is more."""
    profiles = ROOMY.profiles
    assert profiles["requests.cpu"].minimum_headroom == 1000  # millicores
    assert profiles["requests.storage"].minimum_headroom == 100 * 2**30
    assert profiles["secrets"].minimum_headroom == 10
    d = run(None, T0, {"requests.cpu": 0, "requests.storage": 0, "secrets": 0}, gov=ROOMY)
    assert d.action == "create"
    assert hard_text(d.hard) == {
        PODS: "10",
        CONFIGMAPS: "50",
        "requests.cpu": "1",  # 0 + 1, above the minimum 200m
        "requests.storage": "100Gi",  # 0 + 100Gi, above the storage minimum
        "secrets": "10",  # 0 + 10
    }
    # the target came from the headroom, not the minimum: no "at minimum" suffix
    assert d.reasons[2:] == (
        "create requests.cpu 1: usage 0, buffer 50%, minimum headroom 1",
        "create requests.storage 100Gi: usage 0, buffer 20%, minimum headroom 100Gi",
        "create secrets 10: usage 0, buffer 20%, minimum headroom 10",
    )
    quota = stored(None, d)
    usage = {"requests.cpu": 1000, "requests.storage": 100 * 2**30, "secrets": 10}
    up = run(quota, T0 + 300, usage, gov=ROOMY)
    # cpu 1000m * 1.5 = 1500m < 1000m + 1 = 2; storage 100Gi * 1.2 = 120Gi < 200Gi;
    # secrets 10 * 1.2 = 12 < 20
    assert up.merge_patch()["spec"]["hard"] == {
        PODS: "10",
        CONFIGMAPS: "50",
        "requests.cpu": "2",
        "requests.storage": "200Gi",
        "secrets": "20",
    }
    assert (
        f"upscale requests.cpu 1->2: usage 1, buffer 50%, minimum headroom 1{RECOUNT}" in up.reasons
    )
    quota = stored(quota, up)
    usage = {"requests.cpu": 3000, "requests.storage": 100 * 2**30, "secrets": 60}
    later = run(quota, T0 + 600, usage, gov=ROOMY)
    # cpu 3 * 1.5 = 4.5 -> the maximum 4; secrets 60 * 1.2 = 72 > 60 + 10: the buffer wins
    hard = later.merge_patch()["spec"]["hard"]
    assert (hard["requests.cpu"], hard["requests.storage"], hard["secrets"]) == ("4", "200Gi", "72")


def test_minimum_headroom_is_part_of_the_recorded_profile() -> None:
    d = run(None, T0, {"requests.cpu": 0, "requests.storage": 0, "secrets": 0}, gov=ROOMY)
    assert d.set_annotations["dynquota.io/profile.secrets"] == (
        "bufferPercent=20,minimum=10,maximum=100,minimumHeadroom=10"
    )
    assert ROOMY.profiles["requests.cpu"].to_crd("requests.cpu")["minimumHeadroom"] == "1"
    assert ROOMY.profiles["secrets"].to_crd("secrets")["minimumHeadroom"] == 10
    assert "minimumHeadroom" not in GOV.profiles["secrets"].to_crd("secrets")


@pytest.mark.parametrize(
    ("resources", "error"),
    [
        (
            {"secrets": {"maximum": 10, "minimumHeadroom": "0.5"}},
            "secrets: minimumHeadroom must be a whole number",
        ),
        ({"secrets": {"maximum": 10, "minimumHeadroom": -1}}, "must be between 0 and"),
        ({"requests.cpu": {"maximum": "4", "minimumHeadroom": "-1"}}, "must not be negative"),
        (
            {"requests.cpu": {"maximum": "4", "minimumHeadroom": "x"}},
            "requests.cpu: minimumHeadroom",
        ),
    ],
)
def test_a_bad_minimum_headroom_is_refused(resources: dict[str, Any], error: str) -> None:
    info = validate_policy({"metadata": {"name": "bad"}, "spec": {"resources": resources}})
    assert info.spec is None
    assert info.reason is not None
    assert error in info.reason, info.reason


def test_a_minimum_headroom_above_the_maximum_gives_the_maximum() -> None:
    """Not refused (the CRD could not check it against a default maximum): the target is
    clamped to the maximum like any other, and the reason says so."""
    gov = governance(
        {"requests.memory": {"maximum": "4Gi", "minimumHeadroom": "8Gi"}, "pods": {"maximum": 50,
         "minimumHeadroom": 51}}
    )  # fmt: skip
    d = run(None, T0, {"requests.memory": 0}, gov=gov)
    assert hard_text(d.hard)["requests.memory"] == "4Gi"
    assert hard_text(d.hard)[PODS] == "50"
    assert (
        "create requests.memory 4Gi: usage 0, buffer 20%, minimum headroom 8Gi, at maximum 4Gi"
        in d.reasons
    )


def test_a_fraction_of_a_unit_of_minimum_headroom_is_rounded_up() -> None:
    gov = governance(
        {"requests.cpu": {"maximum": "4", "minimumHeadroom": "0.5m"},
         "requests.memory": {"maximum": "4Gi", "minimumHeadroom": "1.5"}}
    )  # fmt: skip
    assert gov.profiles["requests.cpu"].minimum_headroom == 1  # millicores
    assert gov.profiles["requests.memory"].minimum_headroom == 2  # bytes


def test_a_round_to_of_pods_up_to_their_maximum_is_valid() -> None:
    for resources in ({"pods": {"roundTo": 1000}}, {"pods": {"roundTo": 1001, "maximum": 2000}}):
        info = validate_policy({"metadata": {"name": "ok"}, "spec": {"resources": resources}})
        assert info.spec is not None, info.reason
