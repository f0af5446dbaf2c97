"""The record's shape is declared once (``runner.records.Trial``): the views derive from it.

``ScoredTrial`` (what scoring reads) copies fields of ``Trial`` by name and ``Job.of``
rebuilds a job from a record; both must stay in step with ``Trial`` as it grows.
"""

from __future__ import annotations

import dataclasses
import typing
from datetime import UTC, datetime

import pytest

from runner.records import Job, Outcome, ScoredTrial, TaskKind, Trial
from runner.trial.record import bare_record


def utc() -> datetime:
    return datetime(2026, 12, 4, tzinfo=UTC)


def a_record() -> Trial:
    job = Job(job_id="j", run_id="r", protocol_sha256="p" * 64, task_id="t", arm="a", repeat=2)
    return bare_record(
        job,
        TaskKind.ORDINARY,
        Outcome.MISS,
        "w",
        utc(),
        utc(),
        wall_s=1.5,
        tool_calls=3,
        prompt_tokens=7,
        stop_reason="max_turns",
        verify_exit_code=1,
        reason="declared test tests/t.py::x did not run",
    )


def test_every_scored_field_is_a_trial_field_of_the_same_type() -> None:
    hints = typing.get_type_hints(ScoredTrial)
    for field in dataclasses.fields(ScoredTrial):
        if field.name == "setup_signal":
            continue
        assert field.name in Trial.model_fields, field.name
        assert hints[field.name] == Trial.model_fields[field.name].annotation, field.name


def test_the_scored_view_copies_each_field_by_name() -> None:
    record = a_record()
    scored = ScoredTrial.of(record)
    for field in dataclasses.fields(ScoredTrial):
        if field.name != "setup_signal":
            assert getattr(scored, field.name) == getattr(record, field.name), field.name
    assert scored.setup_signal == "no-test-ran"


def test_views_are_built_by_keyword_only() -> None:
    with pytest.raises(TypeError):
        ScoredTrial("r", "j")  # type: ignore[misc]


def test_a_job_is_rebuilt_from_its_record() -> None:
    record = a_record()
    assert Job.of(record) == Job(
        job_id="j", run_id="r", protocol_sha256="p" * 64, task_id="t", arm="a", repeat=2
    )
