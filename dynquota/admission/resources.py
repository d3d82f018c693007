"""Exact arithmetic on resource lists (Pure).

Ports of the helpers in kubernetes/kubernetes ``staging/src/k8s.io/apiserver/pkg/quota/v1/
resources.go`` (``Add``, ``SubtractWithNonNegativeResult``, ``Mask``, ``LessThanOrEqual``,
``Equals``, ``RemoveZeros``, ``IsNegative``) and ``prettyPrint`` of ``resourcequota/
controller.go``. Every amount is a :class:`~dynquota.quantity.Quantity` (Decimal), never a
float.
"""

from __future__ import annotations

from collections.abc import Iterable

from dynquota.quantity import Quantity, quantity_from_int

from .types import ResourceList

__all__ = [
    "add",
    "equals",
    "is_negative",
    "less_than_or_equal",
    "mask",
    "pretty_print",
    "remove_zeros",
    "subtract_non_negative",
]

_ZERO = quantity_from_int(0)


def add(a: ResourceList, b: ResourceList) -> dict[str, Quantity]:
    """Key-wise sum; keys of either side are kept (upstream ``quota.Add``)."""
    out = dict(a)
    for key, value in b.items():
        out[key] = out[key] + value if key in out else value
    return out


def subtract_non_negative(a: ResourceList, b: ResourceList) -> dict[str, Quantity]:
    """``a - b`` key-wise, floored at 0; keys only in ``b`` become 0.

    Upstream ``quota.SubtractWithNonNegativeResult``.
    """
    out: dict[str, Quantity] = {}
    for key, value in a.items():
        diff = value - b[key] if key in b else value
        out[key] = diff if diff > 0 else _ZERO
    for key in b:
        out.setdefault(key, _ZERO)
    return out


def mask(items: ResourceList, names: Iterable[str]) -> dict[str, Quantity]:
    """Only the entries whose key is in ``names`` (upstream ``quota.Mask``)."""
    wanted = set(names)
    return {key: value for key, value in items.items() if key in wanted}


def less_than_or_equal(a: ResourceList, b: ResourceList) -> tuple[bool, list[str]]:
    """Whether every key of ``a`` that ``b`` has is ``<=`` in ``a``; and the keys that are not.

    Keys of ``a`` that ``b`` lacks are unconstrained (upstream ``quota.LessThanOrEqual``).
    The exceeded keys are sorted.
    """
    exceeded = sorted(key for key, value in a.items() if key in b and value > b[key])
    return not exceeded, exceeded


def equals(a: ResourceList, b: ResourceList) -> bool:
    """Same keys with numerically equal amounts (upstream ``quota.Equals``)."""
    if a.keys() != b.keys():
        return False
    return all(a[key] == b[key] for key in a)


def remove_zeros(items: ResourceList) -> dict[str, Quantity]:
    """Drop zero amounts (upstream ``quota.RemoveZeros``)."""
    return {key: value for key, value in items.items() if not value.is_zero()}


def is_negative(items: ResourceList) -> list[str]:
    """Sorted keys with a negative amount (upstream ``quota.IsNegative``)."""
    return sorted(key for key, value in items.items() if value < 0)


def pretty_print(items: ResourceList) -> str:
    """``key=value`` pairs sorted by key, comma-separated, canonical quantity text.

    Upstream ``prettyPrint`` in ``resourcequota/controller.go``: ``pods=1,requests.cpu=500m``.
    """
    return ",".join(f"{key}={items[key]}" for key in sorted(items))
