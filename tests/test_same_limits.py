"""The "same limits" and "equal budgets" rows, failing through the real path.

Each run is made by ``RunService.execute`` (the local pool) on the scripted
in-memory sandbox (``runner.sandbox.fake``), which DESIGN allows for orchestration
logic; the rows are read from ``deltarun report``'s report.json. What differs is
what a worker of another build, or an engine that drops a flag, would do: the
sandbox of one arm's trials is made with other limits or from another image, and
the records say so (``Trial.limits``, ``runner.trial.limits``). The real engine's
side (what ``docker inspect`` reports) is checked in ``test_the_docker_sandbox_reports
_what_the_engine_applied``.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from runner.executors.contract import PreparedRun
from runner.executors.local import LocalExecutor, local_runner
from runner.run.prepare import prepare
from runner.run.service import RunOptions, RunService
from runner.sandbox.base import SandboxSpec
from runner.sandbox.fake import FakeSandbox, FakeSandboxFactory, FakeSession
from tests.conftest import run_cli
from tests.fake_openai import FakeModel, call, reply
from tests.helpers import PY_IMAGE, make_suite, repo_task

CONTROL = {"name": "ctrl", "control": True, "agent": {"type": "scripted", "action": "noop"}}
ITEM = "control arm present and run under the same limits"


class Tampered(FakeSandboxFactory):
    """Opens the sandboxes of ``arm``'s jobs with ``limits`` changed, or from ``image``."""

    def __init__(self, arm_jobs: set[str], image: str | None = None, **limits: int) -> None:
        super().__init__()
        self.arm_jobs, self.image, self.limits = arm_jobs, image, limits

    def open(self, spec: SandboxSpec) -> FakeSession:
        if spec.labels.get("job") not in self.arm_jobs:
            return super().open(spec)
        sandbox: FakeSandbox = _OtherImage(
            self, replace(spec, limits=replace(spec.limits, **self.limits))
        )
        self.opened.append(sandbox)
        return FakeSession(sandbox)


class _OtherImage(FakeSandbox):
    @property
    def image_digest(self) -> str:
        factory = self.factory
        assert isinstance(factory, Tampered)
        return factory.image or factory.image_digest


def prepared(
    root: Path, arms: list[dict[str, Any]], route: dict[str, Any] | None = None
) -> PreparedRun:
    controls = make_suite(root, [repo_task("t1"), repo_task("t2")], [CONTROL, *arms], route=route)
    return prepare(controls, root / "run", resume=False, image_digest=lambda image: "sha256:fake")


def run_and_report(run: PreparedRun, factory: FakeSandboxFactory) -> dict[str, Any]:
    """Execute every job on ``factory`` through the run service, then ``deltarun report``."""

    class OnFake(RunService):
        def executor(self, prepared: PreparedRun, options: RunOptions) -> LocalExecutor:
            return LocalExecutor(local_runner(prepared, factory, "fake"), 2, lambda: None)

    OnFake().execute(run, RunOptions(out_dir=run.run_dir.path))
    result = run_cli("report", str(run.run_dir.path))
    assert result.returncode == 0, result.stderr
    return json.loads((run.run_dir.path / "report.json").read_text())


def row(report: dict[str, Any], item: str) -> dict[str, Any]:
    return next(r for r in report["checklist"] if r["item"] == item)


def jobs_of(run: PreparedRun, arm: str) -> set[str]:
    return {job.job_id for job in run.jobs if job.arm == arm}


CAND = {"name": "cand", "agent": {"type": "scripted", "action": "noop"}}


def test_the_same_limits_hold_and_every_record_says_what_it_ran_under(tmp_path: Path) -> None:
    run = prepared(tmp_path, [CAND])
    report = run_and_report(run, FakeSandboxFactory())
    assert row(report, ITEM)["ok"] is True
    assert "as the records say" in row(report, ITEM)["detail"]
    records = [json.loads(line) for line in run.run_dir.ledger_path.read_text().splitlines()]
    assert len(records) == 4
    for record in records:
        limits = record["limits"]
        assert limits["memory_bytes"] > 0 and limits["pids"] > 0 and limits["read_only"] is True
        assert limits["network"] == "none" and limits["oci_runtime"] == "runc"
        assert limits["timeout_s"] == 60 and limits["repeats"] == 1 and limits["model"] is None
        assert limits["forbidden_paths"] == [".git/"]


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"memory_bytes": 3 << 30}, "memory_bytes"),
        ({"pids": 4096}, "pids"),
        ({"nano_cpus": 8_000_000_000}, "nano_cpus"),
        ({"workspace_bytes": 1 << 20}, "workspace_bytes"),
    ],
)
def test_an_arm_run_under_other_limits_fails_same_limits(
    change: dict[str, int], field: str, tmp_path: Path
) -> None:
    run = prepared(tmp_path, [CAND])
    report = run_and_report(run, Tampered(jobs_of(run, "cand"), **change))
    found = row(report, ITEM)
    assert found["ok"] is False
    assert f"cand on t1: {field} " in found["detail"] and "the control's" in found["detail"]
    assert "2 difference(s)" in found["detail"]  # one per task


def test_an_arm_run_on_another_image_fails_same_limits(tmp_path: Path) -> None:
    run = prepared(tmp_path, [CAND])
    report = run_and_report(run, Tampered(jobs_of(run, "cand"), image="sha256:" + "ab" * 32))
    found = row(report, ITEM)
    assert (
        found["ok"] is False
        and "cand on t1: image abababababab, the control's fake" in found["detail"]
    )


def abstaining_model() -> FakeModel:
    return FakeModel(lambda body, index: reply(call("abstain", {"reason": "no"})))


def test_model_arms_asked_under_other_settings_fail_both_rows(tmp_path: Path) -> None:
    with abstaining_model() as model:
        route = {"base_url": model.base_url, "model": "qwen-test"}
        warm = {"name": "warm", "agent": {"type": "openai", "max_turns": 4,
                                          "route": {**route, "temperature": 0.7}}}  # fmt: skip
        cold = {"name": "cold", "agent": {"type": "openai", "max_turns": 4}}
        run = prepared(tmp_path, [cold, warm], route=route)
        report = run_and_report(run, FakeSandboxFactory())
    assert len(model.requests) == 4
    limits = row(report, ITEM)
    assert limits["ok"] is False
    assert "warm on t1: temperature 0.7, cold's 0.0" in limits["detail"]
    budgets = row(report, "equal budgets")
    assert budgets["ok"] is False and "temperature (cold 0.0, warm 0.7)" in budgets["detail"]


def test_model_arms_under_one_route_hold_beside_a_scripted_control(tmp_path: Path) -> None:
    with abstaining_model() as model:
        route = {"base_url": model.base_url, "model": "qwen-test"}
        arms = [{"name": n, "agent": {"type": "openai", "max_turns": 4}} for n in ("a", "b")]
        run = prepared(tmp_path, arms, route=route)
        report = run_and_report(run, FakeSandboxFactory())
    assert row(report, ITEM)["ok"] is True and row(report, "equal budgets")["ok"] is True
    records = [json.loads(line) for line in run.run_dir.ledger_path.read_text().splitlines()]
    models = {r["arm"]: r["limits"]["model"] for r in records}
    assert models["ctrl"] is None
    assert models["a"] == models["b"] and models["a"]["temperature"] == 0.0
    assert models["a"]["max_turns"] == 4


def test_a_tasks_own_timeout_is_what_its_records_carry(tmp_path: Path) -> None:
    controls = make_suite(tmp_path, [repo_task("t1", timeout_s=7)], [CONTROL, CAND])
    run = prepare(controls, tmp_path / "run", resume=False, image_digest=lambda i: "sha256:fake")
    run_and_report(run, FakeSandboxFactory())
    records = [json.loads(line) for line in run.run_dir.ledger_path.read_text().splitlines()]
    assert {r["limits"]["timeout_s"] for r in records} == {7}
    assert {r["limits"]["verify_timeout_s"] for r in records} == {60}


@pytest.mark.docker
def test_the_docker_sandbox_reports_what_the_engine_applied(docker_api: Any) -> None:
    """The record's resources come from ``docker inspect``, not from the spec."""
    from runner.sandbox.applied import applied_of_spec
    from runner.sandbox.base import Limits
    from runner.sandbox.docker import DockerSandboxFactory

    limits = Limits(memory_bytes=300 << 20, nano_cpus=700_000_000, pids=77, workspace_bytes=8 << 20)
    spec = SandboxSpec(
        image=PY_IMAGE, limits=limits, lifetime_s=60, labels={"run": "limits-test", "job": "j"}
    )
    with DockerSandboxFactory(docker_api).open(spec) as sandbox:
        applied = dict(sandbox.applied)
    assert applied == applied_of_spec(spec)
    assert applied["memory_bytes"] == 300 << 20 and applied["pids"] == 77
    assert applied["oci_runtime"] == "runc" and applied["network"] == "none"
