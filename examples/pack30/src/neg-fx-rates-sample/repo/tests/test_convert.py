from decimal import Decimal

import pytest

from fxconv import convert


def test_convert():
    assert convert(Decimal("100"), "EUR", "USD") == Decimal("108.00")
    assert convert(Decimal("108"), "USD", "EUR") == Decimal("100.00")


def test_custom_rates():
    assert convert(Decimal("10"), "EUR", "XYZ", {"EUR": Decimal(1), "XYZ": Decimal(3)}) == Decimal("30.00")


def test_unknown_currency():
    with pytest.raises(ValueError):
        convert(Decimal("1"), "EUR", "JPY")
