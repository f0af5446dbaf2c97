"""Hangs and evasion: whatever the agent does, it ends at its deadline and nothing survives."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from runner.records import Outcome
from tests.adversarial.support import hostile
from tests.conftest import leftover_sandboxes

pytestmark = pytest.mark.docker
DEADLINE = 3
MARGIN = 30  # sandbox start, verify and removal; the point is "not forever"

HANGS = {
    "sleep-infinity": "sleep infinity\n",
    "ignores-sigterm": "trap '' TERM INT HUP\nwhile :; do sleep 1; done\n",
    "blocked-read": "cat\nmkfifo /tmp/never\ncat /tmp/never\n",  # stdin is closed; a FIFO blocks
}


@pytest.mark.parametrize("case", sorted(HANGS))
def test_hang_ends_at_the_deadline(
    case: str, tmp_path: Path, docker_api: Any, held: Callable[[str, str, str], None]
) -> None:
    trial = hostile(tmp_path, docker_api, HANGS[case], repo=True, timeout_s=DEADLINE)
    held(
        f"hang: {case}",
        HANGS[case].strip().replace("\n", "; "),
        f"{trial.outcome.value} after {trial.wall_s:.1f}s (deadline {DEADLINE}s)",
    )
    assert trial.outcome is Outcome.TIMEOUT and trial.timeout and trial.error is None
    assert trial.wall_s < DEADLINE + MARGIN


def test_detached_processes_do_not_survive(
    tmp_path: Path, docker_api: Any, held: Callable[[str, str, str], None]
) -> None:
    script = "setsid nohup sleep 4242 >/dev/null 2>&1 &\n(sh -c 'sleep 4243 &' &)\nexit 0\n"
    trial = hostile(tmp_path, docker_api, script, repo=True)
    survivors = subprocess.run(["pgrep", "-f", "sleep 424[23]"], capture_output=True, text=True)
    held(
        "evasion: setsid nohup, double fork, exit 0",
        "background sleepers outlive the agent",
        f"{trial.outcome.value}; host processes left: {survivors.stdout.split() or 'none'}; "
        "no labelled container or volume",
    )
    assert trial.outcome is Outcome.MISS and trial.error is None
    assert survivors.stdout.strip() == ""
    assert leftover_sandboxes(docker_api, run=trial.run_id) == ([], [])
