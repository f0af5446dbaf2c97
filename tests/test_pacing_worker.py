"""``deltarun worker -c auto --max 3`` on a real Redis and the Docker engine: it starts at
one trial, raises one step at a time while the trials go fine, and ``deltarun status``
shows its level and why; bad ``-c``/``--max`` values are one line each."""

from __future__ import annotations

import json
import re
import time
from datetime import datetime
from pathlib import Path

import pytest

from runner.distributed.pacing_samples import level_key, samples_key
from tests.conftest import run_cli
from tests.distributed_support import (
    RedisServer,
    ledger_lines,
    slow_suite,
    start_coordinator,
    start_worker,
    wait_for,
)

pytestmark = pytest.mark.docker
# Short holds so that a ten-trial run shows the raises (the defaults are 10 s and 2 s).
FAST_PACE = {"DELTARUN_PACE_HOLD_S": "1", "DELTARUN_PACE_TICK_S": "0.5"}


def _in_flight_at_most(records: list[dict[str, object]]) -> int:
    """The most trials whose [started_at, finished_at] spans overlap at one instant."""
    edges = []
    for r in records:
        edges.append((datetime.fromisoformat(str(r["started_at"])), 1))
        edges.append((datetime.fromisoformat(str(r["finished_at"])), -1))
    most = now = 0
    for _, step in sorted(edges, key=lambda e: (e[0], e[1])):
        now += step
        most = max(most, now)
    return most


def _pool_processes(pid: int) -> int:
    """The worker's pool processes: its live children."""
    count = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text(errors="replace").rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        count += fields[1] == str(pid) and fields[0] not in ("Z", "X")
    return count


def _lowered_by_an_engine_failure(server: RedisServer, worker_pid: int) -> str:
    """Leave the worker's pacer an exec failure, as a pool process does for an engine
    error, and wait for its level and its pool to come down by one."""
    client = server.client()
    node = next(k.decode() for k in client.keys(level_key("*")) if b":samples" not in k)
    node = node.removeprefix(level_key(""))
    level = int(client.hget(level_key(node), "level") or 0)
    wait_for(lambda: _pool_processes(worker_pid) == level, 30, f"{level} pool processes")
    client.rpush(samples_key(node), json.dumps([time.time(), "failure", 0]))
    wait_for(lambda: int(client.hget(level_key(node), "level") or 0) == level - 1, 30, "lower")
    wait_for(lambda: _pool_processes(worker_pid) == level - 1, 30, "the pool to shrink")
    time.sleep(1.5)  # three more decisions: one failure lowers by one step, once
    assert int(client.hget(level_key(node), "level") or 0) == level - 1
    assert _pool_processes(worker_pid) == level - 1
    return str(client.hget(level_key(node), "reason").decode())


def test_auto_worker_starts_low_raises_and_status_says_why(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    controls = slow_suite(tmp_path, tasks=5, sleep_s=1.0)  # 10 jobs
    worker = start_worker(
        redis_server, tmp_path / "worker.log", "-c", "auto", "--max", "3", env=FAST_PACE
    )
    try:
        out = tmp_path / "run"
        coordinator = start_coordinator(redis_server, controls, out)
        assert coordinator.wait(150) == 0, coordinator.text()
        status = run_cli("status", str(out), "--broker", redis_server.url, timeout=60)
        text = worker.text()
        lowered = _lowered_by_an_engine_failure(redis_server, worker.pid)
    finally:
        worker.stop()
    assert "-c auto (1 to 3)" in text
    assert "pace: level 1 of at most 3: started at the floor" in text
    steps = [(int(a), int(b)) for a, b in re.findall(r"pace: level (\d) -> (\d)", text)]
    assert steps and steps[0] == (1, 2), text
    assert all(abs(b - a) == 1 and 1 <= b <= 3 for a, b in steps), steps
    # The control misses every task: an agent's misses are no exec failures (a loaded host
    # may still lower the level for slow container starts, as it should).
    assert "exec failure(s)" not in text
    assert all("container start median" in line for line in re.findall(r"raised from .*", text))
    records = sorted(ledger_lines(out), key=lambda r: str(r["started_at"]))
    assert len(records) == 10 and not [r for r in records if r["error"]]
    # No start-up burst: the second trial started once the first had ended or the level had
    # risen to 2, not before (the log's times are local, the records' UTC)...
    raised = re.search(r"^(\S+ \S+) .*pace: level 1 -> 2", text, re.MULTILINE)
    assert raised is not None
    rose = datetime.strptime(raised[1], "%Y-%m-%d %H:%M:%S,%f").astimezone().timestamp()
    second = datetime.fromisoformat(str(records[1]["started_at"])).timestamp()
    first_end = datetime.fromisoformat(str(records[0]["finished_at"])).timestamp()
    assert second >= min(first_end, rose), (records[:2], raised[0])
    # ...and the pool really grew: trials overlapped later, never more than the ceiling.
    assert 2 <= _in_flight_at_most(records) <= 3
    assert status.returncode == 0, status.stderr
    line = next(x for x in status.stdout.splitlines() if "-c auto: level" in x)
    assert re.search(r"@w1 -c auto: level [123] of at most 3: (raised|lowered) from", line), line
    assert "; now: " in line
    assert lowered.startswith("lowered from ") and "1 exec failure(s)" in lowered, lowered


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["-c", "many"], "-c/--concurrency: 'many' is neither a whole number"),
        (["-c", "0"], "-c/--concurrency: '0' is neither"),
        (["-c", "2", "--max", "3"], "--max 3: it goes with -c auto"),
    ],
)
def test_bad_concurrency_is_one_line(
    redis_server: RedisServer, args: list[str], words: str
) -> None:
    result = run_cli("worker", "--broker", redis_server.url, *args, timeout=60)
    assert result.returncode != 0
    assert words in result.stderr + result.stdout
    assert "Traceback" not in result.stderr
