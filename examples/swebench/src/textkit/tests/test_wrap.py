from textkit.wrap import wrap


def test_short_text():
    assert wrap("one two", 20) == ["one two"]


def test_exact_width():
    assert wrap("abc def", 7) == ["abc def"]


def test_long_words_stay_whole():
    assert wrap("extraordinary", 5) == ["extraordinary"]
