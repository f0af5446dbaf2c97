import pytest

from semverlite import Version, latest


def test_parse_and_str_round_trip():
    for text in ["0.1.0", "1.2.3", "2.0.0-rc.1+build.5", "1.0.0-x-y.7"]:
        assert str(Version.parse(text)) == text


@pytest.mark.parametrize("bad", ["1.2", "01.2.3", "1.2.3-", "1.2.3-01", "v1.2.3"])
def test_parse_rejects_invalid(bad):
    with pytest.raises(ValueError):
        Version.parse(bad)


def test_release_ordering():
    assert Version.parse("1.4.0") > Version.parse("1.3.9")
    assert Version.parse("1.10.0") > Version.parse("1.9.0")
    assert Version.parse("2.0.0") > Version.parse("1.99.99")


def test_build_metadata_ignored():
    assert Version.parse("1.0.0+a") == Version.parse("1.0.0+b")


def test_latest_skips_prereleases_by_default():
    assert latest(["1.0.0", "1.2.0", "1.10.0"]) == "1.10.0"
    assert latest(["1.0.0", "2.0.0-beta"]) == "1.0.0"
    assert latest([]) is None
