"""Recording a run's records as they arrive: each batch into the run directory (a job run
again by ``--retry-errors`` after the error record it supersedes), passes counted per arm,
and the two rules that stop a run (a route mismatch in the scored channel,
the run's dollar budget spent)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from runner.errors import RouteMismatch
from runner.executors.contract import PreparedRun
from runner.records import Trial
from runner.trial.env import stop_reason

if TYPE_CHECKING:
    pass


@dataclass
class Recording:
    """Records each batch into the run directory; counts passes per arm; stops a scored run
    at a route mismatch (the record is kept). ``on_trial`` sees every counted record."""

    prepared: PreparedRun
    on_trial: Callable[[Trial], None] = lambda trial: None
    finished: Counter[str] = field(default_factory=Counter)
    passes: Counter[str] = field(default_factory=Counter)

    spent_usd: float = 0.0  # priced trials' dollars, for budget.run_usd
    # ``run --retry-errors``: job id → ``attempt`` of the error record a new one supersedes
    # (``runner.run.retry``); that record was counted, the new one takes its place
    retrying: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        current, retried = self.prepared.run_dir.scored_ledger()
        for trial in current:
            self.finished[trial.arm] += 1
            self.passes[trial.arm] += int(trial.passed)
            self.spent_usd += trial.cost_usd or 0.0
        self.spent_usd += sum(t.cost_usd or 0.0 for t in retried)  # spent, though superseded

    @property
    def recorded(self) -> int:
        return sum(self.finished.values())

    def batch(self, fresh: list[Trial], duplicates: list[Trial]) -> None:
        """Append a batch, fsync'd: ``fresh`` records are the first of their job (the
        executor knows: the local pool runs each job once, the Celery coordinator keeps the
        set of pending jobs); ``duplicates`` are kept aside for audit, never counted. A new
        record of a job run again after an error carries its attempt over all its runs."""
        fresh = [self._attempt(trial) for trial in fresh]
        self.prepared.run_dir.write_records(fresh, duplicates)
        for trial in fresh:
            self._count(trial)

    def _attempt(self, trial: Trial) -> Trial:
        before = self.retrying.get(trial.job_id)
        if before is None:
            return trial
        return trial.model_copy(update={"attempt": before + trial.attempt})

    def _count(self, trial: Trial) -> None:
        if self.retrying.pop(trial.job_id, None) is not None:
            self.finished[trial.arm] -= 1  # its error record was counted; this one replaces it
        reason = stop_reason(trial, self.prepared.loaded.controls)
        if reason is not None:
            raise RouteMismatch(
                f"{reason}; a scored run stops at a reply from another model than the route "
                f"pins (the record is kept in {self.prepared.run_dir.ledger_path})"
            )
        self.finished[trial.arm] += 1
        self.passes[trial.arm] += int(trial.passed)
        self.spent_usd += trial.cost_usd or 0.0
        self.on_trial(trial)
        budget = self.prepared.loaded.controls.budget
        if budget is not None and budget.run_usd is not None and self.spent_usd >= budget.run_usd:
            raise BudgetReached(budget.run_usd)


class BudgetReached(Exception):
    """The run's dollar budget is spent: no further trial starts (not an error: the
    records so far are the run, and the report says the budget ended it)."""


def describe(arms: Sequence[str], recording: Recording) -> str:
    """Passes per arm so far: ``ctrl 3/12 · cand 7/12``."""
    return " · ".join(f"{arm} {recording.passes[arm]}/{recording.finished[arm]}" for arm in arms)
