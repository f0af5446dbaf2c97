import pytest

from semverlite import Version, latest

# The example chain from section 11 of the SemVer 2.0.0 specification.
SPEC_CHAIN = [
    "1.0.0-alpha",
    "1.0.0-alpha.1",
    "1.0.0-alpha.beta",
    "1.0.0-beta",
    "1.0.0-beta.2",
    "1.0.0-beta.11",
    "1.0.0-rc.1",
    "1.0.0",
]


@pytest.mark.parametrize("lower,higher", list(zip(SPEC_CHAIN, SPEC_CHAIN[1:])))
def test_spec_chain_pairs(lower, higher):
    assert Version.parse(lower) < Version.parse(higher)
    assert Version.parse(higher) > Version.parse(lower)


def test_sorting_shuffled_chain():
    shuffled = [SPEC_CHAIN[i] for i in (7, 3, 0, 5, 1, 6, 2, 4)]
    assert [str(v) for v in sorted(Version.parse(s) for s in shuffled)] == SPEC_CHAIN


def test_numeric_identifiers_compare_numerically():
    assert Version.parse("1.0.0-alpha.2") < Version.parse("1.0.0-alpha.10")
    assert Version.parse("1.0.0-2") < Version.parse("1.0.0-10")


def test_numeric_identifier_lower_than_alphanumeric():
    assert Version.parse("1.0.0-1") < Version.parse("1.0.0-alpha")
    assert Version.parse("1.0.0-rc.9") < Version.parse("1.0.0-rc.x")


def test_release_is_greater_than_its_prereleases():
    assert Version.parse("1.0.0") > Version.parse("1.0.0-rc.1")
    assert Version.parse("1.0.0-rc.1") < Version.parse("1.0.0")
    assert Version.parse("1.0.0-rc.1") > Version.parse("0.9.9")


def test_equality_ignores_build_with_prerelease():
    assert Version.parse("1.0.0-rc.1+a") == Version.parse("1.0.0-rc.1+b")
    assert not (Version.parse("1.0.0-rc.1+a") < Version.parse("1.0.0-rc.1+b"))


def test_latest_with_prereleases():
    assert latest(["1.0.0-rc.1", "1.0.0", "1.0.0-beta.11"], include_prerelease=True) == "1.0.0"
    assert latest(["2.0.0-alpha.2", "2.0.0-alpha.10"], include_prerelease=True) == "2.0.0-alpha.10"
