"""Redis returns to its size (issue 41, item 6), on a real Redis and a real Celery worker:
the bench worker (``bench/bench_worker.py``: the production ``serve`` with a trial body that
opens no sandbox) serves ten runs through the real coordinator; a finished run removes its
record stream and its done and started hashes, and ``gc --broker`` what the runs' blobs and
entries left. ``used_memory`` after the tenth run and gc is within a small margin of what it
was after the first (Celery's own bindings are made by the first). A run whose coordinator
was killed leaves keys that expire, and gc removes them once the run is no longer live."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from runner.distributed import blob_gc, keys
from runner.distributed.credentials import Broker
from runner.run.service import RunOptions, RunService
from tests.distributed_support import RedisServer, session_key

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from bench.dispatch import answer_suite  # noqa: E402
from bench.fleet import Notes, stop, wait_serving  # noqa: E402

MARGIN = 64 * 1024  # bytes: one run leaked about 30 KiB before (24 records, two hashes)
RUNS = 10


def _worker(server: RedisServer, tmp_path: Path) -> subprocess.Popen[bytes]:
    log = tmp_path / "bench-worker.log"
    env = {**os.environ, "DELTARUN_BROKER_URL": server.url, "DELTARUN_CACHE": str(tmp_path)}
    with log.open("ab") as handle:
        proc = subprocess.Popen(
            [sys.executable, str(ROOT / "bench" / "bench_worker.py"), "-c", "2", "--name", "b1"],
            stdout=handle, stderr=subprocess.STDOUT, env=env, cwd=ROOT, start_new_session=True,
        )  # fmt: skip
    wait_serving(server.url, [proc], [log], "bench worker")
    return proc


def _run(server: RedisServer, root: Path) -> str:
    """One run of 24 jobs through the real coordinator; its run id."""
    from bench.bench_worker import BENCH_TASK

    options = RunOptions(
        out_dir=root / "run",
        broker=Broker(server.url, "--broker"),
        job_key=session_key(),
        task_name=BENCH_TASK,
    )
    service = RunService(Notes())
    prepared = service.prepare(answer_suite(root, 24), options)
    service.execute(prepared, options)
    assert len(prepared.run_dir.ledger_path.read_text().splitlines()) == 24
    return prepared.meta.run_id


def _used(server: RedisServer) -> int:
    return int(server.client().info("memory")["used_memory"])


def test_ten_runs_leave_redis_at_its_size(tmp_path: Path, redis_server: RedisServer) -> None:
    client = redis_server.client()
    worker = _worker(redis_server, tmp_path)
    try:
        first = _run(redis_server, tmp_path / "run-0")
        assert not any(client.exists(key) for key in keys.run_keys(first))
        assert client.ttl(keys.stopped(first)) > 0  # a late redelivery is skipped, for a while
        blob_gc.collect(client, lambda registry, tag: True)
        start = _used(redis_server)
        for i in range(1, RUNS + 1):
            run_id = _run(redis_server, tmp_path / f"run-{i}")
            assert not any(client.exists(key) for key in keys.run_keys(run_id))
    finally:
        stop([worker])
    done = blob_gc.collect(client, lambda registry, tag: True)
    assert done.protocols  # every run's protocol went, none is live
    end = _used(redis_server)
    assert end - start < MARGIN, (start, end)
    left = [k.decode() for k in client.scan_iter(match=f"{keys.PREFIX}:*")]
    # what stays: the stop flags (expiring) and the fleet's image listing, one key
    others = [k for k in left if not k.startswith(f"{keys.PREFIX}:stopped:")]
    assert others == [keys.images()], others


def test_what_a_killed_run_left_expires_and_gc_removes_it(redis_server: RedisServer) -> None:
    # A worker's writes give the run's keys an expiry; gc removes them once the run's entry
    # is no longer live (its coordinator never said finished, and it is older than the age).
    from datetime import UTC, datetime

    from runner.distributed.leases import RedisLeases
    from runner.records import Job, Outcome, TaskKind
    from runner.trial.record import bare_record

    client = redis_server.client()
    ledger = RedisLeases(client, "killed-run", session_key())
    job = Job(job_id="j0", run_id="killed-run", protocol_sha256="p" * 64, task_id="t0",
              arm="ctrl", repeat=0)  # fmt: skip
    assert ledger.acquire(job.job_id, "w1:1") == "ok"
    now = datetime.now(UTC)
    ledger.publish(bare_record(job, TaskKind.ORDINARY, Outcome.MISS, "w1", now, now), "w1:1")
    for key in (keys.records("killed-run"), keys.done("killed-run"), keys.started("killed-run")):
        assert 0 < client.ttl(key) <= keys.RUN_KEY_TTL_S, key
    blob_gc.note_run(client, "killed-run", "p" * 64)
    blob_gc.collect(client, lambda registry, tag: True)  # still live: kept
    assert client.exists(keys.records("killed-run"))
    blob_gc.collect(client, lambda registry, tag: True, max_age_s=0.0)
    assert not any(client.exists(key) for key in keys.run_keys("killed-run"))
    assert not client.hexists(keys.runs(), "killed-run")
