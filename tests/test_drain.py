"""Scaling a worker down (real Redis, real Celery workers, real Docker): SIGTERM drains the
trial in flight to its record; a second SIGTERM hands an unfinished job back at once, and
another worker takes it long before the visibility timeout; nothing is recorded twice."""

from __future__ import annotations

import json
import signal
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.distributed_support import (
    leases,
    ledger_lines,
    slow_suite,
    start_coordinator,
    start_worker,
    wait_for,
)

pytestmark = pytest.mark.docker


def slow_lease(client: Any, run: Path, hold_s: float) -> str:
    """The job of a lease still held, unrecorded, ``hold_s`` later (the slow arm's, not the
    control's trial of seconds), or "" for now."""

    def unfinished() -> list[str]:
        done = {r["job_id"] for r in ledger_lines(run)}
        return [k.rsplit(":", 1)[1] for k in leases(client) if k.rsplit(":", 1)[1] not in done]

    held = unfinished()
    if not held:
        return ""
    time.sleep(hold_s)
    return held[0] if held[0] in unfinished() else ""


def test_sigterm_finishes_the_trial_in_flight_then_exits_0(
    tmp_path: Path, redis_server: Any, docker_api: Any
) -> None:
    controls = slow_suite(tmp_path, tasks=1, sleep_s=6)
    first = start_worker(redis_server, tmp_path / "w1.log", "-c", "1", "--log-json", name="w1")
    coordinator = start_coordinator(redis_server, controls, tmp_path / "run")
    client = redis_server.client()
    second = None
    try:
        lease = wait_for(lambda: next(iter(leases(client)), ""), 120, "a trial to start")
        in_flight = lease.rsplit(":", 1)[1]
        first.kill(signal.SIGTERM)
        assert first.wait(90) == 0, first.text()[-3000:]
        assert "draining" in first.text()
        second = start_worker(redis_server, tmp_path / "w2.log", "-c", "1", name="w2")
        assert coordinator.wait(240) == 0, coordinator.text()[-3000:]
        records = ledger_lines(tmp_path / "run")
        counts = Counter(r["job_id"] for r in records)
        assert len(counts) == 2 and set(counts.values()) == {1}, counts
        assert not [r["error"] for r in records if r["error"]]
        drained = next(r for r in records if r["job_id"] == in_flight)
        assert drained["worker"] == "w1", "the trial in flight was finished by the drained worker"
        # --log-json: the trial's events as JSON objects, one per line, for log shippers.
        events = [json.loads(x) for x in first.text().splitlines() if x.startswith("{")]
        mine = [e["event"] for e in events if e.get("job_id") == in_flight]
        assert mine == ["trial_started", "trial_finished"], events
        finished = next(
            e for e in events if e.get("event") == "trial_finished" and e["job_id"] == in_flight
        )
        assert finished["worker"] == "w1" and finished["outcome"] == drained["outcome"]
        duplicates = tmp_path / "run" / "trials.duplicates.jsonl"
        assert not duplicates.exists() or not duplicates.read_text().strip()
    finally:
        coordinator.stop()
        first.stop()
        if second is not None:
            second.stop()


def test_a_second_sigterm_hands_the_job_back_at_once(
    tmp_path: Path, redis_server: Any, docker_api: Any
) -> None:
    controls = slow_suite(tmp_path, tasks=1, sleep_s=300)
    first = start_worker(redis_server, tmp_path / "w1.log", "-c", "1", name="w1")
    coordinator = start_coordinator(redis_server, controls, tmp_path / "run")
    client = redis_server.client()
    second = None
    try:
        # The control's trial takes seconds; the slow arm's holds the worker for 300 s.
        job = wait_for(lambda: slow_lease(client, tmp_path / "run", 8), 180, "the slow trial")
        first.kill(signal.SIGTERM)
        wait_for(lambda: "draining" in first.text(), 30, "the drain to start")
        first.kill(signal.SIGTERM)
        assert first.wait(90) == 0, first.text()[-3000:]
        assert "released 1 unfinished job(s)" in first.text(), first.text()[-3000:]
        second = start_worker(redis_server, tmp_path / "w2.log", "-c", "1", name="w2")
        # Re-queued at once: w2 holds the job's lease within seconds (visibility: 7200 s).
        wait_for(
            lambda: any(k.endswith(job) and v.startswith("w2:") for k, v in leases(client).items()),
            90,
            "the second worker to take the handed-back job",
        )
        records = [json.dumps(r) for r in ledger_lines(tmp_path / "run") if r["job_id"] == job]
        assert records == [], "the killed trial recorded nothing"
        left = docker_api.containers(all=True, filters={"label": ["deltarun.worker=w1"]})
        assert left == [], "the drained worker's sandboxes are gone"
    finally:
        coordinator.stop()
        first.stop()
        if second is not None:
            second.stop()


def test_a_worker_killed_while_draining_loses_nothing(
    tmp_path: Path, redis_server: Any, docker_api: Any
) -> None:
    """The service manager gives up on a drain and kills the worker and its pool (SIGKILL to
    the group): the job in flight comes back when its lease expires, another worker records
    it once, and that worker's start-up reaper removes what the killed one left."""
    controls = slow_suite(tmp_path, tasks=1, sleep_s=12)
    first = start_worker(redis_server, tmp_path / "w1.log", "-c", "1", name="w1")
    coordinator = start_coordinator(redis_server, controls, tmp_path / "run")
    client = redis_server.client()
    second = None
    try:
        in_flight = wait_for(lambda: slow_lease(client, tmp_path / "run", 2), 120, "slow trial")
        first.kill(signal.SIGTERM)
        wait_for(lambda: "draining" in first.text(), 30, "the drain to start")
        first.kill(signal.SIGKILL, group=True)
        first.wait(30)
        second = start_worker(redis_server, tmp_path / "w2.log", "-c", "1", name="w2")
        assert coordinator.wait(240) == 0, coordinator.text()[-3000:]
        records = ledger_lines(tmp_path / "run")
        counts = Counter(r["job_id"] for r in records)
        assert len(counts) == 2 and set(counts.values()) == {1}, counts
        assert not [r["error"] for r in records if r["error"]]
        assert next(r for r in records if r["job_id"] == in_flight)["worker"] == "w2"
        left = docker_api.containers(all=True, filters={"label": ["deltarun.worker=w1"]})
        assert left == [], "the killed worker's sandboxes are gone"
    finally:
        coordinator.stop()
        first.stop()
        if second is not None:
            second.stop()
