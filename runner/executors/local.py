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

from runner.executors.contract import Interrupted, PreparedRun
from runner.records import Job, Trial
from runner.sandbox.base import SandboxFactory
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
) -> None:
    """Run ``jobs`` with ``parallel`` workers; ``record`` is called once per finished trial."""
    cancelled = threading.Event()

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
            while queue and len(pending) < max(1, parallel):
                pending.add(pool.submit(guarded, queue.pop()))
            done, pending = wait(pending, timeout=0.5, return_when=FIRST_COMPLETED)
            for future in done:
                trial = future.result()
                if trial is not None:
                    record(trial)
    except KeyboardInterrupt:
        _stop(cancelled, pending, on_interrupt)
        raise Interrupted() from None
    except BaseException:
        _stop(cancelled, pending, on_interrupt)  # ``record`` stopped the run (a route mismatch)
        raise
    finally:
        pool.shutdown(wait=False, cancel_futures=True)


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
        run_local(
            prepared.todo,
            self.run_one,
            lambda trial: record([trial], []),
            parallel=self.parallel,
            on_interrupt=self.on_interrupt,
        )


def local_runner(
    prepared: PreparedRun, sandboxes: SandboxFactory, worker: str
) -> Callable[[Job], Trial]:
    """``execute_trial`` for the jobs of a prepared run, on this machine."""
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
