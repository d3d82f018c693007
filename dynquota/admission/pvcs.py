"""PersistentVolumeClaim quota usage and matching (Pure): the PVC evaluator of kube-apiserver.

Port of kubernetes/kubernetes ``pkg/quota/v1/evaluator/core/persistent_volume_claims.go``
(``pvcEvaluator``: ``Handles``, ``MatchingResources``, ``Usage``, ``getStorageUsage``,
``pvcMatchesScopeFunc``, ``getVolumeAttributesClassNames``) and
``storagehelpers.GetPersistentVolumeClaimClass``. Charges ``count/persistentvolumeclaims``
and ``persistentvolumeclaims`` (1 each), ``requests.storage`` (the claim's
``spec.resources.requests.storage`` rounded up to whole bytes, or
``status.allocatedResources.storage`` when larger: RecoverVolumeExpansionFailure), and the
same per storage class: ``<class>.storageclass.storage.k8s.io/persistentvolumeclaims`` and
``<class>.storageclass.storage.k8s.io/requests.storage``. Handles CREATE and UPDATE (an
expansion is charged its growth). Scope: ``VolumeAttributesClass`` (``In``, ``NotIn``,
``Exists``, ``DoesNotExist``) over the claim's requested, current and target
VolumeAttributesClass names; other scopes never match.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from decimal import Decimal

from dynquota.quantity import Quantity, quantity_from_int

from .generic import (
    Object,
    create_or_update,
    generic_matches,
    label_selector_matches,
    uncovered_by_scope_name,
)
from .types import (
    AdmissionAttributes,
    GroupResource,
    ResourceQuota,
    ScopedResourceSelectorRequirement,
    parse_resource_list,
)

__all__ = ["PersistentVolumeClaimEvaluator", "pvc_usage", "storage_class_resource"]

_COUNT = "count/persistentvolumeclaims"
_PVC_RESOURCES = ("persistentvolumeclaims", "requests.storage")
_STORAGE_CLASS_SUFFIX = ".storageclass.storage.k8s.io/"
_BETA_CLASS_ANNOTATION = "volume.beta.kubernetes.io/storage-class"
_VAC_SCOPE = "VolumeAttributesClass"


def storage_class_resource(storage_class: str, resource: str) -> str:
    """``<class>.storageclass.storage.k8s.io/<resource>`` (upstream
    ``V1ResourceByStorageClass``)."""
    return f"{storage_class}{_STORAGE_CLASS_SUFFIX}{resource}"


def _claim_class(pvc: Object) -> str:
    """Upstream ``GetPersistentVolumeClaimClass``: the beta annotation, else
    ``spec.storageClassName``, else ``""``."""
    annotations = (pvc.get("metadata") or {}).get("annotations") or {}
    if _BETA_CLASS_ANNOTATION in annotations:
        return str(annotations[_BETA_CLASS_ANNOTATION])
    return str((pvc.get("spec") or {}).get("storageClassName") or "")


def _whole_bytes(q: Quantity) -> Quantity:
    """Rounded up to a whole number of bytes (upstream ``RoundUp(0)``, issue 94313)."""
    if q.value == q.value.to_integral_value():
        return q
    return Quantity(Decimal(q.ceil()), q.format)


def _storage(pvc: Object) -> Quantity | None:
    """Upstream ``getStorageUsage``: the request, or the allocated size when larger."""
    spec_requests = ((pvc.get("spec") or {}).get("resources") or {}).get("requests")
    requested = parse_resource_list(spec_requests, "spec.resources.requests").get("storage")
    if requested is None:
        return None
    result = _whole_bytes(requested)
    allocated_raw = (pvc.get("status") or {}).get("allocatedResources")
    allocated = parse_resource_list(allocated_raw, "status.allocatedResources").get("storage")
    if allocated is not None and allocated > result:
        result = _whole_bytes(allocated)
    return result


def pvc_usage(pvc: Object) -> dict[str, Quantity]:
    """Quota usage of a PersistentVolumeClaim (upstream ``pvcEvaluator.Usage``).

    Raises:
        InvalidObjectError: a storage amount is not a quantity.
    """
    one = quantity_from_int(1)
    result = {"persistentvolumeclaims": one, _COUNT: one}
    storage_class = _claim_class(pvc)
    if storage_class:
        result[storage_class_resource(storage_class, "persistentvolumeclaims")] = one
    storage = _storage(pvc)
    if storage is not None:
        result["requests.storage"] = storage
        if storage_class:
            result[storage_class_resource(storage_class, "requests.storage")] = storage
    return result


def _vac_names(pvc: Object) -> list[str]:
    """Upstream ``getVolumeAttributesClassNames``: the requested
    (``spec.volumeAttributesClassName``), current and target class names, without
    duplicates or empties."""
    status = pvc.get("status") or {}
    candidates = [
        (pvc.get("spec") or {}).get("volumeAttributesClassName"),
        status.get("currentVolumeAttributesClassName"),
        (status.get("modifyVolumeStatus") or {}).get("targetVolumeAttributesClassName"),
    ]
    names: list[str] = []
    for name in candidates:
        if name and str(name) not in names:
            names.append(str(name))
    return names


def _pvc_matches_scope(selector: ScopedResourceSelectorRequirement, pvc: Object) -> bool:
    """Upstream ``pvcMatchesScopeFunc``: ``VolumeAttributesClass`` matches when any of the
    claim's class names satisfies the selector (no name: the selector against no label)."""
    if selector.scope_name != _VAC_SCOPE:
        return False
    names = _vac_names(pvc)
    if not names:
        return label_selector_matches(selector, None)
    return any(label_selector_matches(selector, n) for n in names)


class PersistentVolumeClaimEvaluator:
    """PVC quota usage and matching (upstream ``pvcEvaluator``)."""

    group_resource = GroupResource("", "persistentvolumeclaims")

    def handles(self, attributes: AdmissionAttributes) -> bool:
        """:func:`~dynquota.admission.generic.create_or_update`."""
        return create_or_update(attributes)

    def matching_resources(self, names: Iterable[str]) -> list[str]:
        """``count/persistentvolumeclaims``, ``persistentvolumeclaims``,
        ``requests.storage`` and their ``<class>.storageclass.storage.k8s.io/`` forms."""
        by_class = tuple(_STORAGE_CLASS_SUFFIX + r for r in _PVC_RESOURCES)
        return [n for n in names if n == _COUNT or n in _PVC_RESOURCES or n.endswith(by_class)]

    def matching_scopes(
        self, obj: Object, selectors: Sequence[ScopedResourceSelectorRequirement]
    ) -> list[ScopedResourceSelectorRequirement]:
        """The selectors the claim satisfies."""
        return [s for s in selectors if _pvc_matches_scope(s, obj)]

    def uncovered_quota_scopes(
        self,
        limited: Sequence[ScopedResourceSelectorRequirement],
        matched: Sequence[ScopedResourceSelectorRequirement],
    ) -> list[ScopedResourceSelectorRequirement]:
        """:func:`~dynquota.admission.generic.uncovered_by_scope_name`."""
        return uncovered_by_scope_name(limited, matched)

    def matches(self, quota: ResourceQuota, obj: Object) -> bool:
        """A quota limiting a claim resource whose scopes all hold for the claim."""
        return generic_matches(self, quota, obj)

    def constraints(self, required: Sequence[str], obj: Object) -> str | None:
        """No constraints."""
        return None

    def usage(self, obj: Object, now: float) -> dict[str, Quantity]:
        """:func:`pvc_usage`."""
        return pvc_usage(obj)
