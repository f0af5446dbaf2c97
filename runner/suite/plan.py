"""Planning: the jobs of a run, task × arm × repeat, with deterministic ids. Pure.

``job_id = sha256(canonical JSON of [protocol hash, task id, arm, repeat])``, so
the same protocol always plans the same ids: resume, dedup and leases key on it.
Arms are interleaved (every arm of a task runs next to the others) and task
order is shuffled by the protocol's seed, so drift over a long run (a warming
cache, a noisy neighbour) does not line up with one arm.

With a ``sequential:`` block in the controls' ``gate:`` section (``run --until-decided``)
the order is instead one seeded order of the tasks cut into blocks
(``runner.evidence.stopping``): each block's tasks, all arms and all repeats, before the
next block, so every look sees complete pairs.
"""

from __future__ import annotations

import random

from runner.config.controls import Controls
from runner.evidence.stopping import blocks, task_order
from runner.hashing import sha256_json
from runner.records import Job, Task


def job_id(protocol_sha256: str, task_id: str, arm: str, repeat: int) -> str:
    """The deterministic id of one (task, arm, repeat) under one protocol."""
    return sha256_json([protocol_sha256, task_id, arm, repeat])


def task_blocks(controls: Controls, task_ids: list[str]) -> list[list[str]] | None:
    """The tasks' blocks of a sequential run, in order; None without ``gate.sequential``.
    The order is a function of the protocol's seed and the task ids alone."""
    spec = None if controls.gate is None else controls.gate.sequential
    if spec is None:
        return None
    order = task_order(task_ids, random.Random(f"sequential:{controls.runtime.seed}"))
    return blocks(order, spec.block_size(len(order)))


def plan_jobs(
    controls: Controls,
    tasks: tuple[Task, ...] | list[Task],
    protocol_sha256: str,
    run_id: str,
    rng: random.Random,
) -> list[Job]:
    """Every job of the run in execution order (block by block when sequential)."""
    arms = [leg.name for leg in controls.legs()]
    repeats = range(controls.runtime.repeats)
    sequential = task_blocks(controls, [task.id for task in tasks])
    if sequential is not None:
        cells = [(t, r) for block in sequential for r in repeats for t in block]
    else:
        cells = []
        for repeat in repeats:
            order = [task.id for task in tasks]
            rng.shuffle(order)
            cells += [(task_id, repeat) for task_id in order]
    return [
        Job(
            job_id=job_id(protocol_sha256, task_id, arm, repeat),
            run_id=run_id,
            protocol_sha256=protocol_sha256,
            task_id=task_id,
            arm=arm,
            repeat=repeat,
        )
        for task_id, repeat in cells
        for arm in arms
    ]
