"""Unit tests for dynquota.quantity: parsing, canonical text, comparisons, arithmetic."""

from __future__ import annotations

import decimal
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dynquota.quantity import (
    Format,
    Quantity,
    QuantityError,
    format_quantity,
    parse_quantity,
    quantity_from_int,
)

Ki = 1024
Mi = 1024**2
Gi = 1024**3
Pi = 1024**5
Ei = 1024**6

# (input, exact value, format after parsing, canonical text). The canonical texts and values
# were checked against apimachinery v0.37.2 ParseQuantity/String() (see test_quantity_upstream).
PARSE_TABLE: list[tuple[str, Decimal | int, Format, str]] = [
    ("0", 0, "DecimalSI", "0"),
    ("-0", 0, "DecimalSI", "0"),
    ("0Mi", 0, "BinarySI", "0"),
    ("0.0", 0, "DecimalSI", "0"),
    ("1", 1, "DecimalSI", "1"),
    ("+1", 1, "DecimalSI", "1"),
    ("007", 7, "DecimalSI", "7"),
    ("1000", 1000, "DecimalSI", "1k"),
    ("1k", 1000, "DecimalSI", "1k"),
    ("1500", 1500, "DecimalSI", "1500"),
    ("1000000", 10**6, "DecimalSI", "1M"),
    ("129000000", 129 * 10**6, "DecimalSI", "129M"),
    ("0.5", Decimal("0.5"), "DecimalSI", "500m"),
    (".5", Decimal("0.5"), "DecimalSI", "500m"),
    ("1.", 1, "DecimalSI", "1"),
    ("1.G", 10**9, "DecimalSI", "1G"),
    ("1.5", Decimal("1.5"), "DecimalSI", "1500m"),
    ("500m", Decimal("0.5"), "DecimalSI", "500m"),
    ("100m", Decimal("0.1"), "DecimalSI", "100m"),
    ("1000m", 1, "DecimalSI", "1"),
    ("5n", Decimal("5e-9"), "DecimalSI", "5n"),
    ("4u", Decimal("4e-6"), "DecimalSI", "4u"),
    ("3.001n", Decimal("4e-9"), "DecimalSI", "4n"),
    ("0.0000000001", Decimal("1e-9"), "DecimalSI", "1n"),
    ("0.00000012345", Decimal("124e-9"), "DecimalSI", "124n"),
    ("-0.00000012345", Decimal("-124e-9"), "DecimalSI", "-124n"),
    ("100.035k", 100035, "DecimalSI", "100035"),
    ("10.035M", 10035000, "DecimalSI", "10035k"),
    ("2.5P", 25 * 10**14, "DecimalSI", "2500T"),
    ("1E", 10**18, "DecimalSI", "1E"),
    ("12E", 12 * 10**18, "DecimalSI", "12E"),
    ("1000E", 10**21, "DecimalSI", "1000E"),
    ("1e3", 1000, "DecimalExponent", "1e3"),
    ("1E3", 1000, "DecimalExponent", "1e3"),
    ("1e+3", 1000, "DecimalExponent", "1e3"),
    ("129e6", 129 * 10**6, "DecimalExponent", "129e6"),
    ("1.3E+6", 1300000, "DecimalExponent", "1300e3"),
    ("1E-3", Decimal("0.001"), "DecimalExponent", "1e-3"),
    ("0.5e-1", Decimal("0.05"), "DecimalExponent", "50e-3"),
    ("1.1E-9", Decimal("2e-9"), "DecimalExponent", "2e-9"),
    ("1e0", 1, "DecimalExponent", "1"),
    ("1e-12", Decimal("1e-9"), "DecimalExponent", "1e-9"),
    ("1e21", 10**21, "DecimalExponent", "1e21"),
    ("1Ki", Ki, "BinarySI", "1Ki"),
    ("1024Ki", Mi, "BinarySI", "1Mi"),
    ("1025Ki", 1025 * Ki, "BinarySI", "1025Ki"),
    ("1.5Gi", 1536 * Mi, "BinarySI", "1536Mi"),
    ("1.5Ki", 1536, "BinarySI", "1536"),
    ("0.5Ki", 512, "BinarySI", "512"),
    ("-0.5Ki", -512, "BinarySI", "-512"),
    ("0.5Mi", 512 * Ki, "BinarySI", "512Ki"),
    ("100.035Ki", Decimal("102435.84"), "BinarySI", "102435840m"),
    ("1.0001Ki", Decimal("1024.1024"), "BinarySI", "1024102400u"),
    ("0.000000000001Ki", Decimal("2e-9"), "DecimalSI", "2n"),
    ("10Pi", 10 * Pi, "BinarySI", "10Pi"),
    ("3Ei", 3 * Ei, "BinarySI", "3Ei"),
    ("8Ei", 8 * Ei, "BinarySI", "8Ei"),
    ("1024Ei", 1024 * Ei, "BinarySI", "1024Ei"),
    ("-1Gi", -Gi, "BinarySI", "-1Gi"),
    ("-1.5", Decimal("-1.5"), "DecimalSI", "-1500m"),
    ("9223372036854775807", 2**63 - 1, "DecimalSI", "9223372036854775807"),
    ("1e-2147483648", Decimal("1e-9"), "DecimalExponent", "1e-9"),
]


@pytest.mark.parametrize(("text", "value", "fmt", "canonical"), PARSE_TABLE)
def test_parse_table(text: str, value: Decimal | int, fmt: Format, canonical: str) -> None:
    q = parse_quantity(text)
    assert q.value == Decimal(value)
    assert q.format == fmt
    assert str(q) == canonical
    # The canonical text parses back to the same value and the same text.
    again = parse_quantity(canonical)
    assert again == q
    assert str(again) == canonical


INVALID_TABLE: list[tuple[object, str]] = [
    ("", "invalid quantity '': empty string"),
    ("Mi", "invalid quantity 'Mi': no digits before the suffix"),
    ("k", "invalid quantity 'k': no digits before the suffix"),
    (".", "invalid quantity '.': no digits before the suffix"),
    ("-", "invalid quantity '-': no digits before the suffix"),
    (
        "10 Mi",
        "invalid quantity '10 Mi': expected a signed decimal number with an optional suffix "
        "(n, u, m, k, M, G, T, P, E, Ki, Mi, Gi, Ti, Pi, Ei, or e/E and an integer exponent), "
        "without spaces",
    ),
    (
        "1.2.3",
        "invalid quantity '1.2.3': expected a signed decimal number with an optional suffix "
        "(n, u, m, k, M, G, T, P, E, Ki, Mi, Gi, Ti, Pi, Ei, or e/E and an integer exponent), "
        "without spaces",
    ),
    (
        " 1",
        "invalid quantity ' 1': expected a signed decimal number with an optional suffix "
        "(n, u, m, k, M, G, T, P, E, Ki, Mi, Gi, Ti, Pi, Ei, or e/E and an integer exponent), "
        "without spaces",
    ),
    (
        "1\n",
        "invalid quantity '1\\n': expected a signed decimal number with an optional suffix "
        "(n, u, m, k, M, G, T, P, E, Ki, Mi, Gi, Ti, Pi, Ei, or e/E and an integer exponent), "
        "without spaces",
    ),
    (
        "1+1.0M",
        "invalid quantity '1+1.0M': expected a signed decimal number with an optional suffix "
        "(n, u, m, k, M, G, T, P, E, Ki, Mi, Gi, Ti, Pi, Ei, or e/E and an integer exponent), "
        "without spaces",
    ),
    (
        "1e",
        "invalid quantity '1e': unknown suffix 'e' (expected n, u, m, k, M, G, T, P, E, Ki, "
        "Mi, Gi, Ti, Pi, Ei, or e/E followed by an integer exponent; suffixes are case-sensitive)",
    ),
]
_SUFFIX_HELP = (
    " (expected n, u, m, k, M, G, T, P, E, Ki, Mi, Gi, Ti, Pi, Ei, or e/E followed by an "
    "integer exponent; suffixes are case-sensitive)"
)
INVALID_TABLE += [
    (f"1{s}", f"invalid quantity '1{s}': unknown suffix '{s}'{_SUFFIX_HELP}")
    for s in ("K", "mi", "i", "ki", "ee3", "Mi3", "e-", "mm")
]
INVALID_TABLE += [
    (
        "1KI",
        "invalid quantity '1KI': expected a signed decimal number with an optional suffix "
        "(n, u, m, k, M, G, T, P, E, Ki, Mi, Gi, Ti, Pi, Ei, or e/E and an integer exponent), "
        "without spaces",
    ),
    ("1e2147483648", "invalid quantity '1e2147483648': exponent 2147483648 out of range"),
    ("1e1000", "invalid quantity '1e1000': magnitude too large (must be below 1e1000)"),
    ("1000e997", "invalid quantity '1000e997': magnitude too large (must be below 1e1000)"),
    (
        "٣",
        "invalid quantity '٣': expected a signed decimal number with an optional suffix "
        "(n, u, m, k, M, G, T, P, E, Ki, Mi, Gi, Ti, Pi, Ei, or e/E and an integer exponent), "
        "without spaces",
    ),
    (10, "invalid quantity 10: expected a string"),
]


@pytest.mark.parametrize(("text", "message"), INVALID_TABLE)
def test_parse_invalid(text: str, message: str) -> None:
    with pytest.raises(QuantityError) as info:
        parse_quantity(text)
    assert str(info.value) == message
    assert isinstance(info.value, ValueError)


def test_largest_accepted_magnitude() -> None:
    q = parse_quantity("9" * 1000)
    assert q.ceil() == 10**1000 - 1
    assert str(q) == "9" * 1000


def test_examples_from_the_brief() -> None:
    assert parse_quantity("129e6") == 129000000
    assert parse_quantity("129e6") == parse_quantity("129M")
    assert parse_quantity("1e3") == parse_quantity("1k")
    assert str(parse_quantity("0.5")) == "500m"
    assert parse_quantity("500m").value == Decimal("0.5")  # half a byte of memory
    assert parse_quantity("10Pi").value == Decimal(11258999068426240)
    assert parse_quantity("100m").ceil() == 1


@pytest.mark.parametrize(
    ("text", "ceil"),
    [
        ("100m", 1),
        ("1", 1),
        ("0", 0),
        ("1001m", 2),
        ("1n", 1),
        ("-100m", -1),
        ("-8.25", -9),
        ("1.5Gi", 1610612736),
        ("999999999999999999999.000000001", 10**21),
    ],
)
def test_ceil(text: str, ceil: int) -> None:
    assert parse_quantity(text).ceil() == ceil


def test_numeric_equality_and_hash() -> None:
    a, b = parse_quantity("1k"), parse_quantity("1000")
    assert a == b
    assert hash(a) == hash(b)
    assert len({parse_quantity("1Ki"), parse_quantity("1024"), parse_quantity("1.024k")}) == 1
    assert parse_quantity("1Gi") == Gi
    assert parse_quantity("500m") == Decimal("0.5")
    assert hash(parse_quantity("10")) == hash(10)
    assert parse_quantity("1k") != parse_quantity("1Ki")
    assert parse_quantity("1") != "1"
    assert parse_quantity("1").__eq__("1") is NotImplemented


def test_ordering() -> None:
    values = [parse_quantity(t) for t in ("1Ki", "1k", "999", "1n", "-1", "0", "1e3")]
    ordered = sorted(values)
    assert [str(q) for q in ordered] == ["-1", "0", "1n", "999", "1k", "1e3", "1Ki"]
    assert parse_quantity("1k") <= parse_quantity("1e3")
    assert parse_quantity("1k") >= 1000
    assert parse_quantity("1001") > parse_quantity("1k")
    assert parse_quantity("999m") < 1
    with pytest.raises(TypeError):
        _ = parse_quantity("1") < "2"  # type: ignore[operator]


def test_arithmetic_is_exact_and_keeps_left_format() -> None:
    total = parse_quantity("1Gi") + parse_quantity("512Mi")
    assert total.value == 1536 * Mi
    assert total.format == "BinarySI"
    assert str(total) == "1536Mi"
    assert str(parse_quantity("1") - parse_quantity("1n")) == "999999999n"
    assert str(parse_quantity("1k") + parse_quantity("1Ki")) == "2024"
    big = parse_quantity("8Ei") + parse_quantity("1n")
    assert big.value == Decimal(8 * Ei) + Decimal("1e-9")
    assert str(big) == "9223372036854775808000000001n"
    # A zero left operand takes the right operand's format (upstream Quantity.Add/Sub).
    assert str(parse_quantity("0") + parse_quantity("1Gi")) == "1Gi"
    assert str(parse_quantity("0") - parse_quantity("1Gi")) == "-1Gi"
    assert str(-parse_quantity("1.5Gi")) == "-1536Mi"
    with pytest.raises(TypeError):
        _ = parse_quantity("1") + 1  # type: ignore[operator]


def test_construction_normalises_like_parse() -> None:
    assert Quantity(Decimal("0.0000000001")).value == Decimal("1e-9")
    assert Quantity(Decimal("-1.0000000001")).value == Decimal("-1.000000001")
    assert Quantity(Decimal("0.5"), "BinarySI").format == "DecimalSI"
    assert Quantity(5).value == Decimal(5)
    with pytest.raises(QuantityError, match=r"^invalid quantity 1\.5: value must be an int or a"):
        Quantity(1.5)  # type: ignore[arg-type]
    with pytest.raises(QuantityError, match=r"^invalid quantity format 'Binary'"):
        Quantity(Decimal(1), "Binary")  # type: ignore[arg-type]
    with pytest.raises(QuantityError, match=r"not a finite number"):
        Quantity(Decimal("NaN"))
    with pytest.raises(QuantityError, match=r"magnitude too large"):
        quantity_from_int(10**1000)


@pytest.mark.parametrize(
    ("value", "fmt", "text"),
    [
        (1000, "DecimalSI", "1k"),
        (1024, "DecimalSI", "1024"),
        (1024, "BinarySI", "1Ki"),
        (1023, "BinarySI", "1023"),
        (1536 * Mi, "BinarySI", "1536Mi"),
        (129000000, "DecimalExponent", "129e6"),
        (129000000, "DecimalSI", "129M"),
        (0, "BinarySI", "0"),
        (Decimal("0.1"), "DecimalSI", "100m"),
        (Decimal("0.1"), "BinarySI", "100m"),
        (Decimal("1.0000000001"), "DecimalSI", "1000000001n"),
        (Decimal("1e-3"), "DecimalExponent", "1e-3"),
        (-1000, "DecimalSI", "-1k"),
    ],
)
def test_format_quantity(value: Decimal | int, fmt: Format, text: str) -> None:
    assert format_quantity(value, fmt) == text


def test_quantity_from_int() -> None:
    q = quantity_from_int(14)
    assert q == 14
    assert q.format == "DecimalSI"
    assert str(quantity_from_int(2048, "BinarySI")) == "2Ki"
    with pytest.raises(QuantityError, match=r"^invalid quantity True: expected an int$"):
        quantity_from_int(True)


FORMATS: list[Format] = ["DecimalSI", "BinarySI", "DecimalExponent"]
nano_values = st.builds(
    lambda units: Decimal(units).scaleb(-9),
    st.integers(min_value=-(10**40), max_value=10**40),
)
whole_values = st.integers(min_value=-(2**70), max_value=2**70).map(Decimal)


@given(value=st.one_of(nano_values, whole_values), fmt=st.sampled_from(FORMATS))
def test_round_trip_parse_of_format(value: Decimal, fmt: Format) -> None:
    text = format_quantity(value, fmt)
    parsed = parse_quantity(text)
    assert parsed.value == value
    if fmt != "BinarySI" or text.endswith("i"):
        # A BinarySI value not a multiple of 1024 is written without suffix and so reads
        # back as DecimalSI (as upstream); every other text keeps its family.
        assert str(parsed) == text


@given(
    units=st.integers(min_value=-(10**30), max_value=10**30),
    scale=st.integers(min_value=-30, max_value=30),
    fmt=st.sampled_from(FORMATS),
)
def test_canonical_text_is_a_fixed_point(units: int, scale: int, fmt: Format) -> None:
    exact = Decimal(units).scaleb(scale)
    q = Quantity(exact, fmt)
    once = str(parse_quantity(str(q)))
    assert parse_quantity(once) == q
    assert str(parse_quantity(once)) == once
    # Rounding to nano only ever goes away from zero, by less than one nano.
    assert Decimal(0) <= abs(q.value) - abs(exact) < Decimal("1e-9")


@given(a=nano_values, b=nano_values)
def test_arithmetic_matches_decimal(a: Decimal, b: Decimal) -> None:
    qa, qb = Quantity(a), Quantity(b)
    with decimal.localcontext(prec=200) as exact:
        exact.traps[decimal.Inexact] = True
        assert (qa + qb).value == a + b
        assert (qa - qb).value == a - b
    assert (qa < qb) == (a < b)
    assert (qa == qb) == (a == b)
    assert hash(qa) == hash(Quantity(Decimal(a).scaleb(3).scaleb(-3)))
