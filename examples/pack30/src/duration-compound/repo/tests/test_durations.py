from datetime import timedelta

import pytest

from durations import format_duration, parse_duration


@pytest.mark.parametrize(
    "text,expected",
    [
        ("90s", timedelta(seconds=90)),
        ("15m", timedelta(minutes=15)),
        ("1.5h", timedelta(hours=1, minutes=30)),
        ("250ms", timedelta(milliseconds=250)),
        ("2W", timedelta(weeks=2)),
    ],
)
def test_single_unit(text, expected):
    assert parse_duration(text) == expected


@pytest.mark.parametrize("text", ["", "abc", "10", "5y"])
def test_invalid(text):
    with pytest.raises(ValueError):
        parse_duration(text)


def test_format():
    assert format_duration(timedelta(minutes=90)) == "1h30m"
    assert format_duration(timedelta(0)) == "0s"
    assert format_duration(-timedelta(seconds=5)) == "-5s"
