"""The publishability checklist, row by row."""

from __future__ import annotations

from runner.config.loader import parse_controls
from runner.models import Outcome, TaskKind
from runner.report.checklist import evaluate, verdict, withhold_headline
from runner.scoring import score
from tests.test_scoring import trial

SCORED = """\
protocol_id: p
channel: scored
suite: {file: t, sha256: %s}
arms:
  - {name: ctrl, control: true, agent: {type: scripted, action: noop}}
  - {name: cand, agent: {type: scripted, action: abstain}}
"""


def _trials(retries: int = 0) -> list:  # type: ignore[type-arg]
    out = []
    for i in range(3):
        out.append(trial(f"t{i}", "ctrl", Outcome.MISS))
        out.append(
            trial(f"t{i}", "cand", Outcome.SUCCESS if i else Outcome.MISS, retries_used=retries)
        )
    out.append(trial("neg", "ctrl", Outcome.INVALID_COMPLETION, kind=TaskKind.NEGATIVE))
    out.append(trial("neg", "cand", Outcome.ABSTAIN_OK, kind=TaskKind.NEGATIVE))
    return out


def test_all_rows_hold_publishable() -> None:
    controls = parse_controls(SCORED % ("a" * 64), "c")
    trials = _trials()
    scores = score(trials, ["ctrl", "cand"], "ctrl", ["t0", "t1", "t2", "neg"])
    rows = evaluate(controls, "a" * 64, scores, trials, negative_tasks=1, edited=False)
    assert [r.item for r in rows if not r.ok] == []
    assert verdict(rows) == "publishable" and not withhold_headline(rows)


def test_failing_rows_make_a_demo_and_two_withhold_the_headline() -> None:
    controls = parse_controls(
        SCORED.replace("channel: scored", "channel: exploratory") % ("b" * 64), "c"
    )
    trials = _trials(retries=1)
    scores = score(trials, ["ctrl", "cand"], "ctrl", ["t0", "t1", "t2", "neg"])
    rows = evaluate(controls, "a" * 64, scores, trials, negative_tasks=0, edited=True)
    failing = {r.item for r in rows if not r.ok}
    assert failing == {
        "suite digest matches",
        "retries zero in the headline run",
        "refusal slice present",
        "channel scored",
        "replay reproduces the report",
    }
    assert verdict(rows) == "demo" and withhold_headline(rows)
    one = evaluate(
        parse_controls(SCORED.replace("channel: scored", "channel: exploratory") % ("a" * 64), "c"),
        "a" * 64,
        score(_trials(), ["ctrl", "cand"], "ctrl", ["t0", "t1", "t2", "neg"]),
        _trials(),
        negative_tasks=1,
        edited=False,
    )
    assert [r.item for r in one if not r.ok] == ["channel scored"] and not withhold_headline(one)


def _rows_for(trials: list, tasks: list | None = None) -> dict[str, tuple[bool, str]]:  # type: ignore[type-arg]
    controls = parse_controls(SCORED % ("a" * 64), "c")
    ids = sorted({t.task_id for t in trials})
    scores = score(trials, ["ctrl", "cand"], "ctrl", ids)
    rows = evaluate(
        controls, "a" * 64, scores, trials, negative_tasks=1, edited=False, tasks=tasks or ()
    )
    return {r.item: (r.ok, r.detail) for r in rows}


def test_a_task_graded_by_exit_status_alone_fails_its_row() -> None:
    tasks = [
        {"id": "t0", "kind": "ordinary", "grading": "pytest"},
        {"id": "t1", "kind": "ordinary", "grading": "exit_status"},
        {"id": "neg", "kind": "negative", "grading": "none"},
        {"id": "a", "kind": "ordinary", "grading": "metrics"},
    ]
    ok, detail = _rows_for(_trials(), tasks)["every repository task is graded by declared tests"]
    assert not ok and "t1" in detail and "t0" not in detail
    tasks[1]["grading"] = "pytest"
    assert _rows_for(_trials(), tasks)["every repository task is graded by declared tests"][0]


def _errors(arm_errors: int, control_errors: int, n: int = 12) -> list:  # type: ignore[type-arg]
    out = []
    for i in range(n):
        out.append(trial(f"t{i}", "ctrl", Outcome.ERROR if i < control_errors else Outcome.MISS))
        failed = n - 1 - i < arm_errors
        out.append(trial(f"t{i}", "cand", Outcome.ERROR if failed else Outcome.SUCCESS))
    return out


def test_errors_that_follow_the_arm_fail_their_row() -> None:
    item = "errors do not follow the arm"
    ok, detail = _rows_for(_errors(5, 0))[item]
    assert not ok and "cand" in detail  # 5 against 0: p = 1/32 < 0.05
    assert _rows_for(_errors(3, 0))[item][0]  # 3 against 0: p = 1/8, not yet clear
    assert _rows_for(_errors(4, 4))[item][0]  # errors on both sides: infrastructure
    assert _rows_for(_errors(0, 5))[item][0]  # the control erring more is not the arm's doing
