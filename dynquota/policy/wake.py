"""Which controllers a raise should wake, and how (Pure: no I/O).

Four controllers create pods for a workload and back off per object when quota admission
refuses a create; an update of the object re-queues each (checked in v1.37.2's source and on
the local control plane):

=============  ==========================================  ===================================
kind           backoff after a refused create               re-queued by an update of the object
=============  ==========================================  ===================================
ReplicaSet     5 ms doubling to ~1,000 s                    at once (``updateRS`` ``enqueueRS``)
StatefulSet    5 ms doubling to ~1,000 s                    at once (its informer's UpdateFunc)
DaemonSet      5 ms doubling to ~1,000 s                    at once (``updateDaemonset``)
Job            1 s doubling to 60 s (``MaxJobApiBackOff``)  after 1 s (``updateJob`` with an
                                                            unchanged generation:
                                                            ``enqueueSyncJobBatched``)
=============  ==========================================  ===================================

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
clears after a sync that creates what it wanted, and fewer replicas than wanted. The other
three kinds keep no such condition; for them the signal is desired against current in their
own status (:func:`short_workload`), read only after a raise of a key pods are charged to —
a raise is made where usage reached the limit, so a workload short then was refused.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, Literal

from dynquota.quantity import QuantityError, parse_quantity

__all__ = [
    "WAKE_ANNOTATION",
    "WORKLOAD_KINDS",
    "WorkloadKind",
    "charged_by_pods",
    "raised_keys",
    "refused_replica_set",
    "short_workload",
    "wake_patch",
]

WorkloadKind = Literal["ReplicaSet", "StatefulSet", "DaemonSet", "Job"]
WORKLOAD_KINDS: Final[tuple[WorkloadKind, ...]] = ("ReplicaSet", "StatefulSet", "DaemonSet", "Job")
"""The kinds a wake pass lists and marks, in that order."""

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


def short_workload(kind: WorkloadKind, obj: Mapping[str, Any]) -> bool:
    """Whether a workload of ``kind`` wants more pods than it has, by its own status:

    - ``ReplicaSet``: :func:`refused_replica_set`;
    - ``StatefulSet``: ``status.replicas`` (pods created) below ``spec.replicas`` (default 1);
    - ``DaemonSet``: ``status.currentNumberScheduled`` below ``status.desiredNumberScheduled``
      (nodes that should run its pod; a created pod counts before it is bound);
    - ``Job``: not finished (no ``Complete``/``Failed`` condition ``True``), not suspended, and
      ``status.active`` below ``spec.parallelism`` (default 1), capped by the completions left
      (``spec.completions - status.succeeded`` when set).

    A malformed status (a non-integer count) is not short."""
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    if kind == "ReplicaSet":
        return refused_replica_set(obj)
    if kind == "StatefulSet":
        return _below(status.get("replicas", 0), spec.get("replicas", 1))
    if kind == "DaemonSet":
        return _below(
            status.get("currentNumberScheduled", 0), status.get("desiredNumberScheduled", 0)
        )
    if spec.get("suspend") is True or any(
        isinstance(c, Mapping) and c.get("type") in ("Complete", "Failed", "SuccessCriteriaMet",
                                                     "FailureTarget") and c.get("status") == "True"
        for c in status.get("conditions") or []
    ):  # fmt: skip
        return False
    wanted = spec.get("parallelism", 1)
    completions = spec.get("completions")
    succeeded = status.get("succeeded", 0)
    if isinstance(completions, int) and isinstance(succeeded, int) and isinstance(wanted, int):
        wanted = min(wanted, completions - succeeded)
    return _below(status.get("active", 0), wanted)


def _below(have: object, wanted: object) -> bool:
    return isinstance(have, int) and isinstance(wanted, int) and have < wanted


def wake_patch(stamp: str, resource_version: str) -> dict[str, Any]:
    """The JSON merge-patch that wakes a workload: only :data:`WAKE_ANNOTATION` set to
    ``stamp``, conditional on ``resource_version`` (a 409 means it changed since: its
    controller was re-queued by that change already)."""
    return {
        "metadata": {"annotations": {WAKE_ANNOTATION: stamp}, "resourceVersion": resource_version}
    }
