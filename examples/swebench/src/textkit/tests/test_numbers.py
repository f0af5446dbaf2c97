import pytest

from textkit.numbers import ordinal, parse_int


def test_ordinals_basic():
    assert [ordinal(n) for n in (1, 2, 3, 4)] == ["1st", "2nd", "3rd", "4th"]


@pytest.mark.parametrize("n", [11, 12, 13])
def test_teens(n):
    assert ordinal(n) == f"{n}th"


def test_twenties():
    assert ordinal(21) == "21st" and ordinal(22) == "22nd"


def test_parse_int():
    assert parse_int("12,345") == 12345
