"""The ``limitedResources`` admission configuration: "limited by default" (Pure).

Port of kube-apiserver's ResourceQuota admission configuration
(``staging/src/k8s.io/apiserver/pkg/admission/plugin/resourcequota/apis/resourcequota/
types.go``: ``LimitedResource``) and its use in ``CheckRequest`` (``controller.go``:
``filterLimitedResourcesByGroupResource``, ``limitedByDefault``,
``getMatchedLimitedScopes``). A limited resource may only be consumed in a namespace that has
a quota covering it:

* ``match_contains``: a consumed (positive) usage name containing one of these substrings
  needs a matching quota that limits it, else ``insufficient quota to consume: NAMES``;
* ``match_scopes``: an object in one of these scopes needs a matching quota with that scope,
  else ``insufficient quota to match these scopes: [...]``.

The configuration file's YAML (``apiVersion: apiserver.config.k8s.io/v1``, ``kind:
ResourceQuotaConfiguration``) maps to :meth:`LimitedResource.from_config`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dynquota.quantity import Quantity

from .types import GroupResource, ScopedResourceSelectorRequirement

__all__ = ["LimitedResource", "format_scopes", "limited_by_default", "limited_for"]


@dataclass(frozen=True)
class LimitedResource:
    """One entry of ``limitedResources``.

    Attributes:
        resource: plural resource name (``pods``).
        api_group: API group (``""`` for core).
        match_contains: substrings of usage names that are limited (``requests.cpu``).
        match_scopes: scopes that are limited (``PriorityClass In [cluster-services]``).
    """

    resource: str
    api_group: str = ""
    match_contains: tuple[str, ...] = ()
    match_scopes: tuple[ScopedResourceSelectorRequirement, ...] = ()

    @classmethod
    def from_config(cls, entry: Mapping[str, Any]) -> LimitedResource:
        """From one ``limitedResources`` item of a ResourceQuotaConfiguration (camelCase)."""
        return cls(
            resource=str(entry.get("resource", "")),
            api_group=str(entry.get("apiGroup", "")),
            match_contains=tuple(str(s) for s in entry.get("matchContains") or ()),
            match_scopes=tuple(
                ScopedResourceSelectorRequirement(
                    scope_name=str(s.get("scopeName", "")),
                    operator=str(s.get("operator", "")),
                    values=tuple(str(v) for v in s.get("values") or ()),
                )
                for s in entry.get("matchScopes") or ()
            ),
        )


def limited_for(limited: Iterable[LimitedResource], gr: GroupResource) -> list[LimitedResource]:
    """The entries for ``gr`` (upstream ``filterLimitedResourcesByGroupResource``)."""
    return [x for x in limited if x.api_group == gr.group and x.resource == gr.resource]


def limited_by_default(
    usage: Mapping[str, Quantity], limited: Sequence[LimitedResource]
) -> set[str]:
    """Usage names with a positive amount that contain a ``match_contains`` substring
    (upstream ``limitedByDefault``)."""
    return {
        name
        for entry in limited
        for name, amount in usage.items()
        if amount > 0 and any(s in name for s in entry.match_contains)
    }


def format_scopes(scopes: Sequence[ScopedResourceSelectorRequirement]) -> str:
    """Go's ``%v`` of a selector slice: ``[{PriorityClass In [cluster-services]}]``."""
    parts = [f"{{{s.scope_name} {s.operator} [{' '.join(s.values)}]}}" for s in scopes]
    return "[" + " ".join(parts) + "]"
