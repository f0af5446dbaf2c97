"""Answer metrics and job planning."""

from __future__ import annotations

import random

import pytest
from pydantic import ValidationError

from runner.config.loader import parse_controls
from runner.grading.metrics import json_schema_ok, score_answer
from runner.grading.outcomes import classify
from runner.records import AnswerTask, Outcome, TaskKind, task_timeout
from runner.suite.plan import job_id, plan_jobs

TASK = AnswerTask.model_validate(
    {
        "id": "q",
        "kind": "ordinary",
        "prompt": "p",
        "expect": {"a": 1, "b": [1, 2]},
        "schema": {"type": "object", "required": ["a"]},
        "metrics": ["exact_match", "json_schema_ok", "within_deadline"],
        "deadline_s": 10,
    }
)


def test_answer_metrics() -> None:
    assert score_answer({"b": [1, 2], "a": 1}, TASK, 3.0) == (
        True,
        {"exact_match": True, "json_schema_ok": True, "within_deadline": True},
    )
    ok, results = score_answer({"a": 2}, TASK, 3.0)
    assert not ok and results["json_schema_ok"] and not results["exact_match"]
    assert not score_answer({"b": [1, 2], "a": 1}, TASK, 11.0)[0]
    assert not score_answer([1], TASK, 1.0)[1]["json_schema_ok"]
    assert TASK.kind is TaskKind.ORDINARY


def test_json_schema_ok_fails_closed_without_a_schema() -> None:
    fields = {k: v for k, v in TASK.model_dump(by_alias=True).items() if k != "schema"}
    with pytest.raises(ValidationError, match="'json_schema_ok' needs a 'schema'"):
        AnswerTask.model_validate(fields)
    schemaless = AnswerTask.model_validate({**fields, "metrics": ["exact_match"]})
    assert not json_schema_ok({"a": 1}, schemaless, 1.0)  # never "any JSON passes"


def test_a_late_correct_answer_misses_the_deadline_and_is_no_timeout() -> None:
    """deadline_s is the metric's limit, timeout_s the hard kill: 30 s timeout, 5 s deadline."""
    task = TASK.model_copy(update={"deadline_s": 5.0, "timeout_s": 30.0})
    assert task_timeout(task, 999) == 30.0 and task_timeout(TASK, 999) == 10
    ok, results = score_answer({"a": 1, "b": [1, 2]}, task, 6.0)
    assert not ok and results == {
        "exact_match": True,
        "json_schema_ok": True,
        "within_deadline": False,
    }
    outcome = classify(
        kind=TaskKind.ORDINARY, infra_error=False, timed_out=False, abstained=False, passed=ok
    )
    assert outcome is Outcome.MISS
    with pytest.raises(ValidationError, match="must be at least 'deadline_s'"):
        AnswerTask.model_validate({**TASK.model_dump(by_alias=True), "timeout_s": 2})


def test_plan_is_deterministic_interleaved_and_complete() -> None:
    controls = parse_controls(
        "protocol_id: p\nsuite: {file: t}\nruntime: {repeats: 2, seed: 3}\narms:\n"
        "  - {name: a, control: true, agent: {type: scripted, action: noop}}\n"
        "  - {name: b, agent: {type: scripted, action: abstain}}\n",
        "c",
    )
    tasks = [
        AnswerTask.model_validate({**TASK.model_dump(by_alias=True), "id": f"q{i}"})
        for i in range(5)
    ]
    jobs = plan_jobs(controls, tasks, "proto", "run", random.Random(3))
    again = plan_jobs(controls, tasks, "proto", "run", random.Random(3))
    assert jobs == again and len(jobs) == 20
    assert len({j.job_id for j in jobs}) == 20
    assert [j.arm for j in jobs[:4]] == ["a", "b", "a", "b"]
    assert jobs[0].task_id == jobs[1].task_id
    assert jobs[0].job_id == job_id("proto", jobs[0].task_id, "a", 0)
    assert job_id("proto", "q0", "a", 0) != job_id("other", "q0", "a", 0)
