"""``deltarun replay``: the report (and ``looks.json`` and the gate's ``decision.json``,
when the run has them)
rebuilt byte for byte, then (``--reverify``) the
hidden tests re-run on the stored patches; the lines to print, each as its step ends.

The suite a re-verification reads is found and checked (``run.reverify.reverify_inputs``)
before the report is replayed, so a missing or changed suite stops the command first.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

from runner.report.headline import headline
from runner.run.gate_files import replay_decision
from runner.run.looks_file import replay_looks
from runner.run.report_files import replay
from runner.run.reverify import reverify_inputs, reverify_run
from runner.store.changes import CHANGES, Changed
from runner.store.rundir import RunDir


def replay_steps(
    run_dir: Path,
    accept_edits: bool,
    reverify: bool,
    parallel: int,
    controls: Path | None,
    progress: Callable[[int, int], None],
) -> Iterator[str]:
    """Replay (exit 3 if the report differs), then re-verify when asked; ``progress``
    hears (done, total) of the re-verification."""
    run = RunDir(run_dir)
    inputs = reverify_inputs(run, controls) if reverify else None
    built = replay(run, accept_edits=accept_edits)
    yield from headline(built)
    yield from replay_looks(run, rewrite=accept_edits)
    yield from replay_decision(run, built, rewrite=accept_edits)
    state = "rebuilt, stamped as edited" if accept_edits else "identical"
    yield f"replay of {run_dir}: {state}"
    if inputs is None:
        return
    from runner.sandbox.docker import DockerSandboxFactory
    from runner.sandbox.engine import connect

    sandboxes = DockerSandboxFactory(connect())
    checked, changed, unkept = reverify_run(run, sandboxes, parallel, progress, inputs=inputs)
    yield f"reverify: {checked} verdicts re-run, {len(changed)} changed"
    yield from (_changed_line(item) for item in changed)
    if unkept is None:
        yield f"reverify: kept in {run_dir / CHANGES} (deltarun view marks the changed verdicts)"
    else:
        yield f"reverify: not kept for the viewer: {unkept}"


def _changed_line(item: Changed) -> str:
    t = item.trial
    was, now = ("pass" if t.passed else "fail"), ("pass" if item.now_passed else "fail")
    return f"  changed: {t.arm} {t.task_id} repeat {t.repeat}: {was} -> {now} (job {t.job_id[:12]})"
