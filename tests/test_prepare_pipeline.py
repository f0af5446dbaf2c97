"""Preparation as named steps ordered by their needs, and the checks one by one. Pure:
in-memory controls and suites, no Docker."""

from __future__ import annotations

import itertools
import json
import random
from pathlib import Path
from typing import Any

import pytest
import yaml

from runner.config.controls import Controls
from runner.config.loader import parse_controls
from runner.errors import DigestMismatch, ProtocolMismatch, UserError
from runner.grading.metrics import BUILTIN, exact_match
from runner.hashing import sha256_bytes
from runner.records import AnswerTask, TaskKind
from runner.run import plan_checks as checks
from runner.run.pipeline import PipelineError, Step, order, run, step
from runner.run.prepare import ORDERED, STEPS
from runner.suite.load import Suite
from runner.suite.sealing import VALIDATION_NAME
from tests.helpers import owned_key

PATH = Path("controls.yaml")


def controls(**changes: Any) -> Controls:
    data: dict[str, Any] = {
        "protocol_id": "p",
        "suite": {"file": "tasks.jsonl"},
        "arms": [{"name": "c", "control": True, "agent": {"type": "scripted", "action": "noop"}}],
    }
    data.update(changes)
    return parse_controls(yaml.safe_dump(data), str(PATH))


def positions(steps: list[Step[Any]]) -> dict[str, int]:
    return {s.name: i for i, s in enumerate(steps)}


def assert_valid(ordered: list[Step[Any]]) -> None:
    done: set[str] = set()
    for s in ordered:
        assert s.needs <= done, (s.name, s.needs - done)
        done |= s.gives


def test_the_order_respects_every_need_and_keeps_the_declared_ties() -> None:
    ordered = order(STEPS)
    assert_valid(ordered)
    assert ordered == ORDERED  # what prepare runs, ordered on import
    assert [s.name for s in ordered] == [s.name for s in STEPS]  # declared in a valid order


def test_any_declaration_order_gives_a_valid_order_with_the_constraints() -> None:
    shuffler = random.Random(7)
    for _ in range(200):
        declared = list(STEPS)
        shuffler.shuffle(declared)
        ordered = order(declared)
        assert_valid(ordered)
        at = positions(ordered)
        assert at["validation pin"] < at["exclusion"] < at["metrics"]
        assert at["exclusion"] < at["recorded outputs"] and at["exclusion"] < at["image digests"]
        assert at["image pins"] < at["agent images"] and at["environments"] < at["agent images"]
        assert at["preflight"] < at["run directory"] and at["keys"] < at["preflight"]
        assert at["run directory"] == len(ordered) - 1  # nothing is written before the checks


def test_a_step_with_a_missing_need_a_double_giver_or_a_circle_is_refused() -> None:
    def noop(state: object) -> None:
        return None

    with pytest.raises(PipelineError, match="needs 'b', which no step gives"):
        order([step("one", ["b"], ["a"], noop)])
    with pytest.raises(PipelineError, match="given by both"):
        order([step("one", [], ["a"], noop), step("two", [], ["a"], noop)])
    with pytest.raises(PipelineError, match="need each other"):
        order([step("one", ["b"], ["a"], noop), step("two", ["a"], ["b"], noop)])
    without_exclusion = [s for s in STEPS if s.name != "exclusion"]
    with pytest.raises(PipelineError, match="'metrics' needs 'suite kept'"):
        order(without_exclusion)  # the metrics are checked on the suite less suite.exclude


def test_run_calls_each_step_once_in_order() -> None:
    seen: list[str] = []
    steps = [
        step("late", ["x"], ["y"], lambda s: seen.append("late")),
        step("early", [], ["x"], lambda s: seen.append("early")),
    ]
    for permutation in itertools.permutations(steps):
        seen.clear()
        run(list(permutation), None)
        assert seen == ["early", "late"]


def test_expected_protocol() -> None:
    checks.check_expected(PATH, "ab" * 32, None)
    checks.check_expected(PATH, "ab" * 32, "AB" * 6)
    with pytest.raises(ProtocolMismatch, match="not the expected"):
        checks.check_expected(PATH, "ab" * 32, "cd" * 6)
    with pytest.raises(UserError, match="is not a protocol hash"):
        checks.check_expected(PATH, "ab" * 32, "xyz")


def suite_of(*ids: str, metric: str = "exact_match", root: Path = Path(".")) -> Suite:
    tasks = tuple(
        AnswerTask(
            id=task_id,
            kind=TaskKind.ORDINARY,
            prompt="q",
            expect=1,
            metrics=[metric],
            deadline_s=5,
        )
        for task_id in ids
    )
    return Suite(root / "tasks.jsonl", "0" * 64, tasks, {})


def test_exclusion() -> None:
    suite = suite_of("t1", "t2")
    kept = checks.without_excluded(PATH, controls(), suite)
    assert kept is suite
    excluded = controls(suite={"file": "tasks.jsonl", "exclude": ["t2"]})
    assert [t.id for t in checks.without_excluded(PATH, excluded, suite).tasks] == ["t1"]
    unknown = controls(suite={"file": "tasks.jsonl", "exclude": ["t9"]})
    with pytest.raises(UserError, match=r"suite\.exclude: 't9' is not a task"):
        checks.without_excluded(PATH, unknown, suite)


def scored(validation: str | None, exclude: list[str] | None = None) -> Controls:
    pins: dict[str, Any] = {"file": "tasks.jsonl", "sha256": "0" * 64, "exclude": exclude}
    if validation is not None:
        pins["validation"] = validation
    return controls(channel="scored", suite=pins)


def write_validation(root: Path, verdicts: dict[str, str], digest: str = "0" * 64) -> str:
    tasks = [{"id": k, "verdict": v, "detail": ""} for k, v in verdicts.items()]
    data = json.dumps({"schema_version": 1, "suite_sha256": digest, "tasks": tasks}).encode()
    (root / VALIDATION_NAME).write_bytes(data)
    return sha256_bytes(data)


def test_validation_pin(tmp_path: Path) -> None:
    suite = suite_of("t1", "t2", root=tmp_path)
    pin = write_validation(tmp_path, {"t1": "valid", "t2": "not-checked"})
    checks.check_validation(PATH, scored(pin), suite)
    with pytest.raises(UserError, match="channel scored needs a validated suite"):
        checks.check_validation(PATH, scored(None), suite)
    with pytest.raises(DigestMismatch, match="digest mismatch: controls pin"):
        checks.check_validation(PATH, scored("f" * 64), suite)
    stale = write_validation(tmp_path, {"t1": "valid"}, digest="1" * 64)
    with pytest.raises(UserError, match="validated suite 111111111111"):
        checks.check_validation(PATH, scored(stale), suite)
    flaky = write_validation(tmp_path, {"t1": "valid", "t2": "flaky"})
    with pytest.raises(UserError, match=r"1 task\(s\) not valid: t2 \(flaky\)"):
        checks.check_validation(PATH, scored(flaky), suite)
    checks.check_validation(PATH, scored(flaky, exclude=["t2"]), suite)  # excluded: fine


def test_metrics() -> None:
    checks.check_metrics(suite_of("t1"), BUILTIN)
    mixed = suite_of("t1").tasks + suite_of("t2", metric="mine").tasks
    with pytest.raises(UserError, match=r"tasks\.jsonl:2: metrics: 'mine' is neither built in"):
        checks.check_metrics(Suite(Path("tasks.jsonl"), "0" * 64, mixed), BUILTIN)
    checks.check_metrics(suite_of("t1", metric="mine"), {**BUILTIN, "mine": exact_match})


def test_image_pins() -> None:
    pinned = controls(images={"img:1": "sha256:aa"})
    checks.check_pins(PATH, pinned, {"img:1"}, {"img:1": "sha256:aa"})
    with pytest.raises(DigestMismatch, match=r"images\.img:1: pinned sha256:aa"):
        checks.check_pins(PATH, pinned, {"img:1"}, {"img:1": "sha256:bb"})
    scored = controls(channel="scored", suite={"file": "tasks.jsonl", "sha256": "0" * 64})
    with pytest.raises(UserError, match="channel scored refuses to start"):
        checks.check_pins(PATH, scored, {"img:1"}, {"img:1": "sha256:bb"})


def test_keys(tmp_path: Path) -> None:
    route = {"base_url": "http://127.0.0.1:9/v1", "model": "m", "api_key_env": "MY_KEY"}
    keyed = controls(
        route=route,
        arms=[
            {"name": "c", "control": True, "agent": {"type": "scripted", "action": "noop"}},
            {"name": "m", "agent": {"type": "openai"}},
        ],
    )
    owner = owned_key(tmp_path, "MY_KEY", "http://127.0.0.1:9")
    checks.check_keys(PATH, keyed, {"MY_KEY": "k", **owner})
    with pytest.raises(UserError, match=r"route\.api_key_env: environment variable MY_KEY"):
        checks.check_keys(PATH, keyed, owner)
    with pytest.raises(UserError, match=r"^controls\.yaml: route\.base_url .*MY_KEY\.upstream"):
        checks.check_keys(PATH, keyed, {"MY_KEY": "k"})  # no owner said where it may go
