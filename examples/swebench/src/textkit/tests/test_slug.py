from textkit.slug import slugify


def test_lowercases():
    assert slugify("Hello World") == "hello-world"


def test_strips():
    assert slugify("  padded  ") == "padded"


def test_collapses_repeated_separators():
    assert slugify("a -- b __ c") == "a-b-c"


def test_custom_separator():
    assert slugify("a b", sep="_") == "a_b"
