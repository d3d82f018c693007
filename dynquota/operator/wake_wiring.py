"""The wake and node growth wired to one operator (issue 26): which namespaces may be woken
(``spec.wake``), where node growth applies, and the ``status.used`` it starts from. Split out
of :mod:`dynquota.operator.runtime`, which calls :func:`wire_wake` once and
:func:`wake_sweep` after each full resync."""

from __future__ import annotations

from collections.abc import Callable

from kubernetes_asyncio import client

from dynquota._k8s.clock import ServerClock
from dynquota._k8s.store import ObjectInformer
from dynquota.kube.objects import Stream, node_informer
from dynquota.kube.workloads import WorkloadClient
from dynquota.operator.daemons import NodeGrowth
from dynquota.operator.reconcile import Operator
from dynquota.operator.wake import Waker
from dynquota.policy.keys import QuotaKeyError
from dynquota.policy.units import unit_for
from dynquota.quantity import QuantityError
from dynquota.settings import Settings

__all__ = ["wake_sweep", "wire_wake"]


def wire_wake(
    operator: Operator,
    api_client: client.ApiClient,
    settings: Settings,
    observer: Callable[..., None] | None,
    clock: ServerClock,
) -> ObjectInformer | None:
    """Give ``operator`` its :class:`~dynquota.operator.wake.Waker` and, with ``nodeGrowth``
    and the wake on, its :class:`~dynquota.operator.daemons.NodeGrowth`; returns the Node
    informer that feeds the latter (``None``: off), for the runtime to run."""
    operator.waker = Waker(
        WorkloadClient(api_client, observer),
        operator.write_gate,
        operator.metrics,
        operator.report_woken,
        enabled=settings.wake,
        qps=settings.wake_qps,
        allowed=lambda namespace: _wake_allowed(operator, namespace),
    )
    if not (settings.node_growth and settings.wake):
        return None
    growth = operator.node_growth = NodeGrowth(
        WorkloadClient(api_client, observer),
        operator.queue.add,
        lambda namespace: _manageable(operator, namespace),
        lambda: operator.gate.is_leader,
        lambda namespace, key: _status_used(operator, namespace, key),
    )
    # Node creation times for the DaemonSet rule; no write waits for it
    return node_informer(
        api_client,
        Stream(growth.on_node, growth.on_nodes_synced),
        watch_timeout=settings.watch_timeout_seconds,
        clock=clock,
    )


def wake_sweep(operator: Operator) -> None:
    """Wake passes for the managed quotas not seen since this replica leads."""
    if operator.waker is not None and operator.gate.is_leader:
        operator.waker.sweep(operator._watched.values())


def _wake_allowed(operator: Operator, namespace: str) -> bool:
    """Whether the policy governing ``namespace`` lets it be woken (``spec.wake``)."""
    governance = operator.governance(namespace)
    return governance is None or governance.wake


def _manageable(operator: Operator, namespace: str) -> bool:
    """Whether node growth applies in ``namespace``: governed (a managed quota is sized
    there) by a policy that wakes (``spec.wake``: room without the wake would wait for the
    DaemonSet controller's backoff; README-only attack)."""
    governance = operator.governance(namespace)
    return governance is not None and governance.kind == "managed" and governance.wake


def _status_used(operator: Operator, namespace: str, key: str) -> int:
    """The managed quota's ``status.used`` of ``key`` in the key's units (0: unknown)."""
    quota = operator._watched.get(namespace)
    text = quota.status_used.get(key) if quota is not None else None
    try:
        return unit_for(key).parse(text) if text else 0
    except (QuotaKeyError, QuantityError):
        return 0
