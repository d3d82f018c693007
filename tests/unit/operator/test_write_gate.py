"""The one client-side write gate (issue 24): what each kind of write needs, built alone with
a fake of what the operator knows."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from dynquota.operator.ports import (
    HELD_BUDGETS,
    HELD_INFORMERS,
    HELD_KILL_SWITCH,
    HELD_LEASE,
    HELD_POLICIES,
    HELD_RELEASE,
    HELD_STALE,
)
from dynquota.operator.write_gate import (
    BUDGET_SLICES,
    EVENT,
    KILL_SWITCH_DELETE,
    LIMIT_RANGE,
    STATUS,
    TARPIT_ENGAGE,
    TARPIT_RELEASE,
    UNMANAGING_DELETE,
    Write,
    WriteGate,
)

from .fakes import World

PATCH = Write("quota")
SHRINK = Write("quota", shrinks=True)
CREATE = Write("quota", creates=True)


@dataclass
class Lease:
    valid: bool = True
    asked: list[float] = field(default_factory=list)

    @property
    def is_leader(self) -> bool:
        return self.valid

    def can_write(self, seconds: float) -> bool:
        self.asked.append(seconds)
        return self.valid


@dataclass
class Known:
    policies_listed: bool = True
    budgets_listed: bool = True
    kill_switch: bool | None = False
    release_confirmed: bool = True
    gate: Lease = field(default_factory=Lease)
    synced: bool = True
    fresh: bool = True

    def usage_synced(self) -> bool:
        return self.synced

    def informers_fresh(self) -> bool:
        return self.fresh


ALL = [EVENT, STATUS, LIMIT_RANGE, BUDGET_SLICES, KILL_SWITCH_DELETE, UNMANAGING_DELETE,
       PATCH, SHRINK, CREATE]  # fmt: skip


def test_everything_goes_when_everything_is_known() -> None:
    known = Known()
    gate = WriteGate(known)
    assert [gate.hold(w) for w in ALL] == [None] * len(ALL)
    # the Lease must cover the whole request: the request timeout (10 s), every time
    assert known.gate.asked == [10.0] * len(ALL)


def test_without_the_lease_nothing_goes() -> None:
    gate = WriteGate(Known(gate=Lease(valid=False)))
    assert {gate.hold(w) for w in ALL} == {HELD_LEASE}


@pytest.mark.parametrize(
    ("known", "expected"),
    [
        # what is not known, and which writes it holds (EVENT, STATUS, LIMIT_RANGE,
        # BUDGET_SLICES, KILL_SWITCH_DELETE, UNMANAGING_DELETE, PATCH, SHRINK, CREATE)
        (Known(policies_listed=False), [None, None] + [HELD_POLICIES] * 2 + [None]
         + [HELD_POLICIES] * 4),
        (Known(budgets_listed=False), [None, None, None, HELD_BUDGETS, None]
         + [HELD_BUDGETS] * 4),
        (Known(kill_switch=None), [None, None, HELD_KILL_SWITCH, HELD_KILL_SWITCH, None]
         + [HELD_KILL_SWITCH] * 4),
        # engaged: only its deletes (and a dry-run release the reconcile decides) go
        (Known(kill_switch=True), [None, None, HELD_KILL_SWITCH, HELD_KILL_SWITCH, None,
                                   None, None, None, None]),
        # a release seen in a watch event, not yet confirmed by a consistent read
        (Known(release_confirmed=False), [None, None, HELD_RELEASE, HELD_RELEASE, None,
                                          None, None, None, HELD_RELEASE]),
        (Known(synced=False), [None, None, None, HELD_INFORMERS, None]
         + [HELD_INFORMERS] * 4),
        # stale: what could shrink holds; a grow, a create, a LimitRange go
        (Known(fresh=False), [None, None, None, HELD_STALE, None, HELD_STALE, None,
                              HELD_STALE, None]),
    ],
)  # fmt: skip
def test_what_each_write_needs(known: Known, expected: list[str | None]) -> None:
    gate = WriteGate(known)
    assert [gate.hold(w) for w in ALL] == expected
    assert [gate.may(w) for w in ALL] == [e is None for e in expected]


def test_the_knowledge_is_read_at_every_ask() -> None:
    known = Known(fresh=False)
    gate = WriteGate(known)
    assert gate.hold(SHRINK) == HELD_STALE
    known.fresh = True
    assert gate.hold(SHRINK) is None


async def test_the_operator_asks_its_object_informers_before_a_shrink() -> None:
    """The review's finding: a shrink checked the usage informers' freshness only; a dead
    policy or budget watch now holds it too (``Operator.informers_fresh``)."""
    world = World()
    assert world.op.informers_fresh() is True  # no object informers wired: usage only
    margins: list[float] = []

    def stale(margin: float) -> bool:
        margins.append(margin)
        return False

    world.op.cluster.objects_fresh = stale
    assert world.op.informers_fresh() is False
    assert world.op.write_gate.hold(SHRINK) == HELD_STALE
    assert world.op.write_gate.hold(CREATE) is None
    assert margins == [float(world.op.settings.liveness_margin_seconds)] * 2


@pytest.mark.parametrize(
    ("known", "engage", "release"),
    [
        (Known(), None, None),
        (Known(gate=Lease(valid=False)), HELD_LEASE, HELD_LEASE),
        (Known(kill_switch=None), HELD_KILL_SWITCH, HELD_KILL_SWITCH),
        # engaged: the kill switch releases every namespace and puts none in
        (Known(kill_switch=True), HELD_KILL_SWITCH, None),
        (Known(release_confirmed=False), HELD_RELEASE, None),
        (Known(policies_listed=False), HELD_POLICIES, None),
        (Known(synced=False), HELD_INFORMERS, None),
        (Known(budgets_listed=False, fresh=False), None, None),
    ],
)
def test_the_tarpit_flow_schema(known: Known, engage: str | None, release: str | None) -> None:
    gate = WriteGate(known)
    assert (gate.hold(TARPIT_ENGAGE), gate.hold(TARPIT_RELEASE)) == (engage, release)
