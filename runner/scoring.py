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
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from runner.models import Outcome, TaskKind, Trial
from runner.stats import mcnemar_exact, t_interval, wilson_interval


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


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def summarise(arm: str, control: bool, trials: Sequence[Trial]) -> ArmSummary:
    """The per-arm summary of DESIGN.md "Contracts"."""
    scored = [t for t in trials if t.outcome is not Outcome.ERROR]
    ordinary = [t for t in scored if t.task_kind is TaskKind.ORDINARY]
    negative = [t for t in scored if t.task_kind is TaskKind.NEGATIVE]
    passes = sum(t.passed for t in ordinary)
    tokens = sum(t.prompt_tokens + t.completion_tokens for t in trials)
    outcomes: dict[str, int] = defaultdict(int)
    for t in trials:
        outcomes[t.outcome.value] += 1
    return ArmSummary(
        arm=arm,
        control=control,
        trials=len(trials),
        n=len(ordinary),
        passes=passes,
        pass_rate=Rate(passes, len(ordinary)),
        timeout_rate=Rate(sum(t.timeout for t in scored), len(scored)),
        tool_violation_rate=Rate(sum(t.tool_violation for t in scored), len(scored)),
        error_rate=Rate(len(trials) - len(scored), len(trials)),
        tokens_per_pass=(tokens / passes) if passes else None,
        wall_s_per_task=_mean([t.wall_s for t in trials]),
        retries_mean=_mean([float(t.retries_used) for t in trials]),
        tool_calls_mean=_mean([float(t.tool_calls) for t in trials]),
        abstention_accuracy=Rate(
            sum(t.outcome is Outcome.ABSTAIN_OK for t in negative), len(negative)
        ),
        invalid_completion_rate=Rate(
            sum(t.outcome is Outcome.INVALID_COMPLETION for t in negative), len(negative)
        ),
        false_abstention_rate=Rate(
            sum(t.outcome is Outcome.FALSE_ABSTAIN for t in ordinary), len(ordinary)
        ),
        outcomes=dict(sorted(outcomes.items())),
    )


def _task_scores(trials: Iterable[Trial]) -> dict[str, list[Trial]]:
    by_task: dict[str, list[Trial]] = defaultdict(list)
    for t in trials:
        if t.task_kind is TaskKind.ORDINARY:
            by_task[t.task_id].append(t)
    return by_task


def _status(trials: list[Trial] | None) -> tuple[str, float | None]:
    """A task's status and score for one arm: pass | fail | error | skipped."""
    if not trials:
        return "skipped", None
    scored = [t for t in trials if t.outcome is not Outcome.ERROR]
    if not scored:
        return "error", None
    score = sum(t.passed for t in scored) / len(scored)
    return ("pass" if score >= 0.5 else "fail"), score


def paired_delta(
    arm: str,
    control: str,
    arm_trials: Sequence[Trial],
    control_trials: Sequence[Trial],
    task_ids: Sequence[str],
) -> PairedDelta:
    """Candidate minus control, paired per ordinary task, averaged over repeats first."""
    cand, ctrl = _task_scores(arm_trials), _task_scores(control_trials)
    cases: list[CaseDelta] = []
    diffs: list[float] = []
    b = c = 0
    single_run = True
    for task_id in task_ids:
        if task_id not in cand and task_id not in ctrl:
            continue
        c_status, c_score = _status(ctrl.get(task_id))
        a_status, a_score = _status(cand.get(task_id))
        if c_score is None or a_score is None:
            # One arm lacks the task or only errored on it: shown, not counted.
            cases.append(CaseDelta(task_id, c_status, a_status, c_score, a_score, None))
            continue
        delta = a_score - c_score
        diffs.append(delta)
        cases.append(CaseDelta(task_id, c_status, a_status, c_score, a_score, delta))
        if len(ctrl[task_id]) != 1 or len(cand[task_id]) != 1:
            single_run = False
        b += int(a_score > c_score)
        c += int(c_score > a_score)
    interval = t_interval(diffs) if diffs else None
    return PairedDelta(
        arm=arm,
        control=control,
        n_tasks=len(diffs),
        mean=interval.mean if interval else None,
        sd=interval.sd if interval else None,
        ci95=(interval.low, interval.high) if interval and interval.defined else None,
        mcnemar_p=mcnemar_exact(b, c) if diffs and single_run else None,
        helped=sum(d > 0 for d in diffs),
        hurt=sum(d < 0 for d in diffs),
        same=sum(d == 0 for d in diffs),
        inconclusive=len(cases) - len(diffs),
        cases=cases,
    )


@dataclass(frozen=True)
class Scores:
    summaries: list[ArmSummary]
    deltas: list[PairedDelta]


def score(
    trials: Sequence[Trial], arms: Sequence[str], control: str, task_ids: Sequence[str]
) -> Scores:
    """Summaries for every arm (in controls order) and each other arm's delta vs the control."""
    by_arm: dict[str, list[Trial]] = defaultdict(list)
    for t in trials:
        by_arm[t.arm].append(t)
    summaries = [summarise(arm, arm == control, by_arm.get(arm, [])) for arm in arms]
    deltas = [
        paired_delta(arm, control, by_arm.get(arm, []), by_arm.get(control, []), task_ids)
        for arm in arms
        if arm != control
    ]
    return Scores(summaries, deltas)
