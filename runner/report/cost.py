"""Dollars: per trial, per pass and per arm, and the run's total, at the prices the controls
pin. Pure.

A trial's ``cost_usd`` is set when its model has a price; a live arm (one a model drives)
whose trials carry none is "not priced", never 0. Arms no model drives (recorded patches,
scripted) cost nothing and are listed as such. The section exists only when the controls
pin prices or some trial carries a cost, so reports of runs without either keep their bytes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from runner.config.controls import Controls
from runner.records import Record

NOT_PRICED = "not priced"


@dataclass(frozen=True)
class ArmCost:
    arm: str
    live: bool  # a model drives it
    trials: int
    priced: int  # trials with a cost
    usd: float  # the priced trials' total
    passes: int
    # Per task: (task id, dollars of its priced trials, passes), for the gate's intervals
    tasks: tuple[tuple[str, float, int], ...] = ()

    @property
    def status(self) -> str:
        if not self.live:
            return "no model"
        if self.priced == 0:
            return NOT_PRICED
        return "priced" if self.priced == self.trials else "partly priced"

    @property
    def per_trial(self) -> float | None:
        return self.usd / self.priced if self.priced else None

    @property
    def per_pass(self) -> float | None:
        return self.usd / self.passes if self.priced and self.passes else None


@dataclass(frozen=True)
class CostTable:
    arms: tuple[ArmCost, ...]
    run_budget_usd: float | None

    @property
    def total_usd(self) -> float:
        return sum(a.usd for a in self.arms)

    @property
    def budget_reached(self) -> bool:
        return self.run_budget_usd is not None and self.total_usd >= self.run_budget_usd


def cost_table(
    controls: Controls, arms: Sequence[str], trials: Sequence[Record]
) -> CostTable | None:
    """The cost of each arm (leg), or None when nothing is priced."""
    if not controls.prices and not any(t.cost_usd is not None for t in trials):
        return None
    live = {leg.name for leg in controls.legs() if controls.model_route(leg.arm.agent)}
    rows = [arm_cost(arm, arm in live, [t for t in trials if t.arm == arm]) for arm in arms]
    budget = controls.budget.run_usd if controls.budget else None
    return CostTable(tuple(rows), budget)


def arm_cost(arm: str, live: bool, trials: Sequence[Record]) -> ArmCost:
    """One arm's cost row from its trials, with each task's dollars and passes."""
    priced = [t.cost_usd for t in trials if t.cost_usd is not None]
    per_task: dict[str, tuple[float, int]] = {}
    for t in trials:
        usd, passes = per_task.get(t.task_id, (0.0, 0))
        per_task[t.task_id] = (usd + (t.cost_usd or 0.0), passes + int(t.passed))
    return ArmCost(
        arm,
        live,
        len(trials),
        len(priced),
        float(sum(priced)),
        sum(1 for t in trials if t.passed),
        tuple((task, usd, passes) for task, (usd, passes) in per_task.items()),
    )


def dollars(value: float | None) -> str:
    return "n/a" if value is None else f"${value:.4f}"


def cost_markdown(table: CostTable | None) -> list[str]:
    if table is None:
        return []
    lines = ["", "## Cost", ""]
    lines += ["| arm | priced trials | total | per trial | per pass |", "|---|---|---|---|---|"]
    for a in table.arms:
        if a.status in ("no model", NOT_PRICED):
            lines.append(f"| {a.arm} | {a.status} | | | |")
            continue
        lines.append(
            f"| {a.arm} | {a.priced}/{a.trials} | {dollars(a.usd)} | {dollars(a.per_trial)} "
            f"| {dollars(a.per_pass)} |"
        )
    lines += ["", f"Run total: {dollars(table.total_usd)}."]
    if table.run_budget_usd is not None:
        reached = " reached: no trial was started after it" if table.budget_reached else ""
        lines[-1] += f" Run budget: {dollars(table.run_budget_usd)}{reached}."
    return lines


def cost_json(table: CostTable) -> dict[str, Any]:
    return {
        "arms": [
            {
                "arm": a.arm,
                "status": a.status,
                "trials": a.trials,
                "priced_trials": a.priced,
                "usd": None if a.status == NOT_PRICED else round(a.usd, 6),
                "usd_per_trial": None if a.per_trial is None else round(a.per_trial, 6),
                "usd_per_pass": None if a.per_pass is None else round(a.per_pass, 6),
            }
            for a in table.arms
        ],
        "total_usd": round(table.total_usd, 6),
        "run_budget_usd": table.run_budget_usd,
        "run_budget_reached": table.budget_reached,
    }
