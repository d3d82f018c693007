"""Label selectors over Namespace labels and label key/value validation (Pure; pydantic v2).

Ports of apimachinery ``pkg/apis/meta/v1/validation`` ``ValidateLabelSelector``,
``pkg/util/validation`` ``IsQualifiedName`` / ``IsValidLabelValue`` and ``pkg/labels``
selector semantics. Split out of :mod:`dynquota.policy.models` (issue #11: one concern a module).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Final, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

__all__ = [
    "LabelSelector",
    "LabelSelectorRequirement",
    "validate_label_key",
    "validate_label_value",
]

_STRICT = ConfigDict(
    frozen=True, extra="forbid", strict=True, validate_by_name=True, validate_by_alias=True
)

# -- label selectors (apimachinery pkg/apis/meta/v1/validation ValidateLabelSelector,
#    pkg/util/validation IsQualifiedName / IsValidLabelValue, pkg/labels selector semantics) --

_NAME: Final = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_DNS_SUBDOMAIN: Final = re.compile(
    r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
)
_NAME_RULE: Final = (
    "alphanumeric characters, '-', '_' or '.', starting and ending with an alphanumeric character"
)


def validate_label_key(key: str) -> str:
    """Check a label key: ``[prefix/]name``, name at most 63 characters of :data:`_NAME_RULE`,
    prefix a lowercase DNS subdomain of at most 253 characters. Returns the key.

    Raises ``ValueError`` naming the key and the broken rule. Upstream:
    ``k8s.io/apimachinery/pkg/util/validation`` ``IsQualifiedName``.
    """
    if not isinstance(key, str):
        raise ValueError(f"label key must be a string, not {key!r}")
    parts = key.split("/")
    if len(parts) > 2:
        raise ValueError(f"invalid label key {key!r}: at most one '/' allowed")
    name = parts[-1]
    if len(parts) == 2:
        prefix = parts[0]
        if not prefix:
            raise ValueError(f"invalid label key {key!r}: the prefix before '/' is empty")
        if len(prefix) > 253 or not _DNS_SUBDOMAIN.fullmatch(prefix):
            raise ValueError(
                f"invalid label key {key!r}: the prefix must be a lowercase DNS subdomain "
                "(at most 253 characters)"
            )
    if not name:
        raise ValueError(f"invalid label key {key!r}: the name part is empty")
    if len(name) > 63 or not _NAME.fullmatch(name):
        raise ValueError(
            f"invalid label key {key!r}: the name part must be at most 63 {_NAME_RULE}"
        )
    return key


def validate_label_value(value: str) -> str:
    """Check a label value: empty, or at most 63 characters of :data:`_NAME_RULE`.

    Raises ``ValueError`` naming the value. Upstream: ``IsValidLabelValue``.
    """
    if not isinstance(value, str):
        raise ValueError(f"label value must be a string, not {value!r}")
    if value and (len(value) > 63 or not _NAME.fullmatch(value)):
        raise ValueError(f"invalid label value {value!r}: must be empty or at most 63 {_NAME_RULE}")
    return value


SelectorOperator = Literal["In", "NotIn", "Exists", "DoesNotExist"]
_OPERATORS: Final = ("In", "NotIn", "Exists", "DoesNotExist")


def _as_tuple(value: object) -> object:
    """A JSON list (or null: empty) as the tuple a strict tuple field takes."""
    if value is None:
        return ()
    if isinstance(value, list):
        return tuple(value)
    return value


class LabelSelectorRequirement(BaseModel):
    """One ``matchExpressions`` entry: ``key``, ``operator`` (``In``, ``NotIn``, ``Exists``,
    ``DoesNotExist``; case-sensitive) and ``values``: non-empty for ``In``/``NotIn``, empty or
    absent for ``Exists``/``DoesNotExist`` (apimachinery ``ValidateLabelSelectorRequirement``)."""

    model_config = _STRICT

    key: str
    operator: str
    values: tuple[str, ...] = ()

    @field_validator("key")
    @classmethod
    def _key(cls, value: str) -> str:
        return validate_label_key(value)

    @field_validator("operator")
    @classmethod
    def _operator(cls, value: str) -> str:
        if value not in _OPERATORS:
            raise ValueError(
                f"unknown operator {value!r}: expected In, NotIn, Exists or DoesNotExist"
            )
        return value

    @field_validator("values", mode="before")
    @classmethod
    def _values_list(cls, value: object) -> object:
        return _as_tuple(value)

    @field_validator("values")
    @classmethod
    def _values(cls, values: tuple[str, ...]) -> tuple[str, ...]:
        for value in values:
            validate_label_value(value)
        return values

    @model_validator(mode="after")
    def _values_match_operator(self) -> LabelSelectorRequirement:
        if self.operator in ("In", "NotIn") and not self.values:
            raise ValueError(f"values must be non-empty for operator {self.operator}")
        if self.operator in ("Exists", "DoesNotExist") and self.values:
            raise ValueError(f"values must be empty for operator {self.operator}")
        return self

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether ``labels`` satisfy this requirement (``NotIn`` holds when the key is absent)."""
        present = self.key in labels
        if self.operator == "In":
            return present and labels[self.key] in self.values
        if self.operator == "NotIn":
            return not present or labels[self.key] not in self.values
        if self.operator == "Exists":
            return present
        return not present


class LabelSelector(BaseModel):
    """A Kubernetes label selector over Namespace labels: ``matchLabels`` and
    ``matchExpressions``, all ANDed; an empty selector matches every namespace."""

    model_config = _STRICT

    match_labels: dict[str, str] = Field(default_factory=dict, alias="matchLabels")
    match_expressions: tuple[LabelSelectorRequirement, ...] = Field(
        default=(), alias="matchExpressions"
    )

    @field_validator("match_labels", mode="before")
    @classmethod
    def _null_labels(cls, value: object) -> object:
        return {} if value is None else value

    @field_validator("match_labels")
    @classmethod
    def _labels(cls, value: dict[str, str]) -> dict[str, str]:
        for key, label in value.items():
            validate_label_key(key)
            validate_label_value(label)
        return value

    @field_validator("match_expressions", mode="before")
    @classmethod
    def _null_expressions(cls, value: object) -> object:
        return _as_tuple(value)

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether a namespace with ``labels`` is selected."""
        return all(labels.get(k) == v for k, v in self.match_labels.items()) and all(
            requirement.matches(labels) for requirement in self.match_expressions
        )
