"""``deltarun validate``: each task's hidden test on the bare fixture and with the gold patch.

Validation is a run like any other, so it goes wherever runs go (here, or to Celery
workers with ``--broker``) and leaves the same evidence. ``plan`` writes its controls
into ``.deltarun-validate/`` beside ``tasks.jsonl``: the suite's own runtime and tools
(limits, images, grading policy), ``runtime.repeats`` = n, two arms, ``bare`` (the
no-op control) and ``gold`` (a ``patch`` arm on the gold directory, replayed as any
recorded arm is), and every task but the ordinary repository tasks excluded.
``conclude`` reads the run's records, gives each task its verdict
(``runner.grading.validation``) and writes ``validation.json`` beside ``tasks.jsonl``.
``validate`` does all three through the run service.

Everything it writes into the suite goes through real folders (``runner.paths.writable``:
a link the suite ships at ``validation.json``, ``.deltarun-validate/`` or inside it is
refused before anything runs). Its own controls name the suite and the gold from inside
``.deltarun-validate/``, so they are loaded with ``root`` the folder holding both, which
the user's controls (or command line) already named.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from runner.atomic import write_atomic
from runner.config.arms import PatchAgent
from runner.config.controls import Controls
from runner.config.loader import load_controls
from runner.errors import UserError
from runner.grading.validation import FINE, Check, Verdict, check_of, classify
from runner.hashing import sha256_file
from runner.paths import inside, own_folder, writable
from runner.records import RepoTask, Task, TaskKind
from runner.store.rundir import RunDir
from runner.suite.load import load_suite
from runner.suite.sealing import VALIDATION_NAME
from runner.trees.archives import members_from_dir, tree_digest

if TYPE_CHECKING:
    from runner.distributed.credentials import Broker
    from runner.run.service import RunService

BARE, GOLD = "bare", "gold"
WORK_DIR = ".deltarun-validate"


@dataclass(frozen=True)
class Plan:
    """A validation to run: its controls, where its run goes, what it checks."""

    controls: Path
    run_dir: Path
    root: Path  # what the validation's own controls may name: the suite and the gold
    tasks_path: Path
    tasks: tuple[Task, ...]
    gold_dir: Path | None
    gold_tasks: frozenset[str]  # tasks the gold directory has a .diff for
    repeats: int


@dataclass(frozen=True)
class Validation:
    """What ``validate`` found: one verdict per task, and where it was written."""

    verdicts: dict[str, Verdict]
    path: Path
    sha256: str

    @property
    def invalid(self) -> dict[str, Verdict]:
        return {k: v for k, v in self.verdicts.items() if v.verdict not in FINE}

    def table(self) -> list[str]:
        """One line per task: its id, verdict and why."""
        width = max((len(t) for t in self.verdicts), default=4)
        return [f"{k:{width}}  {v.verdict:20}  {v.detail}" for k, v in self.verdicts.items()]

    def require_valid(self) -> None:
        """``UserError`` (exit 1) naming each task that is not valid, if any."""
        if self.invalid:
            listed = ", ".join(f"{k} ({v.verdict})" for k, v in self.invalid.items())
            raise UserError(
                f"{len(self.invalid)} of {len(self.verdicts)} tasks are not valid: {listed}"
            )


def resolve(target: Path, gold: Path | None) -> tuple[Controls, Path, Path | None]:
    """(controls, tasks.jsonl, gold directory) of a controls file, suite dir or tasks file.

    Without ``--gold``, a controls file's patch arm named ``gold`` is the gold, else a
    ``gold/`` directory beside it (as ``deltarun import`` writes). A directory holding
    controls.yaml and no tasks.jsonl is taken as that controls file."""
    folder = target.is_dir() and not (target / "tasks.jsonl").is_file()
    if folder and (target / "controls.yaml").is_file():
        target = target / "controls.yaml"
    if target.suffix in (".yaml", ".yml"):
        loaded = load_controls(target)
        if gold is None:
            arm = next((a for a in loaded.controls.arms if a.name == "gold"), None)
            if arm is not None and isinstance(arm.agent, PatchAgent):
                gold = loaded.agent_dir(arm)
            elif (loaded.base / "gold").is_dir():  # beside it, held inside like any path
                gold = inside(loaded.base, "gold", file=loaded.path, field="gold (beside it)")
        return loaded.controls, loaded.suite_path, gold
    if target.is_dir():
        tasks = inside(target, "tasks.jsonl", file=target, field="tasks.jsonl")
    else:  # held in its folder: a link out would make another suite's folder the one written
        tasks = inside(target.parent, target.name, file=target, field="tasks.jsonl")
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


def plan(target: Path, gold_dir: Path | None, repeats: int) -> Plan:
    """Check the suite and write the validation's controls; nothing runs yet."""
    controls, tasks_path, gold_dir = resolve(target, gold_dir)
    suite = load_suite(tasks_path, controls.suite.sha256 or None, controls.runtime.archive_caps)
    gold_files: set[str] = set()
    if gold_dir is not None:
        if not gold_dir.is_dir():
            raise UserError(f"{gold_dir}: gold directory not found; pass --gold DIR")
        gold_files = {m.path for m in members_from_dir(gold_dir) if not m.is_dir}
    checked = [t.id for t in suite.tasks if _checked(t)]
    if not checked:
        raise UserError(f"{tasks_path}: no ordinary repository task to validate")
    folder = tasks_path.resolve().parent
    writable(folder, VALIDATION_NAME, what="deltarun validate writes its verdicts")
    work = own_folder(folder, WORK_DIR, what="deltarun validate keeps its checks")
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    run_dir = writable(work, f"run-{stamp}", what="deltarun validate runs its checks")
    path = writable(work, "controls.yaml", what="deltarun validate writes its controls")
    arms: list[dict[str, Any]] = [
        {"name": BARE, "control": True, "agent": {"type": "scripted", "action": "noop"}}
    ]
    if gold_dir is not None:
        relative = os.path.relpath(gold_dir.resolve(), work)
        arms.append({"name": GOLD, "agent": {"type": "patch", "dir": relative}})
    runtime = controls.runtime.model_dump(mode="json", by_alias=True, exclude_none=True)
    runtime.update(repeats=repeats, max_retries=0, network="none")
    suite_ref: dict[str, Any] = {
        "file": os.path.relpath(tasks_path.resolve(), work),
        "sha256": sha256_file(tasks_path),
    }
    excluded = [t.id for t in suite.tasks if not _checked(t)]
    if excluded:
        suite_ref["exclude"] = excluded
    document = {
        "protocol_id": f"validate-{controls.protocol_id}",
        "channel": "exploratory",
        "suite": suite_ref,
        "runtime": runtime,
        "tools": controls.tools.model_dump(mode="json", by_alias=True, exclude_none=True),
        "images": dict(controls.images),
        "arms": arms,
    }
    write_atomic(path, yaml.safe_dump(document, sort_keys=False).encode())
    held = [folder, gold_dir.resolve()] if gold_dir is not None else [folder]
    return Plan(
        controls=path,
        run_dir=run_dir,
        root=Path(os.path.commonpath(held)),
        tasks_path=tasks_path,
        tasks=suite.tasks,
        gold_dir=gold_dir,
        gold_tasks=frozenset(t for t in checked if f"{t}.diff" in gold_files),
        repeats=repeats,
    )


def _checked(task: Task) -> bool:
    return isinstance(task, RepoTask) and task.kind is TaskKind.ORDINARY


def conclude(plan: Plan) -> Validation:
    """Each task's verdict from the run's records; ``validation.json`` written."""
    run = RunDir(plan.run_dir)
    tasks = {t.id: t for t in plan.tasks}
    checks: dict[tuple[str, str], list[Check]] = {}
    for trial in sorted(run.trials(), key=lambda t: (t.task_id, t.arm, t.repeat)):
        task = tasks[trial.task_id]
        if isinstance(task, RepoTask):
            side = checks.setdefault((trial.task_id, trial.arm), [])
            side.append(check_of(trial, task, trial.arm == GOLD))
    verdicts: dict[str, Verdict] = {}
    for task in plan.tasks:
        gold = checks.get((task.id, GOLD), []) if task.id in plan.gold_tasks else None
        verdicts[task.id] = classify(task, checks.get((task.id, BARE), []), gold)
    gold_dir = plan.gold_dir
    document = {
        "schema_version": 1,
        "suite_sha256": sha256_file(plan.tasks_path),
        "repeats": plan.repeats,
        "gold_dir": str(gold_dir) if gold_dir else None,
        "gold_sha256": tree_digest(members_from_dir(gold_dir)) if gold_dir else None,
        "images": run.meta().image_digests,
        "run_dir": str(plan.run_dir),
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
    path = writable(
        plan.tasks_path.resolve().parent,
        VALIDATION_NAME,
        what="deltarun validate writes its verdicts",
    )
    write_atomic(path, (json.dumps(document, indent=2, sort_keys=True) + "\n").encode())
    return Validation(verdicts, path, sha256_file(path))


def validate(
    target: Path,
    gold: Path | None,
    repeats: int,
    service: RunService,
    *,
    parallel: int = 2,
    broker: Broker | None = None,
    job_key: bytes | None = None,
) -> Validation:
    """Plan, run (here, or on workers with ``broker``) and conclude a validation."""
    from runner.run.service import RunOptions

    planned = plan(target, gold, repeats)
    if planned.gold_dir is None:
        service.events.note(
            "no gold patches (--gold DIR, or a patch arm named gold): bare side only"
        )
    options = RunOptions(
        out_dir=planned.run_dir,
        parallel=parallel,
        broker=broker,
        job_key=job_key,
        allow_missing=True,  # a task without a gold patch is checked on its bare side only
        setup_flags=False,
        root=planned.root,
    )
    prepared = service.prepare(planned.controls, options)
    service.events.note(f"validate: {len(prepared.jobs)} checks, run {prepared.run_dir.path}")
    service.execute(prepared, options)
    return conclude(planned)
