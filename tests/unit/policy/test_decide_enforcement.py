"""decide(): usage that got past a quota before it was enforced (issue 27, part 4).

Before the quota controller copies ``spec.hard`` into ``status.hard`` creates are admitted
uncharged. Such usage is not followed while the key is unenforced, and once it is enforced it
lifts ``hard`` at once to at most ``max(hard, maximum)``; only usage dynquota found when it first
sized the key (the create, or a quota without its record) lifts ``hard`` past the maximum.
"""

from __future__ import annotations

from collections.abc import Mapping

from dynquota.names import EventReason
from dynquota.policy import CONFIGMAPS, PODS, Decision, QuotaState, apply_decision, decide
from dynquota.policy.durations import rough_duration
from dynquota.policy.keyrules import NEWBORN
from dynquota.policy.profiles import ResourceProfile
from dynquota.policy.selection import Governance

T0 = 1795996800  # 2026-11-30T00:00:00Z
# the soak's runaway: minimum 10, maximum 120, cooldowns 5 min up and 1 h down
RUNAWAY = ResourceProfile.of(40, 10, 120, 300, 3600)
GOV = Governance.managed("runaway", {PODS: RUNAWAY})


def _decide(
    quota: QuotaState | None,
    now: int,
    pods: int,
    unenforced: frozenset[str] = frozenset(),
    peak: Mapping[str, int] | None = None,
) -> Decision:
    return decide(
        governance=GOV,
        usage={PODS: pods, CONFIGMAPS: 0},
        peak=peak if peak is not None else {PODS: pods},
        quota=quota,
        kill_switch=False,
        now=now,
        started_at=T0 - 7200,
        unenforced=unenforced,
    )


def _created() -> QuotaState:
    """The quota as dynquota creates it for an empty namespace at T0: pods 10."""
    d = _decide(None, T0, 0)
    assert d.action == "create"
    assert d.hard == {PODS: 10}
    quota = apply_decision(None, d)
    assert quota is not None
    return quota


def test_usage_admitted_while_unenforced_is_held_without_a_write() -> None:
    quota = _created()
    for t, pods in ((1, 21), (2, 57), (3, 158), (4, 201)):
        d = _decide(quota, T0 + t, pods, unenforced=frozenset({PODS}))
        assert d.action == "nothing", d.reasons
        assert d.changes == ()
        assert (
            f"pods: usage {pods} above hard 10 while the quota controller has not enforced it "
            "(status.hard lacks it): held"
        ) in d.notes
        # the Warning says the runaway is past the maximum; nothing is raised
        reasons = [e.reason for e in d.events]
        assert reasons.count(EventReason.USAGE_ABOVE_MAXIMUM) == (1 if pods > 120 else 0)


def test_once_enforced_it_is_raised_at_once_to_the_maximum_not_to_usage() -> None:
    quota = _created()
    d = _decide(quota, T0 + 5, 201)
    assert d.action == "patch"
    assert d.hard == {PODS: 120}
    assert d.reasons == (
        "upscale pods 10->120: usage 201 above hard 10, raised at once to the maximum 120 "
        "(usage that got past a quota not yet enforced is not followed above the maximum)",
    )
    # a repair: the cooldown keeps running
    assert "dynquota.io/last-upscale.pods" not in d.set_annotations
    assert [e.reason for e in d.events if e.type == "Warning"] == [
        EventReason.USAGE_ABOVE_MAXIMUM,
        EventReason.QUOTA_AT_LIMIT,
    ]
    quota = apply_decision(quota, d)
    assert quota is not None
    # the fixed point: more usage never lifts it, the cooldown's end neither
    for t, pods in ((6, 203), (400, 203), (4000, 150)):
        d = _decide(quota, T0 + t, pods, peak={PODS: 203})
        assert d.changes == (), d.reasons
    # usage falls under the maximum: sized from the peak as ever once the window passes
    d = _decide(quota, T0 + 3600 + 10, 50)
    assert d.hard == {PODS: 70}


def test_below_the_maximum_it_is_raised_to_usage_at_once_as_before() -> None:
    quota = _created()
    d = _decide(quota, T0 + 5, 57)
    assert d.hard == {PODS: 57}
    assert d.reasons[0].startswith("upscale pods 10->57: usage 57 above hard 10, raised to usage")


def test_usage_found_at_the_create_lifts_hard_past_the_maximum() -> None:
    # adoption: a namespace that already holds 200 pods when a policy first selects it
    d = _decide(None, T0, 200)
    assert d.hard == {PODS: 200}
    assert EventReason.USAGE_ABOVE_MAXIMUM in [e.reason for e in d.events]
    quota = apply_decision(None, d)
    assert quota is not None
    # held there, not grown further by later usage
    d = _decide(quota, T0 + 10, 205)
    assert d.changes == ()


def test_a_quota_without_dynquota_s_record_is_adopted_with_its_usage() -> None:
    foreign = QuotaState({PODS: 10}, {})
    d = _decide(foreign, T0, 200)
    assert d.hard == {PODS: 200}


def test_a_policy_change_is_bounded_by_the_ceiling_too() -> None:
    quota = _created()
    bigger = Governance.managed("runaway", {PODS: ResourceProfile.of(40, 10, 150, 300, 3600)})
    d = decide(
        governance=bigger,
        usage={PODS: 201, CONFIGMAPS: 0},
        peak={PODS: 201},
        quota=quota,
        kill_switch=False,
        now=T0 + 5,
        started_at=T0 - 7200,
    )
    assert d.hard == {PODS: 150}
    assert d.reasons == (
        "policy pods 10->150: policy runaway, peak 201 over 1h, buffer 40%, minimum 10, "
        "maximum 150",
    )


def test_a_newborn_namespace_s_usage_is_not_adopted_past_the_maximum() -> None:
    def create(now: float, started_at: float, born_at: float | None) -> Decision:
        """The quota's create in a namespace holding 200 pods (maximum 120)."""
        return decide(
            governance=GOV,
            usage={PODS: 200, CONFIGMAPS: 0},
            peak={PODS: 200},
            quota=None,
            kill_switch=False,
            now=now,
            started_at=started_at,
            born_at=born_at,
        )

    # a runaway that beat the operator's create in a namespace created 3 s ago
    d = create(T0 + 3, T0 - 7200, T0)
    assert d.action == "create"
    assert d.hard == {PODS: 120}
    # a namespace older than NEWBORN holding it is adopted at usage
    assert create(T0 + NEWBORN, T0 - 7200, T0).hard == {PODS: 200}
    # found when the operator started (an install, a restart: born_at None): adopted at usage
    assert create(T0 + 3, T0 + 1, None).hard == {PODS: 200}


def test_objects_admitted_uncharged_get_no_room_past_the_ceiling() -> None:
    """Enforced at hard 2 with 4 pods, status.used 3 (one admitted between the quota
    controller's count and its status write): quota admission admits hard - status.used more,
    so hard 4 would let a fifth pod past the maximum of 4."""
    small = Governance.managed("runaway", {PODS: ResourceProfile.of(40, 2, 4, 300, 3600)})
    created = decide(
        governance=small,
        usage={PODS: 0, CONFIGMAPS: 0},
        peak={PODS: 0},
        quota=None,
        kill_switch=False,
        now=T0,
        started_at=T0 - 7200,
    )
    quota = apply_decision(None, created)
    assert quota is not None

    def step(pods: int, uncharged: int) -> Decision:
        return decide(
            governance=small,
            usage={PODS: pods, CONFIGMAPS: 0},
            peak={PODS: pods},
            quota=quota,
            kill_switch=False,
            now=T0 + 2,
            started_at=T0 - 7200,
            uncharged={PODS: uncharged} if uncharged else None,
        )

    d = step(4, 1)
    assert d.hard == {PODS: 3}
    assert d.reasons[0].endswith(
        ", 3 until the quota controller recounts 1 object(s) admitted uncharged"
    )
    quota = apply_decision(quota, d)
    # the recount: status.used 4, nothing uncharged: raised to the maximum
    assert step(4, 0).hard == {PODS: 4}
    # below the ceiling too: a raise leaves the uncharged no room (3 pods, status.used 2)
    assert step(3, 1).changes == ()


def test_the_tenant_line_at_the_limit_says_when_the_maximum_is_reached() -> None:
    quota = _created()
    d = decide(
        governance=GOV,
        usage={PODS: 10, CONFIGMAPS: 0},
        peak={PODS: 10},
        quota=quota,
        kill_switch=False,
        now=T0 + 10,
        started_at=T0 - 7200,
        exhaustion={PODS: 640.0},
    )
    line = d.set_annotations["dynquota.io/message"]
    assert (
        "pods at its limit (used 10 of hard 10): next automatic raise at 2026-11-30T00:05:00Z; "
        "at its recent rate it reaches the maximum 120 in about 10m;"
    ) in line


def test_rough_durations_change_in_few_steps() -> None:
    texts = [rough_duration(s) for s in (10, 50, 100, 700, 4000, 30000, 200000, 400000)]
    assert texts == [
        "under a minute",
        "about 1m",
        "about 2m",
        "about 10m",
        "about 1h",
        "about 6h",
        "about 48h",
        "over 48h",
    ]
    # a whole day of forecasts counting down gives 13 distinct texts
    assert len({rough_duration(s) for s in range(0, 86400, 10)}) == 13
