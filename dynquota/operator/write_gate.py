"""The one client-side gate before every write the operator makes (Pure: no I/O).

Whatever the operator writes — a managed quota (create, patch, delete), a budget's slices, a
companion LimitRange, an Event, a policy's or a budget's status — asks :meth:`WriteGate.hold`
first, with what it is about to write (:class:`Write`; a quota decision's by
:func:`quota_write`). This is the one home of "may we write now": the writers keep no rule of
their own (the table below is why they differ by kind). The answer is ``None`` (write now) or
the reason to hold, one of the ``dynquota_writes_held_total`` reasons
(:data:`~dynquota.operator.ports.HOLD_REASONS`). The server-side fence (the chart's Lease
fence policy) refuses a write from a replica that no longer holds the Lease whatever this
says; this gate keeps a replica from sending writes it positively does not know to be right.

The rules, by what is written:

=====================  ============================================================================
write                  needs
=====================  ============================================================================
kill-switch delete     the Lease valid for the whole request (the switch itself was read: it must
                       work in the incident it exists for)
managed quota          policies and budgets listed, the kill switch read (a create: its release
                       confirmed by a consistent read), the usage informers synced; a shrink also
                       every informer fresh (usage, namespaces, quotas, policies, budgets); the
                       Lease
budget slices          as a shrinking quota write, with the kill switch released
companion LimitRange   policies listed, the kill switch released and confirmed, the Lease (its
                       content depends on no usage)
Event, status, wake    the Lease
tarpit (FlowSchema)    the kill switch read, the Lease; one that puts a namespace in the tarpit
                       also policies listed, the switch released and confirmed, the usage
                       informers synced (a release needs only the switch read: the kill switch
                       releases every namespace)
tenant projection      policies and budgets listed, the kill switch read, the Lease (the
                       ``AppliedDynamicQuota`` shows them: never written from what is not known)
=====================  ============================================================================
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol

from dynquota.operator.ports import (
    HELD_BUDGETS,
    HELD_INFORMERS,
    HELD_KILL_SWITCH,
    HELD_LEASE,
    HELD_POLICIES,
    HELD_RELEASE,
    HELD_STALE,
    WRITE_TIMEOUT,
    LeaderView,
    SwitchView,
)
from dynquota.policy import Decision

__all__ = [
    "APPLIED",
    "BUDGET_SLICES",
    "EVENT",
    "KILL_SWITCH_DELETE",
    "LIMIT_RANGE",
    "STATUS",
    "TARPIT_ENGAGE",
    "TARPIT_RELEASE",
    "UNMANAGING_DELETE",
    "WAKE",
    "Informed",
    "Knowledge",
    "Listed",
    "PartsKnowledge",
    "Write",
    "WriteGate",
    "quota_write",
]

WriteKind = Literal[
    "quota", "budget-slices", "limit-range", "event", "status", "wake", "applied", "tarpit"
]


@dataclass(frozen=True)
class Write:
    """What is about to be written: ``kind``; for a quota whether it ``creates``, whether it
    ``shrinks`` (:attr:`dynquota.policy.Decision.shrinks`: every delete counts) and whether it
    is a delete made because the kill switch is engaged (``kill_switch_delete``)."""

    kind: WriteKind
    creates: bool = False
    shrinks: bool = False
    kill_switch_delete: bool = False


EVENT = Write("event")
"""An Event."""
STATUS = Write("status")
"""A policy's or a budget's status."""
WAKE = Write("wake")
"""The wake mark on a workload a raise made room for (:mod:`dynquota.operator.wake`)."""
APPLIED = Write("applied")
"""A tenant projection ``AppliedDynamicQuota`` (create, replace, delete;
:mod:`dynquota.operator.applied`)."""
LIMIT_RANGE = Write("limit-range")
"""A companion LimitRange (create or patch)."""
BUDGET_SLICES = Write("budget-slices")
"""A budget pass's slice patches."""
KILL_SWITCH_DELETE = Write("quota", shrinks=True, kill_switch_delete=True)
"""A managed quota's delete while the kill switch is engaged."""
TARPIT_ENGAGE = Write("tarpit", creates=True)
"""The tarpit FlowSchema's rules, listing a namespace they did not list
(:mod:`dynquota.operator.governor`)."""
TARPIT_RELEASE = Write("tarpit")
"""The tarpit FlowSchema's rules, only taking namespaces out (or re-asserting them)."""
UNMANAGING_DELETE = Write("quota", shrinks=True)
"""A managed quota's delete for any other cause (not managed any more, dry run)."""


def quota_write(decision: Decision, kill_switch: bool | None) -> Write:
    """The :class:`Write` of a managed-quota ``decision`` with the kill switch in state
    ``kill_switch``: a create, a shrink (:attr:`~dynquota.policy.Decision.shrinks`, every
    delete), and a delete made because the switch is engaged (needs only the Lease)."""
    return Write(
        "quota",
        creates=decision.action == "create",
        shrinks=decision.shrinks,
        kill_switch_delete=decision.action == "delete" and bool(kill_switch),
    )


class Knowledge(Protocol):
    """What the operator knows now (:class:`PartsKnowledge`, or a fake in unit tests)."""

    @property
    def policies_listed(self) -> bool: ...
    @property
    def budgets_listed(self) -> bool: ...
    @property
    def kill_switch(self) -> bool | None: ...
    @property
    def release_confirmed(self) -> bool: ...
    @property
    def gate(self) -> LeaderView: ...
    def usage_synced(self) -> bool: ...
    def informers_fresh(self) -> bool: ...


class Informed(Protocol):
    """What the informers told (:class:`~dynquota.operator.cluster_view.ClusterView`)."""

    @property
    def policies_listed(self) -> bool: ...
    def usage_synced(self) -> bool: ...
    def informers_fresh(self) -> bool: ...


class Listed(Protocol):
    """Whether the budgets were listed (:class:`~dynquota.operator.budgets.Budgets`)."""

    @property
    def listed(self) -> bool: ...


@dataclass(frozen=True)
class PartsKnowledge:
    """:class:`Knowledge` read, at every ask, from the parts that own it: the informers
    (``informers``), the budgets, the kill switch (``switch``) and the Lease (``gate``)."""

    informers: Informed
    budgets: Listed
    switch: SwitchView
    gate: LeaderView

    @property
    def policies_listed(self) -> bool:
        return self.informers.policies_listed

    @property
    def budgets_listed(self) -> bool:
        return self.budgets.listed

    @property
    def kill_switch(self) -> bool | None:
        return self.switch.engaged

    @property
    def release_confirmed(self) -> bool:
        return self.switch.release_confirmed

    def usage_synced(self) -> bool:
        return self.informers.usage_synced()

    def informers_fresh(self) -> bool:
        return self.informers.informers_fresh()


@dataclass(frozen=True)
class WriteGate:
    """See the module docs; ``knowledge`` is read afresh at every :meth:`hold`."""

    knowledge: Knowledge

    def hold(self, write: Write) -> str | None:
        """The reason ``write`` must wait, or ``None``; see the module's table."""
        k = self.knowledge
        if write.kind in ("event", "status", "wake") or write.kill_switch_delete:
            return self._lease()
        if write.kind == "tarpit":
            return self._tarpit(write)
        if not k.policies_listed:
            return HELD_POLICIES
        if write.kind == "applied":
            if not k.budgets_listed:
                return HELD_BUDGETS
            return HELD_KILL_SWITCH if k.kill_switch is None else self._lease()
        if write.kind == "limit-range":
            if k.kill_switch is not False:
                return HELD_KILL_SWITCH
            if not k.release_confirmed:
                return HELD_RELEASE
            return self._lease()
        if not k.budgets_listed:
            return HELD_BUDGETS
        if k.kill_switch is None or (write.kind == "budget-slices" and k.kill_switch):
            return HELD_KILL_SWITCH
        if (write.creates or write.kind == "budget-slices") and not k.release_confirmed:
            return HELD_RELEASE
        if not k.usage_synced():
            return HELD_INFORMERS
        if (write.shrinks or write.kind == "budget-slices") and not k.informers_fresh():
            return HELD_STALE
        return self._lease()

    def may(self, write: Write) -> bool:
        """Whether ``write`` may go now (:meth:`hold` is ``None``)."""
        return self.hold(write) is None

    def _tarpit(self, write: Write) -> str | None:
        k = self.knowledge
        if k.kill_switch is None:
            return HELD_KILL_SWITCH
        if write.creates:
            if not k.policies_listed:
                return HELD_POLICIES
            if k.kill_switch:
                return HELD_KILL_SWITCH
            if not k.release_confirmed:
                return HELD_RELEASE
            if not k.usage_synced():
                return HELD_INFORMERS
        return self._lease()

    def _lease(self) -> str | None:
        return None if self.knowledge.gate.can_write(WRITE_TIMEOUT) else HELD_LEASE
