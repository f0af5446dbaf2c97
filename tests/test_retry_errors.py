"""``run --retry-errors`` without Docker: the ledger's newest-record rule, the retry plan and
its policy, the report's two accountings and retries row, replay, and the refusals.

Records are written into a real run directory (made by ``prepare``, no sandbox) as an
executor hands them back; the report, replay and the refusals go through the real command.
"""

from __future__ import annotations

import json
import shutil
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from runner.config.loader import load_controls, protocol_hash, scored_channel_problems
from runner.errors import UserError
from runner.executors.contract import PreparedRun
from runner.records import Job, Outcome, TaskKind, Trial
from runner.run.prepare import prepare
from runner.run.recording import Recording
from runner.run.retry import plan_retry
from runner.store.rundir import RunDir
from runner.trial.record import bare_record
from tests.conftest import run_cli
from tests.helpers import PY_IMAGE, make_suite, pin_validation, repo_task

FIXTURES = Path(__file__).parent / "fixtures"
ARMS: list[dict[str, Any]] = [
    {"name": "ctrl", "control": True, "agent": {"type": "scripted", "action": "noop"}},
    {"name": "cand", "agent": {"type": "scripted", "action": "noop"}},
]


def prepared_run(
    root: Path, channel: str = "exploratory", runtime: dict[str, Any] | None = None
) -> PreparedRun:
    controls = make_suite(
        root, [repo_task("t1"), repo_task("t2")], ARMS, channel=channel, runtime=runtime
    )
    if channel == "scored":
        pin_validation(controls)
    controls.write_text(controls.read_text() + f"images:\n  {PY_IMAGE}: sha256:x\n")
    return prepare(controls, root / "run", resume=False, image_digest=lambda image: "sha256:x")


def record(job: Job, outcome: Outcome, **fields: Any) -> Trial:
    at = datetime(2026, 12, 1, tzinfo=UTC)
    error = "SandboxError: the engine went away" if outcome is Outcome.ERROR else None
    return bare_record(
        job, TaskKind.ORDINARY, outcome, "test", at, at, wall_s=1.0, error=error, **fields
    )


def job_of(prepared: PreparedRun, arm: str, task_id: str) -> Job:
    return next(j for j in prepared.jobs if j.arm == arm and j.task_id == task_id)


def first_run(prepared: PreparedRun) -> dict[str, Job]:
    """ctrl t1 errors, the rest scored: ctrl t2 miss, cand t1 success, cand t2 success."""
    jobs = {
        f"{arm} {task}": job_of(prepared, arm, task)
        for arm in ("ctrl", "cand")
        for task in ("t1", "t2")
    }
    outcomes = {
        "ctrl t1": Outcome.ERROR,
        "ctrl t2": Outcome.MISS,
        "cand t1": Outcome.SUCCESS,
        "cand t2": Outcome.SUCCESS,
    }
    spent = {"ctrl t1": 0.5}  # the errored trial had paid for model calls
    recording = Recording(prepared)
    recording.batch([record(jobs[n], outcomes[n], cost_usd=spent.get(n)) for n in outcomes], [])
    return jobs


def retry(prepared: PreparedRun, *trials: Trial, resume: bool = False) -> Recording:
    """What ``RunService.execute`` does with a retry's records."""
    plan = plan_retry(prepared, resume)
    recording = Recording(prepared, retrying=dict(plan.attempts))
    recording.batch(list(trials), [])
    return recording


def test_a_later_record_supersedes_only_an_error_and_the_error_stays(tmp_path: Path) -> None:
    prepared = prepared_run(tmp_path)
    jobs = first_run(prepared)
    again = record(jobs["ctrl t1"], Outcome.SUCCESS, attempt=1, cost_usd=0.25)
    recording = retry(prepared, again)
    assert recording.recorded == 4 and recording.passes["ctrl"] == 1  # replaced, not added
    run_dir = RunDir(prepared.run_dir.path)
    lines = [json.loads(line) for line in run_dir.ledger_path.read_text().splitlines()]
    assert [line["outcome"] for line in lines] == ["error", "miss", "success", "success", "success"]
    current, retried = run_dir.records(lambda t: t)
    assert len(current) == 4
    now = next(t for t in current if t.job_id == jobs["ctrl t1"].job_id)
    assert now.outcome is Outcome.SUCCESS and now.attempt == 2  # its attempt over all runs
    assert [(t.job_id, t.outcome) for t in retried] == [(jobs["ctrl t1"].job_id, Outcome.ERROR)]
    # What the error's trial spent stays spent when a resumed run counts its budget.
    assert Recording(prepared).spent_usd == pytest.approx(0.75)
    # A later line after a record that is not an error changes nothing: the first stands.
    run_dir.write_records([record(jobs["ctrl t2"], Outcome.SUCCESS)], [])
    current, retried = RunDir(run_dir.path).records(lambda t: t)
    assert next(t for t in current if t.job_id == jobs["ctrl t2"].job_id).outcome is Outcome.MISS
    assert len(retried) == 1


def test_plan_retry_takes_only_errors_within_the_policy(tmp_path: Path) -> None:
    prepared = prepared_run(tmp_path, runtime={"retry_errors": {"max_per_job": 1}})
    jobs = first_run(prepared)
    plan = plan_retry(prepared, resume=False)
    assert [j.job_id for j in plan.todo] == [jobs["ctrl t1"].job_id]  # not the miss
    assert plan.attempts == {jobs["ctrl t1"].job_id: 1} and plan.capped == 0
    retry(prepared, record(jobs["ctrl t1"], Outcome.ERROR))  # the engine failed again
    assert RunDir(prepared.run_dir.path).trials()[0].attempt == 2
    plan = plan_retry(prepared, resume=False)
    assert plan.todo == [] and plan.capped == 1
    assert "max_per_job" in plan.notes()[1]


def test_jobs_without_a_record_need_resume(tmp_path: Path) -> None:
    prepared = prepared_run(tmp_path)
    job = job_of(prepared, "ctrl", "t1")
    Recording(prepared).batch([record(job, Outcome.ERROR)], [])
    with pytest.raises(UserError, match="add --resume"):
        plan_retry(prepared, resume=False)
    plan = plan_retry(prepared, resume=True)
    assert len(plan.todo) == 4 and plan.unrecorded == 3 and list(plan.attempts) == [job.job_id]


def report_json(run: Path) -> dict[str, Any]:
    """report.json, with the numbers a withheld report keeps for its author in place."""
    result = run_cli("report", str(run))
    assert result.returncode == 0, result.stderr
    data: dict[str, Any] = json.loads((run / "report.json").read_text())
    return {**data, **(data.get("withheld_for_author") or {})}


def test_the_report_gives_both_accountings_and_the_retries_and_replays(tmp_path: Path) -> None:
    prepared = prepared_run(tmp_path)
    jobs = first_run(prepared)
    run = prepared.run_dir.path
    before = report_json(run)
    ctrl = before["accountings"]["arms"][0]  # shown: the run has an error record
    assert ctrl["errors"] == 1 and ctrl["retried"] == 0
    assert (ctrl["errors_excluded"]["k"], ctrl["errors_excluded"]["n"]) == (0, 1)
    assert (ctrl["errors_as_failures"]["k"], ctrl["errors_as_failures"]["n"]) == (0, 2)
    row = next(r for r in before["checklist"] if r["item"] == "retries zero in the headline run")
    assert row == {"item": row["item"], "ok": True, "detail": "max_retries 0, retries used 0"}

    retry(prepared, record(jobs["ctrl t1"], Outcome.SUCCESS))
    after = report_json(run)
    ctrl = after["accountings"]["arms"][0]
    assert ctrl["errors"] == 0 and ctrl["retried"] == 1 and ctrl["errors_excluded"]["k"] == 1
    assert after["accountings"]["retried"] == 1
    assert after["accountings"]["retried_now"] == {"success": 1}
    assert after["arms"][0]["pass_rate"]["n"] == 2  # the job is scored on its newest record
    row = next(r for r in after["checklist"] if r["item"] == "retries zero in the headline run")
    assert not row["ok"] and "1 error record(s) run again by --retry-errors" in row["detail"]
    assert "no retry policy" in row["detail"]
    assert {"row": row["item"], "publish": "a separate retry study"} in after["publish_instead"]
    markdown = (run / "report.md").read_text()
    assert "## Infrastructure errors: two accountings" in markdown
    assert "1 error record(s) were run again" in markdown
    assert "two accountings" in (run / "report.html").read_text()
    replayed = run_cli("replay", str(run))
    assert replayed.returncode == 0 and "identical" in replayed.stdout, replayed.stderr


def test_retries_within_a_declared_policy_hold_the_row(tmp_path: Path) -> None:
    prepared = prepared_run(tmp_path, runtime={"retry_errors": {"max_per_job": 1}})
    jobs = first_run(prepared)
    retry(prepared, record(jobs["ctrl t1"], Outcome.SUCCESS))
    row = next(
        r
        for r in report_json(prepared.run_dir.path)["checklist"]
        if r["item"] == "retries zero in the headline run"
    )
    assert row["ok"], row
    assert "1 error record(s) run again" in row["detail"] and "max_per_job 1" in row["detail"]


def test_a_run_recorded_before_keeps_its_report_until_retried(tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(FIXTURES / "run-features", run)
    assert run_cli("replay", str(run)).returncode == 0  # 10 errors, no accountings: unchanged
    kept = json.loads((run / "report.json").read_text())
    assert "accountings" not in {**kept, **(kept.get("withheld_for_author") or {})}
    lines = (run / "trials.jsonl").read_text().splitlines()
    error = Trial.model_validate_json(next(line for line in lines if '"outcome":"error"' in line))
    again = error.model_copy(
        update={"outcome": Outcome.SUCCESS, "passed": True, "error": None, "attempt": 2}
    )
    with (run / "trials.jsonl").open("a") as ledger:
        ledger.write(again.model_dump_json() + "\n")
    assert run_cli("replay", str(run)).returncode == 3  # the ledger changed after the report
    data = report_json(run)
    assert data["accountings"]["retried"] == 1
    assert sum(a["errors"] for a in data["accountings"]["arms"]) == 9
    assert (run / "trials.jsonl").read_text().startswith("\n".join(lines))  # append-only
    assert run_cli("replay", str(run)).returncode == 0


def one_line(result: Any, code: int, *needles: str) -> None:
    assert result.returncode == code, result.stderr
    err = result.stderr.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    for needle in needles:
        assert needle in err, err


def test_a_scored_run_without_a_policy_is_refused_in_one_line(tmp_path: Path) -> None:
    prepared = prepared_run(tmp_path, "scored")
    first_run(prepared)
    controls, run = prepared.loaded.path, prepared.run_dir.path
    ledger = (run / "trials.jsonl").read_bytes()
    result = run_cli("run", str(controls), "--out", str(run), "--retry-errors")
    one_line(result, 1, "runtime.retry_errors", "scored", str(controls))
    assert (run / "trials.jsonl").read_bytes() == ledger


def test_retry_errors_refusals(tmp_path: Path) -> None:
    prepared = prepared_run(tmp_path)
    controls = str(prepared.loaded.path)
    missing = run_cli("run", controls, "--out", str(tmp_path / "nope"), "--retry-errors")
    one_line(missing, 1, "--out", "no run directory to retry")
    assert not (tmp_path / "nope").exists()
    both = run_cli(
        "run", controls, "--out", str(prepared.run_dir.path), "--retry-errors", "--until-decided"
    )
    assert both.returncode != 0 and "Traceback" not in both.stderr


def test_the_policy_is_hashed_and_lets_scored_runs_retry(tmp_path: Path) -> None:
    controls = make_suite(tmp_path, [repo_task("t1")], ARMS, channel="scored")
    plain = load_controls(controls)
    text = controls.read_text()
    controls.write_text(text.replace("runtime:\n", "runtime:\n  max_retries: 1\n"))
    assert any(
        "max_retries" in p
        for p in scored_channel_problems(load_controls(controls).controls, set(), {})
    )
    policy = "runtime:\n  max_retries: 1\n  retry_errors: {max_per_job: 1}\n"
    controls.write_text(text.replace("runtime:\n", policy))
    loaded = load_controls(controls)
    assert scored_channel_problems(loaded.controls, set(), {}) == []
    assert protocol_hash(loaded.controls, {}) != protocol_hash(plain.controls, {})
    controls.write_text(
        text.replace("runtime:\n", policy.replace("max_retries: 1", "max_retries: 2"))
    )
    problems = scored_channel_problems(load_controls(controls).controls, set(), {})
    assert any("exceeds runtime.retry_errors.max_per_job 1" in p for p in problems)


def test_a_scored_run_with_a_declared_policy_may_be_retried(tmp_path: Path) -> None:
    from runner.run.retry import check_retry

    prepared = prepared_run(tmp_path, "scored", runtime={"retry_errors": {"max_per_job": 2}})
    jobs = first_run(prepared)
    check_retry(prepared.loaded.path, prepared.run_dir.path, until_decided=False)  # no refusal
    plan = plan_retry(prepared, resume=False)
    assert [j.job_id for j in plan.todo] == [jobs["ctrl t1"].job_id] and plan.max_per_job == 2


def test_a_retry_does_not_launder_errors_that_follow_the_arm(tmp_path: Path) -> None:
    """An arm whose trials err where the control's do not is suspected of causing the errors
    (the checklist's "errors do not follow the arm"); running them again until they pass
    must not clear the suspicion: the row reads the errors as they happened."""
    prepared = prepared_run(tmp_path)
    jobs = {(j.arm, j.task_id): j for j in prepared.jobs}
    outcomes = {("ctrl", "t1"): Outcome.MISS, ("ctrl", "t2"): Outcome.MISS}
    outcomes |= {("cand", "t1"): Outcome.ERROR, ("cand", "t2"): Outcome.SUCCESS}
    Recording(prepared).batch([record(jobs[k], o) for k, o in outcomes.items()], [])
    retry(prepared, record(jobs["cand", "t1"], Outcome.SUCCESS))
    rows = report_json(prepared.run_dir.path)["checklist"]
    row = next(r for r in rows if r["item"] == "errors do not follow the arm")
    assert not row["ok"] and "cand" in row["detail"], row


def test_the_ledger_rule_over_plain_lines() -> None:
    # The one rule the report (RunDir.records) and the viewer (view.matrix) both read by.
    from runner.store.rundir import ledger_rule

    lines = [
        ("a", True, 1),  # an error ...
        ("b", False, 2),
        ("a", False, 3),  # ... run again: the job's record; 1 is retried
        ("b", False, 4),  # after a record that is no error: changes nothing
        ("", False, 5),  # no job id (a viewer line that is not a record): on its own
        ("", False, 6),
        ("a", True, 7),  # an error after a scored record changes nothing either
    ]
    assert ledger_rule(lines) == ([3, 2, 5, 6], [1])
