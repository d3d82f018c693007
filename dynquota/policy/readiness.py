"""The summary conditions of dynquota's custom resources, and a budget's summary line (Pure).

``Ready`` (for people, ``kubectl wait --for=condition=Ready`` and Flux), and kstatus'
``Reconciling`` and ``Stalled`` (abnormal-true: ``True`` only while working, or stuck), derived
from the conditions the status writers already set (:mod:`dynquota.policy.status`,
``operator/budget_report.py``). kstatus (sigs.k8s.io/cli-utils ``pkg/kstatus/status``) reads
``Stalled=True`` as Failed, ``Reconciling=True`` as InProgress and, with both False and
``status.observedGeneration`` current, Current; Argo CD's health check in docs/operator.md
reads the same three.

DynamicQuotaPolicy:

- ``Valid=False``: Ready False, Stalled True (``InvalidSpec``): it freezes its namespaces
  until someone fixes the spec.
- ``QuotaControllerStalled=True``: Ready False, Stalled True (``QuotaControllerStalled``):
  nothing dynquota can do until kube-controller-manager recovers.
- no ``Valid`` yet: Ready Unknown, Reconciling True (``NotObserved``).
- otherwise Ready True (``Applied``; the message notes a ``Shadowed`` or unguarded policy).

QuotaBudget:

- ``Valid=False``: Ready False, Stalled True (``InvalidSpec``).
- ``OverBudget=True``: Ready False, Stalled True (``OverBudget``): nothing is granted until
  usage falls or the budget is raised.
- ``AtRisk=True``: Ready False, Reconciling True (``AtRisk``): a member has no enforced slice
  yet.
- ``Rebalancing=False/WaitingForQuotaController``: Ready False, Reconciling True.
- no ``Valid`` yet: Ready Unknown, Reconciling True (``NotObserved``).
- otherwise Ready True (``Enforced``; ``Rebalancing=False/Waiting`` — demand waiting for room
  — is the budget working, not a fault, and is named in the message).
"""

from __future__ import annotations

from collections.abc import Mapping, MutableSequence, Sequence
from typing import Any, Final, Literal

from dynquota.policy.profiles import resource_order
from dynquota.policy.status import set_condition
from dynquota.policy.units import unit_for

__all__ = [
    "READINESS_TYPES",
    "Readiness",
    "budget_readiness",
    "budget_summary",
    "policy_readiness",
    "set_readiness",
]

READINESS_TYPES: Final = ("Ready", "Reconciling", "Stalled")
"""The summary condition types, in the order they are written (after the others)."""

Readiness = tuple[str, str, str, str]
"""One summary condition: ``(type, status, reason, message)``."""

Kind = Literal["DynamicQuotaPolicy", "QuotaBudget"]
_Conditions = Mapping[str, Mapping[str, Any]]


def _is(conditions: _Conditions, type_: str, status: str) -> bool:
    return str(conditions.get(type_, {}).get("status")) == status


def _message(conditions: _Conditions, type_: str) -> str:
    return str(conditions.get(type_, {}).get("message") or "")


def _three(ready: tuple[str, str, str], reconciling: bool, stalled: bool) -> list[Readiness]:
    status, reason, message = ready
    return [
        ("Ready", status, reason, message),
        ("Reconciling", "True" if reconciling else "False",
         reason if reconciling else "Idle", message if reconciling else "not working on it"),
        ("Stalled", "True" if stalled else "False",
         reason if stalled else "NotStalled", message if stalled else "not stuck"),
    ]  # fmt: skip


def policy_readiness(conditions: _Conditions) -> list[Readiness]:
    """Ready, Reconciling and Stalled of a DynamicQuotaPolicy from its other conditions
    (``{type: condition}``, each with ``status`` and ``message``); see the module docstring."""
    if _is(conditions, "Valid", "False"):
        why = f"the spec is invalid and its namespaces are frozen: {_message(conditions, 'Valid')}"
        return _three(("False", "InvalidSpec", why), reconciling=False, stalled=True)
    if _is(conditions, "QuotaControllerStalled", "True"):
        why = _message(conditions, "QuotaControllerStalled")
        return _three(("False", "QuotaControllerStalled", why), reconciling=False, stalled=True)
    if "Valid" not in conditions:
        why = "dynquota has not validated this generation yet"
        return _three(("Unknown", "NotObserved", why), reconciling=True, stalled=False)
    notes = ["the policy is valid and applied to the namespaces it governs"]
    if _is(conditions, "Shadowed", "True"):
        notes.append(_message(conditions, "Shadowed"))
    if _is(conditions, "Guarded", "False"):
        notes.append(_message(conditions, "Guarded"))
    return _three(("True", "Applied", "; ".join(notes)), reconciling=False, stalled=False)


def budget_readiness(conditions: _Conditions) -> list[Readiness]:
    """Ready, Reconciling and Stalled of a QuotaBudget from its other conditions; see the
    module docstring."""
    if _is(conditions, "Valid", "False"):
        why = f"the spec is invalid: {_message(conditions, 'Valid')}"
        return _three(("False", "InvalidSpec", why), reconciling=False, stalled=True)
    if _is(conditions, "OverBudget", "True"):
        why = _message(conditions, "OverBudget")
        return _three(("False", "OverBudget", why), reconciling=False, stalled=True)
    if _is(conditions, "AtRisk", "True"):
        why = _message(conditions, "AtRisk")
        return _three(("False", "AtRisk", why), reconciling=True, stalled=False)
    rebalancing = conditions.get("Rebalancing", {})
    if rebalancing.get("status") == "False" and rebalancing.get("reason") == (
        "WaitingForQuotaController"
    ):
        why = _message(conditions, "Rebalancing")
        return _three(("False", "WaitingForQuotaController", why), reconciling=True, stalled=False)
    if "Valid" not in conditions:
        why = "dynquota has not validated this generation yet"
        return _three(("Unknown", "NotObserved", why), reconciling=True, stalled=False)
    notes = ["every member's slice is enforced and the budget holds"]
    if rebalancing.get("reason") == "Waiting":
        notes.append(_message(conditions, "Rebalancing"))
    return _three(("True", "Enforced", "; ".join(notes)), reconciling=False, stalled=False)


def set_readiness(
    conditions: MutableSequence[dict[str, Any]], kind: Kind, observed_generation: int, now: str
) -> bool:
    """Set Ready, Reconciling and Stalled in ``conditions`` (in place, after the other types;
    :func:`~dynquota.policy.status.set_condition` semantics: ``lastTransitionTime`` moves only
    when a status changes) from the other conditions in it. Returns whether any changed.

    ``kind``: ``DynamicQuotaPolicy`` or ``QuotaBudget``; ``now``: RFC 3339. Raises
    ``ValueError`` for another kind."""
    others = {str(c.get("type")): c for c in conditions if c.get("type") not in READINESS_TYPES}
    if kind == "DynamicQuotaPolicy":
        wanted = policy_readiness(others)
    elif kind == "QuotaBudget":
        wanted = budget_readiness(others)
    else:
        raise ValueError(f"no readiness for kind {kind!r}")
    changed = False
    for type_, status, reason, message in wanted:
        changed |= set_condition(
            conditions, type_, status, reason, message, observed_generation, now
        )
    return changed


MAX_SUMMARY_KEYS: Final = 4
"""Keys shown in :func:`budget_summary` before ``+N more``."""


def budget_summary(
    hard: Mapping[str, int], used: Mapping[str, int], free: Mapping[str, int]
) -> str:
    """The line ``kubectl get qb`` shows (``status.summary``): per key in
    :func:`~dynquota.policy.profiles.resource_order`, ``KEY: USED/HARD (FREE free)``, joined
    by ``, ``, like ``kubectl get quota``'s column: ``pods: 30/60 (20 free), requests.cpu:
    3/8 (5 free)``. Values are whole units of each key (:func:`~dynquota.policy.units.unit_for`:
    objects, millicores, bytes) and are printed as quantity text; ``free`` is the budget
    minus what it has granted (negative while over budget), so it can be below ``HARD -
    USED``. A key missing from ``used``/``free`` shows ``?``. At most
    :data:`MAX_SUMMARY_KEYS` keys, then ``+N more``. ``""`` without keys."""
    keys: Sequence[str] = resource_order(hard)
    parts = []
    for key in keys[:MAX_SUMMARY_KEYS]:
        unit = unit_for(key)
        shown = {
            name: (unit.text(v) if v >= 0 else "-" + unit.text(-v)) if v is not None else "?"
            for name, v in (("used", used.get(key)), ("hard", hard[key]), ("free", free.get(key)))
        }
        parts.append(f"{key}: {shown['used']}/{shown['hard']} ({shown['free']} free)")
    if len(keys) > MAX_SUMMARY_KEYS:
        parts.append(f"+{len(keys) - MAX_SUMMARY_KEYS} more")
    return ", ".join(parts)
