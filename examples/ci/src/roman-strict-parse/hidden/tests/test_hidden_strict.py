import pytest

from romanum import from_roman, is_roman, to_roman

NON_CANONICAL = [
    "IIII", "VV", "XXXX", "LL", "DD", "MMMM", "IC", "IL", "VX", "XM",
    "IIV", "IXI", "XCX", "CMC", "IVI", "VIV", "MCMC",
]


@pytest.mark.parametrize("numeral", NON_CANONICAL)
def test_non_canonical_numerals_are_rejected(numeral):
    with pytest.raises(ValueError):
        from_roman(numeral)
    assert is_roman(numeral) is False


@pytest.mark.parametrize("numeral", ["iiii", "  ic "])
def test_rejection_is_case_insensitive(numeral):
    with pytest.raises(ValueError):
        from_roman(numeral)


def test_every_canonical_numeral_still_parses():
    for number in range(1, 4000):
        assert from_roman(to_roman(number)) == number
        assert from_roman(to_roman(number).lower()) == number


def test_invalid_character_still_rejected():
    with pytest.raises(ValueError):
        from_roman("X1")
