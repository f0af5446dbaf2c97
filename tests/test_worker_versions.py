"""A worker running another deltarun than its coordinator (an image not rebuilt, a host not
upgraded) says so: a job it cannot read, signed with the run's own key, is refused with a
notice of kind ``version`` instead of failing inside Celery (where the message was acked and
lost, and the run waited for it for good); the coordinator's line names the worker and says
to install the same deltarun there. On a real Redis and a real ``deltarun worker``."""

from __future__ import annotations

import json
import time
from pathlib import Path

from runner import __version__
from runner.distributed import keys
from runner.distributed.celery_app import make_app
from runner.distributed.coordinator import _refusal_line
from runner.distributed.signing import sign_job
from tests.distributed_support import RedisServer, session_key, start_worker


def test_a_job_from_a_newer_coordinator_is_refused_by_version(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    worker = start_worker(redis_server, tmp_path / "worker.log", name="old")
    try:
        job = {
            "job_id": "a" * 64, "run_id": "run-newer", "protocol_sha256": "b" * 64,
            "task_id": "t0", "arm": "ctrl", "repeat": 0,
            "attempt": 1,  # a field this deltarun does not know
        }  # fmt: skip
        message = {"job": job}
        app = make_app(redis_server.url)
        queue = keys.queue_for_image("deltarun/sandbox-python:bookworm")
        app.send_task(keys.TRIAL_TASK, args=[{**message, "sig": sign_job(session_key(), message)}],
                      queue=queue)  # fmt: skip
        client = redis_server.client()
        deadline = time.time() + 60
        while time.time() < deadline and not client.llen(keys.refused("run-newer")):
            time.sleep(0.2)
        notices = [json.loads(n) for n in client.lrange(keys.refused("run-newer"), 0, -1)]
    finally:
        worker.stop()
    assert len(notices) == 1, worker.text()[-2000:]
    notice = notices[0]
    assert (notice["worker"], notice["job_id"], notice["kind"]) == ("old", "a" * 64, "version")
    assert notice["reason"] == (
        f"deltarun {__version__} cannot read the job (attempt: Extra inputs are not permitted)"
    )
    assert "refused job aaaaaaaaaaaa of run run-newer" in worker.text()
    line = _refusal_line(notice["worker"], notice["key"], notice, "f" * 12)
    assert line.startswith("worker old cannot read this run's jobs (deltarun ")
    assert "install the same deltarun on that worker" in line and "job key" not in line


def test_a_key_refusal_still_says_to_copy_the_key() -> None:
    notice = {"reason": "signed with another key", "kind": "key"}
    line = _refusal_line("w2", "0123456789ab", notice, "fedcba987654")
    assert "(job key 0123456789ab) refused jobs of this run (signed with another key)" in line
    assert "this run signs with job key fedcba987654: copy this coordinator's job key" in line
    older = {"reason": "unsigned job"}  # a notice from a worker before kinds existed
    assert "copy this coordinator's job key" in _refusal_line("w3", "k", older, "o")


def test_a_bundle_this_deltarun_cannot_read_is_refused_by_version_not_retried(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    # The job itself reads, its run's controls do not (a field a newer deltarun added):
    # before, the worker retried it every 30 s for good and the coordinator never heard why.
    client = redis_server.client()
    protocol = "c" * 64
    bundle = {
        "protocol_sha256": protocol, "controls": {"a_newer_field": 1}, "agent_dir_digests": {},
        "suite_blob": "d" * 64, "agent_blobs": {}, "deltarun_version": __version__,
    }  # fmt: skip
    client.set(keys.protocol(protocol), json.dumps(bundle))
    worker = start_worker(redis_server, tmp_path / "worker.log", name="old")
    try:
        job = {
            "job_id": "e" * 64, "run_id": "run-controls", "protocol_sha256": protocol,
            "task_id": "t0", "arm": "ctrl", "repeat": 0,
        }  # fmt: skip
        message = {"job": job}
        app = make_app(redis_server.url)
        queue = keys.queue_for_image("deltarun/sandbox-python:bookworm")
        app.send_task(keys.TRIAL_TASK, args=[{**message, "sig": sign_job(session_key(), message)}],
                      queue=queue)  # fmt: skip
        deadline = time.time() + 60
        while time.time() < deadline and not client.llen(keys.refused("run-controls")):
            time.sleep(0.2)
        time.sleep(1)  # a retry would come back within its countdown, not within a second
        notices = [json.loads(n) for n in client.lrange(keys.refused("run-controls"), 0, -1)]
        log = worker.text()
    finally:
        worker.stop()
    assert len(notices) == 1, log[-2000:]
    assert (notices[0]["kind"], notices[0]["job_id"]) == ("version", "e" * 64)
    assert notices[0]["reason"].startswith(
        f"deltarun {__version__} cannot read the controls of protocol cccccccccccc ("
    ), notices[0]
    assert "Retry in" not in log and "refused job eeeeeeeeeeee of run run-controls" in log
    assert not client.keys("deltarun:lease:*")  # the lease was given back
