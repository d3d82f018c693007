"""A DynamicQuotaPolicy's status conditions, computed (Pure: no I/O, ``now`` passed in).

- :class:`PolicyTally`: what one policy does to the known namespaces (counts);
- :func:`valid_condition`, :func:`shadowed_condition` and :func:`guarded_condition`:
  ``(status, reason, message)`` of the ``Valid``, ``Shadowed`` and ``Guarded`` conditions;
- :func:`set_condition`: put one condition into a list of conditions, as apimachinery's
  ``meta.SetStatusCondition`` does (``staging/src/k8s.io/apimachinery/pkg/api/meta/
  conditions.go``): ``lastTransitionTime`` changes only when ``status`` changes.

The operator writes them (:mod:`dynquota.operator.policy_status`).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, MutableSequence, Sequence
from dataclasses import dataclass, field
from typing import Any

from dynquota.policy.labels import LabelSelector
from dynquota.policy.stall import Stall

__all__ = [
    "MAX_MESSAGE_LENGTH",
    "METADATA_NAME_LABEL",
    "PolicyTally",
    "guarded_condition",
    "now_rfc3339",
    "set_condition",
    "shadowed_condition",
    "stall_condition",
    "valid_condition",
]

MAX_MESSAGE_LENGTH = 32000
"""Characters kept of a condition's ``message`` (``metav1.Condition``'s maxLength)."""


@dataclass
class PolicyTally:
    """What one policy does to the known namespaces (counts of namespaces).

    ``governed``: it manages them. ``frozen``: it is invalid and freezes them. ``matched``:
    its selector matches them and they are managed (by it or another policy). ``shadowed``:
    matched but governed by another policy; ``winners`` counts those per winning policy.
    """

    governed: int = 0
    frozen: int = 0
    matched: int = 0
    shadowed: int = 0
    winners: dict[str, int] = field(default_factory=dict)


def now_rfc3339(now: dt.datetime | None = None) -> str:
    """``now`` (default: the current UTC time) as RFC 3339 with seconds, ``...Z``."""
    return (now or dt.datetime.now(dt.UTC)).strftime("%Y-%m-%dT%H:%M:%SZ")


def valid_condition(valid: bool, reason: str | None) -> tuple[str, str, str]:
    """``(status, reason, message)`` of the ``Valid`` condition (``reason``: why the policy is
    invalid, from :func:`~dynquota.policy.validate_policy`)."""
    if valid:
        return "True", "Valid", "the policy passed validation"
    return "False", "InvalidSpec", f"{reason}; the namespaces it may govern are frozen"


METADATA_NAME_LABEL = "kubernetes.io/metadata.name"
"""Set by the apiserver to the namespace's name on every Namespace: nobody can change it, so a
selector on it is guarded by Kubernetes itself."""


def guarded_condition(
    selector: LabelSelector, prefixes: Sequence[str], keys: Sequence[str]
) -> tuple[str, str, str]:
    """``(status, reason, message)`` of the ``Guarded`` condition: whether every label key the
    policy's ``selector`` uses is guarded (a key with one of ``prefixes``, one of ``keys``, or
    :data:`METADATA_NAME_LABEL`), so who may not update policies cannot move a namespace into
    or out of it (the chart's governance-labels policy). Informational: an unguarded policy
    still governs (nothing frozen or deleted). Pure."""
    used = [*selector.match_labels, *(e.key for e in selector.match_expressions)]
    unguarded = sorted(
        {
            k
            for k in used
            if k != METADATA_NAME_LABEL and k not in keys and not k.startswith(tuple(prefixes))
        }
    )
    if not unguarded:
        return "True", "Guarded", "its namespaceSelector uses guarded label keys only"
    return (
        "False",
        "UnguardedSelector",
        f"namespaceSelector uses the label {', '.join(unguarded)}, which is not guarded: "
        "whoever may patch a Namespace can move it into or out of this policy. Add the key to "
        "the chart value governanceLabels.guardedKeys, or select on dynquota.io/ labels (the "
        "policy still governs; nothing is frozen)",
    )


def shadowed_condition(
    name: str, tally: PolicyTally, priorities: Mapping[str, int | None]
) -> tuple[str, str, str]:
    """``(status, reason, message)`` of the ``Shadowed`` condition of the valid policy
    ``name``; ``priorities`` maps every known policy to its ``priority`` (``None``: unknown).

    Names at most three winning policies, most namespaces first, then by name.
    """
    if not tally.shadowed:
        return (
            "False",
            "NotShadowed",
            f"governs every managed namespace it matches ({tally.governed})",
        )
    own = priorities[name] or 0
    ranked = sorted(tally.winners.items(), key=lambda item: (-item[1], item[0]))
    parts = []
    for winner, count in ranked[:3]:
        theirs = priorities.get(winner)
        why = (
            f"equal priority {own}, name {winner} sorts first"
            if theirs == own
            else f"priority {theirs} > {own}"
        )
        parts.append(f"{winner} in {count} ({why})")
    if len(ranked) > 3:
        parts.append(f"{len(ranked) - 3} more policies")
    reason = "NameTieBreak" if priorities.get(ranked[0][0]) == own else "LowerPriority"
    message = (
        f"matches {tally.matched} managed namespaces but governs {tally.governed}: "
        f"outranked by policy {'; '.join(parts)}"
    )
    return "True", reason, message


def stall_condition(stalls: Sequence[Stall]) -> tuple[str, str, str]:
    """``(status, reason, message)`` of the ``QuotaControllerStalled`` condition from the
    signals past their bound (:meth:`dynquota.policy.stall.StallSignals.stalls`): ``True``
    with the first one's reason (``SpecNotCopied``, ``UsageNotRecounted``) and every
    message; ``False``/``Running`` when there is none (which at rest proves nothing)."""
    if not stalls:
        return (
            "False",
            "Running",
            "the quota controller copied spec.hard and recounted status.used when last "
            "needed (a stopped controller shows only once a quota changes or objects go)",
        )
    message = "; ".join(s.message for s in stalls)
    message += "; raises that rest on status.used are held until it recovers"
    return "True", stalls[0].reason, message[:MAX_MESSAGE_LENGTH]


def set_condition(
    conditions: MutableSequence[dict[str, Any]],
    type_: str,
    status: str,
    reason: str,
    message: str,
    observed_generation: int,
    now: str,
) -> bool:
    """Set the condition ``type_`` in ``conditions`` (in place); returns whether it changed.

    Follows apimachinery's ``meta.SetStatusCondition`` (``api/meta/conditions.go``): a new
    type is appended; an existing one keeps its place and its ``lastTransitionTime`` unless
    ``status`` changes, and then ``lastTransitionTime`` becomes ``now`` (RFC 3339). Unlike
    upstream, an existing condition without a ``lastTransitionTime`` gets ``now``. The
    ``message`` is cut to :data:`MAX_MESSAGE_LENGTH` characters.
    """
    message = message[:MAX_MESSAGE_LENGTH]
    index = next((i for i, c in enumerate(conditions) if c.get("type") == type_), None)
    previous: Mapping[str, Any] = conditions[index] if index is not None else {}
    changed = not (
        previous.get("status") == status
        and previous.get("reason") == reason
        and previous.get("message") == message
        and previous.get("observedGeneration") == observed_generation
    )
    transition = (
        previous.get("lastTransitionTime")
        if previous.get("status") == status and previous.get("lastTransitionTime")
        else now
    )
    condition = {
        "type": type_,
        "status": status,
        "reason": reason,
        "message": message,
        "observedGeneration": observed_generation,
        "lastTransitionTime": transition,
    }
    if index is None:
        conditions.append(condition)
    else:
        conditions[index] = condition
    return changed
