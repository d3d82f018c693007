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
- a write of a governed namespace's managed quota failing (``failures``, below): Ready False
  and, refused (400/401/403/422: RBAC, an admission policy), Stalled True, or failing
  (429, 5xx, no answer: retried), Reconciling True.
- otherwise Ready True (``Applied``; the message notes a ``Shadowed`` or unguarded policy).

QuotaBudget:

- ``Valid=False``: Ready False, Stalled True (``InvalidSpec``).
- a write of a member's managed quota failing: as for a policy.
- ``OverBudget=True``: Ready False, Stalled True (``OverBudget``): nothing is granted until
  usage falls or the budget is raised.
- ``AtRisk=True``: Ready False, Reconciling True (``AtRisk``): a member has no enforced slice
  yet; with reason ``ForeignQuota`` (a member's quota ``dynquota`` is not dynquota's, so it
  writes no slice there until someone deletes it), Stalled True (``ForeignQuota``).
- ``Rebalancing=False/WaitingForQuotaController``: Ready False, Reconciling True.
- no ``Valid`` yet: Ready Unknown, Reconciling True (``NotObserved``).
- otherwise Ready True (``Enforced``; ``Rebalancing=False/Waiting`` — demand waiting for room
  — is the budget working, not a fault, and is named in the message).

A failing write (:class:`WriteFailure`) lasts until a write of the same writer in that
namespace succeeds (``operator/write_failures.py``); the reason of the three summary
conditions is ``QuotaWrite`` and the apiserver's Status reason (``QuotaWriteForbidden``,
``QuotaWriteInvalid``, ``QuotaWriteServiceUnavailable``; ``QuotaWriteNoAnswer`` without
one; a condition's reason admits no ``-``, so the namespace is in the message), the message
names the namespaces, verbs and HTTP statuses.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, MutableSequence, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

from dynquota.policy.profiles import resource_order
from dynquota.policy.status import set_condition
from dynquota.policy.units import unit_for

__all__ = [
    "READINESS_TYPES",
    "Readiness",
    "WriteFailure",
    "budget_readiness",
    "budget_summary",
    "failure_readiness",
    "policy_readiness",
    "set_readiness",
]

READINESS_TYPES: Final = ("Ready", "Reconciling", "Stalled")
"""The summary condition types, in the order they are written (after the others)."""

Readiness = tuple[str, str, str, str]
"""One summary condition: ``(type, status, reason, message)``."""

Kind = Literal["DynamicQuotaPolicy", "QuotaBudget"]
_Conditions = Mapping[str, Mapping[str, Any]]


MAX_FAILURES_SHOWN: Final = 3
"""Failures named in a condition's message before ``and N more``."""
MAX_APISERVER_MESSAGE: Final = 300
"""Characters of the apiserver's message kept per failure (an admission policy's can be long)."""


@dataclass(frozen=True)
class WriteFailure:
    """A write of a namespace's managed quota that the apiserver refused or that failed.

    ``writer``: ``reconcile`` (the per-namespace writer, deleter, kill switch) or ``budget``
    (a budget's slice patches); ``verb``: ``create``, ``patch`` or ``delete``; ``status``: the
    HTTP code (0: no answer); ``reason``: the Status reason (``Forbidden``; may be empty);
    ``retryable``: 429, 5xx or no answer (the writer tries again), else refused (a human must
    act: the operator's RBAC, an admission policy, a bad value).
    """

    namespace: str
    writer: str
    verb: str
    status: int
    reason: str
    message: str
    retryable: bool

    @property
    def condition_reason(self) -> str:
        """``QuotaWrite<Status reason>``, e.g. ``QuotaWriteForbidden`` (``QuotaWriteNoAnswer``
        for status 0, ``QuotaWriteHTTP<code>`` without a reason): a valid condition reason."""
        if self.status == 0:
            return "QuotaWriteNoAnswer"
        reason = re.sub(r"[^A-Za-z0-9]", "", self.reason)
        return f"QuotaWrite{reason}" if reason else f"QuotaWriteHTTP{self.status}"

    def describe(self) -> str:
        """``patch of the managed quota in team-a refused: 403 Forbidden: <message>``."""
        text = (
            self.message
            if len(self.message) <= MAX_APISERVER_MESSAGE
            else (self.message[: MAX_APISERVER_MESSAGE - 3] + "...")
        )
        if self.status == 0:
            return f"{self.verb} of the managed quota in {self.namespace} got no answer: {text}"
        what = "failed" if self.retryable else "refused"
        code = f"{self.status} {self.reason}".strip()
        return f"{self.verb} of the managed quota in {self.namespace} {what}: {code}: {text}"


def failure_readiness(failures: Sequence[WriteFailure]) -> list[Readiness] | None:
    """Ready False and Stalled True (a refusal among ``failures``) or Reconciling True (all
    retryable), the reason of the first refusal (else the first failure), the message naming
    each (at most :data:`MAX_FAILURES_SHOWN` texts, each once); ``None`` without failures."""
    if not failures:
        return None
    ordered = sorted(failures, key=lambda f: (f.retryable, f.namespace, f.writer, f.verb))
    refused = not ordered[0].retryable
    # the reconcile's and the budget's patch refused alike read the same: said once
    texts = list(dict.fromkeys(f.describe() for f in ordered))
    shown = "; ".join(texts[:MAX_FAILURES_SHOWN])
    if len(texts) > MAX_FAILURES_SHOWN:
        shown += f"; and {len(texts) - MAX_FAILURES_SHOWN} more"
    then = (
        "not Ready until a write there succeeds; dynquota tries again: fix the operator's "
        "rights or the admission policy that refuses it"
        if refused
        else "dynquota retries with backoff"
    )
    why = f"writes of managed quotas are not landing: {shown} ({then})"
    return _three(
        ("False", ordered[0].condition_reason, why), reconciling=not refused, stalled=refused
    )


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


def policy_readiness(
    conditions: _Conditions, failures: Sequence[WriteFailure] = ()
) -> list[Readiness]:
    """Ready, Reconciling and Stalled of a DynamicQuotaPolicy from its other conditions
    (``{type: condition}``, each with ``status`` and ``message``) and the failing writes of
    the namespaces it governs; see the module docstring."""
    if _is(conditions, "Valid", "False"):
        why = f"the spec is invalid and its namespaces are frozen: {_message(conditions, 'Valid')}"
        return _three(("False", "InvalidSpec", why), reconciling=False, stalled=True)
    failing = failure_readiness(failures)
    if failing is not None:
        return failing
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


def budget_readiness(
    conditions: _Conditions, failures: Sequence[WriteFailure] = ()
) -> list[Readiness]:
    """Ready, Reconciling and Stalled of a QuotaBudget from its other conditions and the
    failing writes of its members' quotas; see the module docstring."""
    if _is(conditions, "Valid", "False"):
        why = f"the spec is invalid: {_message(conditions, 'Valid')}"
        return _three(("False", "InvalidSpec", why), reconciling=False, stalled=True)
    failing = failure_readiness(failures)
    if failing is not None:
        return failing
    if _is(conditions, "OverBudget", "True"):
        why = _message(conditions, "OverBudget")
        return _three(("False", "OverBudget", why), reconciling=False, stalled=True)
    if _is(conditions, "AtRisk", "True"):
        why = _message(conditions, "AtRisk")
        if conditions["AtRisk"].get("reason") == "ForeignQuota":  # a human must act
            return _three(("False", "ForeignQuota", why), reconciling=False, stalled=True)
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
    conditions: MutableSequence[dict[str, Any]],
    kind: Kind,
    observed_generation: int,
    now: str,
    failures: Sequence[WriteFailure] = (),
) -> bool:
    """Set Ready, Reconciling and Stalled in ``conditions`` (in place, after the other types;
    :func:`~dynquota.policy.status.set_condition` semantics: ``lastTransitionTime`` moves only
    when a status changes) from the other conditions in it and ``failures`` (the failing
    writes of the object's namespaces). Returns whether any changed.

    ``kind``: ``DynamicQuotaPolicy`` or ``QuotaBudget``; ``now``: RFC 3339. Raises
    ``ValueError`` for another kind."""
    others = {str(c.get("type")): c for c in conditions if c.get("type") not in READINESS_TYPES}
    if kind == "DynamicQuotaPolicy":
        wanted = policy_readiness(others, failures)
    elif kind == "QuotaBudget":
        wanted = budget_readiness(others, failures)
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
