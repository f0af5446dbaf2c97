"""The local executor: N trials at a time on a thread pool, each streamed to the ledger.

Trials spend their time waiting on the Docker engine, so threads are the right
tool. Ctrl-C: no new trial starts, running sandboxes are killed (their
``finally`` removes them), their partial results are discarded rather than
recorded as failures, every finished record stays, and the caller exits 130.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait

from runner.errors import DeltarunError
from runner.executors.contract import Interrupted, PreparedRun
from runner.records import Job, Trial
from runner.sandbox.base import SandboxFactory
from runner.sandbox.gateway_relay import LOCAL_ACCOUNTS
from runner.trees.inputs import LocalInputs
from runner.trial.env import trial_env
from runner.trial.execute import execute_trial

RunOne = Callable[[Job], Trial]


def run_local(
    jobs: Sequence[Job],
    run_one: RunOne,
    record: Callable[[Trial], None],
    *,
    parallel: int,
    on_interrupt: Callable[[], None],
    stopped: Callable[[], bool] = lambda: False,
) -> None:
    """Run ``jobs`` with ``parallel`` workers; ``record`` is called once per finished trial.
    Once ``stopped()`` (the run's budget is spent) no job starts; those running finish and
    are recorded, even after ``record`` said the budget is reached (its exception is raised
    once they are: what they spent is in the run directory, not lost with their sandboxes)."""
    cancelled = threading.Event()
    ended: list[Exception] = []  # what ``record`` raised once the run's budget was spent

    def guarded(job: Job) -> Trial | None:
        if cancelled.is_set():
            return None
        trial = run_one(job)
        return None if cancelled.is_set() else trial

    pool = ThreadPoolExecutor(max_workers=max(1, parallel), thread_name_prefix="trial")
    pending: set[Future[Trial | None]] = set()
    queue = list(jobs)
    queue.reverse()
    try:
        while queue or pending:
            if queue and stopped():
                queue.clear()  # the run's budget is spent: no trial starts after it
            while queue and len(pending) < max(1, parallel):
                pending.add(pool.submit(guarded, queue.pop()))
            done, pending = wait(pending, timeout=0.5, return_when=FIRST_COMPLETED)
            for future in done:
                trial = future.result()
                if trial is not None:
                    _record(record, trial, stopped, ended)
        if ended:
            raise ended[0]
    except KeyboardInterrupt:
        _stop(cancelled, pending, on_interrupt)
        raise Interrupted() from None
    except BaseException:
        _stop(cancelled, pending, on_interrupt)  # ``record`` stopped the run (a route mismatch)
        raise
    finally:
        pool.shutdown(wait=False, cancel_futures=True)


def _record(
    record: Callable[[Trial], None],
    trial: Trial,
    stopped: Callable[[], bool],
    ended: list[Exception],
) -> None:
    """Record ``trial``; once the run's budget is spent, what ``record`` raises waits in
    ``ended`` until the trials still running are recorded too (their gateways refuse them,
    so they end soon)."""
    try:
        record(trial)
    except Exception as exc:
        if not stopped() or isinstance(exc, DeltarunError | OSError):
            raise  # a record not written (OSError) is never passed over
        ended.append(exc)


def _stop(
    cancelled: threading.Event, pending: set[Future[Trial | None]], kill: Callable[[], None]
) -> None:
    """No new trial starts; running sandboxes are killed and their results discarded."""
    cancelled.set()
    kill()
    for future in pending:
        future.cancel()
    wait(pending, timeout=120)


class LocalExecutor:
    """The ``Executor`` of this machine: ``parallel`` trials at a time on a thread pool."""

    def __init__(self, run_one: RunOne, parallel: int, on_interrupt: Callable[[], None]) -> None:
        self.run_one = run_one
        self.parallel = parallel
        self.on_interrupt = on_interrupt

    def run(
        self, prepared: PreparedRun, record: Callable[[list[Trial], list[Trial]], None]
    ) -> None:
        run_id = prepared.meta.run_id
        run_local(
            prepared.todo,
            self.run_one,
            lambda trial: record([trial], []),
            parallel=self.parallel,
            on_interrupt=self.on_interrupt,
            stopped=lambda: LOCAL_ACCOUNTS.spent(run_id),
        )


def local_runner(
    prepared: PreparedRun, sandboxes: SandboxFactory, worker: str
) -> Callable[[Job], Trial]:
    """``execute_trial`` for the jobs of a prepared run, on this machine; with
    ``budget.run_usd``, the run's account in this process starts from what its records spent."""
    budget = prepared.loaded.controls.budget
    if budget is not None and budget.run_usd is not None:
        spent = sum(t.cost_usd or 0.0 for t in prepared.run_dir.scored_trials())
        LOCAL_ACCOUNTS.open(prepared.meta.run_id, budget.run_usd, spent)
    env = trial_env(
        prepared.loaded.controls,
        LocalInputs(prepared.suite, prepared.loaded.controls.runtime.archive_caps),
        sandboxes,
        worker,
        prepared.metrics,
        prepared.meta.image_digests,
    )

    def run_one(job: Job) -> Trial:
        return execute_trial(job, prepared.tasks[job.task_id], prepared.agents[job.arm], env)

    return run_one
