"""Which controllers a raise should wake, and how (Pure: no I/O).

A ReplicaSet controller whose pod creates the quota refused backs off exponentially per object
(upstream ``pkg/controller/replicaset/replica_set.go`` ``processNextWorkItem``: the key goes back
with ``AddRateLimited``, 5 ms doubling to about 1,000 s) and no quota change re-queues it: a
raise made room, but the pods come only when the backoff ends. An update of the ReplicaSet
itself re-queues it at once (its ``updateRS`` handler ``enqueueRS``, not rate-limited), so the
smallest metadata write whose value changes — the annotation :data:`WAKE_ANNOTATION` set to
a new value — makes the controller retry now.

The signal that a controller was refused is the ReplicaSet's own status, not Events (rate-
limited and aggregated): the condition ``ReplicaFailure`` ``True`` with reason
``FailedCreate`` (upstream ``replica_set_utils.go`` ``calculateStatus``), which the controller
clears after a sync that creates what it wanted, and fewer replicas than wanted.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from dynquota.quantity import QuantityError, parse_quantity

__all__ = [
    "WAKE_ANNOTATION",
    "charged_by_pods",
    "raised_keys",
    "refused_replica_set",
    "wake_patch",
]

WAKE_ANNOTATION: Final = "dynquota.io/wake"
"""Annotation dynquota sets on a workload it wakes: the raise that made room (the managed
quota's resourceVersion when its ``status.hard`` showed it), so each raise writes a new value
and one raise never writes twice."""

_POD_KEYS: Final = frozenset({"pods", "count/pods", "cpu", "memory", "ephemeral-storage"})


def charged_by_pods(key: str) -> bool:
    """Whether a pod create is charged to quota key ``key`` (``pods``, ``count/pods``, compute
    requests and limits, hugepages, extended resources): a raise of it can admit a pod a
    refusal held back. ``requests.storage`` and object counts of other kinds are not."""
    if key in _POD_KEYS:
        return True
    if key.startswith("hugepages-"):
        return True
    if key.startswith(("requests.", "limits.")):
        return not key.endswith("storage") or key.endswith("ephemeral-storage")
    return False


def raised_keys(before: Mapping[str, str], after: Mapping[str, str]) -> set[str]:
    """The keys of ``status.hard`` whose value grew from ``before`` to ``after`` (quantities;
    a key new in ``after`` was unlimited before and is no raise). Unparseable values are
    skipped."""
    raised: set[str] = set()
    for key, value in after.items():
        old = before.get(key)
        if old is None or old == value:  # the common case: a status.used update
            continue
        try:
            if parse_quantity(value) > parse_quantity(old):
                raised.add(key)
        except QuantityError:
            continue
    return raised


def refused_replica_set(obj: Mapping[str, Any]) -> bool:
    """Whether a ReplicaSet's controller was refused a create and still wants more pods: the
    condition ``ReplicaFailure`` is ``True`` with reason ``FailedCreate`` and
    ``status.replicas`` is below ``spec.replicas``."""
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    wanted = spec.get("replicas", 1)
    have = status.get("replicas", 0)
    if not isinstance(wanted, int) or not isinstance(have, int) or have >= wanted:
        return False
    return any(
        isinstance(c, Mapping)
        and c.get("type") == "ReplicaFailure"
        and c.get("status") == "True"
        and c.get("reason") == "FailedCreate"
        for c in status.get("conditions") or []
    )


def wake_patch(stamp: str, resource_version: str) -> dict[str, Any]:
    """The JSON merge-patch that wakes a workload: only :data:`WAKE_ANNOTATION` set to
    ``stamp``, conditional on ``resource_version`` (a 409 means it changed since: its
    controller was re-queued by that change already)."""
    return {
        "metadata": {"annotations": {WAKE_ANNOTATION: stamp}, "resourceVersion": resource_version}
    }
