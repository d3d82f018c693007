"""How the per-namespace reconcile's decision is shaped for budgets (issues #13 and #22,
``docs/budgets.md``): a member's budgeted keys taken out of the write (:func:`strip_keys`), and
the budget mark of a namespace in no budget made equal to its label (:func:`mark_as_label`).
Pure: decisions in, decisions out. :meth:`dynquota.operator.budgets.Budgets.shape` chooses
which applies.
"""

from __future__ import annotations

import dataclasses

from dynquota.kube.quotas import QuotaSnapshot
from dynquota.names import BUDGET_LABEL, EventReason
from dynquota.policy import Action, Decision
from dynquota.policy.state import (
    BUDGET,
    hard_key,
    last_change_key,
    last_upscale_key,
    resource_keys,
)

__all__ = ["mark_as_label", "strip_keys"]


def mark_as_label(decision: Decision, current: QuotaSnapshot | None, label: str | None) -> Decision:
    """``decision`` for a namespace that is no member of a budget, with its quota's budget mark
    (:data:`~dynquota.policy.state.BUDGET`) made equal to its ``dynquota.io/budget``
    ``label`` (``None``: unlabelled, the mark is removed). Such a namespace is sized by its own
    policy, so a mark it still carries is of a budget it left (label changed or removed, its
    policy gone or in dry run, the budget deleted or invalid), which holds its slice until this
    write, re-sizing the quota under its own policy, lands (``docs/budgets.md``); a mark equal
    to a label that names no valid budget lets the chart's budget guard admit creates there
    (no slice). The mark written is never another value than the label. A create gets the
    mark; ``nothing`` becomes a patch of the mark alone; deletes pass unchanged. Pure."""
    if decision.action == "delete":
        return decision
    if decision.action == "create":
        if label is None:
            return decision
        return dataclasses.replace(
            decision, set_annotations={**decision.set_annotations, BUDGET: label}
        )
    if current is None or current.annotations.get(BUDGET) == label:
        return decision
    left = current.annotations.get(BUDGET)
    notes: list[str] = []
    if left is not None:
        notes.append(f"left QuotaBudget {left}: its slice is released with this write")
    if label is not None:
        notes.append(
            f"labelled {BUDGET_LABEL}={label}, no such valid budget or no member: sized by its "
            f"own policy, marked {label}"
        )
    set_annotations = dict(decision.set_annotations)
    remove_annotations = set(decision.remove_annotations)
    if label is None:
        set_annotations.pop(BUDGET, None)
        remove_annotations.add(BUDGET)
    else:
        set_annotations[BUDGET] = label
        remove_annotations.discard(BUDGET)
    if decision.action == "patch":
        return dataclasses.replace(
            decision,
            set_annotations=set_annotations,
            remove_annotations=frozenset(remove_annotations),
            notes=(*decision.notes, *notes),
        )
    return dataclasses.replace(
        decision,
        action="patch",
        hard={},
        set_annotations={BUDGET: label} if label is not None else {},
        remove_annotations=frozenset({BUDGET}) if label is None else frozenset(),
        null_hard=frozenset(),
        notes=(*decision.notes, *notes),
    )


def strip_keys(decision: Decision, keys: frozenset[str], current: QuotaSnapshot | None) -> Decision:
    """``decision`` writing nothing of ``keys``: a create leaves them out; a patch writes their
    current ``spec.hard`` (a no-op under the patch's resourceVersion precondition) and none of
    their state records; ``Resized``/``ManualEditReverted`` Events about them only are
    dropped. A patch left with nothing to write becomes ``nothing``. Pure."""
    if decision.action not in ("create", "patch") or not keys & (
        set(decision.hard) | decision.null_hard | {c.resource for c in decision.changes}
    ):
        return decision
    hard = dict(decision.hard)
    for key in keys:
        hard.pop(key, None)
        if decision.action == "patch" and current is not None:
            units = current.hard_int(key)
            if units is not None:
                hard[key] = units
    written = {
        k for key in keys for k in (hard_key(key), last_upscale_key(key), last_change_key(key))
    }
    state = {k for key in keys for k in resource_keys(key)}
    set_annotations = {k: v for k, v in decision.set_annotations.items() if k not in written}
    remove_annotations = frozenset(k for k in decision.remove_annotations if k not in state)
    changes = tuple(c for c in decision.changes if c.resource not in keys)
    dropped = [c for c in decision.changes if c.resource in keys]
    events = decision.events
    if dropped:
        resized = any(c.kind != "revert" for c in changes)
        reverted = any(c.kind == "revert" for c in changes)
        events = tuple(
            e
            for e in events
            if not (e.reason == EventReason.RESIZED and not resized)
            and not (e.reason == EventReason.MANUAL_EDIT_REVERTED and not reverted)
        )
    action: Action = decision.action
    if action == "patch" and not (set_annotations or remove_annotations or changes):
        action = "nothing"
    return dataclasses.replace(
        decision,
        action=action,
        hard=hard if action != "nothing" else {},
        set_annotations=set_annotations if action != "nothing" else {},
        remove_annotations=remove_annotations if action != "nothing" else frozenset(),
        null_hard=decision.null_hard - keys if action != "nothing" else frozenset(),
        changes=changes,
        events=events,
    )
