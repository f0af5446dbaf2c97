"""Running again the trials an infrastructure error left unscored: ``run --retry-errors``.

An ``error`` record says the engine, the network or deltarun failed, not the agent; it is
never a miss, and it leaves its job unscored. ``--retry-errors`` on an existing run
directory runs again only the jobs whose record is such an error (``plan_retry``), on the
local pool or through a broker, under the run's own protocol. The ledger stays append-only:
the new record is written after the error record, which stays in ``trials.jsonl`` for
audit; a job's record is then the new one (``runner.store.rundir``), and the report counts
the superseded error records as retried (``runner.report.accountings``).

A scored run is retried only under a policy its controls declared before it started
(``runtime.retry_errors: {max_per_job: N}``, part of the protocol hash): without one,
``--retry-errors`` is refused in one line (``check_retry``). With one, a job is run again
at most ``max_per_job`` times; an exploratory run without one has no limit.

The agent sees nothing of this: a job run again is the same job (id, prompt, sandbox,
environment); only the record's ``attempt`` says which attempt it was (``Recording``).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from runner.config.loader import load_controls
from runner.errors import UsageError, UserError
from runner.executors.contract import PreparedRun
from runner.records import Job, Outcome, Trial
from runner.store.rundir import RunDir


def check_retry(controls: Path, out: Path, until_decided: bool, root: Path | None = None) -> None:
    """What refuses ``--retry-errors`` before anything is run or written: no run directory
    to retry, ``--until-decided`` (its looks were taken on the records as they were), or a
    scored run whose controls declare no retry policy. One line each."""
    if until_decided:
        raise UsageError(
            "--retry-errors with --until-decided: the looks of a sequential run were taken "
            "on its records as they were; retry its errors without --until-decided"
        )
    if not RunDir(out).exists():
        raise UserError(
            f"--out {out}: no run directory to retry; --retry-errors runs again the error "
            "records of an existing run (start the run without it)"
        )
    loaded = load_controls(controls, root=root)
    if loaded.controls.channel == "scored" and loaded.controls.runtime.retry_errors is None:
        raise UserError(
            f"{controls}: runtime.retry_errors: a scored run is retried only under a policy "
            "its controls declared before it started (runtime.retry_errors: {max_per_job: N}, "
            "part of the protocol hash); without one its errors stay errors and max_retries 0"
        )


@dataclass(frozen=True)
class Retry:
    """The plan of a retry: the jobs to run (errors again, and with ``--resume`` those
    without a record), each error's attempt so far, and the errors left as they are."""

    todo: list[Job]
    attempts: dict[str, int]  # job id → ``attempt`` of its error record (``Recording``)
    unrecorded: int  # jobs without a record, run too (``--resume``)
    capped: int  # errors not run again: runtime.retry_errors.max_per_job reached
    max_per_job: int | None

    def notes(self) -> list[str]:
        """What the retry does, for the run's output."""
        lines = [
            f"retry: {len(self.attempts)} error record(s) to run again; the old records stay "
            "in trials.jsonl for audit and the report counts them as retried"
        ]
        if self.capped:
            lines.append(
                f"retry: {self.capped} error record(s) stay errors: already run again "
                f"{self.max_per_job} time(s) (runtime.retry_errors.max_per_job)"
            )
        return lines


def plan_retry(prepared: PreparedRun, resume: bool) -> Retry:
    """The jobs ``--retry-errors`` runs: each job whose record is an infrastructure error,
    within the policy's limit, and with ``resume`` the jobs without a record (which are
    refused without it: they were never run, so there is nothing to run *again*)."""
    policy = prepared.loaded.controls.runtime.retry_errors
    cap = policy.max_per_job if policy is not None else None
    current, retried = prepared.run_dir.records(_brief)
    times = Counter(job for job, _, _ in retried)
    errors = {job: attempt for job, outcome, attempt in current if outcome is Outcome.ERROR}
    again = {job: at for job, at in errors.items() if cap is None or times[job] < cap}
    recorded = {job for job, _, _ in current}
    unrecorded = {job.job_id for job in prepared.jobs if job.job_id not in recorded}
    if unrecorded and not resume:
        raise UserError(
            f"{prepared.run_dir.path}: {len(unrecorded)} job(s) have no record yet; "
            "--retry-errors runs again only jobs recorded as errors: add --resume to run "
            "those too"
        )
    wanted = again.keys() | unrecorded
    return Retry(
        todo=[job for job in prepared.jobs if job.job_id in wanted],
        attempts=again,
        unrecorded=len(unrecorded),
        capped=len(errors) - len(again),
        max_per_job=cap,
    )


def _brief(trial: Trial) -> tuple[str, Outcome, int]:
    return trial.job_id, trial.outcome, trial.attempt


def forget_done(broker_url: str, run_id: str, job_ids: list[str]) -> None:
    """Let workers run the jobs again: a run's Redis marks a job done at its first record
    (and a worker skips a done job); those marks of the jobs to retry go, with their start
    marks and any lease left. A finished run's marks are gone already; a killed run's stay."""
    if not job_ids:
        return
    from runner.distributed import keys
    from runner.distributed.connection import connect_redis

    client = connect_redis(broker_url)
    pipe = client.pipeline(transaction=True)
    pipe.hdel(keys.done(run_id), *job_ids)
    pipe.hdel(keys.started(run_id), *job_ids)
    pipe.delete(*(keys.lease(run_id, job_id) for job_id in job_ids))
    pipe.execute()
