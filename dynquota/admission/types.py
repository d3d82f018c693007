"""Value types of the admission evaluator: admission attributes and ResourceQuota documents.

Objects under admission are plain Kubernetes JSON (``Mapping[str, Any]`` as the API serves
them, camelCase keys). Quotas are immutable :class:`ResourceQuota` values holding exact
:class:`~dynquota.quantity.Quantity` amounts; a changed quota is a new value.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

from dynquota.quantity import Quantity, QuantityError, parse_quantity

from .errors import InvalidObjectError

__all__ = [
    "AdmissionAttributes",
    "GroupResource",
    "Operation",
    "ResourceList",
    "ResourceQuota",
    "ScopedResourceSelectorRequirement",
    "parse_resource_list",
]

ResourceList = Mapping[str, Quantity]
"""Resource name (``pods``, ``requests.cpu``, ``count/widgets.example.com``) -> amount."""


@dataclass(frozen=True, order=True)
class GroupResource:
    """An API group and a resource (plural, lowercase): ``GroupResource("", "pods")``.

    ``str()`` is ``pods`` for the core group, ``widgets.example.com`` otherwise (upstream
    ``schema.GroupResource.String``).
    """

    group: str
    resource: str

    def __str__(self) -> str:
        return f"{self.resource}.{self.group}" if self.group else self.resource


class Operation(StrEnum):
    """Admission operations, spelled as in ``admission.k8s.io`` AdmissionReview."""

    CREATE = "CREATE"
    UPDATE = "UPDATE"
    DELETE = "DELETE"
    CONNECT = "CONNECT"


@dataclass(frozen=True)
class AdmissionAttributes:
    """What is being admitted (a subset of upstream ``admission.Attributes``).

    Attributes:
        namespace: the request's namespace; cluster-scoped requests (``""``) are not metered.
        resource: group and resource of the object (``GroupResource("", "pods")``).
        operation: CREATE, UPDATE, ...; quota charges CREATE (and UPDATE of ``pods/resize``).
        object: the new object as Kubernetes JSON (after defaulting), or None.
        old_object: on UPDATE, the stored object as Kubernetes JSON.
        name: the object's name (may be empty for ``generateName`` creates); used in messages.
        subresource: e.g. ``status``; requests on subresources are not metered except
            ``pods/resize``.
        dry_run: checked like any request, never charged.
    """

    namespace: str
    resource: GroupResource
    operation: Operation = Operation.CREATE
    object: Mapping[str, Any] | None = None
    old_object: Mapping[str, Any] | None = None
    name: str = ""
    subresource: str = ""
    dry_run: bool = False


@dataclass(frozen=True)
class ScopedResourceSelectorRequirement:
    """One entry of a quota's ``spec.scopeSelector.matchExpressions`` (or a plain scope).

    Attributes:
        scope_name: ``Terminating``, ``NotTerminating``, ``BestEffort``, ``NotBestEffort``,
            ``PriorityClass``, ``CrossNamespacePodAffinity``, ...
        operator: ``In``, ``NotIn``, ``Exists`` or ``DoesNotExist``.
        values: for ``In``/``NotIn``.
    """

    scope_name: str
    operator: str = "Exists"
    values: tuple[str, ...] = ()


def parse_resource_list(raw: Mapping[str, Any] | None, where: str) -> dict[str, Quantity]:
    """Parse a Kubernetes ``ResourceList`` (``{"pods": "10", "requests.cpu": "500m"}``).

    Raises:
        InvalidObjectError: a value is not a quantity; the message names ``where`` and the key.
    """
    out: dict[str, Quantity] = {}
    for key, value in (raw or {}).items():
        try:
            out[str(key)] = parse_quantity(str(value))
        except QuantityError as e:
            raise InvalidObjectError(f"{where}[{key}]: {e}") from e
    return out


def _format_resource_list(items: ResourceList) -> dict[str, str]:
    return {key: str(items[key]) for key in sorted(items)}


@dataclass(frozen=True)
class ResourceQuota:
    """A ResourceQuota document as admission sees it.

    Attributes:
        namespace, name: identity.
        resource_version: ``metadata.resourceVersion`` (etcd revision as decimal text);
            the precondition of a status write.
        hard: ``status.hard`` (admission enforces the status copy the quota controller keeps).
        used: ``status.used``.
        scopes: ``spec.scopes``.
        scope_selector: ``spec.scopeSelector.matchExpressions``.
        source: the full object as served (JSON), kept so a status write round-trips
            metadata and spec unchanged; ``{}`` for quotas built in memory.
    """

    namespace: str
    name: str
    resource_version: str = ""
    hard: ResourceList = field(default_factory=dict)
    used: ResourceList = field(default_factory=dict)
    scopes: tuple[str, ...] = ()
    scope_selector: tuple[ScopedResourceSelectorRequirement, ...] = ()
    source: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def key(self) -> str:
        """``namespace/name``."""
        return f"{self.namespace}/{self.name}"

    def with_used(self, used: ResourceList) -> ResourceQuota:
        """A copy with ``status.used`` replaced."""
        return replace(self, used=dict(used))

    def with_resource_version(self, resource_version: str) -> ResourceQuota:
        """A copy with ``metadata.resourceVersion`` replaced."""
        return replace(self, resource_version=resource_version)

    def scope_selectors(self) -> list[ScopedResourceSelectorRequirement]:
        """Plain scopes as ``Exists`` selectors followed by the scope selector's expressions.

        Upstream: ``getScopeSelectorsFromQuota`` in ``resourcequota/controller.go``.
        """
        return [ScopedResourceSelectorRequirement(s, "Exists") for s in self.scopes] + list(
            self.scope_selector
        )

    @classmethod
    def from_object(cls, obj: Mapping[str, Any]) -> ResourceQuota:
        """Build from ResourceQuota JSON as the API serves it.

        Raises:
            InvalidObjectError: a ``status.hard``/``status.used`` value is not a quantity.
        """
        meta = obj.get("metadata") or {}
        spec = obj.get("spec") or {}
        status = obj.get("status") or {}
        where = f"resourcequota {meta.get('namespace', '')}/{meta.get('name', '')}"
        selector = spec.get("scopeSelector") or {}
        return cls(
            namespace=str(meta.get("namespace", "")),
            name=str(meta.get("name", "")),
            resource_version=str(meta.get("resourceVersion", "")),
            hard=parse_resource_list(status.get("hard"), f"{where} status.hard"),
            used=parse_resource_list(status.get("used"), f"{where} status.used"),
            scopes=tuple(str(s) for s in spec.get("scopes") or ()),
            scope_selector=tuple(
                ScopedResourceSelectorRequirement(
                    scope_name=str(e.get("scopeName", "")),
                    operator=str(e.get("operator", "")),
                    values=tuple(str(v) for v in e.get("values") or ()),
                )
                for e in selector.get("matchExpressions") or ()
            ),
            source=copy.deepcopy(dict(obj)),
        )

    def to_object(self) -> dict[str, Any]:
        """ResourceQuota JSON for a ``resourcequotas/status`` write.

        ``source`` with ``metadata.resourceVersion`` (the write's precondition) and
        ``status.hard``/``status.used`` replaced by this value's (canonical quantity text).
        """
        obj: dict[str, Any] = copy.deepcopy(dict(self.source))
        obj.setdefault("apiVersion", "v1")
        obj.setdefault("kind", "ResourceQuota")
        meta = obj.setdefault("metadata", {})
        meta["name"] = self.name
        meta["namespace"] = self.namespace
        meta["resourceVersion"] = self.resource_version
        if "spec" not in obj:
            spec: dict[str, Any] = {"hard": _format_resource_list(self.hard)}
            if self.scopes:
                spec["scopes"] = list(self.scopes)
            obj["spec"] = spec
        obj["status"] = {
            "hard": _format_resource_list(self.hard),
            "used": _format_resource_list(self.used),
        }
        return obj
