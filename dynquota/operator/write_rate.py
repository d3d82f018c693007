"""The write-rate rule of a namespace: its governing policy's ``writeRate`` and dry run (pure;
shared by the write-rate governor, :mod:`dynquota.operator.governor`, and ``dynquota plan``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from dynquota.operator.ports import PolicyRecord
from dynquota.policy import Governance
from dynquota.policy.churn import WriteRate

__all__ = ["Rule", "rule_for"]


@dataclass(frozen=True)
class Rule:
    """What governs a namespace's writes: the policy's ``writeRate`` (``None``: none) and
    whether the namespace is in dry run (the policy's or the operator's)."""

    rate: WriteRate | None
    dry_run: bool = False


def rule_for(
    governance: Governance | None, records: Mapping[str, PolicyRecord], dry_run: bool
) -> Rule:
    """The :class:`Rule` of a namespace governed as ``governance`` (``None``: not known),
    with the stored policies ``records`` and the operator's ``dry_run``: the governing
    policy's ``writeRate`` when the namespace is managed (unmanaged, frozen or excluded: none,
    so a namespace held is released)."""
    if governance is None or governance.kind != "managed" or governance.policy is None:
        return Rule(None)
    record = records.get(governance.policy)
    spec = record.info.spec if record is not None else None
    if spec is None or spec.write_rate is None:
        return Rule(None)
    return Rule(spec.write_rate.rule, governance.dry_run or dry_run)
