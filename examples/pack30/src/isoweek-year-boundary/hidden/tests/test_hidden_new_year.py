from datetime import date, timedelta

import pytest

from weeknum import parse_label, week_label, week_start, weeks_between


@pytest.mark.parametrize(
    "day,label",
    [
        (date(2024, 12, 30), "2025-W01"),
        (date(2021, 1, 1), "2020-W53"),
        (date(2021, 1, 3), "2020-W53"),
        (date(2021, 1, 4), "2021-W01"),
        (date(2027, 1, 1), "2026-W53"),
        (date(2019, 12, 30), "2020-W01"),
        (date(2022, 1, 2), "2021-W52"),
    ],
)
def test_label_uses_the_iso_year(day, label):
    assert week_label(day) == label


@pytest.mark.parametrize(
    "year,week,monday",
    [
        (2021, 1, date(2021, 1, 4)),
        (2021, 52, date(2021, 12, 27)),
        (2020, 53, date(2020, 12, 28)),
        (2016, 1, date(2016, 1, 4)),
        (2027, 1, date(2027, 1, 4)),
        (2026, 53, date(2026, 12, 28)),
        (2025, 1, date(2024, 12, 30)),
    ],
)
def test_week_start_every_kind_of_year(year, week, monday):
    assert week_start(year, week) == monday


def test_round_trip_every_day():
    day = date(2015, 12, 20)
    while day < date(2028, 1, 10):
        monday = week_start(*parse_label(week_label(day)))
        assert monday.weekday() == 0, day
        assert 0 <= (day - monday).days < 7, day
        day += timedelta(days=1)


def test_weeks_between_across_new_year():
    assert weeks_between(date(2020, 12, 24), date(2021, 1, 12)) == [
        "2020-W52",
        "2020-W53",
        "2021-W01",
        "2021-W02",
    ]
