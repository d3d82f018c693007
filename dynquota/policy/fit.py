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
   A replica that creates objects before its pod (a StatefulSet's claims,
   :attr:`Group.claims`) is not admitted whole: each claim is admitted on its own when every
   key it is charged to has room for it (the StatefulSet controller's
   ``createPersistentVolumeClaims`` tries each of a replica's claims, whatever the others'
   answer), the pod only once all its claims exist. A claim admitted stays and is usage, for
   the next pod and for sizing, even while its replica's pod waits: so a key whose room is
   less than a replica's claims still grows when one claim fits (its usage moves its target).
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

from collections.abc import Mapping, Sequence, Set
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
``maximum`` (at the policy maximum, or the replica's objects still to create need more than
the maximum leaves: one pod or claim above it), ``budget`` (at the budget slice plus its free room),
``over-budget`` (the same, the budget's free room negative: its namespaces hold more than its
hard, and no member grows until some give room back),
``buffer`` (one pod needs more than the room the target leaves: the key never grows for it,
and the maximum and the budget's room would hold it),
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
        per_pod: per group (same order as the groups), what one replica charges here in units
            (its pod and its claims); 0 when the group is not charged here (its pods charge
            nothing there, or the quota's scopes do not match them).
        growth: how dynquota grows the key, or ``None`` (it stays at ``hard``).
        per_claim: per group, what each claim a replica creates before its pod charges here,
            in units, in creation order (:attr:`Group.claims` entries; the pod charges the
            rest of ``per_pod``); empty: no group has claims.
    """

    quota: str
    key: str
    hard: int
    used: int
    per_pod: tuple[int, ...]
    growth: Growth | None = None
    per_claim: tuple[tuple[int, ...], ...] = ()

    def part(self, group: int, index: int) -> int:
        """What part ``index`` of one replica of ``group`` charges here, in units: claim
        ``index`` (``index < claims``), else the pod (what ``per_pod`` leaves)."""
        claims = self.per_claim[group] if self.per_claim else ()
        return claims[index] if index < len(claims) else self.per_pod[group] - sum(claims)


@dataclass(frozen=True)
class Group:
    """Identical pods to create: ``name`` (``Deployment/web``), ``replicas``, ``refused``:
    why none of them is ever admitted whatever the room (an admission refusal other than
    exceeded quota, ``failed quota: ...: must specify ...``), or ``None``, and ``claims``: how
    many objects each replica creates before its pod, each admitted on its own (a
    StatefulSet's new claims; their charges are :attr:`Limit.per_claim`)."""

    name: str
    replicas: int
    refused: str | None = None
    claims: int = 0


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
        blockers: per group, the keys that hold those back (empty when all fit), the key that
            refuses the replica's next object first.
        hard: the final hard of every limit, ``(quota, key)`` -> units.
        claims_now: per group, the indexes of the claims of its next replica admitted now
            (the replica after those of ``now``; its pod waits), empty when none.
    """

    now: tuple[int, ...]
    steps: tuple[Step, ...] = ()
    never: tuple[int, ...] = ()
    blockers: tuple[tuple[Blocker, ...], ...] = ()
    hard: Mapping[tuple[str, str], int] = field(default_factory=dict)
    claims_now: tuple[tuple[int, ...], ...] = ()

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
    made: list[set[int]] = [set() for _ in groups]  # the next replica's claims admitted

    def room(g: int, part: int) -> bool:
        """Whether every key part ``part`` of one replica of group ``g`` is charged to has
        room for it."""
        return all(
            used[i] + c <= hard[i] for i, lim in enumerate(limits) if (c := lim.part(g, part)) > 0
        )

    def take(g: int, part: int) -> None:
        for i, lim in enumerate(limits):
            used[i] += lim.part(g, part)

    def advance(g: int) -> bool:
        """Admit what fits of group ``g``'s next replica: each claim not made yet that has
        room, then its pod once all are made; whether the pod was admitted."""
        claims = groups[g].claims
        for part in range(claims):
            if part not in made[g] and room(g, part):
                take(g, part)
                made[g].add(part)
        if len(made[g]) < claims or not room(g, claims):
            return False
        take(g, claims)
        made[g] = set()
        admitted[g] += 1
        return True

    def fill() -> list[int]:
        added = [0] * len(groups)
        for g, group in enumerate(groups):
            if group.refused is not None or admitted[g] >= group.replicas:
                continue
            if made[g]:  # a replica with claims made: its other claims and pod come first
                if not advance(g):
                    continue
                added[g] += 1
            k = group.replicas - admitted[g]
            for i, lim in enumerate(limits):
                per = lim.per_pod[g]
                if per > 0:
                    k = min(k, max(0, (hard[i] - used[i]) // per))
            if k > 0:
                added[g] += k
                admitted[g] += k
                for i, lim in enumerate(limits):
                    used[i] += k * lim.per_pod[g]
            if group.claims and admitted[g] < group.replicas:
                added[g] += advance(g)  # its claims that fit now (its pod does not: k is all)
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
    claims_now = tuple(tuple(sorted(m)) for m in made)
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
        _blockers(n, groups[n], made[n], limits, hard, used)
        if never[n] and groups[n].refused is None
        else ()
        for n in range(len(groups))
    )
    return Schedule(
        now=fits_now,
        steps=tuple(steps),
        never=never,
        blockers=blockers,
        hard={(lim.quota, lim.key): hard[i] for i, lim in enumerate(limits)},
        claims_now=claims_now,
    )


def _blockers(
    g: int,
    group: Group,
    made: Set[int],
    limits: Sequence[Limit],
    hard: Sequence[int],
    used: Sequence[int],
) -> tuple[Blocker, ...]:
    """The keys without room at the end for what group ``g``'s next replica still needs (its
    claims not ``made`` and its pod), and why: first the keys that refuse its first object
    refused (the controller's first refusal), then the other keys short of room for one of
    its objects or for all of them."""
    parts = [p for p in range(group.claims) if p not in made] + [group.claims]
    found: list[tuple[int, Blocker]] = []
    for i, lim in enumerate(limits):
        need = [lim.part(g, p) for p in parts]
        free = hard[i] - used[i]
        if not any(need) or sum(need) <= free:
            continue
        first = next((n for n, c in enumerate(need) if c > free), len(parts))
        why = _why(lim, used[i] + sum(need))
        blocker = Blocker(lim.quota, lim.key, hard[i], used[i], lim.per_pod[g], why)
        found.append((first, blocker))
    return tuple(b for _, b in sorted(found, key=lambda f: f[0]))


def _why(lim: Limit, reach: int) -> BlockReason:
    """Why ``lim`` holds a replica back for good; ``reach`` is the usage it would have with the
    replica's objects still to create (units, above its final hard). A replica that
    the maximum (or the budget's room) cannot hold, even with the override, is blamed on it,
    whatever the key's raises: one object above the maximum never fits (docs/tenants.md)."""
    growth = lim.growth
    if growth is None:
        return "fixed"
    if reach > growth.profile.maximum:
        return "maximum"
    if growth.next_raise_after is None:
        return "not-growing"
    if growth.cap is not None and reach > growth.cap:
        return "over-budget" if growth.free is not None and growth.free < 0 else "budget"
    return "buffer"
