"""Sandboxes of a process killed with SIGKILL are removed as soon as the owner is gone:
by `deltarun gc` and by the next run's start-up reaper, without waiting for their
deadline; sandboxes of a live owner, and of owners this host cannot check, stay."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from runner.sandbox import overlay
from runner.sandbox.docker import host_identity
from tests.conftest import IN_CI, run_cli
from tests.helpers import PY_IMAGE, make_suite, repo_task, write_agent

pytestmark = pytest.mark.docker
DELTARUN = Path(__file__).resolve().parents[1] / ".venv" / "bin" / "deltarun"


def owned_by(api: Any, pid: int) -> tuple[list[str], list[str]]:
    """Containers and volumes whose owner label names process ``pid``."""
    selector = {"label": ["deltarun.pid"]}
    containers = [
        c["Id"][:12]
        for c in api.containers(all=True, filters=selector)
        if (c.get("Labels") or {}).get("deltarun.pid", "").split(":")[0] == str(pid)
    ]
    volumes = [
        v["Name"]
        for v in (api.volumes(filters=selector) or {}).get("Volumes") or []
        if (v.get("Labels") or {}).get("deltarun.pid", "").split(":")[0] == str(pid)
    ]
    return containers, volumes


def views_of(pid: int) -> list[Path]:
    """The copy-free workspace views process ``pid`` mounted (``runner.sandbox.overlay``)."""
    root = overlay.views_root()
    return [p for p in root.iterdir() if p.name.startswith(f"{pid}-")] if root.is_dir() else []


def killed_run(tmp_path: Path, api: Any) -> tuple[int, tuple[list[str], list[str]]]:
    """Start a run whose agent sleeps, SIGKILL it mid-trial; its pid and what it left."""
    sleeper = write_agent(tmp_path, "sleeper", "sleep 300\n")
    controls = make_suite(
        tmp_path,
        [repo_task("t1", timeout_s=600)],
        [{"name": "ctrl", "control": True, "agent": sleeper}],
        runtime={"timeout_s": 600, "verify_timeout_s": 60},
    )
    command = [str(DELTARUN)] if DELTARUN.exists() else [sys.executable, "-m", "runner.cli"]
    process = subprocess.Popen(
        [*command, "run", str(controls), "--out", str(tmp_path / "run"), "-j", "1"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            left = owned_by(api, process.pid)
            if left[0] and left[1]:
                break
            assert process.poll() is None, "the run ended before its agent started"
            time.sleep(0.5)
        else:
            raise AssertionError("no sandbox of the run appeared within 120 s")
        time.sleep(1)  # the agent is running under its guard
        seen = run_cli("status", str(tmp_path / "run"))
        assert seen.returncode == 0, seen.stderr
        assert "0/1 recorded, 1 running, 0 waiting" in seen.stdout, seen.stdout
        assert "oldest running trial: t1 / ctrl #0" in seen.stdout
        assert "this host's Docker engine (OCI runtimes runc" in seen.stdout  # runsc, if made
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=30)
    return process.pid, owned_by(api, process.pid)


# Alone: any run's start-up reaper would remove the killed run's sandboxes first.
@pytest.mark.exclusive
def test_a_killed_runs_sandboxes_go_at_once_by_gc_or_the_next_run(
    tmp_path: Path, docker_api: Any
) -> None:
    """`gc --dry-run` names them (owner gone) long before their deadline; the next run's
    start-up reaper removes them; a plain `gc` would too (the worker test below)."""
    pid, (containers, volumes) = killed_run(tmp_path / "killed", docker_api)
    assert containers and volumes, "SIGKILL leaves the sandbox behind (no finally ran)"
    views = views_of(pid)  # its copy-free workspace, where this host has them (CI does)
    assert views or not IN_CI, "the killed run's agent sandbox had no copy-free workspace"
    dry = run_cli("gc", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert f"would remove container {containers[0]}" in dry.stdout and "(owner gone)" in dry.stdout
    assert owned_by(docker_api, pid)[0] == containers, "--dry-run removes nothing"
    controls = make_suite(
        tmp_path / "next",
        [repo_task("t1")],
        [{"name": "ctrl", "control": True, "agent": {"type": "scripted", "action": "noop"}}],
    )
    result = run_cli("run", str(controls), "--out", str(tmp_path / "next" / "run"))
    assert result.returncode == 0, result.stderr
    assert f"reaper: removed container {containers[0]}" in result.stderr
    assert owned_by(docker_api, pid) == ([], [])
    for view in views:
        assert f"unmounted workspace view {view}" in result.stderr
        assert not view.exists() and str(view) not in Path("/proc/self/mountinfo").read_text()


def test_live_owners_and_owners_elsewhere_are_kept(docker_api: Any) -> None:
    """Owner alive (this process), owner in another PID namespace (a worker container):
    neither is removed before its deadline."""
    later = str(int(time.time() + 3600))
    here = host_identity()
    labels = [
        {"deltarun.pid": f"{os.getpid()}:0", "deltarun.host": here},
        {"deltarun.pid": "999999:1", "deltarun.host": "other-boot/pid:[1]"},
    ]
    made = [
        docker_api.create_container(
            PY_IMAGE, command=["true"], labels={**extra, "deltarun.deadline": later}
        )["Id"]
        for extra in labels
    ]
    try:
        done = run_cli("gc")
        assert done.returncode == 0, done.stderr
        alive = {c["Id"] for c in docker_api.containers(all=True)}
        assert set(made) <= alive, done.stdout
    finally:
        for container in made:
            docker_api.remove_container(container, force=True)


# Alone: any run's start-up reaper would remove the killed worker's sandboxes first.
@pytest.mark.exclusive
def test_gc_removes_what_a_killed_worker_left(
    tmp_path: Path, docker_api: Any, redis_server: Any
) -> None:
    """A Celery worker (main process and pool child) killed with SIGKILL mid-trial: the
    sandbox its pool child owned is removed by the next `deltarun gc` at once."""
    from tests.distributed_support import (
        at_gate,
        slow_suite,
        start_coordinator,
        start_worker,
        wait_for,
    )

    # The candidate's agent waits at a gate the test never opens: its trial runs until the
    # kill (the control's trial, a quick one, may come first on the same pool child).
    controls = slow_suite(tmp_path, tasks=1, gated=True)
    worker = start_worker(redis_server, tmp_path / "worker.log", "-c", "1")
    coordinator = start_coordinator(redis_server, controls, tmp_path / "run")
    try:
        sandbox, _ = wait_for(lambda: at_gate(docker_api, "w1"), 180, "the gated trial")
        owner = docker_api.inspect_container(sandbox)["Config"]["Labels"]["deltarun.pid"]
        pid = int(owner.split(":")[0])
        assert all(owned_by(docker_api, pid))
        seen = run_cli("status", str(tmp_path / "run"), "--broker", redis_server.url)
        assert seen.returncode == 0, seen.stderr
        assert "1 running" in seen.stdout and "@w1 (deltarun." in seen.stdout, seen.stdout
        assert "no live worker consumes" not in seen.stdout
        worker.kill(signal.SIGKILL, group=True)
        worker.wait(30)
        # The kernel ends the pool child a moment after its parent: until then it is alive,
        # and a gc rightly keeps its sandbox.
        wait_for(worker.group_gone, 30, "the killed worker's pool child to end")
        assert owned_by(docker_api, pid)[0], "SIGKILL leaves the sandbox behind"
        done = run_cli("gc")
        assert done.returncode == 0 and "(owner gone)" in done.stdout, done.stdout
        assert owned_by(docker_api, pid) == ([], [])
    finally:
        coordinator.stop()
        worker.stop()


def test_a_container_another_process_is_removing_is_no_error() -> None:
    """Two runs on one host reap at once: the engine answers 409 ("removal already in
    progress") to the second remove of the same container, which is what reaping wanted."""
    import docker

    from runner.sandbox.reaper import _reap_containers, _Verdict

    class Engine:
        def __init__(self, status: int) -> None:
            self.status = status

        def containers(self, all: bool, filters: dict[str, object]) -> list[dict[str, object]]:
            return [{"Id": "c" * 64, "Labels": {}}]

        def remove_container(self, container: str, force: bool, v: bool) -> None:
            response = type("Response", (), {"status_code": self.status, "reason": "x"})()
            raise docker.errors.APIError("removal in progress", response=response)

    verdict = _Verdict(now=0.0, here="h", include_live=True, past_deadline=False)
    lines = _reap_containers(Engine(409), {}, verdict, dry_run=False)  # type: ignore[arg-type]
    assert lines and lines[0].startswith("removed container cccccccccccc")
    with pytest.raises(docker.errors.APIError):
        _reap_containers(Engine(500), {}, verdict, dry_run=False)  # type: ignore[arg-type]
