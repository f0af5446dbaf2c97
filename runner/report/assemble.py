"""Building the report of a run directory from what is on disk: the ledger, run.json and the
controls, read through ``runner.store``. Nothing here writes a file: ``runner.run.report_files``
writes the report and replays it byte for byte."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from runner.bounded_json import BoundsError, loads_bounded
from runner.config.controls import Controls
from runner.config.loader import protocol_hash
from runner.errors import DigestMismatch, NoControlArm, ProtocolMismatch, UserError
from runner.evidence.scoring import Scores, paired_delta, score
from runner.records import Outcome, Record, ScoredTrial
from runner.report.accountings import Accountings, accountings
from runner.report.checklist import Row, evaluate, withhold_headline
from runner.report.compare import RunSide, arm_pairs, compare_arms, labels, render
from runner.report.contents import MetricsPin, Pins, RoutePin, build
from runner.report.cost import cost_table
from runner.report.html import render_html
from runner.report.jsonform import dumps_json, to_json
from runner.report.markdown import render_markdown
from runner.report.scorecard import Head, scorecard_files
from runner.store.rundir import RunDir, RunMeta
from runner.store.setup_warnings import setup_warnings

EDITS_FILE = "edits.json"


@dataclass(frozen=True)
class BuiltReport:
    scores: Scores
    markdown: str
    json_text: str
    rows: tuple[Row, ...] = ()
    html: str = ""
    scorecards: tuple[tuple[str, str], ...] = ()  # (name, text): runner.report.scorecard

    def files(self) -> tuple[tuple[str, str], ...]:
        return (
            ("report.md", self.markdown),
            ("report.json", self.json_text),
            ("report.html", self.html),
            *self.scorecards,
        )

    @property
    def withheld(self) -> bool:
        return withhold_headline(self.rows)


def _edited_from(run_dir: RunDir) -> str | None:
    """The ledger digest first reported, when later edits were accepted."""
    path = run_dir.path / EDITS_FILE
    if not path.is_file():
        return None
    try:  # a run directory is input: held inside it, capped, bounded
        data = loads_bounded(run_dir.kept(EDITS_FILE))
    except BoundsError as exc:
        raise UserError(f"{path}: unreadable ({exc})") from None
    if not isinstance(data, dict) or data.get("ledger_sha256") != run_dir.ledger_sha256():
        raise DigestMismatch(
            f"{run_dir.ledger_path}: edited again after the edits accepted in {path}; "
            "replay with --accept-edits to accept these too"
        )
    return str(data["reported_ledger_sha256"])


def build_report(run_dir: RunDir, *, replay_ok: bool = True) -> BuiltReport:
    """Score the ledger and render the report files and scorecards (no file written)."""
    meta = run_dir.meta()
    controls = run_dir.stored_controls()
    trials, retried = checked_ledger(run_dir, meta, controls)
    task_ids = [t["id"] for t in meta.tasks]
    scores = score(trials, meta.arms, meta.control_arm, task_ids)
    edited_from = _edited_from(run_dir)
    warnings = setup_warnings(controls, trials)
    rows = evaluate(
        controls,
        meta.suite_sha256,
        scores,
        trials,
        negative_tasks=sum(t["kind"] == "negative" for t in meta.tasks),
        edited=edited_from is not None,
        tasks=meta.tasks,
        replay_ok=replay_ok,
        setup=warnings,
        retried=retried,
    )
    by_leg: dict[str, list[Record]] = {}
    for t in trials:
        by_leg.setdefault(t.arm, []).append(t)
    legs = [
        paired_delta(on, off, by_leg.get(on, []), by_leg.get(off, []), task_ids)
        for on, off in controls.baseline_pairs()
    ]
    report = build(
        scores,
        _pins(run_dir, meta, controls),
        trials,
        rows=rows,
        edited_from=edited_from,
        bootstrap=(controls.analysis.bootstrap_resamples, controls.runtime.seed),
        legs=legs,
        tasks=meta.tasks,
        suite_path=controls.suite.file,
        setup_warnings=warnings,
        cost=cost_table(controls, meta.arms, trials),
        accountings=_accountings(meta, trials, retried),
    )
    data = to_json(report)
    head = Head(meta.run_id, meta.suite_sha256, controls.suite.file, report.generated_at)
    cards = scorecard_files(controls, head, trials, task_ids, withhold_headline(rows))
    html = render_html(data, viewer=meta.view_bundle)
    return BuiltReport(scores, render_markdown(report), dumps_json(data), tuple(rows), html, cards)


def _accountings(
    meta: RunMeta, trials: list[ScoredTrial], retried: list[ScoredTrial]
) -> Accountings | None:
    """Both accountings of errors, when the run has an error record (or had one retried);
    a run recorded before the report showed them keeps its bytes, unless retried since."""
    erred = meta.error_accountings and any(t.outcome is Outcome.ERROR for t in trials)
    return accountings(meta.arms, trials, retried) if erred or retried else None


def checked_records(run_dir: RunDir, meta: RunMeta, controls: Controls) -> list[ScoredTrial]:
    """The ledger's records, each of this run and protocol; exit 3 or 4 otherwise."""
    return checked_ledger(run_dir, meta, controls)[0]


def checked_ledger(
    run_dir: RunDir, meta: RunMeta, controls: Controls
) -> tuple[list[ScoredTrial], list[ScoredTrial]]:
    """Each job's record and the error records retries superseded (``RunDir.records``),
    each of this run and protocol; exit 3 or 4 otherwise."""
    if protocol_hash(controls, meta.agent_dir_digests) != meta.protocol_sha256:
        raise ProtocolMismatch(
            f"{run_dir.path}/controls.yaml: does not hash to the run's protocol "
            f"{meta.protocol_sha256}; the stored controls were edited"
        )
    trials, retried = run_dir.scored_ledger()
    for trial in (*trials, *retried):
        if trial.protocol_sha256 != meta.protocol_sha256 or trial.run_id != meta.run_id:
            line = run_dir.line_of.get(trial.job_id, 0)
            raise ProtocolMismatch(
                f"{run_dir.ledger_path}:{line}: record of job {trial.job_id[:12]} belongs to "
                f"protocol {trial.protocol_sha256[:12]} / run {trial.run_id}, not this run's "
                f"{meta.protocol_sha256[:12]} / {meta.run_id}; remove the line or use its own "
                "run directory"
            )
    if not any(t.arm == meta.control_arm for t in trials):
        raise NoControlArm(
            f"{run_dir.path}: no record of the control arm {meta.control_arm!r}; "
            "no number without a control: run the control arm on the same tasks"
        )
    return trials, retried


def compare_runs(path_a: Path, path_b: Path, arm: str | None, arm_b: str | None) -> list[str]:
    """``deltarun compare``: arms of RUN_B against arms of RUN_A, paired per task, as lines.

    The suite, channel and arm checks read ``run.json`` only, before any ledger; each
    run's records are then read as its report reads them (``checked_records``)."""
    runs = RunDir(path_a), RunDir(path_b)
    metas = runs[0].meta(), runs[1].meta()
    side_a, side_b = (
        RunSide(str(run.path), meta.run_id, meta.suite_sha256, meta.channel, tuple(meta.arms))
        for run, meta in zip(runs, metas, strict=True)
    )
    pairs = arm_pairs(side_a, side_b, arm, arm_b)
    records_a, records_b = (
        checked_records(run, meta, run.stored_controls())
        for run, meta in zip(runs, metas, strict=True)
    )
    task_ids = list(dict.fromkeys(task["id"] for meta in metas for task in meta.tasks))
    label_a, label_b = labels(side_a.path, side_b.path)
    comparisons = [
        compare_arms(a, b, records_a, records_b, task_ids, label_a, label_b) for a, b in pairs
    ]
    return render(side_a, side_b, comparisons)


def _pins(run_dir: RunDir, meta: RunMeta, controls: Controls) -> Pins:
    metrics = controls.metrics
    return Pins(
        protocol_id=meta.protocol_id,
        protocol_sha256=meta.protocol_sha256,
        suite_sha256=meta.suite_sha256,
        channel=meta.channel,
        run_id=meta.run_id,
        control_arm=meta.control_arm,
        image_digests=meta.image_digests,
        agent_dir_digests=meta.agent_dir_digests,
        agent_artifacts=meta.agent_artifacts,
        baseline_modes=meta.baseline_modes or {},
        oci_runtime=controls.runtime.oci_runtime,
        ledger_sha256=run_dir.ledger_sha256(),
        deltarun_version=meta.deltarun_version,
        python_version=meta.python_version,
        metrics=None if metrics is None else MetricsPin.model_validate(metrics.model_dump()),
        builtin_metrics_sha256=meta.builtin_metrics_sha256,
        timeout_s=controls.runtime.timeout_s,
        seed=controls.runtime.seed,
        routes=_routes(controls),
        validation_sha256=controls.suite.validation,
        excluded=list(controls.suite.exclude or []),
    )


def _routes(controls: Controls) -> dict[str, RoutePin]:
    """Each model-driven arm's pinned route."""
    routes: dict[str, RoutePin] = {}
    for leg in controls.legs():
        route = controls.model_route(leg.arm.agent)
        if route is not None:
            routes[leg.name] = RoutePin(
                model=route.model, base_url=route.base_url, temperature=route.temperature
            )
    return routes
