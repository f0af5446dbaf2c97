"""gVisor as a first-class OCI runtime: registered by ``make gvisor``, used by every sandbox of
a run that sets ``runtime.oci_runtime: runsc``, routed only to workers whose engine has it,
and refused at plan time where its sandboxes cannot work (no network under runsc here).

The real engine with runsc registered (``scripts/ensure-gvisor.sh``; ``make test`` runs it);
the whole adversarial suite under gVisor is ``make adversarial-gvisor``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from runner.distributed import keys
from runner.errors import UserError
from runner.records import Outcome
from runner.run.prepare import prepare
from runner.sandbox.engine import engine_runtimes
from tests.conftest import IN_CI, run_cli
from tests.helpers import ADD_GOLD, PY_IMAGE, make_suite, repo_task, write_agent
from tests.test_trial_docker import run_one

GVISOR = {"oci_runtime": "runsc"}
PROBE = (
    "uname -r > /tmp/kernel; dmesg 2>/dev/null | head -1 >> /tmp/kernel || true\n"
    "cp /tmp/kernel kernel.txt\n"
)


@pytest.fixture
def runsc(docker_api: Any) -> None:
    if "runsc" not in engine_runtimes(docker_api):
        message = "runsc is not registered with the engine; run `make gvisor`"
        if IN_CI:
            pytest.fail(message)
        pytest.skip(message)


def test_queues_carry_a_runtime_other_than_runc() -> None:
    image = "deltarun/sandbox-python:bookworm"
    assert keys.queue_for_image(image) == keys.queue_for_image(image, "runc")
    assert keys.queue_for_image(image, "runsc") == f"deltarun.{image}@runsc"
    assert keys.queues_for_image(image, ["runc"]) == [f"deltarun.{image}"]
    assert keys.queues_for_image(image, ["runc", "runsc"]) == [
        f"deltarun.{image}",
        f"deltarun.{image}@runsc",
    ]


class _Engine:
    def __init__(self, runtimes: dict[str, Any]) -> None:
        self.runtimes = runtimes

    def info(self) -> dict[str, Any]:
        return {"Runtimes": self.runtimes}


@pytest.mark.parametrize(
    "listed",
    [
        # Docker 20.10 started cold (what a fresh CI machine has) ...
        ["io.containerd.runc.v2", "io.containerd.runtime.v1.linux", "runc", "runsc"],
        # ... and the same engine after `make gvisor` reloaded it.
        ["runc", "runsc"],
    ],
)
def test_the_engine_runtimes_are_the_same_cold_or_reloaded(listed: list[str]) -> None:
    assert engine_runtimes(_Engine({name: {} for name in listed})) == ("runc", "runsc")


def test_runsc_is_refused_where_a_sandbox_must_reach_the_model(tmp_path: Path) -> None:
    controls = make_suite(
        tmp_path,
        [repo_task("t1")],
        [
            {"name": "ctrl", "control": True, "agent": {"type": "scripted", "action": "noop"}},
            {"name": "cand", "agent": {"type": "scripted", "action": "noop"}},
        ],
        runtime={**GVISOR, "network": "model-only"},
        route={"base_url": "http://127.0.0.1:9/v1", "model": "m"},
    )
    with pytest.raises(UserError) as info:
        prepare(controls, tmp_path / "run", resume=False, image_digest=lambda i: "sha256:x")
    message = str(info.value)
    assert "runtime.oci_runtime runsc" in message and "\n" not in message
    assert not (tmp_path / "run").exists()


@pytest.mark.docker
def test_a_trial_under_gvisor_runs_both_sandboxes_in_its_kernel(
    tmp_path: Path, docker_api: Any, runsc: None
) -> None:
    gold = write_agent(tmp_path, "gold", PROBE + f"git apply - <<'EOF'\n{ADD_GOLD}EOF\n")
    controls = make_suite(
        tmp_path,
        [repo_task("t1")],
        [
            {"name": "ctrl", "control": True, "agent": {"type": "scripted", "action": "noop"}},
            {"name": "gold", "agent": gold},
        ],
        runtime=GVISOR,
    )
    trial = run_one(docker_api, controls, "t1", "gold")
    assert trial.outcome is Outcome.SUCCESS, (trial.reason, trial.error, trial.agent_log)
    assert trial.limits is not None and trial.limits["oci_runtime"] == "runsc"
    assert "kernel.txt" in trial.patch and "Starting gVisor" in trial.patch


@pytest.mark.docker
def test_a_run_under_gvisor_pins_it_and_every_sandbox_uses_it(
    tmp_path: Path, docker_api: Any, runsc: None
) -> None:
    controls = make_suite(
        tmp_path,
        [repo_task("t1")],
        [
            {"name": "ctrl", "control": True, "agent": {"type": "scripted", "action": "noop"}},
            {"name": "noop", "agent": {"type": "scripted", "action": "noop"}},
        ],
        runtime=GVISOR,
    )
    out = tmp_path / "run"
    result = run_cli("run", str(controls), "--out", str(out))
    assert result.returncode == 0, result.stderr
    report = json.loads((out / "report.json").read_text())
    assert report["pins"]["oci_runtime"] == "runsc"
    assert "| OCI runtime | runsc |" in (out / "report.md").read_text()
    records = [json.loads(line) for line in (out / "trials.jsonl").read_text().splitlines()]
    assert {r["limits"]["oci_runtime"] for r in records} == {"runsc"}
    row = next(r for r in report["checklist"] if r["item"].startswith("control arm present"))
    assert row["ok"] is True


@pytest.mark.docker
def test_the_engine_lists_runsc_beside_runc(docker_api: Any, runsc: None) -> None:
    assert {"runc", "runsc"} <= set(engine_runtimes(docker_api))


@pytest.mark.docker
def test_a_run_under_gvisor_goes_to_a_worker_whose_engine_has_it(
    tmp_path: Path, docker_api: Any, runsc: None, redis_server: Any
) -> None:
    """Real Celery workers: the jobs wait in the image's @runsc queue, which a worker whose
    engine lists runsc consumes (and says so when it starts)."""
    from tests.distributed_support import start_coordinator, start_worker

    controls = make_suite(
        tmp_path,
        [repo_task("t1"), repo_task("t2")],
        [
            {"name": "ctrl", "control": True, "agent": {"type": "scripted", "action": "noop"}},
            {"name": "noop", "agent": {"type": "scripted", "action": "noop"}},
        ],
        runtime=GVISOR,
    )
    worker = start_worker(redis_server, tmp_path / "w.log")
    try:
        assert "OCI runtimes runc, runsc" in worker.text()
        assert keys.queue_for_image(PY_IMAGE, "runsc") in worker.text()
        coordinator = start_coordinator(redis_server, controls, tmp_path / "run")
        assert coordinator.wait(timeout=240) == 0, coordinator.text()
    finally:
        worker.stop()
    records = [json.loads(x) for x in (tmp_path / "run" / "trials.jsonl").read_text().splitlines()]
    assert len(records) == 4 and {r["worker"] for r in records} == {"w1"}
    assert {r["limits"]["oci_runtime"] for r in records} == {"runsc"}
