"""Dispatch overhead: jobs/s through deltarun's Celery path against a bare Celery no-op task.

Both on the same fresh Redis with the same Celery settings, measured in this
run. deltarun's path is the run service's (``RunService.prepare`` and ``execute``, as
``deltarun run --broker`` runs a run) and includes everything but Docker: protocol
and blobs in Redis, leases, the done set, the record stream and the coordinator's
fsync'd ledger. Its trial body is the bench-only ``bench_trial_without_docker`` served by
``bench/bench_worker.py`` (the production worker plus that one task). The
baseline task only increments a counter. Printed for 1 and 2 worker processes,
with the ratio (goal >= 0.8).

The deltarun path is measured again on a TLS-only Redis (``rediss://`` with the ACL
user's password and a client certificate, as ``make certs`` sets it up; the bench
worker reads the broker from ``$DELTARUN_BROKER_URL``/``_CA``/``_CERT``/``_KEY``) and
printed beside the plain ``redis://`` figure with the ratio TLS/plain (goal >= 0.9,
within noise). Jobs and records are always signed, so signing cannot be switched
off end to end: its cost is measured on its own, signing and checking one job and
one record (~1.7 KB) as the coordinator and a worker do, in microseconds and as a
share of the plain path's time per job. The job message signed is one the
coordinator sent in this run (taken from Celery's ``before_task_publish`` signal):
job, image tag and pinned image ID, every field the signature covers.

Also: the coordinator's peak memory while collecting 10,000 and 100,000 records
from the stream (goal: flat in the number of records).

    python bench/dispatch.py [--jobs 1000] [--memory-records 100000] [--smoke]

``--smoke`` (``bench/smoke.py``): 5 jobs, 1 worker process, 10 records collected.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


from celery.signals import before_task_publish  # noqa: E402

from bench import smoke  # noqa: E402
from bench.bench_worker import BENCH_TASK  # noqa: E402
from runner.distributed.credentials import (  # noqa: E402
    ENV_TLS,
    ENV_URL,
    Broker,
    BrokerOptions,
    resolve_broker,
)
from runner.distributed.signing import (  # noqa: E402
    job_refusal,
    record_signed,
    sign_job,
    sign_record,
)
from runner.records import Job, Outcome, TaskKind  # noqa: E402
from runner.run.events import Quiet  # noqa: E402
from runner.run.service import RunOptions, RunService  # noqa: E402
from runner.trial.record import bare_record  # noqa: E402
from tests.distributed_support import FAST_ENV, RedisServer, make_secrets  # noqa: E402
from tests.helpers import ADD_GOLD, make_suite  # noqa: E402

VENV = ROOT / ".venv" / "bin"
# One job key for the coordinator and the bench workers of this run (signing is always on).
JOB_KEY = os.environ.setdefault("DELTARUN_JOB_KEY", "bench-" + os.urandom(16).hex())


def answer_suite(root: Path, repeats: int) -> Path:
    task = {
        "id": "q",
        "kind": "ordinary",
        "prompt": "p",
        "expect": 1,
        "metrics": ["exact_match"],
        "deadline_s": 5,
    }
    return make_suite(
        root,
        [task],
        [
            {"name": "ctrl", "control": True, "agent": {"type": "scripted", "action": "noop"}},
        ],
        runtime={"repeats": repeats},
    )


@dataclass(frozen=True)
class Reached:
    """A Redis server as the coordinator and the bench worker reach it."""

    broker: Broker  # the coordinator's, as `deltarun run` resolves it: TLS files in its URL
    worker_env: dict[str, str]  # the bench worker's broker: the password stays off its argv


def broker_of(server: RedisServer) -> Reached:
    files = {}
    if server.tls is not None:
        files = {
            "ca": server.tls / "ca.crt",
            "cert": server.tls / "client.crt",
            "key": server.tls / "client.key",
        }
    resolved = resolve_broker(BrokerOptions(url=server.url, **files), {})
    assert resolved is not None
    env = {ENV_URL: server.url, **{ENV_TLS[name]: str(path) for name, path in files.items()}}
    return Reached(resolved, env)


class Coordinator(Quiet):
    """The run's ``Events`` in a benchmark: only its notes (warnings), on stderr."""

    def note(self, line: str) -> None:
        print(f"dispatch: coordinator: {line}", file=sys.stderr)


@contextlib.contextmanager
def sent_job(task_name: str) -> Iterator[list[dict[str, Any]]]:
    """The first job message this process's coordinator sends for ``task_name``, as a worker
    receives it (built and signed by ``run_celery`` itself; Celery's ``before_task_publish``
    signal hands over the message's arguments just before they are serialized)."""
    sent: list[dict[str, Any]] = []

    def capture(sender: object = None, body: Any = None, **_: object) -> None:
        if sender == task_name and not sent:
            args = body[0]  # task protocol 2: (args, kwargs, embed)
            sent.append(json.loads(json.dumps(args[0])))

    before_task_publish.connect(capture, weak=False)
    try:
        yield sent
    finally:
        before_task_publish.disconnect(capture)


def deltarun_rate(
    reached: Reached, work: Path, jobs: int, concurrency: int
) -> tuple[float, dict[str, Any]]:
    """Jobs per second through the deltarun path (``RunService``, as `deltarun run --broker`
    runs it, with the bench-only trial task), and the first job message it sent."""
    root = Path(tempfile.mkdtemp(dir=work))
    controls = answer_suite(root, jobs)
    # The image IDs the run pins, as `deltarun run` pins them: the job messages carry them
    # and the bench worker serves each image only with its pinned ID.
    service = RunService(Coordinator())
    options = RunOptions(
        out_dir=root / "run", broker=reached.broker, job_key=JOB_KEY.encode(), task_name=BENCH_TASK
    )
    prepared = service.prepare(controls, options)
    worker = start_bench_worker(reached, root / "worker.log", concurrency)
    try:
        with sent_job(BENCH_TASK) as sent:
            start = time.perf_counter()
            service.execute(prepared, options)
            elapsed = time.perf_counter() - start
    finally:
        worker.kill()
        worker.wait()
    recorded = len(prepared.run_dir.ledger_path.read_text().splitlines())
    assert recorded == jobs, f"{recorded} records for {jobs} jobs"
    assert sent, "the coordinator sent no job message"
    return jobs / elapsed, sent[0]


def start_bench_worker(reached: Reached, log: Path, concurrency: int) -> subprocess.Popen[bytes]:
    """``bench/bench_worker.py`` (its broker from the environment), waited for until it
    serves its queue."""
    inherited = {k: v for k, v in os.environ.items() if not k.startswith("DELTARUN_BROKER_")}
    handle = log.open("ab")
    worker = subprocess.Popen(
        [
            sys.executable,
            str(ROOT / "bench" / "bench_worker.py"),
            *("-c", str(concurrency), "--name", f"b{concurrency}"),
        ],
        stdout=handle,
        stderr=subprocess.STDOUT,
        env={**inherited, **FAST_ENV, **reached.worker_env},
    )
    deadline = time.time() + 60
    while time.time() < deadline:
        text = log.read_text(errors="replace")
        if "deltarun worker" in text and "[queues]" in text:
            return worker
        if worker.poll() is not None:
            raise RuntimeError(f"bench worker exited: {text}")
        time.sleep(0.2)
    worker.kill()
    raise RuntimeError(f"bench worker did not start: {log.read_text(errors='replace')}")


def bare_rate(server: RedisServer, work: Path, jobs: int, concurrency: int) -> float:
    env = {**os.environ, "BENCH_BROKER": server.url, "PYTHONPATH": str(ROOT / "bench")}
    log = (work / f"bare-{concurrency}.log").open("wb")
    proc = subprocess.Popen(
        [
            str(VENV / "celery"),
            "-A",
            "_bare_celery",
            "worker",
            "-c",
            str(concurrency),
            "--loglevel",
            "WARNING",
            "--without-gossip",
            "--without-mingle",
            "-P",
            "prefork",
        ],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=ROOT / "bench",
    )
    client = server.client()
    counter = f"bench:bare:{concurrency}:{time.time()}"
    try:
        sys.path.insert(0, str(ROOT / "bench"))
        os.environ["BENCH_BROKER"] = server.url
        import _bare_celery

        _bare_celery.app.send_task("bench.bare_noop", args=[counter + ":warm"])
        deadline = time.time() + 60
        while not client.get(counter + ":warm") and time.time() < deadline:
            time.sleep(0.05)
        start = time.perf_counter()
        with _bare_celery.app.producer_or_acquire() as producer:
            for _ in range(jobs):
                _bare_celery.app.send_task("bench.bare_noop", args=[counter], producer=producer)
        while int(client.get(counter) or 0) < jobs:
            time.sleep(0.01)
        return jobs / (time.perf_counter() - start)
    finally:
        proc.kill()
        proc.wait()
        log.close()


def realistic_record(job: Job, image_digest: str | None) -> str:
    """The JSON of a passing trial of ``job`` with a small patch and short logs (~1.7 KB)."""
    started = datetime(2025, 1, 1, 12, 0, 0, tzinfo=UTC)
    patch_sha = hashlib.sha256(ADD_GOLD.encode()).hexdigest()
    verify_log = (
        "============================= test session starts ==============================\n"
        "collected 3 items\n\n"
        "tests/test_hidden.py ...                                                 [100%]\n\n"
        "============================== 3 passed in 0.04s ===============================\n"
    )
    trial = bare_record(
        job,
        TaskKind.ORDINARY,
        Outcome.SUCCESS,
        "worker-7f3a91c2@build-host-03",
        started,
        started + timedelta(seconds=41.7),
        wall_s=41.7,
        prompt_tokens=18_412,
        completion_tokens=1_337,
        tool_calls=9,
        patch=ADD_GOLD,
        patch_sha256=patch_sha,
        applied_sha256=patch_sha,
        verify_exit_code=0,
        verify_log=verify_log,
        agent_exit_code=0,
        agent_log="edited calc/__init__.py: add() returned a - b; now a + b\n",
        image_digest=image_digest or "sha256:" + hashlib.sha256(b"python:3.12-slim").hexdigest(),
    )
    return trial.model_dump_json()


def signing_cost(message: dict[str, Any], iterations: int) -> tuple[float, int, float, int]:
    """Microseconds to sign and check one job, and one record, as the coordinator and a
    worker do (each side computes one HMAC), with the sizes signed. ``message`` is a job
    message the coordinator sent in this run (``sent_job``), signature included."""
    key = JOB_KEY.encode()
    refusal = job_refusal(key, message)
    if refusal is not None:  # the worker's check, on the coordinator's own message
        raise AssertionError(f"a job the coordinator signed with the key was refused: {refusal}")
    unsigned = {name: value for name, value in message.items() if name != "sig"}
    job = Job.model_validate(unsigned["job"])
    raw = realistic_record(job, unsigned.get("image_id"))
    start = time.perf_counter()
    for _ in range(iterations):
        payload = {**unsigned, "sig": sign_job(key, unsigned)}  # the coordinator, sending
        if job_refusal(key, payload) is not None:  # the worker, before running it
            raise AssertionError("a job signed with the key was refused")
    job_us = (time.perf_counter() - start) / iterations * 1e6
    start = time.perf_counter()
    for _ in range(iterations):
        signature = sign_record(key, raw)  # the worker, publishing
        if not record_signed(key, raw, signature):  # the coordinator, collecting
            raise AssertionError("a record signed with the key was not accepted")
    record_us = (time.perf_counter() - start) / iterations * 1e6
    # The size of what sign_job hashes: the message but its signature, in canonical JSON.
    job_bytes = len(json.dumps(unsigned, sort_keys=True, separators=(",", ":")).encode())
    return job_us, job_bytes, record_us, len(raw.encode())


def collect_memory(records: int) -> float:
    """Peak RSS (MiB) of a coordinator process that collects ``records`` records."""
    code = f"""
import os, resource, sys, tempfile, json
from pathlib import Path
sys.path.insert(0, {str(ROOT)!r})
from bench.dispatch import answer_suite
from runner.distributed import keys
from runner.distributed.credentials import Broker
from runner.distributed.signing import sign_record
from runner.records import Trial
from runner.run.service import Engine, RunOptions, RunService
import redis
class NoDocker(Engine):
    def image_digest(self, image):
        return "sha256:x"
url = sys.argv[1]
KEY = os.environ["DELTARUN_JOB_KEY"].encode()
root = Path(tempfile.mkdtemp())
service = RunService(engine=NoDocker())
options = RunOptions(root / "run", broker=Broker(url, "bench"), job_key=KEY)
prepared = service.prepare(answer_suite(root, {records}), options)
client = redis.Redis.from_url(url)
run_id = prepared.meta.run_id
pipe = client.pipeline(transaction=False)
for i, job in enumerate(prepared.jobs):
    trial = Trial(run_id=run_id, job_id=job.job_id, protocol_sha256=job.protocol_sha256,
                  task_id=job.task_id, arm=job.arm, repeat=job.repeat, task_kind="ordinary",
                  outcome="miss", passed=False, timeout=False, tool_violation=False,
                  abstained=False, wall_s=0.0, worker="bench", started_at="s", finished_at="f")
    pipe.hset(keys.done(run_id), job.job_id, "bench")
    raw = trial.model_dump_json()
    pipe.xadd(keys.records(run_id), {{"trial": raw, "sig": sign_record(KEY, raw)}})
    if i % 1000 == 999:
        pipe.execute()
pipe.execute()
del pipe, trial
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
service.execute(prepared, options)
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
lines = sum(1 for _ in open(prepared.run_dir.ledger_path))
assert lines == {records}, lines
print(json.dumps({{"before": before / 1024, "after": after / 1024}}))
"""
    with tempfile.TemporaryDirectory() as tmp:
        server = RedisServer(Path(tmp) / "redis")
        server.start()
        try:
            out = subprocess.run(
                [sys.executable, "-c", code, server.url],
                stdout=subprocess.PIPE,  # its stderr is ours: a failure shows its traceback
                text=True,
                check=True,
                cwd=ROOT,
            )
        finally:
            server.stop()
    data = json.loads(out.stdout.strip().splitlines()[-1])
    return float(data["after"]) - float(data["before"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--memory-records", type=int, default=100_000)
    parser.add_argument("--sign-iterations", type=int, default=20_000)
    smoke.add_flag(parser)
    args = parser.parse_args()
    concurrencies: tuple[int, ...] = (1, 2)
    if args.smoke:
        args.jobs, args.memory_records, args.sign_iterations = 5, 10, 10
        concurrencies = (1,)
        smoke.announce("dispatch", "5 jobs at -c 1, 10 sign iterations, 1 and 10 records")
    plain_rates: dict[int, float] = {}
    message: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        # everysec, as compose.yaml runs Redis: fsync on every write would dominate both paths.
        server = RedisServer(work / "redis", fsync="everysec")
        tls_server = RedisServer(
            work / "redis-tls", fsync="everysec", tls=make_secrets(work / "secrets")
        )
        server.start()
        try:
            tls_server.start()
            plain, tls = broker_of(server), broker_of(tls_server)
            for concurrency in concurrencies:
                bare = bare_rate(server, work, args.jobs, concurrency)
                ours, message = deltarun_rate(plain, work, args.jobs, concurrency)
                secured, _ = deltarun_rate(tls, work, args.jobs, concurrency)
                plain_rates[concurrency] = ours
                print(
                    f"dispatch: -c {concurrency}: bare Celery no-op {bare:7.1f} jobs/s, "
                    f"deltarun path {ours:7.1f} jobs/s, ratio {ours / bare:.2f} (goal >= 0.80)"
                )
                print(
                    f"dispatch: -c {concurrency}: deltarun path plain redis:// {ours:7.1f} jobs/s, "
                    f"TLS+password rediss:// {secured:7.1f} jobs/s, ratio TLS/plain "
                    f"{secured / ours:.2f} (goal >= 0.90)"
                )
        finally:
            tls_server.stop()
            server.stop()
        job_us, job_bytes, record_us, record_bytes = signing_cost(message, args.sign_iterations)
    total_us = job_us + record_us
    shares = ", ".join(
        f"{total_us / (1e6 / rate) * 100:.2f}% of -c {c}'s {1e3 / rate:.2f} ms per job"
        for c, rate in plain_rates.items()
    )
    print(
        f"dispatch: signing (always on): sign+check one job ({job_bytes} B) {job_us:.1f} us, "
        f"one record ({record_bytes:,} B) {record_us:.1f} us; {total_us:.1f} us per job = "
        f"{shares} (plain path)"
    )
    small = collect_memory(args.memory_records // 10)
    large = collect_memory(args.memory_records)
    print(
        f"dispatch: coordinator memory growth while collecting records: "
        f"{args.memory_records // 10:,} -> {small:.1f} MiB, {args.memory_records:,} -> "
        f"{large:.1f} MiB (flat means the two are close)"
    )
    _ = resource


if __name__ == "__main__":
    main()
