"""What ``kubectl dynquota fit`` answers, from what it read (Pure: ``now`` passed in).

The glue between the two pure cores: the bundled admission evaluator
(:mod:`dynquota.admission.fit`: what one pod is charged, which quotas match it, how many
copies each key admits, the apiserver's refusal text) and the raise schedule
(:mod:`dynquota.policy.fit`: when the keys dynquota sizes grow and what fills them). It turns
every quota of the namespace into :class:`~dynquota.policy.fit.Limit` values in each key's
integer units (:mod:`dynquota.policy.units`; a key sizing does not know in nano-units), the
tenant projection ``AppliedDynamicQuota`` into :class:`~dynquota.policy.fit.Growth` values
(the policy's bounds and cooldowns, ``nextRaiseAfter``, the budget's slice plus free room),
and the answer into a :class:`FitReport` that :mod:`dynquota.cli.fit_text` prints.

Units: a hard limit is rounded down to a whole unit, usage and per-pod charges up, so a
fraction of a unit never makes a pod fit that the apiserver would refuse.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal
from typing import Any, Final

from dynquota.admission.fit import quota_rooms, refusal
from dynquota.admission.types import ResourceQuota
from dynquota.cli.fit_manifest import Workload
from dynquota.names import MANAGED_BY_LABEL, MANAGED_BY_VALUE, MANAGED_QUOTA_NAME
from dynquota.policy.durations import parse_duration
from dynquota.policy.fit import Blocker, Group, Growth, Limit, schedule
from dynquota.policy.profiles import ResourceProfile
from dynquota.policy.state import format_time, parse_time
from dynquota.policy.units import KeyUnit, unit_for
from dynquota.quantity import Format, Quantity, format_quantity, parse_quantity

__all__ = ["Block", "Candidate", "FitReport", "Later", "Row", "Step", "WorkloadFit", "evaluate"]

_NANO: Final = Decimal("1e-9")


@dataclass(frozen=True)
class Candidate:
    """A workload as evaluated: the ``pod`` as admission sees it (the dry run's answer, or the
    manifest's pod with LimitRange defaults applied here) and ``refused``: why the apiserver
    refuses it whatever the room (a dry-run refusal other than exceeded quota), or ``None``."""

    workload: Workload
    pod: Mapping[str, Any]
    refused: str | None = None


@dataclass(frozen=True)
class Row:
    """One quota key that one workload's pods are charged to: quantity texts, ``fits`` (how
    many of its pods this key alone admits now; ``None``: no bound) and ``sized`` (dynquota
    sizes the key)."""

    workload: str
    quota: str
    key: str
    hard: str
    used: str
    per_pod: str
    fits: int | None
    sized: bool


@dataclass(frozen=True)
class Later:
    """``pods`` more of a workload fit at ``at`` (RFC 3339)."""

    at: str
    pods: int


@dataclass(frozen=True)
class Block:
    """What holds a workload's remaining pods back: ``quota``, ``key``, the ``reason``
    (:data:`dynquota.policy.fit.BlockReason`), the key's final ``hard`` and ``used`` and the
    ``per_pod`` charge (quantity texts) and a ``message`` for people."""

    quota: str
    key: str
    reason: str
    hard: str
    used: str
    per_pod: str
    message: str


@dataclass(frozen=True)
class WorkloadFit:
    """The answer for one workload: of ``replicas``, ``fits_now``, ``later`` (what each raise
    admits), ``never`` (never under the current policy), ``refused`` (refused whatever the
    room), ``next_refusal`` (the apiserver's answer to its first pod that does not fit now,
    from the evaluator), ``blocked_by`` and ``all_fit_at`` (RFC 3339: when its last pod fits,
    the time of the answer when all fit now; ``None``: some never fit)."""

    workload: str
    replicas: int
    fits_now: int
    later: tuple[Later, ...] = ()
    never: int = 0
    refused: str | None = None
    next_refusal: str | None = None
    blocked_by: tuple[Block, ...] = ()
    all_fit_at: str | None = None


@dataclass(frozen=True)
class Step:
    """A raise to come: ``at`` (RFC 3339), ``raises`` (``(quota, key, new hard)`` texts) and
    the ``pods`` of each workload it admits."""

    at: str
    raises: tuple[tuple[str, str, str], ...]
    pods: Mapping[str, int]


@dataclass(frozen=True)
class FitReport:
    """Everything ``fit`` prints; :attr:`exit_code` 0 when every pod fits now, else 1."""

    namespace: str
    as_of: str
    workloads: tuple[WorkloadFit, ...]
    rows: tuple[Row, ...]
    steps: tuple[Step, ...]
    not_read: tuple[tuple[str, str], ...] = ()
    notes: tuple[str, ...] = ()

    @property
    def exit_code(self) -> int:
        """0: every pod of every workload fits now; 1: some fit only later or never."""
        return 0 if all(w.fits_now == w.replicas for w in self.workloads) else 1


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
    dynquota's quota is taken as fixed) at ``now`` (seconds since the epoch)."""
    lines = list(notes)
    ordered = sorted(quotas, key=lambda q: str((q.get("metadata") or {}).get("name")))
    parsed = [ResourceQuota.from_object(q) for q in ordered]
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
    refused: list[str | None] = []
    rows: list[Row] = []
    for g, candidate in enumerate(candidates):
        why = candidate.refused
        for room in quota_rooms(parsed, candidate.pod, now):
            if not room.matches:
                if room.quota in scoped:
                    lines.append(
                        f"quota {room.quota} does not apply to {candidate.workload.title}'s "
                        "pods (its scopes do not match them)"
                    )
                continue
            why = why or room.problem
            for k in room.keys:
                if k.per_pod <= 0:
                    continue
                entry = limits.setdefault((room.quota, k.key), [k.hard, k.used, {}])
                entry[2][g] = k.per_pod
                sized = room.quota in managed and k.key in grow
                rows.append(Row(candidate.workload.title, room.quota, k.key, shown(k.hard, k.key),
                                shown(k.used, k.key), shown(k.per_pod, k.key), k.fits,
                                sized))  # fmt: skip
        refused.append(why)
    groups = [
        Group(c.workload.title, c.workload.replicas, refused[g]) for g, c in enumerate(candidates)
    ]
    plain = [
        Limit(
            quota,
            key,
            _units(hard, key, down=True),
            _units(used, key),
            tuple(_units(per[g], key) if g in per else 0 for g in range(len(candidates))),
            grow.get(key) if quota in managed else None,
        )
        for (quota, key), (hard, used, per) in limits.items()
    ]
    answer = schedule(groups, plain, now)
    fits: list[WorkloadFit] = []
    for g, candidate in enumerate(candidates):
        later = tuple(
            Later(format_time(s.at), s.admitted[g]) for s in answer.steps if s.admitted[g]
        )
        left = candidate.workload.replicas - answer.now[g]
        next_refusal = None
        if left and refused[g] is None:
            charged = [(c.pod, answer.now[n]) for n, c in enumerate(candidates[: g + 1])]
            next_refusal = refusal(parsed, candidate.pod, now, charged)
        blocks = tuple(_block(b, grow) for b in answer.blockers[g])
        fits.append(
            WorkloadFit(
                candidate.workload.title,
                candidate.workload.replicas,
                answer.now[g],
                later,
                answer.never[g],
                refused[g],
                next_refusal,
                blocks,
                _all_fit_at(later, answer.never[g], now),
            )
        )
    steps = tuple(
        Step(
            format_time(s.at),
            tuple((q, k, _text(h, k)) for (q, k), h in s.raises.items()),
            {c.workload.title: s.admitted[n] for n, c in enumerate(candidates)},
        )
        for s in answer.steps
    )
    return FitReport(
        namespace, format_time(now), tuple(fits), tuple(rows), steps, tuple(not_read), tuple(lines)
    )


def _all_fit_at(later: Sequence[Later], never: int, now: int) -> str | None:
    """When the workload's last pod fits (RFC 3339): ``now`` when all fit now, the last raise
    that admits some, ``None`` when some never fit."""
    if never:
        return None
    return later[-1].at if later else format_time(now)


def _block(b: Blocker, grow: Mapping[str, Growth]) -> Block:
    """A :class:`Block` with the message that says what to do about it."""
    hard, used, per = (_text(v, b.key) for v in (b.hard, b.used, b.per_pod))
    growth = grow.get(b.key)
    where = f"quota {b.quota} {b.key} (hard {hard}, used {used}, {per} a pod)"
    if b.reason == "fixed":
        message = f"{where}: not sized by dynquota; whoever owns that quota can raise it"
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
            f"{where}: one pod needs more than the room the policy's buffer leaves, so the "
            "quota never grows for it; request the override, or ask for a minimumHeadroom of "
            "at least one pod"
        )
    else:
        message = f"{where}: dynquota records no raise for it (not enforced, or frozen)"
    return Block(b.quota, b.key, b.reason, hard, used, per, message)
