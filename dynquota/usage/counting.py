"""Kubernetes quota counting semantics for the tracked resources (Pure).

What one object contributes to a namespace's usage, reduced to a single number per object:
its *expiry*, the instant (seconds since the epoch, float) after which it no longer counts.

- ``math.inf`` (:data:`INDEFINITE`): counts for as long as the object exists.
- a finite float: a pod being deleted gracefully; it counts while ``now <= expiry``.
- ``None``: the object does not count at all (a pod in phase ``Succeeded`` or ``Failed``).

Ported behaviour (not code) from kubernetes/kubernetes:

- ``pkg/quota/v1/evaluator/core/pods.go`` ``QuotaV1Pod``: a pod is charged unless its phase is
  ``Failed`` or ``Succeeded``, or both ``metadata.deletionTimestamp`` and
  ``metadata.deletionGracePeriodSeconds`` are set and the current time is *strictly after*
  ``deletionTimestamp + deletionGracePeriodSeconds``. A pod with only one of the two fields set
  keeps counting.
- ``staging/src/k8s.io/apiserver/pkg/registry/rest/delete.go`` ``BeforeDelete``: a graceful
  delete stores ``deletionTimestamp = request time + grace`` (serialised at whole seconds) and
  ``deletionGracePeriodSeconds = grace``; a later delete may only shorten both. So a pod deleted
  at ``t`` with grace ``g`` is charged until ``t + 2g`` (the grace is counted twice). We follow
  the quota controller exactly, so the tally equals ``status.used``.
- ``pkg/registry/core/pod/strategy.go`` ``CheckGracefulDelete``: a pod not bound to a node, or
  already terminal, is deleted with grace 0, so it goes at once (it never lingers as
  "terminating").
- ConfigMaps: the object-count evaluator charges every object, ``kube-root-ca.crt`` included.

The metadata-only watch carries no ``status``: the pod informer uses the field selector
:data:`POD_FIELD_SELECTOR`, so terminal pods arrive as DELETED. Objects given here with a
``status.phase`` (full objects, tests) are checked for it too.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import datetime
from typing import Any, Final

from dynquota.names import CONFIGMAPS, PODS, TRACKED_RESOURCES

__all__ = [
    "CONFIGMAPS",
    "INDEFINITE",
    "PODS",
    "POD_FIELD_SELECTOR",
    "TERMINAL_POD_PHASES",
    "TRACKED_RESOURCES",
    "charge",
    "configmap_expiry",
    "parse_time",
    "pod_counts",
    "pod_expiry",
]


INDEFINITE: Final = math.inf
"""Expiry of an object that counts for as long as it exists."""

TERMINAL_POD_PHASES: Final = frozenset({"Succeeded", "Failed"})
"""Pod phases the quota no longer charges."""

POD_FIELD_SELECTOR: Final = "status.phase!=Succeeded,status.phase!=Failed"
"""Field selector for the pod watch: the server sends a DELETED event when a pod turns
terminal, so the watched set is the quota's non-terminal pod set."""


def parse_time(value: str) -> float:
    """Parse a Kubernetes ``metav1.Time`` (RFC 3339, e.g. ``2026-01-02T03:04:05Z``).

    Returns seconds since the epoch (float). Raises ``ValueError`` on a malformed string or a
    timestamp without a UTC offset.
    """
    parsed = datetime.fromisoformat(value)
    if parsed.tzinfo is None:
        raise ValueError(f"timestamp without UTC offset: {value!r}")
    return parsed.timestamp()


def pod_expiry(metadata: Mapping[str, Any]) -> float:
    """Expiry of a non-terminal pod from its ``metadata`` (a dict as decoded from JSON).

    Returns ``deletionTimestamp + deletionGracePeriodSeconds`` in seconds since the epoch when
    both are set, else :data:`INDEFINITE`. A negative grace is treated as 1 s, like the
    apiserver's delete path. Raises ``ValueError`` on a malformed ``deletionTimestamp``.
    Upstream: ``pkg/quota/v1/evaluator/core/pods.go`` ``QuotaV1Pod``.
    """
    deletion_timestamp = metadata.get("deletionTimestamp")
    grace = metadata.get("deletionGracePeriodSeconds")
    if deletion_timestamp is None or grace is None:
        return INDEFINITE
    grace_seconds = int(grace)
    if grace_seconds < 0:
        grace_seconds = 1
    return parse_time(str(deletion_timestamp)) + grace_seconds


def pod_counts(phase: str | None, expiry: float, now: float) -> bool:
    """Whether the quota charges a pod at ``now`` (seconds since the epoch).

    ``phase`` is ``status.phase`` (``None`` when unknown, e.g. metadata-only), ``expiry`` as
    returned by :func:`pod_expiry`. Charged unless terminal or ``now > expiry``.
    Upstream: ``pkg/quota/v1/evaluator/core/pods.go`` ``QuotaV1Pod``.
    """
    if phase in TERMINAL_POD_PHASES:
        return False
    return now <= expiry


def configmap_expiry(metadata: Mapping[str, Any]) -> float:
    """Expiry of a ConfigMap: always :data:`INDEFINITE` (every object counts, deleting or not).

    ``metadata`` is accepted for symmetry with :func:`pod_expiry` and ignored.
    """
    del metadata
    return INDEFINITE


def charge(resource: str, obj: Mapping[str, Any]) -> float | None:
    """What object ``obj`` (a decoded API object or ``PartialObjectMetadata``) contributes.

    ``resource`` is :data:`PODS` or :data:`CONFIGMAPS`. Returns the object's expiry (see the
    module docs), or ``None`` when it does not count (a pod whose ``status.phase`` is
    ``Succeeded``/``Failed``; metadata-only objects have no status and are judged by the field
    selector instead). Raises ``ValueError`` for another resource or a malformed timestamp.
    """
    metadata = obj.get("metadata") or {}
    if resource == PODS:
        status = obj.get("status")
        if isinstance(status, Mapping) and status.get("phase") in TERMINAL_POD_PHASES:
            return None
        return pod_expiry(metadata)
    if resource == CONFIGMAPS:
        return configmap_expiry(metadata)
    raise ValueError(f"untracked resource: {resource!r}")
