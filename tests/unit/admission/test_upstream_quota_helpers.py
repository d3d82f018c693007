"""Ports of kube-apiserver v1.37.2's quota helper and admission-plugin tests.

Upstream: ``staging/src/k8s.io/apiserver/pkg/quota/v1/resources_test.go`` (for the helpers
the library ships in :mod:`dynquota.admission.resources`) and
``staging/src/k8s.io/apiserver/pkg/admission/plugin/resourcequota/admission_test.go``
(``TestPrettyPrint``, ``TestHasUsageStats`` through ``check_request``'s ``status unknown``,
``TestExcludedOperations`` through ``Evaluator.evaluate``). Named after the upstream tests.
"""

from __future__ import annotations

import pytest

from dynquota.admission import (
    AdmissionAttributes,
    Evaluator,
    GroupResource,
    QuotaForbiddenError,
    Registry,
    ResourceQuota,
    check_request,
)
from dynquota.admission.resources import (
    add,
    equals,
    is_negative,
    less_than_or_equal,
    pretty_print,
    remove_zeros,
)
from dynquota.quantity import Quantity, parse_quantity


def rl(**kw: str) -> dict[str, Quantity]:
    return {k.replace("_", "."): parse_quantity(v) for k, v in kw.items()}


def text(items: dict[str, Quantity]) -> dict[str, str]:
    return {k: str(v) for k, v in sorted(items.items())}


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        ({}, {}, True),
        (rl(cpu="100m", memory="1Gi"), rl(cpu="100m", memory="1Gi"), True),
        (rl(cpu="200m", memory="1Gi"), rl(cpu="100m", memory="1Gi"), False),
        (rl(cpu="100m", memory="1Gi"), rl(cpu="100m", memory="1Gi", pods="1"), False),
    ],
    ids=["isEqual", "isEqualWithKeys", "isNotEqualSameKeys", "isNotEqualDiffKeys"],
)
def test_TestEquals(  # noqa: N802
    a: dict[str, Quantity], b: dict[str, Quantity], expected: bool
) -> None:
    assert equals(a, b) is expected


@pytest.mark.parametrize(
    ("a", "b", "expected", "out"),
    [
        ({}, {}, True, []),
        (rl(cpu="100m"), rl(cpu="100m"), True, []),
        (rl(cpu="100m"), rl(cpu="200m"), True, []),
        (rl(cpu="200m"), rl(cpu="100m"), False, ["cpu"]),
    ],
    ids=["isEmpty", "isEqual", "isLessThan", "isGreaterThan"],
)
def test_TestLessThanOrEqual(  # noqa: N802
    a: dict[str, Quantity], b: dict[str, Quantity], expected: bool, out: list[str]
) -> None:
    assert less_than_or_equal(a, b) == (expected, out)


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        ({}, {}, {}),
        (rl(cpu="100m"), {}, {"cpu": "100m"}),
        (rl(cpu="100m"), rl(cpu="100m"), {"cpu": "200m"}),
    ],
    ids=["noKeys", "toEmpty", "matching"],
)
def test_TestAdd(  # noqa: N802
    a: dict[str, Quantity], b: dict[str, Quantity], expected: dict[str, str]
) -> None:
    assert text(add(a, b)) == expected


@pytest.mark.parametrize(
    ("a", "expected"),
    [
        ({}, {}),
        (rl(cpu="0", memory="0"), {}),
        (rl(cpu="0", memory="0", storage="100Gi"), {"storage": "100Gi"}),
        (rl(cpu="200m", memory="1Gi"), {"cpu": "200m", "memory": "1Gi"}),
    ],
    ids=["empty", "all-zeros", "some-zeros", "non-zero"],
)
def test_TestRemoveZeros(a: dict[str, Quantity], expected: dict[str, str]) -> None:  # noqa: N802
    assert text(remove_zeros(a)) == expected


@pytest.mark.parametrize(
    ("a", "expected"),
    [
        ({}, []),
        (rl(cpu="-10", memory="0"), ["cpu"]),
        (rl(cpu="-200m", memory="-1Gi"), ["cpu", "memory"]),
    ],
    ids=["empty", "some-negative", "all-negative"],
)
def test_TestIsNegative(a: dict[str, Quantity], expected: list[str]) -> None:  # noqa: N802
    assert is_negative(a) == expected


@pytest.mark.parametrize(
    ("items", "expected"),
    [
        (rl(cpu="100m"), "cpu=100m"),
        (
            rl(
                pods="10",
                services="10",
                replicationcontrollers="10",
                services_nodeports="10",
                requests_cpu="100m",
                requests_memory="100Mi",
                limits_cpu="100m",
                limits_memory="100Mi",
            ),
            "limits.cpu=100m,limits.memory=100Mi,pods=10,replicationcontrollers=10,"
            "requests.cpu=100m,requests.memory=100Mi,services=10,services.nodeports=10",
        ),
    ],
)
def test_TestPrettyPrint(items: dict[str, Quantity], expected: str) -> None:  # noqa: N802
    assert pretty_print(items) == expected


@pytest.mark.parametrize(
    ("hard", "used", "has_stats"),
    [
        ({}, {}, True),
        ({"configmaps": "2"}, {}, False),
        ({"configmaps": "2"}, {"configmaps": "1"}, True),
        ({"configmaps": "2", "pods": "1"}, {"configmaps": "1"}, True),
    ],
    ids=["empty", "hard-only", "hard-used", "hard-used-relevant"],
)
def test_TestHasUsageStats(  # noqa: N802
    hard: dict[str, str], used: dict[str, str], has_stats: bool
) -> None:
    """``hasUsageStats`` through ``check_request``: a ConfigMap create, relevant resource
    ``configmaps`` (upstream's table uses ``memory``; ``pods`` is not relevant to it)."""
    quota = ResourceQuota(
        namespace="ns",
        name="q",
        resource_version="1",
        hard={k: parse_quantity(v) for k, v in hard.items()},
        used={k: parse_quantity(v) for k, v in used.items()},
    )
    a = AdmissionAttributes(namespace="ns", resource=GroupResource("", "configmaps"), object={})
    if has_stats:
        check_request([quota], a, Registry().get(a.resource), 0.0)
        return
    with pytest.raises(QuotaForbiddenError) as e:
        check_request([quota], a, Registry().get(a.resource), 0.0)
    assert e.value.detail == "status unknown for quota: q, resources: configmaps"


class _NeverCalled:
    async def get_quotas(self, namespace: str) -> list[ResourceQuota]:
        raise AssertionError("should not be called")

    async def update_quota_status(self, quota: ResourceQuota) -> ResourceQuota:
        raise AssertionError("should not be called")


@pytest.mark.parametrize(
    "attributes",
    [
        AdmissionAttributes(
            namespace="namespace", resource=GroupResource("", "x"), subresource="subresource"
        ),
        AdmissionAttributes(namespace="", resource=GroupResource("", "namespaces")),
        AdmissionAttributes(namespace="namespace", resource=GroupResource("", "namespaces")),
    ],
    ids=["subresource", "non-namespaced resource", "namespace creation"],
)
async def test_TestExcludedOperations(attributes: AdmissionAttributes) -> None:  # noqa: N802
    async with Evaluator(_NeverCalled()) as ev:
        await ev.evaluate(attributes)
    assert ev.stats.requests == 0
