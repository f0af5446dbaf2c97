from datetime import date

import pytest

from weeknum import parse_label, week_label, week_start, weeks_between, weeks_in_year


def test_label_mid_year():
    assert week_label(date(2024, 2, 14)) == "2024-W07"


def test_week_start_when_year_starts_on_monday():
    assert week_start(2024, 7) == date(2024, 2, 12)
    assert week_start(2024, 1) == date(2024, 1, 1)


def test_weeks_in_year():
    assert weeks_in_year(2020) == 53
    assert weeks_in_year(2023) == 52


def test_parse_label():
    assert parse_label("2024-W07") == (2024, 7)
    with pytest.raises(ValueError):
        parse_label("2024-7")


def test_week_out_of_range():
    with pytest.raises(ValueError):
        week_start(2023, 53)


def test_weeks_between():
    assert weeks_between(date(2024, 2, 14), date(2024, 2, 27)) == ["2024-W07", "2024-W08", "2024-W09"]
