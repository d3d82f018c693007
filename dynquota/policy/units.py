"""Per-key integer units: how a quota key's quantities become the integers sizing works on (Pure).

Sizing (:mod:`dynquota.policy.decide`) is integer arithmetic. Object counts are integers
already; for the other keys every quantity is converted to a whole number of the key's
smallest *unit* (:attr:`KeyUnit.step`): millicores for CPU keys, bytes for memory, storage,
ephemeral storage and hugepages, one for counts, extended resources and devices. A quantity
that is not a whole number of units (``1.5m`` of CPU) is rounded up. The sized hard limit is
rounded up to the key's granularity (:attr:`KeyUnit.granularity`, from
:mod:`dynquota.policy.keys`) and written as canonical quantity text
(:meth:`KeyUnit.text`): ``1500m``, ``2``, ``1536Mi``. Canonical text is what the apiserver stores,
so it never re-writes it and the next comparison is equal (and comparison is numeric anyway).

Default profiles per key family (``docs/configuration.md``) live here too: they are numbers in
those units.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from functools import lru_cache
from typing import Final

from dynquota.names import CONFIGMAPS, PODS
from dynquota.policy.keys import Family, KeyInfo, QuotaKeyError, classify
from dynquota.quantity import Format, Quantity, QuantityError, format_quantity, parse_quantity

__all__ = [
    "FAMILY_DEFAULTS",
    "FamilyDefaults",
    "KeyUnit",
    "default_minimum",
    "unit_for",
]

_MILLI: Final = Decimal("0.001")
_BYTE: Final = Decimal(1)
_ONE: Final = Decimal(1)


@dataclass(frozen=True)
class KeyUnit:
    """The integer unit of one quota key.

    Attributes:
        key: the quota key.
        info: its :class:`~dynquota.policy.keys.KeyInfo`.
        step: the value of one unit in the key's base unit (``0.001`` cores, ``1`` byte, ``1``
            object).
        fmt: the quantity format written (``BinarySI`` for byte keys, else ``DecimalSI``).
        granularity: the default step a sized hard is rounded up to, in units (``100`` for
            ``requests.cpu``, 100m; ``1048576`` for memory, 1Mi; ``1`` for counts).
    """

    key: str
    info: KeyInfo
    step: Decimal
    fmt: Format
    granularity: int

    @property
    def counted(self) -> bool:
        """Whether values are plain whole numbers (object counts, extended resources, devices):
        a policy or budget gives them as JSON integers or, as a ResourceQuota writes them, as
        quantity strings of a whole number (``"60"``, ``"1k"``)."""
        return self.step == _ONE and self.fmt == "DecimalSI"

    @property
    def tally(self) -> bool:
        """Whether usage comes from dynquota's own tally (``pods``, ``configmaps``)."""
        return self.info.source == "tally"

    def units(self, value: Quantity | int) -> int:
        """``value`` (a quantity, or an int in the key's base unit) as whole units, rounded up.

        ``requests.cpu``: ``500m`` -> 500, ``2`` -> 2000, ``1n`` -> 1."""
        amount = value.value if isinstance(value, Quantity) else Decimal(value)
        return _whole_units(amount, self.step)

    def parse(self, text: str) -> int:
        """Quantity text as whole units (rounded up).

        Raises:
            QuantityError: not a quantity, or negative.
        """
        units = self.units(parse_quantity(text))
        if units < 0:
            raise QuantityError(f"invalid quantity {text!r}: must not be negative")
        return units

    def text(self, units: int) -> str:
        """Canonical quantity text of ``units``: ``1500`` (cpu) -> ``1500m``, ``2000`` -> ``2``,
        ``1610612736`` (memory) -> ``1536Mi``, ``7`` (count) -> ``7``."""
        if self.counted:
            return str(units)  # as pods/configmaps always were (the apiserver stores 1k for 1000)
        # re-parsed: the text the apiserver stores for what we send (10^9 bytes is ``1G``)
        return str(parse_quantity(format_quantity(Decimal(units) * self.step, self.fmt)))

    def base(self, units: int) -> float:
        """``units`` in the key's base unit (cores, bytes, objects), for metrics only."""
        return float(Decimal(units) * self.step)

    def round_up(self, units: int) -> int:
        """``units`` rounded up to a multiple of :attr:`granularity`."""
        g = self.granularity
        return -(-units // g) * g


@lru_cache(maxsize=4096)
def unit_for(key: str) -> KeyUnit:
    """The :class:`KeyUnit` of a quota key (cached).

    Raises:
        QuotaKeyError: the key is not one the quota system counts
            (:func:`dynquota.policy.keys.classify`).
    """
    info = classify(key)
    fmt: Format
    if info.family == "compute" and info.canonical.endswith(".cpu"):
        step, fmt = _MILLI, "DecimalSI"
    elif info.family in ("compute", "ephemeral-storage", "hugepages", "storage"):
        step, fmt = _BYTE, "BinarySI"
    else:
        step, fmt = _ONE, "DecimalSI"
    granularity = max(1, Quantity(info.granularity / step).ceil())
    if info.family == "storage" and info.integer:
        fmt = "BinarySI"  # <class>.storageclass.storage.k8s.io/requests.storage: whole bytes
    return KeyUnit(key, info, step, fmt, granularity)


@dataclass(frozen=True)
class FamilyDefaults:
    """Defaults of a profile for a key of one family (everything but ``pods`` and
    ``configmaps``, whose defaults are unchanged): ``buffer_percent``; ``minimum`` as quantity
    text (capped at the policy's ``maximum``, which is required); the cooldowns in seconds."""

    buffer_percent: int
    minimum: str
    upscale_cooldown: int
    downscale_cooldown: int


FAMILY_DEFAULTS: Final[dict[Family, FamilyDefaults]] = {
    "object-count": FamilyDefaults(20, "10", 300, 3600),
    "compute": FamilyDefaults(20, "1", 300, 3600),  # 1 core; 1 byte is absurd: see below
    "ephemeral-storage": FamilyDefaults(20, "1Gi", 300, 3600),
    "hugepages": FamilyDefaults(20, "1Gi", 300, 3600),
    "storage": FamilyDefaults(20, "10Gi", 300, 3600),
    "extended": FamilyDefaults(20, "1", 300, 3600),
    "device": FamilyDefaults(20, "1", 300, 3600),
}
"""Per family: bufferPercent 20, upscaleCooldown 5m, downscaleCooldown 1h (the pods defaults),
minimum 10 objects / 1 core (cpu) or 1Gi (memory) / 1Gi ephemeral / 1Gi hugepages / 10Gi
storage / 1 extended or device, capped at the profile's maximum."""

_MEMORY_MINIMUM: Final = "1Gi"


def default_minimum(key: str) -> int:
    """The default ``minimum`` of ``key`` in units (before capping at ``maximum``).

    Raises:
        QuotaKeyError: the key is not counted.
    """
    unit = unit_for(key)
    if key in (PODS, CONFIGMAPS):
        raise QuotaKeyError(key, "has built-in defaults (DEFAULT_PROFILES)")
    text = FAMILY_DEFAULTS[unit.info.family].minimum
    if unit.info.family == "compute" and not unit.info.canonical.endswith(".cpu"):
        text = _MEMORY_MINIMUM
    return unit.parse(text)


@lru_cache(maxsize=4096)
def _whole_units(amount: Decimal, step: Decimal) -> int:
    """``amount / step`` normalised as a quantity (nano round-up) and rounded up; memoised:
    every reconcile converts the same few values (a profile: a tenth of its CPU here)."""
    return Quantity(amount / step).ceil()
