"""``deltarun status``: where a run stands, from any terminal. Pure.

The planned jobs are recomputed from the run directory (tasks × arms × repeats,
ids as ``runner.suite.plan`` makes them); what is recorded comes from the ledger; what
is running comes from the sandboxes on this host's engine (their ``run`` and
``job`` labels) and, with a broker, from the leases workers hold in Redis. A job
neither recorded nor running is waiting.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from runner.distributed.disk_budget import shown
from runner.suite.plan import job_id


@dataclass(frozen=True)
class PlannedJob:
    task_id: str
    arm: str
    repeat: int


@dataclass(frozen=True)
class Running:
    """A job in flight: who runs it and since when (epoch seconds; None: unknown)."""

    where: str
    since: float | None = None


@dataclass(frozen=True)
class ArmStatus:
    arm: str
    planned: int
    recorded: int
    running: int
    outcomes: dict[str, int] = field(default_factory=dict)

    @property
    def waiting(self) -> int:
        return max(0, self.planned - self.recorded - self.running)


def planned_jobs(
    protocol_sha256: str, task_ids: Sequence[str], arms: Sequence[str], repeats: int
) -> dict[str, PlannedJob]:
    """Every job of the run by id."""
    return {
        job_id(protocol_sha256, task, arm, repeat): PlannedJob(task, arm, repeat)
        for task in task_ids
        for arm in arms
        for repeat in range(repeats)
    }


def arm_status(
    planned: Mapping[str, PlannedJob],
    arms: Sequence[str],
    outcomes: Mapping[str, str],
    running: Mapping[str, Running],
) -> list[ArmStatus]:
    """Per arm, in the controls' order: planned, recorded (by outcome), running, waiting.
    ``outcomes`` maps a recorded job id to its outcome."""
    result = []
    for arm in arms:
        mine = [jid for jid, job in planned.items() if job.arm == arm]
        counted = Counter(outcomes[jid] for jid in mine if jid in outcomes)
        result.append(
            ArmStatus(
                arm=arm,
                planned=len(mine),
                recorded=sum(counted.values()),
                running=sum(1 for jid in mine if jid in running and jid not in outcomes),
                outcomes=dict(sorted(counted.items())),
            )
        )
    return result


def lines(
    run_id: str,
    arms: Sequence[ArmStatus],
    running: Mapping[str, Running],
    planned: Mapping[str, PlannedJob],
    now: float,
    workers: Sequence[str] = (),
    unserved: Sequence[str] = (),
    sources: Sequence[str] = (),
) -> list[str]:
    """The status as text lines; ``running`` holds the jobs in flight (none recorded)."""
    total = sum(a.planned for a in arms)
    recorded = sum(a.recorded for a in arms)
    in_flight = sum(a.running for a in arms)
    out = [
        f"run {run_id}: {recorded}/{total} recorded, {in_flight} running, "
        f"{total - recorded - in_flight} waiting"
    ]
    width = max([len(a.arm) for a in arms] + [3])
    out.append(f"  {'arm':{width}}  recorded  running  waiting  outcomes")
    for arm in arms:
        outcomes = ", ".join(f"{k} {v}" for k, v in arm.outcomes.items()) or "-"
        out.append(
            f"  {arm.arm:{width}}  {f'{arm.recorded}/{arm.planned}':>8}  {arm.running:>7}  "
            f"{arm.waiting:>7}  {outcomes}"
        )
    known = [(r.since, jid) for jid, r in running.items() if r.since is not None]
    if known:
        since, jid = min(known)
        job = planned.get(jid)
        what = f"{job.task_id} / {job.arm} #{job.repeat}" if job else jid[:12]
        out.append(
            f"oldest running trial: {what} on {running[jid].where}, {_duration(now - since)}"
        )
    for worker in workers:
        out.append(f"worker: {worker}")
    for queue in unserved:
        out.append(f"warning: {queue}")
    if sources:
        out.append(f"(running from: {', '.join(sources)})")
    return out


def disk_note(entry: Mapping[str, object]) -> str:
    """A worker's disk use under ``--disk-budget`` (``keys.worker_disk``), for its line."""

    def size(name: str) -> str:
        value = entry.get(name)
        return shown(int(value)) if isinstance(value, int | float) else "?"

    note = (
        f"disk {size('used')} of {size('budget')} ({entry.get('images', '?')} image(s) "
        f"{size('image_bytes')}, cache {size('cache_bytes')})"
    )
    over = entry.get("over")
    if isinstance(over, int | float) and over > 0:
        note += f", over by {size('over')}: live runs need it"
    return note


def pace_note(node: str, entry: Mapping[str, str]) -> str:
    """A ``-c auto`` worker's level and why (``pacing_scaler.Pacer.publish``), for its line."""
    level, ceiling = entry.get("level", "?"), entry.get("ceiling", "?")
    note = f"{node} -c auto: level {level} of at most {ceiling}: {entry.get('reason', '?')}"
    holding = entry.get("holding")
    return f"{note}; now: {holding}" if holding else note


def _duration(seconds: float) -> str:
    seconds = max(0, int(seconds))
    if seconds < 120:
        return f"{seconds} s"
    if seconds < 7200:
        return f"{seconds // 60} min"
    return f"{seconds // 3600} h {seconds % 3600 // 60} min"
