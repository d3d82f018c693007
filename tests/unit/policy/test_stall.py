"""The stalled quota controller's signals (issue 27, part 2): exact bounds, resets, messages."""

from __future__ import annotations

from dynquota.policy import CONFIGMAPS, PODS, Decision, QuotaState, apply_decision, decide
from dynquota.policy.profiles import ResourceProfile
from dynquota.policy.selection import Governance
from dynquota.policy.stall import COPY_AFTER, StallSignals

T0 = 1795996800.0


def test_a_copy_pending_past_its_bound_is_a_stall_and_clears_with_the_copy() -> None:
    s = StallSignals(copy_after=30, recount_after=40)
    s.observe_copy("a", True, T0)
    s.observe_copy("a", True, T0 + 10)  # a second raise keeps the first one's since
    s.observe_copy("b", True, T0 + 5)
    assert s.stalls(T0 + 29.9) == []
    (stall,) = s.stalls(T0 + 30)
    assert (stall.signal, stall.reason, stall.since, stall.namespaces) == (
        "copy",
        "SpecNotCopied",
        T0,
        ("a",),
    )
    assert stall.message.startswith(
        "spec.hard of 1 managed quota(s) not copied into status.hard for 30 s or more (e.g. a)"
    )
    assert s.stalls(T0 + 35)[0].namespaces == ("a", "b")
    s.observe_copy("a", False, T0 + 36)
    s.forget("b")
    assert s.stalls(T0 + 100) == []


def test_usage_not_recounted_needs_an_excess_that_never_decreases() -> None:
    s = StallSignals(copy_after=30, recount_after=40)
    s.observe_usage("a", {PODS: 3}, {PODS: 5}, T0)  # two deletions not replenished
    s.observe_usage("a", {PODS: 4}, {PODS: 6}, T0 + 20)  # a create charged: still stale
    assert s.stalls(T0 + 39) == []
    (stall,) = s.stalls(T0 + 40)
    assert (stall.signal, stall.reason, stall.namespaces) == (
        "recount",
        "UsageNotRecounted",
        ("a",),
    )
    # a decrease is a recount: the evidence starts again
    s.observe_usage("a", {PODS: 3}, {PODS: 4}, T0 + 50)
    assert s.stalls(T0 + 89) == []
    assert len(s.stalls(T0 + 90)) == 1
    # equal again: gone
    s.observe_usage("a", {PODS: 4}, {PODS: 4}, T0 + 91)
    assert s.stalls(T0 + 200) == []


def test_objects_admitted_uncharged_and_unknown_usage_are_no_signal() -> None:
    s = StallSignals(copy_after=30, recount_after=40)
    s.observe_usage("a", {PODS: 9}, {PODS: 4}, T0)  # tally above status.used
    s.observe_usage("a", {CONFIGMAPS: 3}, {}, T0)  # not counted yet
    assert s.stalls(T0 + 1000) == []


def test_many_namespaces_are_named_three_at_most() -> None:
    s = StallSignals(copy_after=COPY_AFTER, recount_after=40)
    for i in range(5):
        s.observe_copy(f"ns-{i}", True, T0)
    (stall,) = s.stalls(T0 + COPY_AFTER)
    assert "5 managed quota(s)" in stall.message
    assert "(e.g. ns-0, ns-1, ns-2, ...)" in stall.message


def test_a_stalled_controller_holds_raises_resting_on_status_used_only() -> None:
    cpu = ResourceProfile.of(40, 1000, 8000, 0, 3600)
    pods = ResourceProfile.of(40, 10, 100, 0, 3600)
    gov = Governance.managed("p", {PODS: pods, "requests.cpu": cpu})

    def run(quota: QuotaState | None, stalled: bool, now: float) -> Decision:
        return decide(
            governance=gov,
            usage={PODS: 20, CONFIGMAPS: 0, "requests.cpu": 3000},
            peak={PODS: 20, "requests.cpu": 3000},
            quota=quota,
            kill_switch=False,
            now=now,
            started_at=T0 - 7200,
            stalled=stalled,
        )

    created = decide(
        governance=gov,
        usage={PODS: 1, CONFIGMAPS: 0, "requests.cpu": 1000},
        peak={},
        quota=None,
        kill_switch=False,
        now=T0,
        started_at=T0 - 7200,
    )
    quota = apply_decision(None, created)
    assert quota is not None
    d = run(quota, True, T0 + 60)
    assert d.hard[PODS] == 28  # the tally: sized as ever
    assert d.hard["requests.cpu"] == 1400  # status.used 3 CPUs: held
    assert (
        "requests.cpu: raise held at 1400m (usage 3 is status.used, and the quota controller "
        "is stalled: QuotaControllerStalled)"
    ) in d.notes
    assert run(quota, False, T0 + 60).hard["requests.cpu"] == 4200
