"""What ``kubectl dynquota fit`` answers, from what it read (Pure: ``now`` passed in).

The glue between the two pure cores: the bundled admission evaluator
(:mod:`dynquota.admission.fit`: what one pod is charged, which quotas match it, how many
copies each key admits, the apiserver's refusal text) and the raise schedule
(:mod:`dynquota.policy.fit`: when the keys dynquota sizes grow and what fills them). It turns
every quota of the namespace into :class:`~dynquota.policy.fit.Limit` values in each key's
integer units (:mod:`dynquota.policy.units`; a key sizing does not know in nano-units), the
tenant projection ``AppliedDynamicQuota`` into :class:`~dynquota.policy.fit.Growth` values
(the policy's bounds and cooldowns, ``nextRaiseAfter``, the budget's slice plus free room),
and the answer into a :class:`~dynquota.cli.fit_report.FitReport` that
:mod:`dynquota.cli.fit_text` prints.

The schedule's groups are a workload's runs of replicas (:meth:`Candidate.runs`): one replica
charges its pod and, for a StatefulSet, the claims it still needs (a run ends where an
existing claim changes that), and a rollout's surge is one more group after its replicas. The
workload's own pods are taken out of the quotas' usage first (``without``), so the replicas
asked for replace them.

Units: a hard limit is rounded down to a whole unit, usage and per-pod charges up, so a
fraction of a unit never makes a pod fit that the apiserver would refuse.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal
from typing import Any, Final

from dynquota.admission.fit import copies_that_fit, quota_rooms, refusal, without
from dynquota.admission.types import ResourceQuota
from dynquota.cli.fit_manifest import Workload
from dynquota.cli.fit_report import Block, FitReport, Later, Row, Step, WorkloadFit
from dynquota.cli.fit_workload import claim_name, claim_runs
from dynquota.names import MANAGED_BY_LABEL, MANAGED_BY_VALUE, MANAGED_QUOTA_NAME
from dynquota.policy.durations import parse_duration
from dynquota.policy.fit import Blocker, Group, Growth, Limit, Schedule, schedule
from dynquota.policy.profiles import ResourceProfile
from dynquota.policy.state import format_time, parse_time
from dynquota.policy.units import KeyUnit, unit_for
from dynquota.quantity import Format, Quantity, format_quantity, parse_quantity

__all__ = ["Candidate", "evaluate", "shown"]

_NANO: Final = Decimal("1e-9")


@dataclass(frozen=True)
class Candidate:
    """A workload as evaluated: the ``pod`` as admission sees it (the dry run's answer, or the
    manifest's pod with LimitRange defaults applied here) and ``refused``: why the apiserver
    refuses it whatever the room (a dry-run refusal other than exceeded quota), or ``None``;
    what of it exists (:mod:`dynquota.cli.fit_workload`): ``own``, its pods counted in the
    quotas' usage now (taken out: the manifest's replicas replace them), ``surge``, the pods a
    rollout runs above its replicas, ``existing_claims``, the names of the namespace's claims
    (a StatefulSet's replica whose claim exists needs no new one)."""

    workload: Workload
    pod: Mapping[str, Any]
    refused: str | None = None
    own: tuple[Mapping[str, Any], ...] = ()
    surge: int = 0
    existing_claims: frozenset[str] = frozenset()

    @property
    def claims(self) -> tuple[dict[str, Any], ...]:
        """The workload's claim templates as claims in the pod's namespace."""
        namespace = (self.pod.get("metadata") or {}).get("namespace")
        return tuple(
            {**c, "metadata": {**c["metadata"], "namespace": namespace}}
            for c in self.workload.claims
        )

    def claim(self, index: int, ordinal: int) -> dict[str, Any]:
        """Claim template ``index`` as replica ``ordinal``'s claim (named as the StatefulSet
        controller names it)."""
        claim = self.claims[index]
        name = claim_name(claim, self.workload.name, ordinal)
        return {**claim, "metadata": {**claim["metadata"], "name": name}}

    def runs(self) -> list[tuple[int, int, tuple[int, ...]]]:
        """The pods to create as runs ``(first ordinal, count, new claims)``
        (:func:`~dynquota.cli.fit_workload.claim_runs`), then the rollout's surge."""
        runs = claim_runs(self.workload, self.existing_claims)
        if self.surge:
            runs.append((self.workload.replicas, self.surge, ()))
        return runs


def _unit(key: str) -> KeyUnit | None:
    try:
        return unit_for(key)
    except ValueError:
        return None


def _units(amount: Quantity, key: str, down: bool = False) -> int:
    """``amount`` as whole units of ``key`` (nano-units for a key sizing does not know),
    rounded down (``down``) or up."""
    unit = _unit(key)
    step = unit.step if unit is not None else _NANO
    rounding = ROUND_FLOOR if down else ROUND_CEILING
    return int((amount.value / step).to_integral_value(rounding=rounding))


def shown(amount: Quantity, key: str) -> str:
    """``amount`` of ``key`` as the table prints it: canonical text (``0.5`` -> ``500m``,
    ``1.5Gi`` -> ``1536Mi``), exponent notation with SI suffixes as the blocker and raise
    lines print it (``1e3`` -> ``1k``), a count as a plain number (``1000`` pods)."""
    unit = _unit(key)
    if unit is not None and unit.counted and amount.value == amount.value.to_integral_value():
        return str(int(amount.value))
    fmt: Format = "DecimalSI" if amount.format == "DecimalExponent" else amount.format
    return format_quantity(amount.value, fmt)


def _text(units: int, key: str) -> str:
    unit = _unit(key)
    return unit.text(units) if unit is not None else str(Quantity(Decimal(units) * _NANO))


def is_managed(quota: Mapping[str, Any]) -> bool:
    """Whether ``quota`` (JSON) is dynquota's: named ``dynquota`` and labelled managed-by."""
    meta = quota.get("metadata") or {}
    labels = meta.get("labels") or {}
    return meta.get("name") == MANAGED_QUOTA_NAME and labels.get(MANAGED_BY_LABEL) == (
        MANAGED_BY_VALUE
    )


def growths(status: Mapping[str, Any], notes: list[str]) -> dict[str, Growth]:
    """How each key of the projection's policy grows (``status`` of the AppliedDynamicQuota);
    a key whose shown profile cannot be read is left out, with a line in ``notes``."""
    enforced = status.get("state") == "Enforced"
    resources = (status.get("policy") or {}).get("resources") or {}
    budget = status.get("budget") or {}
    found: dict[str, Growth] = {}
    for key, shown in resources.items():
        try:
            unit = unit_for(key)
            profile = ResourceProfile.of(
                int(shown["bufferPercent"]),
                unit.parse(str(shown["minimum"])),
                unit.parse(str(shown["maximum"])),
                parse_duration(str(shown["upscaleCooldown"])),
                parse_duration(str(shown["downscaleCooldown"])),
                unit.parse(str(shown["roundTo"])) if "roundTo" in shown else None,
                unit.parse(str(shown.get("minimumHeadroom", "0"))),
            )
            after = shown.get("nextRaiseAfter")
            next_raise = parse_time(str(after)) if enforced and after else None
            cap, name, free = None, "", None
            if key in (budget.get("hard") or {}):
                name = str(budget.get("name") or "")
                slice_, free = (_signed(budget, p, key, unit) for p in ("slice", "free"))
                cap = (slice_ or 0) + (free or 0)
        except (KeyError, TypeError, ValueError) as exc:
            notes.append(f"the projection's profile of {key} cannot be read ({exc}): not sized")
            continue
        found[key] = Growth(profile, unit.granularity, next_raise, cap, name, free)
    return found


def _signed(budget: Mapping[str, Any], part: str, key: str, unit: KeyUnit) -> int | None:
    """The budget's ``part`` (``slice``, ``free``) of ``key`` in whole units, or ``None``;
    ``free`` is negative when the budget is over (docs/budgets.md: ``hard - granted``).

    Raises:
        QuantityError: not a quantity.
    """
    value = (budget.get(part) or {}).get(key)
    return None if value is None else unit.units(parse_quantity(str(value)))


def evaluate(
    namespace: str,
    candidates: Sequence[Candidate],
    quotas: Sequence[Mapping[str, Any]],
    applied: Mapping[str, Any] | None,
    now: int,
    not_read: Sequence[tuple[str, str]] = (),
    notes: Sequence[str] = (),
) -> FitReport:
    """The answer for ``candidates`` in ``namespace`` with its ``quotas`` (ResourceQuota JSON
    as listed), its AppliedDynamicQuota ``applied`` (``None``: not read, or none; then
    dynquota's quota is taken as fixed) at ``now`` (seconds since the epoch). The candidates'
    own pods are taken out of the quotas' usage first (:attr:`Candidate.own`)."""
    lines = list(notes)
    ordered = sorted(quotas, key=lambda q: str((q.get("metadata") or {}).get("name")))
    own = [p for c in candidates for p in c.own]
    parsed = without([ResourceQuota.from_object(q) for q in ordered], own, now)
    managed = {str((q.get("metadata") or {}).get("name")) for q in ordered if is_managed(q)}
    status = (applied or {}).get("status") or {}
    grow = growths(status, lines) if managed and applied is not None else {}
    state = status.get("state")
    if applied is not None and state not in (None, "Enforced"):
        lines.append(f"dynquota's state here is {state}: {status.get('message', '')}")
    until = ((status.get("policy") or {}).get("override") or {}).get("activeUntil")
    if managed and until:
        lines.append(f"the override is active until {until}: the schedule assumes it stays")
    scoped = {q.name for q in parsed if q.scope_selectors()}
    limits: dict[tuple[str, str], list[Any]] = {}
    groups: list[tuple[int, Group, tuple[int, int, tuple[int, ...]]]] = []  # (candidate, ...)
    rows: list[Row] = []
    for n, candidate in enumerate(candidates):
        title = candidate.workload.title
        objects = [candidate.pod, *candidate.claims]
        charges: list[dict[tuple[str, str], tuple[Quantity, Quantity, Quantity]]] = []
        why = candidate.refused
        for i, obj in enumerate(objects):
            charges.append({})
            for room in quota_rooms(parsed, obj, now):
                if not room.matches:
                    if i == 0 and room.quota in scoped:
                        lines.append(
                            f"quota {room.quota} does not apply to {title}'s pods (its scopes "
                            "do not match them)"
                        )
                    continue
                why = why or room.problem
                for k in room.keys:
                    if k.per_pod > 0:
                        charges[i][(room.quota, k.key)] = (k.hard, k.used, k.per_pod)
        for run in candidate.runs():
            g = len(groups)
            groups.append((n, Group(title, run[1], why, len(run[2])), run))
            # a replica's objects in the order they are created: its new claims, then its pod
            order = (*(1 + j for j in run[2]), 0)
            for part, i in enumerate(order):
                for q_key, (hard, used, per) in charges[i].items():
                    parts = limits.setdefault(q_key, [hard, used, {}])[2]
                    parts.setdefault(g, [Quantity(Decimal(0))] * len(order))[part] = per
        rows += _rows(title, charges, managed, grow)
    plain = [_limit(quota, key, hard, used, parts, len(groups), groups,
                    grow.get(key) if quota in managed else None)
             for (quota, key), (hard, used, parts) in limits.items()]  # fmt: skip
    answer = schedule([group for _, group, _ in groups], plain, now)
    fits = [
        _workload_fit(n, candidates, groups, answer, parsed, now, grow)
        for n in range(len(candidates))
    ]
    steps = tuple(
        Step(
            format_time(s.at),
            tuple((q, k, _text(h, k)) for (q, k), h in s.raises.items()),
            {
                c.workload.title: sum(s.admitted[g] for g, (m, _, _) in enumerate(groups) if m == n)
                for n, c in enumerate(candidates)
            },
        )
        for s in answer.steps
    )
    return FitReport(
        namespace, format_time(now), tuple(fits), tuple(rows), steps, tuple(not_read), tuple(lines)
    )


def _limit(
    quota: str,
    key: str,
    hard: Quantity,
    used: Quantity,
    parts: Mapping[int, Sequence[Quantity]],
    count: int,
    groups: Sequence[tuple[int, Group, tuple[int, int, tuple[int, ...]]]],
    growth: Growth | None,
) -> Limit:
    """The :class:`Limit` of one quota key: ``parts`` is, per group charged here, what each
    object of one replica charges (its new claims in creation order, then its pod) of the
    ``count`` groups; each charge rounded up to whole units (each is admitted on its own)."""
    units = {g: [_units(c, key) for c in charged] for g, charged in parts.items()}
    per_claim = tuple(
        tuple(units[g][:-1]) if g in units else (0,) * groups[g][1].claims for g in range(count)
    )
    return Limit(
        quota,
        key,
        _units(hard, key, down=True),
        _units(used, key),
        tuple(sum(units[g]) if g in units else 0 for g in range(count)),
        growth,
        per_claim if any(per_claim) else (),
    )


def _rows(
    title: str,
    charges: Sequence[Mapping[tuple[str, str], tuple[Quantity, Quantity, Quantity]]],
    managed: set[str],
    grow: Mapping[str, Growth],
) -> list[Row]:
    """The table's lines for one workload: per quota and key, what one replica charges (its
    pod and every claim it may need)."""
    total: dict[tuple[str, str], tuple[Quantity, Quantity, Quantity]] = {}
    for charge in charges:
        for q_key, (hard, used, per) in charge.items():
            before = total.get(q_key)
            total[q_key] = (hard, used, per if before is None else before[2] + per)
    return [
        Row(title, quota, key, shown(hard, key), shown(used, key), shown(per, key),
            copies_that_fit(hard, used, per), quota in managed and key in grow)
        for (quota, key), (hard, used, per) in sorted(total.items())
    ]  # fmt: skip


def _workload_fit(
    n: int,
    candidates: Sequence[Candidate],
    groups: Sequence[tuple[int, Group, tuple[int, int, tuple[int, ...]]]],
    answer: Schedule,
    quotas: Sequence[ResourceQuota],
    now: int,
    grow: Mapping[str, Growth],
) -> WorkloadFit:
    """Candidate ``n``'s answer from its groups' (:meth:`Candidate.runs`) in ``answer``."""
    candidate = candidates[n]
    mine = [g for g, (m, _, _) in enumerate(groups) if m == n]
    later = tuple(
        Later(format_time(s.at), sum(s.admitted[g] for g in mine))
        for s in answer.steps
        if any(s.admitted[g] for g in mine)
    )
    never = sum(answer.never[g] for g in mine)
    blocks: dict[tuple[str, str], Block] = {}
    what = "pod or claim" if candidate.workload.claims else "pod"
    for g in mine:
        for b in answer.blockers[g]:
            blocks.setdefault((b.quota, b.key), _block(b, grow, what))
    refused = groups[mine[0]][1].refused if mine else candidate.refused
    next_refusal = None
    waiting = [g for g in mine if answer.now[g] < groups[g][1].replicas]
    if waiting and refused is None:
        next_refusal = _next_refusal(waiting[0], candidates, groups, answer, quotas, now)
    return WorkloadFit(
        candidate.workload.title,
        candidate.workload.replicas,
        sum(answer.now[g] for g in mine),
        later,
        never,
        refused,
        next_refusal,
        tuple(blocks.values()),
        _all_fit_at(later, never, now),
        candidate.surge,
    )


def _next_refusal(
    g: int,
    candidates: Sequence[Candidate],
    groups: Sequence[tuple[int, Group, tuple[int, int, tuple[int, ...]]]],
    answer: Schedule,
    quotas: Sequence[ResourceQuota],
    now: int,
) -> str | None:
    """The apiserver's answer to the next replica of group ``g`` once what fits now of it and
    of every group before it was created: its new claims first (as the StatefulSet
    controller creates them), then its pod; ``None`` if all are admitted."""
    charged: list[tuple[Mapping[str, Any], int]] = []
    for h in range(g + 1):
        m, _, (_, _, need) = groups[h]
        created = candidates[m]
        charged += [(created.pod, answer.now[h])]
        charged += [(created.claims[j], answer.now[h]) for j in need]
        if h < g:  # the claims an earlier group's waiting replica holds already
            charged += [(created.claims[need[p]], 1) for p in answer.claims_now[h]]
    n, _, (first, _, need) = groups[g]
    candidate = candidates[n]
    ordinal = first + answer.now[g]
    for obj in [*(candidate.claim(j, ordinal) for j in need), candidate.pod]:
        why = refusal(quotas, obj, now, charged)
        if why is not None:
            return why
        charged.append((obj, 1))
    return None


def _all_fit_at(later: Sequence[Later], never: int, now: int) -> str | None:
    """When the workload's last pod fits (RFC 3339): ``now`` when all fit now, the last raise
    that admits some, ``None`` when some never fit."""
    if never:
        return None
    return later[-1].at if later else format_time(now)


def _block(b: Blocker, grow: Mapping[str, Growth], what: str = "pod") -> Block:
    """A :class:`Block` with the message that says what to do about it (``what``: the objects
    a replica creates, ``pod`` or ``pod or claim``)."""
    hard, used, per = (_text(v, b.key) for v in (b.hard, b.used, b.per_pod))
    growth = grow.get(b.key)
    where = f"quota {b.quota} {b.key} (hard {hard}, used {used}, {per} a pod)"
    if b.reason == "fixed":
        message = f"{where}: not sized by dynquota; whoever owns that quota can raise it"
    elif b.reason == "maximum" and growth is not None and b.hard < growth.profile.maximum:
        top = _text(growth.profile.maximum, b.key)
        message = (
            f"{where}: one {what} needs more than the policy maximum ({top}) leaves, so it "
            "never fits, not even with the override; ask the platform team for a higher maximum"
        )
    elif b.reason == "maximum":
        message = f"{where}: at the policy maximum; ask the platform team for a higher one"
    elif b.reason == "budget":
        name = growth.budget if growth is not None else ""
        message = (
            f"{where}: up to the budget slice and the free room of QuotaBudget {name}; "
            "ask the platform team for a larger budget"
        )
    elif b.reason == "over-budget" and growth is not None:
        free = _text(-(growth.free or 0), b.key)
        message = (
            f"{where}: QuotaBudget {growth.budget} is over budget ({free} more granted than its "
            "hard): no member grows until some give room back; ask the platform team for a "
            "larger budget"
        )
    elif b.reason == "buffer":
        message = (
            f"{where}: one {what} needs more than the room the policy's buffer leaves, so the "
            "quota never grows for it; request the override, or ask for a minimumHeadroom of "
            f"at least one {what}"
        )
    else:
        message = f"{where}: dynquota records no raise for it (not enforced, or frozen)"
    return Block(b.quota, b.key, b.reason, hard, used, per, message)
