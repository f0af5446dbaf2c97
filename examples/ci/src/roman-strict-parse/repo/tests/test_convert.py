import pytest

from romanum import from_roman, is_roman, to_roman


@pytest.mark.parametrize(
    "number,numeral",
    [(1, "I"), (4, "IV"), (9, "IX"), (14, "XIV"), (40, "XL"), (90, "XC"),
     (400, "CD"), (1994, "MCMXCIV"), (2024, "MMXXIV"), (3999, "MMMCMXCIX")],
)
def test_round_trip(number, numeral):
    assert to_roman(number) == numeral
    assert from_roman(numeral) == number


def test_case_and_whitespace():
    assert from_roman("  mmxxiv\n") == 2024


def test_to_roman_range():
    with pytest.raises(ValueError):
        to_roman(0)
    with pytest.raises(ValueError):
        to_roman(4000)
    with pytest.raises(TypeError):
        to_roman(3.0)


def test_invalid_characters():
    with pytest.raises(ValueError):
        from_roman("XIZ")
    assert not is_roman("")
    assert is_roman("XLII")
