"""Answer metrics and job planning."""

from __future__ import annotations

import random

from runner.config.loader import parse_controls
from runner.metrics import score_answer
from runner.models import AnswerTask, TaskKind
from runner.plan import job_id, plan_jobs

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
