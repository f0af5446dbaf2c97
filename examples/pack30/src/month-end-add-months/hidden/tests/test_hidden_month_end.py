from datetime import date

import pytest

from billdates import add_months, billing_dates, next_billing_date


@pytest.mark.parametrize(
    "day,months,expected",
    [
        (date(2024, 1, 31), 1, date(2024, 2, 29)),
        (date(2023, 1, 31), 1, date(2023, 2, 28)),
        (date(2023, 1, 29), 1, date(2023, 2, 28)),
        (date(2024, 3, 31), -1, date(2024, 2, 29)),
        (date(2024, 5, 31), 1, date(2024, 6, 30)),
        (date(2024, 8, 31), -6, date(2024, 2, 29)),
        (date(2024, 2, 29), 12, date(2025, 2, 28)),
        (date(2024, 12, 31), 2, date(2025, 2, 28)),
    ],
)
def test_add_months_clamps_to_month_end(day, months, expected):
    assert add_months(day, months) == expected


def test_schedule_returns_to_the_anchor_day():
    anchor = date(2024, 1, 31)
    assert billing_dates(anchor, 5) == [
        date(2024, 1, 31),
        date(2024, 2, 29),
        date(2024, 3, 31),
        date(2024, 4, 30),
        date(2024, 5, 31),
    ]


def test_next_billing_date_after_a_short_month():
    anchor = date(2024, 1, 31)
    assert next_billing_date(anchor, date(2024, 2, 15)) == date(2024, 2, 29)
    assert next_billing_date(anchor, date(2024, 2, 29)) == date(2024, 3, 31)
    assert next_billing_date(anchor, date(2024, 4, 1)) == date(2024, 4, 30)
