from datetime import datetime, timedelta, timezone

import pytest

from stamps import format_offset, format_timestamp, parse_offset, parse_timestamp, to_utc


@pytest.mark.parametrize(
    "text,minutes",
    [("-03:30", -210), ("-0930", -570), ("+05:45", 345), ("-00:30", -30), ("+00:00", 0), ("Z", 0), ("-23:59", -1439)],
)
def test_parse_offset(text, minutes):
    assert parse_offset(text).utcoffset(None) == timedelta(minutes=minutes)


@pytest.mark.parametrize(
    "minutes,text",
    [(-210, "-03:30"), (-570, "-09:30"), (-30, "-00:30"), (345, "+05:45"), (-480, "-08:00"), (0, "Z"), (-1439, "-23:59")],
)
def test_format_offset(minutes, text):
    assert format_offset(timedelta(minutes=minutes)) == text


def test_newfoundland_to_utc():
    stamp = parse_timestamp("2024-03-01T12:00:00-03:30")
    assert to_utc(stamp) == datetime(2024, 3, 1, 15, 30, tzinfo=timezone.utc)


def test_round_trip_every_quarter_hour():
    for minutes in range(-(23 * 60 + 45), 24 * 60, 15):
        zone = timezone(timedelta(minutes=minutes))
        stamp = datetime(2024, 2, 29, 23, 59, 59, tzinfo=zone)
        back = parse_timestamp(format_timestamp(stamp))
        assert back == stamp and back.utcoffset() == stamp.utcoffset(), minutes
