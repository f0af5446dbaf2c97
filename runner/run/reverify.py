"""``deltarun replay RUN_DIR --reverify``: run every recorded patch's hidden test again.

Where the suite is read from, first match wins:

1. ``--controls PATH``: the suite (and every input) resolves from that controls
   file, which must hash to the run's protocol (exit 3 otherwise); a kit
   written by ``deltarun export`` passes its own controls.yaml;
2. run.json's ``controls_path``, when that file exists on this machine and the
   stored controls' ``suite.file`` resolves from its folder;
3. the run directory's own controls.yaml, when ``suite.file`` resolves from the
   run directory;

otherwise one line asks for ``--controls``. ``suite.file`` is held inside the folder it
resolves from (``runner.paths.inside``: a run directory from elsewhere is input, and a
``..``, absolute path or link out is refused, exit 2). The suite must have the run's digest
(exit 3 otherwise). Each verdict is re-checked in a fresh sandbox; every verdict
that changed is listed. Flaky verdicts are shown, never hidden; the ledger is not
modified.

What changed is kept beside the ledger (``runner.store.changes``); no report file is
touched.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from runner.config.controls import Controls
from runner.config.loader import load_controls
from runner.errors import DigestMismatch, ProtocolMismatch, UserError
from runner.paths import inside
from runner.records import RepoTask, Trial
from runner.store.changes import Changed, changes_json, keep_changes
from runner.store.rundir import RunDir, RunMeta, now_utc
from runner.suite.load import Suite, load_suite
from runner.trees.archives import ArchiveCaps

if TYPE_CHECKING:  # the trial machinery loads with reverify_run: the viewer reads CHANGES only
    from runner.sandbox.base import SandboxFactory


@dataclass(frozen=True)
class ReverifyInputs:
    """The controls and the digest-checked suite a re-verification runs with."""

    controls: Controls
    suite: Suite


def reverify_inputs(run_dir: RunDir, controls_path: Path | None = None) -> ReverifyInputs:
    """Find and check the run's suite (see the module docstring for the order)."""
    meta = run_dir.meta()
    if controls_path is not None:
        loaded = load_controls(controls_path)
        if loaded.protocol_sha256 != meta.protocol_sha256:
            raise ProtocolMismatch(
                f"{controls_path}: hashes to protocol {loaded.protocol_sha256}, not the run's "
                f"{meta.protocol_sha256}; pass the controls the run was made with (a kit's "
                "controls.yaml)"
            )
        return ReverifyInputs(
            loaded.controls,
            _checked_suite(loaded.suite_path, meta, loaded.controls.runtime.archive_caps),
        )
    controls = run_dir.stored_controls()
    bases: list[Path] = []
    if meta.controls_path and Path(meta.controls_path).is_file():
        bases.append(Path(meta.controls_path).resolve().parent)
    bases.append(run_dir.path.resolve())
    for base in bases:
        stored = run_dir.path / "controls.yaml"
        tasks_path = inside(base, controls.suite.file, file=stored, field="suite.file")
        if tasks_path.is_file():
            return ReverifyInputs(
                controls, _checked_suite(tasks_path, meta, controls.runtime.archive_caps)
            )
    recorded = meta.controls_path or "none recorded"
    raise UserError(
        f"{run_dir.path}: cannot find the suite: suite.file {controls.suite.file!r} resolves "
        f"neither from run.json's controls_path ({recorded}) nor from the run directory; "
        "pass --controls PATH (the run's controls.yaml beside its suite, e.g. a kit's)"
    )


def _checked_suite(tasks_path: Path, meta: RunMeta, caps: ArchiveCaps) -> Suite:
    suite = load_suite(tasks_path, meta.suite_sha256, caps)
    if suite.sha256 != meta.suite_sha256:
        raise DigestMismatch(
            f"{tasks_path}: digest {suite.sha256} is not the run's {meta.suite_sha256}"
        )
    return suite


def reverify_run(
    run_dir: RunDir,
    sandboxes: SandboxFactory,
    parallel: int,
    progress: Callable[[int, int], None] = lambda done, total: None,
    inputs: ReverifyInputs | None = None,
) -> tuple[int, list[Changed], str | None]:
    """(verdicts re-checked, verdicts that changed, why ``CHANGES`` could not be written or
    None: the changes are kept there); ``inputs`` from ``reverify_inputs``."""
    from runner.trees.inputs import LocalInputs
    from runner.trial.env import trial_env
    from runner.trial.verify_phase import reverify

    ran_at, ledger_sha256 = now_utc(), run_dir.ledger_sha256()
    if inputs is None:
        inputs = reverify_inputs(run_dir)
    controls, suite = inputs.controls, inputs.suite
    env = trial_env(
        controls, LocalInputs(suite, controls.runtime.archive_caps), sandboxes, "reverify"
    )
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
    try:
        keep_changes(run_dir, changes_json(ran_at, ledger_sha256, len(candidates), changed))
    except UserError as exc:  # the re-run's findings are still said; only the file is missing
        return len(candidates), changed, str(exc)
    return len(candidates), changed, None
