import pytest

from verspec import Version, max_satisfying, satisfies


@pytest.mark.parametrize(
    "version,spec,expected",
    [
        ("1.4.0", "^1.2.3", True),
        ("2.0.0", "^1.2.3", False),
        ("1.2.2", "^1.2.3", False),
        ("1.2.9", "~1.2.3", True),
        ("1.3.0", "~1.2.3", False),
        ("1.5.0", ">=1.2.0, <2.0.0", True),
        ("1.2.3", "1.2.3", True),
    ],
)
def test_satisfies(version, spec, expected):
    assert satisfies(version, spec) is expected


def test_max_satisfying():
    assert max_satisfying(["1.2.0", "1.9.9", "2.0.0"], "^1.0.0") == "1.9.9"
    assert max_satisfying(["3.0.0"], "^1.0.0") is None


def test_parse():
    assert Version.parse("v1.2.3") == Version(1, 2, 3)
    with pytest.raises(ValueError):
        Version.parse("1.2")
