from datetime import timedelta

import pytest

from durations import format_duration, parse_duration


@pytest.mark.parametrize(
    "text,expected",
    [
        ("1h30m", timedelta(hours=1, minutes=30)),
        ("2d 4h", timedelta(days=2, hours=4)),
        ("2d4h", timedelta(days=2, hours=4)),
        ("1m30s", timedelta(minutes=1, seconds=30)),
        ("1w2d3h4m5s6ms", timedelta(weeks=1, days=2, hours=3, minutes=4, seconds=5, milliseconds=6)),
        ("1h 0.5m", timedelta(hours=1, seconds=30)),
        ("90 s", timedelta(seconds=90)),
        ("-1h30m", -timedelta(hours=1, minutes=30)),
        (" 2H 15M ", timedelta(hours=2, minutes=15)),
    ],
)
def test_compound(text, expected):
    assert parse_duration(text) == expected


@pytest.mark.parametrize(
    "text",
    ["", "  ", "-", "30m1h", "1h1h", "1h-30m", "1hm", "h", "1.h", "1h30", "--1h", "1h,30m", "1h 2x"],
)
def test_invalid(text):
    with pytest.raises(ValueError):
        parse_duration(text)


@pytest.mark.parametrize(
    "value",
    [
        timedelta(0),
        timedelta(milliseconds=1),
        timedelta(minutes=90),
        timedelta(days=9, seconds=1, milliseconds=250),
        -timedelta(hours=25),
        timedelta(weeks=3, minutes=1),
    ],
)
def test_round_trip(value):
    assert parse_duration(format_duration(value)) == value
