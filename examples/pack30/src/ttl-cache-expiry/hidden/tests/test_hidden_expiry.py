from ttlcache import ManualClock, TTLCache


def make(ttl=10):
    clock = ManualClock(100.0)
    return clock, TTLCache(ttl=ttl, clock=clock)


def test_entry_expires_at_exactly_ttl():
    clock, cache = make()
    cache.set("a", 1)
    clock.advance(10)
    assert cache.get("a") is None


def test_contains_ignores_expired_entries():
    clock, cache = make()
    cache.set("a", 1)
    assert "a" in cache
    clock.advance(10)
    assert "a" not in cache
    assert "b" not in cache


def test_len_counts_live_entries_only():
    clock, cache = make()
    cache.set("a", 1)
    clock.advance(5)
    cache.set("b", 2)
    assert len(cache) == 2
    clock.advance(5)
    assert len(cache) == 1
    clock.advance(5)
    assert len(cache) == 0


def test_purge_agrees_with_get():
    clock, cache = make()
    cache.set("a", 1)
    cache.set("b", 2)
    clock.advance(10)
    assert cache.purge() == 2
    assert len(cache) == 0


def test_set_after_expiry_starts_fresh():
    clock, cache = make()
    cache.set("a", 1)
    clock.advance(12)
    cache.set("a", 2)
    clock.advance(9.9)
    assert "a" in cache and cache.get("a") == 2 and len(cache) == 1
