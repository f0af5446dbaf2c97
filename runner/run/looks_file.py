"""The looks of a sequential run (``run --until-decided``), taken from the run directory:
what the run does after each block, what it writes as ``looks.json``, what ``gate`` and
``replay`` rebuild from the ledger byte for byte.

The looks are a function of the stored controls (``gate.sequential``, the seed, the delta
criteria), the suite's task ids (``run.json``) and the ledger: block by block in the
protocol's order (``runner.suite.plan.task_blocks``), each block whose every (task, arm,
repeat) has a record gets its look (``runner.evidence.stopping.look_at``), up to the first
look that decides every target. So a resumed run takes its looks again from the ledger.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from runner.config.controls import Controls
from runner.config.gate_spec import GateSpec, SequentialSpec
from runner.errors import DigestMismatch
from runner.evidence.scoring import Scores, score
from runner.evidence.sequential import Design, Spending
from runner.evidence.stopping import Look, Target, look_at
from runner.store.rundir import RunDir, RunMeta
from runner.suite.plan import task_blocks

LOOKS_FILE = "looks.json"
SCHEMA = "deltarun.looks/1"


@dataclass(frozen=True)
class Looks:
    """The looks a run's ledger supports so far, and what they spent."""

    spec: SequentialSpec
    design: Design
    blocks: list[list[str]]
    done: list[int]  # tasks done at each look taken
    looks: list[Look]
    arms: int  # legs per task
    repeats: int
    complete: bool  # the ledger holds exactly the jobs of the blocks looked at
    scores: Scores

    @property
    def total(self) -> int:
        return sum(len(b) for b in self.blocks)

    @property
    def decided(self) -> bool:
        return bool(self.looks) and self.looks[-1].decided

    @property
    def stopped_early(self) -> bool:
        return self.decided and not self.looks[-1].final

    def trials(self, tasks: int) -> int:
        return tasks * self.arms * self.repeats


def design_of(spec: SequentialSpec) -> Design:
    return Design(Spending(spec.spending.replace("_", "-")), spec.alpha, 1)


def targets_of(spec: GateSpec, meta: RunMeta) -> list[Target]:
    """Each gated arm's delta criteria, in the gate's order."""
    arms = spec.arms or [a for a in meta.arms if a != meta.control_arm]
    return [
        Target(arm, name, threshold, refusal)
        for arm in arms
        for name, threshold, refusal in spec.delta_targets()
    ]


def sequential_spec(controls: Controls) -> SequentialSpec | None:
    return None if controls.gate is None else controls.gate.sequential


def take_looks(run: RunDir) -> Looks | None:
    """The looks the ledger supports (None: the controls have no ``gate.sequential``),
    deciding the controls' delta criteria."""
    controls = run.stored_controls()
    spec = sequential_spec(controls)
    if spec is None or controls.gate is None:
        return None
    meta = run.meta()
    ids = [t["id"] for t in meta.tasks]
    cut = task_blocks(controls, ids) or []
    trials = run.scored_trials()
    scores = score(trials, meta.arms, meta.control_arm, ids)
    seen = {(t.task_id, t.arm, t.repeat) for t in trials}
    repeats = controls.runtime.repeats
    targets = targets_of(controls.gate, meta)
    design = design_of(spec)
    done: list[int] = []
    looks: list[Look] = []
    planned: set[tuple[str, str, int]] = set()
    tasks: set[str] = set()
    for block in cut:
        jobs = {(t, a, r) for t in block for a in meta.arms for r in range(repeats)}
        if not jobs <= seen:
            break
        planned |= jobs
        tasks |= set(block)
        done.append(len(tasks))
        diffs, tables = _pairs(scores, targets, tasks)
        looks.append(look_at(design, done, len(ids), targets, diffs, tables))
        if looks[-1].decided:
            break
    complete = seen == planned
    return Looks(spec, design, cut, done, looks, len(meta.arms), repeats, complete, scores)


def last_look_for(found: Looks, targets: list[Target]) -> Look | None:
    """The last look taken, deciding ``targets`` instead (a gate's command-line criteria):
    the boundary depends on the looks' fractions alone, so its interval holds for any
    threshold."""
    if not found.done:
        return None
    tasks = {t for b in found.blocks[: len(found.done)] for t in b}
    diffs, tables = _pairs(found.scores, targets, tasks)
    return look_at(found.design, found.done, found.total, targets, diffs, tables)


def _pairs(
    scores: Scores, targets: list[Target], tasks: set[str]
) -> tuple[dict[Target, list[float]], dict[Target, list[int]]]:
    """Each target's paired differences on ``tasks``, and its paired 2x2 table (both, only
    the candidate, only the control, neither) when every score is 0 or 1."""
    deltas = {d.arm: d for d in scores.deltas}
    refusals = {d.arm: d for d in scores.refusal}
    diffs: dict[Target, list[float]] = {}
    tables: dict[Target, list[int]] = {}
    for target in targets:
        delta = (refusals if target.refusal else deltas).get(target.arm)
        cases = [
            c
            for c in ([] if delta is None else delta.cases)
            if c.delta is not None and c.task_id in tasks
        ]
        diffs[target] = [c.delta for c in cases if c.delta is not None]
        table = [0, 0, 0, 0]
        for c in cases:
            if c.candidate_score not in (0.0, 1.0) or c.control_score not in (0.0, 1.0):
                break
            table[2 * (c.candidate_score == 0.0) + (c.control_score == 0.0)] += 1
        else:
            tables[target] = table
    return diffs, tables


def _num(value: float) -> float | str:
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return value


def looks_json(run: RunDir, found: Looks) -> str:
    """``looks.json``: the design, each look with its boundary and targets, and the stop;
    sorted keys, so a replay is byte for byte."""
    meta = run.meta()
    spent = found.done[-1] if found.done else 0
    looks: list[dict[str, Any]] = []
    for look in found.looks:
        targets = []
        for t in look.targets:
            i = t.interval
            entry = {
                "arm": t.target.arm,
                "criterion": t.target.name,
                "threshold": t.target.threshold,
                "decision": t.decision.value,
                "n": 0 if i is None else i.n,
                "estimate": None if i is None else i.estimate,
                "se": None if i is None else i.se,
                "critical_value": None if i is None else _num(i.crit),
                "interval": None if i is None else [_num(i.low), _num(i.high)],
            }
            if i is not None and i.method != "t":  # agreeing pairs: exact bounds, se 0
                entry["method"] = i.method
            targets.append(entry)
        looks.append(
            {
                "look": look.number,
                "tasks": look.tasks_done,
                "fraction": look.fraction,
                "final": look.final,
                "boundary": _num(look.bound),
                "decided": look.decided,
                "targets": targets,
            }
        )
    data = {
        "schema": SCHEMA,
        "run_id": meta.run_id,
        "protocol_sha256": meta.protocol_sha256,
        "design": {
            "spending": found.spec.spending,
            "alpha": found.spec.alpha,
            "sides": 1,
            "block": len(found.blocks[0]) if found.blocks else 0,
            "planned_looks": len(found.blocks),
            "tasks": found.total,
        },
        "order": found.blocks,
        "looks": looks,
        "stop": {
            "looks_taken": len(found.looks),
            "decided": found.decided,
            "stopped_early": found.stopped_early,
            "tasks_spent": spent,
            "tasks_saved": found.total - spent,
            "trials_spent": found.trials(spent),
            "trials_saved": found.trials(found.total - spent),
        },
    }
    return json.dumps(data, indent=2, sort_keys=True) + "\n"


def write_looks(run: RunDir) -> Looks | None:
    """Take the looks the ledger supports and write ``looks.json`` (nothing without
    ``gate.sequential``)."""
    found = take_looks(run)
    if found is not None:
        run.write_file(LOOKS_FILE, looks_json(run, found))
    return found


def checked_looks(run: RunDir) -> Looks | None:
    """The looks of a run that wrote ``looks.json``, rebuilt from the ledger, and required
    to match the stored file byte for byte (exit 3 otherwise); None without the file."""
    path = run.path / LOOKS_FILE
    if not path.is_file():
        return None
    found = take_looks(run)
    if found is None or looks_json(run, found).encode() != run.kept(LOOKS_FILE):
        raise DigestMismatch(
            f"{path}: the looks rebuilt from the ledger differ from the stored ones; looks.json "
            "or the run directory was changed after the run"
        )
    return found


def replay_looks(run: RunDir, rewrite: bool = False) -> list[str]:
    """``replay``'s step: ``looks.json`` rebuilt byte for byte (``rewrite``: written anew)."""
    path = run.path / LOOKS_FILE
    if not path.is_file():
        return []
    if rewrite:
        write_looks(run)
        return [f"{path}: rebuilt"]
    checked_looks(run)
    return [f"{path}: identical"]


def stop_line(found: Looks) -> str:
    """One line: where the looks stopped and what that spent."""
    k, planned = len(found.looks), len(found.blocks)
    spent = found.done[-1] if found.done else 0
    saved = found.trials(found.total - spent)
    if found.stopped_early:
        why = "every delta criterion decided"
    elif found.looks and found.looks[-1].final:
        why = "the suite spent"
    else:
        why = "not decided yet"
    return (
        f"sequential: stopped at look {k} of {planned} ({why}): {spent} of {found.total} "
        f"tasks spent, {saved} trials saved"
    )


__all__ = [
    "LOOKS_FILE",
    "Looks",
    "checked_looks",
    "last_look_for",
    "looks_json",
    "replay_looks",
    "stop_line",
    "take_looks",
    "targets_of",
    "write_looks",
]
