import pytest

from unitconv import IncompatibleUnits, convert


def test_length():
    assert convert(12, "in", "cm") == 30.48
    assert convert(1, "mi", "km") == 1.609344
    assert convert(3, "ft", "yd") == 1.0


def test_mass_and_volume():
    assert convert(16, "oz", "lb") == 1.0
    assert convert(1, "gal", "l") == 3.785411784


def test_incompatible_dimensions():
    with pytest.raises(IncompatibleUnits):
        convert(1, "kg", "m")


def test_unknown_unit():
    with pytest.raises(KeyError):
        convert(1, "furlong", "m")
