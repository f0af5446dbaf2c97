"""Stopping a run once its delta criteria are decided: the block order and each look. Pure.

``deltarun run --until-decided`` (docs/ci.md) runs the suite's tasks in an order fixed
before the first trial: the task ids sorted, then shuffled by a generator seeded from the
protocol (``task_order``), cut into blocks of equal size (``blocks``; the last may be
shorter). Every arm runs every repeat of a block's tasks before the next block starts, so
the pairs are complete at each look.

After block ``k`` the look (``look_at``) reads, for each target (a gated arm and one delta
criterion with its threshold), the per-task paired differences of the tasks done so far
(candidate minus control, averaged over repeats: ``runner.evidence.scoring``'s cases), at
information fraction ``t_k`` = tasks done / tasks in the suite, ``final`` when the suite
is spent. Each target's decision is ``runner.evidence.sequential``'s: the repeated interval
``mean -/+ c_k se`` (t-corrected) against the threshold. The run stops at the first look
where every target is PASS or FAIL (``Look.decided``), or when the suite is spent; the
interval at that look holds after the stop (J&T 2000 ch. 9), whatever the stop.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from runner.evidence.repeated_interval import (
    RepeatedInterval,
    agreeing_repeated_interval,
    paired_repeated_interval,
)
from runner.evidence.sequential import Decision, Design, boundaries, decide

__all__ = [
    "Look",
    "Target",
    "TargetLook",
    "blocks",
    "look_at",
    "task_order",
]


def task_order(task_ids: Sequence[str], rng: random.Random) -> list[str]:
    """The tasks in the order the run spends them: sorted ids, shuffled by ``rng`` (seeded
    from the protocol), so the order is a function of the protocol and the suite alone."""
    order = sorted(set(task_ids))
    rng.shuffle(order)
    return order


def blocks(order: Sequence[str], size: int) -> list[list[str]]:
    """``order`` cut into blocks of ``size`` tasks (the last may be shorter)."""
    if size < 1:
        raise ValueError(f"block size must be at least 1, got {size!r}")
    return [list(order[i : i + size]) for i in range(0, len(order), size)]


@dataclass(frozen=True)
class Target:
    """One thing a look decides: an arm's delta criterion against its threshold."""

    arm: str
    name: str
    threshold: float
    refusal: bool = False  # on the refusal slice's delta (negative tasks)


@dataclass(frozen=True)
class TargetLook:
    """A target at one look: its repeated interval (None without a paired task) and decision."""

    target: Target
    interval: RepeatedInterval | None
    decision: Decision


@dataclass(frozen=True)
class Look:
    """One look: its number (1-based), tasks done, fraction, boundary and each target."""

    number: int
    tasks_done: int
    fraction: float
    final: bool
    bound: float
    targets: tuple[TargetLook, ...]

    @property
    def decided(self) -> bool:
        """Every target PASS or FAIL: the run may stop here."""
        return all(t.decision in (Decision.PASS, Decision.FAIL) for t in self.targets)


def look_at(
    design: Design,
    done: Sequence[int],
    total: int,
    targets: Sequence[Target],
    diffs: Mapping[Target, Sequence[float]],
    tables: Mapping[Target, Sequence[int]] | None = None,
) -> Look:
    """The look after the blocks whose cumulative task counts are ``done`` (one entry per
    look so far, increasing; the last is this look) in a suite of ``total`` tasks.

    ``diffs`` holds each target's per-task paired differences of the tasks done (none: the
    target continues, or is undecided at the final look); ``tables``, for a target whose
    scores are all 0 or 1, their paired 2x2 table (both, only the candidate, only the
    control, neither): when every difference is equal, the look reads the exact interval
    of agreeing pairs from it (``runner.evidence.repeated_interval``)."""
    if total < 1 or not done or done[-1] > total:
        raise ValueError(f"need 0 < tasks done <= {total}, got {list(done)!r}")
    fractions = [n / total for n in done]
    final = done[-1] == total
    bound = boundaries(design, fractions, final=final)[-1]
    found = []
    for target in targets:
        xs = list(diffs.get(target, ()))
        if not xs:
            undecided = Decision.UNDECIDED if final else Decision.CONTINUE
            found.append(TargetLook(target, None, undecided))
            continue
        interval = paired_repeated_interval(xs, bound)
        table = (tables or {}).get(target)
        if interval.se == 0.0 and table is not None and sum(table) == len(xs):
            interval = agreeing_repeated_interval(table, bound)
        found.append(TargetLook(target, interval, decide(interval, target.threshold, final=final)))
    return Look(len(done), done[-1], fractions[-1], final, bound, tuple(found))
