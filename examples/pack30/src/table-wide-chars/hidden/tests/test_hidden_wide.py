import pytest

from plaintable import display_width, render


@pytest.mark.parametrize(
    "text,width",
    [
        ("東京支店", 8),
        ("Ａ", 2),
        ("ｱｲ", 2),
        ("Cafe\u0301", 4),
        ("n\u0303o", 2),
        ("a\u200bb", 2),
        ("Zoë", 3),
        ("", 0),
    ],
)
def test_display_width(text, width):
    assert display_width(text) == width


def test_columns_line_up_with_wide_and_combining_text():
    out = render(
        [["東京支店", "12"], ["Cafe\u0301", "3"], ["Berlin", "7"]],
        headers=["site", "n"],
    )
    lines = out.splitlines()
    assert lines[0] == "site      n"
    assert lines[1] == "--------  --"
    assert lines[2] == "東京支店  12"
    assert lines[3] == "Cafe\u0301      3"
    assert lines[4] == "Berlin    7"
