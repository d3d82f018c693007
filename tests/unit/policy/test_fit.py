"""The raise schedule of ``kubectl dynquota fit`` (dynquota.policy.fit): fill, raise at
max(now, nextRaiseAfter) then every upscaleCooldown to the policy target, capped at the
maximum and a budget's room; what holds the rest back."""

from __future__ import annotations

from dynquota.policy.fit import MAX_STEPS, Blocker, Group, Growth, Limit, Step, schedule
from dynquota.policy.profiles import ResourceProfile

NOW = 1_800_000_000
PODS = ResourceProfile.of(40, 10, 100, 300, 3600)


def pods(hard: int, used: int, growth: Growth | None, per: tuple[int, ...] = (1,)) -> Limit:
    return Limit("dynquota", "pods", hard, used, per, growth)


def test_what_fits_under_the_hard_fits_now_and_nothing_is_scheduled() -> None:
    answer = schedule([Group("Deployment/web", 5)], [pods(10, 3, None)], NOW)
    assert answer.now == (5,)
    assert answer.steps == ()
    assert answer.never == (0,)
    assert answer.blockers == ((),)
    assert answer.fits_now == 5
    assert answer.last_at is None


def test_a_fixed_quota_holds_the_rest_back_for_good() -> None:
    answer = schedule([Group("Deployment/web", 12)], [pods(10, 3, None)], NOW)
    assert answer.now == (7,)
    assert answer.steps == ()
    assert answer.never == (5,)
    assert answer.blockers == ((Blocker("dynquota", "pods", 10, 10, 1, "fixed"),),)


def test_each_raise_comes_one_cooldown_after_the_last_and_is_filled_at_once() -> None:
    # the runaway of docs/sizing.md: 10, 14, 20, 28, 40, 56, 79 (buffer 40 %), mid-cooldown
    growth = Growth(PODS, 1, NOW + 100)
    answer = schedule([Group("Deployment/web", 60)], [pods(10, 0, growth)], NOW)
    assert answer.now == (10,)
    key = ("dynquota", "pods")
    assert answer.steps == (
        Step(NOW + 100, {key: 14}, (4,)),
        Step(NOW + 400, {key: 20}, (6,)),
        Step(NOW + 700, {key: 28}, (8,)),
        Step(NOW + 1000, {key: 40}, (12,)),
        Step(NOW + 1300, {key: 56}, (16,)),
        Step(NOW + 1600, {key: 79}, (4,)),
    )
    assert answer.never == (0,)
    assert answer.last_at == NOW + 1600
    assert answer.hard == {key: 79}


def test_a_raise_due_already_comes_now() -> None:
    growth = Growth(PODS, 1, NOW - 5)
    answer = schedule([Group("Deployment/web", 16)], [pods(10, 2, growth)], NOW)
    assert answer.now == (8,)
    key = ("dynquota", "pods")
    assert answer.steps == (Step(NOW, {key: 14}, (4,)), Step(NOW + 300, {key: 20}, (4,)))
    assert answer.never == (0,)


def test_the_other_usage_of_the_namespace_counts_for_the_target() -> None:
    # used 30 of hard 30 already: T(30) = 42 is due at the next raise; the workload adds to it
    growth = Growth(PODS, 1, NOW + 60)
    answer = schedule([Group("Job/batch", 20)], [pods(30, 30, growth)], NOW)
    assert answer.now == (0,)
    assert [(s.at, dict(s.raises), s.admitted) for s in answer.steps] == [
        (NOW + 60, {("dynquota", "pods"): 42}, (12,)),
        (NOW + 360, {("dynquota", "pods"): 59}, (8,)),
    ]


def test_the_maximum_stops_the_raises_and_says_so() -> None:
    growth = Growth(ResourceProfile.of(40, 10, 30, 300, 3600), 1, NOW + 10)
    answer = schedule([Group("Deployment/web", 40)], [pods(10, 0, growth)], NOW)
    assert [s.raises[("dynquota", "pods")] for s in answer.steps] == [14, 20, 28, 30]
    assert [s.admitted for s in answer.steps] == [(4,), (6,), (8,), (2,)]
    assert answer.never == (10,)
    assert answer.blockers == ((Blocker("dynquota", "pods", 30, 30, 1, "maximum"),),)


def test_a_budgeted_key_grows_up_to_its_slice_and_free_room() -> None:
    growth = Growth(PODS, 1, NOW + 10, cap=25, budget="team")
    answer = schedule([Group("Deployment/web", 40)], [pods(10, 0, growth)], NOW)
    assert [s.raises[("dynquota", "pods")] for s in answer.steps] == [14, 20, 25]
    assert answer.never == (15,)
    assert answer.blockers == ((Blocker("dynquota", "pods", 25, 25, 1, "budget"),),)


def test_a_pod_bigger_than_the_buffer_room_never_grows_the_key() -> None:
    # requests.cpu in millicores: 500m used of 1 core, buffer 20 %: T(500) = 600 <= 1000, so
    # no raise ever comes, and a pod asking 1 core never fits (docs/tenants.md)
    cpu = ResourceProfile.of(20, 1000, 8000, 300, 3600)
    limit = Limit("dynquota", "requests.cpu", 1000, 500, (1000,), Growth(cpu, 100, NOW - 1))
    answer = schedule([Group("Deployment/big", 2)], [limit], NOW)
    assert answer.now == (0,)
    assert answer.steps == ()
    assert answer.blockers == ((Blocker("dynquota", "requests.cpu", 1000, 500, 1000, "buffer"),),)


def test_a_key_without_a_recorded_raise_does_not_grow() -> None:
    answer = schedule([Group("Deployment/web", 12)], [pods(10, 0, Growth(PODS, 1, None))], NOW)
    assert answer.now == (10,)
    assert answer.steps == ()
    assert answer.blockers == ((Blocker("dynquota", "pods", 10, 10, 1, "not-growing"),),)


def test_round_to_and_granularity_come_from_the_policy_target() -> None:
    growth = Growth(ResourceProfile.of(40, 10, 100, 300, 3600, round_to=5), 1, NOW)
    answer = schedule([Group("Deployment/web", 20)], [pods(10, 0, growth)], NOW)
    assert [s.raises[("dynquota", "pods")] for s in answer.steps] == [15, 25]  # 14 -> 15, 21 -> 25


def test_keys_with_their_own_cooldowns_raise_apart() -> None:
    # pods every 300 s from NOW + 10; requests.cpu (millicores, 100m a pod) every 60 s from NOW
    cpu = ResourceProfile.of(100, 1000, 100_000, 60, 3600)
    limits = [
        pods(10, 0, Growth(PODS, 1, NOW + 10)),
        Limit("dynquota", "requests.cpu", 1000, 500, (100,), Growth(cpu, 100, NOW)),
    ]
    answer = schedule([Group("Deployment/web", 20)], limits, NOW)
    assert answer.now == (5,)  # requests.cpu: 500m of room
    assert [(s.at, dict(s.raises), s.admitted) for s in answer.steps] == [
        (NOW, {("dynquota", "requests.cpu"): 2000}, (5,)),  # T(1000m) at 100 %
        (NOW + 10, {("dynquota", "pods"): 14}, (4,)),
        (NOW + 60, {("dynquota", "requests.cpu"): 3800}, (0,)),  # T(1900m); pods full
        (NOW + 310, {("dynquota", "pods"): 20}, (6,)),
    ]
    assert answer.never == (0,)


def test_groups_fill_in_order_and_share_the_room() -> None:
    limit = pods(8, 0, Growth(PODS, 1, NOW + 30), per=(1, 1))
    answer = schedule([Group("Deployment/a", 5), Group("Deployment/b", 5)], [limit], NOW)
    assert answer.now == (5, 3)
    assert answer.steps == (Step(NOW + 30, {("dynquota", "pods"): 12}, (0, 2)),)
    assert answer.never == (0, 0)


def test_a_group_not_charged_to_a_key_ignores_it() -> None:
    limit = pods(2, 2, None, per=(1, 0))
    answer = schedule([Group("Deployment/a", 3), Group("Deployment/b", 3)], [limit], NOW)
    assert answer.now == (0, 3)
    assert answer.never == (3, 0)


def test_a_refused_group_never_fits_and_has_no_key_to_blame() -> None:
    refused = Group("Deployment/web", 4, refused="violates PodSecurity")
    answer = schedule([refused], [pods(10, 0, Growth(PODS, 1, NOW))], NOW)
    assert answer.now == (0,)
    assert answer.steps == ()
    assert answer.never == (4,)
    assert answer.blockers == ((),)


def test_a_cooldown_of_zero_ends() -> None:
    growth = Growth(ResourceProfile.of(40, 10, 100, 0, 3600), 1, NOW)
    answer = schedule([Group("Deployment/web", 1000)], [pods(10, 0, growth)], NOW)
    assert answer.hard[("dynquota", "pods")] == 100
    assert all(s.at == NOW for s in answer.steps)
    assert answer.never == (900,)
    assert len(answer.steps) < MAX_STEPS


def test_a_key_that_wants_more_only_after_a_fill_is_raised_in_the_same_step() -> None:
    # at NOW pods is raised 30 -> 42; its 12 pods take requests.cpu to 4200m, whose target
    # (buffer 50 %: 6300m) then exceeds its hard 5000m: raised at NOW too, one step
    cpu = ResourceProfile.of(50, 1000, 100_000, 60, 3600)
    limits = [
        pods(30, 0, Growth(PODS, 1, NOW - 1)),
        Limit("dynquota", "requests.cpu", 5000, 0, (100,), Growth(cpu, 100, NOW - 1)),
    ]
    answer = schedule([Group("Deployment/web", 50)], limits, NOW)
    assert answer.now == (30,)
    assert answer.steps[0] == Step(
        NOW, {("dynquota", "pods"): 42, ("dynquota", "requests.cpu"): 6300}, (12,)
    )
    assert [s.at for s in answer.steps] == [NOW, NOW + 300]


def test_a_replicas_claims_are_admitted_one_by_one_and_grow_the_key() -> None:
    # a StatefulSet's replica: 2 claims (1 each on persistentvolumeclaims), then its pod; 5
    # claims of room 4 used, buffer 10 %: T(4) = 5, no room for a replica's 2 claims at once,
    # but one claim is admitted (used 5), T(5) = 6 > 5: the key grows (one claim a cooldown)
    claims = ResourceProfile.of(10, 1, 100, 300, 3600)
    limit = Limit("dynquota", "persistentvolumeclaims", 5, 4, (2,), Growth(claims, 1, NOW + 10),
                  per_claim=((1, 1),))  # fmt: skip
    answer = schedule([Group("StatefulSet/db", 2, claims=2)], [limit], NOW)
    key = ("dynquota", "persistentvolumeclaims")
    assert answer.now == (0,)
    assert answer.claims_now == ((0,),)  # data-db-0 exists, logs-db-0 and the pod wait
    assert answer.steps == (
        Step(NOW + 10, {key: 6}, (1,)),  # logs-db-0, then its pod
        Step(NOW + 310, {key: 7}, (0,)),  # T(6) = 7: data-db-1 only
        Step(NOW + 610, {key: 8}, (1,)),  # T(7) = 8: logs-db-1, then its pod
    )
    assert answer.never == (0,)


def test_the_blocker_is_the_key_refusing_the_next_claim_after_one_was_admitted() -> None:
    # requests.storage (fixed, GiB): room 4 for data (4) and logs (1); claims room 1 of a
    # growing key. data is admitted; logs is refused by both; claims grows, storage never
    claims = ResourceProfile.of(10, 1, 100, 300, 3600)
    limits = [
        Limit("dynquota", "persistentvolumeclaims", 5, 4, (2,), Growth(claims, 1, NOW + 10),
              per_claim=((1, 1),)),
        Limit("storage", "requests.storage", 10, 6, (5,), None, per_claim=((4, 1),)),
    ]  # fmt: skip
    answer = schedule([Group("StatefulSet/db", 3, claims=2)], limits, NOW)
    assert answer.now == (0,)
    assert answer.never == (3,)
    assert answer.blockers == ((Blocker("storage", "requests.storage", 10, 10, 5, "fixed"),),)
    assert answer.hard[("dynquota", "persistentvolumeclaims")] == 6


def test_a_claim_above_the_maximum_is_blamed_on_the_maximum_not_the_buffer() -> None:
    # requests.storage in GiB: hard 50, maximum 100, a replica's one claim asks 200: no raise
    # (T(0) = 10 <= 50) and the override raises only to 100, so the maximum holds it back
    storage = ResourceProfile.of(40, 10, 100, 300, 3600)
    limit = Limit("dynquota", "requests.storage", 50, 0, (200,), Growth(storage, 1, NOW - 1),
                  per_claim=((200,),))  # fmt: skip
    answer = schedule([Group("StatefulSet/db", 1, claims=1)], [limit], NOW)
    assert (answer.now, answer.steps, answer.never) == ((0,), (), (1,))
    assert answer.blockers == ((Blocker("dynquota", "requests.storage", 50, 0, 200, "maximum"),),)


def test_a_pod_above_the_maximum_or_the_maximums_room_is_blamed_on_the_maximum() -> None:
    # requests.cpu in millicores, maximum 8 cores: a pod asking 10 cores never fits; with 7.5
    # cores used, a pod asking 1 core needs more than the maximum leaves
    cpu = ResourceProfile.of(20, 1000, 8000, 300, 3600)
    for used, per in ((500, 10000), (7500, 1000)):
        limit = Limit("dynquota", "requests.cpu", 8000, used, (per,), Growth(cpu, 100, NOW - 1))
        answer = schedule([Group("Deployment/big", 1)], [limit], NOW)
        assert answer.blockers == (
            (Blocker("dynquota", "requests.cpu", 8000, used, per, "maximum"),),
        ), used
    # below its hard, not growing (T(500) = 600): still the maximum, the override cannot help
    limit = Limit("dynquota", "requests.cpu", 1000, 500, (10000,), Growth(cpu, 100, NOW - 1))
    answer = schedule([Group("Deployment/big", 1)], [limit], NOW)
    assert answer.blockers == ((Blocker("dynquota", "requests.cpu", 1000, 500, 10000, "maximum"),),)


def test_a_pod_above_a_budgets_room_is_blamed_on_the_budget_not_the_buffer() -> None:
    cpu = ResourceProfile.of(20, 1000, 8000, 300, 3600)
    for free, reason in ((1000, "budget"), (-500, "over-budget")):
        growth = Growth(cpu, 100, NOW - 1, cap=2000 + free, budget="team", free=free)
        limit = Limit("dynquota", "requests.cpu", 1000, 500, (4000,), growth)
        answer = schedule([Group("Deployment/big", 1)], [limit], NOW)
        assert answer.blockers == (
            (Blocker("dynquota", "requests.cpu", 1000, 500, 4000, reason),),
        ), free
