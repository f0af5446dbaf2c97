"""The gate's criteria as strict models: what ``gate:`` in ``controls.yaml`` may say. Pure.

A criterion is written before the numbers exist: the section is part of the protocol hash
(``runner.config.loader.protocol_hash``), and a scored run takes its criteria from here
only. ``runner.report.gate_decision`` decides them; ``docs/ci.md`` explains each.
"""

from __future__ import annotations

from typing import Literal

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


class SequentialSpec(Strict):
    """How ``deltarun run --until-decided`` looks at the delta criteria (docs/ci.md): the
    tasks in a seeded order fixed by the protocol, in blocks, a look after each block with
    a group-sequential boundary (``runner.evidence.sequential``). Give ``block`` or ``looks``."""

    spending: Literal["obrien_fleming", "pocock"] = Field(
        description="Alpha-spending function (Lan-DeMets): obrien_fleming spends little at "
        "early looks, pocock evenly."
    )
    alpha: float = Field(
        default=0.025,
        gt=0,
        lt=0.5,
        strict=True,
        description="One-sided level of each bound over all looks (0.025: a 95% interval's "
        "lower or upper bound).",
    )
    block: int | None = Field(
        default=None, ge=1, strict=True, description="Tasks per look (every arm, every repeat)."
    )
    looks: int | None = Field(
        default=None,
        ge=1,
        strict=True,
        description="Planned looks: the suite in this many equal blocks (instead of block).",
    )

    @model_validator(mode="after")
    def _one_size(self) -> SequentialSpec:
        if (self.block is None) == (self.looks is None):
            raise ValueError("gate.sequential: give exactly one of block (tasks per look) or looks")
        return self

    def block_size(self, tasks: int) -> int:
        """Tasks per block for a suite of ``tasks`` (at least 1)."""
        if self.block is not None:
            return self.block
        assert self.looks is not None
        return max(1, -(-tasks // self.looks))


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
    sequential: SequentialSpec | None = Field(
        default=None,
        description="Group-sequential looks for `deltarun run --until-decided`: the run "
        "stops once every delta criterion is decided (docs/ci.md). Hashed only when present.",
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

    def delta_targets(self) -> list[tuple[str, float, bool]]:
        """The delta criteria given, as (name, threshold, on the refusal slice): the
        threshold is ``margin`` for superiority, ``-margin`` for non-inferiority."""
        found = []
        for name, margin, sign, refusal in (
            ("superiority", self.superiority, 1.0, False),
            ("non_inferiority", self.non_inferiority, -1.0, False),
            ("refusal_superiority", self.refusal_superiority, 1.0, True),
            ("refusal_non_inferiority", self.refusal_non_inferiority, -1.0, True),
        ):
            if margin is not None:
                found.append((name, sign * margin + 0.0, refusal))
        return found

    def required_rows(self) -> tuple[str, ...]:
        return DEFAULT_REQUIRED_ROWS if self.require is None else tuple(self.require)
