from datetime import date

import pytest

from datesniff import parse_date


def test_iso_and_german():
    assert parse_date("2024-03-01") == date(2024, 3, 1)
    assert parse_date(" 01.03.2024 ") == date(2024, 3, 1)


def test_unknown():
    with pytest.raises(ValueError):
        parse_date("March 1st")
