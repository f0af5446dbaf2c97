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
RUN_CUT = "run_budget_exhausted"  # a trial's stop reason: the run's budget refused it mid-way


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
    # Trials the run's budget cut short, per arm (the gateways refused them mid-way:
    # ``stop_reason`` run_budget_exhausted), and the tasks with a record from every arm
    # (the pairs a comparison rests on) beside those with records from some arms only.
    cut: tuple[tuple[str, int], ...] = ()
    paired_tasks: int = 0
    unpaired_tasks: int = 0

    @property
    def total_usd(self) -> float:
        return sum(a.usd for a in self.arms)

    @property
    def budget_reached(self) -> bool:
        spent = self.run_budget_usd is not None and self.total_usd >= self.run_budget_usd
        return spent or any(n for _, n in self.cut)


def cost_table(
    controls: Controls, arms: Sequence[str], trials: Sequence[Record]
) -> CostTable | None:
    """The cost of each arm (leg), or None when nothing is priced."""
    if not controls.prices and not any(t.cost_usd is not None for t in trials):
        return None
    live = {leg.name for leg in controls.legs() if controls.model_route(leg.arm.agent)}
    rows = [arm_cost(arm, arm in live, [t for t in trials if t.arm == arm]) for arm in arms]
    budget = controls.budget.run_usd if controls.budget else None
    if budget is None:
        return CostTable(tuple(rows), budget)
    cut = tuple(
        (arm, sum(t.arm == arm and t.stop_reason == RUN_CUT for t in trials)) for arm in arms
    )
    seen: dict[str, set[str]] = {}
    for t in trials:
        seen.setdefault(t.task_id, set()).add(t.arm)
    paired = sum(1 for found in seen.values() if found >= set(arms))
    return CostTable(tuple(rows), budget, cut, paired, len(seen) - paired)


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
        if table.budget_reached:
            lines += ["", budget_ending(table)]
    return lines


def budget_ending(table: CostTable) -> str:
    """How the run's budget ended the run: what each arm spent, the trials it cut short, and
    the tasks the arms still share (the budget line of the report)."""
    spent = ", ".join(f"{a.arm} {dollars(a.usd)}" for a in table.arms)
    cut = ", ".join(f"{arm} {n}" for arm, n in table.cut)
    text = (
        f"The run's budget ended the run: every model gateway, on every machine, refused the "
        f"requests made after it was spent. Spent per arm: {spent}. Trials it cut short (each "
        f"the agent's miss, stop reason `{RUN_CUT}`): {cut or 'none'}. "
        f"The arms share {table.paired_tasks} task(s) with a record from each: the paired "
        "comparison rests on those"
    )
    if table.unpaired_tasks:
        text += f"; {table.unpaired_tasks} task(s) with records from some arms only are not paired"
    return text + "."


def cost_json(table: CostTable) -> dict[str, Any]:
    data = _cost_json(table)
    if table.run_budget_usd is not None and table.budget_reached:
        data["run_budget_ending"] = {
            "cut": dict(table.cut),
            "paired_tasks": table.paired_tasks,
            "unpaired_tasks": table.unpaired_tasks,
            "text": budget_ending(table),
        }
    return data


def _cost_json(table: CostTable) -> dict[str, Any]:
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
