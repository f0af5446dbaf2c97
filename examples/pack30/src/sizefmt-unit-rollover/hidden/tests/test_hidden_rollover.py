import pytest

from sizefmt import format_size


@pytest.mark.parametrize(
    "size,kwargs,expected",
    [
        (1048575, {}, "1.0 MiB"),
        (1024**2 - 40, {}, "1.0 MiB"),
        (1024**2 - 40, {"precision": 2}, "1023.96 KiB"),
        (1024**3 - 1, {}, "1.0 GiB"),
        (999_999, {"binary": False}, "1.0 MB"),
        (999_499, {"binary": False}, "999.5 kB"),
        (1023 * 1024 + 600, {"precision": 0}, "1 MiB"),
        (1024**6, {}, "1024.0 PiB"),
        (1024**5 * 2048 - 1, {}, "2048.0 PiB"),
    ],
)
def test_rounding_rolls_over_to_the_next_unit(size, kwargs, expected):
    assert format_size(size, **kwargs) == expected


@pytest.mark.parametrize(
    "size,expected",
    [(-2048, "-2.0 KiB"), (-512, "-512 B"), (-1048575, "-1.0 MiB"), (-1536, "-1.5 KiB"), (-1, "-1 B")],
)
def test_negative_sizes_scale_like_positive(size, expected):
    assert format_size(size) == expected


def test_negative_decimal():
    assert format_size(-1_500_000, binary=False) == "-1.5 MB"
