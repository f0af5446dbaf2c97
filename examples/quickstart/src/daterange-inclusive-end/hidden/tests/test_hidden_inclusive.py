import datetime as dt

from spans import DateRange, business_days

D = dt.date


def test_days_include_end():
    span = DateRange(D(2024, 3, 1), D(2024, 3, 3))
    assert list(span.days()) == [D(2024, 3, 1), D(2024, 3, 2), D(2024, 3, 3)]


def test_single_day_range():
    span = DateRange(D(2024, 2, 29), D(2024, 2, 29))
    assert list(span.days()) == [D(2024, 2, 29)]
    assert len(span) == 1


def test_len_counts_both_ends():
    assert len(DateRange.parse("2024-03-01..2024-03-31")) == 31
    assert len(DateRange.parse("2023-01-01..2023-12-31")) == 365


def test_days_with_step_reaches_end_when_aligned():
    span = DateRange(D(2024, 3, 1), D(2024, 3, 15))
    assert list(span.days(step=7)) == [D(2024, 3, 1), D(2024, 3, 8), D(2024, 3, 15)]


def test_days_with_step_never_passes_end():
    span = DateRange(D(2024, 3, 1), D(2024, 3, 14))
    assert list(span.days(step=7)) == [D(2024, 3, 1), D(2024, 3, 8)]


def test_touching_ranges_overlap():
    first = DateRange(D(2024, 3, 1), D(2024, 3, 10))
    second = DateRange(D(2024, 3, 10), D(2024, 3, 20))
    assert first.overlaps(second)
    assert second.overlaps(first)


def test_single_day_overlaps_itself():
    day = DateRange(D(2024, 3, 5), D(2024, 3, 5))
    assert day.overlaps(day)
    assert day.overlaps(DateRange(D(2024, 3, 1), D(2024, 3, 5)))


def test_adjacent_ranges_do_not_overlap():
    first = DateRange(D(2024, 3, 1), D(2024, 3, 9))
    second = DateRange(D(2024, 3, 10), D(2024, 3, 20))
    assert not first.overlaps(second)
    assert not second.overlaps(first)


def test_business_days_counts_final_day():
    # 2024-03-01 is a Friday, 2024-03-29 a Friday: 21 weekdays in March 2024.
    assert business_days(DateRange.parse("2024-03-01..2024-03-31")) == 21
    assert business_days(DateRange.parse("2024-03-04..2024-03-08")) == 5
    assert business_days(DateRange.parse("2024-03-08..2024-03-08")) == 1
    assert business_days(DateRange.parse("2024-03-04..2024-03-08"), holidays=[D(2024, 3, 8)]) == 4
