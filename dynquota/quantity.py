"""Exact Kubernetes resource quantities (Pure).

A port of the parsing and canonical formatting rules of apimachinery's ``resource.Quantity``
(kubernetes/kubernetes ``staging/src/k8s.io/apimachinery/pkg/api/resource/quantity.go``:
``ParseQuantity``, ``parseQuantityString``, ``Quantity.CanonicalizeBytes``/``String``;
``suffix.go``: ``suffixHandler.interpret``; ``amount.go``: ``AsCanonicalBytes``,
``AsCanonicalBase1024Bytes``). Values are held as :class:`decimal.Decimal`, never as floats.

Accepted text, as upstream::

    <quantity> ::= <sign>? <number> <suffix>
    <number>   ::= digits | digits "." | digits "." digits | "." digits
    <suffix>   ::= "" | n | u | m | k | M | G | T | P | E          (DecimalSI)
                 | Ki | Mi | Gi | Ti | Pi | Ei                     (BinarySI)
                 | ("e" | "E") <sign>? digits                      (DecimalExponent)

Suffixes are case-exact (``1K`` and ``1mi`` are errors). Like the apiserver, a value is rounded
*up* (away from zero) to nano precision (``3.001n`` is ``4n``), and a BinarySI value strictly
between -1 and 1 becomes DecimalSI.

Deliberate differences from upstream (see ``docs/sizing.md``):

* text without any digit (``Mi``, ``k``, ``.``, ``-``) is refused; upstream reads it as 0;
* BinarySI values above 2^63-1 are kept exact (upstream caps them at 2^63-1), and magnitudes
  of 10^1000 or more are refused (upstream truncates exponents to 32 bits);
* canonical text never loses value: DecimalSI beyond ``E`` keeps the ``E`` suffix with a larger
  mantissa (``1000E``; upstream prints ``1``), BinarySI beyond ``Ei`` keeps ``Ei``;
* formatting is always canonical (upstream echoes a few inputs verbatim, e.g. ``+1k``).
"""

from __future__ import annotations

import decimal
import re
from dataclasses import dataclass
from decimal import Decimal
from functools import lru_cache
from typing import Final, Literal, get_args

__all__ = [
    "Format",
    "Quantity",
    "QuantityError",
    "format_quantity",
    "parse_quantity",
    "quantity_from_int",
]

Format = Literal["DecimalSI", "BinarySI", "DecimalExponent"]
"""apimachinery's three quantity formats (the family of suffixes a value is written with)."""

_FORMATS: Final = frozenset(get_args(Format))

# Magnitudes at or above 10**_MAX_ADJUSTED_EXPONENT+1 are refused; they are far beyond any
# quota and would make exact integer conversion (ceil) arbitrarily expensive.
_MAX_ADJUSTED_EXPONENT: Final = 999
# Enough digits for any accepted value (1000 integer digits + 9 fractional) and a sum of two.
_EXACT: Final = decimal.Context(
    prec=4000,
    rounding=decimal.ROUND_UP,
    Emax=decimal.MAX_EMAX,
    Emin=decimal.MIN_EMIN,
    traps=[decimal.Inexact, decimal.InvalidOperation, decimal.DivisionByZero, decimal.Overflow],
)
_ROUNDING: Final = decimal.Context(
    prec=4000,
    rounding=decimal.ROUND_UP,
    Emax=decimal.MAX_EMAX,
    Emin=decimal.MIN_EMIN,
    traps=[decimal.InvalidOperation, decimal.Overflow],
)
_NANO: Final = Decimal("1e-9")

# Decimal SI suffix -> power of ten, and back.
_DECIMAL_SUFFIXES: Final[dict[str, int]] = {
    "n": -9,
    "u": -6,
    "m": -3,
    "": 0,
    "k": 3,
    "M": 6,
    "G": 9,
    "T": 12,
    "P": 15,
    "E": 18,
}
_DECIMAL_BY_EXPONENT: Final[dict[int, str]] = {e: s for s, e in _DECIMAL_SUFFIXES.items()}
# Binary SI suffix -> power of two; index k of _BINARY_BY_POWER is the suffix for 1024**k.
_BINARY_SUFFIXES: Final[dict[str, int]] = {
    "Ki": 10,
    "Mi": 20,
    "Gi": 30,
    "Ti": 40,
    "Pi": 50,
    "Ei": 60,
}
_BINARY_BY_POWER: Final = ("", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei")

# Same shape as upstream's scanner: sign, digits, optional fraction, then a run of suffix
# letters, an optional sign and digits. Whether the suffix means anything is checked after.
_SHAPE: Final = re.compile(
    r"(?P<sign>[+-]?)(?P<int>[0-9]*)(?:\.(?P<frac>[0-9]*))?(?P<suffix>[eEinumkKMGTP]*[+-]?[0-9]*)"
)
_EXPONENT: Final = re.compile(r"[+-]?[0-9]+")
_INT32_MIN: Final = -(2**31)
_INT32_MAX: Final = 2**31 - 1

_SHAPE_HELP: Final = (
    "expected a signed decimal number with an optional suffix "
    "(n, u, m, k, M, G, T, P, E, Ki, Mi, Gi, Ti, Pi, Ei, or e/E and an integer exponent), "
    "without spaces"
)


class QuantityError(ValueError):
    """A text is not a Kubernetes quantity, or a value cannot be one.

    The message names the input and why, e.g. ``invalid quantity '10 Mi': expected ...``.
    """


def _too_large(text: object) -> QuantityError:
    limit = f"1e{_MAX_ADJUSTED_EXPONENT + 1}"
    return QuantityError(f"invalid quantity {text!r}: magnitude too large (must be below {limit})")


def _normalize(value: Decimal, fmt: Format, text: object) -> tuple[Decimal, Format]:
    """Apply ParseQuantity's post-processing: nano round-up, BinarySI below 1 -> DecimalSI."""
    if not value.is_finite():
        raise QuantityError(f"invalid quantity {text!r}: not a finite number")
    if value.is_zero():
        return Decimal(0), fmt
    if value.adjusted() > _MAX_ADJUSTED_EXPONENT:
        raise _too_large(text)
    exponent = value.as_tuple().exponent
    assert isinstance(exponent, int)  # finite
    if exponent < -9:
        if value.adjusted() < -9:
            # Below one nano: the smallest representable non-zero value, sign kept.
            value = _NANO.copy_sign(value)
        else:
            value = value.quantize(_NANO, rounding=decimal.ROUND_UP, context=_ROUNDING)
    if fmt == "BinarySI" and abs(value) < 1:
        fmt = "DecimalSI"
    return value, fmt


@dataclass(frozen=True, eq=False)
class Quantity:
    """An exact Kubernetes quantity: a :class:`~decimal.Decimal` value and its format.

    ``value`` is normalised on construction like upstream ``ParseQuantity`` does: rounded up
    (away from zero) to a multiple of 1e-9, and a BinarySI value with magnitude below 1 becomes
    DecimalSI. Comparisons (``==``, ``<``, ...) and ``hash`` are numeric (``1k == 1000``), also
    against ``int`` and ``Decimal``. ``+``/``-`` are exact; the result keeps the left operand's
    format, unless the left operand is zero, then the right one's (upstream ``Quantity.Add``).

    Raises:
        QuantityError: ``value`` is a float, not finite, or its magnitude is 1e1000 or more;
            or ``format`` is not one of the three formats.
    """

    value: Decimal
    format: Format = "DecimalSI"

    def __post_init__(self) -> None:
        raw: object = self.value
        if isinstance(raw, bool) or not isinstance(raw, (int, Decimal)):
            raise QuantityError(f"invalid quantity {raw!r}: value must be an int or a Decimal")
        if self.format not in _FORMATS:
            raise QuantityError(
                f"invalid quantity format {self.format!r}: expected one of "
                "'DecimalSI', 'BinarySI', 'DecimalExponent'"
            )
        value, fmt = _normalize(Decimal(raw), self.format, raw)
        object.__setattr__(self, "value", value)
        object.__setattr__(self, "format", fmt)

    # -- comparisons -------------------------------------------------------------------------

    @staticmethod
    def _other(other: object) -> Decimal | None:
        if isinstance(other, Quantity):
            return other.value
        if isinstance(other, Decimal):
            return other
        if isinstance(other, int) and not isinstance(other, bool):
            return Decimal(other)
        return None

    def __eq__(self, other: object) -> bool:
        value = self._other(other)
        if value is None:
            return NotImplemented
        return self.value == value

    def __hash__(self) -> int:
        return hash(self.value)

    def __lt__(self, other: Quantity | Decimal | int) -> bool:
        value = self._other(other)
        if value is None:
            return NotImplemented
        return self.value < value

    def __le__(self, other: Quantity | Decimal | int) -> bool:
        value = self._other(other)
        if value is None:
            return NotImplemented
        return self.value <= value

    def __gt__(self, other: Quantity | Decimal | int) -> bool:
        value = self._other(other)
        if value is None:
            return NotImplemented
        return self.value > value

    def __ge__(self, other: Quantity | Decimal | int) -> bool:
        value = self._other(other)
        if value is None:
            return NotImplemented
        return self.value >= value

    # -- arithmetic --------------------------------------------------------------------------

    def _result_format(self, other: Quantity) -> Format:
        return other.format if self.value.is_zero() else self.format

    def __add__(self, other: Quantity) -> Quantity:
        if not isinstance(other, Quantity):
            return NotImplemented
        return Quantity(_EXACT.add(self.value, other.value), self._result_format(other))

    def __sub__(self, other: Quantity) -> Quantity:
        if not isinstance(other, Quantity):
            return NotImplemented
        return Quantity(_EXACT.subtract(self.value, other.value), self._result_format(other))

    def __neg__(self) -> Quantity:
        return Quantity(-self.value, self.format)

    # -- conversions -------------------------------------------------------------------------

    def is_zero(self) -> bool:
        """True if the value is numerically zero."""
        return self.value.is_zero()

    def ceil(self) -> int:
        """The value rounded up to a whole unit, away from zero, like upstream ``Quantity.Value()``.

        ``100m`` -> 1, ``1`` -> 1, ``-100m`` -> -1. Exact for any size (upstream overflows int64).
        """
        return int(self.value.to_integral_value(rounding=decimal.ROUND_UP, context=_ROUNDING))

    def __str__(self) -> str:
        """The canonical text, like upstream ``Quantity.String()`` (``CanonicalizeBytes``).

        Same suffix family as the format; the largest suffix that keeps the mantissa an
        integer; no fraction. ``1000`` -> ``1k``, ``0.5`` -> ``500m``, ``1.5Gi`` -> ``1536Mi``,
        ``129e6`` -> ``129e6`` (DecimalExponent keeps exponent notation), zero -> ``0``.
        A BinarySI value below 1024 in magnitude, or not a whole number, is written DecimalSI.
        """
        value = self.value
        if value.is_zero():
            return "0"
        fmt = self.format
        if fmt == "BinarySI":
            if abs(value) < 1024 or value != value.to_integral_value(context=_ROUNDING):
                fmt = "DecimalSI"
            else:
                mantissa = int(value)
                power = 0
                while power < len(_BINARY_BY_POWER) - 1 and mantissa % 1024 == 0:
                    mantissa //= 1024
                    power += 1
                return f"{mantissa}{_BINARY_BY_POWER[power]}"
        sign, digits, exponent = value.as_tuple()
        assert isinstance(exponent, int)  # finite
        text = "".join(map(str, digits)).rstrip("0")
        exponent += len(digits) - len(text)
        shift = exponent % 3
        if fmt == "DecimalSI" and exponent - shift > 18:
            shift = exponent - 18
        text += "0" * shift
        exponent -= shift
        if fmt == "DecimalSI":
            suffix = _DECIMAL_BY_EXPONENT[exponent]
        else:
            suffix = "" if exponent == 0 else f"e{exponent}"
        return f"{'-' if sign else ''}{text}{suffix}"


def _interpret_suffix(text: str, suffix: str) -> tuple[int, int, Format]:
    """(base, exponent, format) of a suffix, like upstream ``suffixHandler.interpret``."""
    if suffix in _DECIMAL_SUFFIXES:
        return 10, _DECIMAL_SUFFIXES[suffix], "DecimalSI"
    if suffix in _BINARY_SUFFIXES:
        return 2, _BINARY_SUFFIXES[suffix], "BinarySI"
    if len(suffix) > 1 and suffix[0] in "eE" and _EXPONENT.fullmatch(suffix[1:]):
        exponent = int(suffix[1:])
        if not _INT32_MIN <= exponent <= _INT32_MAX:
            raise QuantityError(f"invalid quantity {text!r}: exponent {suffix[1:]} out of range")
        return 10, exponent, "DecimalExponent"
    raise QuantityError(
        f"invalid quantity {text!r}: unknown suffix {suffix!r} (expected n, u, m, k, M, G, T, P, "
        "E, Ki, Mi, Gi, Ti, Pi, Ei, or e/E followed by an integer exponent; suffixes are "
        "case-sensitive)"
    )


def parse_quantity(text: str) -> Quantity:
    """Parse a Kubernetes quantity (``"10"``, ``"500m"``, ``"1.5Gi"``, ``"129e6"``), exactly.

    Port of upstream ``resource.ParseQuantity`` (apimachinery ``pkg/api/resource/quantity.go``);
    see the module docstring for the grammar and the deliberate differences.

    Raises:
        QuantityError: the text is empty, has no digits, spaces or other stray characters, an
            unknown suffix, or a magnitude of 1e1000 or more. The message names the input.
    """
    if not isinstance(text, str):
        raise QuantityError(f"invalid quantity {text!r}: expected a string")
    return _parse(text)


@lru_cache(maxsize=4096)
def _parse(text: str) -> Quantity:
    """:func:`parse_quantity` of a string, memoised: a reconcile reads the same few texts of
    ``spec.hard``/``status.used`` again and again (a profile of 2,000 reconciles spent a
    fifth of their CPU parsing them); a :class:`Quantity` is immutable, so sharing is safe."""
    if not text:
        raise QuantityError("invalid quantity '': empty string")
    shape = _SHAPE.fullmatch(text)
    if shape is None:
        raise QuantityError(f"invalid quantity {text!r}: {_SHAPE_HELP}")
    integer = shape["int"]
    fraction = shape["frac"] or ""
    if not integer and not fraction:
        raise QuantityError(f"invalid quantity {text!r}: no digits before the suffix")
    base, exponent, fmt = _interpret_suffix(text, shape["suffix"])
    digits = tuple(int(c) for c in (integer + fraction).lstrip("0") or "0")
    sign = 1 if shape["sign"] == "-" else 0
    if base == 10:
        value = Decimal((sign, digits, exponent - len(fraction)))
    else:
        value = _EXACT.multiply(Decimal((sign, digits, -len(fraction))), Decimal(2**exponent))
    return Quantity(*_normalize(value, fmt, text))


def quantity_from_int(n: int, fmt: Format = "DecimalSI") -> Quantity:
    """A Quantity holding the whole number ``n`` (a count, bytes, ...) in format ``fmt``.

    Raises:
        QuantityError: ``n`` is not an int, or its magnitude is 1e1000 or more.
    """
    if isinstance(n, bool) or not isinstance(n, int):
        raise QuantityError(f"invalid quantity {n!r}: expected an int")
    return Quantity(Decimal(n), fmt)


def format_quantity(value: Decimal | int, fmt: Format = "DecimalSI") -> str:
    """Canonical text of ``value`` in format ``fmt``, like upstream ``Quantity.String()``.

    ``value`` is first rounded up to nano precision as :class:`Quantity` does.

    Raises:
        QuantityError: ``value`` is a float or not finite, or its magnitude is 1e1000 or more.
    """
    if isinstance(value, bool) or not isinstance(value, (int, Decimal)):
        raise QuantityError(f"invalid quantity {value!r}: value must be an int or a Decimal")
    return str(Quantity(Decimal(value), fmt))
