"""Fit one admission request into a set of quotas (Pure).

Port of ``CheckRequest`` in kubernetes/kubernetes ``staging/src/k8s.io/apiserver/pkg/
admission/plugin/resourcequota/controller.go``, with the ``limitedResources`` admission
configuration (:mod:`dynquota.admission.limited`; none by default: every resource is
unlimited unless a quota limits it).
"""

from __future__ import annotations

from collections.abc import Sequence

from dynquota.quantity import Quantity

from .errors import QuotaForbiddenError, QuotaScopeError
from .evaluators import UsageEvaluator
from .limited import LimitedResource, format_scopes, limited_by_default, limited_for
from .resources import add, is_negative, less_than_or_equal, mask, pretty_print, remove_zeros
from .resources import subtract_non_negative as subtract
from .types import AdmissionAttributes, Operation, ResourceQuota, ScopedResourceSelectorRequirement

__all__ = ["check_request"]


def _forbidden(attributes: AdmissionAttributes, detail: str) -> QuotaForbiddenError:
    return QuotaForbiddenError(str(attributes.resource), attributes.name, detail)


def check_request(
    quotas: Sequence[ResourceQuota],
    attributes: AdmissionAttributes,
    evaluator: UsageEvaluator,
    now: float,
    limited: Sequence[LimitedResource] = (),
) -> list[ResourceQuota]:
    """Charge ``attributes`` to every matching quota, or refuse it.

    Returns the quotas (same order and length) with ``used`` increased by the request's usage
    where a quota matches and the usage is non-zero; quotas it does not touch are returned as
    given. The request must fit *all* matching quotas. ``now`` is seconds since the epoch;
    ``limited`` is the ``limitedResources`` admission configuration.

    Raises:
        QuotaForbiddenError: ``failed quota: NAME: must specify ...``, ``status unknown for
            quota: NAME, resources: ...``, ``quota usage is negative for resource(s): ...``,
            ``unable to get previous usage ...``, ``insufficient quota to consume: ...`` or
            ``exceeded quota: NAME, requested: ..., used: ..., limited: ...``.
        QuotaScopeError: ``insufficient quota to match these scopes: [...]``.
        InvalidObjectError: an amount in the object is not a quantity.
    """
    result = list(quotas)
    if not evaluator.handles(attributes):
        return result
    obj = attributes.object or {}

    # The limited-by-default configuration: scopes (of every entry, as upstream) and names.
    limited_scopes = [s for x in limited for s in evaluator.matching_scopes(obj, x.match_scopes)]
    limited_here = limited_for(limited, attributes.resource)
    limited_names = (
        limited_by_default(evaluator.usage(obj, now), limited_here) if limited_here else set()
    )

    interesting: list[int] = []
    restricted_all: set[str] = set()
    restricted_scopes: list[ScopedResourceSelectorRequirement] = []
    for i, quota in enumerate(quotas):
        restricted_scopes += evaluator.matching_scopes(obj, quota.scope_selectors())
        if not evaluator.matches(quota, obj):
            continue
        restricted = evaluator.matching_resources(quota.hard)
        problem = evaluator.constraints(restricted, obj)
        if problem is not None:
            raise _forbidden(attributes, f"failed quota: {quota.name}: {problem}")
        if any(r in quota.hard and r not in quota.used for r in restricted):
            names = ",".join(sorted(restricted))
            raise _forbidden(
                attributes, f"status unknown for quota: {quota.name}, resources: {names}"
            )
        interesting.append(i)
        restricted_all.update(restricted)

    input_usage = evaluator.usage(obj, now)
    negative = is_negative(input_usage)
    if negative:
        raise _forbidden(
            attributes, f"quota usage is negative for resource(s): {','.join(negative)}"
        )

    delta: dict[int, dict[str, Quantity]] = dict.fromkeys(interesting, input_usage)
    # the usage that must be covered when no quota matches (limited-by-default)
    uncovered_delta: dict[str, Quantity] = {}
    if attributes.operation == Operation.CREATE and not interesting:
        uncovered_delta = input_usage
    if attributes.operation == Operation.UPDATE:
        old = attributes.old_object
        if old is None:
            raise _forbidden(
                attributes,
                "unable to get previous usage since prior version of object was not found",
            )
        # Charge only the growth, unless this is a create-on-update (no resourceVersion).
        if (old.get("metadata") or {}).get("resourceVersion"):
            old_delta = subtract(input_usage, evaluator.usage(old, now))
            if not interesting:
                uncovered_delta = old_delta
            for i in interesting:
                if evaluator.matches(quotas[i], old):
                    delta[i] = old_delta
        elif not interesting:
            uncovered_delta = input_usage

    delta = {i: d for i, d in ((i, remove_zeros(d)) for i, d in delta.items()) if d}
    if interesting and not delta:
        return result
    if not interesting and not remove_zeros(uncovered_delta):
        return result

    uncovered = sorted(limited_names - restricted_all)
    if uncovered:
        raise _forbidden(attributes, f"insufficient quota to consume: {','.join(uncovered)}")
    scopes = evaluator.uncovered_quota_scopes(limited_scopes, restricted_scopes)
    if scopes:
        raise QuotaScopeError(f"insufficient quota to match these scopes: {format_scopes(scopes)}")
    if not interesting:
        return result

    for i, requested_all in delta.items():
        quota = quotas[i]
        requested = mask(requested_all, quota.hard)
        new_used = add(quota.used, requested)
        if attributes.subresource != "status":
            fits, exceeded = less_than_or_equal(mask(new_used, requested), quota.hard)
            if not fits:
                raise _forbidden(
                    attributes,
                    f"exceeded quota: {quota.name}, "
                    f"requested: {pretty_print(mask(requested, exceeded))}, "
                    f"used: {pretty_print(mask(quota.used, exceeded))}, "
                    f"limited: {pretty_print(mask(quota.hard, exceeded))}",
                )
        result[i] = quota.with_used(new_used)
    return result
