"""A pod's effective requests and limits, as quota reads them (Pure).

Port of kubernetes/kubernetes ``staging/src/k8s.io/component-helpers/resource/helpers.go``
(``PodRequests``, ``PodLimits``, ``AggregateContainerRequests``,
``AggregateContainerLimits``, ``aggregateContainerResourcesByFn``,
``IsPodLevelResourcesSet``, ``IsPodResizeInfeasible``) with the options kube-apiserver
v1.37.2's pod quota evaluator passes: ``UseStatusResources`` (in-place resize is GA) and pod
level resources on. Not ported: pod-level in-place resize
(``InPlacePodLevelResourcesVerticalScaling``, alpha: pod-level status is not read) and DRA
node-allocatable claim statuses (``UseDRANodeAllocatableResourceClaimStatus``, off for
quota).

Shapes: a pod is Kubernetes JSON (camelCase); a resource list is ``{name: Quantity}``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from dynquota.quantity import Quantity

from .generic import Object
from .resources import add
from .types import parse_resource_list

__all__ = [
    "container_limits",
    "is_pod_level_resources_set",
    "pod_limits",
    "pod_requests",
    "spec_requests",
]

_POD_LEVEL = ("cpu", "memory")

# (container, its status or None, resize infeasible) -> resource list, or None for "nothing"
_Getter = Callable[[Object, Object | None, bool, str], Mapping[str, Quantity] | None]


def _is_supported_pod_level(name: str) -> bool:
    """Upstream ``IsSupportedPodLevelResource``: cpu, memory, ``hugepages-*``."""
    return name in _POD_LEVEL or name.startswith("hugepages-")


def is_pod_level_resources_set(pod: Object) -> bool:
    """Upstream ``IsPodLevelResourcesSet``: ``spec.resources`` names a supported resource."""
    resources = (pod.get("spec") or {}).get("resources") or {}
    names = [*(resources.get("requests") or {}), *(resources.get("limits") or {})]
    return any(_is_supported_pod_level(str(n)) for n in names)


def spec_requests(container: Object, where: str) -> dict[str, Quantity]:
    """A container's ``resources.requests``, defaulted from its limits as the apiserver does
    (``SetDefaults_Pod``)."""
    resources = container.get("resources") or {}
    requests = parse_resource_list(resources.get("requests"), f"{where}.resources.requests")
    for key, value in container_limits(container, where).items():
        requests.setdefault(key, value)
    return requests


def container_limits(container: Object, where: str) -> dict[str, Quantity]:
    """A container's ``resources.limits``."""
    resources = container.get("resources") or {}
    return parse_resource_list(resources.get("limits"), f"{where}.resources.limits")


def _status_list(status: Object | None, *path: str) -> dict[str, Quantity] | None:
    """``status[path...]`` parsed, or None when absent."""
    node: object = status
    for key in path:
        if not isinstance(node, Mapping) or node.get(key) is None:
            return None
        node = node[key]
    if not isinstance(node, Mapping):
        return None
    return parse_resource_list(node, "status." + ".".join(path))


def _spec_req(c: Object, cs: Object | None, infeasible: bool, where: str) -> dict[str, Quantity]:
    return spec_requests(c, where)


def _allocated_req(
    c: Object, cs: Object | None, infeasible: bool, where: str
) -> Mapping[str, Quantity] | None:
    """Upstream ``containerAllocatedRequests``."""
    allocated = _status_list(cs, "allocatedResources")
    if allocated is not None:
        return allocated
    return None if infeasible else spec_requests(c, where)


def _actuated_req(
    c: Object, cs: Object | None, infeasible: bool, where: str
) -> Mapping[str, Quantity] | None:
    """Upstream ``containerActuatedRequests``."""
    actual = _status_list(cs, "resources", "requests")
    if actual is not None:
        return actual
    return _allocated_req(c, cs, infeasible, where)


def _spec_lim(c: Object, cs: Object | None, infeasible: bool, where: str) -> dict[str, Quantity]:
    return container_limits(c, where)


def _actuated_lim(
    c: Object, cs: Object | None, infeasible: bool, where: str
) -> Mapping[str, Quantity] | None:
    """Upstream ``containerActuatedLimits``."""
    actual = _status_list(cs, "resources", "limits")
    if actual is not None:
        return actual
    return None if infeasible else container_limits(c, where)


def _max(*lists: Mapping[str, Quantity]) -> dict[str, Quantity]:
    """Key-wise maximum (upstream ``max``/``maxResourceList``)."""
    out: dict[str, Quantity] = {}
    for items in lists:
        for key, value in items.items():
            if key not in out or value > out[key]:
                out[key] = value
    return out


def _find_status(pod: Object, name: str) -> Object | None:
    """Upstream ``findContainerStatus``: containers' statuses, then init containers'."""
    status = pod.get("status") or {}
    for kind in ("containerStatuses", "initContainerStatuses"):
        for cs in status.get(kind) or ():
            if cs.get("name", "") == name:
                return dict(cs)
    return None


def is_pod_resize_infeasible(pod: Object) -> bool:
    """Upstream ``IsPodResizeInfeasible``: condition ``PodResizePending`` with reason
    ``Infeasible``."""
    for condition in (pod.get("status") or {}).get("conditions") or ():
        if condition.get("type") == "PodResizePending":
            return bool(condition.get("reason") == "Infeasible")
    return False


def _aggregate(pod: Object, get: _Getter, infeasible: bool) -> dict[str, Quantity]:
    """Upstream ``aggregateContainerResourcesByFn``: the sum of the containers, then the
    maximum with each init container (a restartable "sidecar" init container adds to the sum
    and to every later init container)."""
    spec = pod.get("spec") or {}
    total: dict[str, Quantity] = {}
    for i, c in enumerate(spec.get("containers") or ()):
        own = get(c, _find_status(pod, str(c.get("name", ""))), infeasible, f"spec.containers[{i}]")
        total = add(total, own or {})
    sidecars: dict[str, Quantity] = {}
    init_peak: dict[str, Quantity] = {}
    for i, c in enumerate(spec.get("initContainers") or ()):
        where = f"spec.initContainers[{i}]"
        own = get(c, _find_status(pod, str(c.get("name", ""))), infeasible, where) or {}
        if c.get("restartPolicy") == "Always":
            total = add(total, own)
            sidecars = add(sidecars, own)
            init_peak = _max(init_peak, sidecars)
        else:
            init_peak = _max(init_peak, add(own, sidecars))
    return _max(total, init_peak)


def pod_requests(pod: Object) -> dict[str, Quantity]:
    """Effective pod requests (upstream ``PodRequests``): per container the larger of spec,
    actuated (``status.containerStatuses[].resources.requests``) and allocated
    (``allocatedResources``) — only the status ones when the resize is infeasible; then
    pod-level ``spec.resources`` (requests, defaulted from limits) overriding cpu, memory and
    hugepages; then ``spec.overhead`` added.

    Raises:
        InvalidObjectError: an amount is not a quantity.
    """
    infeasible = is_pod_resize_infeasible(pod)
    spec = _aggregate(pod, _spec_req, infeasible)
    allocated = _aggregate(pod, _allocated_req, infeasible)
    actuated = _aggregate(pod, _actuated_req, infeasible)
    total = _max(actuated, allocated) if infeasible else _max(spec, actuated, allocated)
    pod_spec = pod.get("spec") or {}
    pod_level = pod_spec.get("resources") or {}
    level = parse_resource_list(pod_level.get("requests"), "spec.resources.requests")
    for key, value in parse_resource_list(pod_level.get("limits"), "spec.resources").items():
        level.setdefault(key, value)
    total.update({k: v for k, v in level.items() if _is_supported_pod_level(k)})
    return add(total, parse_resource_list(pod_spec.get("overhead"), "spec.overhead"))


def pod_limits(pod: Object) -> dict[str, Quantity]:
    """Effective pod limits (upstream ``PodLimits``): per container the larger of spec and
    actuated limits (only actuated when the resize is infeasible), pod-level limits
    overriding, ``spec.overhead`` added to non-zero limits only.

    Raises:
        InvalidObjectError: an amount is not a quantity.
    """
    infeasible = is_pod_resize_infeasible(pod)
    actuated = _aggregate(pod, _actuated_lim, infeasible)
    total = actuated if infeasible else _max(_aggregate(pod, _spec_lim, infeasible), actuated)
    pod_spec = pod.get("spec") or {}
    level = parse_resource_list(
        (pod_spec.get("resources") or {}).get("limits"), "spec.resources.limits"
    )
    total.update({k: v for k, v in level.items() if _is_supported_pod_level(k)})
    for key, value in parse_resource_list(pod_spec.get("overhead"), "spec.overhead").items():
        if key in total and not total[key].is_zero():
            total[key] = total[key] + value
    return total
