import pytest

from sizefmt import format_size, parse_size


@pytest.mark.parametrize(
    "size,expected",
    [(0, "0 B"), (512, "512 B"), (1023, "1023 B"), (1024, "1.0 KiB"), (1536, "1.5 KiB"), (5 * 1024**3, "5.0 GiB")],
)
def test_binary(size, expected):
    assert format_size(size) == expected


def test_decimal_and_precision():
    assert format_size(1_500_000, binary=False) == "1.5 MB"
    assert format_size(1234567, precision=2) == "1.18 MiB"


def test_parse():
    assert parse_size("1.5 KiB") == 1536
    assert parse_size("2 MB") == 2_000_000
    assert parse_size("17") == 17
    with pytest.raises(ValueError):
        parse_size("3 parsecs")
