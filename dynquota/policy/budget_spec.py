"""The QuotaBudget spec (Pure: no I/O).

Issue #13 (``docs/budgets.md``): a cluster-scoped ``QuotaBudget`` (``dynquota.io/v1alpha1``)
holds one tenant's ``hard`` per quota key over the namespaces labelled
``dynquota.io/budget=<its name>`` (issue #22: membership is that one label value, so a
namespace is in one budget at most). This module validates the spec (the same key rules as a
DynamicQuotaPolicy's ``spec.resources``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from decimal import Decimal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from dynquota.policy.keys import conflicting_aliases, refused_keys
from dynquota.policy.profiles import MAX_COUNT, bound_units
from dynquota.policy.units import unit_for
from dynquota.quantity import parse_quantity

__all__ = ["QuotaBudgetSpec"]


class QuotaBudgetSpec(BaseModel):
    """``spec`` of a QuotaBudget.

    ``hard``: quota key -> the budget, a JSON integer for
    object counts, extended resources and devices, a quantity string (``"8"``, ``"500m"``,
    ``"64Gi"``) for the others; after validation each is a whole number of the key's unit
    (:func:`~dynquota.policy.units.unit_for`: millicores, bytes, objects). At least one key.

    Raises (``pydantic.ValidationError``): a key the quota system does not count, an alias
    with its long form, a negative or malformed amount, a fraction for an integer key or of a
    millicore, a count above :data:`~dynquota.policy.profiles.MAX_COUNT`, an empty ``hard``,
    any other field (``namespaceSelector`` went in issue #22: the namespace
    label ``dynquota.io/budget`` says which budget a namespace is in).
    """

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    hard: dict[str, int] = Field(min_length=1)

    @field_validator("hard", mode="before")
    @classmethod
    def _units(cls, value: object) -> object:
        if not isinstance(value, Mapping):
            return value  # reported by the dict type check
        problems = refused_keys(str(k) for k in value)
        problems += [f"{a} and {b} are the same key" for a, b in conflicting_aliases(value)]
        if problems:
            raise ValueError("; ".join(problems))
        return {str(k): _amount(str(k), v) for k, v in value.items()}


def _amount(key: str, value: object) -> int:
    """``value`` as whole units of ``key``, as a policy's ``maximum`` is read (same messages),
    and as a ResourceQuota with that hard holds it (measured on kube-apiserver 1.37,
    ``docs/budgets.md``, "Amounts as a ResourceQuota reads them"):

    - a count as a quantity string of a whole number (``"60"``, ``"1k"``, ``"1000m"`` = 1),
      at most :data:`~dynquota.policy.profiles.MAX_COUNT`;
    - a fraction of a byte (``requests.memory: "0.5"``, ``requests.storage: "1.5"``): a
      ResourceQuota keeps it to the milli-byte, rounded up (``500m``, ``1500m``; ``"0.9999"``
      is stored as ``1``) and admits no more whole bytes than the floor of that, so the
      budget is that floor (0, 1 byte): a slice is a whole number of bytes, and rounding up
      would grant more than the budget;
    - a fraction of a millicore (``"0.5m"``) is refused: a ResourceQuota rounds it *up* to
      ``1m``, more than the budget says.
    """
    unit = unit_for(key)
    units = bound_units(key, unit, "hard", value)
    if isinstance(units, bool) or not isinstance(units, int):
        raise ValueError(f"{key}: hard must be a whole number, not {value!r}")
    if units < 0:
        raise ValueError(f"{key}: hard must not be negative, not {value!r}")
    if unit.counted and units > MAX_COUNT:
        raise ValueError(f"{key}: hard must be at most {MAX_COUNT}, not {value!r}")
    if not unit.counted and isinstance(value, str):
        amount = parse_quantity(value).value
        if units * unit.step != amount:
            if unit.step >= 1:  # bytes: a ResourceQuota keeps it to the milli-byte, rounded
                # up ("0.9999" is stored as 1), and admits the whole bytes below that
                return math.floor(math.ceil(amount * 1000) / Decimal(1000))
            raise ValueError(
                f"{key}: hard must be a whole number of millicores, not {value!r} (a "
                "ResourceQuota rounds it up to the next millicore, more than the budget)"
            )
    return units
