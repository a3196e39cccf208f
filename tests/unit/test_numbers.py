"""Parsing of displayed numbers."""

import pytest

from toolkit.method.number_parse import parse_int, parse_number


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("17.7K", 17700.0),
        ("8,828.0", 8828.0),
        ("15K", 15000.0),
        ("1,036 ms", 1036.0),
        ("29.9 s", 29.9),
        ("—", None),
        ("24.3", 24.3),
        ("0", 0.0),
        ("143.1K", 143100.0),
        ("4,096 tokens", 4096.0),
        ("739,238", 739238.0),
        (" 462 ms ", 462.0),
        ("1234", 1234.0),
    ],
)
def test_parse_number(text: str, expected: float | None) -> None:
    assert parse_number(text) == expected


@pytest.mark.parametrize(
    ("text", "unit", "expected"),
    [
        ("1,036 ms", "ms", 1036.0),
        ("29.9 s", "s", 29.9),
        ("—", "ms", None),
        ("4,096 tokens", "tokens", 4096.0),
    ],
)
def test_parse_number_with_unit(text: str, unit: str, expected: float | None) -> None:
    assert parse_number(text, unit) == expected


@pytest.mark.parametrize(("text", "unit"), [("1,036", "ms"), ("29.9 s", "ms"), ("462 ms", "s")])
def test_parse_number_wrong_unit(text: str, unit: str) -> None:
    with pytest.raises(ValueError, match=f"not a number in {unit}"):
        parse_number(text, unit)


@pytest.mark.parametrize("text", ["", "abc", "1,03", "12,34.5", "1.2.3", "-5", "17.7M", "5 km", "K", "—1"])
def test_parse_number_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="is not a displayed number"):
        parse_number(text)


@pytest.mark.parametrize(("text", "expected"), [("1,434", 1434), ("0", 0), ("—", None), ("15K", 15000)])
def test_parse_int(text: str, expected: int | None) -> None:
    assert parse_int(text) == expected


def test_parse_int_rejects_fraction() -> None:
    with pytest.raises(ValueError, match="not a whole number"):
        parse_int("24.3")
