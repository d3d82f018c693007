"""The companion LimitRange ``dynquota``: what a policy asks for (Pure; issue #12).

A policy's ``defaultRequests`` (and, only with ``allowDefaultLimits: true``, ``defaultLimits``)
ask dynquota to manage a LimitRange named ``dynquota`` in every namespace it governs, with one
item of type ``Container`` setting ``defaultRequest`` (and ``default``). Its defaults are what
lets a compute key (``requests.cpu``, ``memory``, ``limits.*``: the compute trap) be added to
the managed quota without making quota admission refuse every pod that does not declare it.
Rules and the lifecycle decision: ``docs/quota-keys.md`` (section "The companion LimitRange").
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from dynquota.names import MANAGED_BY_LABEL, MANAGED_BY_VALUE, MANAGED_LIMIT_RANGE_NAME
from dynquota.quantity import QuantityError, parse_quantity

__all__ = [
    "CONTAINER_RESOURCES",
    "ContainerDefaults",
    "limit_range_covers",
    "owned_limit_range",
    "validate_default_quantities",
]

CONTAINER_RESOURCES: Final = ("cpu", "memory", "ephemeral-storage")
"""The container resources a companion LimitRange may set a default for."""


def validate_default_quantities(value: Mapping[str, str], field_name: str) -> dict[str, str]:
    """Check a ``defaultRequests``/``defaultLimits`` map: keys in :data:`CONTAINER_RESOURCES`,
    values positive Kubernetes quantities (``"100m"``, ``"128Mi"``); returned unchanged.

    Raises:
        ValueError: a key that is not a container resource, or a value that is not a
            quantity above zero (the message names the key and ``field_name``).
    """
    for name, text in value.items():
        if name not in CONTAINER_RESOURCES:
            raise ValueError(
                f"{field_name}: {name!r} is not one of {', '.join(CONTAINER_RESOURCES)}"
            )
        try:
            quantity = parse_quantity(text)
        except QuantityError as error:
            raise ValueError(f"{field_name}.{name}: {error}") from None
        if quantity <= 0:
            raise ValueError(f"{field_name}.{name}: must be above 0, not {text!r}")
        # the apiserver rounds a fraction away (0.5m -> 1m; 1.5 bytes -> 1500m), so the
        # companion would never match what it stores and be patched again and again
        whole, unit = (quantity.value * 1000, "millicores") if name == "cpu" else (
            quantity.value, "bytes")  # fmt: skip
        if whole != whole.to_integral_value():
            raise ValueError(f"{field_name}.{name}: must be a whole number of {unit}, not {text!r}")
    return dict(value)


@dataclass(frozen=True)
class ContainerDefaults:
    """The companion LimitRange a policy asks for.

    ``requests``: container resource -> quantity string (``{"cpu": "100m"}``), the
    LimitRange's ``defaultRequest``. ``limits``: likewise, its ``default`` (only ever non-empty
    when the policy sets ``allowDefaultLimits: true``). Both empty: no companion LimitRange.
    """

    requests: Mapping[str, str] = field(default_factory=dict)
    limits: Mapping[str, str] = field(default_factory=dict)

    @property
    def wanted(self) -> bool:
        """Whether the policy asks for a companion LimitRange at all."""
        return bool(self.requests or self.limits)

    def limits_item(self) -> dict[str, Any]:
        """The one ``spec.limits`` item: ``{"type": "Container", "defaultRequest": {...},
        "default": {...}}`` (an empty map left out)."""
        item: dict[str, Any] = {"type": "Container"}
        if self.requests:
            item["defaultRequest"] = dict(self.requests)
        if self.limits:
            item["default"] = dict(self.limits)
        return item

    def covers(self) -> frozenset[str]:
        """The compute quota keys these defaults satisfy: a default request for ``cpu``
        covers ``cpu`` and ``requests.cpu``; a default limit covers ``limits.cpu`` and, since
        the apiserver then also defaults the request to it, ``cpu`` and ``requests.cpu``."""
        keys: set[str] = set()
        for name in (*self.requests, *self.limits):
            keys.update({name, f"requests.{name}"})
        keys.update(f"limits.{name}" for name in self.limits)
        return frozenset(keys)

    def matches(self, limits: object) -> bool:
        """Whether a stored LimitRange's ``spec.limits`` is exactly what is wanted, comparing
        quantities numerically (the apiserver canonicalises ``0.1`` to ``100m``). The
        apiserver fills ``defaultRequest`` from ``default`` where only the limit is given, so
        that filling is expected too."""
        if not isinstance(limits, list) or len(limits) != 1 or not isinstance(limits[0], dict):
            return False
        stored = limits[0]
        if set(stored) - {"type", "defaultRequest", "default"}:
            return False
        expected_requests = {**self.limits, **self.requests}
        return (
            stored.get("type") == "Container"
            and _same(stored.get("defaultRequest") or {}, expected_requests)
            and _same(stored.get("default") or {}, self.limits)
        )


def _same(stored: object, wanted: Mapping[str, str]) -> bool:
    if not isinstance(stored, dict) or set(stored) != set(wanted):
        return False
    try:
        return all(parse_quantity(str(stored[k])) == parse_quantity(v) for k, v in wanted.items())
    except QuantityError:
        return False


def limit_range_covers(items: Iterable[Mapping[str, Any]]) -> frozenset[str]:
    """The compute quota keys the LimitRanges ``items`` (decoded JSON) give every container
    a default for (items of type ``Container``): ``defaultRequest.cpu`` covers ``requests.cpu``
    and ``cpu``; ``default.cpu`` covers ``limits.cpu`` and, since the apiserver fills a missing
    ``defaultRequest`` from it, ``requests.cpu`` and ``cpu`` too (likewise every resource)."""
    covered: set[str] = set()
    for item in items:
        for limit in (item.get("spec") or {}).get("limits") or []:
            if limit.get("type") != "Container":
                continue
            for name in limit.get("defaultRequest") or {}:
                covered.update({name, f"requests.{name}"})
            for name in limit.get("default") or {}:
                covered.update({name, f"requests.{name}", f"limits.{name}"})
    return frozenset(covered)


def owned_limit_range(
    items: Iterable[Mapping[str, Any]],
) -> tuple[Mapping[str, Any] | None, bool]:
    """Among LimitRanges ``items``, the one named ``dynquota`` (or ``None``) and whether
    dynquota owns it (it carries the managed-by label, like the managed quota). A ``dynquota``
    LimitRange without the label is someone else's: never written."""
    for item in items:
        metadata = item.get("metadata") or {}
        if metadata.get("name") == MANAGED_LIMIT_RANGE_NAME:
            labels = metadata.get("labels") or {}
            return item, labels.get(MANAGED_BY_LABEL) == MANAGED_BY_VALUE
    return None, False
