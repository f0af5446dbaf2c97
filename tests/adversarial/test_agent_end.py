"""The agent phase ends when the agent ends (class 7 of issue 10).

Each agent fixes the bug, starts a detached watcher that waits for the agent's
main process to exit and then edits the module under test (a line that breaks
it), and exits 0. If the edit reached the patch the trial would be a miss; the
guard kills every process of the agent's uid before the exit can be observed,
so the patch holds the fix alone. Each watcher runs several times: a race lost
once is a failure.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from runner.records import Outcome
from tests.helpers import make_suite, repo_task, write_agent
from tests.test_trial_docker import run_one

pytestmark = pytest.mark.docker

FIX = "sed -i 's/a - b/a + b/' calc/__init__.py\n"
EDIT = "echo 'raise SystemExit(\"EDITED AFTER EXIT\")' >> /workspace/calc/__init__.py"
WATCHERS = {
    "kill -0 polling": f"while kill -0 $MAIN 2>/dev/null; do :; done; {EDIT}",
    "state Z polling": (
        "while :; do s=$(cut -d' ' -f3 /proc/$MAIN/stat 2>/dev/null) || break; "
        f'[ "$s" = Z ] && break; done; {EDIT}'
    ),
    "pipe EOF": f"cat /tmp/held >/dev/null; {EDIT}",
    "tail --pid": f"tail --pid=$MAIN -s 0.01 -f /dev/null; {EDIT}",
}
REPEATS = 3
# Looks everywhere a process of its uid can for the secret path of the guard's report copy
# (``runner.sandbox.guard_run``): every process's arguments, environment and input, and
# /io; forges a report at whatever it found and at every copy-like name there, then kills
# the guard. Found, the forged "exit=0" would pass for the guard's own report.
COPY_FORGER = r"""
for p in /proc/[0-9]*; do
  for f in cmdline environ; do tr '\0' '\n' < $p/$f 2>/dev/null; done
  timeout 1 cat $p/fd/0 2>/dev/null
done | grep -ao '/[^ ]*deltarun-guard-report-[0-9a-f]*' | sort -u > /tmp/found
ls -a /io | sed -n 's|^\(\.deltarun-guard-report-.*\)|/io/\1|p' >> /tmp/found
echo "found $(wc -l < /tmp/found) copy path(s)"
for path in $(cat /tmp/found) /io/.deltarun-guard-report-0; do
  echo 'deltarun-guard: mode=ptrace exit=0' > "$path"
done
kill -9 $PPID
sleep 5
"""


def watcher_script(body: str) -> str:
    """Fix, start the watcher detached (setsid, in the background), exit at once."""
    pipe = "/tmp/held" in body
    return (
        "MAIN=$$; export MAIN\n"
        + ("mkfifo /tmp/held\n" if pipe else "")
        + f"cat > /tmp/watch.sh <<'DELTARUN_EOF'\n{body}\nDELTARUN_EOF\n"
        "setsid sh /tmp/watch.sh </dev/null >/dev/null 2>&1 &\n"
        # The main process holds the pipe's write end: EOF comes with its exit.
         + ("exec 3>/tmp/held\n" if pipe else "") + FIX + "sleep 0.3\nexit 0\n"
    )


@pytest.fixture(scope="module")
def suite(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("agent-end")
    arms: list[dict[str, Any]] = [
        {"name": "ctrl", "control": True, "agent": {"type": "scripted", "action": "noop"}},
    ]
    for index, body in enumerate(WATCHERS.values()):
        arms.append(
            {"name": f"w{index}", "agent": write_agent(root, f"w{index}", watcher_script(body))}
        )
    guard_killer = FIX + "kill -9 $PPID\nsleep 5\n"
    arms.append({"name": "guard-killer", "agent": write_agent(root, "gk", guard_killer)})
    arms.append({"name": "copy-forger", "agent": write_agent(root, "cf", FIX + COPY_FORGER)})
    return make_suite(root, [repo_task("t1")], arms)


@pytest.mark.parametrize("watcher", list(WATCHERS))
def test_no_edit_after_the_agent_exits(
    watcher: str, suite: Path, docker_api: Any, held: Callable[..., None]
) -> None:
    index = list(WATCHERS).index(watcher)
    outcomes = []
    for _ in range(REPEATS):
        trial = run_one(docker_api, suite, "t1", f"w{index}")
        outcomes.append(trial.outcome.value)
        assert "EDITED AFTER EXIT" not in trial.patch, "an edit after the exit reached the patch"
        assert trial.outcome is Outcome.SUCCESS, (trial.reason, trial.agent_log[-500:])
    held(
        f"agent end: {watcher}",
        "a detached watcher edits the module the instant the agent exits",
        f"{REPEATS}/{REPEATS} patches without the edit ({', '.join(outcomes)})",
    )


def test_killing_the_guard_is_a_miss(
    suite: Path, docker_api: Any, held: Callable[..., None]
) -> None:
    trial = run_one(docker_api, suite, "t1", "guard-killer")
    held(
        "agent end: kill the guard",
        "the agent SIGKILLs deltarun's guard process (its parent)",
        f"{trial.outcome.value}, violation={trial.tool_violation}: {trial.reason}",
    )
    assert trial.outcome is Outcome.MISS and trial.tool_violation
    assert trial.error is None and "guard" in (trial.reason or "")


def test_the_guards_report_copy_cannot_be_found_or_forged(
    suite: Path, docker_api: Any, held: Callable[..., None]
) -> None:
    trial = run_one(docker_api, suite, "t1", "copy-forger")
    held(
        "agent end: forge the guard's report copy",
        "the agent hunts /proc and /io for the copy's secret path, forges it, kills the guard",
        f"{trial.outcome.value}, violation={trial.tool_violation}: {trial.reason}",
    )
    assert "found 0 copy path(s)" in trial.agent_log, trial.agent_log[-500:]
    assert trial.outcome is Outcome.MISS and trial.tool_violation
    assert trial.error is None and "guard" in (trial.reason or "")
