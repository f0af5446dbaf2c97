"""Agents that exhaust their own sandbox: the trial is theirs, never an infrastructure error.

Under runc the host's kernel holds a fork bomb, a thread bomb or a filled tmpfs
inside the sandbox's limits and the harness's commands go on. Under gVisor
(``make adversarial-gvisor``) the sandbox's kernel is a process inside those
limits and dies of them, and the engine loses the command it was running (issue
36, item 8). Either way the outcome is the agent's (``miss`` or ``timeout``) with
its reason (``runner.sandbox.blame``); and a sandbox the engine or an operator
kills is still an ``error``, never pinned on the agent.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from runner.records import Outcome, Trial
from tests.adversarial.support import hostile, write_files
from tests.fake_openai import FakeModel, call, reply
from tests.test_openai_agent import run_model, suite_for

pytestmark = pytest.mark.docker

AGENT_PHASE = {
    "thread bomb": "python3 -c '\nimport threading, time\nwhile True:\n"
    "    threading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n'\n",
    "detached fork bomb": "setsid sh -c 'b() { b | b & }; b' </dev/null >/dev/null 2>&1 &\n"
    "sleep 30\n",
    "writer past the end": "setsid nohup sh -c 'while :; do date >> /workspace/late.txt; "
    "head -c 65536 /dev/zero >> /workspace/late.bin; done' </dev/null >/dev/null 2>&1 &\n",
    "swarm of late writers": "for i in $(seq 30); do (while :; do echo $i >> /workspace/w$i; "
    "sleep 0.05; done) & done\nsleep 1\n",
}
# Code under test (calc/__init__.py, imported by the hidden test, with add() fixed) that
# turns on its sandbox; the writer it leaves behind changes no verdict, so it passes.
UNDER_TEST = {
    "fork bomb": "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n"
    "        pass\n",
    "thread bomb": "import threading, time\nwhile True:\n    try:\n        threading.Thread("
    "target=time.sleep, args=(600,), daemon=True).start()\n    except RuntimeError:\n"
    "        pass\n",
    "writer left behind": "import os\nif os.fork() == 0:\n    os.setsid()\n"
    "    while True:\n        with open('/workspace/late.txt', 'a') as out:\n"
    "            out.write('x' * 65536)\n",
}
FILLS = {
    "/tmp": "dd if=/dev/zero of=/tmp/fill bs=1M count=2000",
    "/workspace": "dd if=/dev/zero of=/workspace/fill bs=1M count=2000",
    "every tmpfs in 256 MiB": "for t in /tmp /home/agent /dev/shm /workspace; do "
    "dd if=/dev/zero of=$t/fill bs=1M count=2000; done",
}


def _row(trial: Trial) -> str:
    reason = (trial.reason or trial.error or "")[:90]
    return f"{trial.outcome.value}, oom_killed={trial.oom_killed}: {reason}"


@pytest.mark.parametrize("attack", list(AGENT_PHASE))
def test_an_agent_that_exhausts_its_sandbox_gets_its_own_outcome(
    tmp_path: Path, docker_api: Any, held: Callable[[str, str, str], None], attack: str
) -> None:
    trial = hostile(tmp_path, docker_api, AGENT_PHASE[attack], repo=True, timeout_s=8)
    held(f"sandbox exhausted: {attack}", AGENT_PHASE[attack].splitlines()[0][:60], _row(trial))
    assert trial.error is None, trial.error
    assert trial.outcome in (Outcome.MISS, Outcome.TIMEOUT)


@pytest.mark.parametrize("attack", list(UNDER_TEST))
def test_code_under_test_that_exhausts_the_verify_sandbox_is_no_error(
    tmp_path: Path, docker_api: Any, held: Callable[[str, str, str], None], attack: str
) -> None:
    fixed = UNDER_TEST[attack] + "def add(a, b):\n    return a + b\n"
    # A bomb holds its sandbox at its limits until the verify timeout ends it, a core busy
    # all along: 8 s is as much a bomb as 20. The writer's hidden test must pass: room for it.
    verify_timeout_s = 20 if attack == "writer left behind" else 8
    trial = hostile(
        tmp_path,
        docker_api,
        write_files(("calc/__init__.py", fixed)),
        repo=True,
        runtime={"verify_timeout_s": verify_timeout_s},
        name="planter",
    )
    held(f"verify sandbox exhausted: {attack}", "at import of the code under test", _row(trial))
    assert trial.error is None, trial.error
    if attack == "writer left behind":
        assert trial.outcome is Outcome.SUCCESS
    else:
        assert trial.outcome in (Outcome.MISS, Outcome.TIMEOUT) and not trial.passed


@pytest.mark.parametrize("target", list(FILLS))
def test_a_disk_fill_is_a_miss(
    tmp_path: Path, docker_api: Any, held: Callable[[str, str, str], None], target: str
) -> None:
    limits = {"memory": "256m", "workspace": "64m"}
    trial = hostile(
        tmp_path,
        docker_api,
        FILLS[target] + "\n",
        repo=True,
        timeout_s=20,
        runtime={"limits": limits},
    )
    held(f"disk fill: {target}", "dd 2000 MiB, memory 256 MiB, workspace 64 MiB", _row(trial))
    assert trial.error is None, trial.error
    assert trial.outcome is Outcome.MISS


def test_a_model_that_floods_its_sandbox_keeps_its_tokens(
    tmp_path: Path, docker_api: Any, held: Callable[[str, str, str], None]
) -> None:
    flood = "for i in $(seq 40); do sleep 60 & done; sleep 3; echo done"
    script = [
        reply(call("run_command", {"command": flood}), usage=(100, 10)),
        reply(call("submit", {}), usage=(200, 5)),
    ]
    with FakeModel(script) as fake:
        trial = run_model(docker_api, suite_for(tmp_path, fake.base_url))
    held("model: process flood", "run_command with 40 background processes", _row(trial))
    assert trial.error is None, trial.error
    assert trial.outcome is Outcome.MISS
    assert trial.prompt_tokens >= 100 and trial.completion_tokens >= 10


def test_a_sandbox_the_engine_kills_is_still_an_error(
    tmp_path: Path, docker_api: Any, held: Callable[[str, str, str], None]
) -> None:
    """What an operator's `docker kill` (or an engine that ends its containers) does to a
    trial whose agent is running: an infrastructure error, not the agent's miss."""
    stop = threading.Event()

    def kill_when_running() -> None:
        seen: dict[str, float] = {}
        while not stop.wait(0.2):
            for found in docker_api.containers(filters={"label": "deltarun.job=job-t1-victim"}):
                first = seen.setdefault(found["Id"], time.monotonic())
                if time.monotonic() - first > 4.0:  # the agent's `sleep` runs by then
                    docker_api.kill(found["Id"])
                    return

    killer = threading.Thread(target=kill_when_running, daemon=True)
    killer.start()
    try:
        trial = hostile(tmp_path, docker_api, "sleep 60\n", repo=True, timeout_s=60, name="victim")
    finally:
        stop.set()
    held("engine kills the sandbox", "docker kill while the agent runs", _row(trial))
    assert trial.outcome is Outcome.ERROR and trial.error is not None
    assert "container stopped" in trial.error and not trial.tool_violation
    assert trial.wall_s < 40
