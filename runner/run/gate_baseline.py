"""``deltarun gate RUN_B --baseline RUN_A``: RUN_B's candidate arms decided against arms of
an earlier run (a run directory or an export kit's ``run/``), paired per task as
``deltarun compare`` pairs them (``runner.report.compare``).

A baseline is comparable when it ran the same sealed suite (suite digest, exit 3), under the
same ``runtime:`` section of the controls (repeats, retries, seed, timeouts, limits, network,
image settings; exit 3) in the same channel (exit 1). The arms, their agents, prompts, skills
and routes may differ: that difference is what the gate measures, so the protocol hashes
differ by design. Every check reads ``run.json`` and the stored controls before anything is
written.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runner.config.gate_spec import GateSpec
from runner.errors import DigestMismatch, ProtocolMismatch, UserError
from runner.evidence.scoring import Scores, paired_delta, summarise
from runner.paths import inside
from runner.records import TaskKind
from runner.report.assemble import checked_records
from runner.report.cost import ArmCost, arm_cost
from runner.store.rundir import RunDir

BASELINE_LABEL = "baseline"


@dataclass(frozen=True)
class Baseline:
    """The baseline run, where it was found, and the (RUN_B arm → RUN_A arm) pairs."""

    path: Path
    run: RunDir
    pairs: dict[str, str]
    arm: str | None  # --baseline-arm, or None: each arm against its same-named arm


def baseline_run(path: Path) -> RunDir:
    """The run directory at ``path``, or the ``run/`` folder of an export kit there."""
    if not (path / "run.json").is_file() and (path / "run" / "run.json").is_file():
        return RunDir(inside(path, "run", file=path, field="the kit's run/"))  # no link out
    if not (path / "run.json").is_file():
        raise UserError(
            f"{path}: --baseline is neither a run directory nor an export kit (no run.json, "
            "no run/run.json); give the last accepted run or its `deltarun export` kit"
        )
    return RunDir(path)


def control_name(arm: str) -> str:
    """The baseline arm's name in the decision (beside RUN_B's candidate arm names)."""
    return f"{arm} ({BASELINE_LABEL})"


def check_baseline(run: RunDir, path: Path, spec: GateSpec, baseline_arm: str | None) -> Baseline:
    """Refuse a baseline of another suite or runtime (exit 3) or channel (exit 1); pair each
    gated arm of ``run`` with ``baseline_arm`` or its same-named arm in the baseline."""
    base = baseline_run(path)
    mine, theirs = run.meta(), base.meta()
    if mine.suite_sha256 != theirs.suite_sha256:
        raise DigestMismatch(
            f"{path}: --baseline ran another suite (suite digest {theirs.suite_sha256[:12]}, "
            f"this run {mine.suite_sha256[:12]}); gate against a run of the same sealed suite"
        )
    ours, other = run.stored_controls().runtime, base.stored_controls().runtime
    if ours.model_dump(mode="json") != other.model_dump(mode="json"):
        fields = sorted(
            key
            for key, value in ours.model_dump(mode="json").items()
            if other.model_dump(mode="json").get(key) != value
        )
        raise ProtocolMismatch(
            f"{path}: --baseline ran under other runtime settings (controls.yaml runtime: "
            f"{', '.join(fields)} differ); only the arms may differ — gate against a run with "
            "the same runtime section"
        )
    if mine.channel != theirs.channel:
        raise UserError(
            f"{path}: --baseline is {theirs.channel} and this run is {mine.channel} (run.json "
            "channel); gate against a run of the same channel"
        )
    gated = spec.arms or [a for a in mine.arms if a != mine.control_arm]
    pairs = {arm: baseline_arm or arm for arm in gated}
    for arm, other_arm in pairs.items():
        if other_arm not in theirs.arms:
            option = "--baseline-arm" if baseline_arm else f"same-named arm of {arm}"
            raise UserError(
                f"{path}: no arm {other_arm!r} ({option}) in the baseline; its arms: "
                f"{', '.join(theirs.arms)}; name one with --baseline-arm"
            )
    return Baseline(path, base, pairs, baseline_arm)


def baseline_scores(run: RunDir, base: Baseline) -> list[Scores]:
    """One ``Scores`` per pair: the baseline arm as control, RUN_B's arm as candidate (its
    own name), paired per task over both runs' tasks; repeats averaged first."""
    metas = base.run.meta(), run.meta()
    records_a = checked_records(base.run, metas[0], base.run.stored_controls())
    records_b = checked_records(run, metas[1], run.stored_controls())
    task_ids = list(dict.fromkeys(task["id"] for meta in metas for task in meta.tasks))
    found = []
    for arm_b, arm_a in base.pairs.items():
        control = control_name(arm_a)
        mine_a = [t for t in records_a if t.arm == arm_a]
        mine_b = [t for t in records_b if t.arm == arm_b]
        ids = list(dict.fromkeys([*task_ids, *(t.task_id for t in mine_a + mine_b)]))
        found.append(
            Scores(
                summaries=[summarise(control, True, mine_a), summarise(arm_b, False, mine_b)],
                deltas=[paired_delta(arm_b, control, mine_b, mine_a, ids)],
                refusal=[paired_delta(arm_b, control, mine_b, mine_a, ids, TaskKind.NEGATIVE)],
            )
        )
    return found


def baseline_costs(base: Baseline) -> list[ArmCost]:
    """The cost row of each baseline arm a pair names, under its name in the decision
    (``control_name``), for the gate's ``cost_ratio_max`` against the baseline."""
    meta, controls = base.run.meta(), base.run.stored_controls()
    records = checked_records(base.run, meta, controls)
    live = {leg.name for leg in controls.legs() if controls.model_route(leg.arm.agent)}
    return [
        arm_cost(control_name(arm_a), arm_a in live, [t for t in records if t.arm == arm_a])
        for arm_a in dict.fromkeys(base.pairs.values())
    ]


def baseline_head(base: Baseline) -> dict[str, Any]:
    """What decision.json records of the baseline."""
    meta = base.run.meta()
    return {
        "path": str(base.path.resolve()),
        "run_id": meta.run_id,
        "protocol_sha256": meta.protocol_sha256,
        "suite_sha256": meta.suite_sha256,
        "ledger_sha256": base.run.ledger_sha256(),
        "baseline_arm": base.arm,
        "arms": dict(base.pairs),
    }
