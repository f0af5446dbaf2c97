from plaintable import display_width, pad, render


def test_ascii_table():
    out = render([["Ada", "London"], ["Grace", "New York"]], headers=["name", "city"])
    assert out == "name   city\n-----  --------\nAda    London\nGrace  New York"


def test_right_alignment():
    assert render([["a", 1], ["b", 100]], align=["left", "right"]) == "a    1\nb  100"


def test_pad_and_width():
    assert display_width("abc") == 3
    assert pad("ab", 4) == "ab  "
    assert pad("ab", 4, "right") == "  ab"


def test_empty():
    assert render([]) == ""
