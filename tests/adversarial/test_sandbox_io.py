"""Only the trial's own limits end a phase (issue 23, items 6-8).

An agent (or the code under test) runs as the uid of the harness's own processes in
the sandbox: it can stop the in-container ``timeout`` and the guard. Past its limit
that is the agent's timeout, never an infrastructure error. A file is read up to its
cap, however large the agent made it. And silence within the limits is no failure,
whatever the engine client's read timeout.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import docker
import pytest

from runner.records import Outcome, Trial
from tests.adversarial.support import PROBE_TASK
from tests.helpers import ADD_HIDDEN, make_suite, repo_task, write_agent
from tests.test_trial_docker import run_one

pytestmark = pytest.mark.docker
DEADLINE = 5
HANG_BOUND_S = 60  # sandbox start, the watchdog's grace, removal: the point is "not forever"


def hostile(
    tmp_path: Path,
    docker_api: Any,
    script: str,
    *,
    repo: bool = False,
    timeout_s: float = 30,
    runtime: dict[str, Any] | None = None,
) -> Trial:
    """``tests.adversarial.support.hostile`` under a run id of this file's own: the check
    that no sandbox is left counts this test's sandboxes only, never those of another
    session running ``run-under-test`` trials on the same engine."""
    agent = write_agent(tmp_path, "hostile", script)
    task: dict[str, Any] = (
        repo_task("t1", timeout_s=timeout_s) if repo else {**PROBE_TASK, "deadline_s": timeout_s}
    )
    controls = make_suite(
        tmp_path,
        [task],
        [
            {"name": "ctrl", "control": True, "agent": {"type": "scripted", "action": "noop"}},
            {"name": "hostile", "agent": agent},
        ],
        runtime=runtime,
    )
    return run_one(
        docker_api, controls, task["id"], "hostile", run_id=f"sandbox-io-{uuid.uuid4().hex[:12]}"
    )


# Each stops the harness's processes of the agent's uid, then outlives its limit.
STOPPERS = {
    # Every process the agent may signal: `timeout`, the guard (the shell itself is spared).
    "kill-all": "sleep 1\nkill -STOP -1\nsleep 600\n",
    # Only its ancestors, found through /proc: the guard, then `timeout`.
    "ancestors": (
        "sleep 1\npid=$PPID\n"
        'while [ "$pid" -gt 1 ]; do\n'
        "  read -r _ _ _ parent _ < /proc/$pid/stat\n"
        "  kill -STOP $pid\n"
        "  pid=$parent\n"
        "done\nsleep 600\n"
    ),
}


@pytest.mark.parametrize("case", sorted(STOPPERS))
def test_stopping_the_harness_is_the_agents_timeout(
    case: str, tmp_path: Path, docker_api: Any, held: Callable[[str, str, str], None]
) -> None:
    trial = hostile(tmp_path, docker_api, STOPPERS[case], repo=True, timeout_s=DEADLINE)
    held(
        f"stop the harness: {case}",
        "SIGSTOP the in-sandbox timeout and guard, then run past the limit",
        f"{trial.outcome.value} after {trial.wall_s:.0f}s (limit {DEADLINE}s); "
        f"error: {trial.error}",
    )
    assert trial.outcome is Outcome.TIMEOUT and trial.timeout and trial.error is None
    assert trial.wall_s < DEADLINE + HANG_BOUND_S


STOPPING_CODE = (
    "import os, signal, time\n\n"
    "os.kill(-1, signal.SIGSTOP)  # the test's sh, its timeout\n"
    "time.sleep(3600)\n\n\n"
    "def add(a, b):\n    return a + b\n"
)


def test_code_under_test_stopping_the_harness_is_a_timeout(
    tmp_path: Path, docker_api: Any, held: Callable[[str, str, str], None]
) -> None:
    script = f"cat > calc/__init__.py <<'EOF'\n{STOPPING_CODE}EOF\n"
    trial = hostile(tmp_path, docker_api, script, repo=True, runtime={"verify_timeout_s": DEADLINE})
    held(
        "stop the harness from the tests",
        "the patched module SIGSTOPs every process of its uid when the hidden test imports it",
        f"{trial.outcome.value} after {trial.wall_s:.0f}s (verify limit {DEADLINE}s); "
        f"error: {trial.error}",
    )
    assert trial.outcome is Outcome.TIMEOUT and trial.error is None
    assert trial.reason == "the hidden tests timed out"
    assert trial.wall_s < DEADLINE + HANG_BOUND_S


def test_a_sparse_80_gib_answer_is_over_the_cap_not_read(
    tmp_path: Path, docker_api: Any, held: Callable[[str, str, str], None]
) -> None:
    script = 'truncate -s 80G "$DELTARUN_ANSWER_FILE"\n'
    trial = hostile(tmp_path, docker_api, script, timeout_s=DEADLINE)
    held(
        "huge sparse answer",
        "an 80 GiB sparse answer file (free on a tmpfs, an hour to stream)",
        f"{trial.outcome.value} after {trial.wall_s:.0f}s: {trial.reason}",
    )
    assert trial.outcome is Outcome.MISS and trial.error is None
    assert "over the output cap" in (trial.reason or "")
    assert trial.wall_s < DEADLINE + HANG_BOUND_S


SILENT_HIDDEN = {
    "tests/test_hidden.py": (
        "import time\n\nfrom calc import add\n\n\n"
        "def test_add():\n    time.sleep(14)\n    assert add(2, 3) == 5\n"
    ),
}


def test_silence_past_the_clients_read_timeout_is_no_error(
    tmp_path: Path, held: Callable[[str, str, str], None]
) -> None:
    """A 10 s read timeout on the engine client (60 s by default: shortened to keep the
    test quick); the agent and then the hidden test are silent for 14 s each."""
    client = docker.APIClient(version="auto", timeout=10, **docker.utils.kwargs_from_env())
    agent = write_agent(tmp_path, "quiet", "sleep 14\nsed -i 's/a - b/a + b/' calc/__init__.py\n")
    controls = make_suite(
        tmp_path,
        [repo_task("t1", timeout_s=60)],
        [
            {"name": "ctrl", "control": True, "agent": {"type": "scripted", "action": "noop"}},
            {"name": "quiet", "agent": agent},
        ],
        hidden={"t1": {**ADD_HIDDEN, **SILENT_HIDDEN}},
    )
    trial = run_one(client, controls, "t1", "quiet", run_id=f"sandbox-io-{uuid.uuid4().hex[:12]}")
    held(
        "silence",
        "agent and hidden test silent for 14 s under a 10 s client read timeout",
        f"{trial.outcome.value}; error: {trial.error}",
    )
    assert trial.outcome is Outcome.SUCCESS and trial.error is None, trial
