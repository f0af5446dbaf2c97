import pytest

from retrykit import Backoff, RetryError, retry


def test_delays_grow_exponentially():
    schedule = Backoff(base=1.0, factor=2.0)
    assert [schedule.delay(n) for n in range(4)] == [1.0, 2.0, 4.0, 8.0]


def test_invalid_parameters():
    with pytest.raises(ValueError):
        Backoff(factor=0.5)
    with pytest.raises(ValueError):
        Backoff().delay(-1)


def test_returns_first_success():
    results = iter([ValueError("flaky"), "ok"])

    def flaky():
        item = next(results)
        if isinstance(item, Exception):
            raise item
        return item

    slept = []
    assert retry(flaky, attempts=3, sleep=slept.append) == "ok"
    assert slept == [0.5]


def test_other_exceptions_propagate():
    def boom():
        raise KeyError("x")

    with pytest.raises(KeyError):
        retry(boom, retry_on=(ValueError,), sleep=lambda s: None)


def test_gives_up():
    def fail():
        raise ValueError("nope")

    with pytest.raises(RetryError) as info:
        retry(fail, attempts=2, sleep=lambda s: None)
    assert isinstance(info.value.__cause__, ValueError)
