"""The usage-evaluator interface and the generic object-count evaluator (Pure).

:class:`UsageEvaluator` is what the admission library asks of an evaluator (upstream
``quota.Evaluator``, admission part). :class:`ObjectCountEvaluator`, for any resource,
charges ``count/<resource>.<group>`` (core group: ``count/<resource>``) and, for
``configmaps``, ``secrets``, ``replicationcontrollers`` and ``resourcequotas``, the legacy key
of the same name. Upstream: ``staging/src/k8s.io/apiserver/pkg/quota/v1/generic/evaluator.go``
(``NewObjectCountEvaluator``, ``ObjectCountQuotaResourceNameFor``, ``Matches``) and
``pkg/quota/v1/evaluator/core/registry.go`` (``legacyObjectCountAliases``). A quota with any
scope never matches an object-count resource (upstream ``MatchesNoScopeFunc``).

The pieces the evaluators share: :class:`UnscopedEvaluator` (the scope part of the object
counts and services), :func:`create_or_update` (the ``Handles`` of services and claims),
:func:`uncovered_by_scope_name` (the ``UncoveredQuotaScopes`` of pods and claims) and
:func:`label_selector_matches` (a scope selector as a label selector on one label: pods'
``PriorityClass``, claims' ``VolumeAttributesClass``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

from dynquota.quantity import Quantity, quantity_from_int

from .types import (
    AdmissionAttributes,
    GroupResource,
    Operation,
    ResourceQuota,
    ScopedResourceSelectorRequirement,
)

__all__ = [
    "Object",
    "ObjectCountEvaluator",
    "UnscopedEvaluator",
    "UsageEvaluator",
    "create_or_update",
    "generic_matches",
    "label_selector_matches",
    "object_count_resource_name",
    "uncovered_by_scope_name",
]


Object = Mapping[str, Any]

_ONE = quantity_from_int(1)


def object_count_resource_name(gr: GroupResource) -> str:
    """``count/<resource>`` for the core group, ``count/<resource>.<group>`` otherwise.

    Upstream ``generic.ObjectCountQuotaResourceNameFor``.
    """
    return f"count/{gr}"


class UsageEvaluator(Protocol):
    """Measures one group/resource for quota (upstream ``quota.Evaluator``, admission part)."""

    group_resource: GroupResource

    def handles(self, attributes: AdmissionAttributes) -> bool:
        """Whether this request can change quota usage at all."""
        ...

    def matching_resources(self, names: Iterable[str]) -> list[str]:
        """The subset of quota resource names this evaluator charges."""
        ...

    def matching_scopes(
        self, obj: Object, selectors: Sequence[ScopedResourceSelectorRequirement]
    ) -> list[ScopedResourceSelectorRequirement]:
        """The selectors ``obj`` satisfies."""
        ...

    def uncovered_quota_scopes(
        self,
        limited: Sequence[ScopedResourceSelectorRequirement],
        matched: Sequence[ScopedResourceSelectorRequirement],
    ) -> list[ScopedResourceSelectorRequirement]:
        """The ``limited`` scopes (of the ``limitedResources`` configuration) that no scope in
        ``matched`` (of the quotas) covers (upstream ``UncoveredQuotaScopes``)."""
        ...

    def matches(self, quota: ResourceQuota, obj: Object) -> bool:
        """Whether ``quota`` governs ``obj``: it limits a resource this evaluator charges and
        ``obj`` is in every one of its scopes (upstream ``generic.Matches``)."""
        ...

    def constraints(self, required: Sequence[str], obj: Object) -> str | None:
        """An error text if ``obj`` misses something a quota limiting ``required`` needs."""
        ...

    def usage(self, obj: Object, now: float) -> dict[str, Quantity]:
        """What ``obj`` uses; ``now`` in seconds since the epoch (for pod grace periods).

        Raises:
            InvalidObjectError: an amount in ``obj`` is not a quantity.
        """
        ...


def generic_matches(evaluator: UsageEvaluator, quota: ResourceQuota, obj: Object) -> bool:
    """Upstream ``generic.Matches``: a limited resource in common and every scope matched."""
    if not evaluator.matching_resources(quota.hard):
        return False
    selectors = quota.scope_selectors()
    return len(evaluator.matching_scopes(obj, selectors)) == len(selectors)


def create_or_update(attributes: AdmissionAttributes) -> bool:
    """CREATE or UPDATE of the object itself, not of a subresource such as ``status``
    (upstream ``serviceEvaluator.Handles`` and ``pvcEvaluator.Handles``, with the subresource
    filter of ``QuotaAdmission.Validate``)."""
    if attributes.subresource:
        return False
    return attributes.operation in (Operation.CREATE, Operation.UPDATE)


def uncovered_by_scope_name(
    limited: Sequence[ScopedResourceSelectorRequirement],
    matched: Sequence[ScopedResourceSelectorRequirement],
) -> list[ScopedResourceSelectorRequirement]:
    """The ``limited`` scopes whose scope name no scope in ``matched`` has (upstream
    ``podEvaluator.UncoveredQuotaScopes`` and ``pvcEvaluator.UncoveredQuotaScopes``)."""
    names = {m.scope_name for m in matched}
    return [s for s in limited if s.scope_name not in names]


def label_selector_matches(selector: ScopedResourceSelectorRequirement, value: str | None) -> bool:
    """The selector as a label selector on ``{scopeName: value}`` (``None``: no label); an
    unknown operator matches nothing."""
    op = selector.operator
    if op == "Exists":
        return value is not None
    if op == "DoesNotExist":
        return value is None
    if op == "In":
        return value is not None and value in selector.values
    if op == "NotIn":
        return value is None or value not in selector.values
    return False


class UnscopedEvaluator:
    """The scope part of an evaluator whose resources no scope covers (upstream
    ``generic.MatchesNoScopeFunc``): no scope matches, none is left uncovered, a quota with
    any scope never matches; and no constraints. Mixed into :class:`ObjectCountEvaluator` and
    :class:`~dynquota.admission.services.ServiceEvaluator`, which add ``group_resource``,
    ``handles``, ``matching_resources`` and ``usage``."""

    def matching_scopes(
        self, obj: Object, selectors: Sequence[ScopedResourceSelectorRequirement]
    ) -> list[ScopedResourceSelectorRequirement]:
        """None: never scoped (upstream ``MatchesNoScopeFunc``)."""
        return []

    def uncovered_quota_scopes(
        self,
        limited: Sequence[ScopedResourceSelectorRequirement],
        matched: Sequence[ScopedResourceSelectorRequirement],
    ) -> list[ScopedResourceSelectorRequirement]:
        """None (upstream ``objectCountEvaluator`` and ``serviceEvaluator``)."""
        return []

    def matches(self: UsageEvaluator, quota: ResourceQuota, obj: Object) -> bool:
        """A quota limiting one of the evaluator's resources, without scopes."""
        return generic_matches(self, quota, obj)

    def constraints(self, required: Sequence[str], obj: Object) -> str | None:
        """No constraints."""
        return None


class ObjectCountEvaluator(UnscopedEvaluator):
    """Counts objects of one group/resource on CREATE.

    Upstream ``generic.objectCountEvaluator``. Charges 1 of ``count/<resource>[.<group>]`` and
    of ``alias`` when given (``configmaps`` etc.). Matches no scoped quota
    (:class:`UnscopedEvaluator`).
    """

    def __init__(self, group_resource: GroupResource, alias: str | None = None) -> None:
        self.group_resource = group_resource
        names = [object_count_resource_name(group_resource)]
        if alias:
            names.append(alias)
        self.resource_names: tuple[str, ...] = tuple(names)

    def handles(self, attributes: AdmissionAttributes) -> bool:
        """CREATE of the object itself, not of a subresource.

        Upstream ``objectCountEvaluator.Handles`` (CREATE) together with the subresource
        filter of ``QuotaAdmission.Validate`` (``admission.go``), so that :func:`check_request`
        called directly ignores ``configmaps/status`` and the like as kube-apiserver does.
        """
        return attributes.operation == Operation.CREATE and not attributes.subresource

    def matching_resources(self, names: Iterable[str]) -> list[str]:
        """Names among ``count/...`` and the alias."""
        return [n for n in names if n in self.resource_names]

    def usage(self, obj: Object, now: float) -> dict[str, Quantity]:
        """1 of each resource name."""
        return dict.fromkeys(self.resource_names, _ONE)
