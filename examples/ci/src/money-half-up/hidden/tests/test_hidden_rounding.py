from decimal import Decimal

import pytest

from moneyfmt import format_money


@pytest.mark.parametrize(
    "amount,expected",
    [
        (Decimal("0.125"), "$0.13"),
        (Decimal("0.005"), "$0.01"),
        (Decimal("1.005"), "$1.01"),
        (Decimal("2.675"), "$2.68"),
        (Decimal("2.665"), "$2.67"),
        ("1.015", "$1.02"),
        (Decimal("0.004"), "$0.00"),
    ],
)
def test_half_up_rounding(amount, expected):
    assert format_money(amount, "USD") == expected


def test_half_up_zero_and_three_decimals():
    assert format_money(Decimal("2.5"), "JPY") == "¥3"
    assert format_money(Decimal("1234.5"), "JPY") == "¥1,235"
    assert format_money(Decimal("0.0005"), "KWD") == "KD 0.001"


def test_negative_amounts_put_sign_before_symbol():
    assert format_money(Decimal("-5"), "USD") == "-$5.00"
    assert format_money(Decimal("-1234.5"), "USD") == "-$1,234.50"
    assert format_money(Decimal("-1234.565"), "EUR", thousands=".", decimal_point=",") == "-€1.234,57"
    assert format_money(-980, "JPY") == "-¥980"


def test_negative_rounding_is_symmetric():
    assert format_money(Decimal("-0.125"), "USD") == "-$0.13"


def test_negative_amount_that_rounds_to_zero_has_no_sign():
    assert format_money(Decimal("-0.004"), "USD") == "$0.00"


def test_large_amounts_keep_every_digit():
    assert format_money(Decimal("12345678901234567.89"), "USD") == "$12,345,678,901,234,567.89"


def test_existing_behaviour_kept():
    assert format_money(Decimal("1234.5"), "EUR", thousands=".", decimal_point=",") == "€1.234,50"
    assert format_money("12.3456", "KWD") == "KD 12.346"
