"""The report of a run as one typed value, built once; every format renders from it. Pure.

``build`` gathers what the scorer, the checklist and the repeat statistics found
into a ``Report``; ``runner.report.jsonform`` writes it as ``report.json`` (the
DeltaScorecard shape), ``runner.report.markdown`` as ``report.md`` and
``runner.report.html`` as ``report.html`` (from the JSON form, so the page shows
exactly the published numbers). Nothing here reads a clock or a file: the same
records give the same report, which is what ``replay`` relies on.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from runner.evidence.scoring import PairedDelta, Rate, Scores, gc_paused
from runner.evidence.stats import paired_bootstrap_interval
from runner.records import Outcome, Record, TaskKind
from runner.report.accountings import Accountings
from runner.report.checklist import Row, verdict, withhold_headline
from runner.report.cost import CostTable
from runner.report.metric_deltas import MetricDelta, metric_deltas
from runner.report.repeats import repeat_stats

SCHEMA_VERSION = 2
EXPLORATORY_STAMP = "exploratory — not for publication"


class MetricsPin(BaseModel):
    """The pinned metrics module of answer tasks."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    module: str
    sha256: str
    functions: list[str]


class RoutePin(BaseModel):
    """The model an arm's route pins."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: str
    base_url: str
    temperature: float


class Pins(BaseModel):
    """What a stranger needs to replay the numbers: ``pins`` in report.json, verbatim."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    protocol_id: str
    protocol_sha256: str
    suite_sha256: str
    channel: Literal["scored", "exploratory"]
    run_id: str
    control_arm: str
    image_digests: dict[str, str]
    agent_dir_digests: dict[str, str]
    ledger_sha256: str
    deltarun_version: str
    python_version: str
    metrics: MetricsPin | None = None
    builtin_metrics_sha256: str = ""  # runner/grading/metrics.py as run ("" in runs made before)
    timeout_s: float | None = None  # runtime.timeout_s (tasks may set their own)
    seed: int | None = None  # runtime.seed
    routes: dict[str, RoutePin] = {}  # arm → the model its route pins
    validation_sha256: str | None = None  # suite.validation: the pinned validation.json
    excluded: list[str] = []  # suite.exclude: tasks left out of the run
    # installed arm → {"agent": "<name>@<version>", "artifacts_sha256": ...}
    agent_artifacts: dict[str, dict[str, str]] = {}
    # arm with toggles → skill-on | skill-off | both, as run.json records it (runs from before
    # --baseline-mode have none, so their reports keep their bytes)
    baseline_modes: dict[str, str] = {}
    oci_runtime: str | None = None  # runtime.oci_runtime when set (runsc: gVisor)


def rounded(value: float | None, digits: int = 6) -> float | None:
    """A number as the report publishes it."""
    return None if value is None else round(value, digits)


def rate_json(rate: Rate) -> dict[str, Any]:
    """A rate as the report publishes it: k, n, value and Wilson interval."""
    interval = rate.wilson95
    return {
        "k": rate.k,
        "n": rate.n,
        "value": rounded(rate.value),
        "wilson95": None if interval is None else [rounded(interval[0]), rounded(interval[1])],
    }


@dataclass(frozen=True)
class Report:
    """Everything every format of the report shows, computed once."""

    scores: Scores
    pins: Pins
    edited_from: str | None  # the ledger digest first reported, when edits were accepted
    rows: tuple[Row, ...]
    repeats: Mapping[str, dict[str, Any] | None]
    legs: tuple[PairedDelta, ...]
    # The seeded paired bootstrap interval of each delta and leg, as published (rounded).
    bootstrap: Mapping[tuple[str, str], tuple[float | None, float | None] | None]
    covariates: dict[str, Any]
    per_task: dict[str, dict[str, list[str]]]
    grading: dict[str, str]
    metric_deltas: tuple[MetricDelta, ...] = ()
    suite_path: str = ""  # suite.file as the controls name it
    generated_at: str = ""  # the run's recorded end: the last record's finished_at
    setup_warnings: tuple[str, ...] = ()  # runner.store.setup_warnings
    cost: CostTable | None = None  # runner.report.cost: None when nothing is priced
    # runner.report.accountings: None in a run recorded before the report showed it
    accountings: Accountings | None = None

    @property
    def stamp(self) -> str | None:
        return EXPLORATORY_STAMP if self.pins.channel != "scored" else None

    @property
    def verdict(self) -> str | None:
        return verdict(self.rows) if self.rows else None

    @property
    def withheld(self) -> bool:
        return withhold_headline(self.rows) if self.rows else False


@gc_paused()
def build(
    scores: Scores,
    pins: Pins,
    trials: Sequence[Record],
    *,
    rows: Sequence[Row] = (),
    edited_from: str | None = None,
    bootstrap: tuple[int, int] = (0, 0),
    legs: Sequence[PairedDelta] = (),
    tasks: Sequence[Mapping[str, str]] = (),
    suite_path: str = "",
    setup_warnings: Sequence[str] = (),
    cost: CostTable | None = None,
    accountings: Accountings | None = None,
) -> Report:
    """The report of ``trials`` as scored; ``bootstrap`` is (resamples, seed)."""
    by_arm: dict[str, list[Record]] = {}
    for t in trials:
        by_arm.setdefault(t.arm, []).append(t)
    per_task: dict[str, dict[str, list[str]]] = {}
    for t in sorted(trials, key=attrgetter("task_id", "arm", "repeat")):
        per_task.setdefault(t.task_id, {}).setdefault(t.arm, []).append(t.outcome._value_)
    return Report(
        scores=scores,
        pins=pins,
        edited_from=edited_from,
        rows=tuple(rows),
        repeats={s.arm: repeat_stats(by_arm.get(s.arm, [])) for s in scores.summaries},
        legs=tuple(legs),
        bootstrap={(d.arm, d.control): _bootstrap(d, *bootstrap) for d in (*scores.deltas, *legs)},
        covariates=covariates(trials, tasks),
        per_task=per_task,
        # How each task's verdict is decided (pytest: declared tests; exit_status: a command's
        # exit status alone; metrics: an answer task; none: a negative control).
        grading={t["id"]: t.get("grading", "exit_status") for t in tasks},
        metric_deltas=tuple(
            metric_deltas(trials, [d.arm for d in scores.deltas], pins.control_arm)
        ),
        suite_path=suite_path,
        generated_at=max((t.finished_at for t in trials), default=""),
        setup_warnings=tuple(setup_warnings),
        cost=cost,
        accountings=accountings,
    )


def _bootstrap(
    d: PairedDelta, resamples: int, seed: int
) -> tuple[float | None, float | None] | None:
    diffs = [c.delta for c in d.cases if c.delta is not None]
    if resamples <= 0 or len(set(diffs)) < 2:
        # Differences without spread resample to one value: a zero-width "interval" that
        # claims certainty. The score interval (ci95) is the one to read then.
        return None
    rng = random.Random(f"{seed}:{d.arm}:{d.control}")  # a string seed is stable across runs
    low, high = paired_bootstrap_interval(diffs, rng, resamples=resamples)
    return rounded(low), rounded(high)


def covariates(trials: Sequence[Record], tasks: Sequence[Mapping[str, str]]) -> dict[str, Any]:
    """Pass rate per arm within each size bucket of ordinary tasks, with Wilson intervals."""
    bucket = {t["id"]: t.get("size_bucket") or "unset" for t in tasks}
    counts: dict[str, dict[str, list[int]]] = {}
    for t in trials:
        if t.task_kind is not TaskKind.ORDINARY or t.outcome is Outcome.ERROR:
            continue
        cell = counts.setdefault(bucket.get(t.task_id, "unset"), {}).setdefault(t.arm, [0, 0])
        cell[0] += int(t.passed)
        cell[1] += 1
    return {
        "size_bucket": {
            b: {arm: rate_json(Rate(k, n)) for arm, (k, n) in sorted(arms.items())}
            for b, arms in sorted(counts.items())
        }
    }


def metric_source(name: str, pins: Pins) -> tuple[str, str]:
    """The module and SHA-256 a metric's code came from: the pinned user module, or
    deltarun's built-ins (``runner/grading/metrics.py``, digest recorded when the run began)."""
    if pins.metrics is not None and name in pins.metrics.functions:
        return pins.metrics.module, pins.metrics.sha256
    return "runner/metrics.py (built-in)", pins.builtin_metrics_sha256
