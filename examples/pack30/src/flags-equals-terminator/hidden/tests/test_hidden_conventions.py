import pytest

from miniflags import FlagError, parse_flags

SPEC = {"env": str, "count": int, "force": bool, "pattern": str}


def test_equals_form():
    flags, rest = parse_flags(["--env=staging", "deploy"], SPEC)
    assert flags["env"] == "staging"
    assert rest == ["deploy"]


def test_equals_empty_value_and_value_with_equals():
    flags, _ = parse_flags(["--env=", "--pattern=a=b"], SPEC)
    assert flags["env"] == ""
    assert flags["pattern"] == "a=b"


def test_equals_integer():
    assert parse_flags(["--count=-3"], SPEC)[0]["count"] == -3
    with pytest.raises(FlagError, match="count"):
        parse_flags(["--count=x"], SPEC)


@pytest.mark.parametrize("arg", ["--force=yes", "--force=", "--no-force=1", "--nope=1"])
def test_equals_errors(arg):
    with pytest.raises(FlagError):
        parse_flags([arg], SPEC)


def test_double_dash_ends_the_flags():
    flags, rest = parse_flags(["--pattern", "x", "--", "--weird", "-", "--force"], SPEC)
    assert flags["pattern"] == "x"
    assert flags["force"] is False
    assert rest == ["--weird", "-", "--force"]


def test_only_the_first_double_dash_is_consumed():
    assert parse_flags(["a", "--", "--", "b"], SPEC)[1] == ["a", "--", "b"]
