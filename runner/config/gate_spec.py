"""The gate's criteria as strict models: what ``gate:`` in ``controls.yaml`` may say. Pure.

A criterion is written before the numbers exist: the section is part of the protocol hash
(``runner.config.loader.protocol_hash``), and a scored run takes its criteria from here
only. ``runner.report.gate_decision`` decides them; ``docs/ci.md`` explains each.
"""

from __future__ import annotations

from pydantic import Field, model_validator

from runner.records import Strict

# The checklist rows a gate requires to hold unless ``require`` says otherwise: each one,
# failing, makes the paired delta itself unreliable (not merely unpublishable). A run whose
# headline is withheld (two or more integrity rows failing) never passes either way.
DEFAULT_REQUIRED_ROWS = (
    "retries zero in the headline run",
    "n and 95% intervals present",
    "control arm present and run under the same limits",
    "equal budgets",
    "route lock held",
    "run complete",
    "errors do not follow the arm",
    "replay reproduces the report",
)

CRITERIA = (
    "superiority",
    "non_inferiority",
    "refusal_superiority",
    "refusal_non_inferiority",
    "cost_per_pass_max",
    "cost_ratio_max",
    "error_rate_max",
)


def _margin(description: str) -> float | None:
    return Field(default=None, ge=0, le=1, strict=True, description=description)


class GateSpec(Strict):
    """Criteria each gated arm must meet against the control; at least one is required."""

    arms: list[str] | None = Field(
        default=None,
        min_length=1,
        description="Candidate arms (legs) the gate decides; default: every arm but the control.",
    )
    superiority: float | None = _margin(
        "Margin: pass when the paired delta's 95% lower bound is above it (0 for plain "
        "superiority), fail when the upper bound is below it."
    )
    non_inferiority: float | None = _margin(
        "Margin M: pass when the paired delta's 95% lower bound is above -M, fail when the "
        "upper bound is below -M (the arm is worse by more than M)."
    )
    refusal_superiority: float | None = _margin(
        "Superiority margin on the refusal slice (abstention accuracy on negative tasks)."
    )
    refusal_non_inferiority: float | None = _margin(
        "Non-inferiority margin on the refusal slice (abstention accuracy on negative tasks)."
    )
    cost_per_pass_max: float | None = Field(
        default=None,
        gt=0,
        strict=True,
        description="US dollars per pass at most (the arm's priced total over its passes).",
    )
    cost_ratio_max: float | None = Field(
        default=None,
        gt=0,
        strict=True,
        description="The arm's cost per pass at most this many times the control's.",
    )
    error_rate_max: float | None = Field(
        default=None,
        ge=0,
        le=1,
        strict=True,
        description="Infrastructure error rate (errors over trials) at most this, for each "
        "gated arm and the control.",
    )
    require: list[str] | None = Field(
        default=None,
        description="Checklist rows that must hold (their item text); default: the rows of "
        "DEFAULT_REQUIRED_ROWS (docs/ci.md). A withheld headline fails the gate regardless.",
    )

    @model_validator(mode="after")
    def _some_criterion(self) -> GateSpec:
        if all(getattr(self, name) is None for name in CRITERIA):
            raise ValueError(f"gate: name at least one criterion ({', '.join(CRITERIA)})")
        return self

    def required_rows(self) -> tuple[str, ...]:
        return DEFAULT_REQUIRED_ROWS if self.require is None else tuple(self.require)
