from slugkit import slugify, unique_slug


def test_basic_title():
    assert slugify("Hello, World!") == "hello-world"


def test_collapses_punctuation_and_spaces():
    assert slugify("  Rock -- & -- Roll  ") == "rock-roll"


def test_custom_separator():
    assert slugify("Release notes 2.1", separator="_") == "release_notes_2_1"


def test_max_length_cuts_at_word_boundary():
    assert slugify("Release notes for v2.1", max_length=13) == "release-notes"
    assert slugify("Supercalifragilistic", max_length=5) == "super"


def test_unique_slug_adds_suffix():
    assert unique_slug("Post", existing=[]) == "post"
    assert unique_slug("Post", existing=["post", "post-2"]) == "post-3"
