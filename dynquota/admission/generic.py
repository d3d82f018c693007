"""The usage-evaluator interface and the generic object-count evaluator (Pure).

:class:`UsageEvaluator` is what the admission library asks of an evaluator (upstream
``quota.Evaluator``, admission part). :class:`ObjectCountEvaluator`, for any resource,
charges ``count/<resource>.<group>`` (core group: ``count/<resource>``) and, for
``configmaps``, ``secrets``, ``replicationcontrollers`` and ``resourcequotas``, the legacy key
of the same name. Upstream: ``staging/src/k8s.io/apiserver/pkg/quota/v1/generic/evaluator.go``
(``NewObjectCountEvaluator``, ``ObjectCountQuotaResourceNameFor``, ``Matches``) and
``pkg/quota/v1/evaluator/core/registry.go`` (``legacyObjectCountAliases``). A quota with any
scope never matches an object-count resource (upstream ``MatchesNoScopeFunc``).
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
    "UsageEvaluator",
    "generic_matches",
    "object_count_resource_name",
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


class ObjectCountEvaluator:
    """Counts objects of one group/resource on CREATE.

    Upstream ``generic.objectCountEvaluator``. Charges 1 of ``count/<resource>[.<group>]`` and
    of ``alias`` when given (``configmaps`` etc.). Matches no scoped quota.
    """

    def __init__(self, group_resource: GroupResource, alias: str | None = None) -> None:
        self.group_resource = group_resource
        names = [object_count_resource_name(group_resource)]
        if alias:
            names.append(alias)
        self.resource_names: tuple[str, ...] = tuple(names)

    def handles(self, attributes: AdmissionAttributes) -> bool:
        """CREATE only (upstream ``objectCountEvaluator.Handles``)."""
        return attributes.operation == Operation.CREATE

    def matching_resources(self, names: Iterable[str]) -> list[str]:
        """Names among ``count/...`` and the alias."""
        return [n for n in names if n in self.resource_names]

    def matching_scopes(
        self, obj: Object, selectors: Sequence[ScopedResourceSelectorRequirement]
    ) -> list[ScopedResourceSelectorRequirement]:
        """None: object counts are never scoped (upstream ``MatchesNoScopeFunc``)."""
        return []

    def matches(self, quota: ResourceQuota, obj: Object) -> bool:
        """A quota limiting one of the names, without scopes."""
        return generic_matches(self, quota, obj)

    def constraints(self, required: Sequence[str], obj: Object) -> str | None:
        """No constraints."""
        return None

    def usage(self, obj: Object, now: float) -> dict[str, Quantity]:
        """1 of each resource name."""
        return dict.fromkeys(self.resource_names, _ONE)


# --- pods -------------------------------------------------------------------------------
