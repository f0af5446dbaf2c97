import pytest

from verspec import max_satisfying, satisfies


@pytest.mark.parametrize(
    "version,spec,expected",
    [
        ("0.2.1", "^0.2.1", True),
        ("0.2.9", "^0.2.1", True),
        ("0.3.0", "^0.2.1", False),
        ("1.0.0", "^0.2.1", False),
        ("0.0.3", "^0.0.3", True),
        ("0.0.4", "^0.0.3", False),
        ("0.1.0", "^0.0.3", False),
        ("1.9.0", "^1.2.3", True),
        ("2.0.0", "^1.2.3", False),
        ("10.0.0", "^10.0.0", True),
    ],
)
def test_caret_follows_npm(version, spec, expected):
    assert satisfies(version, spec) is expected


def test_max_satisfying_below_one():
    versions = ["0.2.0", "0.2.5", "0.3.0", "0.0.3", "0.0.4", "1.0.0"]
    assert max_satisfying(versions, "^0.2.0") == "0.2.5"
    assert max_satisfying(versions, "^0.0.3") == "0.0.3"
