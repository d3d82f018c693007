"""Ports of the tables (2 of 2) of kube-apiserver v1.37.2's pods_test.go.

``pkg/quota/v1/evaluator/core/pods_test.go``: ``TestPodEvaluatorMatchingScopes``,
``TestPodEvaluatorUsageResourceResize`` (InPlacePodVerticalScaling on: GA) and
``TestPodEvaluatorHandles``, case by case (the pytest id is the upstream case name), through
the library's :class:`~dynquota.admission.PodEvaluator`. A case written for a gate turned off
is not ported (listed in docs/admission.md).
"""

from __future__ import annotations

from typing import Any

import pytest

from dynquota.admission import AdmissionAttributes, Operation, ScopedResourceSelectorRequirement

from ._upstream import EV, NOW, PODS, base, c, pod

# --- TestPodEvaluatorMatchingScopes ----------------------------------------------------------


def _s(name: str, op: str = "Exists", *values: str) -> ScopedResourceSelectorRequirement:
    return ScopedResourceSelectorRequirement(name, op, values)


_ALL = [
    _s("Terminating"),
    _s("NotTerminating"),
    _s("BestEffort"),
    _s("NotBestEffort"),
    _s("PriorityClass", "In", "class1"),
    _s("CrossNamespacePodAffinity"),
]
_T, _BE, _X = _s("Terminating"), _s("BestEffort"), _s("CrossNamespacePodAffinity")


def _cross_ns(kind: str, required: bool, term: dict[str, Any], case: str) -> Any:
    """A case of a Terminating pod with one cross-namespace (anti-)affinity term (required or
    preferred): in the Terminating, BestEffort and CrossNamespacePodAffinity scopes."""
    if required:
        affinity = {kind: {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}
    else:
        affinity = {
            kind: {"preferredDuringSchedulingIgnoredDuringExecution": [{"podAffinityTerm": term}]}
        }
    return pytest.param(
        pod(activeDeadlineSeconds=30, affinity=affinity), None, [_T, _BE, _X], id=case
    )


@pytest.mark.parametrize(
    ("p", "selectors", "want"),
    [
        pytest.param(pod(), None, [_s("NotTerminating"), _BE], id="EmptyPod"),
        pytest.param(
            pod(priorityClassName="class1"),
            None,
            [_s("NotTerminating"), _BE, _s("PriorityClass", "In", "class1")],
            id="PriorityClass",
        ),
        pytest.param(
            pod(
                [
                    c(
                        requests={"cpu": "1", "memory": "50M", "example.com/dongle": "1"},
                        limits={"cpu": "2", "memory": "100M", "example.com/dongle": "1"},
                    )
                ]
            ),
            None,
            [_s("NotTerminating"), _s("NotBestEffort")],
            id="NotBestEffort",
        ),
        pytest.param(pod(activeDeadlineSeconds=30), None, [_T, _BE], id="Terminating"),
        pytest.param(pod(activeDeadlineSeconds=30), [_T], [_T], id="OnlyTerminating"),
        _cross_ns(
            "podAffinity",
            True,
            {"labelSelector": {}, "namespaces": ["ns1"], "namespaceSelector": {}},
            "CrossNamespaceRequiredAffinity",
        ),
        _cross_ns(
            "podAffinity",
            True,
            {"labelSelector": {}, "namespaces": ["ns1"]},
            "CrossNamespaceRequiredAffinityWithSlice",
        ),
        _cross_ns(
            "podAffinity",
            False,
            {"labelSelector": {}, "namespaces": ["ns2"], "namespaceSelector": {}},
            "CrossNamespacePreferredAffinity",
        ),
        _cross_ns(
            "podAffinity",
            False,
            {"labelSelector": {}, "namespaceSelector": {}},
            "CrossNamespacePreferredAffinityWithSelector",
        ),
        _cross_ns(
            "podAntiAffinity",
            False,
            {"labelSelector": {}, "namespaceSelector": {}},
            "CrossNamespacePreferredAntiAffinity",
        ),
        _cross_ns(
            "podAntiAffinity",
            True,
            {"labelSelector": {}, "namespaces": ["ns3"]},
            "CrossNamespaceRequiredAntiAffinity",
        ),
    ],
)
def test_TestPodEvaluatorMatchingScopes(  # noqa: N802
    p: dict[str, Any],
    selectors: list[ScopedResourceSelectorRequirement] | None,
    want: list[ScopedResourceSelectorRequirement],
) -> None:
    assert EV.matching_scopes(p, _ALL if selectors is None else selectors) == want


# --- TestPodEvaluatorUsageResourceResize (InPlacePodVerticalScaling enabled) -----------------

_MAX = "verify Max(Container.Spec.Requests, ContainerStatus.Resources"


@pytest.mark.parametrize(
    ("spec_req", "spec_lim", "status_req", "usage"),
    [
        pytest.param(
            {"memory": "200Mi"},
            {"memory": "400Mi"},
            {"memory": "150Mi"},
            {"requests.memory": "200Mi", "limits.memory": "400Mi", "memory": "200Mi"},
            id=f"{_MAX}) for memory resource",
        ),
        pytest.param(
            {"cpu": "100m"},
            {"cpu": "200m"},
            {"cpu": "150m"},
            {"requests.cpu": "150m", "limits.cpu": "200m", "cpu": "150m"},
            id=f"{_MAX}) for CPU resource",
        ),
        pytest.param(
            {"cpu": "100m", "memory": "200Mi"},
            {"cpu": "200m", "memory": "400Mi"},
            {"cpu": "150m", "memory": "250Mi"},
            {
                "requests.cpu": "150m",
                "limits.cpu": "200m",
                "requests.memory": "250Mi",
                "limits.memory": "400Mi",
                "cpu": "150m",
                "memory": "250Mi",
            },
            id=f"{_MAX}) for CPU and memory resource",
        ),
        pytest.param(
            {"cpu": "100m", "memory": "200Mi"},
            {"cpu": "200m", "memory": "400Mi"},
            None,
            {
                "requests.cpu": "100m",
                "limits.cpu": "200m",
                "requests.memory": "200Mi",
                "limits.memory": "400Mi",
                "cpu": "100m",
                "memory": "200Mi",
            },
            id=f"{_MAX}==nil) for CPU and memory resource",
        ),
    ],
)
def test_TestPodEvaluatorUsageResourceResize(  # noqa: N802
    spec_req: dict[str, str],
    spec_lim: dict[str, str],
    status_req: dict[str, str] | None,
    usage: dict[str, str],
) -> None:
    # upstream's containers and statuses are unnamed: matched by the empty name
    status: dict[str, Any] = {} if status_req is None else {"resources": {"requests": status_req}}
    p = pod([c(requests=spec_req, limits=spec_lim)], status={"containerStatuses": [status]})
    got = {k: str(v) for k, v in sorted(EV.usage(p, NOW).items())}
    assert got == dict(sorted(base(**usage).items()))


# --- TestPodEvaluatorHandles -----------------------------------------------------------------


def _attrs(
    op: Operation,
    new: dict[str, Any] | None = None,
    old: dict[str, Any] | None = None,
    sub: str = "",
) -> AdmissionAttributes:
    return AdmissionAttributes(
        namespace="", resource=PODS, operation=op, object=new, old_object=old, subresource=sub
    )


@pytest.mark.parametrize(
    ("attrs", "want"),
    [
        pytest.param(_attrs(Operation.CREATE), True, id="create"),
        pytest.param(
            _attrs(Operation.UPDATE, pod(), pod(activeDeadlineSeconds=1)),
            True,
            id="update-activeDeadlineSeconds-to-nil",
        ),
        pytest.param(
            _attrs(Operation.UPDATE, pod(activeDeadlineSeconds=1), pod()),
            True,
            id="update-activeDeadlineSeconds-from-nil",
        ),
        pytest.param(
            _attrs(Operation.UPDATE, pod(activeDeadlineSeconds=1), pod(activeDeadlineSeconds=2)),
            False,
            id="update-activeDeadlineSeconds-with-different-values",
        ),
        pytest.param(_attrs(Operation.UPDATE), False, id="update"),
        pytest.param(_attrs(Operation.DELETE), False, id="delete"),
        pytest.param(_attrs(Operation.CONNECT), False, id="connect"),
        pytest.param(_attrs(Operation.CREATE, sub="subresource"), False, id="create-subresource"),
        pytest.param(_attrs(Operation.UPDATE, sub="subresource"), False, id="update-subresource"),
        pytest.param(_attrs(Operation.UPDATE, sub="resize"), True, id="update-resize"),
    ],
)
def test_TestPodEvaluatorHandles(attrs: AdmissionAttributes, want: bool) -> None:  # noqa: N802
    assert EV.handles(attrs) is want
