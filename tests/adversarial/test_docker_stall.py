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
from runner.records import Job, Outcome
from runner.sandbox.docker import DockerSandboxFactory
from runner.suite.load import load_suite
from runner.trees.inputs import LocalInputs
from runner.trial.env import TrialEnv
from runner.trial.execute import execute_trial
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


class FreezingProxy(StallingProxy):
    """A whole engine that stalls: once the agent's command is frozen, no response of any
    request reaches the client (the requests themselves still reach the engine) until
    ``hold_s`` later, when the engine recovers and what it held back arrives."""

    def __init__(self, path: Path, marker: bytes, hold_s: float) -> None:
        super().__init__(path, marker)
        self.hold_s = hold_s
        self.thawed = threading.Event()

    def _pump_down(self, src: socket.socket, dst: socket.socket, state: dict[str, bool]) -> None:
        with contextlib.suppress(OSError):
            while data := src.recv(65536):
                if state.get("frozen"):
                    continue
                if self.stalled and not self.thawed.is_set():
                    self.thawed.wait()  # the engine answers nothing, on any connection
                if state.get("want_id"):
                    found = re.search(rb'"Id":"([0-9a-f]{64})"', data)
                    if found:
                        self._marked.add(found.group(1).decode())
                        state["want_id"] = False
                dst.sendall(data)
                if state.get("freeze_after_first"):
                    state["frozen"] = True
                    self.stalled += 1
                    threading.Timer(self.hold_s, self.thawed.set).start()
        if not state.get("frozen"):
            with contextlib.suppress(OSError):
                dst.shutdown(socket.SHUT_WR)


def test_an_engine_that_answers_nothing_is_an_infra_error_not_a_timeout(
    tmp_path: Path, docker_api: Any, held: Callable[[str, str, str], None]
) -> None:
    """The watchdog asks the engine how the command stands before it blames anyone: an
    engine silent to that question too is infrastructure, whatever the command did: here
    it stops its `timeout`, which an engine that answered would make a timeout."""
    agent = write_agent(tmp_path, "worker-agent", "echo started\nkill -STOP -1\nsleep 600\n")
    controls_path = make_suite(
        tmp_path,
        [repo_task("t1", timeout_s=DEADLINE)],
        [
            {"name": "ctrl", "control": True, "agent": {"type": "scripted", "action": "noop"}},
            {"name": "agent", "agent": agent},
        ],
    )
    # Past the watchdog (the limit, `timeout`'s kill grace, its own grace) and its question.
    hold_s = DEADLINE + 2 + 10 + 5 + 8
    proxy = FreezingProxy(tmp_path / "docker.sock", b"/opt/agent/run.sh", hold_s)
    try:
        client = docker.APIClient(base_url=f"unix://{proxy.path}", version="auto", timeout=30)
        loaded = load_controls(controls_path)
        suite = load_suite(loaded.suite_path, loaded.controls.suite.sha256)
        env = TrialEnv(loaded.controls, LocalInputs(suite), DockerSandboxFactory(client), "test")
        spec = next(a for a in loaded.controls.arms if a.name == "agent")
        agent_impl = make_agent(spec.agent, agent_members(spec.agent, loaded.base))
        job = Job(
            job_id="freeze-0",
            run_id="run-under-test-freeze",
            protocol_sha256="p" * 64,
            task_id="t1",
            arm="agent",
            repeat=0,
        )
        proxy.stall.set()
        start = time.monotonic()
        trial = execute_trial(job, suite.task("t1"), agent_impl, env)
        elapsed = time.monotonic() - start
        held(
            "Docker engine silent",
            "the engine answers nothing (not even the watchdog's question) mid-command",
            f"{trial.outcome.value} after {elapsed:.0f}s ({(trial.error or '')[:40]}...)",
        )
        assert proxy.stalled >= 1
        assert trial.outcome is Outcome.ERROR and "did not end a command" in (trial.error or "")
        assert elapsed < hold_s + 60
    finally:
        proxy.close()
        for container in docker_api.containers(
            all=True, filters={"label": "deltarun.run=run-under-test-freeze"}
        ):
            docker_api.remove_container(container["Id"], force=True, v=True)
