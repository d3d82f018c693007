"""check_request and the usage evaluators: tables modelled on upstream's admission tests."""

from __future__ import annotations

from typing import Any

import pytest

from dynquota.admission import (
    AdmissionAttributes,
    GroupResource,
    InvalidObjectError,
    Operation,
    QuotaForbiddenError,
    ResourceQuota,
    ScopedResourceSelectorRequirement,
    pod_usage,
)
from dynquota.quantity import parse_quantity

from ._upstream import CONFIGMAPS, NOW, PODS, WIDGETS, check, make_quota, used_text


def rl(**kw: str) -> dict[str, Any]:
    return {k.replace("__", "/").replace("_", "."): parse_quantity(v) for k, v in kw.items()}


def quota(
    name: str,
    hard: dict[str, str],
    used: dict[str, str] | None = None,
    scopes: tuple[str, ...] = (),
    selector: tuple[ScopedResourceSelectorRequirement, ...] = (),
) -> ResourceQuota:
    return make_quota(
        hard,
        used,
        name=name,
        namespace="ns",
        resource_version="1",
        scopes=scopes,
        selector=selector,
    )


def container(
    name: str, requests: dict[str, str] | None = None, limits: dict[str, str] | None = None
) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    if requests:
        resources["requests"] = requests
    if limits:
        resources["limits"] = limits
    return {"name": name, "image": "x", "resources": resources}


def pod(*containers: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "ns"},
        "spec": {"containers": list(containers), **spec},
    }


def attrs(gr: GroupResource, obj: dict[str, Any] | None = None, **kw: Any) -> AdmissionAttributes:
    return AdmissionAttributes(namespace="ns", resource=gr, object=obj or {}, name="obj", **kw)


# --- object counts ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("gr", "hard", "used", "expected_used"),
    [
        # the legacy alias and the count/ key are both charged
        (CONFIGMAPS, {"configmaps": "5"}, {"configmaps": "2"}, {"configmaps": "3"}),
        (
            CONFIGMAPS,
            {"count/configmaps": "5"},
            {"count/configmaps": "0"},
            {"count/configmaps": "1"},
        ),
        # a custom resource is counted as count/<resource>.<group>
        (
            WIDGETS,
            {"count/widgets.example.com": "150"},
            {"count/widgets.example.com": "149"},
            {"count/widgets.example.com": "150"},
        ),
        # a used entry for an unlimited key is carried along untouched
        (
            WIDGETS,
            {"count/widgets.example.com": "3"},
            {"count/widgets.example.com": "0", "pods": "7"},
            {"count/widgets.example.com": "1", "pods": "7"},
        ),
    ],
)
def test_object_count_charges(
    gr: GroupResource, hard: dict[str, str], used: dict[str, str], expected_used: dict[str, str]
) -> None:
    [out] = check([quota("q", hard, used)], attrs(gr))
    assert used_text(out) == expected_used


def test_object_count_exceeded_message_is_upstream_style() -> None:
    q = quota("compute", {"count/widgets.example.com": "9"}, {"count/widgets.example.com": "9"})
    with pytest.raises(QuotaForbiddenError) as e:
        check([q], attrs(WIDGETS))
    assert str(e.value) == (
        'widgets.example.com "obj" is forbidden: exceeded quota: compute, '
        "requested: count/widgets.example.com=1, used: count/widgets.example.com=9, "
        "limited: count/widgets.example.com=9"
    )
    assert e.value.status == 403


def test_request_must_fit_all_matching_quotas() -> None:
    roomy = quota("roomy", {"configmaps": "100"}, {"configmaps": "0"})
    tight = quota("tight", {"count/configmaps": "1"}, {"count/configmaps": "1"})
    with pytest.raises(
        QuotaForbiddenError, match="exceeded quota: tight, requested: count/configmaps=1"
    ):
        check([roomy, tight], attrs(CONFIGMAPS))


def test_quota_not_limiting_the_resource_is_untouched() -> None:
    other = quota("other", {"secrets": "1"}, {"secrets": "1"})
    [out] = check([other], attrs(CONFIGMAPS))
    assert out is other


def test_scoped_quota_never_matches_object_counts() -> None:
    scoped = quota("scoped", {"configmaps": "0"}, {"configmaps": "0"}, scopes=("BestEffort",))
    [out] = check([scoped], attrs(CONFIGMAPS))
    assert out is scoped


def test_status_unknown_when_used_is_missing() -> None:
    q = quota("fresh", {"configmaps": "5", "count/configmaps": "5"}, used={"configmaps": "0"})
    with pytest.raises(QuotaForbiddenError) as e:
        check([q], attrs(CONFIGMAPS))
    assert (
        e.value.detail == "status unknown for quota: fresh, resources: configmaps,count/configmaps"
    )


def test_update_of_object_count_is_not_charged() -> None:
    q = quota("q", {"configmaps": "1"}, {"configmaps": "1"})
    [out] = check([q], attrs(CONFIGMAPS, operation=Operation.UPDATE, old_object={}))
    assert out is q


def test_name_less_request_message() -> None:
    q = quota("q", {"configmaps": "0"}, {"configmaps": "0"})
    a = AdmissionAttributes(namespace="ns", resource=CONFIGMAPS, object={})
    with pytest.raises(QuotaForbiddenError) as e:
        check([q], a)
    assert str(e.value).startswith("configmaps is forbidden: exceeded quota: q,")


# --- pods -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        # best effort: only counts
        (pod(container("a")), {"count/pods": "1", "pods": "1"}),
        # requests are charged as cpu and requests.cpu; limits as limits.*
        (
            pod(container("a", {"cpu": "250m", "memory": "64Mi"}, {"cpu": "1", "memory": "128Mi"})),
            {
                "count/pods": "1",
                "cpu": "250m",
                "limits.cpu": "1",
                "limits.memory": "128Mi",
                "memory": "64Mi",
                "pods": "1",
                "requests.cpu": "250m",
                "requests.memory": "64Mi",
            },
        ),
        # requests default from limits (SetDefaults_Pod)
        (
            pod(container("a", limits={"cpu": "2"})),
            {"count/pods": "1", "cpu": "2", "limits.cpu": "2", "pods": "1", "requests.cpu": "2"},
        ),
        # containers add up; an init container counts if larger than the sum
        (
            pod(
                container("a", {"cpu": "100m"}),
                container("b", {"cpu": "150m"}),
                initContainers=[container("init", {"cpu": "1", "memory": "1Gi"})],
            ),
            {
                "count/pods": "1",
                "cpu": "1",
                "memory": "1Gi",
                "pods": "1",
                "requests.cpu": "1",
                "requests.memory": "1Gi",
            },
        ),
        # a sidecar (restartable init container) adds to the containers
        (
            pod(
                container("a", {"cpu": "100m"}),
                initContainers=[{**container("side", {"cpu": "50m"}), "restartPolicy": "Always"}],
            ),
            {"count/pods": "1", "cpu": "150m", "pods": "1", "requests.cpu": "150m"},
        ),
        # overhead is added to requests, and to limits only where a limit exists
        (
            pod(
                container("a", {"cpu": "1"}, {"cpu": "1"}),
                overhead={"cpu": "250m", "memory": "120Mi"},
            ),
            {
                "count/pods": "1",
                "cpu": "1250m",
                "limits.cpu": "1250m",
                "memory": "120Mi",
                "pods": "1",
                "requests.cpu": "1250m",
                "requests.memory": "120Mi",
            },
        ),
        # extended resources are charged as requests.<name>; hugepages both ways
        (
            pod(container("a", {"example.com/gpu": "2", "hugepages-2Mi": "4Mi"})),
            {
                "count/pods": "1",
                "hugepages-2Mi": "4Mi",
                "pods": "1",
                "requests.example.com/gpu": "2",
                "requests.hugepages-2Mi": "4Mi",
            },
        ),
    ],
)
def test_pod_usage(obj: dict[str, Any], expected: dict[str, str]) -> None:
    assert {k: str(v) for k, v in sorted(pod_usage(obj, NOW).items())} == expected


@pytest.mark.parametrize(
    ("status", "meta", "charged"),
    [
        ({"phase": "Succeeded"}, {}, False),
        ({"phase": "Failed"}, {}, False),
        ({"phase": "Running"}, {}, True),
        # deleted 100 s ago with 30 s grace: past grace, no longer charged
        (
            {},
            {"deletionTimestamp": "2027-01-15T07:58:20Z", "deletionGracePeriodSeconds": 30},
            False,
        ),
        # deleted 10 s ago with 30 s grace: still charged
        ({}, {"deletionTimestamp": "2027-01-15T07:59:50Z", "deletionGracePeriodSeconds": 30}, True),
    ],
)
def test_terminal_and_stuck_terminating_pods_are_not_charged(
    status: dict[str, Any], meta: dict[str, Any], charged: bool
) -> None:
    # NOW (1.8e9) is 2027-01-15T08:00:00Z
    obj = pod(container("a", {"cpu": "1"}))
    obj["status"] = status
    obj["metadata"].update(meta)
    usage = pod_usage(obj, NOW)
    assert ("pods" in usage, "requests.cpu" in usage, str(usage["count/pods"])) == (
        charged,
        charged,
        "1",
    )


def test_pod_exceeding_cpu_message() -> None:
    q = quota("compute", {"requests.cpu": "1", "pods": "10"}, {"requests.cpu": "800m", "pods": "2"})
    a = attrs(PODS, pod(container("a", {"cpu": "300m"})))
    with pytest.raises(QuotaForbiddenError) as e:
        check([q], a)
    assert e.value.detail == (
        "exceeded quota: compute, requested: requests.cpu=300m, used: requests.cpu=800m, "
        "limited: requests.cpu=1"
    )


def test_pod_fitting_is_charged_exactly() -> None:
    q = quota(
        "compute",
        {"requests.cpu": "1", "requests.memory": "1Gi", "pods": "10"},
        {"requests.cpu": "700m", "requests.memory": "512Mi", "pods": "2"},
    )
    [out] = check([q], attrs(PODS, pod(container("a", {"cpu": "300m", "memory": "512Mi"}))))
    assert used_text(out) == {"pods": "3", "requests.cpu": "1", "requests.memory": "1Gi"}


def test_pod_missing_required_requests() -> None:
    q = quota(
        "compute",
        {"requests.cpu": "4", "limits.memory": "4Gi"},
        {"requests.cpu": "0", "limits.memory": "0"},
    )
    a = attrs(PODS, pod(container("a"), container("b", {"cpu": "1"})))
    with pytest.raises(QuotaForbiddenError) as e:
        check([q], a)
    assert e.value.detail == (
        "failed quota: compute: must specify limits.memory for: a,b; requests.cpu for: a"
    )


def test_pod_scopes() -> None:
    best_effort = quota("be", {"pods": "0"}, {"pods": "0"}, scopes=("BestEffort",))
    not_best_effort = quota("nbe", {"pods": "5"}, {"pods": "0"}, scopes=("NotBestEffort",))
    # a best-effort pod hits the BestEffort quota only
    with pytest.raises(QuotaForbiddenError, match="exceeded quota: be,"):
        check([best_effort, not_best_effort], attrs(PODS, pod(container("a"))))
    # a burstable pod hits NotBestEffort only
    out = check([best_effort, not_best_effort], attrs(PODS, pod(container("a", {"cpu": "1"}))))
    assert (used_text(out[0]), used_text(out[1])) == ({"pods": "0"}, {"pods": "1"})


def test_terminating_and_priority_class_scopes() -> None:
    terminating = quota("term", {"pods": "1"}, {"pods": "0"}, scopes=("Terminating",))
    high = quota(
        "high",
        {"pods": "1"},
        {"pods": "0"},
        selector=(ScopedResourceSelectorRequirement("PriorityClass", "In", ("high",)),),
    )
    plain = pod(container("a"))
    job = pod(container("a"), activeDeadlineSeconds=60, priorityClassName="high")
    out = check([terminating, high], attrs(PODS, plain))
    assert (used_text(out[0]), used_text(out[1])) == ({"pods": "0"}, {"pods": "0"})
    out = check([terminating, high], attrs(PODS, job))
    assert (used_text(out[0]), used_text(out[1])) == ({"pods": "1"}, {"pods": "1"})


def test_pod_resize_charges_only_growth() -> None:
    q = quota("compute", {"requests.cpu": "2"}, {"requests.cpu": "1500m"})
    old = pod(container("a", {"cpu": "1"}))
    old["metadata"]["resourceVersion"] = "7"
    new = pod(container("a", {"cpu": "1500m"}))
    a = attrs(PODS, new, old_object=old, operation=Operation.UPDATE, subresource="resize")
    [out] = check([q], a)
    assert used_text(out) == {"requests.cpu": "2"}


def test_malformed_quantity_is_invalid_object() -> None:
    q = quota("compute", {"requests.cpu": "2"}, {"requests.cpu": "0"})
    with pytest.raises(InvalidObjectError, match=r"spec.containers\[0\].resources.requests\[cpu\]"):
        check([q], attrs(PODS, pod(container("a", {"cpu": "1 core"}))))
