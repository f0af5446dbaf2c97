from decimal import Decimal

import pytest

from invoicetax import compute_vat


def test_standard_and_reduced():
    assert compute_vat(Decimal("100.00"), "DE") == Decimal("19.00")
    assert compute_vat(Decimal("100.00"), "fr", "reduced") == Decimal("5.50")


def test_rounding():
    assert compute_vat(Decimal("0.05"), "NL", "reduced") == Decimal("0.00")
    assert compute_vat(Decimal("0.06"), "NL", "reduced") == Decimal("0.01")


def test_unknown_rate():
    with pytest.raises(ValueError):
        compute_vat(Decimal("1"), "DE", "super_reduced")
