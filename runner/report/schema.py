"""The shape of ``report.json`` as models, for ``deltarun schema report`` and validation.

``runner.report.jsonform`` writes the report model as plain data (fast,
deterministic); these models describe that data, with ``Pins`` shared with the
report model itself. ``runner/schemas/report.schema.json`` is generated from them
and shipped; a test keeps the two in step and validates real reports against it.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from runner.report.contents import Pins

Status = Literal["pass", "fail", "error", "skipped", "inconclusive"]


class _M(BaseModel):
    model_config = ConfigDict(extra="forbid")


class RateJSON(_M):
    k: int
    n: int
    value: float | None
    wilson95: tuple[float, float] | None


class RefusalJSON(_M):
    abstention_accuracy: RateJSON
    invalid_completion_rate: RateJSON
    false_abstention_rate: RateJSON


class ArmJSON(_M):
    arm: str
    control: bool
    trials: int
    n: int
    passes: int
    pass_rate: RateJSON
    timeout_rate: RateJSON
    tool_violation_rate: RateJSON
    error_rate: RateJSON
    tokens_per_pass: float | None = Field(
        description="Tokens per pass; null without a pass or when not metered."
    )
    tokens_metered: bool = Field(
        default=True, description="Whether any trial of the arm reported token usage."
    )
    wall_s_per_task: float | None
    retries_mean: float | None
    tool_calls_mean: float | None
    refusal: RefusalJSON
    outcomes: dict[str, int]
    stop_reasons: dict[str, int]


class AggregateDeltaJSON(_M):
    n_tasks: int
    mean: float | None
    sd: float | None
    ci95: tuple[float, float] | None
    ci_method: Literal["newcombe-paired", "t"] | None
    mde: float | None
    bootstrap95: tuple[float, float] | None
    mcnemar_p: float | None
    helped: int
    hurt: int
    same: int
    inconclusive: int


class RefusalDeltaJSON(_M):
    """Abstention accuracy on the negative tasks, candidate minus control, paired."""

    n_tasks: int
    mean: float | None
    ci95: tuple[float, float] | None
    ci_method: Literal["newcombe-paired", "t"] | None
    helped: int
    hurt: int
    same: int
    inconclusive: int


class CaseJSON(_M):
    case_id: str
    control_status: Status
    candidate_status: Status
    control_score: float | None
    candidate_score: float | None
    delta: float | None


class ScorecardJSON(_M):
    """The DeltaScorecard of one candidate against the control."""

    schema_version: int
    suite_id: str
    control_arm: str
    candidate_arm: str
    control_run_id: str
    candidate_run_id: str
    suite_path: str
    generated_at: str
    control_aggregate: float | None
    candidate_aggregate: float | None
    aggregate_delta_value: float | None
    control_detail: ArmJSON
    candidate_detail: ArmJSON
    aggregate_delta: AggregateDeltaJSON
    per_case: list[CaseJSON]
    refusal_delta: RefusalDeltaJSON | None


class EditedJSON(_M):
    reported_ledger_sha256: str
    ledger_sha256: str


class ChecklistRowJSON(_M):
    item: str
    ok: bool
    detail: str


class MetricDeltaJSON(_M):
    """One answer-task metric: control and candidate rates, paired per task."""

    candidate_arm: str
    control_arm: str
    metric: str
    module: str
    sha256: str
    n_tasks: int
    control: float | None
    candidate: float | None
    delta: float | None
    sd: float | None


class RepeatsJSON(_M):
    tasks: int
    repeats_max: int
    clustered_se: float | None
    pass_at_k: dict[str, float]
    pass_hat_k: dict[str, float]


class ArmCostJSON(_M):
    arm: str
    status: Literal["priced", "partly priced", "not priced", "no model"]
    trials: int
    priced_trials: int
    usd: float | None  # null: not priced
    usd_per_trial: float | None
    usd_per_pass: float | None


class RunBudgetEndingJSON(_M):
    """How the run's budget (``budget.run_usd``) ended the run."""

    cut: dict[str, int] = Field(
        description="Per arm, the trials it cut short (stop reason run_budget_exhausted)."
    )
    paired_tasks: int = Field(description="Tasks with a record from every arm: the pairs.")
    unpaired_tasks: int = Field(description="Tasks with records from some arms only.")
    text: str = Field(description="The report's sentence about it.")


class CostJSON(_M):
    """Dollars at the controls' pinned prices (present only when something is priced)."""

    arms: list[ArmCostJSON]
    total_usd: float
    run_budget_usd: float | None
    run_budget_reached: bool
    run_budget_ending: RunBudgetEndingJSON | None = Field(
        default=None, description="Present when the run's budget ended the run."
    )


class ArmAccountingJSON(_M):
    arm: str
    errors: int = Field(description="The arm's ordinary records that are infrastructure errors.")
    errors_excluded: RateJSON = Field(description="Passes over the records without an error.")
    errors_as_failures: RateJSON = Field(description="Passes over every record: errors fail.")
    retried: int = Field(description="The arm's error records `run --retry-errors` superseded.")


class AccountingsJSON(_M):
    """Infrastructure errors accounted two ways, side by side, and the retries."""

    arms: list[ArmAccountingJSON]
    retried: int = Field(description="Error records run again (kept in the ledger for audit).")
    retried_now: dict[str, int] = Field(
        description="Outcome → retried jobs whose newest record has that outcome."
    )


class PublishInsteadJSON(_M):
    row: str
    publish: str


class ReportJSON(_M):
    """report.json."""

    schema_version: int
    stamp: str | None
    edited: EditedJSON | None
    verdict: Literal["publishable", "demo"] | None
    headline_withheld: bool
    checklist: list[ChecklistRowJSON]
    setup_warnings: list[str] = Field(
        default_factory=list,
        description="Records that look like a broken task or arm, not agent behaviour.",
    )
    pins: Pins
    arms: list[ArmJSON]
    repeats: dict[str, RepeatsJSON | None]
    deltas: list[ScorecardJSON]
    baseline_legs: list[ScorecardJSON]
    covariates: dict[str, dict[str, dict[str, RateJSON]]]
    per_task: dict[str, dict[str, list[str]]]
    grading: dict[str, Literal["pytest", "exit_status", "metrics", "none"]]
    metric_deltas: list[MetricDeltaJSON]
    cost: CostJSON | None = None
    accountings: AccountingsJSON | None = Field(
        default=None,
        description="Pass rates with errors excluded and as failures, and the retries: present "
        "when the run has an infrastructure error record or retried one.",
    )
    publish_instead: list[PublishInsteadJSON] = Field(
        default_factory=list,
        description="Each failing integrity row and what may be published instead of the "
        "number (seed 004's decision table).",
    )
    withheld_for_author: dict[str, Any] | None = Field(
        default=None,
        description="When the headline is withheld: the comparison's numbers (arms, repeats, "
        "deltas, baseline_legs, covariates, metric_deltas, cost), for the author, not for "
        "publication; the publishable keys are then empty.",
    )
