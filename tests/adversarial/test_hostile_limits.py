"""A suite's controls asking for limits that are no limits: more memory than the machine has
(swap is off in a sandbox, so the limit would never bind and the kernel would kill what it
picks on the host) or a process table larger than a sandbox needs. Refused in one line
before any trial, and for every sandbox on the machine that opens it."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from runner.errors import UserError
from runner.sandbox.base import Limits, SandboxSpec
from runner.sandbox.docker import DockerSandboxFactory
from tests.conftest import leftover_sandboxes, run_cli
from tests.helpers import PY_IMAGE, make_suite, repo_task

ARMS = [{"name": "ctrl", "control": True, "agent": {"type": "scripted", "action": "noop"}}]


def one_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    return lines[0]


@pytest.mark.docker
def test_more_memory_than_the_machine_has_is_refused(
    tmp_path: Path, docker_api: Any, held: Callable[..., None]
) -> None:
    total = int(docker_api.info()["MemTotal"])
    asked = f"{2 * total >> 30}g"
    controls = make_suite(tmp_path, [repo_task("t1")], ARMS, runtime={"limits": {"memory": asked}})
    out = tmp_path / "run"
    ran = run_cli("run", str(controls), "--out", str(out))
    line = one_line(ran.stderr)
    records = out / "trials.jsonl"
    trials = records.read_text().splitlines() if records.exists() else []
    held(
        "controls: runtime.limits.memory twice the machine's memory",
        "deltarun run",
        f"exit {ran.returncode}; trials run: {len(trials)}",
    )
    assert ran.returncode == 1 and trials == []
    assert line.startswith(f"deltarun: error: {controls}: runtime.limits.memory: {asked} is more")
    assert "than this machine's memory" in line and "set it at most" in line
    # Every sandbox is checked where it opens (a fleet's workers differ from the coordinator).
    spec = SandboxSpec(
        image=PY_IMAGE,
        limits=Limits(memory_bytes=2 * total, nano_cpus=10**9, pids=64, workspace_bytes=1 << 20),
        lifetime_s=30,
        labels={"run": f"ceiling-{uuid.uuid4().hex[:8]}", "job": "open"},
    )
    with (
        pytest.raises(UserError, match="more than this machine's memory"),
        DockerSandboxFactory(docker_api).open(spec),
    ):
        pass
    assert leftover_sandboxes(docker_api, run=spec.labels["run"]) == ([], [])


def test_a_process_table_past_the_ceiling_is_refused(
    tmp_path: Path, held: Callable[..., None]
) -> None:
    controls = make_suite(
        tmp_path, [repo_task("t1")], ARMS, runtime={"limits": {"pids": 1_000_000}}, seal=False
    )
    ran = run_cli("run", str(controls), "--out", str(tmp_path / "run"))
    line = one_line(ran.stderr)
    held(
        "controls: runtime.limits.pids 1,000,000",
        "deltarun run",
        f"exit {ran.returncode}: {line[:100]}",
    )
    assert ran.returncode != 0 and "runtime.limits.pids" in line and "32768" in line
    assert not (tmp_path / "run" / "trials.jsonl").exists()
