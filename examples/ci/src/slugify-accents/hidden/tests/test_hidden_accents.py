from slugkit import slugify, unique_slug


def test_accents_are_transliterated():
    assert slugify("Crème brûlée") == "creme-brulee"
    assert slugify("Ångström units") == "angstrom-units"
    assert slugify("Zoë's café") == "zoe-s-cafe"


def test_uppercase_accents():
    assert slugify("ÉCOLE NORMALE") == "ecole-normale"


def test_untransliterable_characters_are_dropped_cleanly():
    assert slugify("日本 guide") == "guide"
    assert slugify("naïve — 東京") == "naive"


def test_max_length_applies_after_transliteration():
    assert slugify("Über café society", max_length=10) == "uber-cafe"


def test_custom_separator_with_accents():
    assert slugify("Señor Piñata", separator="_") == "senor_pinata"


def test_unique_slug_with_accents():
    assert unique_slug("Café", existing=["cafe"]) == "cafe-2"


def test_plain_ascii_unchanged():
    assert slugify("Hello, World!") == "hello-world"
