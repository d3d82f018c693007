"""How many copies of one pod a namespace's quotas admit (Pure): the evaluator put to work
for ``kubectl dynquota fit``.

Quota admission admits a create when, for every quota that matches it and every key the
quota limits, ``used + requested <= hard`` (upstream ``CheckRequest`` in
``staging/src/k8s.io/apiserver/pkg/admission/plugin/resourcequota/controller.go``; here
:func:`dynquota.admission.check.check_request`). For ``n`` identical pods created one after
the other, the ``i``-th is admitted iff ``used + i * requested <= hard`` on every such key,
so one key admits ``floor((hard - used) / requested)`` of them and the namespace the least of
those (:func:`quota_rooms`, :func:`copies_that_fit`). What the pod is charged, which quotas
match it (scopes: ``BestEffort``, ``Terminating``, ``PriorityClass``...) and the constraints a
quota puts on it (``must specify requests.cpu``) are the ported pod evaluator's
(:class:`dynquota.admission.pods.PodEvaluator`); :func:`refusal` asks
:func:`~dynquota.admission.check.check_request` itself for the message the apiserver would
answer to the first pod that does not fit.

The same questions for a PersistentVolumeClaim (a StatefulSet's replica needs its claims as
well as its pod): every function taking a pod takes a claim too (``kind:
PersistentVolumeClaim``), charged and matched by the ported PVC evaluator
(:class:`dynquota.admission.pvcs.PersistentVolumeClaimEvaluator`); :func:`without` takes
what existing objects charge out of the quotas' usage.

Shapes: ``pod`` is Kubernetes JSON after defaulting (the dry run's answer, or
:func:`dynquota.admission.limitranger.apply_limit_range_defaults`); quotas are
:class:`~dynquota.admission.types.ResourceQuota` values (``hard`` is ``status.hard``, what
admission enforces); ``now`` is seconds since the epoch.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import ROUND_FLOOR
from typing import Any

from dynquota.quantity import Quantity, quantity_from_int

from .check import check_request
from .errors import AdmissionError
from .pods import PodEvaluator
from .pvcs import PersistentVolumeClaimEvaluator
from .resources import add, mask, subtract_non_negative
from .types import AdmissionAttributes, Operation, ResourceQuota

__all__ = [
    "KeyRoom",
    "QuotaRoom",
    "copies_that_fit",
    "pod_charge",
    "quota_rooms",
    "refusal",
    "without",
]

_EVALUATOR = PodEvaluator()
_CLAIMS = PersistentVolumeClaimEvaluator()
_ZERO = quantity_from_int(0)


def _evaluator(obj: Mapping[str, Any]) -> PodEvaluator | PersistentVolumeClaimEvaluator:
    """The claim evaluator for a ``PersistentVolumeClaim``, else the pod evaluator."""
    return _CLAIMS if obj.get("kind") == "PersistentVolumeClaim" else _EVALUATOR


def _charge(obj: Mapping[str, Any], now: float) -> dict[str, Quantity]:
    """What quota charges ``obj`` (a pod, or a claim)."""
    return _evaluator(obj).usage(obj, now)


def pod_charge(pod: Mapping[str, Any], now: float) -> dict[str, Quantity]:
    """What quota charges one such pod: ``{"pods": 1, "count/pods": 1, "requests.cpu":
    500m, ...}`` (upstream ``PodUsageFunc``)."""
    return _EVALUATOR.usage(pod, now)


def copies_that_fit(hard: Quantity, used: Quantity, per_pod: Quantity) -> int | None:
    """How many pods charging ``per_pod`` fit between ``used`` and ``hard`` on one key:
    ``floor((hard - used) / per_pod)``, 0 when ``used >= hard``; ``None`` (no bound) when
    the pod charges nothing there."""
    if per_pod <= 0:
        return None
    room = hard.value - used.value
    if room <= 0:
        return 0
    return int((room / per_pod.value).to_integral_value(rounding=ROUND_FLOOR))


@dataclass(frozen=True)
class KeyRoom:
    """One key of a quota that matches the pod: ``hard`` (``status.hard``), ``used``
    (``status.used``; 0 when the quota controller has not counted it yet) and ``per_pod``
    (the pod's charge, 0 when it charges nothing there)."""

    key: str
    hard: Quantity
    used: Quantity
    per_pod: Quantity

    @property
    def fits(self) -> int | None:
        """:func:`copies_that_fit` of this key (``None``: no bound)."""
        return copies_that_fit(self.hard, self.used, self.per_pod)


@dataclass(frozen=True)
class QuotaRoom:
    """One quota of the namespace as it bears on the pod.

    Attributes:
        quota: its name.
        matches: the pod falls under it (it limits a pod resource and the pod is in every one
            of its scopes); a quota that does not match is no constraint.
        problem: why it refuses every such pod whatever the room (``failed quota: NAME: must
            specify requests.cpu for: app``, ``status unknown for quota: NAME, ...``), or
            ``None``.
        keys: the pod resources it limits (only when it matches), in key order.
    """

    quota: str
    matches: bool
    problem: str | None = None
    keys: tuple[KeyRoom, ...] = ()

    @property
    def fits(self) -> int | None:
        """The fewest copies any key admits (0 with a ``problem``; ``None``: no bound)."""
        if self.problem is not None:
            return 0
        bounds = [k.fits for k in self.keys if k.fits is not None]
        return min(bounds) if bounds else None


def quota_rooms(
    quotas: Sequence[ResourceQuota], pod: Mapping[str, Any], now: float
) -> list[QuotaRoom]:
    """Every quota of ``quotas`` (in the order given) as it bears on copies of ``pod``.

    Follows ``CheckRequest``'s first loop: a quota matches when the evaluator says so
    (``Matches``), its constraints come from ``Constraints`` over the pod resources it
    limits (``MatchingResources``), and a limited key missing from ``status.used`` is
    ``status unknown``.

    Raises:
        InvalidObjectError: an amount in the pod is not a quantity.
    """
    evaluator = _evaluator(pod)
    charge = _charge(pod, now)
    rooms: list[QuotaRoom] = []
    for quota in quotas:
        if not evaluator.matches(quota, pod):
            rooms.append(QuotaRoom(quota.name, False))
            continue
        restricted = sorted(evaluator.matching_resources(quota.hard))
        problem = evaluator.constraints(restricted, pod)
        detail = f"failed quota: {quota.name}: {problem}" if problem is not None else None
        if detail is None and any(r not in quota.used for r in restricted):
            names = ",".join(restricted)
            detail = f"status unknown for quota: {quota.name}, resources: {names}"
        keys = tuple(
            KeyRoom(r, quota.hard[r], quota.used.get(r, _ZERO), charge.get(r, _ZERO))
            for r in restricted
        )
        rooms.append(QuotaRoom(quota.name, True, detail, keys))
    return rooms


def refusal(
    quotas: Sequence[ResourceQuota],
    pod: Mapping[str, Any],
    now: float,
    charged: Sequence[tuple[Mapping[str, Any], int]] = (),
) -> str | None:
    """The apiserver's answer to one more copy of ``pod`` once each ``(pod, count)`` of
    ``charged`` was charged (``count`` copies of that pod, to the quotas that match it), or
    ``None`` when it is admitted: ``pods "NAME" is forbidden: exceeded quota: NAME,
    requested: ..., used: ..., limited: ...`` (the message of
    :func:`~dynquota.admission.check.check_request`)."""
    current = list(quotas)
    for earlier, count in charged:
        if count <= 0:
            continue
        charge = _charge(earlier, now)
        for i, quota in enumerate(current):
            if _evaluator(earlier).matches(quota, earlier):
                extra = {k: _times(v, count) for k, v in mask(charge, quota.hard).items()}
                current[i] = quota.with_used(add(quota.used, extra))
    meta = pod.get("metadata") or {}
    evaluator = _evaluator(pod)
    attributes = AdmissionAttributes(
        namespace=str(meta.get("namespace") or ""),
        resource=evaluator.group_resource,
        operation=Operation.CREATE,
        object=pod,
        name=str(meta.get("name") or ""),
    )
    try:
        check_request(current, attributes, evaluator, now)
    except AdmissionError as exc:
        return str(exc)
    return None


def _times(amount: Quantity, n: int) -> Quantity:
    """``amount * n`` exactly, in ``amount``'s format."""
    return Quantity(amount.value * n, amount.format)


def without(
    quotas: Sequence[ResourceQuota], existing: Sequence[Mapping[str, Any]], now: float
) -> list[ResourceQuota]:
    """``quotas`` with what each of ``existing`` (pods or claims that exist and are counted in
    ``status.used``) charges taken out of the quotas that match it, never below zero: the
    usage without a workload's own pods, which a scale or rollout replaces."""
    current = list(quotas)
    for obj in existing:
        charge = _charge(obj, now)
        for i, quota in enumerate(current):
            if _evaluator(obj).matches(quota, obj):
                current[i] = quota.with_used(
                    subtract_non_negative(quota.used, mask(charge, quota.used))
                )
    return current
