"""LimitRange defaults applied to a pod, as kube-apiserver applies them before quota (Pure).

Quota admission charges a pod *after* the mutating admission plugins ran, so a container
without a CPU request is charged the namespace's LimitRange ``defaultRequest``. This module
applies those defaults to a pod manifest, for when the apiserver's own answer (a server-side
dry-run create returns the defaulted pod) is not available: a tenant not allowed to create
pods, or a dry run refused by quota before the defaulted object could be shown.

Port of kubernetes/kubernetes ``plugin/pkg/admission/limitranger/admission.go``
(``defaultContainerResourceRequirements``, ``mergeContainerResources`` via
``mergePodResourceRequirements``, called by ``PodMutateLimitFunc`` once per LimitRange of the
namespace), preceded by the API defaulting of ``pkg/apis/core/v1/defaults.go``
(``SetDefaults_Pod``: a container's missing request is its limit). Only the defaults are
ported too, for when no dry run could ask the apiserver: the ``min``/``max``/
``maxLimitRequestRatio`` checks that refuse a pod (:func:`limit_range_refusal`: upstream
``PodValidateLimitFunc`` with ``minConstraint``, ``maxConstraint``,
``limitRequestRatioConstraint``, ``requestLimitEnforcedValues`` and ``podRequests``/
``podLimits`` for the ``Pod`` type; ``runLimitFunc``: the first LimitRange that refuses
answers).

Shapes: pods and LimitRanges are Kubernetes JSON (camelCase keys) as the API serves them;
nothing is mutated in place (a new pod is returned).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from decimal import ROUND_UP
from typing import Any, Final

from dynquota.quantity import Quantity

from .resources import add
from .types import parse_resource_list

__all__ = [
    "LIMIT_RANGER_ANNOTATION",
    "apply_limit_range_defaults",
    "container_defaults",
    "limit_range_refusal",
]

LIMIT_RANGER_ANNOTATION = "kubernetes.io/limit-ranger"
"""The annotation the LimitRanger plugin writes on a pod it defaulted (upstream
``limitRangerAnnotation``): ``LimitRanger plugin set: cpu request for container app``."""

_KINDS = (("containers", "container"), ("initContainers", "init container"))


def container_defaults(limit_range: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(requests, limits)``: the ``defaultRequest`` and ``default`` of the LimitRange's items
    of type ``Container`` (a later item's value for a resource replaces an earlier one's, as
    upstream ``defaultContainerResourceRequirements``); quantity text as stored."""
    requests: dict[str, Any] = {}
    limits: dict[str, Any] = {}
    for item in (limit_range.get("spec") or {}).get("limits") or ():
        if item.get("type") != "Container":
            continue
        requests.update(item.get("defaultRequest") or {})
        limits.update(item.get("default") or {})
    return requests, limits


def apply_limit_range_defaults(
    pod: Mapping[str, Any], limit_ranges: Iterable[Mapping[str, Any]]
) -> tuple[dict[str, Any], list[str]]:
    """The pod after the API defaulting and every LimitRange's container defaults, and the
    parts set (``cpu request for container app``, as upstream's annotation lists them).

    Per LimitRange in the order given (upstream: the lister's order), for every container and
    init container: each default limit the container lacks is set, then each default request
    it lacks. A resource already given (by the pod or by an earlier LimitRange) is kept.
    """
    out: dict[str, Any] = copy.deepcopy(dict(pod))
    spec = out.setdefault("spec", {})
    set_parts: list[str] = []
    for kind, _ in _KINDS:
        for container in spec.get(kind) or ():
            resources = container.setdefault("resources", {})
            limits = resources.get("limits") or {}
            requests = dict(resources.get("requests") or {})
            for name, value in limits.items():  # SetDefaults_Pod: a missing request is the limit
                requests.setdefault(name, value)
            if requests:
                resources["requests"] = requests
    for limit_range in limit_ranges:
        default_requests, default_limits = container_defaults(limit_range)
        if not default_requests and not default_limits:
            continue
        for kind, noun in _KINDS:
            for container in spec.get(kind) or ():
                resources = container.setdefault("resources", {})
                limits = dict(resources.get("limits") or {})
                requests = dict(resources.get("requests") or {})
                new_limits = sorted(k for k in default_limits if k not in limits)
                new_requests = sorted(k for k in default_requests if k not in requests)
                for name in new_limits:
                    limits[name] = default_limits[name]
                for name in new_requests:
                    requests[name] = default_requests[name]
                if limits:
                    resources["limits"] = limits
                if requests:
                    resources["requests"] = requests
                who = f"{noun} {container.get('name', '')}"
                if new_requests:
                    set_parts.append(f"{', '.join(new_requests)} request for {who}")
                if new_limits:
                    set_parts.append(f"{', '.join(new_limits)} limit for {who}")
    if set_parts:
        annotations = out.setdefault("metadata", {}).setdefault("annotations", {})
        annotations[LIMIT_RANGER_ANNOTATION] = "LimitRanger plugin set: " + "; ".join(set_parts)
    return out, set_parts


_MAX_MILLI: Final = (2**63 - 1) // 1000
"""Upstream ``resource.MaxMilliValue``: up to it, amounts are compared in milli-units."""

_Resources = dict[str, Quantity]


def _value(q: Quantity | None, scale: int = 1) -> int:
    """Upstream ``Value()`` (``scale`` 1) or ``MilliValue()`` (1000): rounded up; 0 for none."""
    if q is None:
        return 0
    return int((q.value * scale).to_integral_value(rounding=ROUND_UP))


def _enforced_values(req: Quantity | None, lim: Quantity | None, enforced: Quantity) -> list[int]:
    """Upstream ``requestLimitEnforcedValues``: (request, limit, enforced) in milli-units when
    none exceeds ``MaxMilliValue``, else in whole units."""
    whole = [_value(req), _value(lim), _value(enforced)]
    if all(v <= _MAX_MILLI for v in whole):
        return [_value(req, 1000), _value(lim, 1000), _value(enforced, 1000)]
    return whole


def _min(kind: str, name: str, enforced: Quantity, req: _Resources, lim: _Resources) -> str | None:
    """Upstream ``minConstraint``."""
    r, limit, e = _enforced_values(req.get(name), lim.get(name), enforced)
    if name not in req:
        return f"minimum {name} usage per {kind} is {enforced}.  No request is specified"
    if r < e:
        return f"minimum {name} usage per {kind} is {enforced}, but request is {req[name]}"
    if name in lim and limit < e:
        return f"minimum {name} usage per {kind} is {enforced}, but limit is {lim[name]}"
    return None


def _max(kind: str, name: str, enforced: Quantity, req: _Resources, lim: _Resources) -> str | None:
    """Upstream ``maxConstraint``."""
    r, limit, e = _enforced_values(req.get(name), lim.get(name), enforced)
    if name not in lim:
        return f"maximum {name} usage per {kind} is {enforced}.  No limit is specified"
    if limit > e:
        return f"maximum {name} usage per {kind} is {enforced}, but limit is {lim[name]}"
    if name in req and r > e:
        return f"maximum {name} usage per {kind} is {enforced}, but request is {req[name]}"
    return None


def _ratio(
    kind: str, name: str, enforced: Quantity, req: _Resources, lim: _Resources
) -> str | None:
    """Upstream ``limitRequestRatioConstraint`` (its float ratio, printed ``%f``)."""
    r, limit, _ = _enforced_values(req.get(name), lim.get(name), enforced)
    head = f"{name} max limit to request ratio per {kind} is {enforced}"
    if r == 0:
        return f"{head}, but no request is specified or request is 0"
    if limit == 0:
        return f"{head}, but no limit is specified or limit is 0"
    observed = limit / r
    shown, bound = observed, float(_value(enforced))
    if _value(enforced) <= _MAX_MILLI:
        observed, bound = observed * 1000, float(_value(enforced, 1000))
    if observed > bound:
        return f"{head}, but provided ratio is {shown:f}"
    return None


_CHECKS = (("min", _min), ("max", _max), ("maxLimitRequestRatio", _ratio))


def _pair(container: Mapping[str, Any], where: str) -> tuple[_Resources, _Resources]:
    resources = container.get("resources") or {}
    return (
        parse_resource_list(resources.get("requests"), f"{where}.resources.requests"),
        parse_resource_list(resources.get("limits"), f"{where}.resources.limits"),
    )


def _largest(a: _Resources, b: _Resources) -> _Resources:
    out = dict(a)
    for k, v in b.items():
        if k not in out or v > out[k]:
            out[k] = v
    return out


def _pod_totals(spec: Mapping[str, Any]) -> tuple[_Resources, _Resources]:
    """Upstream ``podRequests``/``podLimits`` of the LimitRanger (no overhead, spec only): the
    containers' sum, a restartable init container (sidecar) added to it, the larger of that
    and each init container (plus the sidecars before it)."""
    totals: list[_Resources] = []
    for part in (0, 1):
        total: _Resources = {}
        for i, c in enumerate(spec.get("containers") or ()):
            total = add(total, _pair(c, f"spec.containers[{i}]")[part])
        sidecars: _Resources = {}
        peak: _Resources = {}
        for i, c in enumerate(spec.get("initContainers") or ()):
            own = _pair(c, f"spec.initContainers[{i}]")[part]
            if c.get("restartPolicy") == "Always":
                total, sidecars = add(total, own), add(sidecars, own)
                peak = _largest(peak, sidecars)
            else:
                peak = _largest(peak, add(own, sidecars))
        totals.append(_largest(total, peak))
    return totals[0], totals[1]


def _refusals(limit_range: Mapping[str, Any], pod: Mapping[str, Any]) -> list[str]:
    """Upstream ``PodValidateLimitFunc`` of one LimitRange: every violated constraint."""
    spec = pod.get("spec") or {}
    found: list[str] = []
    for n, item in enumerate((limit_range.get("spec") or {}).get("limits") or ()):
        kind = str(item.get("type") or "")
        subjects: list[tuple[_Resources, _Resources]] = []
        if kind == "Container":
            for part in ("containers", "initContainers"):
                subjects += [
                    _pair(c, f"spec.{part}[{i}]") for i, c in enumerate(spec.get(part) or ())
                ]
        elif kind == "Pod":
            subjects.append(_pod_totals(spec))
        checks = [
            (check, parse_resource_list(item.get(field), f"spec.limits[{n}].{field}"))
            for field, check in _CHECKS
        ]
        for req, lim in subjects:
            for check, bounds in checks:
                for name in sorted(bounds):
                    problem = check(kind, name, bounds[name], req, lim)
                    if problem is not None:
                        found.append(problem)
    return found


def limit_range_refusal(
    pod: Mapping[str, Any], limit_ranges: Iterable[Mapping[str, Any]]
) -> tuple[str, str] | None:
    """``(LimitRange name, why)`` of the first LimitRange (in the order given: upstream, the
    lister's) that refuses ``pod`` (already defaulted, :func:`apply_limit_range_defaults`), or
    ``None``. ``why`` is the text kube-apiserver v1.37 answers (``maximum cpu usage per
    Container is 1, but limit is 2``), several violations as its aggregate prints them (``[a,
    b]``: per container, then the pod; min, max, ratio), resource names in sorted order where
    upstream iterates a map. As the aggregate's ``Error()`` (apimachinery
    ``util/errors.aggregate``), a text is given once: containers that break a constraint alike
    (the texts name no container: two at a ratio of 4 say the same) are one violation, and one
    text left is printed without brackets.

    Raises:
        InvalidObjectError: an amount is not a quantity.
    """
    for limit_range in limit_ranges:
        found = list(dict.fromkeys(_refusals(limit_range, pod)))  # in order, each text once
        if found:
            name = str((limit_range.get("metadata") or {}).get("name") or "")
            return name, found[0] if len(found) == 1 else f"[{', '.join(found)}]"
    return None
