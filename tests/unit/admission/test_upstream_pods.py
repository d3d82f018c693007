"""Ports of kube-apiserver v1.37.2's pod quota tests behind issue #29's findings 1-5.

Named after the upstream test they follow (``plugin/pkg/admission/resourcequota/
admission_test.go``, ``pkg/quota/v1/evaluator/core/pods_test.go``); run through the
library's public API (``check_request``, ``pod_usage``, ``Registry``).
"""

from __future__ import annotations

from typing import Any

import pytest

from dynquota.admission import (
    AdmissionAttributes,
    GroupResource,
    Operation,
    QuotaForbiddenError,
    Registry,
    pod_usage,
)

from ._upstream import NOW, PODS, check, make_quota, used_text


def _pod(
    requests: dict[str, str] | None = None,
    limits: dict[str, str] | None = None,
    rv: str = "",
    **spec: Any,
) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    if requests:
        resources["requests"] = requests
    if limits:
        resources["limits"] = limits
    meta: dict[str, Any] = {"name": "123", "namespace": "test"}
    if rv:
        meta["resourceVersion"] = rv
    return {
        "metadata": meta,
        "spec": {"containers": [{"name": "c", "image": "foo:V1", "resources": resources}], **spec},
    }


def _update(new: dict[str, Any], old: dict[str, Any], **kw: Any) -> AdmissionAttributes:
    """An UPDATE of pod ``old`` to ``new`` in namespace ``test``."""
    return AdmissionAttributes(
        namespace="test",
        resource=PODS,
        operation=Operation.UPDATE,
        object=new,
        old_object=old,
        **kw,
    )


# --- finding 1: activeDeadlineSeconds moves a pod into the Terminating scope ---------------


def test_TestAdmitBelowTerminatingQuotaLimitWhensPodScopeUpdated() -> None:  # noqa: N802
    """A pod UPDATE setting activeDeadlineSeconds (nil -> 60) is charged to the Terminating
    quota (upstream podEvaluator.Handles: the scope changed), not to NotTerminating."""
    terminating = make_quota(
        {"cpu": "5", "memory": "100Gi", "pods": "5"},
        {"cpu": "1", "memory": "50Gi", "pods": "1"},
        scopes=("Terminating",),
        name="quota-terminating",
    )
    not_terminating = make_quota(
        {"cpu": "5", "memory": "100Gi", "pods": "5"},
        {"cpu": "1", "memory": "50Gi", "pods": "1"},
        scopes=("NotTerminating",),
        name="quota-non-terminating",
    )
    old = _pod({"cpu": "100m", "memory": "2Gi"}, rv="1")
    new = _pod({"cpu": "100m", "memory": "2Gi"}, rv="1", activeDeadlineSeconds=60)
    a = _update(new, old, name="123")
    assert Registry().get(PODS).handles(a)
    out = check([terminating, not_terminating], a)
    assert used_text(out[0]) == {"cpu": "1100m", "memory": "52Gi", "pods": "2"}
    assert out[1] is not_terminating


def test_TestAdmitBelowTerminatingQuotaLimitWhensPodScopeUpdated_exceeded() -> None:  # noqa: N802
    terminating = make_quota({"pods": "1"}, {"pods": "1"}, scopes=("Terminating",))
    old = _pod(rv="1")
    new = _pod(rv="1", activeDeadlineSeconds=60)
    a = _update(new, old, name="123")
    with pytest.raises(QuotaForbiddenError) as e:
        check([terminating], a)
    assert str(e.value) == (
        'pods "123" is forbidden: exceeded quota: quota, requested: pods=1, used: pods=1, '
        "limited: pods=1"
    )


def test_podEvaluator_Handles_update_without_scope_change_is_not_handled() -> None:  # noqa: N802
    old = _pod(rv="1", activeDeadlineSeconds=30)
    new = _pod(rv="1", activeDeadlineSeconds=60)
    a = _update(new, old)
    assert not Registry().get(PODS).handles(a)


# --- finding 2: pod-level resources skip the per-container constraint ------------------------


@pytest.mark.parametrize(
    ("pod_resources", "err"),
    [
        ({"requests": {"cpu": "1", "memory": "1Gi"}}, None),
        ({"limits": {"memory": "1Gi"}}, None),
        ({"requests": {"example.com/dongle": "1"}}, "must specify cpu for: c; memory for: c"),
        ({}, "must specify cpu for: c; memory for: c"),
    ],
)
def test_TestPodConstraintsFunc_pod_level_resources(  # noqa: N802
    pod_resources: dict[str, Any], err: str | None
) -> None:
    pod = _pod(resources=pod_resources)
    assert Registry().get(PODS).constraints(["cpu", "memory"], pod) == err


def test_TestAdmitPodLevelResources_without_container_requests() -> None:  # noqa: N802
    q = make_quota({"cpu": "2", "memory": "2Gi"}, {"cpu": "0", "memory": "0"})
    pod = _pod(resources={"requests": {"cpu": "500m", "memory": "1Gi"}})
    [out] = check([q], AdmissionAttributes(namespace="test", resource=PODS, object=pod))
    assert used_text(out) == {"cpu": "500m", "memory": "1Gi"}


# --- finding 3: DRA implicit extended resources ---------------------------------------------


def test_TestPodEvaluatorUsage_implicit_extended_resource_deviceclass() -> None:  # noqa: N802
    pod = _pod({"deviceclass.resource.kubernetes.io/gpu": "2"})
    assert {k: str(v) for k, v in pod_usage(pod, NOW).items()} == {
        "count/pods": "1",
        "pods": "1",
        "requests.deviceclass.resource.kubernetes.io/gpu": "2",
    }


def test_TestPodEvaluatorMatchingResources_implicit_extended_resource() -> None:  # noqa: N802
    names = [
        "requests.deviceclass.resource.kubernetes.io/gpu",
        "deviceclass.resource.kubernetes.io/gpu",
        "requests.example.com/dongle",
        "requests.kubernetes.io/other",
    ]
    assert Registry().get(PODS).matching_resources(names) == [
        "requests.deviceclass.resource.kubernetes.io/gpu",
        "requests.example.com/dongle",
    ]


def test_TestAdmitExceedQuotaLimit_implicit_extended_resource() -> None:  # noqa: N802
    q = make_quota(
        {"requests.deviceclass.resource.kubernetes.io/gpu": "2"},
        {"requests.deviceclass.resource.kubernetes.io/gpu": "1"},
    )
    pod = _pod({"deviceclass.resource.kubernetes.io/gpu": "2"})
    with pytest.raises(QuotaForbiddenError) as e:
        check([q], AdmissionAttributes(namespace="test", resource=PODS, object=pod, name="123"))
    assert (
        "exceeded quota: quota, requested: requests.deviceclass.resource.kubernetes.io/gpu=2"
        in (str(e.value))
    )


# --- finding 4: usage is max(spec, status) for in-place resize -------------------------------


def _resized(spec_cpu: str, status_cpu: str | None, rv: str = "5", **status: Any) -> dict[str, Any]:
    pod = _pod({"cpu": spec_cpu}, rv=rv)
    if status_cpu is not None:
        pod["status"] = {
            "containerStatuses": [
                {
                    "name": "c",
                    "allocatedResources": {"cpu": status_cpu},
                    "resources": {"requests": {"cpu": status_cpu}},
                }
            ],
            **status,
        }
    return pod


def test_TestAdmitPodResize_charges_max_of_spec_and_status() -> None:  # noqa: N802
    """Old spec 100m, status 150m, new spec 200m, used 150m: used becomes 200m (not 250m)."""
    q = make_quota({"requests.cpu": "1"}, {"requests.cpu": "150m"})
    a = _update(
        _resized("200m", "150m"), _resized("100m", "150m"), subresource="resize", name="123"
    )
    [out] = check([q], a)
    assert used_text(out) == {"requests.cpu": "200m"}


@pytest.mark.parametrize(
    ("spec", "status", "conditions", "expected"),
    [
        ("100m", None, [], "100m"),  # no status: the spec
        ("100m", "150m", [], "150m"),  # shrinking, not yet actuated: the status
        ("200m", "150m", [], "200m"),  # growing: the spec
        # an infeasible resize counts what the node has: the status only
        ("200m", "150m", [{"type": "PodResizePending", "reason": "Infeasible"}], "150m"),
    ],
)
def test_TestPodEvaluatorUsage_resize_status_resources(  # noqa: N802
    spec: str, status: str | None, conditions: list[dict[str, str]], expected: str
) -> None:
    pod = _resized(spec, status, conditions=conditions) if status else _resized(spec, None)
    assert str(pod_usage(pod, NOW)["requests.cpu"]) == expected


# --- finding 5: subresource CREATEs are ignored ---------------------------------------------


@pytest.mark.parametrize("subresource", ["status", "scale", "binding"])
@pytest.mark.parametrize(
    ("resource", "hard"),
    [(GroupResource("", "configmaps"), "count/configmaps"), (PODS, "pods")],
)
def test_QuotaAdmission_Validate_ignores_subresources(  # noqa: N802
    subresource: str, resource: GroupResource, hard: str
) -> None:
    q = make_quota({hard: "1"}, {hard: "1"})
    a = AdmissionAttributes(
        namespace="test", resource=resource, subresource=subresource, object=_pod(), name="x"
    )
    assert not Registry().get(resource).handles(a)
    assert check([q], a) == [q]
