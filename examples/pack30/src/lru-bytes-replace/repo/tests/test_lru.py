import pytest

from blobcache import ByteLRU, sizeof


def test_eviction_order():
    cache = ByteLRU(max_bytes=10)
    cache.put("a", b"12345")
    cache.put("b", b"67890")
    cache.get("a")
    cache.put("c", b"x")
    assert cache.keys() == ["a", "c"]
    assert cache.total_bytes == 6
    assert cache.evictions == 1


def test_get_missing():
    assert ByteLRU(5).get("nope", b"") == b""


def test_sizeof():
    assert sizeof("é") == 2
    assert sizeof(memoryview(b"abc")) == 3


def test_max_bytes_positive():
    with pytest.raises(ValueError):
        ByteLRU(0)
