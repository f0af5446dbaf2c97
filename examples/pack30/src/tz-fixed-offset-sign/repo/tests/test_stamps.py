from datetime import datetime, timedelta, timezone

import pytest

from stamps import format_offset, format_timestamp, parse_offset, parse_timestamp, to_utc


def test_positive_offsets():
    assert parse_offset("+05:30").utcoffset(None) == timedelta(hours=5, minutes=30)
    assert parse_offset("+0100").utcoffset(None) == timedelta(hours=1)


def test_utc_and_whole_hours():
    assert parse_offset("Z") is timezone.utc
    assert parse_offset("-08:00").utcoffset(None) == timedelta(hours=-8)
    assert format_offset(timedelta(hours=-8)) == "-08:00"
    assert format_offset(timedelta(0)) == "Z"


def test_invalid_offsets():
    for text in ("+5:30", "+24:00", "0530", "+05:60"):
        with pytest.raises(ValueError):
            parse_offset(text)


def test_to_utc():
    stamp = parse_timestamp("2024-03-01T12:00:00+05:30")
    assert to_utc(stamp) == datetime(2024, 3, 1, 6, 30, tzinfo=timezone.utc)


def test_format_timestamp():
    stamp = parse_timestamp("2024-03-01 12:00+01:00")
    assert format_timestamp(stamp) == "2024-03-01T12:00:00+01:00"
