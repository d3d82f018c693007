"""How much quota an admitted object uses, and which quotas it falls under (Pure).

The usage evaluators of kube-apiserver, each in its own module mirroring upstream's files:
:class:`ObjectCountEvaluator` for any resource (:mod:`dynquota.admission.generic`, upstream
``generic/evaluator.go``), :class:`PodEvaluator` (:mod:`dynquota.admission.pods`, upstream
``evaluator/core/pods.go``), :class:`ServiceEvaluator` (:mod:`dynquota.admission.services`,
``core/services.go``) and :class:`PersistentVolumeClaimEvaluator`
(:mod:`dynquota.admission.pvcs`, ``core/persistent_volume_claims.go``). :class:`Registry`
(upstream ``core/registry.go``) hands out the evaluator of a group/resource.

Not ported (see ``docs/admission.md``): the resourceclaims evaluator of DRA
(``resource_claims.go``: ``<class>.deviceclass.resource.k8s.io/devices``); resourceclaims are
counted as objects (``count/resourceclaims.resource.k8s.io``) only.
"""

from __future__ import annotations

from collections.abc import Iterable

from .generic import ObjectCountEvaluator, UsageEvaluator, object_count_resource_name
from .pods import PodEvaluator, pod_usage
from .pvcs import PersistentVolumeClaimEvaluator
from .services import ServiceEvaluator
from .types import GroupResource

__all__ = [
    "ObjectCountEvaluator",
    "PersistentVolumeClaimEvaluator",
    "PodEvaluator",
    "Registry",
    "ServiceEvaluator",
    "UsageEvaluator",
    "object_count_resource_name",
    "pod_usage",
]

_LEGACY_ALIASES = {
    GroupResource("", "configmaps"): "configmaps",
    GroupResource("", "secrets"): "secrets",
    GroupResource("", "replicationcontrollers"): "replicationcontrollers",
    GroupResource("", "resourcequotas"): "resourcequotas",
}


class Registry:
    """Usage evaluators by group/resource; unknown resources get an object-count evaluator.

    Upstream: ``quota.Registry`` with the core evaluators (``core/registry.go``) and the
    on-demand ``generic.NewObjectCountEvaluator`` of ``quotaEvaluator.Evaluate``.
    """

    def __init__(self, evaluators: Iterable[UsageEvaluator] = ()) -> None:
        self._evaluators: dict[GroupResource, UsageEvaluator] = {}
        for gr, alias in _LEGACY_ALIASES.items():
            self.add(ObjectCountEvaluator(gr, alias))
        self.add(PodEvaluator())
        self.add(ServiceEvaluator())
        self.add(PersistentVolumeClaimEvaluator())
        for evaluator in evaluators:
            self.add(evaluator)

    def add(self, evaluator: UsageEvaluator) -> None:
        """Register (or replace) the evaluator of ``evaluator.group_resource``."""
        self._evaluators[evaluator.group_resource] = evaluator

    def get(self, gr: GroupResource) -> UsageEvaluator:
        """The evaluator for ``gr``, creating an object-count one if none is registered."""
        evaluator = self._evaluators.get(gr)
        if evaluator is None:
            evaluator = ObjectCountEvaluator(gr)
            self._evaluators[gr] = evaluator
        return evaluator
