"""The pacing rule of ``deltarun worker -c auto``: from what the engine did lately, the next
concurrency level and the reason for it. Pure: no clock, no randomness, no I/O.

The worker (``pacing_scaler``) calls ``decide`` every few seconds with the samples its
trials left (each container start's latency, each exec failure), the host's memory and
disk use, and how many trials are in flight. The rule, in order:

1. Lower by one (never below the floor) when the engine does not keep up: the disk or
   memory past its limit, an exec failure at this level, or container starts at this
   level slower than ``slow_factor`` times the fastest the engine has shown (and slower
   than ``slow_floor_s``). After a lowering, no raise for ``backoff_s``.
2. Raise by one (never above the ceiling) when the engine keeps up at this level: at least
   ``min_starts`` container starts since the level was set, their median within the limit,
   no failure, memory and disk below their limits, every slot busy (there is work waiting
   for more) and the level held for ``hold_s``.
3. Otherwise hold, saying what the next raise waits for.

Each change waits a jittered time (the caller's ``jitter`` in [0, 1) scales the hold and
the backoff by 0.75-1.25), so workers started together do not raise in step. Only what
the engine does counts: how long an agent thinks, or whether its tests pass, never does
(an agent's own slowness is no sign the host is overloaded).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal

START = "start"
FAILURE = "failure"


@dataclass(frozen=True)
class PaceConfig:
    """The knobs of the rule; ``ceiling`` is ``--max``."""

    ceiling: int
    floor: int = 1
    hold_s: float = 10.0  # least time at a level before the next raise (jittered)
    backoff_s: float = 60.0  # after a lowering, no raise for this long (jittered)
    lower_gap_s: float = 10.0  # memory or disk pressure lowers again at most this often
    min_starts: int = 3  # container starts at a level before it may rise
    slow_factor: float = 2.5  # a start median above this × the fastest median seen is slow
    slow_floor_s: float = 2.0  # ...and above this, whatever the fastest was
    memory_high: float = 0.90  # fraction of memory in use that lowers the level
    disk_high: float = 0.90  # fraction of the engine's disk in use that lowers the level

    def __post_init__(self) -> None:
        if not 1 <= self.floor <= self.ceiling:
            bounds = f"{self.floor}..{self.ceiling}"
            raise ValueError(f"pacing needs 1 <= floor <= ceiling, not {bounds}")


@dataclass(frozen=True)
class Sample:
    """One thing a trial saw: a container start and its latency, or an exec failure (an
    engine or infrastructure error; ``seconds`` is 0). ``at`` is epoch seconds."""

    at: float
    kind: Literal["start", "failure"]
    seconds: float = 0.0


@dataclass(frozen=True)
class Signals:
    """What the worker reads before each decision; None: not measurable on this host."""

    now: float
    samples: Sequence[Sample]
    busy: int  # trials in flight
    memory_used: float | None = None  # fraction
    disk_used: float | None = None  # fraction


@dataclass(frozen=True)
class Pace:
    """The current level, why it is what it is (``reason``, set when it changed), what it
    waits for now (``holding``), when it was set, and the fastest start median seen."""

    level: int
    reason: str
    holding: str
    since: float
    raise_after: float
    baseline_s: float | None = None


def first_pace(config: PaceConfig, now: float, jitter: float) -> Pace:
    """Start at the floor: no burst of container starts while nothing is known."""
    return Pace(
        level=config.floor,
        reason="started at the floor (nothing measured yet)",
        holding=f"{config.min_starts} container starts to judge this level",
        since=now,
        raise_after=now + _jittered(config.hold_s, jitter),
    )


def decide(pace: Pace, signals: Signals, config: PaceConfig, jitter: float) -> Pace:
    """The next pace (see the module docstring); ``jitter`` in [0, 1) from the caller's
    seeded generator."""
    now = signals.now
    starts = [s.seconds for s in signals.samples if s.kind == START and s.at >= pace.since]
    failures = sum(1 for s in signals.samples if s.kind == FAILURE and s.at >= pace.since)
    median = statistics.median(starts) if starts else None
    baseline = pace.baseline_s
    if median is not None and len(starts) >= config.min_starts:
        baseline = median if baseline is None else min(baseline, median)
    limit = max(config.slow_floor_s, config.slow_factor * (baseline or 0.0))
    pace = replace(pace, baseline_s=baseline)
    pressure = _pressure(signals, config)
    if pressure is not None and now - pace.since >= config.lower_gap_s:
        return _lower(pace, config, now, jitter, pressure)
    if failures:
        failed = f"{failures} exec failure(s) at level {pace.level}"
        return _lower(pace, config, now, jitter, failed)
    if median is not None and len(starts) >= 2 and median > limit:
        slow = f"container start median {median:.1f} s over {len(starts)} starts > {limit:.1f} s"
        return _lower(pace, config, now, jitter, slow)
    wait = _raise_waits_for(pace, signals, config, len(starts), pressure, now)
    if wait is not None:
        return replace(pace, holding=wait)
    assert median is not None
    keeps_up = (
        f"raised from {pace.level}: container start median {median:.1f} s "
        f"(limit {limit:.1f} s), no exec failure{_host(signals)}"
    )
    return Pace(
        level=pace.level + 1,
        reason=keeps_up,
        holding=f"{config.min_starts} container starts to judge this level",
        since=now,
        raise_after=now + _jittered(config.hold_s, jitter),
        baseline_s=baseline,
    )


def _raise_waits_for(
    pace: Pace,
    signals: Signals,
    config: PaceConfig,
    starts: int,
    pressure: str | None,
    now: float,
) -> str | None:
    """What a raise still waits for, or None when the level may rise now."""
    if pace.level >= config.ceiling:
        return f"at the ceiling (--max {config.ceiling})"
    if pressure is not None:
        return pressure
    if starts < config.min_starts:
        return f"{config.min_starts - starts} more container start(s) to judge this level"
    if signals.busy < pace.level:
        return f"{signals.busy} of {pace.level} slots busy: no work waiting for more"
    if now < pace.raise_after:
        return f"next raise in {pace.raise_after - now:.0f} s at the earliest"
    return None


def _lower(pace: Pace, config: PaceConfig, now: float, jitter: float, why: str) -> Pace:
    level = max(config.floor, pace.level - 1)
    if level == pace.level:
        return replace(pace, holding=f"at the floor ({level}) although {why}", since=now)
    return Pace(
        level=level,
        reason=f"lowered from {pace.level}: {why}",
        holding=f"no raise for {config.backoff_s:.0f} s after a lowering",
        since=now,
        raise_after=now + _jittered(config.backoff_s, jitter),
        baseline_s=pace.baseline_s,
    )


def _pressure(signals: Signals, config: PaceConfig) -> str | None:
    if signals.disk_used is not None and signals.disk_used >= config.disk_high:
        return f"disk {signals.disk_used:.0%} used (limit {config.disk_high:.0%})"
    if signals.memory_used is not None and signals.memory_used >= config.memory_high:
        return f"memory {signals.memory_used:.0%} used (limit {config.memory_high:.0%})"
    return None


def _host(signals: Signals) -> str:
    parts = []
    if signals.memory_used is not None:
        parts.append(f"memory {signals.memory_used:.0%}")
    if signals.disk_used is not None:
        parts.append(f"disk {signals.disk_used:.0%}")
    return ", " + ", ".join(parts) if parts else ""


def _jittered(seconds: float, jitter: float) -> float:
    return seconds * (0.75 + 0.5 * min(max(jitter, 0.0), 1.0))
