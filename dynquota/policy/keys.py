"""Which ResourceQuota keys the quota system counts, and how dynquota may size each (Pure).

The catalogue behind issue #12 ("size any quota key"): for a key of a quota's ``spec.hard`` it
says whether kube-controller-manager's quota controller and the apiserver's quota admission ever
charge it, the key's family, whether the apiserver requires an integer value, which keys are
aliases of each other, whether limiting it forces every new pod to declare the resource (the
"compute trap"), where dynquota reads its usage from, and the default granularity a sized hard
is rounded up to.

Ported behaviour (kubernetes/kubernetes v1.37.2):

* ``pkg/quota/v1/evaluator/core/pods.go``: ``podResources``, ``podResourcePrefixes``,
  ``isExtendedResourceNameForQuota``, ``validationSet`` (the compute trap);
* ``pkg/quota/v1/evaluator/core/services.go``: ``serviceResources``;
* ``pkg/quota/v1/evaluator/core/persistent_volume_claims.go``: ``pvcResources``,
  ``storageClassSuffix``, ``MatchingResources``;
* ``pkg/quota/v1/evaluator/core/resource_claims.go``: ``MatchingResources`` (device classes);
* ``pkg/quota/v1/evaluator/core/registry.go``: ``legacyObjectCountAliases``;
* ``pkg/quota/v1/install/registry.go``: ``ignoredResources``;
* ``pkg/apis/core/helper/helpers.go``: ``IsStandardQuotaResourceName``,
  ``IsIntegerResourceName``, ``IsExtendedResourceName``, ``IsNativeResource``;
* ``pkg/apis/core/validation/validation.go``: ``ValidateResourceQuotaResourceName``.

Deliberate differences: names the apiserver stores but no evaluator ever charges
(``nvidia.com/gpu`` without ``requests.``, ``limits.nvidia.com/gpu``) are refused here, because
a limit nobody counts is never enforced; ``requests.<extended>`` keys are integers here (the
apiserver would store ``500m``; a device is whole).

Checked on the local v1.37.2 control plane (2026-12-01): the apiserver stores
``nvidia.com/gpu``, ``limits.nvidia.com/gpu``, ``count/events`` and ``count/deployment.apps``
(a typo of ``deployments``) but the quota controller never writes a ``status.used`` for them;
it refuses ``storage`` ("must be a standard resource for quota") and a fraction for
``count/jobs.batch``, ``<class>.deviceclass.resource.k8s.io/devices`` and
``<class>.storageclass.storage.k8s.io/requests.storage`` ("must be an integer"); it accepts
``requests.nvidia.com/gpu: 500m``; ``requests.deviceclass.resource.kubernetes.io/<class>`` gets a
``status.used`` (the pod evaluator matches it).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Final, Literal

from dynquota.quantity import QuantityError, parse_quantity

__all__ = [
    "Family",
    "KeyInfo",
    "QuotaKeyError",
    "ServedResources",
    "Source",
    "classify",
    "classify_static",
    "conflicting_aliases",
    "refused_keys",
]

Family = Literal[
    "object-count", "compute", "ephemeral-storage", "hugepages", "storage", "extended", "device"
]
"""Families of quota keys, each with its own value rules and default granularity."""

Source = Literal["tally", "status"]
"""Where usage comes from: dynquota's own metadata tally (exact, instant in both directions) or
the quota controller's ``status.used`` (instant on increases, late on most decreases)."""

ServedResources = Mapping[tuple[str, str], bool]
"""Discovery's answer: ``(group, resource) -> namespaced`` for every listable resource served;
the core group is ``""``."""

_REQUESTS: Final = "requests."
_LIMITS: Final = "limits."
_COUNT: Final = "count/"
_STORAGE_CLASS: Final = ".storageclass.storage.k8s.io/"
_DEVICE_CLASS_SUFFIX: Final = ".deviceclass.resource.k8s.io/devices"
_IMPLICIT_DRA_PREFIX: Final = "requests.deviceclass.resource.kubernetes.io/"

_MEBI: Final = Decimal(1024**2)
_GIBI: Final = Decimal(1024**3)

# Standard object counts, with the `count/` key each one is an alias of (registry.go's
# legacyObjectCountAliases; services.go and persistent_volume_claims.go charge both names).
_OBJECT_COUNTS: Final[Mapping[str, str | None]] = {
    "pods": None,  # not an alias: `count/pods` also counts terminal pods, `pods` does not
    "configmaps": "count/configmaps",
    "secrets": "count/secrets",
    "services": "count/services",
    "replicationcontrollers": "count/replicationcontrollers",
    "resourcequotas": "count/resourcequotas",
    "persistentvolumeclaims": "count/persistentvolumeclaims",
    "services.loadbalancers": None,
    "services.nodeports": None,
}

# The compute trap (pods.go validationSet): a quota limiting one of these refuses every pod
# that does not declare it in each container (unless pod-level resources are set).
_COMPUTE_TRAP: Final = frozenset(
    {"cpu", "memory", "requests.cpu", "requests.memory", "limits.cpu", "limits.memory"}
)
_COMPUTE: Final[Mapping[str, tuple[str, Decimal]]] = {
    "cpu": ("requests.cpu", Decimal("0.1")),
    "requests.cpu": ("requests.cpu", Decimal("0.1")),
    "limits.cpu": ("limits.cpu", Decimal("0.1")),
    "memory": ("requests.memory", _MEBI),
    "requests.memory": ("requests.memory", _MEBI),
    "limits.memory": ("limits.memory", _MEBI),
}
_EPHEMERAL: Final[Mapping[str, str]] = {
    "ephemeral-storage": "requests.ephemeral-storage",
    "requests.ephemeral-storage": "requests.ephemeral-storage",
    "limits.ephemeral-storage": "limits.ephemeral-storage",
}

# install/registry.go ignoredResources: never counted, so a `count/` key for them limits nothing.
_IGNORED: Final = frozenset(
    {
        ("", "bindings"),
        ("", "componentstatuses"),
        ("", "events"),
        ("events.k8s.io", "events"),
        ("authentication.k8s.io", "tokenreviews"),
        ("authentication.k8s.io", "selfsubjectreviews"),
        ("authorization.k8s.io", "subjectaccessreviews"),
        ("authorization.k8s.io", "selfsubjectaccessreviews"),
        ("authorization.k8s.io", "localsubjectaccessreviews"),
        ("authorization.k8s.io", "selfsubjectrulesreviews"),
    }
)

# apimachinery validation.IsQualifiedName / IsDNS1123Subdomain.
_NAME: Final = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_SUBDOMAIN: Final = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_DNS_LABEL: Final = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")


class QuotaKeyError(ValueError):
    """A quota key dynquota cannot size; ``str()`` names the key and the reason, e.g.
    ``'nvidia.com/gpu': extended resources are counted only as 'requests.nvidia.com/gpu'``."""

    def __init__(self, key: str, reason: str) -> None:
        super().__init__(f"{key!r}: {reason}")
        self.key = key
        self.reason = reason


@dataclass(frozen=True)
class KeyInfo:
    """What dynquota knows about one quota key.

    Attributes:
        key: the key as written in the policy (and in ``spec.hard``).
        family: its :data:`Family`.
        canonical: the name it is charged under when it has an alias (``cpu`` ->
            ``requests.cpu``, ``secrets`` -> ``count/secrets``), else ``key``; two keys with the
            same ``canonical`` must not be sized together.
        integer: the value must be a whole number (counts, extended resources, devices).
        compute_trap: limiting it makes quota admission refuse pods that do not declare it.
        needs_default_limits: a default for it can only come from a LimitRange ``default``
            (a ``limits.*`` compute key), which caps every container at run time.
        source: where usage is read (:data:`Source`).
        granularity: default step a sized hard is rounded up to, in the key's base unit (cores,
            bytes, objects); a positive :class:`~decimal.Decimal`.
    """

    key: str
    family: Family
    canonical: str
    integer: bool
    compute_trap: bool
    needs_default_limits: bool
    source: Source
    granularity: Decimal


def _count(key: str, canonical: str) -> KeyInfo:
    source: Source = "tally" if key in ("pods", "configmaps") else "status"
    return KeyInfo(key, "object-count", canonical, True, False, False, source, Decimal(1))


def _qualified(name: str) -> bool:
    """apimachinery ``IsQualifiedName``: ``[prefix/]name``, prefix a DNS subdomain."""
    prefix, slash, rest = name.rpartition("/")
    if slash and (not prefix or len(prefix) > 253 or not _SUBDOMAIN.fullmatch(prefix)):
        return False
    return 0 < len(rest) <= 63 and _NAME.fullmatch(rest) is not None


def _native(name: str) -> bool:
    """helper ``IsNativeResource``: no domain, or a ``*kubernetes.io/`` domain."""
    return "/" not in name or "kubernetes.io/" in name


def _hugepages(key: str, size: str) -> KeyInfo:
    try:
        page = parse_quantity(size)
    except QuantityError as exc:
        raise QuotaKeyError(key, f"hugepage size {size!r} is not a quantity") from exc
    if page.value <= 0 or page.value != int(page.value):
        raise QuotaKeyError(key, f"hugepage size {size!r} must be a positive whole number of bytes")
    return KeyInfo(
        key, "hugepages", "requests.hugepages-" + size, False, False, False, "status", page.value
    )


def _object_count(key: str, served: ServedResources | None) -> KeyInfo:
    target = key[len(_COUNT) :]
    resource, _, group = target.partition(".")
    if (
        not resource
        or not _DNS_LABEL.fullmatch(resource)
        or (group and not _SUBDOMAIN.fullmatch(group))
    ):
        raise QuotaKeyError(key, "expected count/<resource> or count/<resource>.<group>")
    if (group, resource) in _IGNORED:
        raise QuotaKeyError(key, "the quota system never counts this kind")
    if served is not None:
        namespaced = served.get((group, resource))
        if namespaced is None:
            raise QuotaKeyError(
                key, f"no served resource {target!r} (check the plural and the group)"
            )
        if not namespaced:
            raise QuotaKeyError(
                key, f"{target!r} is cluster-scoped; a namespace quota cannot count it"
            )
    return _count(key, key)


def classify(key: str, served: ServedResources | None = None) -> KeyInfo:
    """Classify one quota key, or refuse it.

    Args:
        key: a key of ``spec.hard`` (or of a policy's ``resources``).
        served: discovery's namespaced/cluster-scoped answer per ``(group, resource)``; with
            ``None`` a ``count/`` key is checked for syntax and the ignored kinds only.

    Returns:
        The key's :class:`KeyInfo`.

    Raises:
        QuotaKeyError: the quota system never charges the key (``nvidia.com/gpu``,
            ``limits.nvidia.com/gpu``, ``count/events``, a ``count/`` kind not served or
            cluster-scoped), or the apiserver refuses it (``storage``, a malformed name).
    """
    if key in _OBJECT_COUNTS:
        return _count(key, _OBJECT_COUNTS[key] or key)
    if key in _COMPUTE:
        canonical, step = _COMPUTE[key]
        limits = key.startswith(_LIMITS)
        return KeyInfo(key, "compute", canonical, False, True, limits, "status", step)
    if key in _EPHEMERAL:
        canonical = _EPHEMERAL[key]
        return KeyInfo(key, "ephemeral-storage", canonical, False, False, False, "status", _MEBI)
    if key == "requests.storage":
        return KeyInfo(key, "storage", key, False, False, False, "status", _GIBI)
    if key.startswith("requests.hugepages-"):
        return _hugepages(key, key[len("requests.hugepages-") :])
    if key.startswith("hugepages-"):
        return _hugepages(key, key[len("hugepages-") :])
    if not _qualified(key):
        raise QuotaKeyError(key, "not a qualified resource name")
    if key.startswith(_COUNT):
        return _object_count(key, served)
    if _STORAGE_CLASS in key:
        storage_class, _, resource = key.partition(_STORAGE_CLASS)
        if not storage_class:
            raise QuotaKeyError(key, "expected <storage class>" + _STORAGE_CLASS + "<resource>")
        if resource == "persistentvolumeclaims":
            return _count(key, key)
        if resource == "requests.storage":
            # The apiserver requires an integer here (helper.IsExtendedResourceName matches it).
            return KeyInfo(key, "storage", key, True, False, False, "status", _GIBI)
        raise QuotaKeyError(
            key, "a storage class key ends in /requests.storage or /persistentvolumeclaims"
        )
    if key.endswith(_DEVICE_CLASS_SUFFIX):
        if key == _DEVICE_CLASS_SUFFIX[1:] or key.startswith("."):
            raise QuotaKeyError(key, "expected <device class>" + _DEVICE_CLASS_SUFFIX)
        return KeyInfo(key, "device", key, True, False, False, "status", Decimal(1))
    if key.startswith(_IMPLICIT_DRA_PREFIX):
        # pods.go isExtendedResourceNameForQuota matches it whatever the feature gate says.
        return KeyInfo(key, "extended", key, True, False, False, "status", Decimal(1))
    if key.startswith(_REQUESTS):
        if _native(key):
            raise QuotaKeyError(key, "not a resource the quota system counts")
        return KeyInfo(key, "extended", key, True, False, False, "status", Decimal(1))
    if key.startswith(_LIMITS):
        raise QuotaKeyError(
            key, "extended resources are counted only as requests.<name>, never limits."
        )
    if "/" in key and not _native(key):
        raise QuotaKeyError(key, f"extended resources are counted only as {_REQUESTS + key!r}")
    raise QuotaKeyError(key, "not a resource the quota system counts")


def conflicting_aliases(keys: Iterable[str]) -> list[tuple[str, str]]:
    """Pairs of keys, in input order, that name the same charged resource (``cpu`` and
    ``requests.cpu``; ``secrets`` and ``count/secrets``). Keys that do not classify are skipped
    (:func:`classify` reports them)."""
    seen: dict[str, str] = {}
    pairs: list[tuple[str, str]] = []
    for key in keys:
        try:
            canonical = classify(key).canonical
        except QuotaKeyError:
            continue
        if canonical in seen:
            pairs.append((seen[canonical], key))
        else:
            seen[canonical] = key
    return pairs


# The API groups Kubernetes v1.37 serves itself, with their listable resources and whether each
# is namespaced (`kubectl api-resources` on the local control plane, 2026-12-01). A `count/` key
# in one of these groups must name one of its namespaced resources: this catches a typo such as
# `count/deployment.apps` before it reaches a quota. Groups not listed (custom resources) are
# checked at run time instead (KeyNotCounted).
_BUILTIN_NAMESPACED: Final[Mapping[str, frozenset[str]]] = {
    "": frozenset(
        {
            "pods", "configmaps", "secrets", "services", "serviceaccounts", "endpoints",
            "persistentvolumeclaims", "replicationcontrollers", "resourcequotas", "limitranges",
            "podtemplates", "events",
        }
    ),
    "apps": frozenset(
        {"deployments", "replicasets", "statefulsets", "daemonsets", "controllerrevisions"}
    ),
    "batch": frozenset({"jobs", "cronjobs"}),
    "autoscaling": frozenset({"horizontalpodautoscalers"}),
    "networking.k8s.io": frozenset({"ingresses", "networkpolicies"}),
    "policy": frozenset({"poddisruptionbudgets"}),
    "rbac.authorization.k8s.io": frozenset({"roles", "rolebindings"}),
    "coordination.k8s.io": frozenset({"leases", "leasecandidates"}),
    "discovery.k8s.io": frozenset({"endpointslices"}),
    "events.k8s.io": frozenset({"events"}),
    "storage.k8s.io": frozenset({"csistoragecapacities"}),
    "resource.k8s.io": frozenset({"resourceclaims", "resourceclaimtemplates"}),
    "authorization.k8s.io": frozenset({"localsubjectaccessreviews"}),
    "admissionregistration.k8s.io": frozenset(),
    "apiextensions.k8s.io": frozenset(),
    "apiregistration.k8s.io": frozenset(),
    "certificates.k8s.io": frozenset(),
    "scheduling.k8s.io": frozenset(),
    "node.k8s.io": frozenset(),
    "flowcontrol.apiserver.k8s.io": frozenset(),
    "authentication.k8s.io": frozenset(),
}  # fmt: skip
_BUILTIN_CLUSTER_SCOPED: Final = frozenset(
    {
        ("", "nodes"), ("", "namespaces"), ("", "persistentvolumes"), ("", "componentstatuses"),
        ("storage.k8s.io", "storageclasses"), ("storage.k8s.io", "volumeattachments"),
        ("storage.k8s.io", "csidrivers"), ("storage.k8s.io", "csinodes"),
        ("storage.k8s.io", "volumeattributesclasses"), ("resource.k8s.io", "deviceclasses"),
        ("resource.k8s.io", "resourceslices"), ("networking.k8s.io", "ingressclasses"),
        ("networking.k8s.io", "ipaddresses"), ("networking.k8s.io", "servicecidrs"),
        ("rbac.authorization.k8s.io", "clusterroles"),
        ("rbac.authorization.k8s.io", "clusterrolebindings"),
        ("scheduling.k8s.io", "priorityclasses"), ("node.k8s.io", "runtimeclasses"),
        ("apiextensions.k8s.io", "customresourcedefinitions"),
        ("apiregistration.k8s.io", "apiservices"),
        ("certificates.k8s.io", "certificatesigningrequests"),
        ("certificates.k8s.io", "clustertrustbundles"),
        ("admissionregistration.k8s.io", "validatingwebhookconfigurations"),
        ("admissionregistration.k8s.io", "mutatingwebhookconfigurations"),
        ("admissionregistration.k8s.io", "validatingadmissionpolicies"),
        ("admissionregistration.k8s.io", "validatingadmissionpolicybindings"),
    }
)  # fmt: skip


def classify_static(key: str) -> KeyInfo:
    """:func:`classify` without discovery, as a policy is validated (no I/O): a ``count/`` key
    in an API group Kubernetes serves itself must name one of that group's namespaced
    resources (so ``count/nodes`` and ``count/deployment.apps`` are refused); a ``count/`` key of
    any other group (a custom resource) passes on syntax alone.

    Raises:
        QuotaKeyError: as :func:`classify`.
    """
    info = classify(key)
    if key.startswith(_COUNT):
        resource, _, group = key[len(_COUNT) :].partition(".")
        if (group, resource) in _BUILTIN_CLUSTER_SCOPED:
            target = key[len(_COUNT) :]
            raise QuotaKeyError(
                key, f"{target!r} is cluster-scoped; a namespace quota cannot count it"
            )
        served = _BUILTIN_NAMESPACED.get(group)
        if served is not None and resource not in served:
            where = f"group {group!r}" if group else "the core group"
            raise QuotaKeyError(
                key, f"{where} serves no namespaced resource {resource!r} (check the plural)"
            )
    return info


def refused_keys(keys: Iterable[str]) -> list[str]:
    """The :class:`QuotaKeyError` text of each key :func:`classify_static` refuses, in key
    order (what a policy's ``resources`` or a budget's ``hard`` reports)."""
    refused: list[str] = []
    for key in sorted(keys):
        try:
            classify_static(key)
        except QuotaKeyError as exc:
            refused.append(str(exc))
    return refused
