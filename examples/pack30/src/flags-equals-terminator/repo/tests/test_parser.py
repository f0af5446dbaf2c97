import pytest

from miniflags import FlagError, parse_flags

SPEC = {"env": str, "count": int, "force": bool}


def test_values_and_booleans():
    flags, rest = parse_flags(["--env", "staging", "--force", "--count", "3", "app"], SPEC)
    assert flags == {"env": "staging", "count": 3, "force": True}
    assert rest == ["app"]


def test_no_prefix_clears_a_boolean():
    assert parse_flags(["--force", "--no-force"], SPEC)[0]["force"] is False


def test_defaults_and_stdin_dash():
    assert parse_flags(["-"], SPEC) == ({"env": None, "count": None, "force": False}, ["-"])


@pytest.mark.parametrize("argv", [["--nope"], ["--env"], ["--count", "3x"], ["--no-env"]])
def test_errors(argv):
    with pytest.raises(FlagError):
        parse_flags(argv, SPEC)
