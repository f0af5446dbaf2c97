"""``deltarun gate``'s workflow: choose the criteria, decide on the replayed report, write
``decision.json`` into the run directory and the CI files asked for; and the replay of
``decision.json`` byte for byte. The decision itself is ``runner.report.gate_decision`` (pure), its
forms ``runner.report.gate_formats``.

The report is replayed first (``runner.run.report_files.replay``): a gate decides only on
a run whose stored report its ledger still reproduces (exit 3 otherwise). A run of
``run --until-decided`` has ``looks.json``: it is rebuilt from the ledger too
(``runner.run.looks_file``), and the delta criteria are decided at its last look.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from runner.bounded_json import JsonBounds, loads_bounded
from runner.config.controls import Controls
from runner.config.gate_spec import GateSpec
from runner.errors import DeltarunError, DigestMismatch, UsageError
from runner.report.assemble import BuiltReport
from runner.report.cost import CostTable, cost_table
from runner.report.gate_decision import (
    PRECONDITION,
    ArmTasks,
    Criterion,
    GateDecision,
    Stop,
    decide,
)
from runner.report.gate_formats import decision_json, junit_xml, lines, summary_markdown
from runner.run.gate_baseline import (
    Baseline,
    baseline_costs,
    baseline_head,
    baseline_scores,
    check_baseline,
)
from runner.run.looks_file import checked_looks, last_look_for, targets_of
from runner.run.report_files import replay
from runner.store.rundir import RunDir

DECISION_FILE = "decision.json"
FROM_CONTROLS, FROM_COMMAND_LINE = "controls", "command line"


@dataclass(frozen=True)
class GateOutcome:
    lines: list[str]
    exit_code: int
    decision: GateDecision


def criteria_for(controls: Controls, given: GateSpec | None, where: str) -> tuple[GateSpec, str]:
    """The criteria to decide and where they come from: the command line's only in the
    exploratory channel, else the controls' ``gate:`` section."""
    if given is not None:
        if controls.channel == "scored":
            raise UsageError(
                f"{where}: channel scored takes its criteria from the controls' gate: section "
                "(hashed before the run); drop the command-line criteria"
            )
        candidates = [leg.name for leg in controls.legs() if leg.name != controls.control_arm]
        unknown = [arm for arm in given.arms or [] if arm not in candidates]
        if unknown:
            raise UsageError(
                f"--arm {unknown[0]}: not a candidate arm of this run; choose from "
                f"{', '.join(candidates) or '(none)'}"
            )
        return given, FROM_COMMAND_LINE
    if controls.gate is None:
        raise UsageError(
            f"{where}: no gate: section in the controls; add one before the run, or (channel "
            "exploratory) give criteria such as --non-inferiority 0.05"
        )
    return controls.gate, FROM_CONTROLS


def _decide(
    run: RunDir, built: BuiltReport, spec: GateSpec, source: str, base: Baseline | None = None
) -> tuple[GateDecision, str]:
    meta = run.meta()
    controls = run.stored_controls()
    cost = cost_table(controls, meta.arms, run.scored_trials())
    if base is None:
        decision = decide(spec, built.scores, built.rows, built.withheld, cost, _stop(run, spec))
    else:
        decision = _against(run, built, spec, cost, base)
    head: dict[str, Any] = {
        "run_id": meta.run_id,
        "protocol_sha256": meta.protocol_sha256,
        "ledger_sha256": run.ledger_sha256(),
        "channel": meta.channel,
        "source": source,
        "spec": spec.model_dump(mode="json", exclude_none=True),
    }
    if base is not None:
        head["baseline"] = baseline_head(base)
    return decision, decision_json(decision, head)


def _against(
    run: RunDir, built: BuiltReport, spec: GateSpec, cost: CostTable | None, base: Baseline
) -> GateDecision:
    """Each gated arm against its baseline arm (one ``Scores`` per pair); RUN_B's own
    checklist gives the preconditions, once."""
    criteria: list[Criterion] = []
    tasks: list[ArmTasks] = []
    if cost is not None:  # the baseline arms' dollars beside RUN_B's, for cost_ratio_max
        cost = CostTable((*cost.arms, *baseline_costs(base)), cost.run_budget_usd)
    for index, scores in enumerate(baseline_scores(run, base)):
        arm = scores.summaries[1].arm
        one = decide(spec.model_copy(update={"arms": [arm]}), scores, built.rows,
                     built.withheld, cost)  # fmt: skip
        criteria += [c for c in one.criteria if index == 0 or c.name != PRECONDITION]
        tasks += one.tasks
    return GateDecision(tuple(criteria), tuple(tasks))


def _stop(run: RunDir, spec: GateSpec) -> Stop | None:
    """Where the sequential run stopped, its last look deciding ``spec``'s delta criteria;
    None for a run without ``looks.json`` or without a look."""
    found = checked_looks(run)
    if found is None or not found.looks:
        return None
    look = last_look_for(found, targets_of(spec, run.meta()))
    if look is None:
        return None
    return Stop(
        look,
        len(found.blocks),
        found.stopped_early,
        found.total,
        found.trials(look.tasks_done),
        found.trials(found.total),
        found.spec.spending,
        found.complete,
    )


def gate_run(
    path: Path,
    given: GateSpec | None,
    junit: Path | None = None,
    summary: Path | None = None,
    step_summary: Path | None = None,
    baseline: Path | None = None,
    baseline_arm: str | None = None,
) -> GateOutcome:
    """Decide the run's gate; write decision.json, and the JUnit and summary files asked for
    (the summary appended to ``step_summary``, GitHub's ``$GITHUB_STEP_SUMMARY``). With
    ``baseline`` (a run directory or export kit), the gated arms are decided against its arms
    (``runner.run.gate_baseline``), checked before anything is written."""
    run = RunDir(path)
    controls = run.stored_controls()
    spec, source = criteria_for(controls, given, str(path / "controls.yaml"))
    base = None if baseline is None else check_baseline(run, baseline, spec, baseline_arm)
    built = replay(run)
    decision, text = _decide(run, built, spec, source, base)
    written = [run.write_file(DECISION_FILE, text)]
    meta = run.meta()
    if junit is not None:
        junit.write_text(junit_xml(decision, meta.run_id), encoding="utf-8")
        written.append(junit)
    markdown = summary_markdown(decision, meta.run_id, meta.protocol_sha256, source)
    if summary is not None:
        summary.write_text(markdown, encoding="utf-8")
        written.append(summary)
    if step_summary is not None:
        with step_summary.open("a", encoding="utf-8") as out:
            out.write(markdown)
        written.append(step_summary)
    against = [] if base is None else [_against_line(base)]
    shown = [*against, *lines(decision), *(f"wrote {p}" for p in written)]
    return GateOutcome(shown, decision.exit_code, decision)


def _against_line(base: Baseline) -> str:
    meta = base.run.meta()
    pairs = ", ".join(f"{b} vs {a}" for b, a in base.pairs.items())
    return f"baseline: run {meta.run_id} at {base.path} ({pairs}), paired per task"


def replay_decision(run: RunDir, built: BuiltReport, rewrite: bool = False) -> list[str]:
    """Rebuild ``decision.json`` from the criteria it names and require the same bytes
    (exit 3 otherwise); nothing when the run has none. ``rewrite``: write it anew
    (``replay --accept-edits``)."""
    path = run.path / DECISION_FILE
    if not path.is_file():
        return []
    stored = run.kept(DECISION_FILE).decode("utf-8", "replace")  # held inside, capped
    spec, source = _stored_criteria(run, path, stored)
    base, unchecked = _stored_baseline(run, path, stored, spec)
    if unchecked:
        return [unchecked]
    _, text = _decide(run, built, spec, source, base)
    if rewrite:
        run.write_file(DECISION_FILE, text)
        return [f"{path}: rebuilt"]
    if text != stored:
        raise DigestMismatch(
            f"{path}: the replayed decision differs from the stored one; decision.json or the "
            "run directory was changed after the gate (run `deltarun gate` again)"
        )
    return [f"{path}: identical"]


def _stored_baseline(
    run: RunDir, path: Path, stored: str, spec: GateSpec
) -> tuple[Baseline | None, str]:
    """The baseline a decision.json names, re-checked; or a line saying why the decision is
    left unchecked: the recorded baseline path no longer resolves to the same run and ledger."""
    try:
        named = loads_bounded(stored.encode(), DECISION_BOUNDS).get("baseline")
    except (ValueError, AttributeError):
        return None, ""
    if not isinstance(named, dict):
        return None, ""
    where = Path(str(named.get("path", "")))
    arm = named.get("baseline_arm")
    try:
        base = check_baseline(run, where, spec, arm if isinstance(arm, str) else None)
        same = (base.run.meta().run_id, base.run.ledger_sha256()) == (
            named.get("run_id"),
            named.get("ledger_sha256"),
        )
    except (DeltarunError, OSError, ValueError):
        same = False
    if not same:
        return None, (
            f"{path}: baseline {named.get('run_id')} not found unchanged at {where}; the "
            "decision against it is left unchecked (give the baseline back at that path)"
        )
    return base, ""


DECISION_BOUNDS = JsonBounds(max_bytes=64 << 20, max_depth=64)  # decision.json read back


def _stored_criteria(run: RunDir, path: Path, stored: str) -> tuple[GateSpec, str]:
    changed = DigestMismatch(
        f"{path}: does not name criteria this run can have been gated on; it was changed "
        "after the gate (run `deltarun gate` again)"
    )
    try:
        data = loads_bounded(stored.encode(), DECISION_BOUNDS)  # a run directory is input
        source = data["source"]
        if source == FROM_CONTROLS:
            spec = run.stored_controls().gate
            if spec is None:
                raise changed
            return spec, source
        if source == FROM_COMMAND_LINE:
            return GateSpec.model_validate(data["spec"]), source
    except (ValueError, KeyError, TypeError, ValidationError) as exc:
        raise changed from exc
    raise changed
