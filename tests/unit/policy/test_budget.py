"""The tenant-budget allocation pass (dynquota.policy.budget): exact outcomes, then the invariant
under a simulated quota controller and admission (hypothesis)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dynquota.policy.budget import (
    Slice,
    allocate,
    commitment,
    landed,
    stepped_fill,
    water_fill,
)


def s(name: str, spec: int | None, status: int | None, used: int | None, demand: int) -> Slice:
    return Slice(name, spec_hard=spec, status_hard=status, used=used, demand=demand)


def test_water_fill_levels_then_gives_odd_units_in_name_order() -> None:
    assert water_fill(10, {"a": 2, "b": 8, "c": 8}) == {"a": 2, "b": 4, "c": 4}
    assert water_fill(11, {"c": 8, "b": 8, "a": 2}) == {"a": 2, "b": 5, "c": 4}
    assert water_fill(100, {"a": 2, "b": 3}) == {"a": 2, "b": 3}
    assert water_fill(0, {"a": 2}) == {"a": 0}
    with pytest.raises(ValueError, match="non-negative"):
        water_fill(-1, {"a": 1})


def test_demands_that_fit_are_granted_in_full() -> None:
    out = allocate(60, [s("a", 10, 10, 8, 12), s("b", 10, 10, 5, 6), s("c", 10, 10, 1, 20)])
    assert out.targets == {"a": 12, "b": 6, "c": 20}
    # b shrinks at once; a and c grow into the room left while b's shrink is unobserved
    # (60 - 10 for b's old status.hard): a +2, c +10 fits in 50 - 20 = 30.
    assert out.writes == {"a": 12, "b": 6, "c": 20}
    assert out.committed == 30
    assert out.committed_after == 42
    assert not out.over_budget
    assert out.at_risk == ()
    assert out.waiting == {}


def test_excess_demand_is_shared_max_min_fairly_above_usage() -> None:
    out = allocate(60, [s("a", 20, 20, 18, 50), s("b", 20, 20, 10, 50), s("c", 20, 20, 2, 4)])
    # floors 18+10+2 = 30; room 30 shared: c needs 2, then a and b 14 each.
    assert out.targets == {"a": 32, "b": 24, "c": 4}
    # c's shrink (20 -> 4) is not observed yet, so only 60 - 60 = 0 is free: a and b wait
    # (their commitment stays 20), c shrinks.
    assert out.writes == {"c": 4}
    assert out.waiting == {"a": 30, "b": 30}


def test_a_shrink_frees_room_only_once_status_hard_shows_it() -> None:
    before = allocate(60, [s("a", 20, 20, 18, 50), s("b", 40, 40, 10, 10)])
    assert before.writes == {"b": 10}  # shrink, nothing to grow into yet
    observed = allocate(60, [s("a", 20, 20, 18, 50), s("b", 10, 10, 10, 10)])
    assert observed.writes == {"a": 50}


def test_a_slice_is_never_shrunk_below_its_usage() -> None:
    out = allocate(30, [s("a", 25, 25, 25, 5), s("b", 5, 5, 5, 30)])
    assert out.targets["a"] == 25
    assert "a" not in out.writes


def test_over_budget_grants_nothing_and_shrinks_nobody_below_usage() -> None:
    # c joined with 30 used where only 10 were free.
    out = allocate(60, [s("a", 25, 25, 20, 40), s("b", 25, 25, 25, 25), s("c", 30, 30, 30, 35)])
    assert out.over_budget
    assert out.committed == 80
    assert out.targets == {"a": 20, "b": 25, "c": 30}
    assert out.writes == {"a": 20}  # a's unused room comes back; nobody grows
    assert out.free == -20


def test_an_unenforced_namespace_puts_the_budget_at_risk_and_gets_bounded() -> None:
    # d joined: no quota yet, 3 pods known from the tally.
    out = allocate(60, [s("a", 20, 20, 5, 30), s("d", None, None, 3, 10)])
    assert out.at_risk == ("d",)
    assert not out.grows_allowed
    assert out.writes == {"d": 10}  # bounded at its target; a may not grow this pass
    assert out.waiting == {"a": 10}


def test_a_bounding_write_is_cut_to_the_free_room_but_not_below_usage() -> None:
    out = allocate(20, [s("a", 18, 18, 18, 18), s("d", None, None, 5, 10)])
    assert out.writes == {"d": 5}  # 2 free, but 5 are already used
    assert out.committed_after == 23
    assert out.free == -3


def test_unknown_usage_is_held() -> None:
    out = allocate(60, [s("a", 20, 20, None, 50), s("b", 20, 20, 0, 0)])
    assert out.held == ("a",)
    assert out.writes == {"b": 0}


def test_invalid_input_is_refused() -> None:
    with pytest.raises(ValueError, match="listed twice"):
        allocate(10, [s("a", 1, 1, 1, 1), s("a", 1, 1, 1, 1)])
    with pytest.raises(ValueError, match="non-negative"):
        allocate(-1, [])


NAMES = ("a", "b", "c", "d")


@settings(max_examples=300, deadline=None)
@given(
    budget=st.integers(0, 80),
    start=st.lists(st.tuples(st.integers(0, 30), st.integers(0, 40)), min_size=4, max_size=4),
    steps=st.lists(
        st.tuples(
            st.sampled_from(("allocate", "observe", "admit", "release", "demand")),
            st.sampled_from(NAMES),
            st.integers(1, 15),
        ),
        max_size=60,
    ),
)
def test_the_sum_of_commitments_never_exceeds_the_budget(
    budget: int, start: list[tuple[int, int]], steps: list[tuple[str, str, int]]
) -> None:
    """Simulation: the quota controller copies spec.hard to status.hard when it likes,
    admission charges only below status.hard, usage drops, demands move; allocate() decides
    from the current state. Starting within the budget, no state ever exceeds it; starting
    over it, the sum never grows."""
    used = {n: min(u, budget // 4) for n, (u, _) in zip(NAMES, start, strict=True)}
    demand = {n: d for n, (_, d) in zip(NAMES, start, strict=True)}
    spec = dict(used)
    status = dict(used)

    def total() -> int:
        return sum(max(spec[n], status[n], used[n]) for n in NAMES)

    assert total() <= budget
    for action, name, amount in steps:
        if action == "allocate":
            out = allocate(budget, [s(n, spec[n], status[n], used[n], demand[n]) for n in NAMES])
            for n, value in out.writes.items():
                assert value >= used[n]
                spec[n] = value
        elif action == "observe":
            status[name] = spec[name]
        elif action == "admit":
            used[name] = max(used[name], min(used[name] + amount, status[name]))
        elif action == "release":
            used[name] = max(used[name] - amount, 0)
        else:
            demand[name] = amount * 3
        assert total() <= budget


def test_a_hungry_namespace_gets_freed_room_within_two_passes() -> None:
    state = {"a": [30, 30, 5, 5], "b": [10, 10, 10, 40]}  # spec, status, used, demand
    for _ in range(2):
        out = allocate(40, [s(n, *v) for n, v in state.items()])
        for n, value in out.writes.items():
            state[n][0] = value
        for v in state.values():
            v[1] = v[0]  # the controller observes
    assert state["a"][0] == 5
    assert state["b"][0] == 35
    assert commitment(s("b", *state["b"])) == 35


def test_reserved_room_is_committed_and_never_shared_out() -> None:
    # 20 held for a namespace that left: b (used 10) may grow to 10 only, not to its 15
    held = allocate(30, [s("b", 10, 10, 10, 15)], reserved=20)
    assert held.writes == {}
    assert held.targets == {"b": 10}
    assert (held.committed, held.committed_after, held.free) == (30, 30, 0)
    assert held.waiting == {"b": 5}
    released = allocate(30, [s("b", 10, 10, 10, 15)])
    assert released.writes == {"b": 15}
    # more held than the budget: over budget, b is never shrunk below its usage
    over = allocate(30, [s("b", 12, 12, 10, 15)], reserved=25)
    assert over.over_budget is True
    assert over.writes == {"b": 10}
    with pytest.raises(ValueError, match="non-negative"):
        allocate(30, [], reserved=-1)


def test_the_cpu_example_gives_one_namespace_a_whole_headroom() -> None:
    """Issue 27: requests.cpu budget 5 CPUs (5000m), each member's profile a minimumHeadroom
    of 2 CPUs; one uses 2000m, the other nothing, both ask usage + 2000m. Shared in units the
    slices were 3500m/1500m: 1500m free in each, a 2-CPU pod refused in both with 3 CPUs
    free. In whole steps: one gets its full headroom, the other the rest."""
    slices = [Slice("a", 2000, 2000, 2000, 4000, step=2000), Slice("b", 0, 0, 0, 2000, step=2000)]
    allocation = allocate(5000, slices)
    assert allocation.targets == {"a": 4000, "b": 1000}
    assert allocation.targets["a"] - 2000 >= 2000  # a 2-CPU pod fits in a
    # without steps (no minimumHeadroom): the old max-min split
    plain = [Slice("a", 2000, 2000, 2000, 4000), Slice("b", 0, 0, 0, 2000)]
    assert allocate(5000, plain).targets == {"a": 3500, "b": 1500}


def test_stepped_fill_shares_whole_steps_fairly_then_units() -> None:
    # room for 3 whole steps of 2: one each (a whole headroom each), the last unit to the first
    assert stepped_fill(7, {"a": 4, "b": 4, "c": 4}, {"a": 2, "b": 2, "c": 2}) == {
        "a": 3, "b": 2, "c": 2,
    }  # fmt: skip
    # room for 2 steps among 3 names: the first two in name order get one, the third none
    assert stepped_fill(5, {"a": 4, "b": 4, "c": 4}, {"a": 2, "b": 2, "c": 2}) == {
        "a": 3, "b": 2, "c": 0,
    }  # fmt: skip
    # a need that is not a whole step: its whole steps first, the remainder in units
    assert stepped_fill(5, {"a": 3, "b": 3}, {"a": 2, "b": 2}) == {"a": 3, "b": 2}
    # names without a step take part in the unit sharing only
    assert stepped_fill(4, {"a": 4, "b": 4}, {"a": 4}) == {"a": 4, "b": 0}
    assert stepped_fill(6, {"a": 4, "b": 4}, {"a": 4}) == {"a": 4, "b": 2}
    # room for everything: each its need
    assert stepped_fill(10, {"a": 4, "b": 4}, {"a": 3}) == {"a": 4, "b": 4}
    with pytest.raises(ValueError, match="steps"):
        stepped_fill(1, {"a": 1}, {"a": 0})


@settings(max_examples=300, deadline=None)
@given(
    room=st.integers(0, 5000),
    needs=st.dictionaries(st.sampled_from("abcdef"), st.integers(0, 3000), max_size=6),
    steps=st.dictionaries(st.sampled_from("abcdef"), st.integers(1, 2000), max_size=6),
)
def test_stepped_fill_gives_each_at_most_its_need_and_spends_the_room(
    room: int, needs: dict[str, int], steps: dict[str, int]
) -> None:
    given_ = stepped_fill(room, needs, steps)
    assert set(given_) == set(needs)
    assert all(0 <= given_[n] <= needs[n] for n in needs)
    assert sum(given_.values()) == min(room, sum(needs.values()))


def test_landed_counts_only_the_writes_that_landed() -> None:
    """Issue 30, LOW-7: a grow refused by the apiserver granted nothing; the budget's figures
    count the slice as the snapshot showed it, and its demand waits."""
    slices = [s("a", 10, 10, 5, 15), s("b", 10, 10, 2, 12)]
    planned = allocate(40, slices)
    assert planned.writes == {"a": 15, "b": 12}
    assert (planned.committed_after, planned.free, planned.waiting) == (27, 13, {})
    out = landed(planned, slices, {"b"})
    assert out.writes == {"b": 12}
    assert out.after == {"a": 10, "b": 12}
    assert (out.committed_after, out.free, out.waiting) == (22, 18, {"a": 5})
    assert landed(planned, slices, {"a", "b"}) is planned
