"""A Docker engine that stalls mid-command: the trial ends as an infrastructure error
within its deadline plus a margin, and the same worker goes on serving."""

from __future__ import annotations

import contextlib
import re
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import docker
import pytest

from runner.agents.factory import agent_members, make_agent
from runner.config.loader import load_controls
from runner.inputs import LocalInputs
from runner.models import Job, Outcome
from runner.sandbox.docker import DockerSandboxFactory
from runner.suite import load_suite
from runner.trial import TrialEnv, execute_trial
from tests.helpers import ADD_GOLD, make_suite, repo_task, write_agent

pytestmark = pytest.mark.docker
DEADLINE = 3


class StallingProxy:
    """A Unix-socket proxy to the real engine that can freeze the output of the agent's command.

    It learns the id of every exec whose command names ``marker`` and, while ``stall`` is
    set, forwards the start of such an exec and its first response bytes, then nothing.
    """

    def __init__(self, path: Path, marker: bytes, upstream: str = "/var/run/docker.sock") -> None:
        self.path = path
        self.marker = marker
        self.upstream = upstream
        self.stall = threading.Event()
        self.stalled = 0
        self._marked: set[str] = set()
        self._sockets: list[socket.socket] = []
        self.server = socket.socket(socket.AF_UNIX)
        self.server.bind(str(path))
        self.server.listen(64)
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            upstream = socket.socket(socket.AF_UNIX)
            upstream.connect(self.upstream)
            self._sockets += [client, upstream]
            state = {"frozen": False, "want_id": False}
            threading.Thread(
                target=self._pump_up, args=(client, upstream, state), daemon=True
            ).start()
            threading.Thread(
                target=self._pump_down, args=(upstream, client, state), daemon=True
            ).start()

    def _pump_up(self, src: socket.socket, dst: socket.socket, state: dict[str, bool]) -> None:
        with contextlib.suppress(OSError):
            while data := src.recv(65536):
                if self.marker in data:  # the exec-create body that names the agent's command
                    state["want_id"] = True
                match = re.search(rb"/exec/([0-9a-f]{64})/start", data)
                if match and self.stall.is_set() and match.group(1).decode() in self._marked:
                    state["freeze_after_first"] = True
                dst.sendall(data)
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)

    def _pump_down(self, src: socket.socket, dst: socket.socket, state: dict[str, bool]) -> None:
        with contextlib.suppress(OSError):
            while data := src.recv(65536):
                if state.get("frozen"):
                    continue  # the engine "stalls": nothing more reaches the client
                if state.get("want_id"):
                    found = re.search(rb'"Id":"([0-9a-f]{64})"', data)
                    if found:
                        self._marked.add(found.group(1).decode())
                        state["want_id"] = False
                dst.sendall(data)
                if state.get("freeze_after_first"):
                    state["frozen"] = True
                    self.stalled += 1
        if not state.get("frozen"):
            with contextlib.suppress(OSError):
                dst.shutdown(socket.SHUT_WR)

    def close(self) -> None:
        self.server.close()
        for sock in self._sockets:
            with contextlib.suppress(OSError):
                sock.close()


def test_stalled_engine_is_an_infra_error_and_the_worker_goes_on(
    tmp_path: Path, docker_api: Any, held: Callable[[str, str, str], None]
) -> None:
    script = "echo started\nsleep 1\nsed -i 's/a - b/a + b/' calc/__init__.py\n"
    agent = write_agent(tmp_path, "worker-agent", script)
    (tmp_path / "gold").mkdir()
    (tmp_path / "gold" / "t1.diff").write_text(ADD_GOLD)
    controls_path = make_suite(
        tmp_path,
        [repo_task("t1", timeout_s=DEADLINE)],
        [
            {"name": "ctrl", "control": True, "agent": {"type": "scripted", "action": "noop"}},
            {"name": "agent", "agent": agent},
        ],
    )
    proxy = StallingProxy(tmp_path / "docker.sock", marker=b"/opt/agent/run.sh")
    try:
        client = docker.APIClient(base_url=f"unix://{proxy.path}", version="auto", timeout=30)
        loaded = load_controls(controls_path)
        suite = load_suite(loaded.suite_path, loaded.controls.suite.sha256)
        env = TrialEnv(loaded.controls, LocalInputs(suite), DockerSandboxFactory(client), "test")
        spec = next(a for a in loaded.controls.arms if a.name == "agent")
        agent_impl = make_agent(spec.agent, agent_members(spec.agent, loaded.base))

        def job(n: int) -> Job:
            return Job(
                job_id=f"stall-{n}",
                run_id="run-under-test",
                protocol_sha256="p" * 64,
                task_id="t1",
                arm="agent",
                repeat=n,
            )

        proxy.stall.set()
        start = time.monotonic()
        stalled = execute_trial(job(0), suite.task("t1"), agent_impl, env)
        elapsed = time.monotonic() - start
        proxy.stall.clear()
        after = execute_trial(job(1), suite.task("t1"), agent_impl, env)
        held(
            "Docker API stall",
            "the engine stops sending a command's output mid-trial",
            f"{stalled.outcome.value} after {elapsed:.0f}s ({(stalled.error or '')[:40]}...); "
            f"next trial on the same worker: {after.outcome.value}",
        )
        assert proxy.stalled >= 1
        assert stalled.outcome is Outcome.ERROR and "did not end a command" in (stalled.error or "")
        assert elapsed < DEADLINE + 45
        assert after.outcome is Outcome.SUCCESS
    finally:
        proxy.close()
        for container in docker_api.containers(
            all=True, filters={"label": "deltarun.run=run-under-test"}
        ):
            docker_api.remove_container(container["Id"], force=True, v=True)
