"""Pod quota usage and matching (Pure): the pod usage evaluator of kube-apiserver.

:class:`PodEvaluator` charges ``pods``, ``count/pods``, ``cpu``/``memory``/
``ephemeral-storage`` and their ``requests.``/``limits.`` forms, hugepages,
``requests.<extended resource>`` and ``requests.deviceclass.resource.kubernetes.io/<class>``
(DRA implicit extended resources); the scopes ``Terminating``, ``NotTerminating``,
``BestEffort``, ``NotBestEffort``, ``PriorityClass`` (``In``, ``NotIn``, ``Exists``,
``DoesNotExist``) and ``CrossNamespacePodAffinity``; a pod UPDATE that changes the Terminating
scope. Upstream (v1.37.2): ``pkg/quota/v1/evaluator/core/pods.go`` (``podEvaluator``:
``Handles``, ``Constraints``, ``MatchingResources``; ``PodUsageFunc``, ``QuotaV1Pod``,
``podComputeUsageHelper``, ``podMatchesScopeFunc``, ``isExtendedResourceNameForQuota``)
with the effective requests and limits of :mod:`dynquota.admission.podresources`. The
registry of evaluators is :mod:`dynquota.admission.evaluators`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime

from dynquota.quantity import Quantity, quantity_from_int

from .errors import InvalidObjectError
from .generic import Object, generic_matches, label_selector_matches, uncovered_by_scope_name
from .podresources import (
    container_limits,
    is_pod_level_resources_set,
    pod_limits,
    pod_requests,
    spec_requests,
)
from .resources import add
from .types import (
    AdmissionAttributes,
    GroupResource,
    Operation,
    ResourceQuota,
    ScopedResourceSelectorRequirement,
    parse_resource_list,
)

__all__ = ["PodEvaluator", "pod_usage"]

_ONE = quantity_from_int(1)

_POD_RESOURCES = frozenset(
    {
        "count/pods",
        "cpu",
        "memory",
        "ephemeral-storage",
        "requests.cpu",
        "requests.memory",
        "requests.ephemeral-storage",
        "limits.cpu",
        "limits.memory",
        "limits.ephemeral-storage",
        "pods",
    }
)
_POD_RESOURCE_PREFIXES = ("hugepages-", "requests.hugepages-")
# Quotas on these require every container to state the value (an upstream "mistake" kept for
# compatibility; see podEvaluator.Constraints).
_VALIDATION_SET = frozenset(
    {"cpu", "memory", "requests.cpu", "requests.memory", "limits.cpu", "limits.memory"}
)
_COMPUTE_QOS_RESOURCES = ("cpu", "memory")
# DRA implicit extended resources (upstream resourceapi.ResourceDeviceClassPrefix).
_DEVICE_CLASS_PREFIX = "deviceclass.resource.kubernetes.io/"


def _is_native_resource(name: str) -> bool:
    """Upstream ``helper.IsNativeResource``: no domain, or the ``kubernetes.io/`` domain."""
    return "/" not in name or "kubernetes.io/" in name


def _is_extended_resource(name: str) -> bool:
    """Upstream ``schedutil.IsDRAExtendedResourceName``: an extended resource
    (``helper.IsExtendedResourceName``, without the qualified-name check) or a DRA implicit
    extended resource ``deviceclass.resource.kubernetes.io/<class>``."""
    if name.startswith(_DEVICE_CLASS_PREFIX):
        return True
    return not _is_native_resource(name) and not name.startswith("requests.")


def _is_extended_resource_for_quota(name: str) -> bool:
    """Upstream ``isExtendedResourceNameForQuota``: ``requests.<domain>/<name>``, including
    ``requests.deviceclass.resource.kubernetes.io/<class>``."""
    if not name.startswith("requests."):
        return False
    return not _is_native_resource(name) or name.startswith("requests." + _DEVICE_CLASS_PREFIX)


def _container_resources(container: Object, where: str) -> tuple[dict[str, Quantity], ...]:
    """(requests, limits) of a container's spec, requests defaulted from limits."""
    return spec_requests(container, where), container_limits(container, where)


def _containers(pod: Object, kind: str) -> list[Object]:
    return list((pod.get("spec") or {}).get(kind) or ())


def _compute_usage(
    requests: Mapping[str, Quantity], limits: Mapping[str, Quantity]
) -> dict[str, Quantity]:
    """Upstream ``podComputeUsageHelper``: quota names charged for given requests and limits."""
    result: dict[str, Quantity] = {"pods": _ONE}
    for res in ("cpu", "memory", "ephemeral-storage"):
        if res in requests:
            result[res] = requests[res]
            result[f"requests.{res}"] = requests[res]
        if res in limits:
            result[f"limits.{res}"] = limits[res]
    for res, amount in requests.items():
        if res.startswith("hugepages-"):
            result[res] = amount
            result[f"requests.{res}"] = amount
        if _is_extended_resource(res):
            result[f"requests.{res}"] = amount
    return result


def _parse_time(text: str) -> float:
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError as e:
        raise InvalidObjectError(f"metadata.deletionTimestamp: invalid time {text!r}") from e


def _pod_is_charged(pod: Object, now: float) -> bool:
    """Upstream ``QuotaV1Pod``: not terminal, and not past deletion time plus grace."""
    phase = (pod.get("status") or {}).get("phase")
    if phase in ("Succeeded", "Failed"):
        return False
    meta = pod.get("metadata") or {}
    deletion = meta.get("deletionTimestamp")
    grace = meta.get("deletionGracePeriodSeconds")
    return not (deletion and grace is not None and now > _parse_time(str(deletion)) + int(grace))


def pod_usage(pod: Object, now: float) -> dict[str, Quantity]:
    """Quota usage of a pod (upstream ``PodUsageFunc``).

    ``count/pods`` is always 1; the compute resources and ``pods`` only while the pod is charged
    (not ``Succeeded``/``Failed`` and not past ``deletionTimestamp +
    deletionGracePeriodSeconds``; ``now`` in seconds since the epoch).

    Raises:
        InvalidObjectError: a resource amount is not a quantity.
    """
    result: dict[str, Quantity] = {"count/pods": _ONE}
    if not _pod_is_charged(pod, now):
        return result
    return add(result, _compute_usage(pod_requests(pod), pod_limits(pod)))


def _is_best_effort(pod: Object) -> bool:
    """Upstream ``qos.GetPodQOS`` == BestEffort: no positive cpu/memory request or limit."""
    qos = (pod.get("status") or {}).get("qosClass")
    if qos:
        return bool(qos == "BestEffort")
    spec = pod.get("spec") or {}
    lists: list[Mapping[str, Quantity]] = []
    pod_level = spec.get("resources") or {}
    lists.append(parse_resource_list(pod_level.get("requests"), "spec.resources.requests"))
    lists.append(parse_resource_list(pod_level.get("limits"), "spec.resources.limits"))
    for kind in ("containers", "initContainers"):
        for i, c in enumerate(_containers(pod, kind)):
            lists.extend(_container_resources(c, f"spec.{kind}[{i}]"))
    return not any(
        key in items and items[key] > 0 for items in lists for key in _COMPUTE_QOS_RESOURCES
    )


def _is_terminating(pod: Object) -> bool:
    """Upstream ``isTerminating``: ``spec.activeDeadlineSeconds >= 0``."""
    deadline = (pod.get("spec") or {}).get("activeDeadlineSeconds")
    return deadline is not None and int(deadline) >= 0


def _uses_cross_namespace_pod_affinity(pod: Object) -> bool:
    """Upstream ``usesCrossNamespacePodAffinity``: an (anti-)affinity term naming namespaces
    or a namespace selector."""
    affinity = (pod.get("spec") or {}).get("affinity") or {}
    for kind in ("podAffinity", "podAntiAffinity"):
        section = affinity.get(kind) or {}
        terms = list(section.get("requiredDuringSchedulingIgnoredDuringExecution") or ())
        terms += [
            w.get("podAffinityTerm") or {}
            for w in section.get("preferredDuringSchedulingIgnoredDuringExecution") or ()
        ]
        if any(t.get("namespaces") or t.get("namespaceSelector") is not None for t in terms):
            return True
    return False


def _priority_class_matches(pod: Object, selector: ScopedResourceSelectorRequirement) -> bool:
    """The selector as a label selector on ``{"PriorityClass": <priorityClassName>}`` (no
    label for an empty name: upstream ``podMatchesSelector``)."""
    name = str((pod.get("spec") or {}).get("priorityClassName") or "")
    return label_selector_matches(selector, name or None)


def _pod_matches_scope(selector: ScopedResourceSelectorRequirement, pod: Object) -> bool:
    """Upstream ``podMatchesScopeFunc``; unknown scopes do not match."""
    scope = selector.scope_name
    if scope == "Terminating":
        return _is_terminating(pod)
    if scope == "NotTerminating":
        return not _is_terminating(pod)
    if scope == "BestEffort":
        return _is_best_effort(pod)
    if scope == "NotBestEffort":
        return not _is_best_effort(pod)
    if scope == "PriorityClass":
        return _priority_class_matches(pod, selector)
    if scope == "CrossNamespacePodAffinity":
        return _uses_cross_namespace_pod_affinity(pod)
    return False


class PodEvaluator:
    """Pod quota usage and matching (upstream ``podEvaluator`` in ``core/pods.go``)."""

    group_resource = GroupResource("", "pods")

    def handles(self, attributes: AdmissionAttributes) -> bool:
        """CREATE of a pod; UPDATE of a pod that moves it in or out of the Terminating scope
        (``activeDeadlineSeconds`` set where it was not); UPDATE of ``pods/resize``.

        Upstream ``podEvaluator.Handles``.
        """
        op = attributes.operation
        if attributes.subresource == "resize":
            return op == Operation.UPDATE
        if attributes.subresource:
            return False
        if op == Operation.UPDATE:
            old, new = attributes.old_object, attributes.object
            return (
                old is not None and new is not None and _is_terminating(old) != _is_terminating(new)
            )
        return op == Operation.CREATE

    def matching_resources(self, names: Iterable[str]) -> list[str]:
        """Pod resources, hugepages and ``requests.<extended>`` among ``names``."""
        return [
            n
            for n in names
            if n in _POD_RESOURCES
            or n.startswith(_POD_RESOURCE_PREFIXES)
            or _is_extended_resource_for_quota(n)
        ]

    def matching_scopes(
        self, obj: Object, selectors: Sequence[ScopedResourceSelectorRequirement]
    ) -> list[ScopedResourceSelectorRequirement]:
        """The selectors the pod satisfies."""
        return [s for s in selectors if _pod_matches_scope(s, obj)]

    def uncovered_quota_scopes(
        self,
        limited: Sequence[ScopedResourceSelectorRequirement],
        matched: Sequence[ScopedResourceSelectorRequirement],
    ) -> list[ScopedResourceSelectorRequirement]:
        """:func:`~dynquota.admission.generic.uncovered_by_scope_name`."""
        return uncovered_by_scope_name(limited, matched)

    def matches(self, quota: ResourceQuota, obj: Object) -> bool:
        """A quota limiting a pod resource whose scopes all hold for the pod."""
        return generic_matches(self, quota, obj)

    def constraints(self, required: Sequence[str], obj: Object) -> str | None:
        """``must specify limits.cpu for: c1; requests.memory for: c1,c2`` or None.

        Upstream ``podEvaluator.Constraints``: if a quota limits cpu or memory (plain,
        ``requests.`` or ``limits.``), every container and init container must state it;
        not checked when the pod sets pod-level ``spec.resources`` (PodLevelResources, on by
        default).
        """
        if is_pod_level_resources_set(obj):
            return None
        required_set = set(required) & _VALIDATION_SET
        missing: dict[str, set[str]] = {}
        for kind in ("containers", "initContainers"):
            for i, c in enumerate(_containers(obj, kind)):
                requests, limits = _container_resources(c, f"spec.{kind}[{i}]")
                present = set(_compute_usage(requests, limits))
                for res in required_set - present:
                    missing.setdefault(res, set()).add(str(c.get("name", "")))
        if not missing:
            return None
        parts = [f"{res} for: {','.join(sorted(missing[res]))}" for res in sorted(missing)]
        return "must specify " + "; ".join(parts)

    def usage(self, obj: Object, now: float) -> dict[str, Quantity]:
        """:func:`pod_usage`."""
        return pod_usage(obj, now)
