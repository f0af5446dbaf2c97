"""The gate's cost criteria on priced runs (no Docker: run directories written through the
run directory's own API, as ``tests/fixtures/make_run_features.py`` writes one, then
``deltarun report`` and ``deltarun gate`` through the real command): cost per pass and its
ratio to the control's read their intervals over tasks (``runner.evidence.cost_bounds``),
and ``--baseline RUN_A`` prices the baseline's arm from RUN_A's own records."""

from __future__ import annotations

import json
import random
from pathlib import Path

from runner.config.loader import parse_controls, protocol_hash
from runner.records import Outcome, TaskKind, Trial
from runner.store.rundir import RunDir, RunMeta, TaskText
from tests.conftest import run_cli

CONTROLS = """\
protocol_id: priced
channel: exploratory
suite: {file: suite/tasks.jsonl, sha256: "6666666666666666666666666666666666666666666666666666666666666666"}
runtime: {repeats: 3, max_retries: 0, seed: 7}
route: {base_url: "http://127.0.0.1:8080/v1", model: m}
prices: {m: {input: 1.0, output: 1.0}}
arms:
  - {name: ctrl, control: true, agent: {type: openai}}
  - {name: cand, agent: {type: openai}}
"""
TASKS = [
    {"id": f"t{i:02d}", "kind": "ordinary", "grading": "pytest", "hidden_in_fixture": ""}
    for i in range(30)
] + [{"id": f"n{i}", "kind": "negative", "grading": "none"} for i in range(10)]


def priced_run(root: Path, name: str, spend: dict[str, float], seed: int) -> Path:
    """A finished run of 30 tasks (and 10 negative ones, abstained on) x 3 repeats: each arm
    passes about 80% of its trials and spends about ``spend[arm]`` dollars a trial (a hard
    task costs more)."""
    controls = parse_controls(CONTROLS, "controls.yaml")
    protocol = protocol_hash(controls, {})
    run = RunDir(root / name)
    run.create(
        RunMeta(
            run_id=name,
            protocol_id="priced",
            protocol_sha256=protocol,
            suite_sha256="6" * 64,
            channel="exploratory",
            control_arm="ctrl",
            arms=["ctrl", "cand"],
            tasks=TASKS,
            image_digests={"deltarun/sandbox-python:bookworm": "sha256:" + "1" * 64},
            agent_dir_digests={},
            created_at="2026-12-05T00:00:00+00:00",
            deltarun_version="0.1.0",
            python_version="3.11.7",
        ),
        CONTROLS.encode(),
        [TaskText(t["id"], "Fix it.", (t["kind"],)) for t in TASKS],
    )
    rng = random.Random(seed)
    for i, task in enumerate(TASKS):
        hard = i % 5 == 0
        negative = task["kind"] == "negative"
        for arm in ("ctrl", "cand"):
            for repeat in range(3):
                passed = not negative and rng.random() < (0.4 if hard else 0.9)
                outcome = (
                    Outcome.ABSTAIN_OK
                    if negative
                    else (Outcome.SUCCESS if passed else Outcome.MISS)
                )
                usd = round(spend[arm] * (2.0 if hard else 1.0) * rng.uniform(0.8, 1.2), 6)
                run.append(
                    Trial(
                        run_id=name,
                        job_id=f"{task['id']}-{arm}-{repeat}",
                        protocol_sha256=protocol,
                        task_id=task["id"],
                        arm=arm,
                        repeat=repeat,
                        task_kind=TaskKind(task["kind"]),
                        outcome=outcome,
                        passed=passed,
                        timeout=False,
                        tool_violation=False,
                        abstained=negative,
                        prompt_tokens=int(usd * 1e6 / 2),
                        completion_tokens=int(usd * 1e6 / 2),
                        cost_usd=usd,
                        wall_s=1.0,
                        tool_calls=3,
                        stop_reason="abstain" if negative else "submit",
                        grading=task["grading"],
                        verify_exit_code=None if negative else int(not passed),
                        worker="w",
                        started_at="2026-12-05T00:00:00+00:00",
                        finished_at="2026-12-05T00:00:01+00:00",
                    )
                )
    reported = run_cli("report", str(run.path))
    assert reported.returncode == 0, reported.stderr
    return run.path


def criterion(run: Path, name: str, arm: str) -> dict[str, object]:
    decision = json.loads((run / "decision.json").read_text())
    return next(c for c in decision["criteria"] if c["name"] == name and c["arm"] == arm)


def test_cost_per_pass_and_its_ratio_read_their_intervals(tmp_path: Path) -> None:
    run = priced_run(tmp_path, "run-b", {"ctrl": 0.10, "cand": 0.20}, seed=1)
    dear = run_cli("gate", str(run), "--cost-ratio-max", "1.5", "--arm", "cand")
    assert dear.returncode == 1, (dear.stdout, dear.stderr)  # twice the control's
    found = criterion(run, "cost_ratio_max", "cand")
    assert found["verdict"] == "fail" and 1.5 < found["ci95"][0] < found["estimate"]
    loose = run_cli("gate", str(run), "--cost-ratio-max", "3", "--arm", "cand")
    assert loose.returncode == 0, (loose.stdout, loose.stderr)
    found = criterion(run, "cost_ratio_max", "cand")
    assert found["verdict"] == "pass" and found["ci95"][1] <= 3 and found["n"] == 40  # every task
    # about $0.29 a pass: $1 passes, $0.05 fails, $0.29 is within the interval: undecided
    for limit, code, verdict in (("1", 0, "pass"), ("0.05", 1, "fail")):
        result = run_cli("gate", str(run), "--cost-per-pass-max", limit, "--arm", "cand")
        assert result.returncode == code, (result.stdout, result.stderr)
        assert criterion(run, "cost_per_pass_max", "cand")["verdict"] == verdict
    middle = criterion(run, "cost_per_pass_max", "cand")["estimate"]
    assert isinstance(middle, float)
    straddled = run_cli("gate", str(run), "--cost-per-pass-max", str(middle), "--arm", "cand")
    assert straddled.returncode == 5, (straddled.stdout, straddled.stderr)
    assert "undecided  cost_per_pass_max cand" in straddled.stdout


def test_the_cost_ratio_against_a_baseline_prices_the_baseline_arm(tmp_path: Path) -> None:
    # main's candidate spends $0.10 a trial, the pull request's $0.30: three times as dear
    run_a = priced_run(tmp_path, "run-a", {"ctrl": 0.10, "cand": 0.10}, seed=2)
    run_b = priced_run(tmp_path, "run-b", {"ctrl": 0.10, "cand": 0.30}, seed=3)
    result = run_cli("gate", str(run_a), str(run_b), "--cost-ratio-max", "1.5", "--arm", "cand")
    assert result.returncode == 1, (result.stdout, result.stderr)
    found = criterion(run_b, "cost_ratio_max", "cand")
    assert found["verdict"] == "fail" and found["ci95"][0] > 1.5
    assert 2.0 < found["estimate"] < 4.5
    same = run_cli("gate", str(run_a), str(run_a), "--cost-ratio-max", "1.5", "--arm", "cand")
    assert same.returncode == 0, (same.stdout, same.stderr)  # against itself: exactly 1
    assert criterion(run_a, "cost_ratio_max", "cand")["estimate"] == 1.0
