"""runner.run.status: planned jobs, per-arm progress and the oldest running trial (pure);
the command against real runs is in tests/test_orphans.py (local and Celery)."""

from __future__ import annotations

from runner.run.status import Running, arm_status, lines, planned_jobs
from runner.suite.plan import job_id


def test_planned_jobs_have_the_plans_ids() -> None:
    planned = planned_jobs("p" * 64, ["t1", "t2"], ["ctrl", "cand"], 2)
    assert len(planned) == 8
    assert planned[job_id("p" * 64, "t2", "cand", 1)].task_id == "t2"


def test_progress_per_arm_and_the_oldest_running_trial() -> None:
    planned = planned_jobs("p" * 64, ["t1", "t2", "t3"], ["ctrl", "cand"], 1)
    ids = {(job.task_id, job.arm): jid for jid, job in planned.items()}
    outcomes = {ids["t1", "ctrl"]: "miss", ids["t1", "cand"]: "success"}
    running = {
        ids["t2", "cand"]: Running("w1:12", since=1000.0),
        ids["t3", "cand"]: Running("w2:7", since=1100.0),
        ids["t1", "ctrl"]: Running("w1:12", since=900.0),  # recorded: not running any more
    }
    arms = arm_status(planned, ["ctrl", "cand"], outcomes, running)
    assert [(a.arm, a.recorded, a.running, a.waiting) for a in arms] == [
        ("ctrl", 1, 0, 2),
        ("cand", 1, 2, 0),
    ]
    in_flight = {k: v for k, v in running.items() if k not in outcomes}
    text = lines("r1", arms, in_flight, planned, now=1090.0)
    assert text[0] == "run r1: 2/6 recorded, 2 running, 2 waiting"
    assert any(line.startswith("  cand") and "success 1" in line for line in text)
    assert "oldest running trial: t2 / cand #0 on w1:12, 90 s" in text
