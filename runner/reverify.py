"""``deltarun replay RUN_DIR --reverify``: run every recorded patch's hidden test again.

The suite is read from where the run's controls were (``run.json``) and must
still have the run's digest (exit 3 otherwise). Each verdict is re-checked in
a fresh sandbox; every verdict that changed is listed. Flaky verdicts are shown,
never hidden; the ledger is not modified.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from runner.errors import DigestMismatch, UserError
from runner.inputs import LocalInputs
from runner.models import RepoTask, Trial
from runner.report.build import _stored_controls
from runner.run_service import trial_env
from runner.rundir import RunDir
from runner.sandbox.base import SandboxFactory
from runner.suite import load_suite
from runner.trial import reverify


@dataclass(frozen=True)
class Changed:
    trial: Trial
    now_passed: bool


def reverify_run(
    run_dir: RunDir,
    sandboxes: SandboxFactory,
    parallel: int,
    progress: Callable[[int, int], None] = lambda done, total: None,
) -> tuple[int, list[Changed]]:
    """(verdicts re-checked, verdicts that changed)."""
    meta = run_dir.meta()
    controls = _stored_controls(run_dir)
    if not meta.controls_path:
        raise UserError(
            f"{run_dir.path}/run.json: no controls path recorded; cannot find the suite"
        )
    tasks_path = (Path(meta.controls_path).parent / controls.suite.file).resolve()
    suite = load_suite(tasks_path, meta.suite_sha256)
    if suite.sha256 != meta.suite_sha256:
        raise DigestMismatch(
            f"{tasks_path}: digest {suite.sha256} is not the run's {meta.suite_sha256}"
        )
    env = trial_env(controls, LocalInputs(suite), sandboxes, "reverify")
    candidates = [
        t
        for t in run_dir.trials()
        if isinstance(suite.task(t.task_id), RepoTask) and t.outcome.value in ("success", "miss")
    ]
    changed: list[Changed] = []
    done = 0

    def check(trial: Trial) -> tuple[Trial, bool | None]:
        task = suite.task(trial.task_id)
        assert isinstance(task, RepoTask)
        return trial, reverify(trial, task, env)

    with ThreadPoolExecutor(max_workers=max(1, parallel)) as pool:
        for trial, verdict in pool.map(check, candidates):
            done += 1
            progress(done, len(candidates))
            if verdict is not None and verdict != trial.passed:
                changed.append(Changed(trial, verdict))
    return len(candidates), changed
