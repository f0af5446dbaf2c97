from notefmt import wrap_text


def test_paragraphs_are_kept():
    text = "Faster startup.\n\nThe cache is now\nwarmed in the background."
    assert wrap_text(text, width=30) == (
        "Faster startup.\n\nThe cache is now warmed in the\nbackground."
    )


def test_several_and_whitespace_only_blank_lines_become_one():
    text = "one\n\n\n  \t\ntwo\n \nthree"
    assert wrap_text(text) == "one\n\ntwo\n\nthree"


def test_leading_and_trailing_blank_lines_dropped():
    assert wrap_text("\n\n  \nonly paragraph\n\n\n") == "only paragraph"
    assert wrap_text(" \n\t\n") == ""


def test_indent_is_not_put_on_the_separator_line():
    out = wrap_text("alpha beta\n\ngamma", width=10, indent="> ")
    assert out == "> alpha\n> beta\n\n> gamma"
    assert all(line == line.rstrip() for line in out.splitlines())


def test_crlf_line_endings():
    assert wrap_text("a\r\nb\r\n\r\nc\r\n", width=20) == "a b\n\nc"
