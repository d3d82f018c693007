"""Ports of kube-apiserver's ``plugin/pkg/admission/resourcequota/admission_test.go``.

Each upstream test calls ``QuotaAdmission.Validate`` on a fake client holding the quotas and
checks the error and the ``resourcequotas/status`` writes; here the same request goes
through :class:`~dynquota.admission.Evaluator` on an :class:`InMemoryQuotaServer` holding
the same quotas, and the test checks the error and the stored ``status.used`` (a write) or
the write count (none). Test names and table case names are upstream's. The index's copy of
the file predates ``TestAdmitBelowTerminatingQuotaLimitWhensPodScopeUpdated`` (ported in
``test_upstream_pods.py`` from the v1.37.2 code).
"""

from __future__ import annotations

from typing import Any

from dynquota.admission import (
    AdmissionAttributes,
    AdmissionError,
    Evaluator,
    GroupResource,
    InMemoryQuotaAccessor,
    InMemoryQuotaServer,
    LimitedResource,
    Operation,
    QuotaForbiddenError,
    ScopedResourceSelectorRequirement,
)

from ._upstream import PODS, PVCS, SERVICES

S = ScopedResourceSelectorRequirement


def valid_pod(
    name: str, requests: dict[str, str], limits: dict[str, str] | None = None, pc: str = ""
) -> dict[str, Any]:
    """Upstream ``validPod``/``validPodWithPriority`` with one container."""
    spec: dict[str, Any] = {
        "containers": [
            {"image": "foo:V0", "resources": {"requests": requests, "limits": limits or {}}}
        ]
    }
    if pc:
        spec["priorityClassName"] = pc
    return {"metadata": {"name": name, "namespace": "test"}, "spec": spec}


def rl(cpu: str = "", memory: str = "") -> dict[str, str]:
    """Upstream ``getResourceList``."""
    out = {}
    if cpu:
        out["cpu"] = cpu
    if memory:
        out["memory"] = memory
    return out


class Quota:
    def __init__(
        self,
        name: str,
        hard: dict[str, str],
        used: dict[str, str],
        ns: str = "test",
        scopes: tuple[str, ...] = (),
        selector: tuple[ScopedResourceSelectorRequirement, ...] = (),
    ) -> None:
        self.args = (ns, name, hard, used)
        self.scopes, self.selector = scopes, selector


async def validate(
    quotas: list[Quota],
    a: AdmissionAttributes,
    limited: tuple[LimitedResource, ...] = (),
) -> tuple[AdmissionError | None, InMemoryQuotaServer]:
    """``handler.Validate`` on a server holding ``quotas``: (error, server)."""
    server = InMemoryQuotaServer()
    for q in quotas:
        server.create(*q.args, scopes=q.scopes, scope_selector=q.selector)
    async with Evaluator(InMemoryQuotaAccessor(server), limited_resources=limited) as ev:
        try:
            await ev.evaluate(a)
        except AdmissionError as e:
            return e, server
    return None, server


def create(
    obj: dict[str, Any], gr: GroupResource = PODS, dry_run: bool = False
) -> AdmissionAttributes:
    return AdmissionAttributes(
        namespace="test",
        resource=gr,
        object=obj,
        name=str(obj["metadata"].get("name", "")),
        dry_run=dry_run,
    )


def update(new: dict[str, Any], old: dict[str, Any], gr: GroupResource) -> AdmissionAttributes:
    return AdmissionAttributes(
        namespace="test",
        resource=gr,
        operation=Operation.UPDATE,
        object=new,
        old_object=old,
        name=str(new["metadata"].get("name", "")),
    )


def used(server: InMemoryQuotaServer, name: str = "quota") -> dict[str, str]:
    return {k: str(v) for k, v in sorted(server.get("test", name).used.items())}


_COMPUTE_HARD = {"cpu": "3", "memory": "100Gi", "pods": "5"}
_COMPUTE_USED = {"cpu": "1", "memory": "50Gi", "pods": "3"}


async def test_TestAdmissionIgnoresDelete() -> None:  # noqa: N802
    a = AdmissionAttributes(
        namespace="default", resource=PODS, operation=Operation.DELETE, name="name"
    )
    err, server = await validate([], a)
    assert err is None
    assert server.stats.lists == 0


async def test_TestAdmissionIgnoresSubresources() -> None:  # noqa: N802
    q = Quota("quota", {"memory": "2Gi"}, {"memory": "1Gi"})
    pod = valid_pod("123", rl("100m", "2Gi"))
    err, _ = await validate([q], create(pod))
    assert isinstance(err, QuotaForbiddenError)
    sub = AdmissionAttributes(
        namespace="test", resource=PODS, object=pod, subresource="subresource"
    )
    err, server = await validate([q], sub)
    assert err is None
    assert server.stats.status_writes == 0


async def test_TestAdmitBelowQuotaLimit() -> None:  # noqa: N802
    q = Quota("quota", _COMPUTE_HARD, _COMPUTE_USED)
    err, server = await validate([q], create(valid_pod("allowed-pod", rl("100m", "2Gi"))))
    assert err is None
    assert used(server) == {"cpu": "1100m", "memory": "52Gi", "pods": "4"}


async def test_TestAdmitDryRun() -> None:  # noqa: N802
    q = Quota("quota", _COMPUTE_HARD, _COMPUTE_USED)
    err, server = await validate(
        [q], create(valid_pod("allowed-pod", rl("100m", "2Gi")), dry_run=True)
    )
    assert err is None
    assert server.stats.status_writes == 0
    err, server = await validate(
        [q], create(valid_pod("too-large-pod", rl("100m", "60Gi")), dry_run=True)
    )
    assert isinstance(err, QuotaForbiddenError)
    assert server.stats.status_writes == 0


_SVC_HARD = {"services": "10", "services.loadbalancers": "10", "services.nodeports": "10"}
_SVC_USED = {"services": "1", "services.loadbalancers": "1", "services.nodeports": "0"}


def svc(kind: str, rv: str | None = None, ports: int = 0) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "service", "namespace": "test"}
    if rv is not None:
        meta["resourceVersion"] = rv
    return {"metadata": meta, "spec": {"type": kind, "ports": [{"port": 1234}] * ports}}


async def test_TestAdmitHandlesOldObjects() -> None:  # noqa: N802
    q = Quota("quota", _SVC_HARD, _SVC_USED)
    a = update(svc("NodePort", ports=1), svc("LoadBalancer", rv="1"), SERVICES)
    err, server = await validate([q], a)
    assert err is None
    # no negative usage: the load balancer stays counted until the recount
    assert used(server) == {
        "services": "1",
        "services.loadbalancers": "1",
        "services.nodeports": "1",
    }


def _pvc(storage: str, rv: str | None = None, name: str = "pvc-to-update") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "test"}
    if rv is not None:
        meta["resourceVersion"] = rv
    return {"metadata": meta, "spec": {"resources": {"requests": {"storage": storage}}}}


_PVC_QUOTA = Quota(
    "quota",
    {"persistentvolumeclaims": "3", "requests.storage": "100Gi"},
    {"persistentvolumeclaims": "1", "requests.storage": "10Gi"},
)


async def test_TestAdmitHandlesNegativePVCUpdates() -> None:  # noqa: N802
    err, server = await validate([_PVC_QUOTA], update(_pvc("5Gi"), _pvc("10Gi", rv="1"), PVCS))
    assert err is None
    assert server.stats.status_writes == 0


async def test_TestAdmitHandlesPVCUpdates() -> None:  # noqa: N802
    err, server = await validate([_PVC_QUOTA], update(_pvc("15Gi"), _pvc("10Gi", rv="1"), PVCS))
    assert err is None
    assert used(server) == {"persistentvolumeclaims": "1", "requests.storage": "15Gi"}


async def test_TestAdmitHandlesCreatingUpdates() -> None:  # noqa: N802
    q = Quota("quota", _SVC_HARD, _SVC_USED)
    a = update(svc("NodePort", ports=1), svc("LoadBalancer", rv=""), SERVICES)
    err, server = await validate([q], a)
    assert err is None
    assert used(server) == {
        "services": "2",
        "services.loadbalancers": "1",
        "services.nodeports": "1",
    }


async def test_TestAdmitExceedQuotaLimit() -> None:  # noqa: N802
    q = Quota("quota", _COMPUTE_HARD, _COMPUTE_USED)
    err, _ = await validate([q], create(valid_pod("not-allowed-pod", rl("3", "2Gi"))))
    assert isinstance(err, QuotaForbiddenError)
    assert err.detail == ("exceeded quota: quota, requested: cpu=3, used: cpu=1, limited: cpu=3")


_CONSTRAINT_HARD = {"cpu": "3", "memory": "100Gi", "limits.memory": "200Gi", "pods": "5"}
_CONSTRAINT_USED = {"cpu": "1", "memory": "50Gi", "limits.memory": "100Gi", "pods": "3"}


async def test_TestAdmitEnforceQuotaConstraints() -> None:  # noqa: N802
    q = Quota("quota", _CONSTRAINT_HARD, _CONSTRAINT_USED)
    pod = valid_pod("not-allowed-pod", rl("100m", "2Gi"), rl("200m"))
    err, _ = await validate([q], create(pod))
    assert isinstance(err, QuotaForbiddenError)
    assert err.detail == "failed quota: quota: must specify limits.memory for: "


async def test_TestAdmitPodInNamespaceWithoutQuota() -> None:  # noqa: N802
    q = Quota("quota", _CONSTRAINT_HARD, _CONSTRAINT_USED, ns="other")
    err, server = await validate(
        [q], create(valid_pod("allowed-pod", rl("100m", "2Gi"), rl("200m")))
    )
    assert err is None
    assert server.stats.status_writes == 0


async def test_TestAdmitBelowTerminatingQuotaLimit() -> None:  # noqa: N802
    quotas = [
        Quota("quota-non-terminating", _COMPUTE_HARD, _COMPUTE_USED, scopes=("NotTerminating",)),
        Quota("quota-terminating", _COMPUTE_HARD, _COMPUTE_USED, scopes=("Terminating",)),
    ]
    pod = valid_pod("allowed-pod", rl("100m", "2Gi"))
    pod["spec"]["activeDeadlineSeconds"] = 30
    err, server = await validate(quotas, create(pod))
    assert err is None
    assert used(server, "quota-terminating") == {"cpu": "1100m", "memory": "52Gi", "pods": "4"}
    assert used(server, "quota-non-terminating") == {"cpu": "1", "memory": "50Gi", "pods": "3"}


async def test_TestAdmitBelowBestEffortQuotaLimit() -> None:  # noqa: N802
    quotas = [
        Quota("quota-besteffort", {"pods": "5"}, {"pods": "3"}, scopes=("BestEffort",)),
        Quota("quota-not-besteffort", {"pods": "5"}, {"pods": "3"}, scopes=("NotBestEffort",)),
    ]
    err, server = await validate(quotas, create(valid_pod("allowed-pod", rl())))
    assert err is None
    assert used(server, "quota-besteffort") == {"pods": "4"}
    assert used(server, "quota-not-besteffort") == {"pods": "3"}


async def test_TestAdmitBestEffortQuotaLimitIgnoresBurstable() -> None:  # noqa: N802
    q = Quota("quota-besteffort", {"pods": "5"}, {"pods": "3"}, scopes=("BestEffort",))
    err, server = await validate([q], create(valid_pod("allowed-pod", rl("100m", "1Gi"))))
    assert err is None
    assert server.stats.status_writes == 0


async def test_TestAdmissionSetsMissingNamespace() -> None:  # noqa: N802
    """In part: a pod without ``metadata.namespace`` is admitted and charged to the request's
    namespace; the library does not set the field (it never mutates the object)."""
    q = Quota("quota", {"pods": "3"}, {"pods": "1"})
    pod = valid_pod("pod-without-namespace", rl("1", "2Gi"))
    del pod["metadata"]["namespace"]
    err, server = await validate([q], create(pod))
    assert err is None
    assert used(server) == {"pods": "2"}


async def test_TestAdmitRejectsNegativeUsage() -> None:  # noqa: N802
    err, _ = await validate([_PVC_QUOTA], create(_pvc("-1Gi", name="not-allowed-pvc"), PVCS))
    assert isinstance(err, QuotaForbiddenError)
    assert err.detail == "quota usage is negative for resource(s): requests.storage"
    err, _ = await validate([_PVC_QUOTA], create(_pvc("1Gi", name="not-allowed-pvc"), PVCS))
    assert err is None


async def test_TestAdmitWhenUnrelatedResourceExceedsQuota() -> None:  # noqa: N802
    q = Quota("quota", {"services": "3", "pods": "4"}, {"services": "4", "pods": "1"})
    err, server = await validate([q], create(valid_pod("allowed-pod", rl())))
    assert err is None
    assert used(server) == {"pods": "2", "services": "4"}
