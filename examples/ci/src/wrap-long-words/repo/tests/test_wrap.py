import pytest

from wraptext import fill, wrap


def test_wraps_at_word_boundaries():
    assert wrap("The quick brown fox jumps over the lazy dog", width=15) == [
        "The quick brown",
        "fox jumps over",
        "the lazy dog",
    ]


def test_collapses_whitespace():
    assert wrap("a   b\n\tc", width=80) == ["a b c"]


def test_empty_text():
    assert wrap("   ", width=10) == []


def test_indent_counts_toward_width():
    assert fill("one two three", width=9, indent="> ") == "> one two\n> three"


def test_width_must_exceed_indent():
    with pytest.raises(ValueError):
        wrap("x", width=2, indent="  ")
