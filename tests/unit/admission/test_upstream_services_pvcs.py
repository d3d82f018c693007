"""Ports of kube-apiserver v1.37.2's services and PVC evaluator tests, and of the admission
tests of the plain keys ``services`` / ``persistentvolumeclaims``.

Upstream: ``pkg/quota/v1/evaluator/core/services_test.go``,
``persistent_volume_claims_test.go``, the admission tests of
``plugin/pkg/admission/resourcequota/admission_test.go``. Each test is named after the
upstream test it follows; run through the library's public API.
"""

from __future__ import annotations

from typing import Any

import pytest

from dynquota.admission import (
    AdmissionAttributes,
    Operation,
    QuotaForbiddenError,
    Registry,
    ScopedResourceSelectorRequirement,
)

from ._upstream import NOW, PVCS, SERVICES, check, make_quota, text


def _svc(kind: str, *ports: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": "svc"}, "spec": {"type": kind, "ports": list(ports), **spec}}


# --- services_test.go ---------------------------------------------------------------------


def test_TestServiceEvaluatorMatchesResources() -> None:  # noqa: N802
    names = ["configmaps", "cpu", "services", "services.nodeports", "services.loadbalancers"]
    assert Registry().get(SERVICES).matching_resources(names) == [
        "services",
        "services.nodeports",
        "services.loadbalancers",
    ]


@pytest.mark.parametrize(
    ("case", "service", "nodeports", "loadbalancers"),
    [
        ("loadbalancer", _svc("LoadBalancer"), "0", "1"),
        ("loadbalancer_ports", _svc("LoadBalancer", {"port": 27443}), "1", "1"),
        ("clusterip", _svc("ClusterIP"), "0", "0"),
        ("nodeports", _svc("NodePort", {"port": 27443}), "1", "0"),
        ("multi-nodeports", _svc("NodePort", {"port": 27443}, {"port": 27444}), "2", "0"),
        (
            "loadbalancer_nodeports_disabled",
            _svc(
                "LoadBalancer",
                {"port": 27443, "nodePort": 32001},
                {"port": 27444},
                allocateLoadBalancerNodePorts=False,
            ),
            "1",
            "1",
        ),
    ],
)
def test_TestServiceEvaluatorUsage(  # noqa: N802
    case: str, service: dict[str, Any], nodeports: str, loadbalancers: str
) -> None:
    usage = Registry().get(SERVICES).usage(service, NOW)
    assert text(usage) == {
        "count/services": "1",
        "services": "1",
        "services.loadbalancers": loadbalancers,
        "services.nodeports": nodeports,
    }, case


@pytest.mark.parametrize(
    ("service", "required"),
    [
        pytest.param(_svc("LoadBalancer"), ["services.loadbalancers"], id="loadbalancer"),
        pytest.param(_svc("ClusterIP"), ["services.loadbalancers", "services"], id="clusterip"),
        pytest.param(_svc("NodePort", {"port": 27443}), ["services.nodeports"], id="nodeports"),
        pytest.param(
            _svc("NodePort", {"port": 27443}, {"port": 27444}),
            ["services.nodeports"],
            id="multi-nodeports",
        ),
    ],
)
def test_TestServiceConstraintsFunc(  # noqa: N802
    service: dict[str, Any], required: list[str]
) -> None:
    assert Registry().get(SERVICES).constraints(required, service) is None


def test_TestAdmitBelowQuotaLimit_services() -> None:  # noqa: N802
    q = make_quota(
        {"services": "3", "services.loadbalancers": "1"},
        {"services": "1"} | {"services.loadbalancers": "0"},
    )
    a = AdmissionAttributes(namespace="test", resource=SERVICES, object=_svc("LoadBalancer"))
    [out] = check([q], a)
    assert {k: str(v) for k, v in out.used.items()} == {
        "services": "2",
        "services.loadbalancers": "1",
    }


def test_TestExceedUsageServices() -> None:  # noqa: N802
    q = make_quota({"services": "1"}, {"services": "1"})
    a = AdmissionAttributes(
        namespace="test", resource=SERVICES, object=_svc("ClusterIP"), name="svc"
    )
    with pytest.raises(QuotaForbiddenError) as e:
        check([q], a)
    assert str(e.value) == (
        'services "svc" is forbidden: exceeded quota: quota, requested: services=1, '
        "used: services=1, limited: services=1"
    )


def test_TestAdmitHandlesServiceTypeUpdate_clusterip_to_loadbalancer() -> None:  # noqa: N802
    """An UPDATE that changes the type is charged the growth (serviceEvaluator.Handles)."""
    q = make_quota(
        {"services": "5", "services.loadbalancers": "1"},
        {"services": "1", "services.loadbalancers": "1"},
    )
    old = _svc("ClusterIP") | {"metadata": {"name": "svc", "resourceVersion": "3"}}
    new = _svc("LoadBalancer") | {"metadata": {"name": "svc", "resourceVersion": "3"}}
    a = AdmissionAttributes(
        namespace="test",
        resource=SERVICES,
        operation=Operation.UPDATE,
        object=new,
        old_object=old,
        name="svc",
    )
    with pytest.raises(QuotaForbiddenError) as e:
        check([q], a)
    assert "requested: services.loadbalancers=1, used: services.loadbalancers=1" in str(e.value)


# --- persistent_volume_claims_test.go -----------------------------------------------------


def _pvc(
    storage: str, storage_class: str | None = None, allocated: str | None = None, **spec: Any
) -> dict[str, Any]:
    pvc: dict[str, Any] = {
        "metadata": {"name": "foo", "namespace": "ns"},
        "spec": {"resources": {"requests": {"storage": storage}}, **spec},
    }
    if storage_class is not None:
        pvc["spec"]["storageClassName"] = storage_class
    if allocated is not None:
        pvc["status"] = {"allocatedResources": {"storage": allocated}}
    return pvc


_GOLD = "gold.storageclass.storage.k8s.io/"


@pytest.mark.parametrize(
    ("case", "pvc", "expected"),
    [
        ("pvc-usage", _pvc("10Gi"), {"requests.storage": "10Gi"}),
        (
            "pvc-usage-by-class",
            _pvc("10Gi", "gold"),
            {
                "requests.storage": "10Gi",
                f"{_GOLD}persistentvolumeclaims": "1",
                f"{_GOLD}requests.storage": "10Gi",
            },
        ),
        ("pvc-usage-rounded", _pvc("1001m"), {"requests.storage": "2"}),
        (
            "pvc-usage-by-class-rounded",
            _pvc("1001m", "gold"),
            {
                "requests.storage": "2",
                f"{_GOLD}persistentvolumeclaims": "1",
                f"{_GOLD}requests.storage": "2",
            },
        ),
        (
            "pvc-usage-higher-allocated-resource",
            _pvc("5G", allocated="10G"),
            {"requests.storage": "10G"},
        ),
        (
            "pvc-usage-lower-allocated-resource",
            _pvc("10G", allocated="5G"),
            {"requests.storage": "10G"},
        ),
    ],
)
def test_TestPersistentVolumeClaimEvaluatorUsage(  # noqa: N802
    case: str, pvc: dict[str, Any], expected: dict[str, str]
) -> None:
    usage = Registry().get(PVCS).usage(pvc, NOW)
    assert text(usage) == dict(
        sorted(
            (
                {"count/persistentvolumeclaims": "1", "persistentvolumeclaims": "1"} | expected
            ).items()
        )
    ), case


@pytest.mark.parametrize(
    ("items", "want"),
    [
        (
            [
                "count/persistentvolumeclaims",
                "requests.storage",
                "persistentvolumeclaims",
                f"{_GOLD}requests.storage",
                f"{_GOLD}persistentvolumeclaims",
            ],
            None,
        ),
        (
            [
                "storage",
                "ephemeral-storage",
                "bronze.storageclass.storage.k8s.io/storage",
                "gold.storage.k8s.io/requests.storage",
            ],
            [],
        ),
    ],
    ids=["supported-resources", "unsupported-resources"],
)
def test_TestPersistentVolumeClaimEvaluatorMatchingResources(  # noqa: N802
    items: list[str], want: list[str] | None
) -> None:
    assert Registry().get(PVCS).matching_resources(items) == (items if want is None else want)


def test_TestAdmitExceedQuotaLimit_persistentvolumeclaims_plain_key() -> None:  # noqa: N802
    q = make_quota({"persistentvolumeclaims": "2"}, {"persistentvolumeclaims": "2"})
    a = AdmissionAttributes(namespace="test", resource=PVCS, object=_pvc("1Gi"), name="foo")
    with pytest.raises(QuotaForbiddenError) as e:
        check([q], a)
    assert str(e.value) == (
        'persistentvolumeclaims "foo" is forbidden: exceeded quota: quota, requested: '
        "persistentvolumeclaims=1, used: persistentvolumeclaims=2, limited: "
        "persistentvolumeclaims=2"
    )


def test_TestAdmitExceedQuotaLimit_storage_class() -> None:  # noqa: N802
    q = make_quota({f"{_GOLD}requests.storage": "10Gi"}, {f"{_GOLD}requests.storage": "8Gi"})
    a = AdmissionAttributes(namespace="test", resource=PVCS, object=_pvc("4Gi", "gold"))
    with pytest.raises(QuotaForbiddenError) as e:
        check([q], a)
    assert f"requested: {_GOLD}requests.storage=4Gi, used: {_GOLD}requests.storage=8Gi" in str(
        e.value
    )
    # another class is not charged
    a = AdmissionAttributes(namespace="test", resource=PVCS, object=_pvc("4Gi", "silver"))
    assert check([q], a) == [q]


def _vac(op: str, *values: str) -> tuple[ScopedResourceSelectorRequirement, ...]:
    return (ScopedResourceSelectorRequirement("VolumeAttributesClass", op, values),)


@pytest.mark.parametrize(
    ("selector", "pvc_fields", "matches"),
    [
        (_vac("In", "gold"), {"volumeAttributesClassName": "gold"}, True),
        (_vac("In", "gold"), {"volumeAttributesClassName": "silver"}, False),
        (_vac("NotIn", "gold"), {"volumeAttributesClassName": "silver"}, True),
        (_vac("NotIn", "gold"), {}, True),
        (_vac("Exists"), {"volumeAttributesClassName": "silver"}, True),
        (_vac("Exists"), {}, False),
        (_vac("DoesNotExist"), {}, True),
    ],
)
def test_TestPersistentVolumeClaimEvaluatorMatchingScopes(  # noqa: N802
    selector: tuple[ScopedResourceSelectorRequirement, ...],
    pvc_fields: dict[str, str],
    matches: bool,
) -> None:
    q = make_quota({"requests.storage": "10Gi"}, {"requests.storage": "0"}, selector=selector)
    assert Registry().get(PVCS).matches(q, _pvc("1Gi", **pvc_fields)) is matches


def test_TestPersistentVolumeClaimEvaluatorMatchingScopes_target_class() -> None:  # noqa: N802
    """A claim being modified to class gold is in the gold scope (status target name)."""
    pvc = _pvc("1Gi", volumeAttributesClassName="silver")
    pvc["status"] = {"modifyVolumeStatus": {"targetVolumeAttributesClassName": "gold"}}
    q = make_quota(
        {"requests.storage": "10Gi"}, {"requests.storage": "0"}, selector=_vac("In", "gold")
    )
    assert Registry().get(PVCS).matches(q, pvc)
