"""Redis key names. Everything deltarun writes to Redis starts with ``deltarun:``."""

from __future__ import annotations

from collections.abc import Iterable

from runner.sandbox.applied import DEFAULT_RUNTIME

PREFIX = "deltarun"
TRIAL_TASK = "deltarun.trial"
STOP_TTL_S = 7 * 24 * 3600  # a stopped run stays stopped for a week unless resumed
# A run's own keys (its record stream, done and started hashes) expire this long after their
# last write, so a run whose coordinator died leaves nothing in Redis for good; a finished
# run's coordinator removes them at once (``run_keys``).
RUN_KEY_TTL_S = STOP_TTL_S


def blob(sha256: str) -> str:
    """An archive's bytes, keyed by their SHA-256."""
    return f"{PREFIX}:blob:{sha256}"


def protocol(sha256: str) -> str:
    """The protocol bundle (controls, suite and agent blobs) of a protocol hash."""
    return f"{PREFIX}:protocol:{sha256}"


def protocol_blobs(sha256: str) -> str:
    """JSON {"registry": HOST:PORT or null, "blobs": {sha256: size}}: where a protocol's
    blobs live and which they are (``runner.distributed.blob_gc``)."""
    return f"{PREFIX}:protocol-blobs:{sha256}"


def runs() -> str:
    """Hash run id → JSON {"protocol", "state": running | finished | interrupted, "at"}:
    which runs need which protocol's blobs (``runner.distributed.blob_gc``)."""
    return f"{PREFIX}:runs"


def lease(run_id: str, job_id: str) -> str:
    """Held (with an expiry, renewed) by the worker running a job."""
    return f"{PREFIX}:lease:{run_id}:{job_id}"


def started(run_id: str) -> str:
    """Hash job id → worker: jobs a worker has started (cleared on re-enqueue)."""
    return f"{PREFIX}:started:{run_id}"


def done(run_id: str) -> str:
    """Hash job id → worker of the first record published for the job."""
    return f"{PREFIX}:done:{run_id}"


def records(run_id: str) -> str:
    """Stream of every record workers published for a run (duplicates included)."""
    return f"{PREFIX}:records:{run_id}"


def stopped(run_id: str) -> str:
    """Set (to the reason) when a run stops early; workers then skip its remaining jobs."""
    return f"{PREFIX}:stopped:{run_id}"


KEY_REFUSAL, VERSION_REFUSAL = "key", "version"  # a refusal notice's kind


def refused(run_id: str) -> str:
    """List of JSON notices from workers that refused a job of the run (a signature not made
    with their key, ``KEY_REFUSAL``, or a job their deltarun cannot read, ``VERSION_REFUSAL``):
    read and emptied by the coordinator, which says why and sends those jobs again."""
    return f"{PREFIX}:refused:{run_id[:80]}"


def run_keys(run_id: str) -> list[str]:
    """The keys a run writes besides its leases (which expire within a minute) and its stop
    flag (``STOP_TTL_S``): removed when the run finishes or by ``deltarun gc --broker``."""
    return [
        records(run_id),
        done(run_id),
        started(run_id),
        refused(run_id),
        run_images(run_id),
        run_budget(run_id),
    ]


def run_budget(run_id: str) -> str:
    """Hash: the run's dollar account (``budget.run_usd``), in micro-dollars: ``limit``,
    ``spent``, ``arm:<name>`` and ``reached`` (``runner.distributed.run_budget``)."""
    return f"{PREFIX}:run-budget:{run_id[:80]}"


def run_images(run_id: str) -> str:
    """JSON {tag: pinned image ID}: the images a run needs, which a worker with a disk
    budget pulls before its first job and never evicts while the run is live
    (``runner.distributed.disk_budget_keeper``)."""
    return f"{PREFIX}:run-images:{run_id[:80]}"


def worker_disk(worker: str) -> str:
    """JSON: a worker's disk use under its budget, refreshed each round, expiring when the
    worker stops (``runner.distributed.disk_budget_keeper``; shown by ``deltarun status``)."""
    return f"{PREFIX}:worker-disk:{worker[:200]}"


def queue_for_image(image: str, oci_runtime: str | None = None) -> str:
    """Jobs route to one queue per sandbox image (and OCI runtime other than the default
    ``runc``: ``@runsc``): a worker takes only jobs whose image and runtime its engine has."""
    suffix = f"@{oci_runtime}" if oci_runtime and oci_runtime != DEFAULT_RUNTIME else ""
    return f"{PREFIX}.{image}{suffix}"


def queues_for_image(image: str, runtimes: Iterable[str]) -> list[str]:
    """Every queue of ``image`` a worker whose engine has ``runtimes`` consumes."""
    return sorted({queue_for_image(image), *(queue_for_image(image, r) for r in runtimes)})


def images() -> str:
    """Hash sandbox image tag → JSON {id, ref}: the image ID a run pins and, with
    ``--registry``, the reference to pull it by digest (``runner.distributed.registry``)."""
    return f"{PREFIX}:images"


IDLE_QUEUE = f"{PREFIX}.idle"  # consumed by a worker with no image to serve yet; never sent to
