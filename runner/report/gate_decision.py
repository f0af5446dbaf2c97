"""The gate's decision: each criterion of a ``GateSpec`` against a run's scores. Pure.

Every criterion ends ``pass``, ``fail``, ``undecided`` or ``missing``, with its numbers:

- the delta criteria read the paired delta's 95% interval the scorer already computed
  (``runner.evidence.scoring.PairedDelta.ci95``): against a threshold ``theta`` (``margin``
  for superiority, ``-margin`` for non-inferiority) they pass when the lower bound is above
  it, fail when the upper bound is below it, and are undecided while the interval
  straddles it (the rule of ``runner.evidence.sequential.decide`` at a single, final look:
  each side is a one-sided 97.5% bound). No pair, or no interval: missing;
- cost per pass and its ratio to the control's (paired by task) read their 95% interval
  over tasks (``runner.evidence.cost_bounds``): pass when the upper bound is at most the
  limit, fail when the lower bound is above it, undecided between; an arm not fully
  priced, no model behind it, or fewer than two tasks is missing; priced dollars with no
  pass fail;
- the error ceiling compares each gated arm's, and the control's, infrastructure error
  rate as observed; an arm without trials is missing;
- preconditions: a withheld headline fails, and so does each required checklist row that
  fails (``GateSpec.required_rows``); a required row the checklist lacks is missing.

After ``run --until-decided`` (``Stop``) the delta criteria read the repeated interval at
the run's last look instead (``runner.evidence.stopping``; valid after a stop, however it
fell), and an early stop whose blocks are every one recorded satisfies ``run complete``.

Overall: ``fail`` when any criterion fails, else ``undecided`` when any is undecided or
missing, else ``pass``. ``EXIT_CODES`` maps it to the command's exit code: missing data is
never 0.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from runner.config.gate_spec import GateSpec
from runner.evidence.cost_bounds import CostInterval, per_pass_interval, per_pass_ratio_interval
from runner.evidence.scoring import PairedDelta, Scores
from runner.evidence.sequential import Decision
from runner.evidence.stopping import Look, TargetLook
from runner.report.checklist import Row, withhold_headline
from runner.report.cost import ArmCost, CostTable


class Verdict(StrEnum):
    PASS = "pass"
    FAIL = "fail"
    UNDECIDED = "undecided"
    MISSING = "missing"


# The exit codes of `deltarun gate`, in one place: 0 pass, 1 fail, 5 not decided (an
# interval straddles a threshold, or data is missing). 2, 3, 4 and 130 keep the meanings
# of runner.errors (usage, digest or protocol mismatch, no control arm, interrupted).
EXIT_PASS, EXIT_FAIL, EXIT_NOT_DECIDED = 0, 1, 5
EXIT_CODES = {Verdict.PASS: EXIT_PASS, Verdict.FAIL: EXIT_FAIL, Verdict.UNDECIDED: EXIT_NOT_DECIDED}

PRECONDITION = "precondition"
HEADLINE = "headline not withheld"


@dataclass(frozen=True)
class Criterion:
    """One criterion for one arm (``arm`` empty for a precondition) and its numbers."""

    name: str
    arm: str
    verdict: Verdict
    threshold: float | None = None
    estimate: float | None = None
    low: float | None = None
    high: float | None = None
    n: int = 0
    detail: str = ""
    row: str = ""  # a precondition's checklist row (or HEADLINE)


@dataclass(frozen=True)
class ArmTasks:
    """Tasks the arm helped (passed where the control did not) and hurt, from its delta."""

    arm: str
    helped: tuple[str, ...]
    hurt: tuple[str, ...]


@dataclass(frozen=True)
class Stop:
    """Where a sequential run stopped: its last look (deciding this gate's criteria), the
    planned looks, what it spent and whether the ledger holds exactly the looked blocks."""

    look: Look
    planned: int
    early: bool
    tasks_total: int
    trials_spent: int
    trials_total: int
    spending: str
    complete: bool

    def line(self) -> str:
        why = "early, every delta criterion decided" if self.early else "the suite spent"
        if not self.early and not self.look.final:
            why = "before a decision (budget or interruption)"
        return (
            f"sequential: stopped at look {self.look.number} of {self.planned} ({why}): "
            f"{self.look.tasks_done} of {self.tasks_total} tasks, "
            f"{self.trials_total - self.trials_spent} of {self.trials_total} trials saved; "
            f"{self.spending} boundary {self.look.bound:.3f}"
        )


RUN_COMPLETE = "run complete"
_VERDICTS = {Decision.PASS: Verdict.PASS, Decision.FAIL: Verdict.FAIL}


@dataclass(frozen=True)
class GateDecision:
    criteria: tuple[Criterion, ...]
    tasks: tuple[ArmTasks, ...]
    stop: Stop | None = None

    @property
    def overall(self) -> Verdict:
        verdicts = {c.verdict for c in self.criteria}
        if Verdict.FAIL in verdicts:
            return Verdict.FAIL
        if verdicts & {Verdict.UNDECIDED, Verdict.MISSING} or not verdicts:
            return Verdict.UNDECIDED
        return Verdict.PASS

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.overall]


def by_interval(name: str, arm: str, delta: PairedDelta | None, threshold: float) -> Criterion:
    """Pass above the threshold, fail below it, undecided across it; missing without an
    interval."""
    if delta is None or delta.ci95 is None or delta.mean is None or delta.n_tasks == 0:
        n = 0 if delta is None else delta.n_tasks
        return Criterion(name, arm, Verdict.MISSING, threshold, n=n, detail="no paired interval")
    low, high = delta.ci95
    if low > threshold:
        verdict = Verdict.PASS
    elif high < threshold:
        verdict = Verdict.FAIL
    else:
        verdict = Verdict.UNDECIDED
    return Criterion(
        name, arm, verdict, threshold, delta.mean, low, high, delta.n_tasks, delta.ci_method or ""
    )


def at_most(name: str, arm: str, value: float | None, limit: float, n: int, why: str) -> Criterion:
    """An observed value against a ceiling; missing when there is none (``why`` says why)."""
    if value is None:
        return Criterion(name, arm, Verdict.MISSING, limit, n=n, detail=why)
    verdict = Verdict.PASS if value <= limit else Verdict.FAIL
    return Criterion(name, arm, verdict, limit, value, n=n)


def decide(
    spec: GateSpec,
    scores: Scores,
    rows: Sequence[Row],
    withheld: bool,
    cost: CostTable | None,
    stop: Stop | None = None,
) -> GateDecision:
    """Every criterion of ``spec`` for every gated arm, after the preconditions; with
    ``stop``, the delta criteria at the sequential run's last look."""
    control = next(s.arm for s in scores.summaries if s.control)
    arms = spec.arms or [s.arm for s in scores.summaries if not s.control]
    if stop is not None and stop.early and stop.complete:
        rows = [_stopped_row(row, stop) if row.item == RUN_COMPLETE else row for row in rows]
        withheld = withhold_headline(rows)
    found: list[Criterion] = list(_preconditions(spec, rows, withheld))
    deltas = {d.arm: d for d in scores.deltas}
    refusals = {d.arm: d for d in scores.refusal}
    for arm in arms:
        if stop is not None:
            found += [by_look(t.target.name, arm, t, stop) for t in stop.look.targets
                      if t.target.arm == arm]  # fmt: skip
            found += _cost_criteria(spec, arm, control, cost)
            continue
        found += _delta_criteria(spec, arm, deltas.get(arm), refusals.get(arm))
        found += _cost_criteria(spec, arm, control, cost)
    if spec.error_rate_max is not None:
        for arm in [*arms, control]:
            summary = next((s for s in scores.summaries if s.arm == arm), None)
            rate = None if summary is None else summary.error_rate
            found.append(
                at_most(
                    "error_rate_max",
                    arm,
                    None if rate is None else rate.value,
                    spec.error_rate_max,
                    0 if rate is None else rate.n,
                    "no trial",
                )
            )
    tasks = tuple(_tasks(arm, deltas.get(arm)) for arm in arms)
    return GateDecision(tuple(found), tasks, stop)


def _stopped_row(row: Row, stop: Stop) -> Row:
    """``run complete`` for a run stopped early: every job of the blocks it spent has one
    record (``Stop.complete``), the rest were never to run."""
    detail = (
        f"stopped early at look {stop.look.number} of {stop.planned}: {stop.trials_spent} "
        f"jobs of the blocks spent, one record each"
    )
    return Row(row.item, True, detail)


def by_look(name: str, arm: str, target: TargetLook, stop: Stop) -> Criterion:
    """A delta criterion at the sequential run's last look: its repeated interval."""
    threshold = target.target.threshold
    interval = target.interval
    where = f"repeated interval at look {stop.look.number} of {stop.planned}"
    if interval is None:
        return Criterion(name, arm, Verdict.MISSING, threshold, detail=f"{where}: no pair")
    verdict = _VERDICTS.get(target.decision, Verdict.UNDECIDED)
    return Criterion(
        name, arm, verdict, threshold, interval.estimate, interval.low, interval.high,
        interval.n, where,
    )  # fmt: skip


def _preconditions(spec: GateSpec, rows: Sequence[Row], withheld: bool) -> list[Criterion]:
    failing = [row.item for row in rows if not row.ok]
    found = [
        Criterion(
            PRECONDITION,
            "",
            Verdict.FAIL if withheld else Verdict.PASS,
            detail=f"failing rows: {', '.join(failing)}" if withheld else "the report shows it",
            row=HEADLINE,
        )
    ]
    by_item = {row.item: row for row in rows}
    for item in spec.required_rows():
        row = by_item.get(item)
        if row is None:
            found.append(
                Criterion(PRECONDITION, "", Verdict.MISSING, detail="no such row", row=item)
            )
        else:
            verdict = Verdict.PASS if row.ok else Verdict.FAIL
            found.append(Criterion(PRECONDITION, "", verdict, detail=row.detail, row=item))
    return found


def _delta_criteria(
    spec: GateSpec, arm: str, delta: PairedDelta | None, refusal: PairedDelta | None
) -> list[Criterion]:
    found = []
    for name, margin, sign, paired in (
        ("superiority", spec.superiority, 1.0, delta),
        ("non_inferiority", spec.non_inferiority, -1.0, delta),
        ("refusal_superiority", spec.refusal_superiority, 1.0, refusal),
        ("refusal_non_inferiority", spec.refusal_non_inferiority, -1.0, refusal),
    ):
        if margin is not None:
            found.append(by_interval(name, arm, paired, sign * margin + 0.0))
    return found


def _cost_criteria(
    spec: GateSpec, arm: str, control: str, cost: CostTable | None
) -> list[Criterion]:
    """Cost per pass and its ratio to the control's, each on its 95% interval over tasks
    (``runner.evidence.cost_bounds``): pass when the upper bound is at most the limit, fail
    when the lower bound is above it, undecided between; missing when the arm (or the
    control) is not priced whole, or there is no interval (fewer than two tasks)."""
    if spec.cost_per_pass_max is None and spec.cost_ratio_max is None:
        return []
    rows = {} if cost is None else {a.arm: a for a in cost.arms}
    mine, why = _per_pass(rows.get(arm))
    found = []
    if spec.cost_per_pass_max is not None:
        limit = spec.cost_per_pass_max
        name = "cost_per_pass_max"
        if mine is None or math.isinf(mine):  # unpriced, or dollars spent and no pass
            n = rows[arm].passes if arm in rows else 0
            found.append(at_most(name, arm, mine, limit, n, why))
        else:
            tasks = [(usd, float(passes)) for _, usd, passes in rows[arm].tasks]
            interval = per_pass_interval(tasks)
            found.append(_by_cost_interval(name, arm, interval, limit, "fieller, over tasks"))
    if spec.cost_ratio_max is not None:
        theirs, their_why = _per_pass(rows.get(control))
        ratio, reason = _ratio(mine, why, theirs, their_why)
        limit, name = spec.cost_ratio_max, "cost_ratio_max"
        if ratio is None or ratio == 0.0 or math.isinf(ratio) or mine == theirs == 0.0:
            found.append(at_most(name, arm, ratio, limit, 0, reason))
        else:
            theirs_by_task = {task: (usd, passes) for task, usd, passes in rows[control].tasks}
            pairs = [
                (usd, float(passes), theirs_by_task[task][0], float(theirs_by_task[task][1]))
                for task, usd, passes in rows[arm].tasks
                if task in theirs_by_task
            ]
            interval = per_pass_ratio_interval(pairs)
            method = "log-delta, paired by task"
            found.append(_by_cost_interval(name, arm, interval, limit, method))
    return found


def _by_cost_interval(
    name: str, arm: str, interval: CostInterval | None, limit: float, method: str
) -> Criterion:
    if interval is None:
        why = "no interval: fewer than two tasks, or a side with no pass or no dollars"
        return Criterion(name, arm, Verdict.MISSING, limit, detail=why)
    if interval.high <= limit:
        verdict = Verdict.PASS
    elif interval.low > limit:
        verdict = Verdict.FAIL
    else:
        verdict = Verdict.UNDECIDED
    return Criterion(
        name, arm, verdict, limit, interval.estimate, interval.low, interval.high, interval.n,
        method,
    )  # fmt: skip


def _ratio(
    mine: float | None, why: str, theirs: float | None, their_why: str
) -> tuple[float | None, str]:
    """The arm's cost per pass over the control's, or None and why."""
    if mine is None:
        return None, why
    if theirs is None:
        return None, f"control: {their_why}"
    if math.isinf(mine) and math.isinf(theirs):
        return None, "neither the arm nor the control passed"
    if theirs == 0:
        return (1.0 if mine == 0 else math.inf), ""
    return mine / theirs, ""


def _per_pass(row: ArmCost | None) -> tuple[float | None, str]:
    """Dollars per pass of an arm's cost row (infinite: dollars spent, no pass), or None and
    why."""
    if row is None:
        return None, "nothing priced in this run"
    if not row.live:
        return None, "no model drives the arm"
    if row.priced < row.trials:
        return None, f"{row.trials - row.priced} of {row.trials} trials not priced"
    if row.passes == 0:
        return (math.inf if row.usd > 0 else None), "no pass"
    return row.usd / row.passes, ""


def _tasks(arm: str, delta: PairedDelta | None) -> ArmTasks:
    cases = [] if delta is None else delta.cases
    helped = tuple(c.task_id for c in cases if c.delta is not None and c.delta > 0)
    hurt = tuple(c.task_id for c in cases if c.delta is not None and c.delta < 0)
    return ArmTasks(arm, helped, hurt)
