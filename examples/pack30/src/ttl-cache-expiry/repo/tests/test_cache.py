import pytest

from ttlcache import ManualClock, TTLCache


def test_get_before_expiry():
    clock = ManualClock()
    cache = TTLCache(ttl=10, clock=clock)
    cache.set("a", 1)
    clock.advance(9.5)
    assert cache.get("a") == 1
    assert cache.get("missing", "default") == "default"


def test_expired_entry_is_not_returned():
    clock = ManualClock()
    cache = TTLCache(ttl=10, clock=clock)
    cache.set("a", 1)
    clock.advance(11)
    assert cache.get("a") is None


def test_set_restarts_the_lifetime():
    clock = ManualClock()
    cache = TTLCache(ttl=10, clock=clock)
    cache.set("a", 1)
    clock.advance(8)
    cache.set("a", 2)
    clock.advance(8)
    assert cache.get("a") == 2


def test_ttl_must_be_positive():
    with pytest.raises(ValueError):
        TTLCache(ttl=0)
