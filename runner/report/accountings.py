"""Infrastructure errors, accounted two ways, and the retries a number rests on. Pure.

An ``error`` record leaves its job unscored: the scorer's ``pass_rate`` leaves it out
(``runner.evidence.scoring``). A reader who suspects that errors hide failures wants the
other accounting beside it: every error counted as a failure. Both are over the arm's
ordinary records, one per job (its newest: ``runner.store.rundir``), with their Wilson
intervals; ``retried`` counts the error records ``run --retry-errors`` superseded (kept in
the ledger for audit), per arm, and what those jobs' records are now.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from runner.config.controls import Controls
from runner.evidence.scoring import Rate
from runner.records import Outcome, Record, TaskKind


@dataclass(frozen=True)
class ArmAccounting:
    arm: str
    errors: int  # the arm's ordinary records that are errors (unscored)
    excluded: Rate  # passes over the ordinary records without an error
    as_failures: Rate  # passes over every ordinary record, errors as failures
    retried: int  # the arm's error records a retry superseded (every task kind)


@dataclass(frozen=True)
class Accountings:
    arms: tuple[ArmAccounting, ...]
    retried: int  # error records superseded by ``run --retry-errors``, in all
    retried_now: dict[str, int]  # outcome → retried jobs whose record is that now


def accountings(
    arms: Sequence[str], trials: Sequence[Record], retried: Sequence[Record]
) -> Accountings:
    """Per arm (in ``arms`` order), the pass rate with errors excluded and as failures,
    and the retries; ``retried`` are the superseded error records."""
    ordinary: Counter[str] = Counter()
    errors: Counter[str] = Counter()
    passes: Counter[str] = Counter()
    for t in trials:
        if t.task_kind is not TaskKind.ORDINARY:
            continue
        ordinary[t.arm] += 1
        errors[t.arm] += t.outcome is Outcome.ERROR
        passes[t.arm] += t.passed
    per_arm = Counter(t.arm for t in retried)
    now = {t.job_id: t.outcome.value for t in trials}
    retried_jobs = {t.job_id for t in retried}
    return Accountings(
        arms=tuple(
            ArmAccounting(
                arm,
                errors[arm],
                Rate(passes[arm], ordinary[arm] - errors[arm]),
                Rate(passes[arm], ordinary[arm]),
                per_arm[arm],
            )
            for arm in arms
        ),
        retried=len(retried),
        retried_now=dict(sorted(Counter(now[j] for j in retried_jobs if j in now).items())),
    )


def retries_row(controls: Controls, retries: int, retried: Sequence[Record]) -> tuple[bool, str]:
    """The checklist's "retries zero in the headline run": how many retries the numbers rest
    on, whole-trial retries within trials (``max_retries``, ``retries`` in all) and error
    records run again by ``run --retry-errors`` (``retried``). Zero holds; so do retries
    within a policy the controls declared, and so hashed, before the run
    (``runtime.retry_errors``: each job run again at most ``max_per_job`` times)."""
    runtime = controls.runtime
    detail = f"max_retries {runtime.max_retries}, retries used {retries}"
    policy = runtime.retry_errors
    if policy is None and not retried:  # as reported before --retry-errors existed
        return runtime.max_retries == 0 and not retries, detail
    most = max(Counter(t.job_id for t in retried).values(), default=0)
    detail += f" within trials; {len(retried)} error record(s) run again by --retry-errors"
    if policy is None:
        return False, detail + ", under no retry policy of the controls (runtime.retry_errors)"
    within = most <= policy.max_per_job and runtime.max_retries <= policy.max_per_job
    return within, (
        detail + f" (at most {most} for one job), under the declared runtime.retry_errors: "
        f"max_per_job {policy.max_per_job}"
    )


def retried_text(retried: int, now: dict[str, int]) -> str:
    """The sentence that says what was retried and what those jobs' records are now."""
    if not retried:
        return "No error record was run again."
    outcomes = ", ".join(f"{count} {outcome}" for outcome, count in now.items())
    return (
        f"{retried} error record(s) were run again with `deltarun run --retry-errors` "
        f"(kept in trials.jsonl for audit; those jobs are now: {outcomes}); each job's "
        "newest record is scored."
    )


INTRO = (
    "Each arm's pass rate on its ordinary tasks with infrastructure errors left out (the "
    "pass rate everywhere else in this report) and with each error counted as a failure."
)
