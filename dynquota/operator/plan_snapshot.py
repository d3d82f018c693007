"""What ``dynquota plan`` decides from: a :class:`ClusterSnapshot` of the cluster, as decoded
JSON objects, and :func:`read_cluster`, which reads one (I/O, read-only).

:func:`read_cluster` reads, with the operator's own kubernetes_asyncio adapters and never
writing, everything a decision needs: the ``kube-system`` kill switch, namespaces, policies,
every ResourceQuota, every LimitRange, every QuotaBudget, and metadata-only lists of
non-terminal pods and of ConfigMaps, tallied by the operator's informers
(:mod:`dynquota.usage`'s quota semantics). :func:`dynquota.operator.plan.build_plan` decides
from it; :func:`dynquota.operator.plan_scope.read_scope` reads a smaller one for
``plan -n``/``-l``.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kubernetes_asyncio import client

from dynquota._k8s.errors import NotFoundError
from dynquota._k8s.reflector import Collection
from dynquota.kube.cluster import ClusterClient
from dynquota.kube.informer import UsageWatcher

__all__ = ["ClusterSnapshot", "read_cluster"]


@dataclass
class ClusterSnapshot:
    """What :func:`~dynquota.operator.plan.build_plan` needs, as decoded JSON objects
    (camelCase keys).

    ``tally`` maps ``(namespace, resource)`` to the count the quota charges now;
    ``limit_ranges`` holds every LimitRange (any namespace); ``budgets`` every QuotaBudget
    (empty when its CRD is not served); ``tarpit_rules`` the write-rate governor's tarpit
    FlowSchema's ``spec.rules`` (``None``: not read: the governor is off or it is not
    readable).
    """

    kube_system: Mapping[str, Any]
    namespaces: Sequence[Mapping[str, Any]]
    policies: Sequence[Mapping[str, Any]]
    quotas: Sequence[Mapping[str, Any]]
    tally: Mapping[tuple[str, str], int] = field(default_factory=dict)
    limit_ranges: Sequence[Mapping[str, Any]] = ()
    budgets: Sequence[Mapping[str, Any]] = ()
    tarpit_rules: Sequence[Mapping[str, Any]] | None = None


async def read_cluster(api: client.ApiClient, now: float | None = None) -> ClusterSnapshot:
    """Read a :class:`ClusterSnapshot` through ``api`` (a kubernetes_asyncio ``ApiClient``,
    not closed here) with the operator's own adapters, never writing.

    ``kube-system`` and the policies as the operator reads them
    (:class:`~dynquota.kube.cluster.ClusterClient`); namespaces and every ResourceQuota as
    consistent paginated lists (:class:`~dynquota._k8s.reflector.Collection`); the tally as the
    operator's informers make it: one full metadata-only list of each tracked resource into a
    :class:`~dynquota.usage.ResourceTally` (:class:`~dynquota.kube.informer.UsageWatcher`,
    no watch), counted at ``now`` (default: the clock); every LimitRange (one paginated
    list: the reconcile lists a namespace's before adding a compute key); every QuotaBudget
    (none when its CRD is not served, as the operator reads it). Every request has the short
    timeout of :mod:`dynquota._k8s.timeouts`.

    Raises ``ApiError`` (``NotFoundError`` on the policies: the CRD is missing;
    ``ForbiddenError``: a missing permission) or ``TransportError`` (the cluster cannot be
    reached).
    """
    cluster = ClusterClient(api)
    kube_system = await cluster.read_namespace("kube-system")
    namespaces = await Collection(api, "/api/v1/namespaces").list_all()
    policies = await cluster.list_policies()
    # every quota, not only dynquota's: the others limit the namespace too
    quotas = await Collection(api, "/api/v1/resourcequotas").list_all()
    limit_ranges = await Collection(api, "/api/v1/limitranges").list_all()
    try:
        budgets = await cluster.list_budgets()
    except NotFoundError:
        budgets = []  # the QuotaBudget CRD is not served: no budgets (as the operator reads it)
    usage = UsageWatcher.for_cluster(api)
    for informer in usage.informers.values():
        await informer.list_once()
    when = time.time() if now is None else now
    tally = {
        (namespace, resource): count
        for namespace in usage.namespaces()
        for resource, count in usage.usages(namespace, when).items()
        if count
    }
    return ClusterSnapshot(kube_system, namespaces, policies, quotas, tally, limit_ranges, budgets)
