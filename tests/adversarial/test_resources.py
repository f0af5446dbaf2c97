"""Resource attacks: fork bomb, memory bomb, disk fill, output flood. Each bounded."""

from __future__ import annotations

import shutil
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from runner.records import Outcome, Trial
from tests.adversarial.support import REPORT_PY, hostile
from tests.helpers import ADD_GOLD, make_suite, repo_task, write_agent
from tests.test_trial_docker import run_one

pytestmark = pytest.mark.docker


def test_fork_bomb_is_held_and_the_neighbour_finishes(
    tmp_path: Path, docker_api: Any, held: Callable[[str, str, str], None]
) -> None:
    bomb = write_agent(tmp_path, "bomb", "bomb() { bomb | bomb & }\nbomb\nsleep 30\n")
    (tmp_path / "gold").mkdir()
    (tmp_path / "gold" / "t1.diff").write_text(ADD_GOLD)
    controls = make_suite(
        tmp_path,
        [repo_task("t1", timeout_s=8)],
        [
            {"name": "ctrl", "control": True, "agent": {"type": "scripted", "action": "noop"}},
            {"name": "bomb", "agent": bomb},
            {"name": "gold", "agent": {"type": "patch", "dir": "gold"}},
        ],
    )
    results: dict[str, Trial] = {}

    def go(arm: str) -> None:
        results[arm] = run_one(docker_api, controls, "t1", arm, run_id=f"run-{arm}")

    threads = [threading.Thread(target=go, args=(arm,)) for arm in ("bomb", "gold")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=180)
    bomb_trial, neighbour = results["bomb"], results["gold"]
    held(
        "fork bomb",
        "bash fork bomb beside a normal trial",
        f"bomb: {bomb_trial.outcome.value} (pids limit 256); neighbour: "
        f"{neighbour.outcome.value} in {neighbour.wall_s:.1f}s",
    )
    assert bomb_trial.outcome in (Outcome.TIMEOUT, Outcome.MISS) and bomb_trial.error is None
    assert neighbour.outcome is Outcome.SUCCESS


# Alone: the host's swap is measured.
@pytest.mark.exclusive
def test_memory_bomb_is_recorded_as_oom(
    tmp_path: Path, docker_api: Any, held: Callable[[str, str, str], None]
) -> None:
    swap_before = _swap_used()
    script = "python3 -c 'a = bytearray(2 * 1024 ** 3); print(len(a))'\n"
    trial = hostile(tmp_path, docker_api, script, repo=True, runtime={"limits": {"memory": "256m"}})
    held(
        "memory bomb",
        "allocate 2 GiB under a 256 MiB limit",
        f"{trial.outcome.value}, oom_killed={trial.oom_killed}, agent exit "
        f"{trial.agent_exit_code}; host swap used {swap_before} -> {_swap_used()} kB",
    )
    assert trial.oom_killed and trial.agent_exit_code == 137
    assert trial.outcome is Outcome.MISS and trial.error is None
    assert _swap_used() <= swap_before + 1024


def _swap_used() -> int:
    fields = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines())
    total = int(fields["SwapTotal"].split()[0])
    free = int(fields["SwapFree"].split()[0])
    return total - free


# Alone: the host's disk is measured.
@pytest.mark.exclusive
def test_disk_fill_is_bounded_everywhere(
    tmp_path: Path, docker_api: Any, held: Callable[[str, str, str], None]
) -> None:
    docker_root = docker_api.info()["DockerRootDir"]
    before = shutil.disk_usage(docker_root).used
    script = (
        REPORT_PY
        + r"""
import subprocess
result = {}
for target in ["/workspace/fill", "/tmp/fill", "/home/agent/fill", "/fill", "/usr/fill"]:
    proc = subprocess.run(["dd", "if=/dev/zero", "of=" + target, "bs=1M", "count=1024"],
                          capture_output=True, text=True)
    result[target] = [proc.returncode, proc.stderr.strip().splitlines()[0] if proc.stderr else ""]
    subprocess.run(["rm", "-f", target])
report(result)
"""
    )
    trial = hostile(
        tmp_path,
        docker_api,
        f"python3 - <<'EOF'\n{script}\nEOF\n",
        runtime={"limits": {"workspace": "128m"}},
    )
    after = shutil.disk_usage(docker_root).used
    answer = trial.answer or {}
    summary = ", ".join(f"{k}: {v[1].split(':')[-1].strip()}" for k, v in sorted(answer.items()))
    held(
        "disk fill",
        "dd 1 GiB into /workspace, /tmp, home, /, /usr",
        f"{summary}; host disk {(after - before) / 2**20:+.0f} MiB",
    )
    assert set(answer) == {"/workspace/fill", "/tmp/fill", "/home/agent/fill", "/fill", "/usr/fill"}
    for target, (code, message) in answer.items():
        assert code != 0, target
        # A full volume, a read-only root, or (gVisor, which checks permissions first) a
        # root-owned directory: each refuses the write.
        refused = ("No space left", "Read-only", "Permission denied")
        assert any(word in message for word in refused), (target, message)
    assert after - before < 64 * 2**20


def test_stdout_flood_is_capped(
    tmp_path: Path, docker_api: Any, held: Callable[[str, str, str], None]
) -> None:
    trial = hostile(
        tmp_path, docker_api, "head -c 200000000 /dev/zero | tr '\\0' x\n", repo=True, timeout_s=60
    )
    held(
        "stdout flood",
        "200 MB on stdout",
        f"{trial.outcome.value}; stored log {len(trial.agent_log)} chars, "
        f"truncated={trial.agent_log_truncated}",
    )
    assert trial.agent_log_truncated and len(trial.agent_log) <= 64 * 1024
    assert trial.outcome is Outcome.MISS and trial.error is None
