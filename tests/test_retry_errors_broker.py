"""``run --retry-errors`` through a broker: a real Redis, a real coordinator and a real
``deltarun worker`` on the Docker engine.

The first run's coordinator publishes the suite; then Redis loses t1's hidden-test archive
(a restart without persistence, an eviction) before the worker takes the jobs: each t1
trial ends in an infrastructure ``error``. The retry's coordinator publishes the archive
again and sends only those jobs; the done marks a killed coordinator would have left in
Redis (a worker skips a done job) do not keep them from running.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from runner.distributed import keys
from runner.records import Outcome
from runner.store.rundir import RunDir
from tests.conftest import run_cli
from tests.distributed_support import Proc, RedisServer, start_coordinator, start_worker, wait_for
from tests.test_retry_errors_docker import suite

pytestmark = pytest.mark.docker


@pytest.fixture
def procs() -> Iterator[list[Proc]]:
    started: list[Proc] = []
    yield started
    for proc in started:
        proc.stop()


def hidden_sha256(controls: Path, task_id: str) -> str:
    lines = (controls.parent / "suite" / "tasks.jsonl").read_text().splitlines()
    return str(
        next(json.loads(x) for x in lines if json.loads(x)["id"] == task_id)["hidden_sha256"]
    )


def test_a_broker_run_retries_only_its_errors(
    tmp_path: Path, redis_server: RedisServer, procs: list[Proc], docker_api: Any
) -> None:
    controls, run = suite(tmp_path), tmp_path / "run"
    client = redis_server.client()
    first = start_coordinator(redis_server, controls, run)
    procs.append(first)
    wait_for(lambda: client.keys(keys.protocol("*")), 120, "the run's bundle in Redis")
    assert client.delete(keys.blob(hidden_sha256(controls, "t1"))) == 1  # Redis lost it
    procs.append(start_worker(redis_server, tmp_path / "worker.log", "-c", "2"))
    assert first.wait(240) == 0, first.text()
    by = {(t.arm, t.task_id): t for t in RunDir(run).trials()}
    assert by["ctrl", "t1"].outcome is Outcome.ERROR and by["cand", "t1"].outcome is Outcome.ERROR
    assert "not in Redis" in (by["cand", "t1"].error or "")
    assert by["cand", "t0"].outcome is Outcome.SUCCESS and by["ctrl", "t0"].outcome is Outcome.MISS

    # As a coordinator killed before it finished leaves them: the errors' jobs marked done.
    run_id = RunDir(run).meta().run_id
    for key in (("ctrl", "t1"), ("cand", "t1")):
        client.hset(keys.done(run_id), by[key].job_id, "w1")
    before = (run / "trials.jsonl").read_bytes()
    again = start_coordinator(redis_server, controls, run, "--retry-errors")
    procs.append(again)
    assert again.wait(240) == 0, again.text()
    assert "2 errors to run again" in again.text()

    ledger = (run / "trials.jsonl").read_bytes()
    assert ledger.startswith(before)  # the error records stay, for audit
    added = [json.loads(line) for line in ledger[len(before) :].splitlines()]
    assert sorted((r["arm"], r["task_id"], r["attempt"]) for r in added) == [
        ("cand", "t1", 2),
        ("ctrl", "t1", 2),
    ]
    now = {(t.arm, t.task_id): t for t in RunDir(run).trials()}
    assert now["cand", "t1"].outcome is Outcome.SUCCESS and now["cand", "t1"].worker == "w1"
    assert now["ctrl", "t1"].outcome is Outcome.MISS
    report = json.loads((run / "report.json").read_text())
    numbers = {**report, **(report.get("withheld_for_author") or {})}
    assert numbers["accountings"]["retried"] == 2
    replayed = run_cli("replay", str(run))
    assert replayed.returncode == 0 and "identical" in replayed.stdout, replayed.stderr
