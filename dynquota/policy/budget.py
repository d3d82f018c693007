"""A tenant budget sliced into per-namespace quotas: one allocation pass (Pure: no I/O).

Issue #13. A budget holds ``B`` units of one quota key (counts, millicores, bytes: whatever
integer unit the caller sized the key in) for a set of namespaces, each of which has one
managed ResourceQuota (its *slice*). Admission enforces a quota's ``status.hard`` against its
``status.used``, and the quota controller copies ``spec.hard`` into ``status.hard`` on its own
schedule, so both the written and the enforced value can admit. A namespace's *commitment* is
therefore ``max(spec.hard, status.hard, status.used)``, and the invariant this module keeps is

    sum of commitments over the budget's namespaces <= B.

:func:`allocate` decides one pass from one consistent snapshot of the slices (one LIST of the
quotas, taken after the caller's previous writes were acknowledged, so it is at or after them):

1. **Fair targets.** Every namespace's floor is its usage (a slice is never shrunk below
   ``status.used``); its need above the floor is ``demand - used`` (``demand``: the target its
   DynamicQuotaPolicy would set without a budget). When the demands fit, each target is its
   demand; otherwise the room above the floors is shared max-min fairly (water-filling, whole
   units, the odd units to namespaces in name order): deterministic, and every namespace with
   pending need gets a share of any free room in the same pass (no starvation). A namespace
   whose profile sets a ``minimumHeadroom`` (its ``step``) is first given room in whole steps
   while the budget has them (:func:`stepped_fill`): a slice split below the headroom would
   refuse the very object the headroom is there for (issue 27: 5 CPUs, headroom 2, slices
   3500m/1500m refused a 2-CPU pod in both namespaces with 3 CPUs free).
2. **Shrinks first.** A slice above its target is written down to it at once; the room it frees
   counts only once ``status.hard`` shows the lower value (its commitment is unchanged until
   then): shrink, observe, grow.
3. **Bounding writes.** A namespace whose slice is not enforced yet (no quota, or the key not in
   ``status.hard``) limits nothing for admission: it is *at risk*. It gets a slice at once (its
   target, cut to the free room, never below its known usage): bounding it is always safer
   than leaving it unbounded.
4. **Grows last**, only when no namespace is at risk and the budget is not over (``OverBudget``:
   sum of commitments above ``B``, e.g. a namespace joined with usage above the free room);
   then the free room (``B`` minus the commitments after this pass's writes) is shared among
   the growing slices by the same water-filling, so the sum of commitments stays within ``B``
   whatever the quota controller and admission do next (admission never charges beyond
   ``status.hard``; the controller only copies ``spec.hard``).

A namespace whose usage is unknown (``used`` None: the quota controller has not counted the
key) is held: no shrink, no grow; its commitment counts what is known.

Limits of the promise (docs/budgets.md): admission's own races (kubernetes#123434, a recount
from a lagging informer overwriting an admission charge) can admit beyond ``status.hard``;
nothing here can prevent that.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

__all__ = [
    "Allocation",
    "Slice",
    "allocate",
    "commitment",
    "landed",
    "stepped_fill",
    "water_fill",
]


@dataclass(frozen=True)
class Slice:
    """One namespace's managed quota for one budgeted key, from one consistent snapshot.

    ``spec_hard``: its ``spec.hard[key]`` (None: no managed quota, or the key absent);
    ``status_hard``: its ``status.hard[key]`` (None: not enforced yet); ``used``: its
    ``status.used[key]`` or a better count (None: unknown); ``demand``: the hard its
    DynamicQuotaPolicy would set without the budget (buffer, cooldowns, minimum, maximum
    applied; an override asks for the maximum). ``step``: its profile's ``minimumHeadroom``
    for the key (1: none), the size of the whole steps room is given in first. All in the
    key's integer unit, ``>= 0``.
    """

    namespace: str
    spec_hard: int | None
    status_hard: int | None
    used: int | None
    demand: int
    step: int = 1

    @property
    def bounded(self) -> bool:
        """Whether admission enforces a limit for the key in this namespace."""
        return self.status_hard is not None


def commitment(item: Slice) -> int:
    """``max(spec.hard, status.hard, status.used)`` of ``item``, unknown parts as 0 (units)."""
    return max(item.spec_hard or 0, item.status_hard or 0, item.used or 0)


@dataclass(frozen=True)
class Allocation:
    """The outcome of one :func:`allocate` pass (all amounts in the key's unit).

    ``writes``: namespace -> the ``spec.hard`` to write (only slices that change; shrinks,
    bounding writes and grows). ``targets``: each namespace's fair target. ``committed``:
    sum of commitments in the snapshot; ``committed_after``: the same once the writes land,
    before the controller observes any shrink (the bound the writes keep). ``free``:
    ``budget - committed_after`` (negative when over). ``over_budget``: ``committed > budget``.
    ``at_risk``: namespaces not yet enforced, sorted. ``held``: namespaces with unknown usage,
    sorted. ``waiting``: namespace -> units its demand still lacks after this pass.
    ``reserved``: units held by namespaces leaving the budget (counted in ``committed`` and
    ``committed_after``, granted to no member). ``after``: namespace -> its commitment once
    the writes land (``committed_after`` is their sum plus ``reserved``).
    """

    budget: int
    writes: dict[str, int]
    targets: dict[str, int]
    committed: int
    committed_after: int
    free: int
    over_budget: bool
    at_risk: tuple[str, ...]
    held: tuple[str, ...]
    waiting: dict[str, int] = field(default_factory=dict)
    reserved: int = 0
    after: dict[str, int] = field(default_factory=dict)

    @property
    def grows_allowed(self) -> bool:
        """Whether this pass could grant new room (nothing at risk, not over budget)."""
        return not self.at_risk and not self.over_budget


def water_fill(room: int, needs: Mapping[str, int]) -> dict[str, int]:
    """Share ``room`` whole units max-min fairly among ``needs`` (name -> units wanted, >= 0).

    Returns name -> units given, ``<= need`` each, summing to ``min(room, sum(needs))``: the
    largest level ``L`` with ``sum(min(need, L)) <= room`` is given to all, then one more unit
    to each name still in need, in name order, until the room is spent. Deterministic.
    Raises ``ValueError`` if ``room`` or a need is negative.
    """
    if room < 0 or any(n < 0 for n in needs.values()):
        raise ValueError("room and needs must be non-negative")
    given = dict.fromkeys(needs, 0)
    if room >= sum(needs.values()):
        return dict(needs)
    # Binary search of the level: room < sum(needs), so the level is below max(needs).
    low, high = 0, max(needs.values(), default=0)
    while low < high:
        mid = (low + high + 1) // 2
        if sum(min(n, mid) for n in needs.values()) <= room:
            low = mid
        else:
            high = mid - 1
    for name, need in needs.items():
        given[name] = min(need, low)
    left = room - sum(given.values())
    for name in sorted(needs):
        if left == 0:
            break
        if given[name] < needs[name]:
            given[name] += 1
            left -= 1
    return given


def stepped_fill(room: int, needs: Mapping[str, int], steps: Mapping[str, int]) -> dict[str, int]:
    """Share ``room`` like :func:`water_fill`, but first in whole steps: a name with a step
    above 1 (``steps``, default 1) gets its need in whole steps while the room has them — the
    same number of steps to each such name (max-min fair in steps), then one more step to each
    in name order while a whole one fits — and what is left (room, and needs not a whole
    step) is water-filled in units among all names. Each given ``<= need``; the sum is
    ``min(room, sum(needs))``. Raises ``ValueError`` on a negative amount or a step below 1."""
    if any(s < 1 for s in steps.values()):
        raise ValueError("steps must be at least 1")
    if room < 0 or any(n < 0 for n in needs.values()):
        raise ValueError("room and needs must be non-negative")
    if room >= sum(needs.values()):
        return dict(needs)
    stepped = {n: steps.get(n, 1) for n in needs if steps.get(n, 1) > 1}
    whole = {n: needs[n] // step for n, step in stepped.items()}
    given = dict.fromkeys(needs, 0)
    if whole:
        low, high = 0, max(whole.values())
        while low < high:  # the most steps each can have within the room
            mid = (low + high + 1) // 2
            if sum(min(w, mid) * stepped[n] for n, w in whole.items()) <= room:
                low = mid
            else:
                high = mid - 1
        for name, w in whole.items():
            given[name] = min(w, low) * stepped[name]
        left = room - sum(given.values())
        for name in sorted(whole):
            if given[name] < whole[name] * stepped[name] and stepped[name] <= left:
                given[name] += stepped[name]
                left -= stepped[name]
    rest = water_fill(room - sum(given.values()), {n: needs[n] - given[n] for n in needs})
    return {n: given[n] + rest[n] for n in needs}


def _fair_targets(budget: int, slices: Sequence[Slice]) -> dict[str, int]:
    floors = {s.namespace: s.used if s.used is not None else commitment(s) for s in slices}
    needs = {s.namespace: max(s.demand - floors[s.namespace], 0) for s in slices}
    steps = {s.namespace: s.step for s in slices}
    shares = stepped_fill(max(budget - sum(floors.values()), 0), needs, steps)
    return {name: floors[name] + shares[name] for name in floors}


def allocate(budget: int, slices: Iterable[Slice], reserved: int = 0) -> Allocation:
    """One allocation pass for ``budget`` units of one key over ``slices`` (see the module).

    ``slices``: one per namespace of the budget, from one consistent snapshot (names unique).
    ``reserved``: units the budget still holds for namespaces that left it and whose quota has
    not been re-sized under their own policy yet (the sum of their commitments): counted as
    committed, never shared out.
    Returns the :class:`Allocation`; the caller writes ``writes`` (each conditional on the
    quota's resourceVersion), shrinks and bounding writes before grows, and decides the next
    pass from a fresh snapshot. Raises ``ValueError`` on a negative budget or amount, or a
    namespace listed twice.
    """
    items = sorted(slices, key=lambda s: s.namespace)
    names = [s.namespace for s in items]
    if len(set(names)) != len(names):
        raise ValueError("a namespace is listed twice")
    if (
        budget < 0
        or reserved < 0
        or any(s.step < 1 for s in items)
        or any(
            v is not None and v < 0
            for s in items
            for v in (s.spec_hard, s.status_hard, s.used, s.demand)
        )
    ):
        raise ValueError("budget and amounts must be non-negative")

    committed = sum(commitment(s) for s in items) + reserved
    over_budget = committed > budget
    at_risk = tuple(s.namespace for s in items if not s.bounded)
    held = tuple(s.namespace for s in items if s.used is None and s.bounded)
    shared = max(budget - reserved, 0)  # what the members may hold between them
    targets = _fair_targets(shared, items)

    writes: dict[str, int] = {}
    after = {s.namespace: commitment(s) for s in items}
    # Shrinks: always safe (never below usage: the target's floor is the usage).
    for s in items:
        if s.namespace in held or not s.bounded or s.spec_hard is None:
            continue
        if targets[s.namespace] < s.spec_hard:
            writes[s.namespace] = targets[s.namespace]
    # Bounding writes: a slice for every namespace admission does not limit yet, within the
    # free room but never below what it is known to use.
    for s in items:
        if s.bounded:
            continue
        room = max(shared - sum(after.values()), 0)
        known = s.used or 0
        current = s.spec_hard
        want = targets[s.namespace] if current is None else min(targets[s.namespace], current)
        value = max(known, min(want, after[s.namespace] + room))
        if current != value:
            writes[s.namespace] = value
        after[s.namespace] = max(value, s.status_hard or 0, known)

    waiting: dict[str, int] = {}
    if not at_risk and not over_budget:
        room = max(shared - sum(after.values()), 0)
        # Growing to `want` costs only what exceeds the slice's present commitment.
        costs = {
            s.namespace: max(targets[s.namespace] - after[s.namespace], 0)
            for s in items
            if s.namespace not in held
            and s.spec_hard is not None
            and targets[s.namespace] > s.spec_hard
        }
        gains = stepped_fill(room, costs, {s.namespace: s.step for s in items})
        for s in items:
            if s.namespace not in costs:
                continue
            assert s.spec_hard is not None
            # Up to the present commitment is free (a shrink not yet observed, or usage).
            value = min(targets[s.namespace], after[s.namespace] + gains[s.namespace])
            if value > s.spec_hard:
                writes[s.namespace] = value
                after[s.namespace] = max(value, after[s.namespace])
    for s in items:
        granted = writes.get(s.namespace, s.spec_hard or 0)
        lacking = max(s.demand, s.used or 0) - granted
        if lacking > 0:
            waiting[s.namespace] = lacking
    committed_after = sum(after.values()) + reserved
    return Allocation(
        budget=budget,
        writes=writes,
        targets=targets,
        committed=committed,
        committed_after=committed_after,
        free=budget - committed_after,
        over_budget=over_budget,
        at_risk=at_risk,
        held=held,
        waiting=waiting,
        reserved=reserved,
        after=after,
    )


def landed(allocation: Allocation, slices: Iterable[Slice], written: Collection[str]) -> Allocation:
    """``allocation`` as far as its writes landed: ``written`` names the namespaces whose write
    of this key the apiserver accepted; every other write in ``allocation.writes`` (refused,
    failing, or not tried after a 409) changed nothing, so its slice counts as ``slices`` (the
    snapshot :func:`allocate` was given) showed it: ``writes`` keeps only those that landed,
    ``committed_after``/``free`` count only them, and a namespace whose grow did not land is
    ``waiting`` for what its ``spec.hard`` still lacks. Amounts in the key's unit. Raises
    ``KeyError`` if a write's namespace is not in ``slices``."""
    lost = [ns for ns in allocation.writes if ns not in written]
    if not lost:
        return allocation
    items = {s.namespace: s for s in slices}
    after = dict(allocation.after)
    waiting = dict(allocation.waiting)
    for ns in lost:
        item = items[ns]
        after[ns] = commitment(item)
        lacking = max(item.demand, item.used or 0) - (item.spec_hard or 0)
        if lacking > 0:
            waiting[ns] = lacking
        else:
            waiting.pop(ns, None)
    committed_after = sum(after.values()) + allocation.reserved
    return replace(
        allocation,
        writes={ns: v for ns, v in allocation.writes.items() if ns in written},
        committed_after=committed_after,
        free=allocation.budget - committed_after,
        waiting=waiting,
        after=after,
    )
