import pytest

from docwrap import wrap_note


def test_short_note():
    assert wrap_note("fix", "Fixed a crash.") == "- Fixed a crash."


def test_long_note_wraps_with_hanging_indent():
    out = wrap_note("feature", "word " * 30)
    assert all(len(line) <= 72 for line in out.splitlines())
    assert out.splitlines()[1].startswith("  word")


def test_unknown_kind():
    with pytest.raises(ValueError):
        wrap_note("chore", "x")
