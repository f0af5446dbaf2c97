"""Scoring: trial records → per-arm summaries, the refusal slice and paired deltas. Pure.

Denominators, stated once:
- ``pass_rate`` is over the arm's *ordinary* trials that did not end in an
  infrastructure ``error``; timeouts count as not passed (and are reported on
  their own), errors are reported as ``error_rate`` and never count as failures.
- ``timeout_rate`` and ``tool_violation_rate`` are over all non-error trials.
- ``error_rate`` is over all trials.
- The refusal slice: ``abstention_accuracy`` and ``invalid_completion_rate``
  over non-error *negative* trials, ``false_abstention_rate`` over non-error
  ordinary trials.

The paired delta compares an arm with the control on the ordinary tasks both
ran without error: each task's pass score is first averaged over repeats, the
per-task difference is candidate minus control. A task that one arm lacks (or
only errored on) is listed as ``inconclusive``, never silently dropped.

Its interval, and the method named beside it (``ci_method``):
- one run per task (or repeats that agree on every task): the outcomes are a
  paired 2x2 table, and the interval is Newcombe's hybrid score interval for
  paired proportions (``newcombe-paired``), which never has zero width; a t
  interval over {-1, 0, +1} differences collapses when they all agree;
- repeats that disagree: the Student-t interval over per-task mean differences.
``mde`` is the smallest true delta the run could detect (80% power, two-sided
5%), from n and the observed discordance (or the sd of the differences).

The refusal delta pairs the negative tasks the same way, on abstention accuracy
(a clean abstention scores 1): the refusal slice, candidate minus control.
"""

from __future__ import annotations

import gc
from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

from runner.evidence.power import mean_min_detectable_delta, paired_min_detectable_delta
from runner.evidence.stats import (
    mcnemar_exact,
    newcombe_paired_interval,
    t_interval,
    wilson_interval,
)
from runner.records import Outcome, Record, TaskKind

NEWCOMBE = "newcombe-paired"
T_INTERVAL = "t"


@dataclass(frozen=True)
class Rate:
    """A proportion with its count, its denominator and its Wilson 95% interval."""

    k: int
    n: int

    @property
    def value(self) -> float | None:
        return self.k / self.n if self.n else None

    @property
    def wilson95(self) -> tuple[float, float] | None:
        return wilson_interval(self.k, self.n) if self.n else None


@dataclass(frozen=True)
class ArmSummary:
    arm: str
    control: bool
    trials: int
    n: int
    passes: int
    pass_rate: Rate
    timeout_rate: Rate
    tool_violation_rate: Rate
    error_rate: Rate
    tokens_per_pass: float | None
    wall_s_per_task: float | None
    retries_mean: float | None
    tool_calls_mean: float | None
    abstention_accuracy: Rate
    invalid_completion_rate: Rate
    false_abstention_rate: Rate
    outcomes: dict[str, int]
    stop_reasons: dict[str, int] = field(default_factory=dict)  # model-driven trials only
    # Whether any trial reported token usage; tokens_per_pass is None when none did.
    tokens_metered: bool = True


@dataclass(frozen=True)
class CaseDelta:
    task_id: str
    control_status: str
    candidate_status: str
    control_score: float | None
    candidate_score: float | None
    delta: float | None


@dataclass(frozen=True)
class PairedDelta:
    arm: str
    control: str
    n_tasks: int
    mean: float | None
    sd: float | None
    ci95: tuple[float, float] | None
    mcnemar_p: float | None
    helped: int
    hurt: int
    same: int
    inconclusive: int
    cases: list[CaseDelta] = field(default_factory=list)
    ci_method: str | None = None  # NEWCOMBE or T_INTERVAL; None without an interval
    mde: float | None = None  # smallest detectable true delta (80% power, two-sided 5%)


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def summarise(arm: str, control: bool, trials: Sequence[Record]) -> ArmSummary:
    """The per-arm summary (docs/outcomes-and-statistics.md)."""
    t = _tally(trials)
    return ArmSummary(
        arm=arm,
        control=control,
        trials=len(trials),
        n=t.ordinary,
        passes=t.passes,
        pass_rate=Rate(t.passes, t.ordinary),
        timeout_rate=Rate(t.timeouts, t.scored),
        tool_violation_rate=Rate(t.violations, t.scored),
        error_rate=Rate(len(trials) - t.scored, len(trials)),
        tokens_per_pass=(t.tokens / t.passes) if t.passes and t.tokens else None,
        tokens_metered=t.tokens > 0,
        wall_s_per_task=_mean(t.walls),
        retries_mean=_mean(t.retries),
        tool_calls_mean=_mean(t.tool_calls),
        abstention_accuracy=Rate(t.abstained_ok, t.negative),
        invalid_completion_rate=Rate(t.invalid_completions, t.negative),
        false_abstention_rate=Rate(t.false_abstentions, t.ordinary),
        outcomes=dict(sorted(t.outcomes.items())),
        stop_reasons=dict(sorted(t.stops.items())),
    )


@dataclass(frozen=True)
class _Tally:
    """The counts and per-record values of one arm's records (``_tally``)."""

    scored: int  # records without an infrastructure error
    ordinary: int  # ... of them on ordinary tasks
    negative: int  # ... of them on negative-control tasks
    passes: int
    timeouts: int
    violations: int
    abstained_ok: int
    invalid_completions: int
    false_abstentions: int
    tokens: int  # over every record, errors included
    walls: list[float]
    retries: list[float]
    tool_calls: list[float]
    outcomes: dict[str, int]
    stops: dict[str, int]


def _tally(trials: Sequence[Record]) -> _Tally:
    """One pass over the records, in one loop with local names: it runs on every record
    of a run and dominates the time of a report over 100,000 records
    (``bench/scoring.py``). The float values are kept in record order, the order
    ``_mean`` sums them in."""
    error = Outcome.ERROR
    ordinary_kind, negative_kind = TaskKind.ORDINARY, TaskKind.NEGATIVE
    abstain_ok, invalid = Outcome.ABSTAIN_OK, Outcome.INVALID_COMPLETION
    false_abstain = Outcome.FALSE_ABSTAIN
    n_scored = n_ordinary = n_negative = 0
    passes = timeouts = violations = 0
    abstained_ok = invalid_completions = false_abstentions = 0
    tokens = 0
    walls: list[float] = []
    retries: list[float] = []
    tool_calls: list[float] = []
    outcomes: dict[str, int] = defaultdict(int)
    stops: dict[str, int] = defaultdict(int)
    for t in trials:
        outcome = t.outcome
        outcomes[outcome._value_] += 1
        if t.stop_reason is not None:
            stops[t.stop_reason] += 1
        tokens += t.prompt_tokens + t.completion_tokens
        walls.append(t.wall_s)
        retries.append(float(t.retries_used))
        tool_calls.append(float(t.tool_calls))
        if outcome is error:
            continue
        n_scored += 1
        timeouts += t.timeout
        violations += t.tool_violation
        kind = t.task_kind
        if kind is ordinary_kind:
            n_ordinary += 1
            passes += t.passed
            false_abstentions += outcome is false_abstain
        elif kind is negative_kind:
            n_negative += 1
            abstained_ok += outcome is abstain_ok
            invalid_completions += outcome is invalid
    return _Tally(
        scored=n_scored,
        ordinary=n_ordinary,
        negative=n_negative,
        passes=passes,
        timeouts=timeouts,
        violations=violations,
        abstained_ok=abstained_ok,
        invalid_completions=invalid_completions,
        false_abstentions=false_abstentions,
        tokens=tokens,
        walls=walls,
        retries=retries,
        tool_calls=tool_calls,
        outcomes=outcomes,
        stops=stops,
    )


@dataclass(frozen=True)
class _TaskTable:
    """Per ordinary task of one arm: its records, those without an infrastructure error, passes.

    Dicts of ints, not a list per task: no container per task for the cyclic GC to walk.
    """

    runs: dict[str, int]
    scored: dict[str, int]
    passes: dict[str, int]


def _task_table(trials: Iterable[Record], kind: TaskKind = TaskKind.ORDINARY) -> _TaskTable:
    """Tasks of ``kind``; a record "passes" when it passed (ordinary) or abstained cleanly
    (negative: the refusal slice)."""
    runs: dict[str, int] = {}
    scored: dict[str, int] = {}
    passes: dict[str, int] = {}
    error, abstain_ok = Outcome.ERROR, Outcome.ABSTAIN_OK
    negative = kind is TaskKind.NEGATIVE
    for t in trials:
        if t.task_kind is kind:
            task_id = t.task_id
            runs[task_id] = runs.get(task_id, 0) + 1
            if t.outcome is not error:
                scored[task_id] = scored.get(task_id, 0) + 1
                won = t.outcome is abstain_ok if negative else t.passed
                passes[task_id] = passes.get(task_id, 0) + won
    return _TaskTable(runs, scored, passes)


def _status(table: _TaskTable, task_id: str) -> tuple[str, float | None, int]:
    """A task's status, score and record count for one arm: pass | fail | error | skipped."""
    runs = table.runs.get(task_id, 0)
    if not runs:
        return "skipped", None, 0
    scored = table.scored.get(task_id, 0)
    if not scored:
        return "error", None, runs
    score = table.passes[task_id] / scored
    return ("pass" if score >= 0.5 else "fail"), score, runs


def paired_delta(
    arm: str,
    control: str,
    arm_trials: Sequence[Record],
    control_trials: Sequence[Record],
    task_ids: Sequence[str],
    kind: TaskKind = TaskKind.ORDINARY,
) -> PairedDelta:
    """Candidate minus control, paired per task of ``kind``, averaged over repeats first:
    the pass rate on ordinary tasks, abstention accuracy on negative ones (the refusal
    slice)."""
    return _paired_delta(
        arm, control, _task_table(arm_trials, kind), _task_table(control_trials, kind), task_ids
    )


def _paired_delta(
    arm: str, control: str, cand: _TaskTable, ctrl: _TaskTable, task_ids: Sequence[str]
) -> PairedDelta:
    cases: list[CaseDelta] = []
    diffs: list[float] = []
    table = [0, 0, 0, 0]  # both pass, only the candidate, only the control, neither
    single_run = binary = True  # one run per task makes every score 0 or 1: binary
    for task_id in task_ids:
        if task_id not in cand.runs and task_id not in ctrl.runs:
            continue
        c_status, c_score, c_runs = _status(ctrl, task_id)
        a_status, a_score, a_runs = _status(cand, task_id)
        if c_score is None or a_score is None:
            # One arm lacks the task or only errored on it: shown, not counted.
            cases.append(CaseDelta(task_id, c_status, a_status, c_score, a_score, None))
            continue
        delta = a_score - c_score
        diffs.append(delta)
        cases.append(CaseDelta(task_id, c_status, a_status, c_score, a_score, delta))
        if c_runs != 1 or a_runs != 1:
            single_run = False
        if a_score in (0.0, 1.0) and c_score in (0.0, 1.0):
            table[2 * (a_score == 0.0) + (c_score == 0.0)] += 1
        else:
            binary = False
    b, c = table[1], table[2]
    interval = t_interval(diffs) if diffs else None
    ci95, method, mde = None, None, None
    if interval is not None and binary:
        ci95, method = newcombe_paired_interval(*table), NEWCOMBE
        mde = paired_min_detectable_delta(len(diffs), b + c)
    elif interval is not None and interval.defined:
        ci95, method = (interval.low, interval.high), T_INTERVAL
        mde = mean_min_detectable_delta(len(diffs), interval.sd)
    return PairedDelta(
        arm=arm,
        control=control,
        n_tasks=len(diffs),
        mean=interval.mean if interval else None,
        sd=interval.sd if interval else None,
        ci95=ci95,
        mcnemar_p=mcnemar_exact(b, c) if diffs and single_run else None,
        helped=sum(d > 0 for d in diffs),
        hurt=sum(d < 0 for d in diffs),
        same=sum(d == 0 for d in diffs),
        inconclusive=len(cases) - len(diffs),
        cases=cases,
        ci_method=method,
        mde=mde,
    )


@dataclass(frozen=True)
class Scores:
    summaries: list[ArmSummary]
    deltas: list[PairedDelta]
    refusal: list[PairedDelta]  # the refusal slice's delta beside each of ``deltas``


@contextmanager
def gc_paused() -> Iterator[None]:
    """No cyclic garbage collection inside: for building many small acyclic objects.

    A full collection walks every live container; with a run's records in memory
    (100,000 trials are ~300,000 containers) each costs ~0.4 s, and the cases of
    ``score`` and the per-task entries of ``report.model.build`` would trigger two each.
    What they build forms no cycle, so nothing is left for the collector, which
    runs as usual afterwards. Nested or concurrent use only delays a collection.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


@gc_paused()
def score(
    trials: Sequence[Record], arms: Sequence[str], control: str, task_ids: Sequence[str]
) -> Scores:
    """Summaries for every arm (in controls order) and each other arm's delta vs the control."""
    by_arm: dict[str, list[Record]] = defaultdict(list)
    for t in trials:
        by_arm[t.arm].append(t)
    summaries = [summarise(arm, arm == control, by_arm.get(arm, [])) for arm in arms]
    negative = TaskKind.NEGATIVE
    # The control is tabled once and paired with every candidate.
    ctrl, ctrl_neg = (
        _task_table(by_arm.get(control, [])),
        _task_table(by_arm.get(control, []), negative),
    )
    deltas: list[PairedDelta] = []
    refusal: list[PairedDelta] = []
    for arm in arms:
        if arm == control:
            continue
        mine = by_arm.get(arm, [])
        deltas.append(_paired_delta(arm, control, _task_table(mine), ctrl, task_ids))
        refusal.append(_paired_delta(arm, control, _task_table(mine, negative), ctrl_neg, task_ids))
    return Scores(summaries, deltas, refusal)
