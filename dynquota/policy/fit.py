"""When a workload's pods fit: the raise schedule of a dynamic quota (Pure: no I/O, ``now``
passed in).

``kubectl dynquota fit`` asks this module one question: given the namespace's quota keys
that a workload's pods are charged to (:class:`Limit`: each quota's ``hard`` and ``used`` and
what one pod of each group charges, in the key's integer units), the groups of identical
pods to create (:class:`Group`), and, for the keys dynquota sizes, how they grow
(:class:`Growth`), how many pods fit now, and when the rest do.

The model (``docs/tenants.md``, "Will it fit?"):

1. **Fill.** Groups are filled in the order given, each pod admitted while every key it is
   charged to keeps ``used + per_pod <= hard`` (quota admission's rule): a group admits
   ``min(remaining, floor((hard - used) / per_pod))`` over its keys, and its admissions are
   usage for the next group and for sizing. The namespace's other usage stays as it is.
2. **Raise.** A key dynquota sizes is raised, as ``decide`` raises it (``docs/sizing.md``),
   when the policy target of its usage exceeds its hard — ``target(U)`` of
   :func:`dynquota.policy.decision.target` (buffer, ``minimumHeadroom``, granularity or
   ``roundTo``, ``minimum``, ``maximum``) — and no earlier than its next allowed raise
   (``nextRaiseAfter``; then every ``upscaleCooldown``), to ``min(target(U), cap)``; ``cap``
   is a budgeted key's slice plus the budget's free room (up to it, never more). A raise
   due now happens now.
3. **Repeat**: after each raise the workload's pods fill it at once (the wake re-queues the
   controllers the quota refused), until every pod fits or no key can grow; what is left
   never fits under the current policy, and each key that holds it back says why
   (:class:`Blocker`).

All arithmetic is integer. A growth without ``next_raise_after`` never raises (no raise is
recorded: the quota is not enforced, or the policy is frozen).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, Literal

from dynquota.policy.decision import target
from dynquota.policy.profiles import ResourceProfile

__all__ = [
    "MAX_STEPS",
    "BlockReason",
    "Blocker",
    "Group",
    "Growth",
    "Limit",
    "Schedule",
    "Step",
    "schedule",
]

MAX_STEPS: Final = 10_000
"""At most this many raise steps are simulated (a guard; a 1,000 maximum from 10 at a 40 %
buffer takes 15)."""

BlockReason = Literal["fixed", "maximum", "budget", "over-budget", "buffer", "not-growing"]
"""Why a key holds pods back for good: ``fixed`` (a quota or key dynquota does not size),
``maximum`` (at the policy maximum), ``budget`` (at the budget slice plus its free room),
``over-budget`` (the same, the budget's free room negative: its namespaces hold more than its
hard, and no member grows until some give room back),
``buffer`` (one pod needs more than the room the target leaves: the key never grows for it),
``not-growing`` (dynquota sizes it but records no raise: not enforced, or frozen). A group
refused whatever the room (:attr:`Group.refused`) has no blocker: its reason is the refusal."""


@dataclass(frozen=True)
class Growth:
    """How a key dynquota sizes grows.

    Attributes:
        profile: the policy's profile of the key (integers in the key's units; cooldowns in
            seconds).
        granularity: the key's default rounding step in units (``KeyUnit.granularity``).
        next_raise_after: seconds since the epoch before which no raise comes (the last raise
            plus ``upscaleCooldown``); ``None``: no raise recorded, the key does not grow.
        cap: the most the key may be raised to besides the maximum, in units (a budget's
            slice plus its free room), or ``None``.
        budget: the budget's name, when ``cap`` is a budget's.
        free: the budget's free room in units (negative when it is over budget), when ``cap``
            is a budget's, else ``None``.
    """

    profile: ResourceProfile
    granularity: int = 1
    next_raise_after: int | None = None
    cap: int | None = None
    budget: str = ""
    free: int | None = None

    def want(self, used: int) -> int:
        """The hard a raise would set for usage ``used``: ``target(used)`` capped at
        :attr:`cap`."""
        goal = target(used, self.profile, self.granularity)
        return goal if self.cap is None else min(goal, self.cap)


@dataclass(frozen=True)
class Limit:
    """One key of one quota that a group's pods are charged to.

    Attributes:
        quota: the quota's name.
        key: the quota key (``pods``, ``requests.cpu``).
        hard: what admission enforces now (``status.hard``), in the key's units.
        used: ``status.used``, in units.
        per_pod: per group (same order as the groups), what one pod charges here in units;
            0 when the group is not charged here (its pods charge nothing there, or the quota's
            scopes do not match them).
        growth: how dynquota grows the key, or ``None`` (it stays at ``hard``).
    """

    quota: str
    key: str
    hard: int
    used: int
    per_pod: tuple[int, ...]
    growth: Growth | None = None


@dataclass(frozen=True)
class Group:
    """Identical pods to create: ``name`` (``Deployment/web``), ``replicas``, and ``refused``:
    why none of them is ever admitted whatever the room (an admission refusal other than
    exceeded quota, ``failed quota: ...: must specify ...``), or ``None``."""

    name: str
    replicas: int
    refused: str | None = None


@dataclass(frozen=True)
class Step:
    """A raise and what fills it: at ``at`` (seconds since the epoch) the keys of ``raises``
    (``(quota, key)`` -> new hard in units) are raised, and ``admitted`` pods of each group
    fit then."""

    at: int
    raises: Mapping[tuple[str, str], int]
    admitted: tuple[int, ...]


@dataclass(frozen=True)
class Blocker:
    """A key that holds a group's remaining pods back for good: ``quota``, ``key``, its final
    ``hard`` and ``used`` (units, the workload's admitted pods included), the ``per_pod``
    charge, and ``reason`` (:data:`BlockReason`)."""

    quota: str
    key: str
    hard: int
    used: int
    per_pod: int
    reason: BlockReason


@dataclass(frozen=True)
class Schedule:
    """The answer of :func:`schedule`.

    Attributes:
        now: per group, the pods that fit under the hard enforced now.
        steps: the raises to come, in time order, one step per time (a raise due now has
            ``at == now``), each with what it admits.
        never: per group, the pods that never fit under the current policy.
        blockers: per group, the keys that hold those back (empty when all fit).
        hard: the final hard of every limit, ``(quota, key)`` -> units.
    """

    now: tuple[int, ...]
    steps: tuple[Step, ...] = ()
    never: tuple[int, ...] = ()
    blockers: tuple[tuple[Blocker, ...], ...] = ()
    hard: Mapping[tuple[str, str], int] = field(default_factory=dict)

    @property
    def fits_now(self) -> int:
        """All groups' pods that fit now."""
        return sum(self.now)

    @property
    def last_at(self) -> int | None:
        """When the last admitting step comes (``None``: no step admits a pod)."""
        times = [s.at for s in self.steps if any(s.admitted)]
        return max(times) if times else None


def schedule(groups: Sequence[Group], limits: Sequence[Limit], now: int) -> Schedule:
    """How many pods of ``groups`` fit at ``now`` (seconds since the epoch) and at each
    raise of ``limits`` to come (module docs); every ``per_pod`` tuple has one entry per
    group."""
    hard = [lim.hard for lim in limits]
    used = [lim.used for lim in limits]
    nxt: list[int | None] = [
        lim.growth.next_raise_after if lim.growth is not None else None for lim in limits
    ]
    admitted = [0] * len(groups)

    def fill() -> list[int]:
        added = [0] * len(groups)
        for g, group in enumerate(groups):
            if group.refused is not None:
                continue
            k = group.replicas - admitted[g]
            for i, lim in enumerate(limits):
                per = lim.per_pod[g]
                if per > 0:
                    k = min(k, max(0, (hard[i] - used[i]) // per))
            if k <= 0:
                continue
            added[g] = k
            admitted[g] += k
            for i, lim in enumerate(limits):
                used[i] += k * lim.per_pod[g]
        return added

    def due(i: int) -> int | None:
        """When limit ``i`` would be raised next (it wants more than it has), or ``None``."""
        growth, at = limits[i].growth, nxt[i]
        if growth is None or at is None or growth.want(used[i]) <= hard[i]:
            return None
        return max(at, t)

    def left() -> bool:
        return any(g.refused is None and admitted[n] < g.replicas for n, g in enumerate(groups))

    fits_now = tuple(fill())
    steps: list[Step] = []
    t = now
    while left() and len(steps) < MAX_STEPS:
        times = [d for d in (due(i) for i in range(len(limits))) if d is not None]
        if not times:
            break
        t = min(times)
        raises: dict[tuple[str, str], int] = {}
        for i, lim in enumerate(limits):
            if due(i) == t and lim.growth is not None:
                hard[i] = lim.growth.want(used[i])
                nxt[i] = t + lim.growth.profile.upscale_cooldown
                raises[(lim.quota, lim.key)] = hard[i]
        added = tuple(fill())
        if steps and steps[-1].at == t:  # a key wanting more only after this fill: one step
            last = steps.pop()
            raises = {**last.raises, **raises}
            added = tuple(a + b for a, b in zip(last.admitted, added, strict=True))
        steps.append(Step(t, raises, added))
    never = tuple(
        0 if g.refused is None and admitted[n] >= g.replicas else g.replicas - admitted[n]
        for n, g in enumerate(groups)
    )
    blockers = tuple(
        _blockers(n, limits, hard, used) if never[n] and groups[n].refused is None else ()
        for n in range(len(groups))
    )
    return Schedule(
        now=fits_now,
        steps=tuple(steps),
        never=never,
        blockers=blockers,
        hard={(lim.quota, lim.key): hard[i] for i, lim in enumerate(limits)},
    )


def _blockers(
    g: int, limits: Sequence[Limit], hard: Sequence[int], used: Sequence[int]
) -> tuple[Blocker, ...]:
    """The keys without room for one more pod of group ``g`` at the end, and why."""
    found: list[Blocker] = []
    for i, lim in enumerate(limits):
        per = lim.per_pod[g]
        if per <= 0 or hard[i] - used[i] >= per:
            continue
        found.append(Blocker(lim.quota, lim.key, hard[i], used[i], per, _why(lim, hard[i])))
    return tuple(found)


def _why(lim: Limit, hard: int) -> BlockReason:
    growth = lim.growth
    if growth is None:
        return "fixed"
    if growth.next_raise_after is None:
        return "not-growing"
    if hard >= growth.profile.maximum:
        return "maximum"
    if growth.cap is not None and hard >= growth.cap:
        return "over-budget" if growth.free is not None and growth.free < 0 else "budget"
    return "buffer"
