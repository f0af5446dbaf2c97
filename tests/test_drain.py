"""Scaling a worker down (real Redis, real Celery workers, real Docker): SIGTERM drains the
trial in flight to its record; a second SIGTERM hands an unfinished job back at once, and
another worker takes it long before the visibility timeout; nothing is recorded twice.

The candidate's trial waits at a gate (``slow_suite(gated=True)``) that only the test opens,
and only once the worker is where the test needs it: no trial ends before or after a
signal by chance."""

from __future__ import annotations

import json
import secrets
import signal
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from runner.sandbox.reaper import reap
from tests.distributed_support import (
    Proc,
    at_gate,
    leases,
    ledger_lines,
    open_gate,
    slow_suite,
    start_coordinator,
    start_worker,
    wait_for,
)

pytestmark = pytest.mark.docker


class Fleet:
    """One task (the control's trial and the gated candidate's), a coordinator, a first
    worker ``w1`` with -c 1 and, later, a second ``w2``; the workers' names are this test's
    own, so that the sandboxes looked up by worker label are never another test's."""

    def __init__(self, tmp_path: Path, server: Any, api: Any) -> None:
        self.tmp = tmp_path
        self.server = server
        self.api = api
        self.client = server.client()
        tag = secrets.token_hex(3)
        self.w1, self.w2 = f"w1-{tag}", f"w2-{tag}"
        self.run = tmp_path / "run"
        self.procs: list[Proc] = []

    def start(self, *extra: str) -> tuple[Proc, Proc, str, str]:
        """The first worker (``extra``: its options), then the coordinator; once the
        candidate's trial waits at its gate on the first worker: both processes, the
        sandbox it waits in and its job id."""
        controls = slow_suite(self.tmp, tasks=1, gated=True)
        first = self.worker(self.w1, *extra)
        coordinator = start_coordinator(self.server, controls, self.run)
        self.procs.append(coordinator)
        sandbox, job = wait_for(lambda: at_gate(self.api, self.w1), 180, "the gated trial")
        return first, coordinator, sandbox, job

    def worker(self, name: str, *extra: str) -> Proc:
        proc = start_worker(self.server, self.tmp / f"{name}.log", "-c", "1", *extra, name=name)
        self.procs.append(proc)
        return proc

    def sandboxes_of(self, worker: str) -> list[Any]:
        return list(self.api.containers(all=True, filters={"label": [f"deltarun.worker={worker}"]}))

    def stop(self) -> None:
        for proc in self.procs:
            proc.stop()
        for name in (self.w1, self.w2):  # a trial still waiting at its gate
            reap(self.api, dry_run=False, include_live=True, worker=name)


@pytest.fixture
def drain(tmp_path: Path, redis_server: Any, docker_api: Any) -> Iterator[Fleet]:
    fleet = Fleet(tmp_path, redis_server, docker_api)
    yield fleet
    fleet.stop()


def test_sigterm_finishes_the_trial_in_flight_then_exits_0(drain: Fleet) -> None:
    first, coordinator, sandbox, in_flight = drain.start("--log-json")
    first.kill(signal.SIGTERM)
    wait_for(lambda: "draining" in first.text(), 30, "the drain to start")
    open_gate(drain.api, sandbox)  # the trial in flight goes on only now
    assert first.wait(90) == 0, first.text()[-3000:]
    drain.worker(drain.w2)
    assert coordinator.wait(240) == 0, coordinator.text()[-3000:]
    records = ledger_lines(drain.run)
    counts = Counter(r["job_id"] for r in records)
    assert len(counts) == 2 and set(counts.values()) == {1}, counts
    assert not [r["error"] for r in records if r["error"]]
    drained = next(r for r in records if r["job_id"] == in_flight)
    assert drained["worker"] == drain.w1, "the trial in flight was finished by the drained worker"
    # --log-json: the trial's events as JSON objects, one per line, for log shippers.
    events = [json.loads(x) for x in first.text().splitlines() if x.startswith("{")]
    mine = [e["event"] for e in events if e.get("job_id") == in_flight]
    assert mine == ["trial_started", "trial_finished"], events
    finished = next(
        e for e in events if e.get("event") == "trial_finished" and e["job_id"] == in_flight
    )
    assert finished["worker"] == drain.w1 and finished["outcome"] == drained["outcome"]
    duplicates = drain.run / "trials.duplicates.jsonl"
    assert not duplicates.exists() or not duplicates.read_text().strip()


def test_a_second_sigterm_hands_the_job_back_at_once(drain: Fleet) -> None:
    first, _, _, job = drain.start()
    first.kill(signal.SIGTERM)
    wait_for(lambda: "draining" in first.text(), 30, "the drain to start")
    first.kill(signal.SIGTERM)
    assert first.wait(90) == 0, first.text()[-3000:]
    assert "released 1 unfinished job(s)" in first.text(), first.text()[-3000:]
    drain.worker(drain.w2)
    # Re-queued at once: w2 holds the job's lease within seconds (visibility: 7200 s).
    wait_for(
        lambda: any(
            k.endswith(job) and v.startswith(f"{drain.w2}:")
            for k, v in leases(drain.client).items()
        ),
        90,
        "the second worker to take the handed-back job",
    )
    records = [json.dumps(r) for r in ledger_lines(drain.run) if r["job_id"] == job]
    assert records == [], "the killed trial recorded nothing"
    assert drain.sandboxes_of(drain.w1) == [], "the drained worker's sandboxes are gone"


def test_a_worker_killed_while_draining_loses_nothing(drain: Fleet) -> None:
    """The service manager gives up on a drain and kills the worker and its pool (SIGKILL to
    the group): the job in flight comes back when its lease expires, another worker records
    it once, and that worker's start-up reaper removes what the killed one left."""
    first, coordinator, _, in_flight = drain.start()
    first.kill(signal.SIGTERM)
    wait_for(lambda: "draining" in first.text(), 30, "the drain to start")
    first.kill(signal.SIGKILL, group=True)
    first.wait(30)
    wait_for(first.group_gone, 30, "the killed worker's pool to end")
    drain.worker(drain.w2)
    sandbox, _ = wait_for(
        lambda: at_gate(drain.api, drain.w2, in_flight), 180, "the second worker to run the job"
    )
    open_gate(drain.api, sandbox)
    assert coordinator.wait(240) == 0, coordinator.text()[-3000:]
    records = ledger_lines(drain.run)
    counts = Counter(r["job_id"] for r in records)
    assert len(counts) == 2 and set(counts.values()) == {1}, counts
    assert not [r["error"] for r in records if r["error"]]
    assert next(r for r in records if r["job_id"] == in_flight)["worker"] == drain.w2
    assert drain.sandboxes_of(drain.w1) == [], "the killed worker's sandboxes are gone"
