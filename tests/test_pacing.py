"""runner.distributed.pacing: the rule of ``deltarun worker -c auto`` on synthetic signals."""

from __future__ import annotations

import pytest

from runner.distributed.pacing import (
    FAILURE,
    START,
    Pace,
    PaceConfig,
    Sample,
    Signals,
    decide,
    first_pace,
)

CONFIG = PaceConfig(ceiling=3, hold_s=10, backoff_s=30, lower_gap_s=5, min_starts=3)


def starts(at: float, *seconds: float) -> list[Sample]:
    return [Sample(at + i * 0.1, START, s) for i, s in enumerate(seconds)]


def at_level(level: int, since: float = 0.0, baseline: float | None = 0.5) -> Pace:
    return Pace(level, "given", "", since=since, raise_after=since + 10, baseline_s=baseline)


def test_it_starts_at_the_floor_and_raises_one_step_once_the_engine_keeps_up() -> None:
    pace = first_pace(CONFIG, now=0.0, jitter=0.5)
    assert pace.level == 1
    # Too early and too few starts: hold, saying why.
    held = decide(pace, Signals(2.0, starts(1.0, 0.4), busy=1), CONFIG, 0.5)
    assert held.level == 1 and "2 more container start" in held.holding
    fast = Signals(11.0, starts(1.0, 0.4, 0.5, 0.45), busy=1, memory_used=0.4, disk_used=0.5)
    raised = decide(pace, fast, CONFIG, 0.5)
    assert raised.level == 2
    assert "raised from 1" in raised.reason and "memory 40%" in raised.reason
    assert raised.baseline_s == pytest.approx(0.45)
    # The starts before the raise do not judge the new level.
    again = decide(raised, Signals(30.0, fast.samples, busy=2), CONFIG, 0.5)
    assert again.level == 2 and "3 more container start" in again.holding


def test_the_engine_slowing_down_lowers_the_level() -> None:
    pace = at_level(3, baseline=0.5)
    slow = Signals(20.0, starts(5.0, 1.9, 2.6, 3.1), busy=3)
    lowered = decide(pace, slow, CONFIG, 0.0)
    assert lowered.level == 2
    assert "container start median 2.6 s" in lowered.reason and "> 2.0 s" in lowered.reason
    assert lowered.raise_after == pytest.approx(20.0 + 0.75 * 30)  # backoff, jittered
    # Even fast starts at the lower level raise again only after the backoff.
    fast = Signals(30.0, starts(21.0, 0.5, 0.5, 0.5), busy=2)
    assert decide(lowered, fast, CONFIG, 0.0).level == 2


def test_an_exec_failure_lowers_and_the_floor_holds() -> None:
    failed = Signals(20.0, [*starts(5.0, 0.5, 0.5, 0.5), Sample(6.0, FAILURE)], busy=2)
    lowered = decide(at_level(2), failed, CONFIG, 0.0)
    assert lowered.level == 1 and "1 exec failure(s) at level 2" in lowered.reason
    again = decide(lowered, Signals(21.0, [Sample(20.5, FAILURE)], busy=1), CONFIG, 0.0)
    assert again.level == 1 and "at the floor" in again.holding


@pytest.mark.parametrize(
    ("memory", "disk", "words"),
    [(0.95, 0.5, "memory 95% used"), (0.3, 0.92, "disk 92% used")],
)
def test_memory_or_disk_pressure_lowers_and_blocks_raising(
    memory: float, disk: float, words: str
) -> None:
    fine = starts(5.0, 0.5, 0.5, 0.5)
    signals = Signals(20.0, fine, busy=3, memory_used=memory, disk_used=disk)
    lowered = decide(at_level(3), signals, CONFIG, 0.0)
    assert lowered.level == 2 and words in lowered.reason
    # Within lower_gap_s of the change it holds (and does not raise), past it lowers again.
    soon = decide(lowered, Signals(22.0, fine, 2, memory, disk), CONFIG, 0.0)
    assert soon.level == 2 and words in soon.holding
    later = decide(lowered, Signals(26.0, fine, 2, memory, disk), CONFIG, 0.0)
    assert later.level == 1


def test_no_raise_without_work_waiting_or_past_the_ceiling() -> None:
    fine = starts(5.0, 0.5, 0.5, 0.5)
    idle = decide(at_level(2), Signals(20.0, fine, busy=1), CONFIG, 0.0)
    assert idle.level == 2 and "1 of 2 slots busy" in idle.holding
    top = decide(at_level(3), Signals(20.0, fine, busy=3), CONFIG, 0.0)
    assert top.level == 3 and "ceiling (--max 3)" in top.holding


def test_an_agent_slow_to_think_is_no_sign_of_an_overloaded_engine() -> None:
    """Only container starts and exec failures count: a trial that takes minutes with
    fast starts raises like any other."""
    pace = at_level(1, baseline=None)
    signals = Signals(50.0, starts(2.0, 0.6, 0.7, 0.6), busy=1)
    assert decide(pace, signals, CONFIG, 0.0).level == 2


def test_a_config_with_the_floor_above_the_ceiling_is_refused() -> None:
    with pytest.raises(ValueError, match="floor <= ceiling"):
        PaceConfig(ceiling=1, floor=2)
