"""``deltarun validate``: each task's hidden test on the bare fixture and with the gold patch.

The checks are real trials through ``execute_trial``, in the task's own image and
sandbox under the controls' limits and grading policy: the bare side is the no-op
agent, the gold side replays ``<task_id>.diff`` from the gold directory, exactly as
a ``patch`` arm would. Verdicts come from ``runner.validation``; the result is
written to ``validation.json`` beside ``tasks.jsonl`` and its SHA-256 printed.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from runner.agents.base import Agent
from runner.agents.replay import Replay
from runner.agents.scripted import Scripted
from runner.archives import members_from_dir, tree_digest
from runner.config.loader import load_controls
from runner.config.model import Controls, PatchAgent
from runner.errors import UserError
from runner.executors.local import run_local
from runner.hashing import sha256_file
from runner.inputs import LocalInputs
from runner.models import Job, RepoTask, TaskKind, Trial
from runner.run_service import trial_env
from runner.sandbox.docker import DockerSandboxFactory
from runner.sandbox.engine import connect, image_id
from runner.suite import load_suite
from runner.trial import execute_trial, image_of
from runner.validation import FINE, VALIDATION_NAME, Check, Verdict, check_of, classify

BARE, GOLD = "bare", "gold"


@dataclass(frozen=True)
class Validation:
    """What ``validate`` found: one verdict per task, and where it was written."""

    verdicts: dict[str, Verdict]
    path: Path
    sha256: str

    @property
    def invalid(self) -> dict[str, Verdict]:
        return {k: v for k, v in self.verdicts.items() if v.verdict not in FINE}


def resolve(target: Path, gold: Path | None) -> tuple[Controls, Path, Path | None]:
    """(controls, tasks.jsonl, gold directory) of a controls file, suite dir or tasks file.

    Without ``--gold``, a controls file's patch arm named ``gold`` is the gold."""
    if target.suffix in (".yaml", ".yml"):
        loaded = load_controls(target)
        if gold is None:
            arm = next((a for a in loaded.controls.arms if a.name == "gold"), None)
            if arm is not None and isinstance(arm.agent, PatchAgent):
                gold = (loaded.base / arm.agent.dir).resolve()
        return loaded.controls, loaded.suite_path, gold
    tasks = target / "tasks.jsonl" if target.is_dir() else target
    if not tasks.is_file():
        raise UserError(
            f"{target}: not found; pass a suite directory, tasks.jsonl or controls.yaml"
        )
    controls = Controls.model_validate(
        {
            "protocol_id": "validate",
            "suite": {"file": str(tasks)},
            "arms": [
                {"name": BARE, "control": True, "agent": {"type": "scripted", "action": "noop"}}
            ],
        }
    )
    return controls, tasks, gold


def validate(
    target: Path,
    gold_dir: Path | None,
    repeats: int,
    parallel: int,
    progress: Callable[[str], None],
) -> Validation:
    controls, tasks_path, gold_dir = resolve(target, gold_dir)
    pinned = controls.suite.sha256 or None
    suite = load_suite(tasks_path, pinned, controls.runtime.archive_caps)
    gold_members = []
    if gold_dir is not None:
        if not gold_dir.is_dir():
            raise UserError(f"{gold_dir}: gold directory not found; pass --gold DIR")
        gold_members = members_from_dir(gold_dir)
    gold_files = {m.path for m in gold_members if not m.is_dir}
    tasks = {task.id: task for task in suite.tasks}
    client = connect()
    # A missing image: one line naming how to build it, before any sandbox.
    images = {i: image_id(client, i) for i in sorted({image_of(t, controls) for t in suite.tasks})}
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    run_id = f"validate-{stamp}"
    jobs: list[Job] = []
    for task in suite.tasks:
        if not isinstance(task, RepoTask) or task.kind is TaskKind.NEGATIVE:
            continue
        sides = [BARE, GOLD] if f"{task.id}.diff" in gold_files else [BARE]
        for side in sides:
            for repeat in range(repeats):
                job_id = f"{run_id}-{task.id}-{side}-{repeat}"
                jobs.append(
                    Job(
                        job_id=job_id,
                        run_id=run_id,
                        protocol_sha256="validate",
                        task_id=task.id,
                        arm=side,
                        repeat=repeat,
                    )
                )
    factory = DockerSandboxFactory(client, worker="validate")
    env = trial_env(
        controls, LocalInputs(suite, controls.runtime.archive_caps), factory, "validate"
    )
    agents: dict[str, Agent] = {BARE: Scripted("noop"), GOLD: Replay(gold_members)}
    found: list[Trial] = []

    def one(job: Job) -> Trial:
        return execute_trial(job, tasks[job.task_id], agents[job.arm], env)

    def record(trial: Trial) -> None:
        found.append(trial)
        verdict = "pass" if trial.passed else ("error" if trial.error else "fail")
        progress(f"[{len(found)}/{len(jobs)}] {trial.task_id} {trial.arm}: {verdict}")

    if gold_dir is None:
        progress("no gold patches (--gold DIR, or a patch arm named gold): bare side only")
    run_local(jobs, one, record, parallel=parallel, on_interrupt=factory.kill_all)
    checks: dict[tuple[str, str], list[Check]] = {}
    for trial in sorted(found, key=lambda t: (t.task_id, t.arm, t.repeat)):
        task = tasks[trial.task_id]
        assert isinstance(task, RepoTask)
        checks.setdefault((trial.task_id, trial.arm), []).append(
            check_of(trial, task, trial.arm == GOLD)
        )
    verdicts: dict[str, Verdict] = {}
    for task in suite.tasks:
        gold = checks.get((task.id, GOLD)) if f"{task.id}.diff" in gold_files else None
        verdicts[task.id] = classify(task, checks.get((task.id, BARE), []), gold)
    document = {
        "schema_version": 1,
        "suite_sha256": sha256_file(tasks_path),
        "repeats": repeats,
        "gold_dir": str(gold_dir) if gold_dir else None,
        "gold_sha256": tree_digest(gold_members) if gold_dir else None,
        "images": images,
        "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "tasks": [
            {
                "id": task_id,
                "verdict": verdict.verdict,
                "detail": verdict.detail,
                "bare": [c.as_json() for c in checks.get((task_id, BARE), [])],
                "gold": [c.as_json() for c in checks.get((task_id, GOLD), [])],
            }
            for task_id, verdict in verdicts.items()
        ],
    }
    path = tasks_path.parent / VALIDATION_NAME
    data = (json.dumps(document, indent=2, sort_keys=True) + "\n").encode()
    _write_atomic(path, data)
    return Validation(verdicts, path, sha256_file(path))


def _write_atomic(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
