"""The QuotaBudget spec and which budget a namespace belongs to (Pure: no I/O).

Issue #13 (``docs/budgets.md``): a cluster-scoped ``QuotaBudget`` (``dynquota.io/v1alpha1``)
holds one tenant's ``hard`` per quota key over the namespaces its selector picks. This module
validates the spec (the same key rules as a DynamicQuotaPolicy's ``spec.resources``) and
resolves membership: a namespace picked by two budgets belongs to neither and is reported (its
slices are frozen, as for an invalid policy), because no single allocation pass could keep both
budgets' invariants.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from dynquota.policy.keys import conflicting_aliases, refused_keys
from dynquota.policy.labels import LabelSelector
from dynquota.policy.profiles import bound_units
from dynquota.policy.units import unit_for
from dynquota.quantity import parse_quantity

__all__ = ["Membership", "QuotaBudgetSpec", "resolve_membership"]


class QuotaBudgetSpec(BaseModel):
    """``spec`` of a QuotaBudget.

    ``namespace_selector`` [namespaceSelector]: required and not empty (a budget over every
    namespace would take in kube-system). ``hard``: quota key -> the budget, a JSON integer for
    object counts, extended resources and devices, a quantity string (``"8"``, ``"500m"``,
    ``"64Gi"``) for the others; after validation each is a whole number of the key's unit
    (:func:`~dynquota.policy.units.unit_for`: millicores, bytes, objects). At least one key.

    Raises (``pydantic.ValidationError``): a key the quota system does not count, an alias
    with its long form, a negative or malformed amount, a fraction for an integer key, an
    empty selector or ``hard``.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    namespace_selector: LabelSelector = Field(alias="namespaceSelector")
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

    @model_validator(mode="after")
    def _selector_not_empty(self) -> QuotaBudgetSpec:
        selector = self.namespace_selector
        if not selector.match_labels and not selector.match_expressions:
            raise ValueError("namespaceSelector must select by at least one label")
        return self


def _amount(key: str, value: object) -> int:
    """``value`` as whole units of ``key``, as a policy's ``maximum`` is read (same messages)."""
    unit = unit_for(key)
    units = bound_units(key, unit, "hard", value)
    if isinstance(units, bool) or not isinstance(units, int):
        raise ValueError(f"{key}: hard must be a whole number, not {value!r}")
    if units < 0:
        raise ValueError(f"{key}: hard must not be negative, not {value!r}")
    if (
        not unit.counted
        and isinstance(value, str)
        and units * unit.step != parse_quantity(value).value
    ):
        # a cap read rounded up would grant more than the budget (0.5m -> 1m)
        whole = "millicores" if unit.step < 1 else "bytes"
        raise ValueError(f"{key}: hard must be a whole number of {whole}, not {value!r}")
    return units


@dataclass(frozen=True)
class Membership:
    """Which budget each namespace belongs to.

    ``budget_of``: namespace -> budget name (only namespaces in exactly one budget);
    ``conflicts``: namespace -> the sorted names of the two or more budgets that select it.
    """

    budget_of: dict[str, str]
    conflicts: dict[str, tuple[str, ...]]

    def members(self, budget: str) -> list[str]:
        """The namespaces of ``budget``, sorted (conflicting ones excluded)."""
        return sorted(ns for ns, name in self.budget_of.items() if name == budget)


def resolve_membership(
    budgets: Mapping[str, QuotaBudgetSpec], namespaces: Iterable[tuple[str, Mapping[str, str]]]
) -> Membership:
    """Resolve ``namespaces`` (``(name, labels)`` pairs) against the valid ``budgets``
    (name -> spec). A namespace selected by no budget is in neither map."""
    budget_of: dict[str, str] = {}
    conflicts: dict[str, tuple[str, ...]] = {}
    for name, labels in namespaces:
        picked = sorted(b for b, spec in budgets.items() if spec.namespace_selector.matches(labels))
        if len(picked) == 1:
            budget_of[name] = picked[0]
        elif picked:
            conflicts[name] = tuple(picked)
    return Membership(budget_of, conflicts)
