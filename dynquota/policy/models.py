"""DynamicQuotaPolicy spec models, label selectors and policy validation (Pure; pydantic v2).

These models repeat, in the operator, the checks the CRD's OpenAPI schema and CEL rules make at
the apiserver (``crds/dynamicquotapolicies.yaml``), so a spec stored despite them (an older CRD,
a schema change, a direct etcd write) is reported ``Valid=False`` instead of being acted on.
Field aliases are the CRD's camelCase names; error locations use them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_core import ErrorDetails

from dynquota.names import CONFIGMAPS, PODS, TRACKED_RESOURCES
from dynquota.policy.durations import format_duration, parse_duration

__all__ = [
    "CONFIGMAPS",
    "DEFAULT_PROFILES",
    "PODS",
    "TRACKED_RESOURCES",
    "DynamicQuotaPolicySpec",
    "LabelSelector",
    "LabelSelectorRequirement",
    "OverrideSettings",
    "PolicyInfo",
    "ResourceProfile",
    "describe_validation_error",
    "validate_label_key",
    "validate_label_value",
    "validate_policy",
]


_INT64_MAX: Final = 2**63 - 1
_INT32_MIN: Final = -(2**31)
_INT32_MAX: Final = 2**31 - 1

_STRICT = ConfigDict(
    frozen=True, extra="forbid", strict=True, validate_by_name=True, validate_by_alias=True
)


class ResourceProfile(BaseModel):
    """How one resource's hard limit follows its usage.

    Fields (CRD names in brackets): ``buffer_percent`` [bufferPercent] int 0..1000;
    ``minimum`` and ``maximum`` counts, ``0 <= minimum <= maximum <= 2^63-1``;
    ``upscale_cooldown`` [upscaleCooldown] and ``downscale_cooldown`` [downscaleCooldown] in
    whole seconds, given as duration strings (``90s``, ``5m``, ``1h30m``) when validated from a
    policy. Build one from numbers with :meth:`of`.
    """

    model_config = _STRICT

    buffer_percent: int = Field(alias="bufferPercent")
    minimum: int
    maximum: int
    upscale_cooldown: int = Field(alias="upscaleCooldown")
    downscale_cooldown: int = Field(alias="downscaleCooldown")

    @field_validator("buffer_percent")
    @classmethod
    def _buffer_range(cls, value: int) -> int:
        if not 0 <= value <= 1000:
            raise ValueError(f"must be between 0 and 1000, not {value}")
        return value

    @field_validator("minimum", "maximum")
    @classmethod
    def _count_range(cls, value: int) -> int:
        if not 0 <= value <= _INT64_MAX:
            raise ValueError(f"must be between 0 and {_INT64_MAX}, not {value}")
        return value

    @field_validator("upscale_cooldown", "downscale_cooldown", mode="before")
    @classmethod
    def _duration(cls, value: object) -> int:
        if not isinstance(value, str):
            raise ValueError(f"must be a duration string like 90s, 5m or 1h30m, not {value!r}")
        return parse_duration(value)

    @model_validator(mode="after")
    def _min_le_max(self) -> ResourceProfile:
        if self.minimum > self.maximum:
            raise ValueError(
                f"minimum ({self.minimum}) must be less than or equal to maximum ({self.maximum})"
            )
        return self

    @classmethod
    def of(
        cls,
        buffer_percent: int,
        minimum: int,
        maximum: int,
        upscale_cooldown: int,
        downscale_cooldown: int,
    ) -> ResourceProfile:
        """A validated profile from numbers (cooldowns in whole seconds).

        Raises ``pydantic.ValidationError`` like validation from a policy would.
        """
        return cls.model_validate(
            {
                "bufferPercent": buffer_percent,
                "minimum": minimum,
                "maximum": maximum,
                "upscaleCooldown": format_duration(upscale_cooldown),
                "downscaleCooldown": format_duration(downscale_cooldown),
            }
        )

    def sizing_key(self) -> str:
        """The fields that decide the target, as stored in the ``dynquota.io/profile.<resource>``
        annotation: ``bufferPercent=40,minimum=10,maximum=1000``. Cooldowns are not part of it:
        changing a cooldown is not a policy change that resizes at once."""
        return f"bufferPercent={self.buffer_percent},minimum={self.minimum},maximum={self.maximum}"

    def to_crd(self) -> dict[str, int | str]:
        """The profile as CRD JSON (camelCase keys, duration strings)."""
        return {
            "bufferPercent": self.buffer_percent,
            "minimum": self.minimum,
            "maximum": self.maximum,
            "upscaleCooldown": format_duration(self.upscale_cooldown),
            "downscaleCooldown": format_duration(self.downscale_cooldown),
        }


DEFAULT_PROFILES: Final[Mapping[str, ResourceProfile]] = {
    PODS: ResourceProfile.of(40, 10, 1000, 5 * 60, 3600),
    CONFIGMAPS: ResourceProfile.of(40, 50, 2000, 2 * 60, 6 * 3600),
}
"""Built-in profiles: pods 40%/10/1000/5m/1h; configmaps 40%/50/2000/2m/6h."""


class OverrideSettings(BaseModel):
    """``spec.override`` of a policy: how the tenant override (``dynquota.io/override=max``)
    is governed in the namespaces it governs.

    Fields (CRD names in brackets): ``allowed`` bool (default true: a request is granted);
    ``ttl`` whole seconds, ``None`` (omitted) for the operator's ``overrideTTL``, else 1 s ..
    8760h; ``min_interval`` [minInterval] whole seconds (default 0), the least time between
    the end of one override and the next grant. Durations are given as ``90s``/``5m``/
    ``1h30m`` strings when validated from a policy. The defaults are the behaviour of
    policies written before the field existed.
    """

    model_config = _STRICT

    allowed: bool = True
    ttl: int | None = None
    min_interval: int = Field(default=0, alias="minInterval")

    @field_validator("ttl", "min_interval", mode="before")
    @classmethod
    def _duration(cls, value: object) -> int | None:
        if value is None:
            return None
        if not isinstance(value, str):
            raise ValueError(f"must be a duration string like 90s, 5m or 1h30m, not {value!r}")
        return parse_duration(value)

    @field_validator("ttl")
    @classmethod
    def _positive(cls, value: int | None) -> int | None:
        if value is not None and value <= 0:
            raise ValueError("must be longer than 0s")
        return value

    @field_validator("min_interval")
    @classmethod
    def _interval(cls, value: int | None) -> int:
        return 0 if value is None else value

    @classmethod
    def of(
        cls, allowed: bool = True, ttl: int | None = None, min_interval: int = 0
    ) -> OverrideSettings:
        """Validated settings from numbers (durations in whole seconds).

        Raises ``pydantic.ValidationError`` like validation from a policy would.
        """
        body: dict[str, object] = {"allowed": allowed, "minInterval": format_duration(min_interval)}
        if ttl is not None:
            body["ttl"] = format_duration(ttl)
        return cls.model_validate(body)

    def to_crd(self) -> dict[str, bool | str]:
        """The settings as CRD JSON (camelCase keys, duration strings; ``ttl`` omitted when
        it is the operator's)."""
        body: dict[str, bool | str] = {"allowed": self.allowed}
        if self.ttl is not None:
            body["ttl"] = format_duration(self.ttl)
        body["minInterval"] = format_duration(self.min_interval)
        return body


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
        if value is None:
            return ()
        if isinstance(value, list):
            return tuple(value)
        return value

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
        if value is None:
            return ()
        if isinstance(value, list):
            return tuple(value)
        return value

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether a namespace with ``labels`` is selected."""
        return all(labels.get(k) == v for k, v in self.match_labels.items()) and all(
            requirement.matches(labels) for requirement in self.match_expressions
        )


class DynamicQuotaPolicySpec(BaseModel):
    """``spec`` of a DynamicQuotaPolicy (``dynquota.io/v1alpha1``).

    ``namespace_selector`` [namespaceSelector] (omitted: matches every namespace),
    ``priority`` int32 (default 0), ``resources``: after validation always holds both
    ``pods`` and ``configmaps``, each listed profile's omitted fields and each unlisted resource
    taken from :data:`DEFAULT_PROFILES` (the CRD's documented defaulting); any other key is
    refused. ``dry_run`` [dryRun] bool (default false). ``override``: the tenant override's
    rules (:class:`OverrideSettings`; omitted: allowed, the operator's TTL, no minimum
    interval).
    """

    model_config = _STRICT

    namespace_selector: LabelSelector = Field(
        default_factory=LabelSelector, alias="namespaceSelector"
    )
    priority: int = 0
    resources: dict[str, ResourceProfile] = Field(default_factory=lambda: dict(DEFAULT_PROFILES))
    dry_run: bool = Field(default=False, alias="dryRun")
    override: OverrideSettings = Field(default_factory=OverrideSettings)

    @field_validator("namespace_selector", "override", mode="before")
    @classmethod
    def _null_selector(cls, value: object) -> object:
        return {} if value is None else value

    @field_validator("priority")
    @classmethod
    def _int32(cls, value: int) -> int:
        if not _INT32_MIN <= value <= _INT32_MAX:
            raise ValueError(f"must be a 32-bit integer, not {value}")
        return value

    @field_validator("resources", mode="before")
    @classmethod
    def _fill_defaults(cls, value: object) -> object:
        if value is None:
            value = {}
        if not isinstance(value, Mapping):
            return value  # reported by the dict type check
        unknown = sorted(str(k) for k in value if k not in TRACKED_RESOURCES)
        if unknown:
            listed = ", ".join(repr(k) for k in unknown)
            noun = "key" if len(unknown) == 1 else "keys"
            raise ValueError(
                f"unknown resource {noun} {listed}: allowed keys are 'pods' and 'configmaps'"
            )
        merged: dict[str, object] = {}
        for resource in TRACKED_RESOURCES:
            given = value.get(resource, {})
            if not isinstance(given, Mapping):
                merged[resource] = given  # reported by the model type check
                continue
            merged[resource] = {**DEFAULT_PROFILES[resource].to_crd(), **given}
        return merged


_TYPE_MESSAGES: Final = {
    "int_type": "must be an integer",
    "int_parsing": "must be an integer",
    "int_from_float": "must be an integer",
    "bool_type": "must be true or false",
    "bool_parsing": "must be true or false",
    "string_type": "must be a string",
    "dict_type": "must be an object",
    "model_type": "must be an object",
    "model_attributes_type": "must be an object",
    "tuple_type": "must be a list",
    "list_type": "must be a list",
    "extra_forbidden": "unknown field",
    "missing": "required field is missing",
}


def _describe(error: ErrorDetails, prefix: str) -> str:
    loc = prefix
    for part in error["loc"]:
        loc += f"[{part}]" if isinstance(part, int) else f".{part}"
    ctx = error.get("ctx") or {}
    if error["type"] == "value_error" and "error" in ctx:
        message = str(ctx["error"])
    else:
        message = _TYPE_MESSAGES.get(error["type"], error["msg"])
    return f"{loc}: {message}"


def describe_validation_error(error: ValidationError, prefix: str = "spec") -> str:
    """One human-readable line per problem, joined by ``"; "``, locations in CRD names:
    ``spec.resources.pods: minimum (20) must be less than or equal to maximum (10)``."""
    return "; ".join(_describe(e, prefix) for e in error.errors(include_url=False))


@dataclass(frozen=True)
class PolicyInfo:
    """What the operator knows about one stored policy, valid or not.

    ``name``: ``metadata.name``. ``spec``: the validated spec, ``None`` when invalid.
    ``reason``: why it is invalid (the ``Valid=False`` condition message), ``None`` when valid.
    ``selector`` and ``priority``: usable even for an invalid policy when these two parts
    validate on their own; ``None`` means unknown (policy selection then assumes the worst:
    see :func:`dynquota.policy.selection.govern`).
    """

    name: str
    spec: DynamicQuotaPolicySpec | None
    reason: str | None
    selector: LabelSelector | None
    priority: int | None

    @property
    def valid(self) -> bool:
        """True when the whole spec validated."""
        return self.spec is not None

    @classmethod
    def from_spec(cls, name: str, spec: DynamicQuotaPolicySpec) -> PolicyInfo:
        """A valid policy (for callers and tests that build specs directly)."""
        return cls(name, spec, None, spec.namespace_selector, spec.priority)


def validate_policy(obj: Mapping[str, Any]) -> PolicyInfo:
    """Validate a DynamicQuotaPolicy object as read from the apiserver (a JSON dict with
    ``metadata`` and ``spec``).

    Never raises for a bad spec: returns a :class:`PolicyInfo` whose ``reason`` lists every
    problem (``spec.resources: unknown resource key 'count/nodes': allowed keys are 'pods' and
    'configmaps'``). The selector and priority are also validated on their own so that an
    invalid policy can still be placed in policy selection.
    """
    metadata = obj.get("metadata")
    name = metadata.get("name") if isinstance(metadata, Mapping) else None
    if not isinstance(name, str) or not name:
        return PolicyInfo("", None, "metadata.name: required field is missing", None, None)
    raw_spec = obj.get("spec")
    if raw_spec is None:
        raw_spec = {}
    if not isinstance(raw_spec, Mapping):
        return PolicyInfo(name, None, "spec: must be an object", None, None)
    try:
        spec = DynamicQuotaPolicySpec.model_validate(raw_spec)
    except ValidationError as error:
        reason = describe_validation_error(error)
    else:
        return PolicyInfo.from_spec(name, spec)
    selector: LabelSelector | None
    try:
        raw_selector = raw_spec.get("namespaceSelector")
        selector = LabelSelector.model_validate({} if raw_selector is None else raw_selector)
    except ValidationError:
        selector = None
    raw_priority = raw_spec.get("priority", 0)
    priority = (
        raw_priority
        if isinstance(raw_priority, int)
        and not isinstance(raw_priority, bool)
        and _INT32_MIN <= raw_priority <= _INT32_MAX
        else None
    )
    return PolicyInfo(name, None, reason, selector, priority)
