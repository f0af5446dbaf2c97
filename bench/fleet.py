"""Fleet scale: the real coordinator and a real Redis against 10, 25 and 50 worker processes.

One fresh ``redis-server`` on a free loopback port (append-only file, fsync everysec, as
``compose.yaml`` runs it). For each fleet size N, N ``bench/bench_worker.py`` processes
(the production worker with ``-c 1``, each its own name and cache, as N machines would
be; their trial body is the bench-only scripted one: no sandbox, no Docker work per job)
serve a run that this process coordinates through ``RunService.prepare`` and ``execute``,
as ``deltarun run --broker`` does: protocol and blobs in Redis, signed jobs, leases, the
done set, the signed record stream and the fsync'd ledger. The coordinator and the workers
run with production settings (lease TTL, re-enqueue and queue checks). The job count
grows with the fleet (``--jobs`` for the largest, proportionally fewer for the others),
so the jobs per worker stay the same. Printed per fleet, one figure a line:

- end-to-end jobs/s (``execute``'s wall time, sending included, the ledger checked);
- coordinator CPU seconds per 1,000 records (``getrusage(RUSAGE_SELF)`` around
  ``execute``, less the sampler thread's), its share of one core, and how it
  splits between sending jobs, collecting records into the ledger, and the periodic
  lease and queue checks;
- how the jobs went out: the time from the first job sent to the last, and the length of
  the jobs' queue meanwhile (``LLEN``, sampled every 0.25 s): short, workers wait for jobs;
- Redis ``used_memory`` before, peak (``INFO memory``, sampled with the queue in a thread)
  and after the run; Redis CPU (``INFO cpu`` used_cpu_sys+user deltas) as a core share;
- the workers' CPU (every process of their sessions, from ``/proc``) and the host's;
- bare Celery (``bench/_bare_celery.py``: a no-op that increments a counter, deltarun's
  Celery settings) with the same number of ``-c 1`` worker processes on a fifth of the
  jobs, and the ratio deltarun/bare (goal >= 0.80); below it, a note of what the
  remaining cost buys, with the CPU per job of each side.

Then, per fleet size, the run's budget (``budget.run_usd``) with that many trials in flight
(``bench/fleet_budget.py``: the real relay and Redis account, gateways simulated): the spend
over ``run_usd``, bounded by the requests in flight, never by trials. And the shared rate
limits per route (``bench/fleet_rates.py``: real proxies, relays and the Redis limiter against
a model answering 429 past its rate): throughput over the limit and the share refused, with
``rate_limits`` and without.

Then the growth 10 -> 25 -> 50 of each figure, and the first bottleneck of the largest
fleet: the coordinator (one Python process) or Redis (one thread) near one core, else the
side the queue shows waiting (the coordinator's dispatch when the queue stays shorter
than the fleet, the workers when jobs pile up), with the numbers that say so: the CPU of
the host, which the simulated workers share with the coordinator and Redis (and with
whatever else runs on it: the load average is printed first). And, for a fleet whose
workers have machines of their own, the next limit: this run's jobs/s over the
coordinator's and Redis's core share (approximate: it assumes the CPU per job stays).

    python bench/fleet.py [--workers 10,25,50] [--jobs 50000] [--smoke]

The default is 50,000 jobs for the 50-worker fleet (20,000/50,000/100,000 with
``--jobs 100000``, the issue's size, took 15.5 minutes on a shared 2-core host, at about
235 jobs/s; the default halves that).

``--smoke`` (``bench/smoke.py``, run by ``tests/test_bench_fleet.py``): fleets of 2 and
4 workers, 100 and 200 jobs, bare Celery on 20 and 40. Every process it starts is
killed on exit, Ctrl-C and SIGTERM included. Needs ``redis-server`` (``make redis``)
and the Docker engine with the sandbox image for the workers' start-up checks.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import smoke  # noqa: E402
from bench.bench_worker import BENCH_TASK  # noqa: E402
from bench.dispatch import JOB_KEY, VENV, Reached, answer_suite, broker_of  # noqa: E402
from bench.fleet_budget import print_budget  # noqa: E402
from bench.fleet_rates import print_rates  # noqa: E402
from runner.distributed import blob_gc, keys  # noqa: E402
from runner.distributed.celery_app import make_app  # noqa: E402
from runner.distributed.coordinator import _Coordinator  # noqa: E402
from runner.errors import RunInterrupted  # noqa: E402
from runner.run.events import Quiet  # noqa: E402
from runner.run.service import RunOptions, RunService  # noqa: E402
from tests.distributed_support import RedisServer  # noqa: E402
from tests.helpers import PY_IMAGE  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")
CORES = os.cpu_count() or 1
MIB = 2**20
SAMPLE_S = 0.25
START_TIMEOUT_S = 300.0
GOAL = 0.80
# Every process group this benchmark started (its worker processes lead their own
# sessions): killed by ``stop_all`` on any exit.
_STARTED: list[subprocess.Popen[bytes]] = []


class Notes(Quiet):
    """The run's ``Events``: the coordinator's warnings, on stderr and counted."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def note(self, line: str) -> None:
        self.lines.append(line)
        print(f"fleet: coordinator: {line}", file=sys.stderr)


# -- processes --------------------------------------------------------------------


def start(
    argv: list[str], log: Path, env: dict[str, str], cwd: Path = ROOT
) -> subprocess.Popen[bytes]:
    """A process in its own session (its pool children with it), logging to ``log``."""
    with log.open("ab") as handle:
        proc = subprocess.Popen(
            argv,
            stdout=handle,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=cwd,
            start_new_session=True,
        )
    _STARTED.append(proc)
    return proc


def stop(procs: list[subprocess.Popen[bytes]]) -> None:
    """SIGKILL each process's whole session (Celery's pool children too), then reap."""
    for proc in procs:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
    for proc in procs:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=20)
        if proc in _STARTED:
            _STARTED.remove(proc)


def stop_all() -> None:
    stop(list(_STARTED))


def wait_serving(
    url: str, procs: list[subprocess.Popen[bytes]], logs: list[Path], what: str
) -> None:
    """Until every process answers Celery's ping (its consumer is up); one that exits
    first is an error with its log."""
    app = make_app(url)
    seen: set[str] = set()
    deadline = time.monotonic() + START_TIMEOUT_S
    while len(seen) < len(procs):
        for proc, log in zip(procs, logs, strict=True):
            if proc.poll() is not None:
                tail = log.read_text(errors="replace")[-3000:]
                raise RuntimeError(f"{what} {log.stem} exited ({proc.returncode}): {tail}")
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"{len(seen)} of {len(procs)} {what}s answer after {START_TIMEOUT_S}s"
            )
        for reply in app.control.ping(timeout=1.0) or []:
            seen.update(reply)
    app.close()


def start_fleet(reached: Reached, work: Path, workers: int) -> list[subprocess.Popen[bytes]]:
    """``workers`` bench workers (``-c 1``, each its own name and cache), serving."""
    inherited = {k: v for k, v in os.environ.items() if not k.startswith("DELTARUN_BROKER_")}
    procs, logs = [], []
    for i in range(workers):
        log = work / f"worker-{workers}-{i}.log"
        env = {**inherited, **reached.worker_env, "DELTARUN_CACHE": str(work / f"cache-{i}")}
        argv = [sys.executable, str(ROOT / "bench" / "bench_worker.py")]
        procs.append(start([*argv, "-c", "1", "--name", f"fleet-{i}"], log, env))
        logs.append(log)
    wait_serving(reached.broker.url, procs, logs, "bench worker")
    return procs


def start_bare_fleet(url: str, work: Path, workers: int) -> list[subprocess.Popen[bytes]]:
    """``workers`` bare Celery workers (``-c 1`` each, prefork, as the deltarun ones)."""
    path = os.pathsep.join([str(ROOT / "bench"), str(ROOT)])
    env = {**os.environ, "BENCH_BROKER": url, "PYTHONPATH": path}
    procs, logs = [], []
    for i in range(workers):
        log = work / f"bare-{workers}-{i}.log"
        argv = [str(VENV / "celery"), "-A", "_bare_celery", "worker", "-c", "1"]
        argv += ["-n", f"bare{i}@fleet", "--loglevel", "WARNING", "-P", "prefork"]
        argv += ["--without-gossip", "--without-mingle"]
        procs.append(start(argv, log, env, cwd=ROOT / "bench"))
        logs.append(log)
    wait_serving(url, procs, logs, "bare worker")
    return procs


# -- measurements -----------------------------------------------------------------


def session_cpu(sessions: set[int]) -> float:
    """CPU seconds (user+sys) of every live process whose session is one of ``sessions``."""
    total = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[3]) in sessions:  # field 6, session id
            total += int(fields[11]) + int(fields[12])  # fields 14 and 15, utime and stime
    return total / TICK


def host_busy() -> float:
    """CPU seconds this host spent not idle since boot, every core summed."""
    values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (sum(values[:8]) - values[3] - values[4]) / TICK  # less idle and iowait


def self_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


@dataclass(frozen=True)
class Snapshot:
    wall: float
    coordinator: float
    redis: float
    workers: float
    host: float

    @staticmethod
    def take(client: Any, sessions: set[int]) -> Snapshot:
        cpu = client.info("cpu")
        return Snapshot(
            time.perf_counter(),
            self_cpu(),
            float(cpu["used_cpu_sys"]) + float(cpu["used_cpu_user"]),
            session_cpu(sessions),
            host_busy(),
        )


class Sampler(threading.Thread):
    """Every ``SAMPLE_S``: Redis ``used_memory`` (its peak) and the length of the jobs'
    queue (when, how long); and this thread's own CPU, taken off the coordinator's, which
    shares the process."""

    def __init__(self, server: RedisServer, queue: str) -> None:
        super().__init__(name="redis-sampler", daemon=True)
        self.client = server.client()
        self.queue = queue
        self.peak = int(self.client.info("memory")["used_memory"])
        self.depths: list[tuple[float, int]] = []
        self.cpu = 0.0
        self.done = threading.Event()

    def sample(self) -> None:
        self.peak = max(self.peak, int(self.client.info("memory")["used_memory"]))
        self.depths.append((time.perf_counter(), int(self.client.llen(self.queue))))

    def run(self) -> None:
        start = time.thread_time()
        while not self.done.wait(SAMPLE_S):
            self.sample()
        self.cpu = time.thread_time() - start

    def finish(self) -> int:
        self.done.set()
        self.join()
        self.sample()
        return self.peak

    def depth(self, start: float, end: float) -> tuple[float, int]:
        """The queue's mean and peak length between ``start`` and ``end`` (perf_counter)."""
        inside = [d for t, d in self.depths if start <= t <= end] or [0]
        return sum(inside) / len(inside), max(inside)


@dataclass(frozen=True)
class Dispatch:
    """How the jobs went out: the time from the first send to the last, and the jobs'
    queue meanwhile (a short queue: workers wait for jobs; a long one: jobs wait)."""

    send_s: float
    depth_mean: float
    depth_peak: int


@dataclass
class Probe:
    """The coordinator's CPU by activity (its main thread's) and when it sent jobs."""

    cpu: dict[str, float]
    sent_from: float = 0.0
    sent_to: float = 0.0


@contextlib.contextmanager
def coordinator_probe() -> Iterator[Probe]:
    """Coordinator CPU (this thread's) by activity, by wrapping the real coordinator's
    methods: each still runs as it is, timed by ``time.thread_time``."""
    split = {"send jobs": 0.0, "collect records + ledger": 0.0, "lease and queue checks": 0.0}
    probe = Probe(split)
    parts = {
        "send": "send jobs",
        "collect": "collect records + ledger",
        "requeue_stalled": "lease and queue checks",
        "check_queues": "lease and queue checks",
        "check_refusals": "lease and queue checks",
    }
    originals = {name: getattr(_Coordinator, name) for name in parts}
    depth = [0]  # check_refusals may send: count the outermost call only

    def timed(name: str, method: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
            depth[0] += 1
            start, wall = time.thread_time(), time.perf_counter()
            try:
                return method(self, *args, **kwargs)
            finally:
                depth[0] -= 1
                if depth[0] == 0:
                    split[parts[name]] += time.thread_time() - start
                if name == "send" and args and args[0]:  # a send of at least one job
                    probe.sent_from = probe.sent_from or wall
                    probe.sent_to = time.perf_counter()

        return wrapper

    for name, method in originals.items():
        setattr(_Coordinator, name, timed(name, method))
    try:
        yield probe
    finally:
        for name, method in originals.items():
            setattr(_Coordinator, name, method)


@dataclass
class Usage:
    """What one measured section cost, from two snapshots."""

    jobs: int
    wall: float
    coordinator: float  # this process: the coordinator, or the bare sender
    redis: float
    workers: float
    host: float

    @staticmethod
    def between(jobs: int, a: Snapshot, b: Snapshot, less: float = 0.0) -> Usage:
        return Usage(
            jobs,
            b.wall - a.wall,
            b.coordinator - a.coordinator - less,
            b.redis - a.redis,
            b.workers - a.workers,
            b.host - a.host,
        )

    @property
    def rate(self) -> float:
        return self.jobs / self.wall

    def ms_per_job(self, cpu: float) -> float:
        return cpu / self.jobs * 1e3


@dataclass
class Fleet:
    workers: int
    usage: Usage
    memory_before: int
    memory_peak: int
    memory_after: int
    memory_after_gc: int  # after ``gc --broker``'s collect (the run finished: nothing live)
    split: dict[str, float]
    dispatch: Dispatch
    warnings: list[str]
    bare: Usage | None = None
    bare_dispatch: Dispatch | None = None

    @property
    def ratio(self) -> float:
        assert self.bare is not None
        return self.usage.rate / self.bare.rate


def run_fleet(server: RedisServer, reached: Reached, work: Path, workers: int, jobs: int) -> Fleet:
    """The real coordinator path over ``jobs`` jobs with ``workers`` bench workers."""
    root = Path(tempfile.mkdtemp(dir=work, prefix=f"run-{workers}-"))
    notes = Notes()
    service = RunService(notes)
    options = RunOptions(
        out_dir=root / "run", broker=reached.broker, job_key=JOB_KEY.encode(), task_name=BENCH_TASK
    )
    prepared = service.prepare(answer_suite(root, jobs), options)
    client = server.client()
    client.flushall()  # each fleet starts from an empty Redis
    procs = start_fleet(reached, work, workers)
    try:
        sessions = {proc.pid for proc in procs}
        before = int(client.info("memory")["used_memory"])
        sampler = Sampler(server, keys.queue_for_image(PY_IMAGE))
        sampler.start()
        with coordinator_probe() as probe:
            first = Snapshot.take(client, sessions)
            service.execute(prepared, options)
            last = Snapshot.take(client, sessions)
        peak = sampler.finish()
        after = int(client.info("memory")["used_memory"])
        blob_gc.collect(client, lambda registry, tag: True)  # gc --broker, blobs in Redis
        after_gc = int(client.info("memory")["used_memory"])
    finally:
        stop(procs)
    with prepared.run_dir.ledger_path.open("rb") as ledger:
        recorded = sum(1 for _ in ledger)
    assert recorded == jobs, f"{recorded} records in the ledger for {jobs} jobs"
    usage = Usage.between(jobs, first, last, less=sampler.cpu)
    rest = usage.coordinator - sum(probe.cpu.values())
    split = {**probe.cpu, "other (publishing the protocol, lease look-ups before sending)": rest}
    dispatch = Dispatch(
        probe.sent_to - probe.sent_from, *sampler.depth(probe.sent_from, probe.sent_to)
    )
    return Fleet(workers, usage, before, peak, after, after_gc, split, dispatch, notes.lines)


def run_bare(server: RedisServer, work: Path, workers: int, jobs: int) -> tuple[Usage, Dispatch]:
    """Bare Celery no-ops with ``workers`` ``-c 1`` processes: sent all at once from this
    process (as the coordinator sends its jobs), timed until the counter says all ran."""
    client = server.client()
    client.flushall()
    procs = start_bare_fleet(server.url, work, workers)
    try:
        os.environ["BENCH_BROKER"] = server.url
        sys.path.insert(0, str(ROOT / "bench"))
        import _bare_celery

        counter = f"bench:fleet:{workers}"
        sessions = {proc.pid for proc in procs}
        sampler = Sampler(server, "celery")  # Celery's default queue
        sampler.start()
        first = Snapshot.take(client, sessions)
        with _bare_celery.app.producer_or_acquire() as producer:
            for _ in range(jobs):
                _bare_celery.app.send_task("bench.bare_noop", args=[counter], producer=producer)
        sent = time.perf_counter()
        while int(client.get(counter) or 0) < jobs:
            time.sleep(0.01)
        last = Snapshot.take(client, sessions)
        sampler.finish()
    finally:
        stop(procs)
    dispatch = Dispatch(sent - first.wall, *sampler.depth(first.wall, sent))
    return Usage.between(jobs, first, last, less=sampler.cpu), dispatch


# -- report -----------------------------------------------------------------------


def print_fleet(fleet: Fleet) -> None:
    u, n = fleet.usage, f"fleet: {fleet.workers:>2} workers:"
    coord_core = u.coordinator / u.wall
    print(f"{n} {u.jobs:,} jobs in {u.wall:.1f} s: {u.rate:,.1f} jobs/s end to end")
    print(
        f"{n} coordinator CPU {u.coordinator / u.jobs * 1e3:.3f} s per 1,000 records "
        f"({coord_core:.2f} of one core)"
    )
    split = {name: max(0.0, cpu) for name, cpu in fleet.split.items()}
    total = sum(split.values()) or 1.0
    shares = ", ".join(f"{name} {cpu / total:.0%}" for name, cpu in split.items())
    print(f"{n} coordinator CPU split: {shares}")
    d = fleet.dispatch
    print(
        f"{n} dispatch: every job sent within {d.send_s:.1f} s of the run's {u.wall:.1f} s "
        f"({u.jobs / max(d.send_s, 1e-9):,.1f} jobs/s); the queue held {d.depth_mean:,.1f} jobs "
        f"on average meanwhile (peak {d.depth_peak:,}) for {fleet.workers} workers"
    )
    print(
        f"{n} Redis used_memory peak {fleet.memory_peak / MIB:,.1f} MiB, after "
        f"{fleet.memory_after / MIB:,.1f} MiB, after gc --broker "
        f"{fleet.memory_after_gc / MIB:,.1f} MiB (before {fleet.memory_before / MIB:,.1f} MiB; "
        f"peak {(fleet.memory_peak - fleet.memory_before) / u.jobs / 1024:.2f} KiB per job)"
    )
    print(
        f"{n} Redis CPU {u.redis / u.wall:.2f} of one core ({u.ms_per_job(u.redis):.3f} ms per job)"
    )
    print(
        f"{n} workers CPU {u.workers / u.wall:.2f} cores ({u.workers / u.wall / fleet.workers:.2f} "
        f"per process, {u.ms_per_job(u.workers):.2f} ms per job); host {u.host / u.wall:.2f} "
        f"of {CORES} cores busy"
    )
    if fleet.bare is not None and fleet.bare_dispatch is not None:
        b, bd = fleet.bare, fleet.bare_dispatch
        print(
            f"{n} bare Celery no-op {b.jobs:,} jobs: {b.rate:,.1f} jobs/s, deltarun path "
            f"{u.rate:,.1f} jobs/s, ratio {fleet.ratio:.2f} (goal >= {GOAL:.2f})"
        )
        print(
            f"{n} bare Celery: sent within {bd.send_s:.1f} s of {b.wall:.1f} s, queue "
            f"{bd.depth_mean:,.1f} on average (peak {bd.depth_peak:,}); sender "
            f"{b.ms_per_job(b.coordinator):.2f} ms, Redis {b.ms_per_job(b.redis):.3f} ms, "
            f"workers {b.ms_per_job(b.workers):.2f} ms CPU per job"
        )
    for line in fleet.warnings:
        print(f"{n} coordinator warned: {line}")


def growth(label: str, values: list[float], fmt: str) -> str:
    shown = " -> ".join(format(v, fmt) for v in values)
    steps = ", ".join(f"x{b / a:.2f}" if a else "x-" for a, b in itertools.pairwise(values))
    return f"{label} {shown} ({steps})"


def print_growth(fleets: list[Fleet]) -> None:
    sizes = " -> ".join(str(f.workers) for f in fleets)
    head = f"fleet: growth {sizes} workers:"
    jobs = [float(f.usage.jobs) for f in fleets]
    print(growth(f"{head} jobs", jobs, ",.0f") + " (jobs per worker constant)")
    print(growth(f"{head} jobs/s", [f.usage.rate for f in fleets], ",.1f"))
    per_k = [f.usage.coordinator / f.usage.jobs * 1e3 for f in fleets]
    print(growth(f"{head} coordinator CPU s per 1,000 records", per_k, ".3f"))
    cores = [f.usage.coordinator / f.usage.wall for f in fleets]
    print(growth(f"{head} coordinator core share", cores, ".2f"))
    peaks = [f.memory_peak / MIB for f in fleets]
    print(growth(f"{head} Redis used_memory peak MiB", peaks, ",.1f"))
    afters = [f.memory_after / MIB for f in fleets]
    print(growth(f"{head} Redis used_memory after MiB", afters, ",.1f"))
    after_gc = [f.memory_after_gc / MIB for f in fleets]
    print(growth(f"{head} Redis used_memory after gc --broker MiB", after_gc, ",.1f"))
    print(growth(f"{head} Redis core share", [f.usage.redis / f.usage.wall for f in fleets], ".2f"))
    workers = [f.usage.workers / f.usage.wall for f in fleets]
    print(growth(f"{head} workers cores", workers, ".2f"))
    depths = [f.dispatch.depth_mean for f in fleets]
    print(growth(f"{head} mean queue length while sending", depths, ",.1f"))
    if all(f.bare is not None for f in fleets):
        print(growth(f"{head} ratio deltarun/bare", [f.ratio for f in fleets], ".2f"))


def bottleneck(fleet: Fleet) -> str:
    """Which resource limits ``fleet`` first, with the figures that say so: a CPU near one
    core (the coordinator's, Redis's), else whichever side the jobs' queue shows waiting
    (short: the workers wait for the coordinator's jobs; long: the jobs wait for workers)."""
    u, d = fleet.usage, fleet.dispatch
    coord, redis_, workers, host = (x / u.wall for x in (u.coordinator, u.redis, u.workers, u.host))
    others = max(0.0, host - coord - redis_ - workers)
    busy = host >= 0.85 * CORES
    cpu = (
        f"the host's {CORES} cores are {'saturated' if busy else 'not saturated'} ({host:.2f} "
        f"busy: workers {workers:.2f}, coordinator {coord:.2f}, Redis {redis_:.2f}, processes "
        f"outside the benchmark {others:.2f})"
    )
    at_coordinator = u.rate / coord if coord else float("inf")
    at_redis = u.rate / redis_ if redis_ else float("inf")
    if coord >= 0.85:
        first = f"coordinator CPU: one Python process near one core ({coord:.2f}); {cpu}"
    elif redis_ >= 0.85:
        first = f"Redis CPU: its one thread near one core ({redis_:.2f}); {cpu}"
    elif d.depth_mean < fleet.workers:
        first = (
            f"the coordinator's dispatch: the queue held {d.depth_mean:,.1f} jobs on average "
            f"(peak {d.depth_peak:,}) for {fleet.workers} workers while it sent, so workers "
            f"waited for jobs; it used {coord:.2f} of one core"
            + (" (no more: it shares the busy host with the fleet)" if busy else "")
            + f"; {cpu}"
        )
    else:
        first = (
            f"the workers: jobs waited in the queue ({d.depth_mean:,.1f} on average, peak "
            f"{d.depth_peak:,}) while the {fleet.workers} workers used {workers:.2f} cores; {cpu}"
        )
    name = "the coordinator's one core" if at_coordinator <= at_redis else "Redis's one thread"
    return (
        f"fleet: first bottleneck at {fleet.workers} workers, {u.rate:,.1f} jobs/s: {first}. "
        f"With the workers on machines of their own, the next limit is {name} at "
        f"~{min(at_coordinator, at_redis):,.0f} jobs/s (coordinator ~{at_coordinator:,.0f}, "
        f"Redis ~{at_redis:,.0f} jobs/s: this run's jobs/s over each one's core share)"
    )


def cost_note(fleet: Fleet) -> str:
    """What the deltarun path pays per job over bare Celery, and for what."""
    u, b = fleet.usage, fleet.bare
    assert b is not None
    verdict = "meets the goal" if fleet.ratio >= GOAL else "is below the goal"
    return (
        f"fleet: note: at {fleet.workers} workers the deltarun path runs at {fleet.ratio:.2f} of "
        f"bare Celery ({verdict} of {GOAL:.2f}); per job it spends "
        f"{u.ms_per_job(u.workers):.2f} ms of worker CPU (bare {b.ms_per_job(b.workers):.2f}), "
        f"{u.ms_per_job(u.coordinator):.2f} ms in the coordinator (bare sender "
        f"{b.ms_per_job(b.coordinator):.2f}) and {u.ms_per_job(u.redis):.3f} ms in Redis (bare "
        f"{b.ms_per_job(b.redis):.3f}). The difference buys: a signed job checked before it "
        "runs; a lease (SET NX + the started hash, renewed while it runs) so a job runs once "
        "and a dead worker's job is re-enqueued; the done set; the record signed, validated "
        "and published to the record stream with the lease released in one round trip; the "
        "coordinator's signature check, validation and fsync'd ledger append per batch; and "
        "its periodic lease checks over every pending job"
    )


# -- main -------------------------------------------------------------------------


def on_sigterm(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)  # the finally blocks stop every process


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", default="10,25,50", help="fleet sizes, comma-separated")
    parser.add_argument(
        "--jobs", type=int, default=50_000, help="jobs for the largest fleet (others: fewer)"
    )
    parser.add_argument(
        "--bare-share", type=float, default=0.2, help="bare Celery's jobs, a share of the fleet's"
    )
    smoke.add_flag(parser)
    args = parser.parse_args()
    sizes = sorted({int(part) for part in args.workers.split(",") if part.strip()})
    if args.smoke:
        sizes, args.jobs = [2, 4], 200
    if not sizes or sizes[0] < 1 or args.jobs < sizes[-1]:
        parser.error("--workers: positive sizes; --jobs: at least one job per worker")
    counts = {n: max(n, args.jobs * n // sizes[-1]) for n in sizes}
    bare_counts = {n: max(n, int(counts[n] * args.bare_share)) for n in sizes}
    if args.smoke:
        smoke.announce(
            "fleet",
            f"{' and '.join(map(str, sizes))} workers, {' and '.join(map(str, counts.values()))} "
            f"jobs, bare Celery {' and '.join(map(str, bare_counts.values()))}",
        )
    if shutil.which("redis-server") is None:
        print("fleet: redis-server is not installed (run `make redis`); nothing measured")
        return 1
    signal.signal(signal.SIGTERM, on_sigterm)
    load = os.getloadavg()[0]
    print(
        f"fleet: host {CORES} cores, load average {load:.2f} at the start (other processes "
        f"share the host); fleets {', '.join(map(str, sizes))} x -c 1"
    )
    fleets: list[Fleet] = []
    with tempfile.TemporaryDirectory(prefix="deltarun-fleet-") as tmp:
        work = Path(tmp)
        server = RedisServer(work / "redis", fsync="everysec")
        try:
            server.start()
            reached = broker_of(server)
            for n in sizes:
                fleet = run_fleet(server, reached, work, n, counts[n])
                fleet.bare, fleet.bare_dispatch = run_bare(server, work, n, bare_counts[n])
                print_fleet(fleet)
                fleets.append(fleet)
                sys.stdout.flush()
            # The run's budget with as many trials in flight (bench/fleet_budget.py).
            print_budget(server, sizes, latency_s=0.05 if args.smoke else 0.5)
            # Shared rate limits per route (bench/fleet_rates.py), with as many gateways.
            print_rates(server, sizes, seconds=2.0 if args.smoke else 8.0)
        except (KeyboardInterrupt, RunInterrupted):
            print("fleet: interrupted; every process it started is stopped", file=sys.stderr)
            return 130
        finally:
            stop_all()
            server.stop()
    if len(fleets) > 1:
        print_growth(fleets)
    print(bottleneck(fleets[-1]))
    below = [f for f in fleets if f.ratio < GOAL]
    if below:  # the largest fleet below the goal
        print(cost_note(below[-1]))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    finally:
        stop_all()
