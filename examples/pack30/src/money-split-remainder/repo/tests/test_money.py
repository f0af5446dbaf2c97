from decimal import Decimal

import pytest

from ledgerkit import round_cents, split_amount


def test_round_cents_half_up():
    assert round_cents("2.675") == Decimal("2.68")
    assert round_cents(Decimal("-0.005")) == Decimal("-0.01")
    assert round_cents(7) == Decimal("7.00")


def test_float_refused():
    with pytest.raises(TypeError):
        round_cents(0.1)


def test_even_split():
    assert split_amount(Decimal("90.00"), 3) == [Decimal("30.00")] * 3


def test_single_part():
    assert split_amount("12.34", 1) == [Decimal("12.34")]


def test_parts_must_be_positive():
    with pytest.raises(ValueError):
        split_amount(Decimal("1.00"), 0)
