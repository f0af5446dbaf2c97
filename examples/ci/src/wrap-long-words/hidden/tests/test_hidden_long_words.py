import pytest

from wraptext import fill, wrap


def test_long_word_is_broken_into_width_sized_pieces():
    assert wrap("see https://example.com/a/very/long/path", width=10) == [
        "see",
        "https://ex",
        "ample.com/",
        "a/very/lon",
        "g/path",
    ]


def test_last_piece_shares_line_with_following_words():
    assert wrap("abcdefghijkl mn op", width=5) == ["abcde", "fghij", "kl mn", "op"]


def test_no_line_exceeds_width():
    text = "short " + "x" * 57 + " words after " + "y" * 23
    for width in (5, 8, 13, 20):
        lines = wrap(text, width=width)
        assert all(len(line) <= width for line in lines), (width, lines)
        assert "".join(lines).replace(" ", "") == text.replace(" ", "")


def test_long_word_with_indent():
    assert wrap("a 0123456789", width=6, indent="> ") == ["> a", "> 0123", "> 4567", "> 89"]


def test_word_exactly_width_is_not_broken():
    assert wrap("abcde fg", width=5) == ["abcde", "fg"]


def test_break_long_words_false_keeps_overlong_word_whole():
    assert wrap("see https://example.com/x ok", width=10, break_long_words=False) == [
        "see",
        "https://example.com/x",
        "ok",
    ]


def test_fill_accepts_break_long_words():
    assert fill("aaaaaaa", width=3) == "aaa\naaa\na"
    assert fill("aaaaaaa", width=3, break_long_words=False) == "aaaaaaa"


@pytest.mark.parametrize("width", [1, 2, 3])
def test_tiny_widths(width):
    lines = wrap("abcd e", width=width)
    assert all(1 <= len(line) <= width for line in lines)
