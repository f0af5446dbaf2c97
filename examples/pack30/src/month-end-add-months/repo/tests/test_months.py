from datetime import date

from billdates import add_months, billing_dates, days_in_month, month_end, next_billing_date


def test_add_months_simple():
    assert add_months(date(2024, 1, 15), 1) == date(2024, 2, 15)
    assert add_months(date(2024, 11, 15), 3) == date(2025, 2, 15)
    assert add_months(date(2024, 1, 15), -1) == date(2023, 12, 15)


def test_month_end():
    assert month_end(date(2024, 2, 10)) == date(2024, 2, 29)
    assert days_in_month(2023, 2) == 28


def test_next_billing_date():
    assert next_billing_date(date(2024, 1, 15), date(2024, 3, 1)) == date(2024, 3, 15)
    assert next_billing_date(date(2024, 1, 15), date(2024, 1, 15)) == date(2024, 2, 15)
    assert next_billing_date(date(2024, 1, 15), date(2023, 12, 1)) == date(2024, 1, 15)


def test_billing_dates():
    assert billing_dates(date(2024, 1, 15), 3) == [date(2024, 1, 15), date(2024, 2, 15), date(2024, 3, 15)]
    assert billing_dates(date(2024, 1, 15), 0) == []
