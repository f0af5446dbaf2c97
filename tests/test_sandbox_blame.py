"""Who is to blame when a sandbox's command fails or stalls (``runner.sandbox.blame``).

Issue 36, item 8: under gVisor a fork bomb, a memory bomb or a filled tmpfs ends
the whole sandbox (its kernel, the sentry, dies inside the sandbox's limits), and
the engine loses the command; that is the agent's doing, never an infrastructure
error. An engine or an operator that ends the sandbox is still one. The rule with
fakes first, then the real engine: a sandbox killed from outside while untrusted
code runs is an error, promptly, not a miss (without the rule the killed command's
137 read as the agent breaking deltarun's guard).
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest

from runner.errors import SandboxError
from runner.sandbox import exec_io
from runner.sandbox.base import ROOT_USER, ExecRequest, Limits, SandboxLost, SandboxSpec
from runner.sandbox.blame import Blame, Evidence, fault, gather
from runner.sandbox.docker import DockerSandbox, DockerSandboxFactory
from runner.sandbox.exec_io import Verdict, Watchdog, frames
from tests.helpers import PY_IMAGE, RUNTIME_UNDER_TEST

MIB = 1 << 20

# --- the rule ---------------------------------------------------------------------------

AGENTS = {
    "oom-killed": Evidence(running=False, oom_killed=True, exit_code=137, memory_limit=256 * MIB),
    "sentry-died": Evidence(running=False, exit_code=2, runtime="runsc", pids_limit=256),
    "runtime-status": Evidence(running=False, exit_code=1, runtime="runc"),
    "pids-full": Evidence(running=True, pids=255, pids_limit=256),
    "memory-full": Evidence(running=True, memory=250 * MIB, memory_limit=256 * MIB),
}
ENGINES = {
    "no-answer": None,
    "paused": Evidence(running=True, paused=True, pids=256, pids_limit=256),
    "dead": Evidence(running=False, dead=True, exit_code=2),
    "killed": Evidence(running=False, exit_code=137, runtime="runsc"),
    "stopped": Evidence(running=False, exit_code=143),
    "lifetime-over": Evidence(running=False, exit_code=0),
    "engine-error": Evidence(running=False, exit_code=2, engine_error="shim died"),
    "room-left": Evidence(running=True, pids=40, pids_limit=256, memory=MIB, memory_limit=MIB * 9),
    "no-usage": Evidence(running=True, pids_limit=256, memory_limit=256 * MIB),
}


@pytest.mark.parametrize("evidence", list(AGENTS.values()), ids=list(AGENTS))
def test_the_sandboxs_own_state_makes_it_the_agents(evidence: Evidence) -> None:
    found = fault(evidence)
    assert found is not None and found.reason
    assert found.oom_killed == evidence.oom_killed
    assert found.exit_code == (137 if evidence.oom_killed else None)


@pytest.mark.parametrize("evidence", list(ENGINES.values()), ids=list(ENGINES))
def test_the_engine_or_an_operator_stays_infrastructure(evidence: Evidence | None) -> None:
    assert fault(evidence) is None


def test_reasons_name_the_evidence() -> None:
    sentry = fault(AGENTS["sentry-died"])
    oom = fault(AGENTS["oom-killed"])
    pids = fault(AGENTS["pids-full"])
    assert sentry is not None and "status 2" in sentry.reason and "(256)" in sentry.reason
    assert oom is not None and "256 MiB" in oom.reason and "OOM" in oom.reason
    assert pids is not None and "255 of 256" in pids.reason


class Engine:
    """Answers ``gather``'s questions from a fixed account of one container."""

    def __init__(self, state: dict[str, Any], stats: dict[str, Any] | None = None) -> None:
        self.state = state
        self._stats = stats or {}
        self.asked = 0

    def inspect_container(self, container: str) -> dict[str, Any]:
        self.asked += 1
        host = {"Runtime": "runsc", "PidsLimit": 256, "Memory": 256 * MIB}
        return {"State": self.state, "HostConfig": host}

    def stats(self, container: str, stream: bool, one_shot: bool) -> dict[str, Any]:
        return self._stats


@pytest.mark.parametrize(
    "detail", [{"total_inactive_file": 200 * MIB}, {"inactive_file": 200 * MIB}], ids=["v1", "v2"]
)
def test_reclaimable_cache_is_not_a_full_memory(detail: dict[str, int]) -> None:
    stats = {
        "pids_stats": {"current": 12, "limit": 256},
        "memory_stats": {"usage": 250 * MIB, "limit": 256 * MIB, "stats": detail},
    }
    evidence = gather(Engine({"Running": True}, stats), "c")  # type: ignore[arg-type]
    assert evidence is not None and evidence.memory == 50 * MIB and evidence.pids == 12
    assert fault(evidence) is None


def test_a_lost_sandbox_stays_lost_and_is_not_asked_again() -> None:
    engine = Engine({"Running": False, "OOMKilled": True, "ExitCode": 137})
    blame = Blame(engine, "c")  # type: ignore[arg-type]
    blame.begin(ExecRequest(argv=["agent"], untrusted=True))

    def lose() -> None:
        raise SandboxError("Docker failed while a command ran: 409 container is not running")

    with pytest.raises(SandboxLost) as lost:
        blame.judged(lose)
    assert lost.value.oom_killed and lost.value.exit_code == 137
    asked = engine.asked
    with pytest.raises(SandboxLost):
        blame.begin()
    assert engine.asked == asked


def test_before_untrusted_code_every_failure_is_infrastructure() -> None:
    engine = Engine({"Running": False, "OOMKilled": True, "ExitCode": 137})
    blame = Blame(engine, "c")  # type: ignore[arg-type]
    blame.begin(ExecRequest(argv=["git", "diff"]))

    def fail() -> None:
        raise SandboxError("Docker failed while a command ran")

    with pytest.raises(SandboxError):
        blame.judged(fail)
    assert engine.asked == 0


# --- the watchdog sees a container stop under a command -----------------------------------


class Stopping:
    """A container that stops under a silent command whose exec the engine then forgets."""

    def __init__(self) -> None:
        self.stopped = threading.Event()

    def inspect_container(self, container: str) -> dict[str, Any]:
        return {"State": {"Running": not self.stopped.is_set(), "Paused": False}}

    def exec_inspect(self, exec_id: str) -> dict[str, Any]:
        raise AssertionError("a stopped container's command is not asked about")

    def kill(self, container: str) -> None:
        raise AssertionError("a stopped container is not killed")


def test_a_container_that_stops_ends_its_command_long_before_the_deadline(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(exec_io, "LIVENESS_S", 0.1)
    engine = Stopping()
    reader, writer = socket.socketpair()
    reader.settimeout(0.05)
    watchdog = Watchdog(engine, "c", 600.0)  # type: ignore[arg-type]
    watchdog.watch("e")
    watchdog.attach(reader)
    threading.Timer(0.3, engine.stopped.set).start()
    began = time.monotonic()
    list(frames(reader, watchdog.ended))  # the stream of a lost command never ends by itself
    assert watchdog.finish() is Verdict.GONE
    assert time.monotonic() - began < 5.0
    writer.close()


# --- the real engine ----------------------------------------------------------------------


@pytest.fixture
def sandbox(docker_api: Any) -> Iterator[DockerSandbox]:
    spec = SandboxSpec(
        image=PY_IMAGE,
        limits=Limits(memory_bytes=512 << 20, nano_cpus=10**9, pids=256, workspace_bytes=64 << 20),
        lifetime_s=300,
        labels={"run": "sandbox-blame-test", "job": "kill"},
        oci_runtime=RUNTIME_UNDER_TEST.get("oci_runtime"),
    )
    with DockerSandboxFactory(docker_api).open(spec) as opened:
        yield opened


@pytest.mark.docker
@pytest.mark.parametrize("untrusted", [True, False], ids=["untrusted", "harness"])
def test_a_sandbox_killed_from_outside_is_infrastructure(
    sandbox: DockerSandbox, docker_api: Any, untrusted: bool
) -> None:
    threading.Timer(2.0, lambda: docker_api.kill(sandbox.container)).start()
    began = time.monotonic()
    request = ExecRequest(argv=["sleep", "120"], timeout_s=120, untrusted=untrusted)
    with pytest.raises(SandboxError, match="container stopped"):
        sandbox.run(request)
    assert time.monotonic() - began < 30.0  # seen stopped, not waited out to the deadline
    with pytest.raises(SandboxError):
        sandbox.run(ExecRequest(argv=["true"], timeout_s=30, untrusted=untrusted))


@pytest.mark.docker
def test_a_command_beside_one_the_sandbox_held_ends_as_its_timeout(sandbox: DockerSandbox) -> None:
    """The verify phase's collector beside a test whose harness the code under test stopped:
    the watchdog kills the container for the held test, which is the agent's timeout, and
    the collector ends with it as a timeout, not as a container lost under it."""
    beside = sandbox.start(ExecRequest(argv=["sleep", "600"], user=ROOT_USER, timeout_s=600))
    stopper = ExecRequest(argv=["sh", "-c", "kill -STOP $PPID; sleep 600"], timeout_s=2)
    held = sandbox.run(replace(stopper, untrusted=True))
    assert held.timed_out and held.exit_code is None
    began = time.monotonic()
    ended = beside.finish()
    assert ended.timed_out and ended.exit_code is None
    assert time.monotonic() - began < 5.0
