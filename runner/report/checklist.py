"""The publishability checklist: what a sceptical reviewer asks of a number. Pure.

Each row is evaluated from the run's own records and locked controls. All rows
hold: ``publishable``. Otherwise ``demo``, with the failing rows named; two or
more failing rows withhold the headline number from the summary line.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from runner.config.model import Controls
from runner.models import Outcome, Record
from runner.scoring import Scores
from runner.stats import sign_test_greater

WITHHOLD_AT = 2
# An arm errs "clearly more" than its control when the one-sided exact sign test on the
# (task, repeat) pairs where exactly one of them errored says so at this level.
ERRORS_ALPHA = 0.05


@dataclass(frozen=True)
class Row:
    item: str
    ok: bool
    detail: str


def evaluate(
    controls: Controls,
    suite_sha256: str,
    scores: Scores,
    trials: Sequence[Record],
    negative_tasks: int,
    edited: bool,
    tasks: Sequence[Mapping[str, str]] = (),
) -> list[Row]:
    """Every row of the checklist, in a fixed order.

    Longer than the house's ~60 lines on purpose: one ``Row`` per item, side by side in
    the order the report prints them, so a reader checks each against its rule at once;
    the rows that need more than an expression have their own function below."""
    pinned = controls.suite.sha256
    retries = sum(t.retries_used for t in trials)
    arms = scores.summaries
    no_n = [s.arm for s in arms if s.n == 0]
    no_ci = [d.arm for d in scores.deltas if d.ci95 is None]
    no_cost = [
        s.arm for s in arms if s.wall_s_per_task is None or (s.passes and s.tokens_per_pass is None)
    ]
    no_refusal = [s.arm for s in arms if s.abstention_accuracy.n == 0]
    control = next((s for s in arms if s.control), None)
    return [
        Row(
            "suite digest matches",
            bool(pinned) and pinned == suite_sha256,
            f"controls pin {pinned[:12] or 'nothing'}, the run verified {suite_sha256[:12]}",
        ),
        Row(
            "pass is defined by a hidden test the agent could not read",
            True,
            "hidden tests run only in a second, fresh sandbox; answer oracles never enter one",
        ),
        _grading_row(tasks),
        Row(
            "retries zero in the headline run",
            controls.runtime.max_retries == 0 and retries == 0,
            f"max_retries {controls.runtime.max_retries}, retries used {retries}",
        ),
        Row(
            "n and 95% intervals present",
            not no_n and not no_ci and bool(scores.deltas),
            "every arm has n > 0 and every delta an interval"
            if not no_n and not no_ci
            else f"missing for {', '.join(no_n + no_ci) or 'every arm (no candidate)'}",
        ),
        Row(
            "tokens per pass and wall time present",
            not no_cost,
            "present for every arm" if not no_cost else f"missing for {', '.join(no_cost)}",
        ),
        Row(
            "refusal slice present",
            negative_tasks > 0 and not no_refusal,
            f"{negative_tasks} negative-control task(s)"
            if negative_tasks
            else "the suite has no negative-control task",
        ),
        Row(
            "control arm present and run under the same limits",
            control is not None and control.trials > 0,
            "one controls file locks the limits of every arm"
            if control is not None
            else "no control",
        ),
        _errors_row(trials, scores),
        Row("channel scored", controls.channel == "scored", f"channel {controls.channel}"),
        Row(
            "replay reproduces the report",
            not edited,
            "ledger and controls pinned; confirm with `deltarun replay`"
            if not edited
            else "the ledger was edited after the run (accepted with --accept-edits)",
        ),
    ]


def _grading_row(tasks: Sequence[Mapping[str, str]]) -> Row:
    """Every ordinary repository task is graded on declared tests, not an exit status."""
    item = "every repository task is graded by declared tests"
    alone = [
        t["id"]
        for t in tasks
        if t.get("kind") == "ordinary" and t.get("grading", "exit_status") == "exit_status"
    ]
    if not alone:
        return Row(item, True, "a pass needs each declared test to run and pass")
    named = ", ".join(alone[:3]) + (f" and {len(alone) - 3} more" if len(alone) > 3 else "")
    return Row(
        item,
        False,
        f"{len(alone)} task(s) graded by exit status alone ({named}); declare hidden_tests",
    )


def _errors_row(trials: Sequence[Record], scores: Scores) -> Row:
    """Errors that follow an arm are suspected to be caused by it: compare each arm's
    errors with the control's on the same (task, repeat) pairs."""
    item = "errors do not follow the arm"
    control = next((s.arm for s in scores.summaries if s.control), None)
    errored: dict[tuple[str, int, str], bool] = {
        (t.task_id, t.repeat, t.arm): t.outcome is Outcome.ERROR for t in trials
    }
    worst: list[str] = []
    counts: list[str] = []
    for summary in scores.summaries:
        if summary.control or control is None:
            continue
        b = c = 0
        for (task_id, repeat, arm), failed in errored.items():
            if arm != summary.arm:
                continue
            other = errored.get((task_id, repeat, control))
            if other is None or failed == other:
                continue
            b, c = (b + 1, c) if failed else (b, c + 1)
        if b or c:
            counts.append(f"{summary.arm} {b} vs {c}")
        if b > c and sign_test_greater(b, c) < ERRORS_ALPHA:
            worst.append(f"{summary.arm} (errors where the control had none: {b}, reverse: {c})")
    if worst:
        return Row(item, False, "clearly more errors than the control: " + "; ".join(worst))
    detail = "errors where only the arm / only the control erred: " + ", ".join(counts)
    return Row(item, True, detail if counts else "no arm errs where its control does not")


def verdict(rows: Sequence[Row]) -> str:
    return "publishable" if all(r.ok for r in rows) else "demo"


def withhold_headline(rows: Sequence[Row]) -> bool:
    return sum(not r.ok for r in rows) >= WITHHOLD_AT
