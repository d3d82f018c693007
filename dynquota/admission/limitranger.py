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
ported: the LimitRange's ``min``/``max``/``maxLimitRequestRatio`` checks (which refuse a
pod, not change its charge) are the dry run's job.

Shapes: pods and LimitRanges are Kubernetes JSON (camelCase keys) as the API serves them;
nothing is mutated in place (a new pod is returned).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["LIMIT_RANGER_ANNOTATION", "apply_limit_range_defaults", "container_defaults"]

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
