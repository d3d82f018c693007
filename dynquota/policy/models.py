"""DynamicQuotaPolicy spec models and policy validation (Pure; pydantic v2).

These models repeat, in the operator, the checks the CRD's OpenAPI schema and CEL rules make at
the apiserver (``crds/dynamicquotapolicies.yaml``), so a spec stored despite them (an older CRD,
a schema change, a direct etcd write) is reported ``Valid=False`` instead of being acted on.
Field aliases are the CRD's camelCase names; error locations use them. Profiles and the
``spec.resources`` rules are in :mod:`dynquota.policy.profiles`, label selectors in
:mod:`dynquota.policy.labels` (re-exported here).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import ErrorDetails

from dynquota.names import CONFIGMAPS, PODS, TRACKED_RESOURCES
from dynquota.policy.churn import WriteRate
from dynquota.policy.durations import format_duration, parse_duration
from dynquota.policy.labels import (
    LabelSelector,
    LabelSelectorRequirement,
    validate_label_key,
    validate_label_value,
)
from dynquota.policy.limitrange import ContainerDefaults, validate_default_quantities
from dynquota.policy.profiles import DEFAULT_PROFILES, ResourceProfile, fill_resources
from dynquota.quantity import parse_quantity

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
    "WriteRateSettings",
    "describe_validation_error",
    "validate_label_key",
    "validate_label_value",
    "validate_policy",
]


_INT32_MIN: Final = -(2**31)
_INT32_MAX: Final = 2**31 - 1

_STRICT = ConfigDict(
    frozen=True, extra="forbid", strict=True, validate_by_name=True, validate_by_alias=True
)


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


WRITE_RATE_MAX_WINDOW: Final = 3600
"""Longest ``writeRate.window``, seconds (the operator keeps one count per namespace and
second of it)."""


class WriteRateSettings(BaseModel):
    """``spec.writeRate`` of a policy: the write-rate governor's budget (issue 32; off when
    the field is omitted). More than ``limit`` creates + deletes of pods and ConfigMaps in
    ``window`` seconds puts the namespace in the chart's APF tarpit; ``quiet_period``
    [quietPeriod] seconds with at most ``limit // 2`` in the window take it out
    (:mod:`dynquota.policy.churn`).

    ``limit`` int 1 .. 1,000,000 writes; ``window`` whole seconds, 1 s .. 1h (default 60 s);
    ``quiet_period`` whole seconds, 0 s .. 8760h (default 5 m). Durations are ``90s``/``5m``/
    ``1h30m`` strings, like every other duration of a policy.
    """

    model_config = _STRICT

    limit: int
    window: int = 60
    quiet_period: int = Field(default=300, alias="quietPeriod")

    @field_validator("window", "quiet_period", mode="before")
    @classmethod
    def _duration(cls, value: object) -> int:
        if not isinstance(value, str):
            raise ValueError(f"must be a duration string like 90s, 5m or 1h30m, not {value!r}")
        return parse_duration(value)

    @field_validator("limit")
    @classmethod
    def _limit(cls, value: int) -> int:
        if not 1 <= value <= 1_000_000:
            raise ValueError(f"must be between 1 and 1000000 writes, not {value}")
        return value

    @field_validator("window")
    @classmethod
    def _window(cls, value: int) -> int:
        if not 1 <= value <= WRITE_RATE_MAX_WINDOW:
            raise ValueError(f"must be between 1s and 1h, not {format_duration(value)}")
        return value

    @property
    def rule(self) -> WriteRate:
        """The pure decision's :class:`~dynquota.policy.churn.WriteRate`."""
        return WriteRate(self.limit, self.window, self.quiet_period)

    def to_crd(self) -> dict[str, int | str]:
        """The settings as CRD JSON (camelCase keys, duration strings)."""
        return {
            "limit": self.limit,
            "window": format_duration(self.window),
            "quietPeriod": format_duration(self.quiet_period),
        }


class DynamicQuotaPolicySpec(BaseModel):
    """``spec`` of a DynamicQuotaPolicy (``dynquota.io/v1alpha1``).

    ``namespace_selector`` [namespaceSelector] (omitted: matches every namespace),
    ``priority`` int32 (default 0), ``resources``: after validation always holds both
    ``pods`` and ``configmaps``, each listed profile's omitted fields and each unlisted resource
    taken from :data:`DEFAULT_PROFILES` (the CRD's documented defaulting), plus every other
    listed quota key the quota system counts (:func:`~dynquota.policy.profiles.fill_resources`);
    an uncounted key or an alias with its long form is refused. ``dry_run`` [dryRun] bool
    (default false). ``override``: the tenant override's rules (:class:`OverrideSettings`;
    omitted: allowed, the operator's TTL, no minimum interval). ``default_requests``
    [defaultRequests], ``default_limits`` [defaultLimits]: container resource (``cpu``,
    ``memory``, ``ephemeral-storage``) -> positive quantity string for the companion LimitRange
    ``dynquota`` (:mod:`dynquota.policy.limitrange`); ``defaultLimits`` needs
    ``allow_default_limits`` [allowDefaultLimits] true, and each default request must not
    exceed the default limit of the same resource. ``wake`` bool (default true): after a
    raise, wake the controllers the quota refused in these namespaces
    (:mod:`dynquota.operator.wake`). ``write_rate`` [writeRate]: the write-rate governor's
    budget (:class:`WriteRateSettings`; ``None``, omitted: off).
    """

    model_config = _STRICT

    namespace_selector: LabelSelector = Field(
        default_factory=LabelSelector, alias="namespaceSelector"
    )
    priority: int = 0
    resources: dict[str, ResourceProfile] = Field(default_factory=lambda: dict(DEFAULT_PROFILES))
    dry_run: bool = Field(default=False, alias="dryRun")
    override: OverrideSettings = Field(default_factory=OverrideSettings)
    default_requests: dict[str, str] = Field(default_factory=dict, alias="defaultRequests")
    default_limits: dict[str, str] = Field(default_factory=dict, alias="defaultLimits")
    allow_default_limits: bool = Field(default=False, alias="allowDefaultLimits")
    wake: bool = True
    write_rate: WriteRateSettings | None = Field(default=None, alias="writeRate")

    @field_validator(
        "namespace_selector", "override", "default_requests", "default_limits", mode="before"
    )
    @classmethod
    def _null_as_empty(cls, value: object) -> object:
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
        return fill_resources(value)

    @field_validator("default_requests")
    @classmethod
    def _requests(cls, value: dict[str, str]) -> dict[str, str]:
        return validate_default_quantities(value, "defaultRequests")

    @field_validator("default_limits")
    @classmethod
    def _limits(cls, value: dict[str, str]) -> dict[str, str]:
        return validate_default_quantities(value, "defaultLimits")

    @model_validator(mode="after")
    def _limits_opt_in(self) -> DynamicQuotaPolicySpec:
        if self.default_limits and not self.allow_default_limits:
            raise ValueError(
                "defaultLimits caps every container without its own limit at run time: it "
                "needs allowDefaultLimits: true"
            )
        for name, limit in self.default_limits.items():
            request = self.default_requests.get(name)
            if request is not None and parse_quantity(request) > parse_quantity(limit):
                raise ValueError(
                    f"defaultRequests.{name} ({request}) must not exceed defaultLimits.{name} "
                    f"({limit})"
                )
        return self

    @property
    def container_defaults(self) -> ContainerDefaults:
        """The companion LimitRange this policy asks for (empty: none)."""
        return ContainerDefaults(self.default_requests, self.default_limits)


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
    problem (``spec.resources: resource key not counted by the Kubernetes quota system:
    'count/nodes': 'nodes' is cluster-scoped; a namespace quota cannot count it``). The selector and
    priority are also validated on their own so that an invalid policy can still be placed in
    policy selection.
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
