"""Service quota usage (Pure): the services evaluator of kube-apiserver.

Port of kubernetes/kubernetes ``pkg/quota/v1/evaluator/core/services.go``
(``serviceEvaluator``: ``Handles``, ``MatchingResources``, ``Usage``,
``portsWithNodePorts``). Charges ``count/services`` and ``services`` (1 each),
``services.loadbalancers`` (1 for ``type: LoadBalancer``) and ``services.nodeports`` (the
number of ports of a ``NodePort`` or ``LoadBalancer`` service; with
``allocateLoadBalancerNodePorts: false`` only the ports that name a ``nodePort``). Handles
CREATE and UPDATE (a service's type can change: an UPDATE is charged its growth). Matches no
scoped quota (upstream ``generic.MatchesNoScopeFunc``): the scope part is
:class:`~dynquota.admission.generic.UnscopedEvaluator`, as for object counts.
"""

from __future__ import annotations

from collections.abc import Iterable

from dynquota.quantity import Quantity, quantity_from_int

from .generic import Object, UnscopedEvaluator, create_or_update
from .types import AdmissionAttributes, GroupResource

__all__ = ["ServiceEvaluator", "service_usage"]

_RESOURCES = ("count/services", "services", "services.nodeports", "services.loadbalancers")


def service_usage(service: Object) -> dict[str, Quantity]:
    """Quota usage of a Service (upstream ``serviceEvaluator.Usage``); zero amounts included,
    as upstream (``check_request`` drops them)."""
    spec = service.get("spec") or {}
    ports = list(spec.get("ports") or ())
    kind = spec.get("type")
    nodeports = 0
    loadbalancers = 0
    if kind == "NodePort":
        nodeports = len(ports)
    elif kind == "LoadBalancer":
        loadbalancers = 1
        if spec.get("allocateLoadBalancerNodePorts") is False:
            nodeports = sum(1 for p in ports if p.get("nodePort"))
        else:
            nodeports = len(ports)
    return {
        "count/services": quantity_from_int(1),
        "services": quantity_from_int(1),
        "services.loadbalancers": quantity_from_int(loadbalancers),
        "services.nodeports": quantity_from_int(nodeports),
    }


class ServiceEvaluator(UnscopedEvaluator):
    """Service quota usage (upstream ``serviceEvaluator``); matching by
    :class:`~dynquota.admission.generic.UnscopedEvaluator`."""

    group_resource = GroupResource("", "services")

    def handles(self, attributes: AdmissionAttributes) -> bool:
        """:func:`~dynquota.admission.generic.create_or_update`."""
        return create_or_update(attributes)

    def matching_resources(self, names: Iterable[str]) -> list[str]:
        """``count/services``, ``services``, ``services.nodeports``, ``services.loadbalancers``
        among ``names``."""
        return [n for n in names if n in _RESOURCES]

    def usage(self, obj: Object, now: float) -> dict[str, Quantity]:
        """:func:`service_usage`."""
        return service_usage(obj)
