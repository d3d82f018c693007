"""Policy status: each DynamicQuotaPolicy's ``status`` (a part of
:class:`~dynquota.operator.assembly.Operator`, built alone in tests).

The pure parts (tallies per policy, the ``Valid`` and ``Shadowed`` conditions,
:func:`~dynquota.policy.status.set_condition`) live in :mod:`dynquota.policy.status`; this
module gathers the inputs, writes only what differs and only while leading, and posts
``PolicyInvalid`` once per generation. A policy whose governed namespaces have a refused or
failing quota write (:mod:`dynquota.operator.write_failures`) is not ``Ready``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

from dynquota._k8s.errors import KubeError
from dynquota.kube.events import ObjectRef
from dynquota.metrics import Metrics
from dynquota.names import API_VERSION, KIND, EventReason
from dynquota.operator.cluster_view import ClusterView
from dynquota.operator.ports import LeaderView, PolicyRecord, PolicyStatusSink
from dynquota.operator.reporting import Reporter
from dynquota.operator.stall import StallWatch
from dynquota.operator.write_failures import WriteFailures
from dynquota.operator.write_gate import STATUS, WriteGate
from dynquota.policy.readiness import WriteFailure, policy_readiness
from dynquota.policy.status import (
    PolicyTally,
    guarded_condition,
    now_rfc3339,
    set_condition,
    shadowed_condition,
    stall_condition,
    valid_condition,
)
from dynquota.settings import Settings

__all__ = [
    "PolicyStatusWriter",
]

log = logging.getLogger("dynquota.operator")

STALLED = "QuotaControllerStalled"
"""The condition type of a stalled quota controller (:mod:`dynquota.operator.stall`)."""


class PolicyStatusWriter:
    """Keeps every policy's status current.

    Args:
        cluster: the policies, the namespaces and how each is governed.
        sink: the policies' status writes.
        reporter: the ``PolicyInvalid`` Warning.
        write_gate: asked before the writes (:data:`~dynquota.operator.write_gate.STATUS`).
        leader: only the leader writes.
        metrics: ``dynquota_managed_namespaces``, ``dynquota_frozen_namespaces``.
        stall: the quota controller's state (condition ``QuotaControllerStalled``).
        settings: the label keys the chart guards (condition ``Guarded``).
        failures: the failing quota writes (``None``: none known), shown on the policy that
            governs the namespace.
    """

    def __init__(
        self,
        cluster: ClusterView,
        sink: PolicyStatusSink,
        *,
        reporter: Reporter,
        write_gate: WriteGate,
        leader: LeaderView,
        metrics: Metrics,
        stall: StallWatch,
        settings: Settings,
        failures: WriteFailures | None = None,
    ) -> None:
        self.cluster = cluster
        self.failures = failures
        self.sink = sink
        self.reporter = reporter
        self.write_gate = write_gate
        self.leader = leader
        self.metrics = metrics
        self.stall = stall
        self.settings = settings
        self._dirty = asyncio.Event()
        self._invalid_reported: dict[str, int] = {}
        """Policy name -> the generation whose ``PolicyInvalid`` Event was posted."""

    def mark_dirty(self) -> None:
        """Ask :meth:`run` to recompute the policies' status."""
        self._dirty.set()

    async def run(self, debounce: float = 1.0) -> None:
        """Keep each policy's status (``Valid`` condition, namespaces governed) current;
        runs until cancelled. Writes only what differs, only while leading."""
        while True:
            await self._dirty.wait()
            await asyncio.sleep(debounce)
            self._dirty.clear()
            try:
                await self.write()
            except KubeError as exc:
                log.warning("policy status: %s; retrying", exc)
                await asyncio.sleep(2)
                self._dirty.set()

    def tallies(self) -> tuple[dict[str, PolicyTally], int, int]:
        """``({policy: PolicyTally}, managed, frozen)`` over the known namespaces (counts)."""
        policies = self.cluster.policy_records
        tallies = {name: PolicyTally() for name in policies}
        managed = frozen = 0
        for name, info in self.cluster.namespaces.items():
            governance = self.cluster.governance(name)
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
            labels = info.labels
            for policy_name, record in policies.items():
                spec = record.info.spec
                if spec is None or not spec.namespace_selector.matches(labels):
                    continue
                tally = tallies[policy_name]
                tally.matched += 1
                if policy_name != governance.policy:
                    tally.shadowed += 1
                    tally.winners[governance.policy] = tally.winners.get(governance.policy, 0) + 1
        return tallies, managed, frozen

    def _failing(self) -> dict[str, list[WriteFailure]]:
        """Policy -> the failing quota writes of the namespaces it governs now."""
        found: dict[str, list[WriteFailure]] = {}
        if self.failures is None:
            return found
        for failure in self.failures.of(self.failures.namespaces()):
            governance = self.cluster.governance(failure.namespace)
            if governance is not None and governance.policy is not None:
                found.setdefault(governance.policy, []).append(failure)
        return found

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
        await self.reporter.warn(
            ObjectRef(API_VERSION, KIND, name, "", record.uid),
            EventReason.POLICY_INVALID,
            f"{record.info.reason}; it freezes {frozen} namespaces (their managed quota is "
            "left as it is) until it is fixed",
        )

    async def write(self) -> int:
        """Patch the status of every policy whose status differs; returns how many.

        Status: ``observedGeneration``, ``namespaces`` (governed), ``frozenNamespaces``
        (frozen by this policy being invalid), conditions ``Valid`` and, for a valid policy,
        ``Shadowed`` (it matches managed namespaces another policy governs) and ``Guarded``
        (its selector uses only label keys the chart's governance-labels policy guards:
        :func:`~dynquota.policy.status.guarded_condition`) and ``QuotaControllerStalled``
        (:func:`~dynquota.policy.status.stall_condition`). An invalid
        policy also gets a ``PolicyInvalid`` Warning Event, once per generation.
        """
        tallies, managed, frozen = self.tallies()
        self.metrics.managed.set(managed)
        self.metrics.frozen.set(frozen)
        if not self.leader.is_leader:
            return 0  # a standby; leadership gained marks the status dirty again
        if not self.write_gate.may(STATUS):
            self._dirty.set()  # leading, but the Lease could lapse within a write
            return 0
        policies = self.cluster.policy_records
        for name in list(self._invalid_reported):
            if name not in policies or policies[name].info.valid:
                del self._invalid_reported[name]
        failing = self._failing()
        written = 0
        for name, record in list(policies.items()):
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
                priorities = {n: r.info.priority for n, r in policies.items()}
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
            # the summary for people, Flux and kstatus: Ready, Reconciling, Stalled
            wanted += policy_readiness(
                {t: {"status": st, "message": m} for t, st, _, m in wanted}, failing.get(name, [])
            )
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
            await self.sink.patch_policy_status(name, status)
            self.cluster.policy_status_written(name, status)
            written += 1
        return written
