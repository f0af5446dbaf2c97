"""A suite's controls asking for limits that are no limits: more memory than the machine has
(swap is off in a sandbox, so the limit would never bind and the kernel would kill what it
picks on the host) or a process table larger than a sandbox needs. Refused in one line
before any trial, and for every sandbox on the machine that opens it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.adversarial.support import refused_run, refused_to_open, small_spec
from tests.helpers import PY_IMAGE, make_suite, repo_task

ARMS = [{"name": "ctrl", "control": True, "agent": {"type": "scripted", "action": "noop"}}]


@pytest.mark.docker
def test_more_memory_than_the_machine_has_is_refused(
    tmp_path: Path, docker_api: Any, held: Callable[..., None]
) -> None:
    total = int(docker_api.info()["MemTotal"])
    asked = f"{2 * total >> 30}g"
    controls = make_suite(tmp_path, [repo_task("t1")], ARMS, runtime={"limits": {"memory": asked}})
    code, line, trials = refused_run(controls, tmp_path / "run")
    held(
        "controls: runtime.limits.memory twice the machine's memory",
        "deltarun run",
        f"exit {code}; trials run: {len(trials)}",
    )
    assert code == 1 and trials == []
    assert line.startswith(f"deltarun: error: {controls}: runtime.limits.memory: {asked} is more")
    assert "than this machine's memory" in line and "set it at most" in line
    # Every sandbox is checked where it opens (a fleet's workers differ from the coordinator).
    spec = small_spec(PY_IMAGE, "ceiling", memory=2 * total)
    refused_to_open(docker_api, spec, "more than this machine's memory")


def test_a_process_table_past_the_ceiling_is_refused(
    tmp_path: Path, held: Callable[..., None]
) -> None:
    controls = make_suite(
        tmp_path, [repo_task("t1")], ARMS, runtime={"limits": {"pids": 1_000_000}}, seal=False
    )
    code, line, trials = refused_run(controls, tmp_path / "run")
    held("controls: runtime.limits.pids 1,000,000", "deltarun run", f"exit {code}: {line[:100]}")
    assert code == 1 and "runtime.limits.pids" in line and "32768" in line and trials == []
