"""What ``deltarun status`` reads besides the run directory: sandboxes on this host's
engine and, with a broker, leases and live workers in Redis. Each source is optional:
one that cannot be reached is left out and the status says which ones it used."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from runner.distributed import keys
from runner.errors import DeltarunError
from runner.status import Running

LABEL = "deltarun."


def sandboxes_running(run_id: str) -> dict[str, Running] | None:
    """Jobs with a live sandbox on this host's engine; None when Docker is not reachable."""
    from runner.sandbox.engine import API_ERRORS, connect

    try:
        client = connect(api_timeout_s=10)
        containers = client.containers(filters={"label": [f"{LABEL}run={run_id}"]})
    except (DeltarunError, *API_ERRORS):
        return None
    found: dict[str, Running] = {}
    for container in containers:
        labels = container.get("Labels") or {}
        job = labels.get(f"{LABEL}job", "")
        created = float(container.get("Created") or 0) or None
        if not job:
            continue
        earlier = found.get(job)
        if earlier is None or (created or 0) < (earlier.since or float("inf")):
            found[job] = Running(labels.get(f"{LABEL}worker", "?"), created)
    return found


def leases_running(broker: str, run_id: str, job_ids: Iterable[str]) -> dict[str, Running]:
    """Jobs a worker holds a lease on (the holder is ``worker:pid``)."""
    from runner.distributed.connection import connect_redis

    client = connect_redis(broker)
    ids = list(job_ids)
    found: dict[str, Running] = {}
    for start in range(0, len(ids), 1000):
        chunk = ids[start : start + 1000]
        holders = client.mget([keys.lease(run_id, jid) for jid in chunk])
        for jid, holder in zip(chunk, holders, strict=True):
            if holder:
                text = holder.decode() if isinstance(holder, bytes) else str(holder)
                found[jid] = Running(text)
    return found


def workers_seen(broker: str) -> Mapping[str, list[str]]:
    """Live workers (Celery node names) and the queues each consumes; empty when none answer."""
    from runner.distributed.celery_app import make_app

    try:
        seen = make_app(broker).control.inspect(timeout=1.5).active_queues() or {}
    except Exception:  # kombu and redis errors: the status says no worker answered
        return {}
    return {
        node: sorted(str(q.get("name")) for q in queues or [] if q.get("name") != keys.IDLE_QUEUE)
        for node, queues in sorted(seen.items())
    }
