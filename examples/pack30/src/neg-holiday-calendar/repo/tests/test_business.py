from datetime import date

from workdays import add_business_days, is_business_day


def test_weekend_skipped():
    assert add_business_days(date(2026, 3, 6), 1) == date(2026, 3, 9)


def test_christmas_skipped():
    assert add_business_days(date(2026, 12, 23), 2) == date(2026, 12, 28)


def test_holiday_is_not_a_business_day():
    assert not is_business_day(date(2026, 1, 6))
    assert is_business_day(date(2026, 1, 7))
