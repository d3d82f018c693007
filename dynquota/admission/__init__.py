"""Quota admission like kube-apiserver's, without its spurious 409 Conflicts (library).

A Python (asyncio) port of the ResourceQuota admission evaluator of kubernetes/kubernetes
(``staging/src/k8s.io/apiserver/pkg/admission/plugin/resourcequota/``: ``controller.go``,
``resource_access.go``; usage of pods, services and persistentvolumeclaims from
``pkg/quota/v1/evaluator/core/``), usable by a Python admission webhook that keeps
counters in ResourceQuota objects. Imports nothing from dynquota but
:mod:`dynquota.quantity` and the low access layer :mod:`dynquota._k8s` (an import-linter
contract, checked by ``make lint``).

Typical use::

    accessor = KubernetesQuotaAccessor(api_client)
    await accessor.start()
    async with Evaluator(accessor) as evaluator:
        await evaluator.evaluate(AdmissionAttributes(
            namespace="team-a", resource=GroupResource("example.com", "widgets"),
            operation=Operation.CREATE, object=widget, name="w-1"))

``evaluate`` returns when the request fits and has been charged, and raises an
:class:`AdmissionError` (with an HTTP ``status``) when it does not. See ``docs/admission.md``.
"""

from .accessor import (
    AccessorStats,
    CachingQuotaAccessor,
    LiveQuotaAccessor,
    QuotaAccessor,
    compare_resource_versions,
)
from .check import check_request
from .errors import (
    AdmissionError,
    DefaultDenyError,
    InvalidObjectError,
    QuotaAccessError,
    QuotaConflictError,
    QuotaForbiddenError,
    QuotaScopeError,
    QuotaTimeoutError,
)
from .evaluator import Evaluator, EvaluatorStats
from .evaluators import (
    ObjectCountEvaluator,
    PersistentVolumeClaimEvaluator,
    PodEvaluator,
    Registry,
    ServiceEvaluator,
    UsageEvaluator,
    pod_usage,
)
from .kubernetes_accessor import KubernetesQuotaAccessor
from .limited import LimitedResource
from .memory import InMemoryQuotaAccessor, InMemoryQuotaServer, ServerStats
from .policy import DYNQUOTA, NAIVE, POLICIES, UPSTREAM, ConflictPolicy
from .types import (
    AdmissionAttributes,
    GroupResource,
    Operation,
    ResourceList,
    ResourceQuota,
    ScopedResourceSelectorRequirement,
)

__all__ = [
    "DYNQUOTA",
    "NAIVE",
    "POLICIES",
    "UPSTREAM",
    "AccessorStats",
    "AdmissionAttributes",
    "AdmissionError",
    "CachingQuotaAccessor",
    "ConflictPolicy",
    "DefaultDenyError",
    "Evaluator",
    "EvaluatorStats",
    "GroupResource",
    "InMemoryQuotaAccessor",
    "InMemoryQuotaServer",
    "InvalidObjectError",
    "KubernetesQuotaAccessor",
    "LimitedResource",
    "LiveQuotaAccessor",
    "ObjectCountEvaluator",
    "Operation",
    "PersistentVolumeClaimEvaluator",
    "PodEvaluator",
    "QuotaAccessError",
    "QuotaAccessor",
    "QuotaConflictError",
    "QuotaForbiddenError",
    "QuotaScopeError",
    "QuotaTimeoutError",
    "Registry",
    "ResourceList",
    "ResourceQuota",
    "ScopedResourceSelectorRequirement",
    "ServerStats",
    "ServiceEvaluator",
    "UsageEvaluator",
    "check_request",
    "compare_resource_versions",
    "pod_usage",
]
