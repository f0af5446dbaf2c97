"""No record content can abort a run or make a run directory unreadable (class 5, issue 10).

Whatever an agent or a model puts into a trial (answers, transcripts, logs, file
names that are not UTF-8), the record ``execute_trial`` builds is one the ledger
writes and reads back unchanged; a value the reader would refuse never makes it
into a record, and a record that cannot be built becomes a deltarun error.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

import runner.trial.execute as trial_module
from runner.agents.interface import AgentResult
from runner.config.loader import parse_controls
from runner.records import Job, Outcome, RepoTask, Trial
from runner.store.rundir import RunDir, RunMeta
from runner.trial.env import TrialEnv
from runner.trial.execute import execute_trial
from runner.trial.record import Facts, build_record, patch_of

CONTROLS = parse_controls(
    "protocol_id: p\nsuite: {file: t.jsonl}\narms:\n"
    "  - {name: c, control: true, agent: {type: scripted, action: noop}}\n",
    "controls.yaml",
)
TASK = RepoTask(
    id="t1", kind="ordinary", prompt="p", repo="r.tar", hidden="h.tar", hidden_tests=["t.py"]
)
JOB = Job(job_id="j" * 64, run_id="r", protocol_sha256="p" * 64, task_id="t1", arm="c", repeat=0)
NOW = datetime(2026, 12, 2, tzinfo=UTC)


class _NoInputs:
    def fixture(self, task: RepoTask) -> list[Any]:
        return []

    def hidden(self, task: RepoTask) -> list[Any]:
        return []


ENV = TrialEnv(CONTROLS, _NoInputs(), sandboxes=None, worker="w", clock=lambda: NOW)  # type: ignore[arg-type]

surrogates = st.lists(
    st.sampled_from(["a", "\ud800", "\udcff", "é", "\x00", "😀", "\ud83d", "\n"]), max_size=12
).map("".join)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**80), max_value=10**80),
    st.floats(allow_nan=True, allow_infinity=True),
    surrogates,
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(surrogates, inner, max_size=4)
    ),
    max_leaves=30,
)


def deep(levels: int) -> Any:
    value: Any = 1
    for _ in range(levels):
        value = [value]
    return value


hostile = st.one_of(values, st.integers(min_value=40, max_value=400).map(deep))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    answer=hostile,
    transcript=st.lists(st.dictionaries(surrogates, hostile, max_size=3), max_size=3),
    log=surrogates,
    names=st.lists(st.binary(max_size=12), max_size=4),
    reason=surrogates,
)
def test_any_agent_result_makes_a_record_the_ledger_reads_back(
    tmp_path_factory: pytest.TempPathFactory,
    answer: Any,
    transcript: list[dict[str, Any]],
    log: str,
    names: list[bytes],
    reason: str,
) -> None:
    result = AgentResult(
        answer=answer,
        answer_present=True,
        transcript=transcript,
        log=log,
        reason=reason,
    )
    facts = Facts(
        agent=result,
        patch=b"\xff\xfe not utf-8 " + b"".join(names),
        dropped=tuple(n.decode("utf-8", "surrogateescape") + " (bytecode)" for n in names),
        reason=reason or None,
    )
    record = build_record(
        JOB,
        TASK,
        facts,
        caps=CONTROLS.runtime.caps,
        worker="w",
        started_at=NOW,
        finished_at=NOW,
        wall_s=1.0,
        retries=0,
    )
    run = RunDir(tmp_path_factory.mktemp("run"))
    run.create(_meta(), b"")
    assert run.append(record)
    (back,) = run.trials()
    assert back == record
    assert patch_of(back) == facts.patch


@settings(max_examples=200, deadline=None)
@given(answer=hostile, text=surrogates)
def test_writer_and_reader_accept_the_same_records(answer: Any, text: str) -> None:
    fields = {**_trial_fields(), "answer": answer, "agent_log": text}
    try:
        record = Trial(**fields)
    except ValidationError:
        return  # refused when built, so never written
    assert Trial.model_validate_json(record.model_dump_json()) == record


def test_a_record_that_cannot_be_built_is_an_error_and_the_run_goes_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def phases(*args: Any) -> None:
        return None

    def broken(*args: Any, **kwargs: Any) -> Trial:
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setattr(trial_module, "_run_phases", phases)
    monkeypatch.setattr(trial_module, "build_record", broken)
    trial = execute_trial(JOB, TASK, object(), ENV)  # type: ignore[arg-type]
    assert trial.outcome is Outcome.ERROR
    assert trial.error is not None and "RecursionError" in trial.error
    assert Trial.model_validate_json(trial.model_dump_json()) == trial


def _trial_fields() -> dict[str, Any]:
    return {
        "run_id": "r",
        "job_id": "j",
        "protocol_sha256": "p",
        "task_id": "t",
        "arm": "c",
        "repeat": 0,
        "task_kind": "ordinary",
        "outcome": "miss",
        "passed": False,
        "timeout": False,
        "tool_violation": False,
        "abstained": False,
        "wall_s": 1.0,
        "worker": "w",
        "started_at": "s",
        "finished_at": "f",
    }


def _meta() -> RunMeta:
    return RunMeta(
        run_id="r",
        protocol_id="p",
        protocol_sha256="p" * 64,
        suite_sha256="s" * 64,
        channel="exploratory",
        control_arm="c",
        arms=["c"],
        tasks=[{"id": "t1", "kind": "ordinary"}],
        image_digests={},
        agent_dir_digests={},
        created_at=NOW.isoformat(),
        deltarun_version="0",
        python_version="3",
    )
