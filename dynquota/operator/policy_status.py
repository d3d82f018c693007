"""Policy status: each DynamicQuotaPolicy's ``status`` (a layer of
:class:`~dynquota.operator.reconcile.Operator`).

The pure parts (tallies per policy, the ``Valid`` and ``Shadowed`` conditions,
:func:`~dynquota.policy.status.set_condition`) live in :mod:`dynquota.policy.status`; this
module gathers the inputs, writes only what differs and only while leading, and posts
``PolicyInvalid`` once per generation.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

from dynquota._k8s.errors import KubeError
from dynquota.kube.events import ObjectRef
from dynquota.names import API_VERSION, KIND, EventReason
from dynquota.operator.ports import (
    PolicyRecord,
)
from dynquota.operator.reporting import Reporting
from dynquota.operator.write_gate import STATUS
from dynquota.policy.status import (
    PolicyTally,
    guarded_condition,
    now_rfc3339,
    set_condition,
    shadowed_condition,
    stall_condition,
    valid_condition,
)

__all__ = [
    "PolicyStatusWriter",
]

log = logging.getLogger("dynquota.operator")

STALLED = "QuotaControllerStalled"
"""The condition type of a stalled quota controller (:mod:`dynquota.operator.stall`)."""


class PolicyStatusWriter(Reporting):
    """Keeps every policy's status current."""

    async def run_policy_status(self, debounce: float = 1.0) -> None:
        """Keep each policy's status (``Valid`` condition, namespaces governed) current;
        runs until cancelled. Writes only what differs, only while leading."""
        while True:
            await self._status_dirty.wait()
            await asyncio.sleep(debounce)
            self._status_dirty.clear()
            try:
                await self.write_policy_status()
            except KubeError as exc:
                log.warning("policy status: %s; retrying", exc)
                await asyncio.sleep(2)
                self._status_dirty.set()

    def policy_tallies(self) -> tuple[dict[str, PolicyTally], int, int]:
        """``({policy: PolicyTally}, managed, frozen)`` over the known namespaces (counts)."""
        tallies = {name: PolicyTally() for name in self._policies}
        managed = frozen = 0
        for name in self.namespaces:
            governance = self.governance(name)
            if governance is None or governance.policy is None:
                continue
            if governance.kind == "frozen":
                frozen += 1
                tallies.setdefault(governance.policy, PolicyTally()).frozen += 1
                continue
            if governance.kind != "managed":
                continue
            managed += 1
            tallies.setdefault(governance.policy, PolicyTally()).governed += 1
            labels = self.namespaces[name].labels
            for policy_name, record in self._policies.items():
                spec = record.info.spec
                if spec is None or not spec.namespace_selector.matches(labels):
                    continue
                tally = tallies[policy_name]
                tally.matched += 1
                if policy_name != governance.policy:
                    tally.shadowed += 1
                    tally.winners[governance.policy] = tally.winners.get(governance.policy, 0) + 1
        return tallies, managed, frozen

    async def _report_invalid_policy(
        self, name: str, record: PolicyRecord, frozen: int, old_valid: Mapping[str, Any]
    ) -> None:
        """Post ``PolicyInvalid`` once per generation of an invalid policy (also not again
        when its stored status already reports this generation invalid)."""
        if self._invalid_reported.get(name) == record.generation:
            return
        already = (
            old_valid.get("status") == "False"
            and old_valid.get("observedGeneration") == record.generation
        )
        self._invalid_reported[name] = record.generation
        if already:
            return
        await self._warn(
            ObjectRef(API_VERSION, KIND, name, "", record.uid),
            EventReason.POLICY_INVALID,
            f"{record.info.reason}; it freezes {frozen} namespaces (their managed quota is "
            "left as it is) until it is fixed",
        )

    async def write_policy_status(self) -> int:
        """Patch the status of every policy whose status differs; returns how many.

        Status: ``observedGeneration``, ``namespaces`` (governed), ``frozenNamespaces``
        (frozen by this policy being invalid), conditions ``Valid`` and, for a valid policy,
        ``Shadowed`` (it matches managed namespaces another policy governs) and ``Guarded``
        (its selector uses only label keys the chart's governance-labels policy guards:
        :func:`~dynquota.policy.status.guarded_condition`) and ``QuotaControllerStalled``
        (:func:`~dynquota.policy.status.stall_condition`). An invalid
        policy also gets a ``PolicyInvalid`` Warning Event, once per generation.
        """
        tallies, managed, frozen = self.policy_tallies()
        self.metrics.managed.set(managed)
        self.metrics.frozen.set(frozen)
        if not self.gate.is_leader:
            return 0  # a standby; leadership gained marks the status dirty again
        if not self.write_gate.may(STATUS):
            self._status_dirty.set()  # leading, but the Lease could lapse within a write
            return 0
        for name in list(self._invalid_reported):
            if name not in self._policies or self._policies[name].info.valid:
                del self._invalid_reported[name]
        written = 0
        for name, record in list(self._policies.items()):
            info = record.info
            tally = tallies.get(name, PolicyTally())
            old = record.status
            old_conditions = {c.get("type"): c for c in old.get("conditions") or []}
            if not info.valid:
                await self._report_invalid_policy(
                    name, record, tally.frozen, old_conditions.get("Valid") or {}
                )
            wanted = [("Valid", *valid_condition(info.valid, info.reason))]
            if info.valid:
                priorities = {n: r.info.priority for n, r in self._policies.items()}
                wanted.append(("Shadowed", *shadowed_condition(name, tally, priorities)))
            if info.spec is not None:
                guarded = guarded_condition(
                    info.spec.namespace_selector,
                    self.settings.guarded_label_prefixes,
                    self.settings.guarded_label_keys,
                )
                wanted.append(("Guarded", *guarded))
            if info.valid:
                wanted.append((STALLED, *stall_condition(self.stall.current)))
            # the stored conditions of other types first, as stored; then ours, in order
            known = {type_ for type_, *_ in wanted} | {"Shadowed", "Guarded", STALLED}
            kept = [c for t, c in old_conditions.items() if t not in known]
            ours: list[dict[str, Any]] = [
                dict(old_conditions[t]) for t, *_ in wanted if t in old_conditions
            ]
            same = True
            now = now_rfc3339()
            for type_, status_, reason, message in wanted:
                changed = set_condition(
                    ours, type_, status_, reason, message, record.generation, now
                )
                same = same and not changed
            conditions = [next(c for c in ours if c["type"] == t) for t, *_ in wanted]
            status: dict[str, Any] = {
                "observedGeneration": record.generation,
                "namespaces": tally.governed,
                "frozenNamespaces": tally.frozen,
                "conditions": kept + conditions,
            }
            if (
                same
                and len(old.get("conditions") or []) == len(kept) + len(conditions)
                and old.get("namespaces") == tally.governed
                and old.get("frozenNamespaces") == tally.frozen
                and old.get("observedGeneration") == record.generation
            ):
                continue
            await self.policy_status.patch_policy_status(name, status)
            record.status = status
            written += 1
        return written
