"""``deltarun compare``: an arm of RUN_B against an arm of RUN_A, paired per task; no Docker.

Run directories are copies of the committed ``tests/fixtures/run-quickstart`` (arms
frozen-stub-v1 (control), candidate, gold; 12 ordinary and 4 negative tasks). A second
run with other outcomes is made by rewriting records of the copy's ledger as valid
``Trial`` records: scoring never checks the ledger digest (only ``replay`` does, against
``report.json``), so the copy is read like any run. Changing the suite digest or the
channel goes through ``controls.yaml`` and the protocol hash, so the copy stays a
consistent run directory (see ``_reseal``) and is refused for that reason only.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from runner.config.loader import parse_controls, protocol_hash
from runner.errors import DigestMismatch, UserError
from runner.evidence.scoring import NEWCOMBE
from runner.records import Outcome, Trial
from runner.report.assemble import compare_runs
from runner.report.compare import RunSide, arm_pairs, compare_arms, labels
from runner.store.rundir import RunDir
from tests.conftest import run_cli
from tests.test_cli_errors import assert_one_line

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "run-quickstart"
SUITE = "74e7c1bd1371131655cf425cd641010ea2274c4956669b58c0ed312d9fd41568"
ARMS = ("frozen-stub-v1", "candidate", "gold")
# The fixture's candidate misses these two ordinary tasks (one a false abstention) and
# passes wrap-long-words; B flips all three: helped 2, hurt 1, same 9 of 12.
HELPED = ("money-half-up", "retry-backoff-cap")
HURT = ("wrap-long-words",)


def _copy(tmp_path: Path, name: str) -> Path:
    run = tmp_path / name
    shutil.copytree(FIXTURE, run)
    return run


def _edit_ledger(run: Path, change: Callable[[Trial], Trial | None]) -> None:
    """Rewrite every record through ``change`` (None drops it); each stays a valid Trial."""
    ledger = run / "trials.jsonl"
    kept = []
    for line in ledger.read_text(encoding="utf-8").splitlines():
        trial = change(Trial.model_validate_json(line))
        if trial is not None:
            kept.append(Trial.model_validate_json(trial.model_dump_json()).model_dump_json())
    ledger.write_text("".join(f"{line}\n" for line in kept), encoding="utf-8")


def _flip(trial: Trial) -> Trial:
    """The candidate of run B: HELPED now pass, HURT now misses."""
    if trial.arm != "candidate":
        return trial
    if trial.task_id in HELPED:
        update = {"outcome": Outcome.SUCCESS, "passed": True, "abstained": False}
        return trial.model_copy(update={**update, "verify_exit_code": 0})
    if trial.task_id in HURT:
        update = {"outcome": Outcome.MISS, "passed": False, "verify_exit_code": 1}
        return trial.model_copy(update=update)
    return trial


def _reseal(run: Path, old: str, new: str) -> None:
    """Edit ``controls.yaml`` and carry the edit through: run.json (the edited field and the
    protocol hash) and every record's protocol hash, as a run of those controls has."""
    controls_path = run / "controls.yaml"
    text = controls_path.read_text(encoding="utf-8")
    assert old in text
    controls_path.write_text(text.replace(old, new), encoding="utf-8")
    controls = parse_controls(controls_path.read_text(encoding="utf-8"), str(controls_path))
    meta = json.loads((run / "run.json").read_text(encoding="utf-8"))
    meta["protocol_sha256"] = protocol_hash(controls, meta["agent_dir_digests"])
    meta["channel"] = controls.channel
    meta["suite_sha256"] = controls.suite.sha256
    (run / "run.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
    protocol = meta["protocol_sha256"]
    _edit_ledger(run, lambda t: t.model_copy(update={"protocol_sha256": protocol}))


def _records(run: Path) -> tuple[list[str], list[Trial]]:
    meta = RunDir(run).meta()
    return [t["id"] for t in meta.tasks], RunDir(run).trials()


def _blocks(stdout: str) -> list[str]:
    """The headline line of each compared pair of arms."""
    return [line for line in stdout.splitlines() if " pass rate (" in line]


# --- the pure part -------------------------------------------------------------------------


def test_same_arm_of_identical_runs_is_zero_with_an_interval_of_width() -> None:
    task_ids, records = _records(FIXTURE)
    c = compare_arms("candidate", "candidate", records, records, task_ids, "a", "b")
    delta, refusal = c.scores.deltas[0], c.scores.refusal[0]
    assert (delta.arm, delta.control) == ("candidate (b)", "candidate (a)")
    assert delta.mean == 0 and (delta.helped, delta.hurt, delta.same) == (0, 0, 12)
    assert delta.ci95 is not None and delta.ci95[0] < 0 < delta.ci95[1]
    assert delta.ci_method == NEWCOMBE and delta.inconclusive == 0
    assert refusal.mean == 0 and refusal.n_tasks == 4 and refusal.ci_method == NEWCOMBE
    assert (c.paired, c.only_a, c.only_b) == (16, (), ())
    # Equal names on both sides stay apart: the control summary is RUN_A's.
    assert [(s.arm, s.control) for s in c.scores.summaries] == [
        ("candidate (a)", True),
        ("candidate (b)", False),
    ]


def test_flipped_tasks_give_the_expected_counts_and_mean(tmp_path: Path) -> None:
    run_b = _copy(tmp_path, "b")
    _edit_ledger(run_b, _flip)
    task_ids, records_a = _records(FIXTURE)
    _, records_b = _records(run_b)
    c = compare_arms("candidate", "candidate", records_a, records_b, task_ids, "a", "b")
    delta = c.scores.deltas[0]
    assert (delta.helped, delta.hurt, delta.same, delta.n_tasks) == (2, 1, 9, 12)
    assert delta.mean == pytest.approx(1 / 12)
    assert delta.ci_method == NEWCOMBE and delta.mcnemar_p == 1.0
    helped = {case.task_id for case in delta.cases if case.delta and case.delta > 0}
    hurt = {case.task_id for case in delta.cases if case.delta and case.delta < 0}
    assert (helped, hurt) == (set(HELPED), set(HURT))
    assert c.scores.refusal[0].mean == 0  # the negative tasks were not touched


def test_arm_pairs_checks_and_defaults() -> None:
    a = RunSide("ra", "r1", SUITE, "scored", ARMS)
    b = RunSide("rb", "r2", SUITE, "scored", ("gold", "candidate", "new"))
    assert arm_pairs(a, b, None, None) == [("candidate", "candidate"), ("gold", "gold")]
    assert arm_pairs(a, b, "candidate", "new") == [("candidate", "new")]
    with pytest.raises(UserError, match=r"rb: no arm 'frozen-stub-v1' .*gold, candidate, new"):
        arm_pairs(a, b, "frozen-stub-v1", None)
    with pytest.raises(DigestMismatch, match="ra and rb: suite digests differ"):
        arm_pairs(a, RunSide("rb", "r2", "0" * 64, "scored", ARMS), None, None)
    with pytest.raises(UserError, match="ra is scored and rb is exploratory"):
        arm_pairs(a, RunSide("rb", "r2", SUITE, "exploratory", ARMS), None, None)
    assert labels("x/run-a", "y/run-b") == ("run-a", "run-b")
    assert labels("x/run", "y/run") == ("x/run", "y/run")
    assert labels("run", "run") == ("run, A", "run, B")


# --- the command ---------------------------------------------------------------------------


def test_cli_same_arms_of_two_identical_runs(tmp_path: Path) -> None:
    run_a, run_b = _copy(tmp_path, "a"), _copy(tmp_path, "b")
    result = run_cli("compare", str(run_a), str(run_b))
    assert result.returncode == 0, result.stderr
    blocks = _blocks(result.stdout)
    expected = [f"{arm} (b) vs {arm} (a)" for arm in ARMS]
    assert [line.split(":")[0] for line in blocks] == expected, result.stdout
    for line in blocks:
        assert "+0.0 pp pass rate (95% CI -" in line and "Newcombe paired score" in line
        assert "helped 0, hurt 0, same 12, inconclusive 0" in line
    assert "candidate (b) vs candidate (a): +0.0 pp pass rate (95% CI -14.8 pp to +14.8 pp" in (
        result.stdout
    )
    assert result.stdout.count("  refusal slice: +0.0 pp abstention accuracy") == 3
    assert result.stdout.count("  cost: ") == 3
    assert result.stdout.count("  tasks: 16 paired across the runs; only in a: 0;") == 3
    assert "exploratory — not for publication" in result.stdout.splitlines()[0]


def test_cli_flipped_candidate(tmp_path: Path) -> None:
    run_a, run_b = _copy(tmp_path, "a"), _copy(tmp_path, "b")
    _edit_ledger(run_b, _flip)
    result = run_cli("compare", str(run_a), str(run_b), "--arm", "candidate")
    assert result.returncode == 0, result.stderr
    [line] = _blocks(result.stdout)
    assert line.startswith("candidate (b) vs candidate (a): +8.3 pp pass rate (95% CI "), line
    assert "n=12 tasks" in line and "helped 2, hurt 1, same 9, inconclusive 0" in line


def test_cli_gold_of_b_against_candidate_of_a(tmp_path: Path) -> None:
    run_a, run_b = _copy(tmp_path, "a"), _copy(tmp_path, "b")
    result = run_cli("compare", str(run_a), str(run_b), "--arm", "candidate", "--arm-b", "gold")
    assert result.returncode == 0, result.stderr
    [line] = _blocks(result.stdout)
    assert line.startswith("gold (b) vs candidate (a): +41.7 pp pass rate (95% CI +8.7 pp"), line
    assert "helped 5, hurt 0, same 7, inconclusive 0" in line
    assert "  refusal slice: +50.0 pp abstention accuracy" in result.stdout


def test_cli_task_in_one_run_only_is_inconclusive(tmp_path: Path) -> None:
    run_a, run_b = _copy(tmp_path, "a"), _copy(tmp_path, "b")
    _edit_ledger(run_b, lambda t: None if t.task_id == "lru-get-recency" else t)
    _edit_ledger(run_a, lambda t: None if t.task_id == "neg-units-vendor-table" else t)
    result = run_cli("compare", str(run_a), str(run_b), "--arm", "candidate")
    assert result.returncode == 0, result.stderr
    [line] = _blocks(result.stdout)
    assert "n=11 tasks" in line and "inconclusive 1" in line, line
    assert "n=3 negative tasks" in result.stdout
    assert (
        "  tasks: 14 paired across the runs; only in a: 1 (lru-get-recency); "
        "only in b: 1 (neg-units-vendor-table) (counted inconclusive, not dropped)"
    ) in result.stdout


def test_cli_refuses_another_suite_with_exit_3(tmp_path: Path) -> None:
    run_a, run_b = _copy(tmp_path, "a"), _copy(tmp_path, "b")
    other = "ab" * 32
    _reseal(run_b, SUITE, other)
    result = run_cli("compare", str(run_a), str(run_b))
    assert_one_line(result, 3, str(run_a), str(run_b), SUITE, other, "suite digests differ")
    assert result.stdout == ""


def test_cli_refuses_a_scored_and_an_exploratory_run(tmp_path: Path) -> None:
    run_a, run_b = _copy(tmp_path, "a"), _copy(tmp_path, "b")
    _reseal(run_b, "channel: exploratory", "channel: scored")
    # The resealed copy is a consistent run: it compares with itself ...
    assert any(" pass rate (" in line for line in compare_runs(run_b, run_b, None, None))
    # ... but never with an exploratory one.
    result = run_cli("compare", str(run_a), str(run_b))
    assert_one_line(result, 1, f"{run_a} is exploratory and {run_b} is scored", "channel")


def test_cli_missing_arm_names_the_run_and_its_arms(tmp_path: Path) -> None:
    run_a, run_b = _copy(tmp_path, "a"), _copy(tmp_path, "b")
    result = run_cli("compare", str(run_a), str(run_b), "--arm", "candidate", "--arm-b", "nope")
    assert_one_line(result, 1, f"{run_b}: no arm 'nope'", "frozen-stub-v1, candidate, gold")
    result = run_cli("compare", str(run_a), str(run_b), "--arm", "nope")
    assert_one_line(result, 1, f"{run_a}: no arm 'nope'", "frozen-stub-v1, candidate, gold")
    assert run_cli("compare", str(run_a), str(run_b), "--arm-b", "gold").returncode == 2


def test_cli_not_a_run_dir_is_the_report_error(tmp_path: Path) -> None:
    run_a = _copy(tmp_path, "a")
    empty = tmp_path / "empty"
    empty.mkdir()
    compared = run_cli("compare", str(run_a), str(empty))
    reported = run_cli("report", str(empty))
    assert_one_line(compared, 1, str(empty), "not a run directory")
    assert compared.stderr == reported.stderr
