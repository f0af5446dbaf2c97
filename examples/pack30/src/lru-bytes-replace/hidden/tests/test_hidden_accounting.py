from blobcache import ByteLRU


def test_replacing_a_key_counts_the_new_value_only():
    cache = ByteLRU(max_bytes=10)
    cache.put("a", b"1234")
    cache.put("b", b"5678")
    for _ in range(20):
        cache.put("a", b"abcd")
    assert cache.total_bytes == 8
    assert cache.keys() == ["b", "a"]
    assert cache.evictions == 0


def test_replacing_with_a_smaller_and_a_larger_value():
    cache = ByteLRU(max_bytes=10)
    cache.put("a", b"123456")
    cache.put("a", b"12")
    cache.put("b", b"12345678")
    assert cache.total_bytes == 10 and cache.evictions == 0
    cache.put("a", b"123")
    assert cache.keys() == ["a"] and cache.total_bytes == 3 and cache.evictions == 1


def test_oversized_value_is_not_cached_and_evicts_nothing():
    cache = ByteLRU(max_bytes=10)
    cache.put("a", b"12")
    cache.put("b", b"34")
    cache.put("c", b"x" * 11)
    assert "c" not in cache
    assert cache.keys() == ["a", "b"]
    assert cache.total_bytes == 4 and cache.evictions == 0


def test_oversized_value_drops_the_stale_one():
    cache = ByteLRU(max_bytes=10)
    cache.put("a", b"12")
    cache.put("b", b"34")
    cache.put("a", b"y" * 50)
    assert cache.get("a") is None
    assert cache.keys() == ["b"] and cache.total_bytes == 2


def test_total_is_always_the_sum():
    cache = ByteLRU(max_bytes=25)
    for i in range(200):
        cache.put(f"k{i % 7}", b"z" * (i % 9 + 1))
        assert cache.total_bytes == sum(len(cache.get(k) or b"") for k in cache.keys())
        assert cache.total_bytes <= 25
