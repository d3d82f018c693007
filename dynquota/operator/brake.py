"""The brake on mass un-management (Pure: no I/O, times passed in).

Deleting the policies — a GitOps prune deletes them one by one — editing their selectors, or
deleting the DynamicQuotaPolicy CRD (which deletes every policy) turns managed namespaces into
*unmanaged* ones, and the operator deletes their quotas, overrides and stamps included. The
brake counts those deletes over a sliding window (monotonic seconds) and holds them once they
would un-manage more than ``share`` of the namespaces that have a managed quota (or had one
deleted by the brake's leave within the window): the prune's first deletes may pass, the bulk
is held. A held namespace goes on when

- an admin confirms: the annotation :data:`CONFIRM` on ``kube-system`` (it outlives the CRD,
  like the kill switch) set to an RFC 3339 time not before the hold began, or
- the policies return (its decision is no longer a delete: :meth:`UnmanageBrake.settle`).

The kill switch stays the fast path: its deletes never pass through here.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final

from dynquota.policy import NamespaceInfo

__all__ = ["CONFIRM", "UnmanageBrake", "counted"]

CONFIRM: Final = "dynquota.io/confirm-unmanage"
"""Annotation on ``kube-system``: an RFC 3339 time; confirms the holds begun at or before it."""


@dataclass
class UnmanageBrake:
    """Counts un-managing deletes over ``window`` seconds; see the module docs.

    Args:
        share: the largest share (0..1) of managed namespaces un-managed within the window
            without a confirmation; ``>= 1``: the brake is off.
        window: seconds (monotonic) a passed delete counts.

    ``held`` maps each held namespace to when it was last held (monotonic seconds);
    ``held_since`` is when the current hold began (the cluster's time, seconds since the
    epoch; ``None``: nothing held).
    """

    share: float
    window: float
    passed: dict[str, float] = field(default_factory=dict)
    held: dict[str, float] = field(default_factory=dict)
    held_since: float | None = None

    def admit(
        self,
        namespace: str,
        with_quota: Collection[str],
        steady: float,
        now: float,
        confirmed_at: float | None,
    ) -> bool:
        """Whether the un-managing delete of ``namespace`` may go now.

        ``with_quota``: the namespaces whose managed quota exists now (those leaving
        included); ``steady``: monotonic seconds; ``now``: the cluster's time;
        ``confirmed_at``: the confirmation's time, or ``None``. A refused namespace is recorded
        in :attr:`held`.
        """
        self._expire(steady)
        if namespace in self.passed:
            return True
        confirmed = (
            confirmed_at is not None
            and self.held_since is not None
            and confirmed_at >= math.floor(self.held_since)  # RFC 3339 stamps: whole seconds
        )
        leaving = self.passed.keys() | self.held.keys() | {namespace}
        base = len(leaving | set(with_quota))
        if self.share >= 1.0 or confirmed or len(leaving) <= self.share * base:
            self.passed[namespace] = steady
            self.settle(namespace)
            return True
        self.held[namespace] = steady
        if self.held_since is None:
            self.held_since = now
        return False

    def settle(self, namespace: str) -> None:
        """``namespace`` is not (or no longer) to be un-managed: it is not held any more."""
        self.held.pop(namespace, None)
        if not self.held:
            self.held_since = None

    def returned(self, namespace: str) -> None:
        """``namespace`` is managed (and enforced) again: a delete passed before no longer
        counts, and never pre-approves its next un-managing delete (an admin who confirmed
        one hold, restored the policies and saw them deleted again within the window)."""
        self.passed.pop(namespace, None)
        self.settle(namespace)

    def _expire(self, steady: float) -> None:
        start = steady - self.window
        for table in (self.passed, self.held):
            for namespace in [n for n, t in table.items() if t < start]:
                del table[namespace]
        if not self.held:
            self.held_since = None


def counted(with_quota: Iterable[str], namespaces: Mapping[str, NamespaceInfo]) -> list[str]:
    """The namespaces of ``with_quota`` (a managed quota exists there) the brake's share is
    of: known and not being deleted. A terminating namespace's quota goes anyway, and counting
    it let more through (a test after 50 deleted namespaces saw four un-managing deletes pass
    unbraked)."""
    return [
        ns for ns in with_quota if (info := namespaces.get(ns)) is not None and not info.terminating
    ]
