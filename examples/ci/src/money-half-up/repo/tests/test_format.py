from decimal import Decimal

import pytest

from moneyfmt import format_money, get_currency


def test_usd_grouping():
    assert format_money(Decimal("1234.5"), "USD") == "$1,234.50"
    assert format_money(Decimal("1234567.891"), "USD") == "$1,234,567.89"


def test_custom_separators():
    assert format_money(Decimal("1234.5"), "EUR", thousands=".", decimal_point=",") == "€1.234,50"


def test_zero_decimal_currency():
    assert format_money(980, "JPY") == "¥980"


def test_three_decimal_currency():
    assert format_money("12.3456", "KWD") == "KD 12.346"


def test_unknown_currency():
    with pytest.raises(ValueError):
        format_money(1, "XYZ")
    assert get_currency("usd").symbol == "$"
