import random

import pytest

from retrykit import Backoff, RetryError, retry


def test_delay_is_capped():
    schedule = Backoff(base=1.0, factor=2.0, max_delay=5.0)
    assert [schedule.delay(n) for n in range(6)] == [1.0, 2.0, 4.0, 5.0, 5.0, 5.0]


def test_huge_attempt_number_does_not_overflow():
    schedule = Backoff(base=0.5, factor=2.0, max_delay=30.0)
    assert schedule.delay(5000) == 30.0
    assert schedule.delay(10**6) == 30.0


def test_jitter_stays_within_cap():
    schedule = Backoff(base=1.0, factor=3.0, max_delay=4.0, jitter=True)
    rng = random.Random(7)
    delays = [schedule.delay(n, rng) for n in range(50)]
    assert all(0.0 <= d <= 4.0 for d in delays)
    assert max(delays[5:]) > 1.0  # jitter is drawn from the capped range, not below it


def test_jitter_reproducible_with_seed():
    schedule = Backoff(base=1.0, factor=2.0, max_delay=10.0, jitter=True)
    first = [schedule.delay(n, random.Random(3)) for n in range(8)]
    second = [schedule.delay(n, random.Random(3)) for n in range(8)]
    assert first == second


def test_no_sleep_after_last_attempt():
    slept = []

    def fail():
        raise ValueError("nope")

    with pytest.raises(RetryError):
        retry(fail, attempts=3, backoff=Backoff(base=1.0, factor=2.0), sleep=slept.append)
    assert slept == [1.0, 2.0]


def test_single_attempt_never_sleeps():
    slept = []

    def fail():
        raise ValueError("nope")

    with pytest.raises(RetryError) as info:
        retry(fail, attempts=1, sleep=slept.append)
    assert slept == []
    assert info.value.attempts == 1
    assert isinstance(info.value.__cause__, ValueError)


def test_retry_uses_capped_schedule():
    calls = []
    slept = []

    def fail_four_times():
        calls.append(1)
        if len(calls) < 5:
            raise TimeoutError
        return "done"

    schedule = Backoff(base=2.0, factor=10.0, max_delay=15.0)
    assert retry(fail_four_times, attempts=5, backoff=schedule, sleep=slept.append) == "done"
    assert slept == [2.0, 15.0, 15.0, 15.0]
