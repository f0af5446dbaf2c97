"""What ``deltarun status`` reads, and the merge of it: the run directory, sandboxes on
this host's engine and, with a broker, leases and live workers in Redis. Each source
besides the run directory is optional: one that cannot be reached is left out and the
status says which ones it used (``gather``; the lines themselves: ``runner.run.status``)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

from runner.distributed import keys
from runner.errors import DeltarunError, UserError
from runner.run import status as st
from runner.run.status import Running
from runner.store.rundir import RunDir

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


def _runtimes() -> str:
    """The OCI runtimes this host's engine has (runsc once ``make gvisor`` registered it)."""
    from runner.sandbox.engine import connect, engine_runtimes

    try:
        return ", ".join(engine_runtimes(connect(api_timeout_s=10))) or "unknown"
    except DeltarunError:
        return "unknown"


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


def workers_disk(broker: str) -> dict[str, dict[str, object]]:
    """Worker name → its disk use, as each worker with ``--disk-budget`` publishes it."""
    import json

    from runner.distributed.connection import connect_redis

    client = connect_redis(broker)
    found: dict[str, dict[str, object]] = {}
    for key in client.scan_iter(match=keys.worker_disk("*"), count=1000):
        name = key.decode("utf-8", "replace").removeprefix(keys.worker_disk(""))
        try:
            found[name] = dict(json.loads(client.get(key) or b"{}"))
        except (ValueError, TypeError):
            continue
    return found


def _with_disk(
    seen: Mapping[str, list[str]], disk: Mapping[str, Mapping[str, object]]
) -> list[str]:
    """A line per live worker (its queues, and its disk use when it has a budget), then one
    for each budgeted worker that did not answer."""
    lines = []
    for node, queues in seen.items():
        name = node.partition("@")[2]
        note = f", {st.disk_note(disk[name])}" if name in disk else ""
        lines.append(f"{node} ({', '.join(queues) or 'no image yet'}){note}")
    answered = {node.partition("@")[2] for node in seen}
    for name in sorted(set(disk) - answered):
        lines.append(f"{name} (did not answer), {st.disk_note(disk[name])}")
    return lines


def workers_pace(broker: str, nodes: Iterable[str]) -> list[str]:
    """A line for each of ``nodes`` that paces itself (``-c auto``): its level and why."""
    from runner.distributed.connection import connect_redis
    from runner.distributed.pacing_samples import level_key

    client = connect_redis(broker)
    found = []
    for node in nodes:
        entry = client.hgetall(level_key(node))
        if entry:
            text = {_str(k): _str(v) for k, v in entry.items()}
            found.append(st.pace_note(node, text))
    return found


def _str(value: bytes | str) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def gather(run_dir: Path, broker: str | None, now: float) -> list[str]:
    """The status lines of a run: per arm recorded (by outcome), running and waiting jobs,
    the oldest running trial; with ``broker``, the workers seen and unserved queues."""
    run = RunDir(run_dir)
    if not run.exists():
        raise UserError(f"{run_dir}: not a run directory (no run.json); pass a run's --out")
    meta = run.meta()
    controls = run.stored_controls()  # held inside the run directory, capped
    planned = st.planned_jobs(
        meta.protocol_sha256, [t["id"] for t in meta.tasks], meta.arms, controls.runtime.repeats
    )
    outcomes = {t.job_id: t.outcome.value for t in run.trials() if t.job_id in planned}
    running: dict[str, Running] = {}
    sources: list[str] = []
    local = sandboxes_running(meta.run_id)
    if local is not None:
        running.update(local)
        sources.append(f"this host's Docker engine (OCI runtimes {_runtimes()})")
    workers: list[str] = []
    unserved: list[str] = []
    if broker is not None:
        waiting = [jid for jid in planned if jid not in outcomes]
        for jid, held in leases_running(broker, meta.run_id, waiting).items():
            running[jid] = Running(held.where, running[jid].since if jid in running else None)
        sources.append("leases in Redis")
        seen = workers_seen(broker)
        workers = _with_disk(seen, workers_disk(broker))
        if not workers:
            workers = ["none answered (no live worker on this broker)"]
        workers += workers_pace(broker, seen)
        if len(outcomes) + len(running) < len(planned):
            unserved = _unserved(meta.image_digests, seen, controls.runtime.oci_runtime)
    running = {jid: where for jid, where in running.items() if jid not in outcomes}
    arms = st.arm_status(planned, meta.arms, outcomes, running)
    return st.lines(meta.run_id, arms, running, planned, now, workers, unserved, sources)


def _unserved(
    images: Iterable[str], seen: Mapping[str, list[str]], runtime: str | None = None
) -> list[str]:
    """A line for each of the run's queues that no live worker consumes (a queue of an OCI
    runtime other than runc is consumed only by workers whose engine has it)."""
    consumed = {queue for queues in seen.values() for queue in queues}
    found = []
    for image in sorted(images):
        queue = keys.queue_for_image(image, runtime)
        if queue not in consumed:
            needs = "" if queue == keys.queue_for_image(image) else f" on an engine with {runtime}"
            found.append(
                f"no live worker consumes queue {queue} (image {image}): jobs of this "
                f"run that need it wait; start a worker that has the image{needs}"
            )
    return found
