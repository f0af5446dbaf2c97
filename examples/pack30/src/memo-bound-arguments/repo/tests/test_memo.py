from memokit import CacheInfo, memoize


def test_repeated_call_is_cached():
    calls = []

    @memoize
    def square(x):
        calls.append(x)
        return x * x

    assert square(3) == 9
    assert square(3) == 9
    assert calls == [3]
    assert square.cache_info() == CacheInfo(hits=1, misses=1, size=1)


def test_different_arguments_are_different_entries():
    @memoize
    def scale(x, factor=2):
        return x * factor

    assert scale(3, factor=2) == 6
    assert scale(3, factor=3) == 9
    assert scale.cache_info().size == 2


def test_cache_clear():
    @memoize
    def ident(x):
        return x

    ident(1)
    ident.cache_clear()
    assert ident.cache_info() == CacheInfo(0, 0, 0)
