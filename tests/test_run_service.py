"""The run's recording and stop rule (``runner.run.service``), without Docker.

A ``PreparedRun`` is built by ``prepare`` over a small suite, with the image
digest given and no preflight (no sandbox starts); records are written into its
run directory as an executor would hand them back.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from runner.config.controls import Budget
from runner.errors import RouteMismatch
from runner.executors.contract import PreparedRun
from runner.records import Job, Outcome, TaskKind, Trial
from runner.run.prepare import prepare
from runner.run.recording import BudgetReached, Recording, describe
from runner.store.rundir import DUPLICATES
from runner.trial.env import stop_reason
from runner.trial.record import bare_record
from tests.helpers import PY_IMAGE, make_suite, pin_validation, repo_task

ARMS: list[dict[str, Any]] = [
    {"name": "ctrl", "control": True, "agent": {"type": "scripted", "action": "noop"}},
    {"name": "model", "agent": {"type": "openai", "max_turns": 4}},
]
MISMATCH = "the endpoint answered as 'other-model'; the route pins 'qwen-test'"


def prepared_run(root: Path, channel: str) -> PreparedRun:
    controls = make_suite(
        root,
        [repo_task("t1"), repo_task("t2")],
        ARMS,
        route={"base_url": "http://127.0.0.1:9/v1", "model": "qwen-test"},
        channel=channel,
    )
    if channel == "scored":
        pin_validation(controls)
    controls.write_text(controls.read_text() + f"images:\n  {PY_IMAGE}: sha256:x\n")
    return prepare(controls, root / "run", resume=False, image_digest=lambda image: "sha256:x")


def record(job: Job, outcome: Outcome = Outcome.MISS, *, mismatch: bool = False) -> Trial:
    """The record an executor hands back for ``job``."""
    at = datetime(2026, 12, 1, tzinfo=UTC)
    return bare_record(
        job,
        TaskKind.ORDINARY,
        Outcome.ERROR if mismatch else outcome,
        "test",
        at,
        at,
        wall_s=1.0,
        error=MISMATCH if mismatch else None,
        route_mismatch=mismatch,
        stop_reason="route_mismatch" if mismatch else "submit",
    )


def job_of(prepared: PreparedRun, arm: str, task_id: str = "t1") -> Job:
    return next(j for j in prepared.jobs if j.arm == arm and j.task_id == task_id)


def test_stop_reason_is_a_route_mismatch_in_the_scored_channel_only(tmp_path: Path) -> None:
    scored = prepared_run(tmp_path / "scored", "scored").loaded.controls
    exploratory = prepared_run(tmp_path / "exploratory", "exploratory").loaded.controls
    job = Job(job_id="j", run_id="r", protocol_sha256="p", task_id="t1", arm="model", repeat=0)
    assert stop_reason(record(job, mismatch=True), scored) == f"model on t1: {MISMATCH}"
    assert stop_reason(record(job, mismatch=True), exploratory) is None
    assert stop_reason(record(job, Outcome.SUCCESS), scored) is None


def test_a_route_mismatch_stops_a_scored_run_and_its_record_is_kept(tmp_path: Path) -> None:
    prepared = prepared_run(tmp_path, "scored")
    seen: list[str] = []
    recording = Recording(prepared, on_trial=lambda trial: seen.append(trial.job_id))
    first = record(job_of(prepared, "ctrl"))
    recording.batch([first], [])
    mismatched = record(job_of(prepared, "model"), mismatch=True)
    with pytest.raises(RouteMismatch) as raised:
        recording.batch([mismatched], [])
    assert "model on t1" in str(raised.value) and "other-model" in str(raised.value)
    assert str(prepared.run_dir.ledger_path) in str(raised.value)
    assert raised.value.exit_code == 3
    ledger = prepared.run_dir.trials()
    assert [t.job_id for t in ledger] == [first.job_id, mismatched.job_id]  # kept
    assert ledger[1].route_mismatch
    assert seen == [first.job_id] and recording.recorded == 1  # it stopped, uncounted


def test_a_route_mismatch_does_not_stop_an_exploratory_run(tmp_path: Path) -> None:
    prepared = prepared_run(tmp_path, "exploratory")
    seen: list[str] = []
    recording = Recording(prepared, on_trial=lambda trial: seen.append(trial.job_id))
    mismatched = record(job_of(prepared, "model"), mismatch=True)
    later = record(job_of(prepared, "model", "t2"), Outcome.SUCCESS)
    recording.batch([mismatched], [])
    recording.batch([later], [])
    assert seen == [mismatched.job_id, later.job_id]
    assert recording.finished["model"] == 2 and recording.passes["model"] == 1
    assert [t.job_id for t in prepared.run_dir.trials()] == seen


def test_duplicates_are_kept_aside_and_never_counted(tmp_path: Path) -> None:
    prepared = prepared_run(tmp_path, "scored")
    seen: list[str] = []
    recording = Recording(prepared, on_trial=lambda trial: seen.append(trial.job_id))
    job = job_of(prepared, "model")
    fresh = record(job, Outcome.MISS)
    again = record(job, Outcome.SUCCESS)  # a second delivery of the same job
    mismatched = record(job_of(prepared, "model", "t2"), mismatch=True)
    recording.batch([fresh], [again, mismatched])  # a duplicate never stops the run either
    assert seen == [fresh.job_id]
    assert recording.finished["model"] == 1 and recording.passes["model"] == 0
    assert [t.outcome for t in prepared.run_dir.trials()] == [Outcome.MISS]
    aside = (prepared.run_dir.path / DUPLICATES).read_text().splitlines()
    assert [Trial.model_validate_json(line).job_id for line in aside] == [
        again.job_id,
        mismatched.job_id,
    ]
    # A resumed run counts what its ledger holds, and nothing kept aside.
    resumed = Recording(prepared)
    assert resumed.recorded == 1 and resumed.passes["model"] == 0
    assert describe(["ctrl", "model"], resumed) == "ctrl 0/0 · model 0/1"


def test_the_run_budget_stops_new_trials_and_counts_what_resumed_runs_spent(
    tmp_path: Path,
) -> None:
    prepared = prepared_run(tmp_path, "exploratory")
    budget = prepared.loaded.controls.model_copy(update={"budget": Budget(run_usd=1.0)})
    prepared.loaded.controls = budget
    recording = Recording(prepared)
    first = record(job_of(prepared, "model", "t1")).model_copy(update={"cost_usd": 0.6})
    recording.batch([first], [])  # under the budget: the run goes on
    second = record(job_of(prepared, "model", "t2")).model_copy(update={"cost_usd": 0.5})
    with pytest.raises(BudgetReached):
        recording.batch([second], [])
    assert recording.recorded == 2  # the record that crossed the budget is kept
    assert Recording(prepared).spent_usd == pytest.approx(1.1)  # a resumed run starts spent
