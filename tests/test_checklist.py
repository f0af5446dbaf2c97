"""The publishability checklist, row by row: each row holds on a publishable run and has
a test in which it fails (a check that cannot fail is a defect)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from runner.config.controls import Controls
from runner.config.loader import parse_controls
from runner.evidence.scoring import score
from runner.records import Outcome, TaskKind, Trial
from runner.report.checklist import Row, evaluate, verdict, withhold_headline
from tests.test_scoring import trial

SCORED = """\
protocol_id: p
channel: scored
suite: {file: t, sha256: %s}
arms:
  - {name: ctrl, control: true, agent: {type: scripted, action: noop}}
  - {name: cand, agent: {type: scripted, action: abstain}}
"""
LIVE = """\
protocol_id: p
channel: scored
suite: {file: t, sha256: %s}
runtime: {repeats: %d}
route: {base_url: "http://127.0.0.1:9/v1", model: m}
arms:
  - {name: ctrl, control: true, agent: {type: scripted, action: noop}}
  - {name: cand, agent: {type: openai, max_turns: %d}}
  - {name: cand2, agent: {type: openai}}
"""
ORDINARY = [f"t{i}" for i in range(20)]
NEGATIVE = [f"n{i}" for i in range(10)]
TASKS: list[dict[str, str]] = [
    *(
        {"id": t, "kind": "ordinary", "grading": "pytest", "hidden_in_fixture": ""}
        for t in ORDINARY
    ),
    *({"id": t, "kind": "negative", "grading": "none"} for t in NEGATIVE),
]


def _trials(retries: int = 0, arms: tuple[str, ...] = ("cand",), repeats: int = 1) -> list[Trial]:
    """A publishable pack: the control misses everything, candidates pass half, verified."""
    out = []
    for r in range(repeats):
        for i, task in enumerate(ORDINARY):
            out.append(trial(task, "ctrl", Outcome.MISS, repeat=r, verify_exit_code=1))
            for arm in arms:
                passed = i % 2 == 0
                out.append(
                    trial(
                        task,
                        arm,
                        Outcome.SUCCESS if passed else Outcome.MISS,
                        repeat=r,
                        retries_used=retries,
                        verify_exit_code=0 if passed else 1,
                        prompt_tokens=10,
                    )
                )
        for task in NEGATIVE:
            neg = TaskKind.NEGATIVE
            out.append(trial(task, "ctrl", Outcome.INVALID_COMPLETION, kind=neg, repeat=r))
            for arm in arms:
                out.append(trial(task, arm, Outcome.ABSTAIN_OK, kind=neg, repeat=r))
    return out


def _rows(
    trials: list[Trial],
    tasks: list[dict[str, str]] | None = None,
    controls: Controls | None = None,
    **kwargs: Any,
) -> list[Row]:
    controls = controls or parse_controls(SCORED % ("a" * 64), "c")
    tasks = TASKS if tasks is None else tasks
    arms = [leg.name for leg in controls.legs()]
    scores = score(trials, arms, "ctrl", [t["id"] for t in tasks])
    negative = sum(t["kind"] == "negative" for t in tasks)
    return evaluate(
        controls,
        kwargs.pop("suite", "a" * 64),
        scores,
        trials,
        negative_tasks=negative,
        edited=kwargs.pop("edited", False),
        tasks=tasks,
        **kwargs,
    )


def _rows_for(
    trials: list[Trial], tasks: list[dict[str, str]] | None = None, **kw: Any
) -> dict[str, tuple[bool, str]]:
    return {r.item: (r.ok, r.detail) for r in _rows(trials, tasks, **kw)}


def _failing(rows: list[Row]) -> set[str]:
    return {r.item for r in rows if not r.ok}


def test_all_rows_hold_publishable() -> None:
    rows = _rows(_trials())
    assert _failing(rows) == set(), [r for r in rows if not r.ok]
    assert verdict(rows) == "publishable" and not withhold_headline(rows)
    assert len(rows) == 17


def test_failing_rows_make_a_demo_and_two_withhold_the_headline() -> None:
    exploratory = parse_controls(
        SCORED.replace("channel: scored", "channel: exploratory") % ("b" * 64), "c"
    )
    rows = _rows(_trials(retries=1), controls=exploratory, edited=True)
    assert _failing(rows) == {
        "suite digest matches",
        "retries zero in the headline run",
        "channel scored",
        "replay reproduces the report",
    }
    assert verdict(rows) == "demo" and withhold_headline(rows)


def test_publication_rows_alone_never_withhold_the_headline() -> None:
    """An exploratory run on a small pack is a demo, stamped; its number is still shown."""
    exploratory = parse_controls(
        SCORED.replace("channel: scored", "channel: exploratory") % ("a" * 64), "c"
    )
    small = [t for t in _trials() if t.task_id in ("t0", "t1", "n0")]
    tasks = [t for t in TASKS if t["id"] in ("t0", "t1", "n0")]
    rows = _rows(small, tasks, controls=exploratory)
    assert _failing(rows) == {"channel scored", "pack size"}
    assert verdict(rows) == "demo" and not withhold_headline(rows)


def test_the_hidden_test_row_fails_on_the_recorded_facts() -> None:
    item = "pass is defined by a hidden test the agent could not read"
    forged = _trials()
    forged[1] = forged[1].model_copy(update={"verify_exit_code": None})  # a pass, unverified
    ok, detail = _rows_for(forged)[item]
    assert not ok and "without a verify run" in detail and "t0" in detail
    exposed = [dict(t) for t in TASKS]
    exposed[3]["hidden_in_fixture"] = "tests/test_hidden.py"
    ok, detail = _rows_for(_trials(), exposed)[item]
    assert not ok and "t3 (tests/test_hidden.py)" in detail
    unknown = [{k: v for k, v in t.items() if k != "hidden_in_fixture"} for t in TASKS]
    ok, detail = _rows_for(_trials(), unknown)[item]
    assert not ok and "not recorded" in detail
    ungraded = [dict(t) for t in TASKS]
    ungraded[0]["grading"] = "none"
    assert not _rows_for(_trials(), ungraded)[item][0]


def test_a_live_arm_without_token_usage_is_not_metered() -> None:
    controls = parse_controls(LIVE % ("a" * 64, 3, 30), "c")
    trials = _trials(arms=("cand", "cand2"), repeats=3)
    item = "tokens per pass and wall time present"
    assert _rows_for(trials, controls=controls)[item][0]
    unmetered = [
        t.model_copy(update={"prompt_tokens": 0}) if t.arm == "cand2" else t for t in trials
    ]
    ok, detail = _rows_for(unmetered, controls=controls)[item]
    assert not ok and "not metered" in detail and "cand2" in detail
    # A scripted arm reports no tokens and is not model-driven: not a failure.
    assert _rows_for(_trials(), controls=None)[item][0]


def test_unequal_turn_limits_fail_equal_budgets() -> None:
    item = "equal budgets"
    trials = _trials(arms=("cand", "cand2"), repeats=3)
    assert _rows_for(trials, controls=parse_controls(LIVE % ("a" * 64, 3, 30), "c"))[item][0]
    ok, detail = _rows_for(trials, controls=parse_controls(LIVE % ("a" * 64, 3, 5), "c"))[item]
    assert not ok and "max_turns (cand 5, cand2 30)" in detail, detail


@pytest.mark.parametrize(
    ("field", "value", "shown"),
    [
        ("temperature", 0.7, "temperature (cand 0.7, cand2 0.0)"),
        ("max_output_tokens", 512, "max_output_tokens (cand 512, cand2 2048)"),
        ("request_timeout_s", 30, "request_timeout_s (cand 30.0, cand2 300"),
        ("seed", 11, "seed (cand 11, cand2 None)"),
    ],
)
def test_every_budget_field_of_a_route_counts(field: str, value: object, shown: str) -> None:
    """An arm's own route differing from the shared one in any budget field fails the row,
    naming the field and each arm's value."""
    item = "equal budgets"
    trials = _trials(arms=("cand", "cand2"), repeats=3)
    own = f'route: {{base_url: "http://127.0.0.1:9/v1", model: m, {field}: {value}}}'
    text = (LIVE % ("a" * 64, 3, 30)).replace(
        "{type: openai, max_turns: 30}", f"{{type: openai, max_turns: 30, {own}}}"
    )
    ok, detail = _rows_for(trials, controls=parse_controls(text, "c"))[item]
    assert not ok and shown in detail, detail


def test_a_single_shot_live_arm_fails_variance() -> None:
    item = "variance measured"
    once = parse_controls(LIVE % ("a" * 64, 1, 30), "c")
    ok, detail = _rows_for(_trials(arms=("cand", "cand2")), controls=once)[item]
    assert not ok and "runtime.repeats is 1" in detail
    thrice = parse_controls(LIVE % ("a" * 64, 3, 30), "c")
    assert _rows_for(_trials(arms=("cand", "cand2"), repeats=3), controls=thrice)[item][0]


def test_a_route_mismatch_fails_the_route_lock() -> None:
    trials = _trials()
    trials[1] = trials[1].model_copy(update={"route_mismatch": True})
    ok, detail = _rows_for(trials)["route lock held"]
    assert not ok and "1 trial(s)" in detail


def test_a_missing_or_doubled_record_fails_run_complete() -> None:
    item = "run complete"
    assert _rows_for(_trials())[item] == (True, "60 planned jobs, one record each")
    ok, detail = _rows_for(_trials()[1:])[item]
    assert not ok and "1 without a record" in detail
    doubled = _trials()
    doubled.append(doubled[0])
    ok, detail = _rows_for(doubled)[item]
    assert not ok and "1 with more than one record" in detail
    stray = [*_trials(), trial("elsewhere", "cand", Outcome.MISS)]
    assert not _rows_for(stray)[item][0]


def test_a_report_that_does_not_derive_again_fails_replay() -> None:
    item = "replay reproduces the report"
    assert _rows_for(_trials())[item][0]
    ok, detail = _rows_for(_trials(), replay_ok=False)[item]
    assert not ok and "came out different" in detail


def test_a_task_graded_by_exit_status_alone_fails_its_row() -> None:
    tasks = [dict(t) for t in TASKS]
    tasks[1]["grading"] = "exit_status"
    ok, detail = _rows_for(_trials(), tasks)["every repository task is graded by declared tests"]
    assert not ok and "t1" in detail and "t0" not in detail
    assert _rows_for(_trials())["every repository task is graded by declared tests"][0]


ERRORS = "errors do not follow the arm"
RULE = "passes only with 5 or more such pairs and a one-sided exact sign test p ≥ 0.05"


def _errors(arm_errors: int, control_errors: int, n: int = 12) -> list[Trial]:
    """``n`` tasks run once: the control errs on the first ``control_errors``, the
    candidate on the last ``arm_errors`` (they overlap when the two add up to more than n)."""
    out = []
    for i in range(n):
        out.append(trial(f"t{i}", "ctrl", Outcome.ERROR if i < control_errors else Outcome.MISS))
        failed = n - 1 - i < arm_errors
        out.append(trial(f"t{i}", "cand", Outcome.ERROR if failed else Outcome.SUCCESS))
    return out


def _errors_row(arm_errors: int, control_errors: int, n: int) -> tuple[bool, str]:
    """The row as the report derives it, scored over exactly the tasks that were run."""
    return _rows_for(_errors(arm_errors, control_errors, n), TASKS[:n])[ERRORS]


def test_an_arm_erring_on_every_task_of_a_small_run_fails() -> None:
    """Issue 23: three tasks, the arm errs on all and the control on none. The sign test
    (p = 1/8) cannot reach 0.05 on three pairs, so its silence is not a "chance"."""
    ok, detail = _errors_row(3, 0, n=3)
    assert not ok
    assert detail.startswith(
        "cand: too few pairs to call it chance: 3 error(s) where the control had none, "
        "0 the other way; compared with the control on the same (task, repeat)"
    )
    assert RULE in detail and "p = " not in detail  # no test run, so no p-value given


def test_a_single_pair_with_the_arm_erring_fails() -> None:
    ok, detail = _errors_row(1, 0, n=1)
    assert not ok and "too few pairs to call it chance: 1 error(s)" in detail


def test_equal_errors_pass() -> None:
    ok, detail = _errors_row(2, 2, n=3)  # t2 only the arm, t0 only the control: 1 vs 1
    assert ok and detail.startswith(
        "(task, repeat) pairs where only the arm / only the control erred: "
        "cand 1 vs 1; an arm erring more often"
    )
    assert RULE in detail
    # Errors on the same pairs on both sides are the infrastructure's, not the arm's.
    assert _errors_row(3, 3, n=3) == (True, "no arm errs where its control does not")
    assert _errors_row(4, 4, n=8)[0]  # 4 vs 4 on disjoint tasks


def test_an_arm_erring_less_than_its_control_passes() -> None:
    ok, detail = _errors_row(0, 3, n=3)
    assert ok and "cand 0 vs 3;" in detail
    assert _errors_row(1, 5, n=12)[0]


def test_a_significant_excess_on_a_large_run_fails() -> None:
    ok, detail = _errors_row(9, 1, n=20)  # P[X >= 9], X ~ Bin(10, 1/2) = 11/1024
    assert not ok and detail.startswith(
        "cand: beyond chance: 9 error(s) where the control had none, 1 the other way, "
        "p = 0.0107 < 0.05; "
    )
    # Five pairs all one way is the smallest split the test can call (p = 1/32) ...
    ok, detail = _errors_row(5, 0, n=12)
    assert not ok and "beyond chance" in detail and "p = 0.0312 < 0.05" in detail
    # ... and one fewer is too few pairs to call chance.
    ok, detail = _errors_row(4, 0, n=12)
    assert not ok and "too few pairs to call it chance: 4 error(s)" in detail


def test_an_excess_within_chance_on_a_large_run_passes() -> None:
    ok, detail = _errors_row(6, 3, n=20)  # P[X >= 6], X ~ Bin(9, 1/2) = 130/512
    assert ok and "cand 6 vs 3 (p = 0.254);" in detail and RULE in detail
    # Five pairs, one of them the control's: the test could have called it, and did not.
    ok, detail = _errors_row(4, 1, n=12)
    assert ok and "cand 4 vs 1 (p = 0.188)" in detail


def test_errors_are_paired_by_task_and_repeat() -> None:
    """Three tasks run three times: 3 of 9 pairs with the arm alone erring, too few."""
    out = [
        trial(task, arm, Outcome.ERROR if arm == "cand" and r == 1 else Outcome.MISS, repeat=r)
        for task in ("t0", "t1", "t2")
        for arm in ("ctrl", "cand")
        for r in range(3)
    ]
    ok, detail = _rows_for(out, TASKS[:3])[ERRORS]
    assert not ok and "3 error(s) where the control had none, 0 the other way" in detail


def test_an_error_the_control_has_no_pair_for_fails() -> None:
    """An arm error on a (task, repeat) the control never ran cannot be compared, so it
    cannot be called chance: it fails the row (and the run is incomplete)."""
    out = [*_errors(0, 0, n=12), trial("t0", "cand", Outcome.ERROR, repeat=1)]
    rows = _rows_for(out, TASKS[:12])
    ok, detail = rows[ERRORS]
    assert not ok and detail.startswith(
        "cand: 1 error(s) on a (task, repeat) the control has no record of, not comparable; "
    )
    assert not rows["run complete"][0]
    # A control record on that pair, erring or not, makes it an ordinary pair again.
    paired = [*out, trial("t0", "ctrl", Outcome.ERROR, repeat=1)]
    assert _rows_for(paired, TASKS[:12])[ERRORS] == (
        True,
        "no arm errs where its control does not",
    )


def test_the_report_of_a_small_hostile_run_says_the_errors_follow_the_arm(
    tmp_path: Path,
) -> None:
    """The issue's run, end to end: a run directory of three tasks in which the arm errs
    on each and the control on none; report.md and report.html fail the row and say why."""
    from runner.report.assemble import build_report
    from runner.store.rundir import RunDir
    from tests.test_report_input import make_run

    hostile = {f"t{i}": (Outcome.MISS, Outcome.ERROR) for i in range(3)}
    built = build_report(RunDir(make_run(tmp_path, outcomes=hostile)))
    assert not next(r for r in built.rows if r.item == ERRORS).ok
    said = "too few pairs to call it chance: 3 error(s) where the control had none, 0 the other way"
    assert f"| **no** | {ERRORS} | cand: {said};" in built.markdown
    verdict_line = next(line for line in built.markdown.splitlines() if "Verdict" in line)
    assert ERRORS in verdict_line
    assert said in built.html


def test_an_arm_without_ordinary_trials_fails_n_and_intervals() -> None:
    item = "n and 95% intervals present"
    assert _rows_for(_trials())[item][0]
    only_negatives = [t for t in _trials() if t.arm != "cand" or t.task_kind is TaskKind.NEGATIVE]
    ok, detail = _rows_for(only_negatives)[item]
    assert not ok and "cand" in detail


def test_a_run_without_negative_tasks_fails_the_refusal_slice() -> None:
    item = "refusal slice present"
    ordinary_only = [t for t in _trials() if t.task_kind is TaskKind.ORDINARY]
    tasks = [t for t in TASKS if t["kind"] == "ordinary"]
    ok, detail = _rows_for(ordinary_only, tasks)[item]
    assert not ok and "no negative-control task" in detail


def test_a_control_without_records_fails_its_row() -> None:
    item = "control arm present and run under the same limits"
    assert _rows_for(_trials())[item][0]
    no_control = [t for t in _trials() if t.arm != "ctrl"]
    assert not _rows_for(no_control)[item][0]


def test_an_arm_run_on_another_image_than_the_control_fails_same_limits() -> None:
    """Read from the records: each arm ran a task on the image its control ran it on."""
    item = "control arm present and run under the same limits"
    image = "sha256:" + "a" * 64
    trials = [t.model_copy(update={"image_digest": image}) for t in _trials()]
    ok, detail = _rows_for(trials)[item]
    assert ok and "every arm ran each task on the control's image" in detail, detail
    other = "sha256:" + "b" * 64
    trials[1] = trials[1].model_copy(update={"image_digest": other})  # cand on t0
    ok, detail = _rows_for(trials)[item]
    assert not ok and f"cand on t0: image {'b' * 12}, the control's {'a' * 12}" in detail
    no_control = [t for t in trials if t.arm != "ctrl"]
    ok, detail = _rows_for(no_control)[item]
    assert not ok and detail == "the control arm has no record"
