"""What the waker and node growth (issue 26) read of the cluster view, and the Node informer
that feeds node growth: which namespaces may be woken (``spec.wake``), where node growth
applies, and the ``status.used`` it starts from. :class:`~dynquota.operator.assembly.Operator`
builds its :class:`~dynquota.operator.wake.Waker` and
:class:`~dynquota.operator.daemons.NodeGrowth` on these; the runtime runs
:func:`node_informer_for`. Pure apart from building the informer (no request is made here).
"""

from __future__ import annotations

from kubernetes_asyncio import client

from dynquota._k8s.clock import ServerClock
from dynquota._k8s.store import ObjectInformer
from dynquota.kube.objects import Stream, node_informer
from dynquota.operator.cluster_view import ClusterView
from dynquota.operator.daemons import NodeGrowth
from dynquota.policy.keys import QuotaKeyError
from dynquota.policy.units import unit_for
from dynquota.quantity import QuantityError
from dynquota.settings import Settings

__all__ = ["growth_applies", "node_informer_for", "status_used_units", "wake_allowed"]


def wake_allowed(cluster: ClusterView, namespace: str) -> bool:
    """Whether the policy governing ``namespace`` lets it be woken (``spec.wake``). A
    namespace not known yet is allowed: the waker marks it seen here, and a start-up sweep
    that ran before the Namespace list would otherwise never wake it (the write gate still
    holds every mark)."""
    governance = cluster.governance(namespace)
    return governance is None or governance.wake


def growth_applies(cluster: ClusterView, namespace: str) -> bool:
    """Whether node growth applies in ``namespace``: governed (a managed quota is sized
    there) by a policy that wakes (``spec.wake``: room without the wake would wait for the
    DaemonSet controller's backoff; README-only attack)."""
    governance = cluster.governance(namespace)
    return governance is not None and governance.kind == "managed" and governance.wake


def status_used_units(cluster: ClusterView, namespace: str, key: str) -> int:
    """The managed quota's ``status.used`` of ``key`` in the key's units (0: unknown)."""
    quota = cluster.watched(namespace)
    text = quota.status_used.get(key) if quota is not None else None
    try:
        return unit_for(key).parse(text) if text else 0
    except (QuotaKeyError, QuantityError):
        return 0


def node_informer_for(
    growth: NodeGrowth, api_client: client.ApiClient, settings: Settings, clock: ServerClock
) -> ObjectInformer | None:
    """The Node informer that tells ``growth`` when each Node was created (no write waits for
    it), or ``None`` when node growth is off (``nodeGrowth`` or the wake off)."""
    if not (settings.node_growth and settings.wake):
        return None
    return node_informer(
        api_client,
        Stream(growth.on_node, growth.on_nodes_synced),
        watch_timeout=settings.watch_timeout_seconds,
        clock=clock,
    )
