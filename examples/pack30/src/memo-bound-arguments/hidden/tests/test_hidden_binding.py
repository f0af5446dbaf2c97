import pytest

from memokit import memoize


def make_quote():
    calls = []

    @memoize
    def quote(product, quantity=1, *, currency="EUR"):
        calls.append((product, quantity, currency))
        return f"{product}x{quantity} {currency}"

    return quote, calls


def test_positional_and_keyword_share_an_entry():
    quote, calls = make_quote()
    quote("A-100", 2)
    quote("A-100", quantity=2)
    quote(product="A-100", quantity=2)
    assert len(calls) == 1
    assert quote.cache_info().misses == 1 and quote.cache_info().hits == 2


def test_defaults_are_part_of_the_key():
    quote, calls = make_quote()
    assert quote("A-100") == quote("A-100", 1) == quote("A-100", currency="EUR")
    assert len(calls) == 1
    quote("A-100", currency="USD")
    assert len(calls) == 2


def test_var_keyword_order_does_not_matter():
    calls = []

    @memoize
    def tag(name, **attrs):
        calls.append(name)
        return name + repr(sorted(attrs.items()))

    tag("a", x=1, y=2)
    tag("a", y=2, x=1)
    tag(name="a", x=1, y=2)
    assert calls == ["a"]


def test_bad_arguments_raise_like_the_function():
    quote, calls = make_quote()
    with pytest.raises(TypeError):
        quote("A-100", 1, 2)
    with pytest.raises(TypeError):
        quote(quantity=3)
    assert calls == []
    assert quote.cache_info().misses == 0
