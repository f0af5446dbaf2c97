"""Worker metrics for Prometheus: ``deltarun worker --metrics-port PORT``.

What is counted (every name starts with ``deltarun_worker_``): trials started and
finished by outcome, infrastructure errors by kind, sandbox start latency, the
agent and verify phase durations, leases renewed and lost, and cache hits and
misses of the worker's caches (staged fixtures, archive members, blobs).

Multiprocess design. Trials run in the pool children of Celery's prefork pool,
and every child would have counters of its own, invisible to the others. So the
metrics use prometheus_client's multiprocess mode: the worker's main process,
before the pool forks, makes a fresh private directory, names it in
``PROMETHEUS_MULTIPROC_DIR`` and enables the metrics (``start``); from then on
each process that records (a pool child, or the main process during its image
preflight) writes its values to memory-mapped files of its own in that
directory, keyed by its pid. The main process serves ``/metrics`` on a thread
with a ``MultiProcessCollector``, which sums the files of all processes, dead
ones included: a counter never goes down when a pool child is replaced. A child
that ends is marked dead (``on_process_shutdown``; it matters only for live
gauges, of which there are none yet), and the directory is removed when the main
process exits.

prometheus_client takes a lock around each write and does not reset it at a
fork: a fork while a thread of the main process (the image watcher) is writing
would leave the child's copy locked forever. Every recording here therefore
goes through ``_lock``, which is also held across each fork.

Off by default: until ``start`` (or ``enable``) is called, every recording
function returns at once and prometheus_client is not even imported, so the
local executor, which shares ``runner.trial.execute``, the sandboxes and the caches,
pays nothing and depends on no configuration.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from runner.errors import UserError

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry, Counter, Histogram

PREFIX = "deltarun_worker_"
DIR_ENV = "PROMETHEUS_MULTIPROC_DIR"
DEFAULT_ADDR = "127.0.0.1"
SANDBOX_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0)
PHASE_BUCKETS = (0.5, 1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0)

# The ``kind`` label of infrastructure_errors_total.
OUTCOME_ERROR = "outcome_error"  # a trial recorded with outcome ``error``
UNKNOWN_PROTOCOL = "unknown_protocol"  # a job whose protocol bundle is not in Redis (retried)
INFRA = "infra"  # any other failure that ended a job before its record


@dataclass(frozen=True)
class _Metrics:
    trials_started: Counter
    trials_finished: Counter
    infrastructure_errors: Counter
    sandbox_start: Histogram
    agent_phase: Histogram
    verify_phase: Histogram
    leases_renewed: Counter
    leases_lost: Counter
    cache_hits: Counter
    cache_misses: Counter


_metrics: _Metrics | None = None
_lock = threading.Lock()
_fork_hooks = False


def _make() -> _Metrics:
    from prometheus_client import Counter, Histogram

    def counter(name: str, doc: str, *labels: str) -> Counter:
        return Counter(PREFIX + name, doc, labels, registry=None)

    def histogram(name: str, doc: str, buckets: tuple[float, ...]) -> Histogram:
        return Histogram(PREFIX + name, doc, registry=None, buckets=buckets)

    return _Metrics(
        trials_started=counter("trials_started_total", "Trials this worker started."),
        trials_finished=counter(
            "trials_finished_total", "Trials this worker finished, by outcome.", "outcome"
        ),
        infrastructure_errors=counter(
            "infrastructure_errors_total",
            "Infrastructure errors: records with outcome error (outcome_error), jobs whose "
            "protocol is unknown (unknown_protocol) or that failed before a record (infra).",
            "kind",
        ),
        sandbox_start=histogram(
            "sandbox_start_seconds",
            "Seconds from creating a sandbox (volumes, container) until it started.",
            SANDBOX_BUCKETS,
        ),
        agent_phase=histogram(
            "agent_phase_seconds",
            "Seconds of a trial's agent phase (sandbox A, from opening to the screened patch).",
            PHASE_BUCKETS,
        ),
        verify_phase=histogram(
            "verify_phase_seconds",
            "Seconds of a trial's verify phase (sandbox B and the hidden tests).",
            PHASE_BUCKETS,
        ),
        leases_renewed=counter("leases_renewed_total", "Job leases renewed while trials ran."),
        leases_lost=counter(
            "leases_lost_total", "Job leases found expired or taken over at renewal."
        ),
        cache_hits=counter("cache_hits_total", "Cache hits, by cache.", "cache"),
        cache_misses=counter("cache_misses_total", "Cache misses, by cache.", "cache"),
    )


# -- set-up -------------------------------------------------------------------------------


def enable(directory: Path) -> None:
    """Record into ``directory`` (prometheus_client's multiprocess files) from this process
    and from every process forked from it afterwards."""
    global _metrics, _fork_hooks
    from prometheus_client import values

    os.environ[DIR_ENV] = str(directory)
    with _lock:
        # prometheus_client chooses its value class when first imported; choose again, now
        # that the directory is set (a fresh class: its open files belong to this directory).
        values.ValueClass = values.MultiProcessValue()  # type: ignore[no-untyped-call]
        _metrics = _make()
    if not _fork_hooks:
        os.register_at_fork(
            before=_lock.acquire, after_in_parent=_lock.release, after_in_child=_lock.release
        )
        _fork_hooks = True


def disable() -> None:
    """Stop recording (every recording function is a no-op again) and close the files."""
    global _metrics
    from prometheus_client import values

    os.environ.pop(DIR_ENV, None)
    with _lock:
        _metrics = None
        close = getattr(values, "close_all_multiprocess_files", None)  # 0.20 and later
        if close is not None:
            close()
        values.ValueClass = values.get_value_class()  # type: ignore[no-untyped-call]


def registry(directory: Path) -> CollectorRegistry:
    """A registry whose one collector sums the metric files of all processes in ``directory``."""
    from prometheus_client import CollectorRegistry
    from prometheus_client.multiprocess import MultiProcessCollector

    found = CollectorRegistry()
    MultiProcessCollector(found, path=str(directory))  # type: ignore[no-untyped-call]
    return found


def exposition(directory: Path) -> str:
    """What ``/metrics`` answers: the text format of every process's metrics summed."""
    from prometheus_client import generate_latest

    return generate_latest(registry(directory)).decode("utf-8")


def start(port: int, addr: str = DEFAULT_ADDR) -> str:
    """In a worker's main process, before the pool forks: a private directory for the metric
    files, the metrics enabled, ``/metrics`` served on ``addr:port`` by a daemon thread, the
    directory removed at exit. Returns the URL. A port in use (or an address this machine
    does not have) is one line, ``UserError``."""
    from prometheus_client import start_http_server

    directory = Path(tempfile.mkdtemp(prefix="deltarun-metrics-"))
    try:
        start_http_server(port, addr, registry(directory))
    except OSError as exc:
        shutil.rmtree(directory, ignore_errors=True)
        why = exc.strerror or str(exc)
        raise UserError(
            f"--metrics-port {port}: cannot listen on {addr}:{port} ({why}); choose a free "
            "port, or leave --metrics-port out"
        ) from exc
    atexit.register(_remove, directory, os.getpid())
    enable(directory)
    host = f"[{addr}]" if ":" in addr else addr
    return f"http://{host}:{port}/metrics"


def _remove(directory: Path, owner: int) -> None:
    if os.getpid() == owner:  # never from a forked child that happens to run atexit
        shutil.rmtree(directory, ignore_errors=True)


def on_process_shutdown(pid: int | None = None, **_: Any) -> None:
    """Celery's ``worker_process_shutdown``, in a pool child that ends: mark it dead."""
    directory = os.environ.get(DIR_ENV)
    if _metrics is None or directory is None:
        return
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(pid or os.getpid(), directory)  # type: ignore[no-untyped-call]


# -- recording: each one a no-op unless enabled -------------------------------------------


def trial_started() -> None:
    metrics = _metrics
    if metrics is not None:
        with _lock:
            metrics.trials_started.inc()


def trial_finished(outcome: str) -> None:
    """A trial's record was made; outcome ``error`` counts as an infrastructure error too."""
    metrics = _metrics
    if metrics is not None:
        with _lock:
            metrics.trials_finished.labels(outcome=outcome).inc()
            if outcome == "error":
                metrics.infrastructure_errors.labels(kind=OUTCOME_ERROR).inc()


def infrastructure_error(kind: str) -> None:
    metrics = _metrics
    if metrics is not None:
        with _lock:
            metrics.infrastructure_errors.labels(kind=kind).inc()


def sandbox_started(seconds: float) -> None:
    metrics = _metrics
    if metrics is not None:
        with _lock:
            metrics.sandbox_start.observe(seconds)


def lease_renewed(kept: bool) -> None:
    """A renewal of a lease this process holds: kept, or found expired or taken over."""
    metrics = _metrics
    if metrics is not None:
        with _lock:
            (metrics.leases_renewed if kept else metrics.leases_lost).inc()


def cache_lookup(cache: str, hit: bool) -> None:
    """One lookup in ``cache`` (``staged``, ``members``, ``blobs``)."""
    metrics = _metrics
    if metrics is not None:
        with _lock:
            (metrics.cache_hits if hit else metrics.cache_misses).labels(cache=cache).inc()


@contextmanager
def phase(name: Literal["agent", "verify"]) -> Iterator[None]:
    """Time a trial's agent or verify phase, however it ends."""
    if _metrics is None:
        yield
        return
    started = time.monotonic()
    try:
        yield
    finally:
        metrics = _metrics
        if metrics is not None:
            histogram = metrics.agent_phase if name == "agent" else metrics.verify_phase
            with _lock:
                histogram.observe(time.monotonic() - started)
