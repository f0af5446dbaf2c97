from tinycache import LRUCache, memoize


def test_get_refreshes_recency():
    cache = LRUCache(2)
    cache.put("a", 1)
    cache.put("b", 2)
    assert cache.get("a") == 1
    cache.put("c", 3)
    assert "a" in cache
    assert "b" not in cache
    assert cache.keys() == ["a", "c"]


def test_missed_get_does_not_change_order():
    cache = LRUCache(2)
    cache.put("a", 1)
    cache.put("b", 2)
    assert cache.get("zzz") is None
    assert cache.keys() == ["a", "b"]


def test_updating_existing_key_does_not_evict():
    cache = LRUCache(2)
    cache.put("a", 1)
    cache.put("b", 2)
    cache.put("a", 10)
    assert len(cache) == 2
    assert cache.get("b") == 2
    assert cache.get("a") == 10
    assert cache.stats.evictions == 0


def test_updating_existing_key_refreshes_recency():
    cache = LRUCache(2)
    cache.put("a", 1)
    cache.put("b", 2)
    cache.put("a", 10)
    cache.put("c", 3)
    assert cache.keys() == ["a", "c"]
    assert cache.stats.evictions == 1


def test_contains_is_not_a_use():
    cache = LRUCache(2)
    cache.put("a", 1)
    cache.put("b", 2)
    assert "a" in cache
    cache.put("c", 3)
    assert "a" not in cache


def test_memoize_keeps_hot_entry():
    calls = []

    @memoize(capacity=2)
    def ident(x):
        calls.append(x)
        return x

    ident(1)
    ident(2)
    ident(1)  # hit: 1 becomes most recent
    ident(3)  # evicts 2, not 1
    ident(1)
    assert calls == [1, 2, 3]
