from apicache import ResponseCache


def test_store_and_expire():
    now = [0.0]
    cache = ResponseCache(ttl=60, clock=lambda: now[0])
    cache.store("/search?q=x", b"hit")
    now[0] = 59.0
    assert cache.lookup("/search?q=x") == b"hit"
    now[0] = 60.0
    assert cache.lookup("/search?q=x") is None
