"""Sizing profiles and the ``spec.resources`` map of a policy (Pure; pydantic v2).

:class:`ResourceProfile` says how one quota key's hard limit follows its usage;
:func:`fill_resources` validates and defaults ``spec.resources``: ``pods`` and ``configmaps``
are always present (built-in :data:`DEFAULT_PROFILES`, unchanged since v0.1); any other key the
quota system counts (:func:`dynquota.policy.keys.classify_static`) is sized only when listed,
with the defaults of its family (:data:`dynquota.policy.units.FAMILY_DEFAULTS`) and a required
``maximum``. ``minimum``/``maximum`` are held as integers in the key's unit
(:mod:`dynquota.policy.units`: millicores, bytes, objects), given in a policy as JSON integers
for counted keys and as quantity strings (``"500m"``, ``"4Gi"``) for the others.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from typing import Final

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from dynquota.names import CONFIGMAPS, PODS, TRACKED_RESOURCES
from dynquota.policy.durations import format_duration, parse_duration
from dynquota.policy.keys import conflicting_aliases, refused_keys
from dynquota.policy.units import FAMILY_DEFAULTS, KeyUnit, default_minimum, unit_for
from dynquota.quantity import QuantityError, parse_quantity

__all__ = [
    "DEFAULT_PROFILES",
    "MAX_COUNT",
    "ResourceProfile",
    "bound_units",
    "fill_resources",
    "resource_order",
    "round_to_units",
]

_INT64_MAX: Final = 2**63 - 1
MAX_COUNT: Final = _INT64_MAX
"""The largest count a policy bound or a budget takes (9223372036854775807): the largest whole
number Kubernetes' CEL quantity library (``isInteger``) and a CRD's JSON integer hold."""

_STRICT = ConfigDict(
    frozen=True, extra="forbid", strict=True, validate_by_name=True, validate_by_alias=True
)


class ResourceProfile(BaseModel):
    """How one resource's hard limit follows its usage.

    Fields (CRD names in brackets): ``buffer_percent`` [bufferPercent] int 0..1000;
    ``minimum`` and ``maximum`` integers in the key's unit (objects, millicores, bytes:
    :mod:`dynquota.policy.units`), ``0 <= minimum <= maximum <= 2^63-1``;
    ``upscale_cooldown`` [upscaleCooldown] and ``downscale_cooldown`` [downscaleCooldown] in
    whole seconds, given as duration strings (``90s``, ``5m``, ``1h30m``) when validated from a
    policy; ``round_to`` [roundTo] the step a sized hard is rounded up to, in the key's unit
    (``None``: the key's default granularity, :attr:`dynquota.policy.units.KeyUnit.granularity`:
    100m for cpu, 1Mi for memory, 1Gi for storage, 1 for counts), ``1 <= round_to <=
    2^63-1``; ``minimum_headroom`` [minimumHeadroom] the least room a sized hard leaves above
    usage, in the key's unit (default 0: the buffer alone), ``0 <= minimum_headroom <= 2^63-1``
    — for a compute or storage key, the largest single pod or PVC the namespace creates, which
    a smaller room would refuse every time (docs/quota-keys.md). Build one from numbers with
    :meth:`of`.
    """

    model_config = _STRICT

    buffer_percent: int = Field(alias="bufferPercent")
    minimum: int
    maximum: int
    upscale_cooldown: int = Field(alias="upscaleCooldown")
    downscale_cooldown: int = Field(alias="downscaleCooldown")
    round_to: int | None = Field(default=None, alias="roundTo")
    minimum_headroom: int = Field(default=0, alias="minimumHeadroom")

    @field_validator("buffer_percent")
    @classmethod
    def _buffer_range(cls, value: int) -> int:
        if not 0 <= value <= 1000:
            raise ValueError(f"must be between 0 and 1000, not {value}")
        return value

    @field_validator("minimum", "maximum", "minimum_headroom")
    @classmethod
    def _count_range(cls, value: int) -> int:
        if not 0 <= value <= _INT64_MAX:
            raise ValueError(f"must be between 0 and {_INT64_MAX}, not {value}")
        return value

    @field_validator("round_to")
    @classmethod
    def _round_range(cls, value: int | None) -> int | None:
        if value is not None and not 1 <= value <= _INT64_MAX:
            raise ValueError(f"roundTo must be between 1 and {_INT64_MAX}, not {value}")
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
        round_to: int | None = None,
        minimum_headroom: int = 0,
    ) -> ResourceProfile:
        """A validated profile from numbers (cooldowns in whole seconds, ``round_to`` in the
        key's unit or ``None``, ``minimum_headroom`` in the key's unit).

        Raises ``pydantic.ValidationError`` like validation from a policy would.
        """
        fields: dict[str, object] = {
            "bufferPercent": buffer_percent,
            "minimum": minimum,
            "maximum": maximum,
            "upscaleCooldown": format_duration(upscale_cooldown),
            "downscaleCooldown": format_duration(downscale_cooldown),
        }
        if round_to is not None:
            fields["roundTo"] = round_to
        if minimum_headroom:
            fields["minimumHeadroom"] = minimum_headroom
        return cls.model_validate(fields)

    def sizing_key(self) -> str:
        """The fields that decide the target, as stored in the ``dynquota.io/profile.<resource>``
        annotation: ``bufferPercent=40,minimum=10,maximum=1000``, with ``,roundTo=250`` and
        ``,minimumHeadroom=1000`` only when the policy sets them (so profiles without them keep
        their recorded text). Cooldowns are not part of it: changing a cooldown is not a policy
        change that resizes at once."""
        key = f"bufferPercent={self.buffer_percent},minimum={self.minimum},maximum={self.maximum}"
        if self.round_to is not None:
            key += f",roundTo={self.round_to}"
        if self.minimum_headroom:
            key += f",minimumHeadroom={self.minimum_headroom}"
        return key

    def to_crd(self, key: str | None = None) -> dict[str, int | str]:
        """The profile as CRD JSON (camelCase keys, duration strings); with the quota ``key``
        of a quantity-valued key, ``minimum``/``maximum`` as canonical quantity text."""
        unit = None if key is None else unit_for(key)
        bounds: tuple[int | str, int | str] = (self.minimum, self.maximum)
        if unit is not None and not unit.counted:
            bounds = (unit.text(self.minimum), unit.text(self.maximum))
        crd: dict[str, int | str] = {
            "bufferPercent": self.buffer_percent,
            "minimum": bounds[0],
            "maximum": bounds[1],
            "upscaleCooldown": format_duration(self.upscale_cooldown),
            "downscaleCooldown": format_duration(self.downscale_cooldown),
        }
        if self.round_to is not None:
            crd["roundTo"] = (
                self.round_to if unit is None or unit.counted else unit.text(self.round_to)
            )
        if self.minimum_headroom:
            crd["minimumHeadroom"] = (
                self.minimum_headroom
                if unit is None or unit.counted
                else unit.text(self.minimum_headroom)
            )
        return crd


DEFAULT_PROFILES: Final[Mapping[str, ResourceProfile]] = {
    PODS: ResourceProfile.of(40, 10, 1000, 5 * 60, 3600),
    CONFIGMAPS: ResourceProfile.of(40, 50, 2000, 2 * 60, 6 * 3600),
}
"""Built-in profiles: pods 40%/10/1000/5m/1h; configmaps 40%/50/2000/2m/6h."""


def resource_order(keys: Iterable[str]) -> list[str]:
    """Display and decision order of quota keys: ``pods``, ``configmaps``, then the others
    sorted by name."""
    return list(_order(tuple(str(k) for k in keys)))


@functools.lru_cache(maxsize=1024)
def _order(listed: tuple[str, ...]) -> tuple[str, ...]:
    # (a decision orders the same few key sets several times: cached)
    return tuple(r for r in TRACKED_RESOURCES if r in listed) + tuple(
        sorted(k for k in listed if k not in TRACKED_RESOURCES)
    )


def bound_units(key: str, unit: KeyUnit, field: str, value: object) -> object:
    """A policy's ``minimum``/``maximum`` (or a budget's ``hard``) of ``key`` as units; a
    wrong type is passed on for the model's type check (counted keys) or refused here naming
    the key.

    A counted key (objects, extended resources, devices) takes a JSON integer or, as a
    ResourceQuota writes every count, a quantity string of a whole number (``"60"``, ``"1k"``,
    ``"2e3"``); other keys a quantity string or an integer in the base unit.

    Raises:
        ValueError: a malformed, negative or (for a counted key) fractional quantity, naming
            the key and the field.
    """
    if isinstance(value, bool):
        return value
    if unit.counted:
        # a JSON integer (the model checks the type and the range), or a count's quantity text
        return _whole_count(key, field, value) if isinstance(value, str) else value
    if isinstance(value, int):
        return unit.units(value) if value >= 0 else value
    if not isinstance(value, str):
        raise ValueError(f"{key}: {field} must be a quantity such as 500m or 4Gi, not {value!r}")
    try:
        quantity = parse_quantity(value)
    except QuantityError as exc:
        raise ValueError(f"{key}: {field}: {exc}") from exc
    if quantity.value < 0:
        raise ValueError(f"{key}: {field} must not be negative, not {value!r}")
    if unit.info.integer and quantity.value != quantity.value.to_integral_value():
        raise ValueError(f"{key}: {field} must be a whole number, not {value!r}")
    return unit.units(quantity)


def _whole_count(key: str, field: str, text: str) -> int:
    """A counted key's quantity string as an integer (``"60"`` -> 60, ``"1k"`` -> 1000,
    ``"1000m"`` -> 1, as a ResourceQuota reads it), at most :data:`MAX_COUNT`."""
    try:
        quantity = parse_quantity(text)
    except QuantityError as exc:
        raise ValueError(
            f'{key}: {field} must be a whole number such as 60 or "60": {exc}'
        ) from exc
    if quantity.value != quantity.value.to_integral_value():
        raise ValueError(f"{key}: {field} must be a whole number, not {text!r}")
    if quantity.value < 0:
        raise ValueError(f"{key}: {field} must not be negative, not {text!r}")
    if quantity.value > MAX_COUNT:
        raise ValueError(f"{key}: {field} must be at most {MAX_COUNT}, not {text!r}")
    return int(quantity.value)


def round_to_units(key: str, unit: KeyUnit, value: object) -> object:
    """A policy's ``roundTo`` of ``key`` as units: for a counted key a JSON integer (passed on
    for the model's type and range check), otherwise a quantity (or an integer in the key's
    base unit) that is a whole number of the key's units (``250m`` of cpu, ``64Mi``; not
    ``0.5m``) and above zero.

    Raises:
        ValueError: a malformed, negative, zero or fractional value, naming the key.
    """
    units = bound_units(key, unit, "roundTo", value)
    if unit.counted or isinstance(value, bool) or not isinstance(units, int):
        return units
    amount = parse_quantity(str(value)).value
    if units * unit.step != amount:
        whole = "millicores" if unit.step < 1 else "bytes"
        raise ValueError(f"{key}: roundTo must be a whole number of {whole}, not {value!r}")
    if units <= 0:
        raise ValueError(f"{key}: roundTo must be above 0, not {value!r}")
    return units


def _check_step(key: str, unit: KeyUnit, step: object, high: object) -> None:
    """Refuse a ``roundTo`` above a non-zero ``maximum`` (both in units): every target would
    round up to the maximum at once, most often a unit mistake (64Mi on requests.cpu).

    Raises:
        ValueError: naming the key, both values as quantity text.
    """
    if isinstance(step, int) and isinstance(high, int) and step > high > 0:
        raise ValueError(
            f"{key}: roundTo ({unit.text(step)}) must not exceed maximum "
            f"({unit.text(high)}): every hard would round up to the maximum"
        )


def _in_units(key: str, unit: KeyUnit, given: Mapping[str, object]) -> dict[str, object]:
    """A profile's fields with its bounds and step as units (:func:`bound_units`,
    :func:`round_to_units`); the other fields as given."""
    return {f: bound_units(key, unit, f, v)
            if f in ("minimum", "maximum", "minimumHeadroom")
            else round_to_units(key, unit, v) if f == "roundTo" else v
            for f, v in given.items()}  # fmt: skip


def fill_resources(value: object) -> object:
    """Validate and default ``spec.resources`` (a pydantic ``before`` validator's body).

    Returns the map with ``pods`` and ``configmaps`` always present (omitted fields from
    :data:`DEFAULT_PROFILES`) and every other listed key's profile defaulted from its family
    (:data:`~dynquota.policy.units.FAMILY_DEFAULTS`; ``minimum`` capped at ``maximum``), its
    bounds converted to units. A value of the wrong type is passed through for the model's
    type check.

    Raises:
        ValueError: a key the quota system does not count (the message names each key and
            why), an alias given with its long form (``cpu`` and ``requests.cpu``), a profile
            of a key other than ``pods``/``configmaps`` without ``maximum``, or a malformed
            quantity.
    """
    if value is None:
        value = {}
    if not isinstance(value, Mapping):
        return value  # reported by the dict type check
    refused = refused_keys(str(k) for k in value if k not in TRACKED_RESOURCES)
    if refused:
        noun = "key" if len(refused) == 1 else "keys"
        raise ValueError(
            f"resource {noun} not counted by the Kubernetes quota system: {'; '.join(refused)}"
        )
    pairs = conflicting_aliases(str(k) for k in value)
    if pairs:
        listed = ", ".join(f"{a!r} and {b!r}" for a, b in pairs)
        raise ValueError(f"{listed} name the same quota resource: give only one of them")
    merged: dict[str, object] = {}
    for resource in TRACKED_RESOURCES:
        given = value.get(resource, {})
        if not isinstance(given, Mapping):
            merged[resource] = given  # reported by the model type check
            continue
        unit = unit_for(resource)
        profile = {**DEFAULT_PROFILES[resource].to_crd(), **_in_units(resource, unit, given)}
        merged[resource] = profile
        _check_step(resource, unit_for(resource), profile.get("roundTo"), profile.get("maximum"))
    for key in sorted(str(k) for k in value if k not in TRACKED_RESOURCES):
        given = value[key]
        if not isinstance(given, Mapping):
            merged[key] = given
            continue
        unit = unit_for(key)
        body = _in_units(key, unit, given)
        if "maximum" not in body:
            raise ValueError(
                f"{key}: maximum is required (only pods and configmaps have a built-in maximum)"
            )
        defaults = FAMILY_DEFAULTS[unit.info.family]
        minimum: object = default_minimum(key)
        if isinstance(body["maximum"], int) and not isinstance(body["maximum"], bool):
            minimum = min(default_minimum(key), body["maximum"])
        low, high = body.get("minimum"), body["maximum"]
        if not unit.counted and isinstance(low, int) and isinstance(high, int) and low > high:
            raise ValueError(
                f"{key}: minimum ({unit.text(low)}) must be less than or equal to maximum "
                f"({unit.text(high)})"
            )
        _check_step(key, unit, body.get("roundTo"), high)
        merged[key] = {
            "bufferPercent": defaults.buffer_percent,
            "minimum": minimum,
            "upscaleCooldown": format_duration(defaults.upscale_cooldown),
            "downscaleCooldown": format_duration(defaults.downscale_cooldown),
            **body,
        }
    return merged
