import pytest

from notefmt import collapse_whitespace, wrap_text


def test_reflow_with_indent():
    text = "Faster   startup\nand smaller\nimages."
    assert wrap_text(text, width=20, indent="  ") == "  Faster startup and\n  smaller images."


def test_long_words_are_not_broken():
    url = "https://example.org/" + "x" * 40
    assert wrap_text(f"See {url} now", width=20) == f"See\n{url}\nnow"


def test_collapse():
    assert collapse_whitespace("  a \t b\n c ") == "a b c"


def test_width_must_exceed_indent():
    with pytest.raises(ValueError):
        wrap_text("x", width=2, indent="  ")
