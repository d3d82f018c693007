"""Ports of the ``limitedResources`` tests of kube-apiserver's
``plugin/pkg/admission/resourcequota/admission_test.go`` ("limited by default": resources and
scopes that may only be consumed under a covering quota), through
:class:`~dynquota.admission.Evaluator` as in :mod:`.test_upstream_admission`.
"""

from __future__ import annotations

from typing import Any

import pytest

from dynquota.admission import (
    Evaluator,
    InMemoryQuotaAccessor,
    InMemoryQuotaServer,
    LimitedResource,
    QuotaForbiddenError,
    ScopedResourceSelectorRequirement,
)

from ._upstream import SERVICES
from .test_upstream_admission import (
    Quota,
    create,
    rl,
    svc,
    update,
    used,
    valid_pod,
    validate,
)

S = ScopedResourceSelectorRequirement


def _limited(
    resource: str,
    contains: tuple[str, ...] = (),
    scopes: tuple[ScopedResourceSelectorRequirement, ...] = (),
) -> LimitedResource:
    return LimitedResource(resource=resource, match_contains=contains, match_scopes=scopes)


async def test_TestAdmitLimitedResourceNoQuota() -> None:  # noqa: N802
    err, _ = await validate(
        [], create(valid_pod("not-allowed-pod", rl("3", "2Gi"))), (_limited("pods", ("cpu",)),)
    )
    assert isinstance(err, QuotaForbiddenError)
    assert err.detail == "insufficient quota to consume: cpu,requests.cpu"


async def test_TestAdmitLimitedResourceNoQuotaIgnoresNonMatchingResources() -> None:  # noqa: N802
    limited = (_limited("services", ("services",)),)
    err, _ = await validate([], create(valid_pod("allowed-pod", rl("3", "2Gi"))), limited)
    assert err is None


async def test_TestAdmitLimitedResourceWithQuota() -> None:  # noqa: N802
    q = Quota("quota", {"requests.cpu": "10"}, {"requests.cpu": "1"})
    limited = (_limited("pods", ("requests.cpu",)),)
    err, server = await validate([q], create(valid_pod("allowed-pod", rl("3", "2Gi"))), limited)
    assert err is None
    assert used(server) == {"requests.cpu": "4"}


async def test_TestAdmitLimitedResourceWithMultipleQuota() -> None:  # noqa: N802
    quotas = [
        Quota("quota1", {"requests.cpu": "10"}, {"requests.cpu": "1"}),
        Quota("quota2", {"memory": "10Gi"}, {"memory": "1Gi"}),
    ]
    limited = (_limited("pods", ("requests.cpu",)),)
    err, server = await validate(quotas, create(valid_pod("allowed-pod", rl("3", "2Gi"))), limited)
    assert err is None
    assert (used(server, "quota1"), used(server, "quota2")) == (
        {"requests.cpu": "4"},
        {"memory": "3Gi"},
    )


async def test_TestAdmitLimitedResourceWithQuotaThatDoesNotCover() -> None:  # noqa: N802
    q = Quota("quota", {"memory": "10Gi"}, {"memory": "1Gi"})
    limited = (_limited("pods", ("cpu",)),)
    err, _ = await validate([q], create(valid_pod("not-allowed-pod", rl("3", "2Gi"))), limited)
    assert isinstance(err, QuotaForbiddenError)
    assert err.detail == "insufficient quota to consume: cpu,requests.cpu"


_PC_EXISTS = S("PriorityClass", "Exists")
_PC_IN_CS = S("PriorityClass", "In", ("cluster-services",))
_PC_IN_TWO = S("PriorityClass", "In", ("another-priorityclass-name", "cluster-services"))
_BE = S("BestEffort", "Exists")
_BE_QUOTA = Quota("quota-besteffort", {"pods": "5"}, {"pods": "3"}, scopes=("BestEffort",))
_TWO_SCOPES = (_limited("pods", scopes=(_BE,)), _limited("pods", scopes=(_PC_IN_CS,)))
_BIG = rl("3", "2Gi")


def _sel(name: str, *selector: ScopedResourceSelectorRequirement, **kw: Any) -> Quota:
    return Quota(name, kw.get("hard", {}), kw.get("used", {}), selector=selector)


@pytest.mark.parametrize(
    ("pod", "quotas", "limited", "exp_err"),
    [
        pytest.param(
            valid_pod("allowed-pod", _BIG, pc="fake-priority"),
            [_sel("quota", _PC_EXISTS)],
            (_limited("pods", scopes=(_PC_EXISTS,)),),
            "",
            id="Covering quota exists for configured limited scope PriorityClassNameExists.",
        ),
        pytest.param(
            valid_pod("not-allowed-pod", _BIG, pc="fake-priority"),
            [_sel("quota", _PC_EXISTS)],
            (_limited("pods", ("requests.cpu",), (_PC_EXISTS,)),),
            "insufficient quota to consume: requests.cpu",
            id="configured limited scope PriorityClassNameExists and limited cpu resource. "
            "No covering quota for cpu and pod admit fails.",
        ),
        pytest.param(
            valid_pod("not-allowed-pod", _BIG, pc="fake-priority"),
            [],
            (_limited("pods", scopes=(_PC_EXISTS,)),),
            "insufficient quota to match these scopes: [{PriorityClass Exists []}]",
            id="Covering quota does not exist for configured limited scope "
            "PriorityClassNameExists.",
        ),
        pytest.param(
            valid_pod("not-allowed-pod", rl(), pc="fake-priority"),
            [],
            (_limited("pods", scopes=(_BE,)),),
            "insufficient quota to match these scopes: [{BestEffort Exists []}]",
            id="Covering quota does not exist for configured limited scope resourceQuotaBestEffort",
        ),
        pytest.param(
            valid_pod("allowed-pod", rl(), pc="fake-priority"),
            [_BE_QUOTA],
            (_limited("pods", scopes=(_BE,)),),
            "",
            id="Covering quota exist for configured limited scope resourceQuotaBestEffort",
        ),
        pytest.param(
            valid_pod("allowed-pod", rl("100m", "1Gi"), pc="fake-priority"),
            [],
            _TWO_SCOPES,
            "",
            id="Two scopes,BestEffort and PriorityClassIN, in two LimitedResources. Neither "
            "matches pod. Pod allowed",
        ),
        pytest.param(
            valid_pod("allowed-pod", rl(), pc="fake-priority"),
            [],
            _TWO_SCOPES,
            "insufficient quota to match these scopes: [{BestEffort Exists []}]",
            id="Two scopes,BestEffort and PriorityClassIN, in two LimitedResources. Only "
            "BestEffort scope matches pod. Pod admit fails because covering quota is missing "
            "for BestEffort scope",
        ),
        pytest.param(
            valid_pod("allowed-pod", rl("100m", "1Gi"), pc="cluster-services"),
            [],
            _TWO_SCOPES,
            "insufficient quota to match these scopes: [{PriorityClass In [cluster-services]}]",
            id="Two scopes,BestEffort and PriorityClassIN, in two LimitedResources. Only "
            "PriorityClass scope matches pod. Pod admit fails because covering quota is "
            "missing for PriorityClass scope",
        ),
        pytest.param(
            valid_pod("allowed-pod", rl(), pc="cluster-services"),
            [],
            _TWO_SCOPES,
            "insufficient quota to match these scopes: [{BestEffort Exists []} "
            "{PriorityClass In [cluster-services]}]",
            id="Two scopes,BestEffort and PriorityClassIN, in two LimitedResources. Both the "
            "scopes matches pod. Pod admit fails because covering quota is missing for "
            "PriorityClass scope and BestEffort scope",
        ),
        pytest.param(
            valid_pod("allowed-pod", rl(), pc="cluster-services"),
            [_BE_QUOTA],
            _TWO_SCOPES,
            "insufficient quota to match these scopes: [{PriorityClass In [cluster-services]}]",
            id="Two scopes,BestEffort and PriorityClassIN, in two LimitedResources. Both the "
            "scopes matches pod. Quota available only for BestEffort scope. Pod admit fails "
            "because covering quota is missing for PriorityClass scope",
        ),
        pytest.param(
            valid_pod("allowed-pod", rl(), pc="cluster-services"),
            [_sel("quota", _PC_IN_CS)],
            _TWO_SCOPES,
            "insufficient quota to match these scopes: [{BestEffort Exists []}]",
            id="Two scopes,BestEffort and PriorityClassIN, in two LimitedResources. Both the "
            "scopes matches pod. Quota available only for PriorityClass scope. Pod admit "
            "fails because covering quota is missing for BestEffort scope",
        ),
        pytest.param(
            valid_pod("allowed-pod", rl(), pc="cluster-services"),
            [_BE_QUOTA, _sel("quota", _PC_IN_CS)],
            _TWO_SCOPES,
            "",
            id="Two scopes,BestEffort and PriorityClassIN, in two LimitedResources. Both the "
            "scopes matches pod. Quota available only for both the scopes. Pod admit "
            "success. No Error",
        ),
        pytest.param(
            valid_pod("allowed-pod", _BIG, pc="fake-priority"),
            [],
            (),
            "",
            id="Pod allowed with priorityclass if limited scope PriorityClassNameExists not "
            "configured.",
        ),
        pytest.param(
            valid_pod("not-allowed-pod", rl("3", "20Gi"), pc="fake-priority"),
            [_sel("quota", _PC_EXISTS, hard={"memory": "10Gi"}, used={"memory": "1Gi"})],
            (_limited("pods", scopes=(_PC_EXISTS,)),),
            "forbidden: exceeded quota: quota, requested: memory=20Gi, used: memory=1Gi, "
            "limited: memory=10Gi",
            id="quota fails, though covering quota for configured limited scope "
            "PriorityClassNameExists exists.",
        ),
        pytest.param(
            valid_pod("allowed-pod", _BIG, pc="fake-priority"),
            [_sel("quota", _PC_IN_CS)],
            (_limited("pods", scopes=(_PC_IN_CS,)),),
            "",
            id="Pod has different priorityclass than configured limited. Covering quota exists "
            "for configured limited scope PriorityClassIn.",
        ),
        pytest.param(
            valid_pod("allowed-pod", _BIG, pc="cluster-services"),
            [_sel("quota", _PC_IN_CS)],
            (_limited("pods", scopes=(_PC_IN_TWO,)),),
            "",
            id="Pod has limited priorityclass. Covering quota exists for configured limited "
            "scope PriorityClassIn.",
        ),
        pytest.param(
            valid_pod("not-allowed-pod", _BIG, pc="cluster-services"),
            [_sel("quota", S("PriorityClass", "In", ("another-priorityclass-name",)))],
            (_limited("pods", scopes=(_PC_IN_TWO,)),),
            "insufficient quota to match these scopes: "
            "[{PriorityClass In [another-priorityclass-name cluster-services]}]",
            id="Pod has limited priorityclass. Covering quota  does not exist for configured "
            "limited scope PriorityClassIn.",
        ),
        pytest.param(
            valid_pod("allowed-pod", _BIG, pc="another-priorityclass-name"),
            [_sel("quota", S("PriorityClass", "In", ("another-priorityclass-name",)))],
            (_limited("pods", scopes=(_PC_IN_TWO,)),),
            "",
            id="From the above test case, just changing pod priority from cluster-services to "
            "another-priorityclass-name. expecting no error",
        ),
        pytest.param(
            valid_pod("not-allowed-pod", _BIG, pc="cluster-services"),
            [],
            (_limited("pods", scopes=(_PC_IN_TWO,)),),
            "insufficient quota to match these scopes: "
            "[{PriorityClass In [another-priorityclass-name cluster-services]}]",
            id="Pod has limited priorityclass. Covering quota does NOT exists for configured "
            "limited scope PriorityClassIn.",
        ),
        pytest.param(
            valid_pod("allowed-pod", _BIG, pc="cluster-services"),
            [_sel("quota", _PC_EXISTS)],
            (_limited("pods", scopes=(_PC_IN_TWO,)),),
            "",
            id="Pod has limited priorityclass. Covering quota exists for configured limited "
            "scope PriorityClassIn through PriorityClassNameExists",
        ),
    ],
)
async def test_TestAdmitLimitedScopeWithCoverQuota(  # noqa: N802
    pod: dict[str, Any],
    quotas: list[Quota],
    limited: tuple[LimitedResource, ...],
    exp_err: str,
) -> None:
    err, _ = await validate(quotas, create(pod), limited)
    if not exp_err:
        assert err is None
    else:
        assert exp_err in str(err)


_LB_LIMITED = (_limited("services", ("services.loadbalancers",)),)


async def test_TestAdmitZeroDeltaUsageWithoutCoveringQuota() -> None:  # noqa: N802
    a = update(svc("LoadBalancer"), svc("LoadBalancer", rv="1"), SERVICES)
    err, _ = await validate([], a, _LB_LIMITED)
    assert err is None


async def test_TestAdmitRejectIncreaseUsageWithoutCoveringQuota() -> None:  # noqa: N802
    a = update(svc("LoadBalancer"), svc("NodePort", rv="1", ports=1), SERVICES)
    err, _ = await validate([], a, _LB_LIMITED)
    assert isinstance(err, QuotaForbiddenError)
    assert err.detail == "insufficient quota to consume: services.loadbalancers"


async def test_TestAdmitAllowDecreaseUsageWithoutCoveringQuota() -> None:  # noqa: N802
    a = update(svc("NodePort", ports=1), svc("LoadBalancer", rv="1"), SERVICES)
    err, _ = await validate([], a, _LB_LIMITED)
    assert err is None


def test_LimitedResource_from_config() -> None:  # noqa: N802
    entry = {
        "resource": "pods",
        "matchScopes": [
            {"scopeName": "PriorityClass", "operator": "In", "values": ["cluster-services"]}
        ],
    }
    assert LimitedResource.from_config(entry) == _limited("pods", scopes=(_PC_IN_CS,))


async def test_TestAdmitLimitedResourceNoQuota_through_the_evaluator() -> None:  # noqa: N802
    """With limitedResources configured, a namespace without quota is still checked
    (upstream checkAttributes returns early only when nothing is limited)."""
    accessor = InMemoryQuotaAccessor(InMemoryQuotaServer())
    async with Evaluator(accessor, limited_resources=(_limited("pods", ("requests.cpu",)),)) as ev:
        with pytest.raises(QuotaForbiddenError) as e:
            await ev.evaluate(create(valid_pod("p", rl("1", "1Gi"))))
        assert e.value.detail == "insufficient quota to consume: requests.cpu"
    async with Evaluator(accessor) as ev:
        await ev.evaluate(create(valid_pod("p", rl("1", "1Gi"))))
