import datetime as dt

import pytest

from spans import DateRange


def test_parse_and_str():
    span = DateRange.parse("2024-03-01..2024-03-31")
    assert span.start == dt.date(2024, 3, 1)
    assert span.end == dt.date(2024, 3, 31)
    assert str(span) == "2024-03-01..2024-03-31"


def test_parse_requires_separator():
    with pytest.raises(ValueError):
        DateRange.parse("2024-03-01")


def test_end_before_start_rejected():
    with pytest.raises(ValueError):
        DateRange(dt.date(2024, 3, 2), dt.date(2024, 3, 1))


def test_contains_both_ends():
    span = DateRange(dt.date(2024, 3, 1), dt.date(2024, 3, 3))
    assert dt.date(2024, 3, 1) in span
    assert dt.date(2024, 3, 3) in span
    assert dt.date(2024, 3, 4) not in span
    assert "2024-03-02" not in span


def test_step_must_be_positive():
    span = DateRange(dt.date(2024, 3, 1), dt.date(2024, 3, 3))
    with pytest.raises(ValueError):
        list(span.days(step=0))
