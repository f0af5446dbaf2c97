"""Planning: the jobs of a run, task × arm × repeat, with deterministic ids. Pure.

``job_id = sha256(canonical JSON of [protocol hash, task id, arm, repeat])``, so
the same protocol always plans the same ids: resume, dedup and leases key on it.
Arms are interleaved (every arm of a task runs next to the others) and task
order is shuffled by the protocol's seed, so drift over a long run (a warming
cache, a noisy neighbour) does not line up with one arm.
"""

from __future__ import annotations

import random

from runner.config.controls import Controls
from runner.hashing import sha256_json
from runner.records import Job, Task


def job_id(protocol_sha256: str, task_id: str, arm: str, repeat: int) -> str:
    """The deterministic id of one (task, arm, repeat) under one protocol."""
    return sha256_json([protocol_sha256, task_id, arm, repeat])


def plan_jobs(
    controls: Controls,
    tasks: tuple[Task, ...] | list[Task],
    protocol_sha256: str,
    run_id: str,
    rng: random.Random,
) -> list[Job]:
    """Every job of the run in execution order."""
    jobs: list[Job] = []
    arms = [leg.name for leg in controls.legs()]
    for repeat in range(controls.runtime.repeats):
        order = [task.id for task in tasks]
        rng.shuffle(order)
        for task_id in order:
            for arm in arms:
                jobs.append(
                    Job(
                        job_id=job_id(protocol_sha256, task_id, arm, repeat),
                        run_id=run_id,
                        protocol_sha256=protocol_sha256,
                        task_id=task_id,
                        arm=arm,
                        repeat=repeat,
                    )
                )
    return jobs
